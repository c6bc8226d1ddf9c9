/* Row quantization for the types cinder computes with (quant_quantize_row, declared in
 * quant.h): what `cinder mkmodel` and the tests' random weights are made with, never run on
 * data read from a file.
 *
 * The quantizers are cinder's own. They need not match ggml's bytes, only its accuracy: each
 * fits a scale (and for Q4_K/Q5_K a min) per sub-block by least squares over a few candidate
 * level assignments, then quantizes those sub-block parameters to the super-block's integer
 * grid and re-picks each sub-block's integer scale from its neighbours by measured error.
 * docs/QUANTS.md lists the layouts in words and the round-trip errors we measure. */
#include "runtime/gguf/quant.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "runtime/base/fp16.h"

/* ---- shared helpers ---- */

/* The nearest integer level in [lo, hi] to v (ties to even), branch-free so the quantizers'
 * inner loops vectorize. Adding 1.5 * 2^23 leaves no fraction bits in the sum's mantissa, so
 * the addition's own rounding does the work and, for |v| < 2^22, the integer is read back
 * from the low mantissa bits. The sum's exponent tells when v was outside that range (or
 * infinite, or NaN): then the level is lo (v negative) or hi (v positive, +inf, NaN). */
static inline int level(float v, int lo, int hi) {
    int32_t b = (int32_t)fp32_to_bits(v + 12582912.0f);
    int l = (b & 0x7fffff) - 0x400000;
    l = b < (150 << 23) ? lo : l;  /* sum below 2^23, or negative: v < -2^22 */
    l = b >= (151 << 23) ? hi : l; /* sum at or above 2^24: v >= 2^22, inf, NaN */
    l = l < lo ? lo : l;
    l = l > hi ? hi : l;
    return l;
}

/* A scale (or a signed min) stored as fp16: rounded to nearest, kept finite, sign kept. */
static inline uint16_t fp16_scale(float v) {
    uint16_t h = f32_to_fp16(v);
    if ((h & 0x7fff) >= 0x7c00) h = (uint16_t)((h & 0x8000) | 0x7bff); /* 65504 */
    return h;
}

/* The 12 bytes of eight 6-bit scales and mins (quant.h's k_scale_min_get reads them back). */
static void k_scale_min_pack(uint8_t s[K_SCALE_SIZE], const uint8_t sc[8], const uint8_t m[8]) {
    memset(s, 0, K_SCALE_SIZE);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* ---- quantization: Q8_0 ---- */

/* d = amax / 127 rounded to fp16; each weight rounds to the nearest multiple of the stored d
 * (using the rounded d, not the exact one, is what the dequantizer will multiply by). */
static void quant_q8_0(const float *x, block_q8_0 *b) {
    float amax = 0;
    for (int i = 0; i < QK8_0; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    b->d = fp16_scale(amax / 127.0f);
    float d = fp16_to_f32(b->d), id = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < QK8_0; i++) b->qs[i] = (int8_t)level(x[i] * id, -127, 127);
}

/* ---- quantization: Q4_K and Q5_K ----
 *
 * Each sub-block of 32 is modelled as x ≈ s*q - m with levels q in [0, nmax], s >= 0, m >= 0.
 * 1. fit_scale_min: for a sweep of candidate steps (the sub-block's range spread over
 *    nmax - 2 .. nmax + 2 levels), round x to levels and solve the 2x2 least squares for
 *    (s, m) given those levels; keep the best, then alternate re-rounding and refitting until
 *    the error stops falling.
 * 2. d = max s / 63 and dmin = max m / 63 (fp16) set the super-block grids; each sub-block's
 *    6-bit sc and m are the nearest grid points, then the 3x3 neighbourhood of (sc, m) is
 *    searched for the pair whose re-rounded levels give the least squared error, computed with
 *    the dequantizer's exact float expression. */

typedef struct k_fit {
    float s, m; /* x ≈ s*q - m */
    float err;  /* sum of squared errors */
} k_fit;

/* One sub-block of n (16 or 32) and the sums of x and x^2, which every candidate needs.
 * free_min: m may take either sign (Q4_1, Q5_1 store it as a float); else m >= 0 (the
 * K-quants subtract an unsigned 6- or 4-bit multiple of dmin). */
typedef struct k_sub {
    const float *x;
    int n;
    bool free_min;
    float sx, sxx;
} k_sub;

/* Rounds x to the nearest levels for (s, m), then returns the least-squares (s, m) for those
 * levels and its squared error (from the sums, without a second pass). Level sums are exact
 * integers; the one float sum is split four ways. (Written as simple loops so that the
 * compiler vectorizes them: this is the quantizer's inner loop.) */
static k_fit k_round_and_refit(const k_sub *b, int nmax, float s, float m) {
    float is = s > 0 ? 1.0f / s : 0.0f;
    int q[32], sq = 0, sqq = 0, n = b->n;
    for (int i = 0; i < n; i++) q[i] = level((b->x[i] + m) * is, 0, nmax);
    for (int i = 0; i < n; i++) {
        sq += q[i];
        sqq += q[i] * q[i];
    }
    float sqx4[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i += 4)
        for (int k = 0; k < 4; k++) sqx4[k] += (float)q[i + k] * b->x[i + k];
    float fq = (float)sq, fqq = (float)sqq, fn = (float)n, sqx = (sqx4[0] + sqx4[1]) + (sqx4[2] + sqx4[3]);
    /* minimise sum (s*q - m - x)^2 over s, m: normal equations
     *   [sqq  -sq] [s]   [sqx]
     *   [-sq   n ] [m] = [-sx]                                  */
    k_fit f = {0, 0, 0};
    float det = fn * fqq - fq * fq;
    if (det > 0) {
        f.s = (fn * sqx - fq * b->sx) / det;
        f.m = (fq * sqx - fqq * b->sx) / det;
    }
    if (det <= 0 || (!b->free_min && f.m < 0) || f.s < 0) { /* fit s alone with m = 0 */
        f.m = 0;
        f.s = fqq > 0 ? fmaxf(sqx / fqq, 0.0f) : 0.0f;
    }
    f.err = f.s * f.s * fqq + fn * f.m * f.m + b->sxx - 2 * f.s * f.m * fq - 2 * f.s * sqx + 2 * f.m * b->sx;
    return f;
}

static k_fit fit_scale_min(const float *x, int n, int nmax, bool free_min) {
    k_sub b = {x, n, free_min, 0, 0};
    float lo = x[0], hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        b.sx += x[i];
        b.sxx += x[i] * x[i];
    }
    if (lo > 0 && !free_min) lo = 0; /* the min can only be subtracted */
    k_fit best = {0, -lo, 0};
    if (!(hi > lo)) return best; /* constant sub-block: exactly -m */
    best = k_round_and_refit(&b, nmax, (hi - lo) / (float)nmax, -lo);
    /* candidate steps: the range spread over nmax + delta levels, delta in [-2, 2] */
    for (int k = -10; k <= 10; k++) {
        if (k == 0) continue;
        k_fit f = k_round_and_refit(&b, nmax, (hi - lo) / ((float)nmax + 0.2f * (float)k), -lo);
        if (f.err < best.err) best = f;
    }
    /* alternate: levels for the best (s, m), then (s, m) for those levels */
    for (int it = 0; it < 4; it++) {
        k_fit f = k_round_and_refit(&b, nmax, best.s, best.m);
        if (!(f.err < best.err)) break;
        best = f;
    }
    return best;
}

