/* x in int8 blocks and exact integer block sums: xq8.h says the arithmetic, and why each step
 * is exact. */
#include "runtime/gguf/xq8.h"

#include <math.h>
#include <string.h>

#include "runtime/base/fp16.h"

const uint32_t xq8_recip[8] = {0x3de38e39, 0x3dcccccd, 0x3dba2e8c, 0x3daaaaab,
                               0x3d9d89d9, 0x3d924925, 0x3d888889, 0x3d800000};

bool xq8_type(enum qtype t) { return t == QTYPE_Q8_0 || t == QTYPE_Q4_K || t == QTYPE_Q6_K; }

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void quantize_block(const float *x, xq8_block *b) {
    uint32_t amax = 0; /* the largest magnitude's bits: an integer max, exact for NaN and Inf too */
    for (int i = 0; i < XQ8_BLOCK; i++) {
        uint32_t a = bits_of(x[i]) & 0x7fffffffu;
        amax = a > amax ? a : amax;
    }
    uint32_t e = amax >> 23;
    memset(b->q, 0, sizeof b->q);
    b->sum = b->mult = 0;
    if (e == 255) { /* an infinity or a NaN */
        b->d = float_of(0x7fc00000u);
        return;
    }
    if (e < 11) { /* below 2^-116: zeros */
        b->d = 0.0f;
        return;
    }
    uint32_t j = (amax >> 20) & 7;                                 /* the top 3 bits of the fraction */
    float c = float_of(xq8_recip[j]) * float_of((264u - e) << 23); /* / (9 + j) * 2^(10 - E), E = e - 127 */
    b->d = float_of((e - 10u) << 23);                              /* 2^(E - 10) */
    b->mult = (int32_t)(9 + j);
    for (int i = 0; i < XQ8_BLOCK; i++) {
        float r = rintf(x[i] * c); /* one rounded product, then half to even */
        int q = r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r;
        b->q[i] = (int8_t)q;
        b->sum += q;
    }
}

void xq8_quantize(const float *x, int64_t n, xq8_block *out) {
    for (int64_t i = 0; i < n / XQ8_BLOCK; i++) quantize_block(x + i * XQ8_BLOCK, &out[i]);
}

static inline int32_t dot16(const int8_t *w, const int8_t *q) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) s += (int32_t)w[i] * q[i];
    return s;
}

/* d_x * v_c of chunk c, and for Q4_K d_x * u_c in *min (xq8.h): both exact products */
static float chunk_q8_0(const block_q8_0 *w, const xq8_block *x) {
    int32_t isum = dot16(w->qs, x->q) + dot16(w->qs + 16, x->q + 16);
    return x->d * (fp16_to_f32(w->d) * (float)(x->mult * isum));
}

static float chunk_q4_K(const block_q4_K *w, int j, const xq8_block *x, float *min) {
    int sc, m;
    k_scale_min_get(w->scales, j, &sc, &m);
    const uint8_t *qs = w->qs + 32 * (j / 2);
    int shift = 4 * (j & 1);
    int32_t isum = 0;
    for (int l = 0; l < 32; l++) isum += ((qs[l] >> shift) & 0xF) * x->q[l];
    *min = x->d * (fp16_to_f32(w->dmin) * (float)(x->mult * m * x->sum));
    return x->d * (fp16_to_f32(w->d) * (float)(x->mult * sc * isum));
}

/* Q6_K's chunk c: half h = c / 4, quarter k = c % 4 of quant.c's layout */
static float chunk_q6_K(const block_q6_K *w, int c, const xq8_block *x) {
    int h = c / 4, k = c % 4;
    int8_t lv[32];
    for (int l = 0; l < 32; l++) {
        int lo = (w->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
        int hb = (w->qh[32 * h + l] >> (2 * k)) & 3;
        lv[l] = (int8_t)((lo | (hb << 4)) - 32);
    }
    int32_t s = (int32_t)w->scales[8 * h + 2 * k] * dot16(lv, x->q) +
        (int32_t)w->scales[8 * h + 2 * k + 1] * dot16(lv + 16, x->q + 16);
    return x->d * (fp16_to_f32(w->d) * (float)(x->mult * s));
}

float xq8_dot_row(enum qtype t, const void *row, const xq8_block *x, int64_t n) {
    float y = 0.0f;
    for (int64_t c = 0; c < n / XQ8_BLOCK; c++) {
        float min = 0.0f;
        float v = t == QTYPE_Q8_0 ? chunk_q8_0((const block_q8_0 *)row + c, &x[c])
            : t == QTYPE_Q4_K     ? chunk_q4_K((const block_q4_K *)row + c / 8, (int)(c % 8), &x[c], &min)
                                  : chunk_q6_K((const block_q6_K *)row + c / 8, (int)(c % 8), &x[c]);
        y = y + v;
        if (t == QTYPE_Q4_K) y = y - min;
    }
    return y;
}