/* Levels and squared error of a sub-block of n for stored d, dmin and integer sc, m, using
 * the dequantizer's expression. */
static float k_levels(const float *x, int n, float d, float dmin, int sc, int m, int nmax, uint8_t *q) {
    float dl = d * (float)sc, ml = dmin * (float)m;
    float idl = dl > 0 ? 1.0f / dl : 0.0f;
    int l[32];
    for (int i = 0; i < n; i++) l[i] = level((x[i] + ml) * idl, 0, nmax);
    float e4[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i += 4)
        for (int k = 0; k < 4; k++) {
            float r = dl * (float)l[i + k] - ml - x[i + k];
            e4[k] += r * r;
        }
    for (int i = 0; i < n; i++) q[i] = (uint8_t)l[i];
    return (e4[0] + e4[1]) + (e4[2] + e4[3]);
}

/* The affine K-quant super-block: n_sub sub-blocks of sub_n levels in [0, nmax], each with an
 * integer scale and min in [0, grid] of the fp16 d and dmin. Q4_K (8 x 32, nmax 15, grid 63),
 * Q5_K (8 x 32, 31, 63), Q2_K (16 x 16, 3, 15). Fills d, dmin, the integer sc and m of each
 * sub-block and the 256 levels L. */
typedef struct k_affine {
    int n_sub, sub_n, nmax, grid;
} k_affine;

static void quant_k_affine(const float *x, k_affine k, uint16_t *d_out, uint16_t *dmin_out, uint8_t sc[16],
                           uint8_t mq[16], uint8_t L[QK_K]) {
    k_fit fit[16];
    float max_s = 0, max_m = 0;
    for (int j = 0; j < k.n_sub; j++) {
        fit[j] = fit_scale_min(x + k.sub_n * j, k.sub_n, k.nmax, false);
        max_s = fmaxf(max_s, fit[j].s);
        max_m = fmaxf(max_m, fit[j].m);
    }
    *d_out = fp16_scale(max_s / (float)k.grid);
    *dmin_out = fp16_scale(max_m / (float)k.grid);
    float d = fp16_to_f32(*d_out), dmin = fp16_to_f32(*dmin_out);
    float id = d > 0 ? 1.0f / d : 0.0f, idmin = dmin > 0 ? 1.0f / dmin : 0.0f;
    uint8_t q[32];
    for (int j = 0; j < k.n_sub; j++) {
        const float *xj = x + k.sub_n * j;
        uint8_t *Lj = L + k.sub_n * j;
        int sc0 = level(fit[j].s * id, 0, k.grid), m0 = level(fit[j].m * idmin, 0, k.grid);
        float best = INFINITY;
        for (int a = sc0 - 1; a <= sc0 + 1; a++) {
            if (a < 0 || a > k.grid) continue;
            for (int b = m0 - 1; b <= m0 + 1; b++) {
                if (b < 0 || b > k.grid) continue;
                float e = k_levels(xj, k.sub_n, d, dmin, a, b, k.nmax, q);
                if (e < best) {
                    best = e;
                    sc[j] = (uint8_t)a;
                    mq[j] = (uint8_t)b;
                    memcpy(Lj, q, (size_t)k.sub_n);
                }
            }
        }
        if (!(best < INFINITY)) { /* non-finite input: keep the format valid */
            sc[j] = mq[j] = 0;
            memset(Lj, 0, (size_t)k.sub_n);
        }
    }
}

static void quant_k_affine_packed(const float *x, int nmax, uint16_t *d, uint16_t *dmin, uint8_t scales[K_SCALE_SIZE],
                                  uint8_t L[QK_K]) {
    uint8_t sc[16], mq[16];
    quant_k_affine(x, (k_affine){8, 32, nmax, 63}, d, dmin, sc, mq, L);
    k_scale_min_pack(scales, sc, mq);
}

/* Q4_K: level of weight 32*j + l goes to the low (j even) or high (j odd) nibble of
 * qs[32*(j/2) + l]. */
static void quant_q4_K(const float *x, block_q4_K *b) {
    uint8_t L[QK_K];
    quant_k_affine_packed(x, 15, &b->d, &b->dmin, b->scales, L);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b->qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
}

/* Q5_K: as Q4_K for the low 4 bits; bit 4 of weight 32*j + l is bit j of qh[l]. */
static void quant_q5_K(const float *x, block_q5_K *b) {
    uint8_t L[QK_K];
    quant_k_affine_packed(x, 31, &b->d, &b->dmin, b->scales, L);
    memset(b->qh, 0, sizeof b->qh);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * g + l] = (uint8_t)((L[64 * g + l] & 0xF) | ((L[64 * g + 32 + l] & 0xF) << 4));
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) b->qh[l] |= (uint8_t)((L[32 * j + l] >> 4) << j);
}

/* ---- quantization: symmetric sub-blocks (Q6_K, Q3_K, Q4_0, Q5_0) ----
 *
 * Each sub-block of n is x ≈ s*l with integer levels l in [lo, hi] = [-nlev, nlev - 1] and a
 * signed s (the sign picks which side of zero gets the extra level). fit_scale_sym sweeps
 * candidate steps that put the largest-magnitude weight near level -nlev, refits s by least
 * squares for each rounding, and alternates re-rounding and refitting. In a super-block (Q6_K,
 * Q3_K) d is chosen so that the sub-block with the largest |s| gets the most negative scale;
 * the others take the nearest integer scale or a neighbour, whichever re-rounds with the
 * least error. */

typedef struct sym_levels {
    int n, lo, hi; /* weights per sub-block, level range */
} sym_levels;

/* Levels for step s and the least-squares s for them; *err = the residual at that s. */
static float sym_round_and_refit(const float *x, sym_levels v, float sxx, float s, float *err) {
    float is = s != 0 ? 1.0f / s : 0.0f;
    int l[32], sll = 0;
    for (int i = 0; i < v.n; i++) l[i] = level(x[i] * is, v.lo, v.hi);
    for (int i = 0; i < v.n; i++) sll += l[i] * l[i];
    float sxl4[4] = {0, 0, 0, 0};
    for (int i = 0; i < v.n; i += 4)
        for (int k = 0; k < 4; k++) sxl4[k] += x[i + k] * (float)l[i + k];
    float sxl = (sxl4[0] + sxl4[1]) + (sxl4[2] + sxl4[3]);
    float fs = sll > 0 ? sxl / (float)sll : 0.0f;
    *err = sxx - fs * sxl; /* sum (x - fs*l)^2 at the optimum */
    return fs;
}

static float fit_scale_sym(const float *x, sym_levels v) {
    float amax = 0, vmax = 0, sxx = 0, nlev = (float)-v.lo;
    for (int i = 0; i < v.n; i++) {
        sxx += x[i] * x[i];
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    }
    if (!(amax > 0)) return 0;
    float best_err, err;
    float best_s = sym_round_and_refit(x, v, sxx, -vmax / nlev, &best_err);
    /* candidate steps: the largest weight at level -(nlev + delta), |delta| <= nlev / 6.4
     * (levels beyond -nlev clip; the refit then widens the step) */
    for (int k = -10; k <= 10; k++) {
        if (k == 0) continue;
        float s = sym_round_and_refit(x, v, sxx, -vmax / (nlev + nlev / 64.0f * (float)k), &err);
        if (err < best_err) {
            best_err = err;
            best_s = s;
        }
    }
    for (int it = 0; it < 4; it++) {
        float s = sym_round_and_refit(x, v, sxx, best_s, &err);
        if (!(err < best_err)) break;
        best_err = err;
        best_s = s;
    }
    return best_s;
}

/* Levels and squared error of a sub-block for stored step dl (the dequantizer's d * sc). */
static float sym_levels_at(const float *x, sym_levels v, float dl, int8_t *q) {
    float idl = dl != 0 ? 1.0f / dl : 0.0f;
    int l[32];
    for (int i = 0; i < v.n; i++) l[i] = level(x[i] * idl, v.lo, v.hi);
    float e4[4] = {0, 0, 0, 0};
    for (int i = 0; i < v.n; i += 4)
        for (int k = 0; k < 4; k++) {
            float r = dl * (float)l[i + k] - x[i + k];
            e4[k] += r * r;
        }
    for (int i = 0; i < v.n; i++) q[i] = (int8_t)l[i];
    return (e4[0] + e4[1]) + (e4[2] + e4[3]);
}

/* A symmetric super-block of 16 sub-blocks of 16 with integer scales in [sc_lo, sc_hi]: the
 * fp16 d (sign included) and each sub-block's scale and levels. */
static uint16_t quant_sym_super(const float *x, sym_levels v, int sc_lo, int sc_hi, int sc[16], int8_t L[QK_K]) {
    float s[16], smax = 0;
    for (int k = 0; k < 16; k++) {
        s[k] = fit_scale_sym(x + 16 * k, v);
        if (fabsf(s[k]) > fabsf(smax)) smax = s[k];
    }
    /* d may be negative: it carries smax's sign so that smax / d = sc_lo */
    uint16_t dh = fp16_scale(fabsf(smax) / (float)-sc_lo);
    if (smax > 0) dh |= 0x8000;
    float d = fp16_to_f32(dh), id = d != 0 ? 1.0f / d : 0.0f;
    int8_t q[16];
    for (int k = 0; k < 16; k++) {
        const float *xk = x + 16 * k;
        int sc0 = level(s[k] * id, sc_lo, sc_hi);
        float best = INFINITY;
        sc[k] = 0;
        memset(L + 16 * k, 0, 16);
        for (int c = sc0 - 1; c <= sc0 + 1; c++) {
            if (c < sc_lo || c > sc_hi) continue;
            float e = sym_levels_at(xk, v, d * (float)c, q);
            if (e < best) {
                best = e;
                sc[k] = c;
                memcpy(L + 16 * k, q, 16);
            }
        }
    }
    return dh;
}

static void quant_q6_K(const float *x, block_q6_K *b) {
    int sc[16];
    int8_t L[QK_K];
    b->d = quant_sym_super(x, (sym_levels){16, -32, 31}, -128, 127, sc, L);
    for (int k = 0; k < 16; k++) b->scales[k] = (int8_t)sc[k];
    /* pack: see dequant_q6_K for where each weight's bits go */
    memset(b->qh, 0, sizeof b->qh);
    for (int w = 0; w < QK_K; w++) {
        int u = L[w] + 32; /* 0..63 */
        int h = w / 128, t = (w % 128) / 32, l = w % 32;
        uint8_t *ql = &b->ql[64 * h + 32 * (t & 1) + l];
        if (t < 2) *ql = (uint8_t)(u & 0xF);
        else *ql = (uint8_t)(*ql | ((u & 0xF) << 4));
        b->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * t));
    }
}

/* Q3_K: levels -4..3, 6-bit scales -32..31 (stored + 32; dequant_q3_K says where bits go). */
static void quant_q3_K(const float *x, block_q3_K *b) {
    int sc[16];
    int8_t L[QK_K];
    b->d = quant_sym_super(x, (sym_levels){16, -4, 3}, -32, 31, sc, L);
    memset(b->scales, 0, sizeof b->scales);
    for (int k = 0; k < 16; k++) {
        int u = sc[k] + 32;
        b->scales[k % 8] |= (uint8_t)((u & 0xF) << (4 * (k / 8)));
        b->scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
    }
    memset(b->hmask, 0, sizeof b->hmask);
    memset(b->qs, 0, sizeof b->qs);
    for (int w = 0; w < QK_K; w++) {
        int u = L[w] + 4; /* 0..7: bit 2 set means "do not subtract 4" */
        int h = w / 128, j = (w % 128) / 32, l = w % 32;
        b->qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
        b->hmask[l] |= (uint8_t)((u >> 2) << (4 * h + j));
    }
}

/* ---- quantization: Q2_K ---- */

/* 16 sub-blocks of 16 as x ≈ (d sc) q - (dmin m), q 0..3, sc and m 4-bit (quant_k_affine). */
static void quant_q2_K(const float *x, block_q2_K *b) {
    uint8_t sc[16], mq[16], L[QK_K];
    quant_k_affine(x, (k_affine){16, 16, 3, 15}, &b->d, &b->dmin, sc, mq, L);
    for (int k = 0; k < 16; k++) b->scales[k] = (uint8_t)(sc[k] | mq[k] << 4);
    memset(b->qs, 0, sizeof b->qs);
    for (int w = 0; w < QK_K; w++) b->qs[32 * (w / 128) + w % 32] |= (uint8_t)(L[w] << (2 * ((w % 128) / 32)));
}

/* ---- quantization: the legacy 32-weight blocks ---- */

/* Levels 0..(1 << bits) - 1 of a legacy block into qs (and qh for 5 bits): quant.h's layout. */
static void legacy_pack(const int *u, int bits, uint8_t qs[16], uint8_t qh[4]) {
    memset(qs, 0, 16);
    uint32_t h = 0;
    for (int i = 0; i < 32; i++) {
        qs[i % 16] |= (uint8_t)((u[i] & 0xF) << (4 * (i / 16)));
        h |= (uint32_t)((u[i] >> 4) & 1) << i;
    }
    if (bits == 5)
        for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

/* Q4_0 / Q5_0: x ≈ d * l, l in [-nlev, nlev - 1]; the fitted step rounded to fp16, the levels
 * re-rounded at the stored d. Stored as l + nlev. */
static uint16_t quant_legacy_sym(const float *x, int nlev, int *u) {
    sym_levels v = {32, -nlev, nlev - 1};
    uint16_t dh = fp16_scale(fit_scale_sym(x, v));
    int8_t l[32];
    sym_levels_at(x, v, fp16_to_f32(dh), l);
    for (int i = 0; i < 32; i++) u[i] = l[i] + nlev;
    return dh;
}

/* Q4_1 / Q5_1: x ≈ d * q + m, q in [0, nmax], m of either sign; levels re-rounded at the stored
 * d and m. */
static void quant_legacy_affine(const float *x, int nmax, uint16_t *d_out, uint16_t *m_out, int *u) {
    k_fit f = fit_scale_min(x, 32, nmax, true);
    *d_out = fp16_scale(f.s);
    *m_out = fp16_scale(-f.m);
    float d = fp16_to_f32(*d_out), m = fp16_to_f32(*m_out), id = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; i++) u[i] = level((x[i] - m) * id, 0, nmax);
}

static void quant_q4_0(const float *x, block_q4_0 *b) {
    int u[32];
    b->d = quant_legacy_sym(x, 8, u);
    legacy_pack(u, 4, b->qs, NULL);
}

static void quant_q5_0(const float *x, block_q5_0 *b) {
    int u[32];
    b->d = quant_legacy_sym(x, 16, u);
    legacy_pack(u, 5, b->qs, b->qh);
}

static void quant_q4_1(const float *x, block_q4_1 *b) {
    int u[32];
    quant_legacy_affine(x, 15, &b->d, &b->m, u);
    legacy_pack(u, 4, b->qs, NULL);
}

static void quant_q5_1(const float *x, block_q5_1 *b) {
    int u[32];
    quant_legacy_affine(x, 31, &b->d, &b->m, u);
    legacy_pack(u, 5, b->qs, b->qh);
}

/* ---- quantization: the non-linear 4-bit types (IQ4_NL, IQ4_XS) ----
 *
 * A block of 32 is x ≈ s * v[q] with v the 16 table values (quant_iq4nl_values: -127 .. 113,
 * closer together near zero) and a signed step s (the sign picks which end of the asymmetric
 * table the larger weights use). iq4_fit sweeps candidate steps that put the largest-magnitude
 * weight near either end of the table, picks each weight's nearest value, refits s by least
 * squares and alternates the two. IQ4_NL stores s as fp16; IQ4_XS gives its eight sub-blocks
 * integer scales in [-32, 31] of a super-block d chosen as Q3_K's is (quant_sym_super). */

/* The midpoints between consecutive table values: the nearest value to a is the number of
 * midpoints below it (ties to the lower value). Branch-free, so the loops vectorize. */
static const float iq4_mids[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                   7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

static inline int iq4_index(float a) {
    int q = 0;
    for (int k = 0; k < 15; k++) q += a > iq4_mids[k];
    return q; /* NaN: 0 */
}

/* Levels of the 32 weights at step s, the least-squares step for those levels (returned) and
 * the squared error at it (*err). */
static float iq4_round_and_refit(const float *x, float sxx, float s, float *err) {
    float is = s != 0 ? 1.0f / s : 0.0f;
    int v[32], svv = 0;
    for (int i = 0; i < 32; i++) v[i] = quant_iq4nl_values[iq4_index(x[i] * is)];
    for (int i = 0; i < 32; i++) svv += v[i] * v[i];
    float sxv4[4] = {0, 0, 0, 0};
    for (int i = 0; i < 32; i += 4)
        for (int k = 0; k < 4; k++) sxv4[k] += x[i + k] * (float)v[i + k];
    float sxv = (sxv4[0] + sxv4[1]) + (sxv4[2] + sxv4[3]);
    float fs = svv > 0 ? sxv / (float)svv : 0.0f;
    *err = sxx - fs * sxv; /* sum (x - fs*v)^2 at the optimum */
    return fs;
}

static float iq4_fit(const float *x) {
    float amax = 0, vmax = 0, sxx = 0;
    for (int i = 0; i < 32; i++) {
        sxx += x[i] * x[i];
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    }
    if (!(amax > 0)) return 0;
    float best_err = INFINITY, best_s = 0, err;
    /* candidate steps: the largest weight at value t(1 + k/32), t either end of the table;
     * beyond the end it clips, and the refit widens the step */
    static const float ends[2] = {-127.0f, 113.0f};
    for (int e = 0; e < 2; e++)
        for (int k = -10; k <= 10; k++) {
            float s = iq4_round_and_refit(x, sxx, vmax / (ends[e] * (1.0f + (float)k / 32.0f)), &err);
            if (err < best_err) {
                best_err = err;
                best_s = s;
            }
        }
    for (int it = 0; it < 4; it++) {
        float s = iq4_round_and_refit(x, sxx, best_s, &err);
        if (!(err < best_err)) break;
        best_err = err;
        best_s = s;
    }
    return best_s;
}

/* Levels and squared error of a block of 32 at the stored step dl (the dequantizer's). */
static float iq4_levels_at(const float *x, float dl, uint8_t q[32]) {
    float idl = dl != 0 ? 1.0f / dl : 0.0f;
    for (int i = 0; i < 32; i++) q[i] = (uint8_t)iq4_index(x[i] * idl);
    float e4[4] = {0, 0, 0, 0};
    for (int i = 0; i < 32; i += 4)
        for (int k = 0; k < 4; k++) {
            float r = dl * (float)quant_iq4nl_values[q[i + k]] - x[i + k];
            e4[k] += r * r;
        }
    return (e4[0] + e4[1]) + (e4[2] + e4[3]);
}

/* Levels of a block into 16 bytes: weight i < 16 the low nibble of qs[i], i >= 16 the high. */
static void iq4_pack(const uint8_t q[32], uint8_t qs[16]) {
    for (int i = 0; i < 16; i++) qs[i] = (uint8_t)(q[i] | q[i + 16] << 4);
}

static void quant_iq4_nl(const float *x, block_iq4_nl *b) {
    uint8_t q[32];
    b->d = fp16_scale(iq4_fit(x));
    iq4_levels_at(x, fp16_to_f32(b->d), q);
    iq4_pack(q, b->qs);
}

/* IQ4_XS: d carries the sign and size that give the sub-block of largest |s| the scale -32;
 * each sub-block takes the nearest integer scale or a neighbour, whichever re-rounds with the
 * least error (with the dequantizer's step d * sc). */
static void quant_iq4_xs(const float *x, block_iq4_xs *b) {
    float s[8], smax = 0;
    for (int j = 0; j < 8; j++) {
        s[j] = iq4_fit(x + 32 * j);
        if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
    }
    b->d = fp16_scale(fabsf(smax) / 32.0f);
    if (smax > 0) b->d |= 0x8000;
    float d = fp16_to_f32(b->d), id = d != 0 ? 1.0f / d : 0.0f;
    b->scales_h = 0;
    memset(b->scales_l, 0, sizeof b->scales_l);
    for (int j = 0; j < 8; j++) {
        uint8_t q[32], best_q[32] = {0};
        int sc0 = level(s[j] * id, -32, 31), sc = 0;
        float best = INFINITY;
        for (int c = sc0 - 1; c <= sc0 + 1; c++) {
            if (c < -32 || c > 31) continue;
            float e = iq4_levels_at(x + 32 * j, d * (float)c, q);
            if (e < best) {
                best = e;
                sc = c;
                memcpy(best_q, q, 32);
            }
        }
        int u = sc + 32; /* 0..63; a non-finite input leaves 0 + 32 and levels 0: valid */
        b->scales_l[j / 2] |= (uint8_t)((u & 0xF) << (4 * (j % 2)));
        b->scales_h |= (uint16_t)((u >> 4) << (2 * j));
        iq4_pack(best_q, b->qs + 16 * j);
    }
}

/* ---- quantization: the grid types (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) ----
 *
 * A scale unit (a 32-weight sub-block, or 16 weights for IQ2_XS / IQ2_S) is x ≈ sign * dl * g, g
 * the magnitudes of one grid point per group of 4 (IQ3) or 8 (IQ2) weights (quant.h). The signs
 * are the weights' own; IQ3_XXS, IQ2_XXS and IQ2_XS store 7 of each 8 and the eighth makes their
 * count even, so a group of 8 with an odd count flips its smallest weight (its target becomes
 * -|x|, which the grid's smallest magnitude serves best). For a step dl every group takes the
 * grid point nearest its targets, by exhaustive search (256 to 1024 points, a few thousand
 * operations that vectorize); grid_fit sweeps steps that put the largest target near the grid's
 * top or at each of its levels, refitting dl by least squares for the points found. The
 * super-block d gives the unit of largest step the largest scale, and each unit takes the
 * nearest integer scale or a neighbour, whichever has the least error at the stored step.
 * The IQ1 points carry their own signs (coordinates -1, 0, 1) and a delta of +-1/8: the targets
 * are the weights themselves, and the grid holds each point twice, once per delta (the first
 * half +1/8), so a group picks its delta with its point (IQ1_M) or a unit tries each half for
 * all its groups (IQ1_S, one delta per 32). No importance matrix: these are cinder's test files'
 * quantizer, not llama-quantize's imatrix search (docs/QUANTS.md). */

enum { GRID_MAX = 4096, GRID_CODES = 6561 }; /* codes: 3^8 (IQ2, IQ1) or 8^4 (IQ3) level tuples */

typedef struct iq_grid {
    int n;              /* points */
    int halves;         /* 2 for IQ1: points [0, n / 2) with delta +1/8, the rest the same with -1/8 */
    int dim;            /* weights per point: 4 or 8 */
    int unit;           /* weights per scale: 32 or 16 */
    bool parity;        /* the eighth sign of each 8 is implied */
    bool signed_points; /* IQ1: the points hold the signs; the targets are the weights */
    bool unit_delta;    /* IQ1_S: one delta (one half) for a unit's groups */
    int nscales;        /* 16, or 8 (IQ1's 3-bit scales) */
    float gmax;         /* the largest magnitude */
    int nlevels;
    float levels[2][8];                 /* the values a coordinate takes in each half, ascending */
    float step_of[16];                  /* the step of scale s, over d, as the dequantizer computes it */
    float g[8][GRID_MAX], gg[GRID_MAX]; /* values by coordinate, and their squared norm */
    int16_t point_of[GRID_CODES];       /* the point of each tuple of level indices (base nlevels), or -1 */
} iq_grid;

static float grid_magnitude(enum qtype t, int p, int j) {
    switch (t) {
    case QTYPE_IQ1_S:
    case QTYPE_IQ1_M: /* code - 1, plus the half's delta */
        return (float)((int)(quant_iq1s_grid[p % 2048] >> (2 * j) & 3) - 1) + (p < 2048 ? 0.125f : -0.125f);
    case QTYPE_IQ3_XXS: return (float)((quant_iq3xxs_grid[p] >> (8 * j)) & 0xFF);
    case QTYPE_IQ3_S: return (float)((quant_iq3s_grid[p] >> (8 * j)) & 0xFF);
    case QTYPE_IQ2_XXS: return (float)quant_iq2_levels[quant_iq2xxs_grid[p] >> (2 * j) & 3];
    case QTYPE_IQ2_XS: return (float)quant_iq2_levels[quant_iq2xs_grid[p] >> (2 * j) & 3];
    default: return (float)quant_iq2_levels[quant_iq2s_grid[p] >> (2 * j) & 3];
    }
}

static void iq_grid_init(iq_grid *k, enum qtype t) {
    bool iq3 = t == QTYPE_IQ3_XXS || t == QTYPE_IQ3_S, iq1 = t == QTYPE_IQ1_S || t == QTYPE_IQ1_M;
    k->n = iq1 ? 4096 : t == QTYPE_IQ3_XXS || t == QTYPE_IQ2_XXS ? 256 : t == QTYPE_IQ2_S ? 1024 : 512;
    k->halves = iq1 ? 2 : 1;
    k->dim = iq3 ? 4 : 8;
    k->unit = t == QTYPE_IQ2_XS || t == QTYPE_IQ2_S || t == QTYPE_IQ1_M ? 16 : 32;
    k->parity = t == QTYPE_IQ3_XXS || t == QTYPE_IQ2_XXS || t == QTYPE_IQ2_XS;
    k->signed_points = iq1;
    k->unit_delta = t == QTYPE_IQ1_S;
    k->nscales = iq1 ? 8 : 16;
    k->gmax = 0;
    k->nlevels = 0;
    int per = k->n / k->halves;
    for (int p = 0; p < k->n; p++) {
        k->gg[p] = 0;
        for (int j = 0; j < k->dim; j++) {
            float m = grid_magnitude(t, p, j);
            k->g[j][p] = m;
            k->gg[p] += m * m;
            k->gmax = fabsf(m) > k->gmax ? fabsf(m) : k->gmax;
            if (p >= per) continue; /* the second half's levels: the first's less 1/4 */
            int v = 0;
            while (v < k->nlevels && k->levels[0][v] < m) v++;
            if (v < k->nlevels && k->levels[0][v] == m) continue;
            if (k->nlevels == 8) continue; /* no grid has more than 8 */
            memmove(k->levels[0] + v + 1, k->levels[0] + v, sizeof(float) * (size_t)(k->nlevels - v));
            k->levels[0][v] = m;
            k->nlevels++;
        }
    }
    for (int v = 0; v < k->nlevels; v++) k->levels[1][v] = k->levels[0][v] - 0.25f;
    memset(k->point_of, 0xFF, sizeof k->point_of);
    for (int p = 0; p < per; p++) {
        int code = 0;
        for (int j = k->dim - 1; j >= 0; j--) {
            int v = 0;
            while (k->levels[0][v] != k->g[j][p]) v++;
            code = code * k->nlevels + v;
        }
        k->point_of[code] = (int16_t)p;
    }
    for (int s = 0; s < 16; s++)
        k->step_of[s] =
            t == QTYPE_IQ3_S || iq1 ? (float)(1 + 2 * s) : (0.5f + (float)s) * (t == QTYPE_IQ3_XXS ? 0.5f : 0.25f);
}

/* The point of half h nearest dl * g to targets t[dim]: the largest 2 t.g - dl g.g. That is a
 * sum over coordinates, so when the tuple of each coordinate's own best level is a grid point
 * (the common case: most weights are small and every grid holds its all-least point) it is the
 * answer; otherwise every point of the half is scored. */
static int grid_nearest_in(const iq_grid *k, int h, const float *t, float dl) {
    int per = k->n / k->halves, base = h * per;
    const float *lv = k->levels[h];
    if (dl > 0) {
        int code = 0;
        for (int j = k->dim - 1; j >= 0; j--) {
            int bv = 0;
            float best = 2.0f * t[j] * lv[0] - dl * lv[0] * lv[0];
            for (int v = 1; v < k->nlevels; v++) {
                float s = 2.0f * t[j] * lv[v] - dl * lv[v] * lv[v];
                if (s > best) best = s, bv = v;
            }
            code = code * k->nlevels + bv;
        }
        if (k->point_of[code] >= 0) return base + k->point_of[code];
    }
    float acc[GRID_MAX / 2];
    for (int p = 0; p < per; p++) acc[p] = -dl * k->gg[base + p];
    for (int j = 0; j < k->dim; j++) {
        float tj = 2.0f * t[j];
        for (int p = 0; p < per; p++) acc[p] += tj * k->g[j][base + p];
    }
    int bp = 0;
    for (int p = 1; p < per; p++)
        if (acc[p] > acc[bp]) bp = p;
    return base + bp;
}

static double grid_score(const iq_grid *k, int p, const float *t, float dl) {
    double s = -(double)dl * k->gg[p];
    for (int j = 0; j < k->dim; j++) s += 2.0 * t[j] * k->g[j][p];
    return s;
}

/* The nearest point of half h, or of either half (h < 0). */
static int grid_nearest(const iq_grid *k, int h, const float *t, float dl) {
    if (h >= 0) return grid_nearest_in(k, h, t, dl);
    int a = grid_nearest_in(k, 0, t, dl), b = grid_nearest_in(k, 1, t, dl);
    return grid_score(k, b, t, dl) > grid_score(k, a, t, dl) ? b : a;
}

/* Points of the groups of one unit (targets t[unit]) at step dl (into pt) from half h (< 0:
 * each group its own), and the squared error. */
static double grid_points_in(const iq_grid *k, int h, const float *t, float dl, int *pt) {
    double e = 0;
    for (int q = 0; q < k->unit / k->dim; q++) {
        pt[q] = grid_nearest(k, h, t + k->dim * q, dl);
        for (int j = 0; j < k->dim; j++) {
            double r = (double)t[k->dim * q + j] - (double)dl * k->g[j][pt[q]];
            e += r * r;
        }
    }
    return e;
}

/* Points of one unit at step dl, and the squared error: one half for the unit (IQ1_S's one
 * delta: the better of the two), or each group its own. */
static double grid_points_at(const iq_grid *k, const float *t, float dl, int *pt) {
    if (k->halves == 1) return grid_points_in(k, 0, t, dl, pt);
    if (!k->unit_delta) return grid_points_in(k, -1, t, dl, pt);
    int p1[8];
    double e0 = grid_points_in(k, 0, t, dl, pt), e1 = grid_points_in(k, 1, t, dl, p1);
    if (e1 < e0) memcpy(pt, p1, sizeof(int) * (size_t)(k->unit / k->dim)), e0 = e1;
    return e0;
}

/* The least-squares step for the points pt. */
static float grid_refit(const iq_grid *k, const float *t, const int *pt) {
    double tg = 0, gg = 0;
    for (int q = 0; q < k->unit / k->dim; q++) {
        gg += k->gg[pt[q]];
        for (int j = 0; j < k->dim; j++) tg += (double)t[k->dim * q + j] * k->g[j][pt[q]];
    }
    return gg > 0 && tg > 0 ? (float)(tg / gg) : 0.0f;
}

/* The targets of a 32-weight sub-block (|x|, or -|x| for a weight whose sign parity overrides;
 * x itself for signed points) and its sign bits (bit i: weight i negative as stored). Non-finite
 * weights count as 0. */
static uint32_t grid_targets(const iq_grid *k, const float *x, float t[32]) {
    uint32_t neg = 0;
    for (int i = 0; i < 32; i++) {
        t[i] = !isfinite(x[i]) ? 0.0f : k->signed_points ? x[i] : fabsf(x[i]);
        if (!k->signed_points && isfinite(x[i]) && x[i] < 0) neg |= 1u << i;
    }
    for (int l = 0; k->parity && l < 4; l++) {
        if (!__builtin_parity((neg >> (8 * l)) & 0xFF)) continue;
        int m = 8 * l;
        for (int i = 8 * l + 1; i < 8 * l + 8; i++)
            if (t[i] < t[m]) m = i;
        neg ^= 1u << m;
        t[m] = -t[m];
    }
    return neg;
}

/* The best step of one unit. */
static float grid_fit(const iq_grid *k, const float *t) {
    float tmax = 0;
    for (int i = 0; i < k->unit; i++) tmax = fabsf(t[i]) > tmax ? fabsf(t[i]) : tmax;
    if (!(tmax > 0)) return 0;
    int pt[8];
    float best_dl = tmax / k->gmax;
    double best = INFINITY;
    /* the largest target near the grid's top (9 steps), or at each of its levels (a flat unit is
     * best served by a point of equal magnitudes, and the grids have few), or for the 3-level
     * grids also an eighth either side of each level */
    int per_level = k->nlevels <= 3 ? 3 : 1;
    for (int c = 0; c < 9 + per_level * k->nlevels; c++) {
        int v = (c - 9) / per_level, f = (c - 9) % per_level;
        float dl = c < 9 ? tmax / (k->gmax * (0.75f + 0.0625f * (float)c))
                         : tmax / (fabsf(k->levels[0][v]) * (per_level == 1 ? 1.0f : 0.875f + 0.125f * (float)f));
        for (int it = 0; it < 2; it++) {
            double e = grid_points_at(k, t, dl, pt);
            if (e < best) best = e, best_dl = dl;
            float f = grid_refit(k, t, pt);
            if (!(f > 0)) break;
            dl = f;
        }
    }
    return best_dl;
}

/* Scales and points of every unit at super-block scale d (sc, pt as quant_grid's), and the
 * super-block's squared error. */
static double grid_scales_at(const iq_grid *k, const float *t, const float *dl, float d, uint8_t sc[16], int pt[64]) {
    int units = QK_K / k->unit, per = k->unit / k->dim;
    double total = 0;
    for (int u = 0; u < units; u++) {
        int s0 = 0;
        for (int s = 1; s < k->nscales && d > 0; s++)
            if (fabsf(d * k->step_of[s] - dl[u]) < fabsf(d * k->step_of[s0] - dl[u])) s0 = s;
        double best = INFINITY;
        sc[u] = 0;
        for (int s = s0 - 1; s <= s0 + 1; s++) {
            if (s < 0 || s >= k->nscales) continue;
            int p[8];
            double e = grid_points_at(k, t + k->unit * u, d * k->step_of[s], p);
            if (e < best) best = e, sc[u] = (uint8_t)s, memcpy(pt + per * u, p, sizeof(int) * (size_t)per);
        }
        if (best == INFINITY)
            best = grid_points_at(k, t + k->unit * u, 0, pt + per * u); /* all-zero or non-finite unit */
        total += best;
    }
    return total;
}

/* One super-block: the units' steps, d, then per unit its scale sc[u] and points (pt[g], g the
 * group in the super-block), and per 32-weight sub-block its sign bits neg[ib]. d gives the unit
 * of largest step the top scale or one or two below it, whichever has the least error: the top
 * scales are 3-15% apart, too coarse for units of nearly equal steps. */
static uint16_t quant_grid(const iq_grid *k, const float *x, uint8_t sc[16], int pt[64], uint32_t neg[8]) {
    float t[QK_K], dl[16], dmax = 0;
    int units = QK_K / k->unit;
    for (int ib = 0; ib < 8; ib++) neg[ib] = grid_targets(k, x + 32 * ib, t + 32 * ib);
    for (int u = 0; u < units; u++) {
        dl[u] = grid_fit(k, t + k->unit * u);
        dmax = dl[u] > dmax ? dl[u] : dmax;
    }
    int top_scale = k->nscales - 1;
    uint16_t best_dh = fp16_scale(dmax / k->step_of[top_scale]);
    double best = grid_scales_at(k, t, dl, fp16_to_f32(best_dh), sc, pt);
    for (int top = top_scale - 1; top >= top_scale - 2; top--) {
        uint8_t sc2[16];
        int pt2[64];
        uint16_t dh = fp16_scale(dmax / k->step_of[top]);
        double e = grid_scales_at(k, t, dl, fp16_to_f32(dh), sc2, pt2);
        if (e < best) best = e, best_dh = dh, memcpy(sc, sc2, sizeof sc2), memcpy(pt, pt2, sizeof pt2);
    }
    return best_dh;
}

static void quant_iq3_xxs(const float *x, block_iq3_xxs *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    b->d = quant_grid(k, x, sc, pt, neg);
    for (int ib = 0; ib < 8; ib++) {
        uint32_t w = (uint32_t)sc[ib] << 28;
        for (int l = 0; l < 4; l++) w |= ((neg[ib] >> (8 * l)) & 127u) << (7 * l);
        for (int q = 0; q < 8; q++) b->qs[8 * ib + q] = (uint8_t)pt[8 * ib + q];
        for (int j = 0; j < 4; j++) b->qs[QK_K / 4 + 4 * ib + j] = (uint8_t)(w >> (8 * j));
    }
}

static void quant_iq3_s(const float *x, block_iq3_s *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    b->d = quant_grid(k, x, sc, pt, neg);
    memset(b->qh, 0, sizeof b->qh);
    memset(b->scales, 0, sizeof b->scales);
    for (int ib = 0; ib < 8; ib++) {
        for (int q = 0; q < 8; q++) {
            b->qs[8 * ib + q] = (uint8_t)pt[8 * ib + q];
            b->qh[ib] |= (uint8_t)((pt[8 * ib + q] >> 8) << q);
        }
        for (int l = 0; l < 4; l++) b->signs[4 * ib + l] = (uint8_t)(neg[ib] >> (8 * l));
        b->scales[ib / 2] |= (uint8_t)(sc[ib] << (4 * (ib % 2)));
    }
}

static void quant_iq2_xxs(const float *x, block_iq2_xxs *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    b->d = quant_grid(k, x, sc, pt, neg);
    for (int ib = 0; ib < 8; ib++) {
        uint32_t w = (uint32_t)sc[ib] << 28;
        for (int l = 0; l < 4; l++) w |= ((neg[ib] >> (8 * l)) & 127u) << (7 * l);
        b->qs[4 * ib] = (uint16_t)(pt[4 * ib] | pt[4 * ib + 1] << 8);
        b->qs[4 * ib + 1] = (uint16_t)(pt[4 * ib + 2] | pt[4 * ib + 3] << 8);
        b->qs[4 * ib + 2] = (uint16_t)w;
        b->qs[4 * ib + 3] = (uint16_t)(w >> 16);
    }
}

static void quant_iq2_xs(const float *x, block_iq2_xs *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    b->d = quant_grid(k, x, sc, pt, neg);
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) b->qs[4 * ib + l] = (uint16_t)(pt[4 * ib + l] | ((neg[ib] >> (8 * l)) & 127u) << 9);
        b->scales[ib] = (uint8_t)(sc[2 * ib] | sc[2 * ib + 1] << 4);
    }
}

static void quant_iq2_s(const float *x, block_iq2_s *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    b->d = quant_grid(k, x, sc, pt, neg);
    for (int ib = 0; ib < 8; ib++) {
        b->qh[ib] = 0;
        for (int l = 0; l < 4; l++) {
            b->qs[4 * ib + l] = (uint8_t)pt[4 * ib + l];
            b->qh[ib] |= (uint8_t)((pt[4 * ib + l] >> 8) << (2 * l));
            b->qs[QK_K / 8 + 4 * ib + l] = (uint8_t)(neg[ib] >> (8 * l));
        }
        b->scales[ib] = (uint8_t)(sc[2 * ib] | sc[2 * ib + 1] << 4);
    }
}

/* IQ1: a point's grid index and its delta's sign bit (the second half: -1/8). */
static inline unsigned iq1_index(int p) { return (unsigned)p & 2047u; }
static inline unsigned iq1_minus(int p) { return p >= 2048; }

static void quant_iq1_s(const float *x, block_iq1_s *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    b->d = quant_grid(k, x, sc, pt, neg);
    for (int ib = 0; ib < 8; ib++) {
        unsigned qh = (unsigned)sc[ib] << 12 | iq1_minus(pt[4 * ib]) << 15; /* one half per unit */
        for (int l = 0; l < 4; l++) {
            b->qs[4 * ib + l] = (uint8_t)iq1_index(pt[4 * ib + l]);
            qh |= (iq1_index(pt[4 * ib + l]) >> 8) << (3 * l);
        }
        b->qh[ib] = (uint16_t)qh;
    }
}

static void quant_iq1_m(const float *x, block_iq1_m *b, const iq_grid *k) {
    uint8_t sc[16];
    int pt[64];
    uint32_t neg[8];
    uint16_t d = quant_grid(k, x, sc, pt, neg);
    uint16_t words[4] = {0};
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            int p = pt[4 * ib + l];
            b->qs[4 * ib + l] = (uint8_t)iq1_index(p);
            unsigned nib = iq1_index(p) >> 8 | iq1_minus(p) << 3;
            if (l % 2 == 0) b->qh[2 * ib + l / 2] = (uint8_t)nib;
            else b->qh[2 * ib + l / 2] |= (uint8_t)(nib << 4);
        }
        words[ib / 2] |= (uint16_t)((sc[2 * ib] | sc[2 * ib + 1] << 3) << (6 * (ib % 2)));
    }
    for (int w = 0; w < 4; w++) {
        words[w] |= (uint16_t)((d >> (4 * w) & 15) << 12);
        b->scales[2 * w] = (uint8_t)words[w], b->scales[2 * w + 1] = (uint8_t)(words[w] >> 8);
    }
}

static void quant_grid_row(enum qtype t, const float *src, void *dst, int64_t n) {
    iq_grid k; /* 157 KB, on the stack: no allocation that could fail */
    iq_grid_init(&k, t);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + i * QK_K;
        switch (t) {
        case QTYPE_IQ3_XXS: quant_iq3_xxs(x, (block_iq3_xxs *)dst + i, &k); break;
        case QTYPE_IQ3_S: quant_iq3_s(x, (block_iq3_s *)dst + i, &k); break;
        case QTYPE_IQ2_XXS: quant_iq2_xxs(x, (block_iq2_xxs *)dst + i, &k); break;
        case QTYPE_IQ2_XS: quant_iq2_xs(x, (block_iq2_xs *)dst + i, &k); break;
        case QTYPE_IQ1_S: quant_iq1_s(x, (block_iq1_s *)dst + i, &k); break;
        case QTYPE_IQ1_M: quant_iq1_m(x, (block_iq1_m *)dst + i, &k); break;
        default: quant_iq2_s(x, (block_iq2_s *)dst + i, &k); break;
        }
    }
}

/* ---- quantization: MXFP4 ----
 *
 * The OCP MX rule puts the largest magnitude amax in the top binade of the levels: step
 * 2^(floor(log2 amax) - 3) in ggml's doubled units (e = floor(log2 amax) + 125), so amax / step
 * is in [8, 16) and above 14 clips to the top level 12. The next step up (e + 1) holds those
 * weights unclipped at the price of coarser small ones; each block keeps whichever of the two
 * re-rounds with the less squared error. e stays at most 252, so 12 * 2^(e - 128) is finite. */

/* The nearest doubled E2M1 magnitude (0, 1, 2, 3, 4, 6, 8, 12) to a >= 0, as its index 0..7
 * (ties to the lower); branch-free. NaN: 0. */
static inline int mxfp4_magnitude(float a) {
    static const float mids[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f};
    int q = 0;
    for (int k = 0; k < 7; k++) q += a > mids[k];
    return q;
}

/* Levels of the 32 weights at the scale byte e, and their squared error. */
static float mxfp4_levels_at(const float *x, uint8_t e, uint8_t q[32]) {
    float d = quant_e8m0_half(e), id = 1.0f / d, err = 0;
    for (int i = 0; i < 32; i++) {
        int m = mxfp4_magnitude(fabsf(x[i]) * id);
        q[i] = (uint8_t)(m | (x[i] < 0 && m ? 8 : 0));
        float r = (float)quant_mxfp4_values[q[i]] * d - x[i];
        err += r * r;
    }
    return err;
}

static void quant_mxfp4(const float *x, block_mxfp4 *b) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax; /* NaN: skipped */
    int e = 0;
    if (amax > 0 && isfinite(amax)) {
        int ex;
        frexpf(amax, &ex); /* amax = f * 2^ex, f in [0.5, 1): floor(log2 amax) = ex - 1 */
        e = ex + 124;
    } else if (amax > 0) {
        e = 252; /* inf */
    }
    e = e < 0 ? 0 : e > 252 ? 252 : e;
    uint8_t q[32], q1[32];
    float err = mxfp4_levels_at(x, (uint8_t)e, q);
    if (e < 252 && mxfp4_levels_at(x, (uint8_t)(e + 1), q1) < err) {
        e++;
        memcpy(q, q1, sizeof q);
    }
    b->e = (uint8_t)e;
    iq4_pack(q, b->qs); /* IQ4_NL's nibble order */
}

void quant_quantize_row(enum qtype t, const float *src, void *dst, int64_t n) {
    assert(qtype_supported(t) && n % qtype_block_elems(t) == 0);
    switch (t) {
    case QTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case QTYPE_F16: {
        uint8_t *p = dst;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_fp16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    }
    case QTYPE_BF16: {
        uint8_t *p = dst;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    }
#define EACH_BLOCK(fn, block, elems)                                                                                   \
    for (int64_t i = 0; i < n / (elems); i++) fn(src + i * (elems), (block *)dst + i);                                 \
    return
    case QTYPE_Q4_0: EACH_BLOCK(quant_q4_0, block_q4_0, 32);
    case QTYPE_Q4_1: EACH_BLOCK(quant_q4_1, block_q4_1, 32);
    case QTYPE_Q5_0: EACH_BLOCK(quant_q5_0, block_q5_0, 32);
    case QTYPE_Q5_1: EACH_BLOCK(quant_q5_1, block_q5_1, 32);
    case QTYPE_Q2_K: EACH_BLOCK(quant_q2_K, block_q2_K, QK_K);
    case QTYPE_Q3_K: EACH_BLOCK(quant_q3_K, block_q3_K, QK_K);
    case QTYPE_IQ4_NL: EACH_BLOCK(quant_iq4_nl, block_iq4_nl, 32);
    case QTYPE_IQ4_XS: EACH_BLOCK(quant_iq4_xs, block_iq4_xs, QK_K);
    case QTYPE_MXFP4: EACH_BLOCK(quant_mxfp4, block_mxfp4, 32);
#undef EACH_BLOCK
    case QTYPE_IQ3_XXS:
    case QTYPE_IQ3_S:
    case QTYPE_IQ2_XXS:
    case QTYPE_IQ2_XS:
    case QTYPE_IQ2_S:
    case QTYPE_IQ1_S:
    case QTYPE_IQ1_M: quant_grid_row(t, src, dst, n); return;
    case QTYPE_Q8_0:
        for (int64_t i = 0; i < n / QK8_0; i++) quant_q8_0(src + i * QK8_0, (block_q8_0 *)dst + i);
        return;
    case QTYPE_Q4_K:
        for (int64_t i = 0; i < n / QK_K; i++) quant_q4_K(src + i * QK_K, (block_q4_K *)dst + i);
        return;
    case QTYPE_Q5_K:
        for (int64_t i = 0; i < n / QK_K; i++) quant_q5_K(src + i * QK_K, (block_q5_K *)dst + i);
        return;
    case QTYPE_Q6_K:
        for (int64_t i = 0; i < n / QK_K; i++) quant_q6_K(src + i * QK_K, (block_q6_K *)dst + i);
        return;
    default: return;
    }
}
