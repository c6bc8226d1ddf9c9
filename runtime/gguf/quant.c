/* Tensor element types: names and block sizes for every ggml type a GGUF file may hold, and
 * dequantization of a row for the types cinder computes with (quantization: quantize.c).
 *
 * The dequantizers give exactly the floats ggml's dequantize_row_* give, so a CPU reference
 * built on them sees the weights llama.cpp sees (tests/test_quant.c checks this bit for bit
 * against the real libggml-base). That holds by construction, not by luck of evaluation order:
 * the fp16 d has at most 11 significant bits, a sub-block scale at most 8 and a level at most
 * 6, so d*sc, d*sc*q (Q4_K, Q5_K) and dmin*m are exact in float, and each weight is the one
 * rounding of the exact value of its expression: d*sc*q - dmin*m rounds once at the
 * subtraction, Q6_K's d*sc*q (up to 25 bits) once at its last product. No evaluation order
 * and no fused multiply-add can change it, which is also what lets a GPU shader match.
 *
 * The quantizers are cinder's own. They need not match ggml's bytes, only its accuracy: each
 * fits a scale (and for Q4_K/Q5_K a min) per sub-block by least squares over a few candidate
 * level assignments, then quantizes those sub-block parameters to the super-block's integer
 * grid and re-picks each sub-block's integer scale from its neighbours by measured error.
 * docs/QUANTS.md lists the layouts in words and the round-trip errors we measure. */
#include "runtime/gguf/quant.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime/base/fp16.h"
#include "runtime/base/le_bytes.h"

/* ---- type table ---- */

typedef struct qtype_info {
    const char *name; /* NULL: not a ggml type we know */
    int64_t block_elems;
    size_t block_bytes;
} qtype_info;

/* Sizes from ggml-common.h (the block structs and their static asserts). */
static const qtype_info type_info[QTYPE_COUNT] = {
    [QTYPE_F32] = {"F32", 1, 4},
    [QTYPE_F16] = {"F16", 1, 2},
    [QTYPE_Q4_0] = {"Q4_0", 32, 18},    /* fp16 d + 16 bytes of nibbles */
    [QTYPE_Q4_1] = {"Q4_1", 32, 20},    /* fp16 d, fp16 m + nibbles */
    [QTYPE_Q5_0] = {"Q5_0", 32, 22},    /* fp16 d + 4 bytes of high bits + nibbles */
    [QTYPE_Q5_1] = {"Q5_1", 32, 24},    /* fp16 d, fp16 m + high bits + nibbles */
    [QTYPE_Q8_0] = {"Q8_0", 32, 34},    /* fp16 d + 32 int8 */
    [QTYPE_Q8_1] = {"Q8_1", 32, 36},    /* fp16 d, fp16 d*sum + 32 int8 */
    [QTYPE_Q2_K] = {"Q2_K", QK_K, 84},  /* 16 scale bytes + 64 bytes of 2-bit q + d, dmin */
    [QTYPE_Q3_K] = {"Q3_K", QK_K, 110}, /* 32 hmask + 64 q + 12 scales + d */
    [QTYPE_Q4_K] = {"Q4_K", QK_K, 144},
    [QTYPE_Q5_K] = {"Q5_K", QK_K, 176},
    [QTYPE_Q6_K] = {"Q6_K", QK_K, 210},
    [QTYPE_Q8_K] = {"Q8_K", QK_K, 292},      /* float d + 256 int8 + 16 int16 block sums */
    [QTYPE_IQ2_XXS] = {"IQ2_XXS", QK_K, 66}, /* d + 32 u16: grid indices, signs and scales */
    [QTYPE_IQ2_XS] = {"IQ2_XS", QK_K, 74},   /* d + 32 u16 + 8 scale bytes */
    [QTYPE_IQ3_XXS] = {"IQ3_XXS", QK_K, 98}, /* d + 96 bytes */
    [QTYPE_IQ1_S] = {"IQ1_S", QK_K, 50},     /* d + 32 qs + 8 u16 qh */
    [QTYPE_IQ4_NL] = {"IQ4_NL", 32, 18},     /* d + 16 bytes of nibbles (a 16-level table) */
    [QTYPE_IQ3_S] = {"IQ3_S", QK_K, 110},    /* d + 64 qs + 8 qh + 32 signs + 4 scales */
    [QTYPE_IQ2_S] = {"IQ2_S", QK_K, 82},     /* d + 64 qs + 8 qh + 8 scales */
    [QTYPE_IQ4_XS] = {"IQ4_XS", QK_K, 136},  /* d + u16 scales_h + 4 scales_l + 128 nibbles */
    [QTYPE_I8] = {"I8", 1, 1},
    [QTYPE_I16] = {"I16", 1, 2},
    [QTYPE_I32] = {"I32", 1, 4},
    [QTYPE_I64] = {"I64", 1, 8},
    [QTYPE_F64] = {"F64", 1, 8},
    [QTYPE_IQ1_M] = {"IQ1_M", QK_K, 56}, /* 32 qs + 16 qh + 8 scales (d inside them) */
    [QTYPE_BF16] = {"BF16", 1, 2},
    [QTYPE_TQ1_0] = {"TQ1_0", QK_K, 54}, /* ternary: 48 + 4 bytes base-3 + d */
    [QTYPE_TQ2_0] = {"TQ2_0", QK_K, 66}, /* ternary: 64 bytes of 2-bit + d */
    [QTYPE_MXFP4] = {"MXFP4", 32, 17},   /* E8M0 exponent + 16 bytes of E2M1 nibbles */
    [QTYPE_NVFP4] = {"NVFP4", 64, 36},   /* 4 UE4M3 scales + 32 bytes of E2M1 nibbles */
    [QTYPE_Q1_0] = {"Q1_0", 128, 18},    /* d + 16 bytes of signs */
    [QTYPE_Q2_0] = {"Q2_0", 64, 18},     /* d + 16 bytes of 2-bit q */
};

static const qtype_info *info(uint32_t t) { return t < QTYPE_COUNT && type_info[t].name ? &type_info[t] : NULL; }

const char *qtype_name(enum qtype t) {
    const qtype_info *i = info((uint32_t)t);
    return i ? i->name : "?";
}

int qtype_from_name(const char *name, enum qtype *out) {
    if (!name) return -1;
    for (uint32_t t = 0; t < QTYPE_COUNT; t++) {
        if (type_info[t].name && !strcasecmp(name, type_info[t].name)) {
            *out = (enum qtype)t;
            return 0;
        }
    }
    return -1;
}

const char *qtype_removed_name(uint32_t t) {
    /* ggml.h: support removed (4, 5) or removed from GGUF files (the repacked 31-33, 36-38) */
    static const char *const removed[] = {
        [4] = "Q4_2",      [5] = "Q4_3",        [31] = "Q4_0_4_4",   [32] = "Q4_0_4_8",
        [33] = "Q4_0_8_8", [36] = "IQ4_NL_4_4", [37] = "IQ4_NL_4_8", [38] = "IQ4_NL_8_8"};
    return t < sizeof removed / sizeof removed[0] ? removed[t] : NULL;
}

const char *qtype_supported_names(char *buf, size_t n) {
    size_t at = 0;
    if (n) buf[0] = 0;
    for (uint32_t t = 0; t < QTYPE_COUNT && at < n; t++)
        if (qtype_supported((enum qtype)t)) {
            int w = snprintf(buf + at, n - at, "%s%s", at ? ", " : "", type_info[t].name);
            at = w < 0 ? n : at + (size_t)w;
        }
    return buf;
}

bool qtype_known(uint32_t t) { return info(t) != NULL; }

bool qtype_supported(enum qtype t) {
    switch (t) {
    case QTYPE_F32:
    case QTYPE_F16:
    case QTYPE_BF16:
    case QTYPE_Q4_0:
    case QTYPE_Q4_1:
    case QTYPE_Q5_0:
    case QTYPE_Q5_1:
    case QTYPE_Q8_0:
    case QTYPE_Q2_K:
    case QTYPE_Q3_K:
    case QTYPE_Q4_K:
    case QTYPE_Q5_K:
    case QTYPE_Q6_K:
    case QTYPE_IQ4_NL:
    case QTYPE_IQ4_XS:
    case QTYPE_IQ3_XXS:
    case QTYPE_IQ3_S:
    case QTYPE_MXFP4:
    case QTYPE_IQ2_XXS:
    case QTYPE_IQ2_XS:
    case QTYPE_IQ2_S:
    case QTYPE_IQ1_S:
    case QTYPE_IQ1_M: return true;
    default: return false;
    }
}

int64_t qtype_block_elems(enum qtype t) {
    const qtype_info *i = info((uint32_t)t);
    return i ? i->block_elems : 0;
}

size_t qtype_block_bytes(enum qtype t) {
    const qtype_info *i = info((uint32_t)t);
    return i ? i->block_bytes : 0;
}

size_t qtype_row_bytes(enum qtype t, int64_t n) {
    const qtype_info *i = info((uint32_t)t);
    if (!i || n < 0 || n % i->block_elems) return 0; /* 0 = no such row: callers reject it */
    return (size_t)(n / i->block_elems) * i->block_bytes;
}

/* ---- dequantization, one block at a time ---- */

/* Q8_0: y[i] = qs[i] * d. */
static void dequant_q8_0(const block_q8_0 *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int i = 0; i < QK8_0; i++) y[i] = (float)b->qs[i] * d;
}

/* Q4_K: 8 sub-blocks of 32. Sub-block j's 4-bit levels sit in the 32 bytes qs[32*(j/2) ..],
 * low nibbles for even j, high nibbles for odd j. y = (d*sc[j]) * q - (dmin*m[j]). */
static void dequant_q4_K(const block_q4_K *b, float *y) {
    float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k_scale_min_get(b->scales, j, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *qs = b->qs + 32 * (j / 2);
        int shift = 4 * (j & 1);
        for (int l = 0; l < 32; l++) y[32 * j + l] = dl * (float)((qs[l] >> shift) & 0xF) - ml;
    }
}

/* Q5_K: Q4_K's nibbles plus a fifth bit: weight l of sub-block j takes bit j of qh[l] as its
 * value 16. y = (d*sc[j]) * q - (dmin*m[j]) with q in 0..31. */
static void dequant_q5_K(const block_q5_K *b, float *y) {
    float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k_scale_min_get(b->scales, j, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *qs = b->qs + 32 * (j / 2);
        int shift = 4 * (j & 1);
        for (int l = 0; l < 32; l++) {
            int q = ((qs[l] >> shift) & 0xF) | (((b->qh[l] >> j) & 1) << 4);
            y[32 * j + l] = dl * (float)q - ml;
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 weights, sub-block k scaled by the int8 scales[k]. The 256
 * weights form two halves of 128; in half h, weight 32*t + l (quarter t = 0..3, l = 0..31):
 *   low 4 bits : ql[64*h + 32*(t&1) + l], low nibble for t = 0,1, high nibble for t = 2,3
 *   high 2 bits: qh[32*h + l] bits 2t, 2t+1
 * y = (d * scales[k]) * (q - 32), q in 0..63. */
static void dequant_q6_K(const block_q6_K *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int k = 0; k < QK_K / 16; k++) {
        int h = k / 8, t = (k % 8) / 2, l0 = 16 * (k & 1);
        const uint8_t *ql = b->ql + 64 * h + 32 * (t & 1);
        const uint8_t *qh = b->qh + 32 * h;
        int lshift = 4 * (t >> 1), hshift = 2 * t;
        float dl = d * (float)b->scales[k];
        for (int l = l0; l < l0 + 16; l++) {
            int q = ((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4);
            y[16 * k + l - l0] = dl * (float)(q - 32);
        }
    }
}

/* The legacy 32-weight blocks: level i < 16 in the low nibble of qs[i], i >= 16 in the high
 * nibble of qs[i - 16]; the fifth bit (Q5_*) is bit i of qh. q*d is exact (at most 5 + 11
 * significant bits), so each weight is one rounding (the + m) or none. */
static int legacy_level(const uint8_t qs[16], uint32_t qh, int i) {
    return ((qs[i % 16] >> (4 * (i / 16))) & 0xF) | (int)(((qh >> i) & 1) << 4);
}

static void dequant_q4_0(const block_q4_0 *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int i = 0; i < 32; i++) y[i] = (float)(legacy_level(b->qs, 0, i) - 8) * d;
}

static void dequant_q4_1(const block_q4_1 *b, float *y) {
    float d = fp16_to_f32(b->d), m = fp16_to_f32(b->m);
    for (int i = 0; i < 32; i++) y[i] = (float)legacy_level(b->qs, 0, i) * d + m;
}

static void dequant_q5_0(const block_q5_0 *b, float *y) {
    float d = fp16_to_f32(b->d);
    uint32_t qh = cd_get_le32(b->qh);
    for (int i = 0; i < 32; i++) y[i] = (float)(legacy_level(b->qs, qh, i) - 16) * d;
}

static void dequant_q5_1(const block_q5_1 *b, float *y) {
    float d = fp16_to_f32(b->d), m = fp16_to_f32(b->m);
    uint32_t qh = cd_get_le32(b->qh);
    for (int i = 0; i < 32; i++) y[i] = (float)legacy_level(b->qs, qh, i) * d + m;
}

/* Q2_K: weight w = 128h + 32j + l, sub-block k = w / 16. d*sc and dmin*m are exact (11 + 4
 * bits), (d*sc)*q too (+2), so the subtraction is the one rounding. */
static void dequant_q2_K(const block_q2_K *b, float *y) {
    float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
    for (int w = 0; w < QK_K; w++) {
        int h = w / 128, j = (w % 128) / 32, l = w % 32, sc = b->scales[w / 16];
        float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
        y[w] = dl * (float)((b->qs[32 * h + l] >> (2 * j)) & 3) - ml;
    }
}

/* The 6-bit scale k (0..15) of a Q3_K block, less 32. */
static int q3_K_scale(const uint8_t s[12], int k) {
    int lo = (s[k % 8] >> (4 * (k / 8))) & 0xF, hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Q3_K: d*(sc - 32) is exact (11 + 6 bits) and so is its product with q (+3): no rounding. */
static void dequant_q3_K(const block_q3_K *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int w = 0; w < QK_K; w++) {
        int h = w / 128, j = (w % 128) / 32, l = w % 32;
        int q = ((b->qs[32 * h + l] >> (2 * j)) & 3) - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
        y[w] = d * (float)q3_K_scale(b->scales, w / 16) * (float)q;
    }
}

/* ggml's kvalues_iq4nl, in level order (shaders/quant_blocks.glsl holds the same table). */
const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The 32 weights of one non-linear block of step dl. dl * value is exact (dl has at most 17
 * significant bits, from IQ4_XS's d * (ls - 32), and a value at most 7), so no weight rounds. */
static void iq4_block(const uint8_t qs[16], float dl, float *y) {
    for (int i = 0; i < 32; i++) y[i] = dl * (float)quant_iq4nl_values[(qs[i % 16] >> (4 * (i / 16))) & 0xF];
}

static void dequant_iq4_nl(const block_iq4_nl *b, float *y) { iq4_block(b->qs, fp16_to_f32(b->d), y); }

/* IQ4_XS's 6-bit scale of sub-block j, less 32. */
static int iq4_xs_scale(const block_iq4_xs *b, int j) {
    int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF, hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

/* d * (ls - 32) is exact (11 + 6 bits): then as IQ4_NL. */
static void dequant_iq4_xs(const block_iq4_xs *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int j = 0; j < QK_K / 32; j++) iq4_block(b->qs + 16 * j, d * (float)iq4_xs_scale(b, j), y + 32 * j);
}

/* The 8 weights of group pair l of a 3-bit grid sub-block: grid entries a and b, sign byte
 * signs, step dl. dl * magnitude is exact (dl at most 16 significant bits: d's 11 and IQ3_XXS's
 * 0.5 + s or IQ3_S's 1 + 2s at most 5; a magnitude at most 6), so no weight rounds. */
static void iq3_eight(uint32_t a, uint32_t b, uint8_t signs, float dl, float *y) {
    for (int i = 0; i < 8; i++) {
        float v = dl * (float)(((i < 4 ? a : b) >> (8 * (i % 4))) & 0xFF);
        y[i] = signs >> i & 1 ? -v : v;
    }
}

static void dequant_iq3_xxs(const block_iq3_xxs *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const uint8_t *q = b->qs + 8 * ib, *ss = b->qs + QK_K / 4 + 4 * ib;
        uint32_t w = (uint32_t)ss[0] | (uint32_t)ss[1] << 8 | (uint32_t)ss[2] << 16 | (uint32_t)ss[3] << 24;
        float dl = d * (0.5f + (float)(w >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++)
            iq3_eight(quant_iq3xxs_grid[q[2 * l]], quant_iq3xxs_grid[q[2 * l + 1]], quant_ksigns(w >> (7 * l)), dl,
                      y + 32 * ib + 8 * l);
    }
}

static void dequant_iq3_s(const block_iq3_s *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const uint8_t *q = b->qs + 8 * ib;
        float dl = d * (float)(1 + 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 0xF));
        for (int l = 0; l < 4; l++) {
            uint32_t ia = q[2 * l] | (uint32_t)(b->qh[ib] >> (2 * l) & 1) << 8;
            uint32_t ib2 = q[2 * l + 1] | (uint32_t)(b->qh[ib] >> (2 * l + 1) & 1) << 8;
            iq3_eight(quant_iq3s_grid[ia], quant_iq3s_grid[ib2], b->signs[4 * ib + l], dl, y + 32 * ib + 8 * l);
        }
    }
}

const uint8_t quant_iq2_levels[3] = {8, 25, 43};

/* The 8 weights of an IQ2 group: grid entry g (codes), sign byte signs, step dl. dl * level is
 * exact (dl at most 16 significant bits: d's 11 and 0.5 + s at most 5; a level at most 6). */
static void iq2_eight(uint16_t g, uint8_t signs, float dl, float *y) {
    for (int j = 0; j < 8; j++) {
        float v = dl * (float)quant_iq2_levels[g >> (2 * j) & 3];
        y[j] = signs >> j & 1 ? -v : v;
    }
}

/* The step of 4-bit scale s: d * (0.5 + s) * 0.25, as ggml computes it. */
static float iq2_step(float d, unsigned s) { return d * (0.5f + (float)s) * 0.25f; }

static void dequant_iq2_xxs(const block_iq2_xxs *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const uint16_t *q = b->qs + 4 * ib;
        uint32_t w = (uint32_t)q[2] | (uint32_t)q[3] << 16;
        float dl = iq2_step(d, w >> 28);
        for (int l = 0; l < 4; l++) {
            uint8_t idx = (uint8_t)(q[l / 2] >> (8 * (l % 2)));
            iq2_eight(quant_iq2xxs_grid[idx], quant_ksigns(w >> (7 * l)), dl, y + 32 * ib + 8 * l);
        }
    }
}

static void dequant_iq2_xs(const block_iq2_xs *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++)
        for (int l = 0; l < 4; l++) {
            uint16_t q = b->qs[4 * ib + l];
            iq2_eight(quant_iq2xs_grid[q & 511], quant_ksigns(q >> 9),
                      iq2_step(d, b->scales[ib] >> (4 * (l / 2)) & 0xF), y + 32 * ib + 8 * l);
        }
}

static void dequant_iq2_s(const block_iq2_s *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++)
        for (int l = 0; l < 4; l++) {
            uint32_t idx = b->qs[4 * ib + l] | (uint32_t)(b->qh[ib] >> (2 * l) & 3) << 8;
            iq2_eight(quant_iq2s_grid[idx], b->qs[QK_K / 8 + 4 * ib + l],
                      iq2_step(d, b->scales[ib] >> (4 * (l / 2)) & 0xF), y + 32 * ib + 8 * l);
        }
}

/* The 8 weights of an IQ1 group: grid entry g (codes), step dl, delta +-1/8 (negative: minus). */
static void iq1_eight(uint16_t g, float dl, bool negative, float *y) {
    float delta = negative ? -0.125f : 0.125f;
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)((int)(g >> (2 * j) & 3) - 1) + delta);
}

/* The step of 3-bit scale s: d * (2 s + 1), as ggml computes it. */
static float iq1_step(float d, unsigned s) { return d * (float)(2 * s + 1); }

static void dequant_iq1_s(const block_iq1_s *b, float *y) {
    float d = fp16_to_f32(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint16_t qh = b->qh[ib];
        float dl = iq1_step(d, qh >> 12 & 7);
        for (int l = 0; l < 4; l++)
            iq1_eight(quant_iq1s_grid[b->qs[4 * ib + l] | (qh >> (3 * l) & 7) << 8], dl, qh & 0x8000,
                      y + 32 * ib + 8 * l);
    }
}

/* IQ1_M's d: the top nibbles of its four scale words. */
static float iq1_m_d(const block_iq1_m *b) {
    uint16_t h = 0;
    for (int w = 0; w < 4; w++) h |= (uint16_t)((b->scales[2 * w + 1] >> 4) << (4 * w));
    return fp16_to_f32(h);
}

static void dequant_iq1_m(const block_iq1_m *b, float *y) {
    float d = iq1_m_d(b);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        unsigned sc = (unsigned)b->scales[ib / 2 * 2] | (unsigned)b->scales[ib / 2 * 2 + 1] << 8;
        for (int l = 0; l < 4; l++) {
            unsigned h = b->qh[2 * ib + l / 2] >> (4 * (l % 2)) & 15;
            float dl = iq1_step(d, sc >> (6 * (ib % 2) + 3 * (l / 2)) & 7);
            iq1_eight(quant_iq1s_grid[b->qs[4 * ib + l] | (h & 7) << 8], dl, h & 8, y + 32 * ib + 8 * l);
        }
    }
}

/* ggml's kvalues_mxfp4 (shaders/quant_blocks.glsl computes the same values from the level). */
const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float quant_e8m0_half(uint8_t e) {
    /* 2^(e - 128): the exponent field e - 1 for e >= 2; below, the subnormals 2^-127, 2^-128 */
    return fp32_from_bits(e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e);
}

/* value * 2^(e - 128): a small integer times a power of two, exact. */
static void dequant_mxfp4(const block_mxfp4 *b, float *y) {
    float d = quant_e8m0_half(b->e);
    for (int i = 0; i < 32; i++) y[i] = (float)quant_mxfp4_values[(b->qs[i % 16] >> (4 * (i / 16))) & 0xF] * d;
}

void quant_dequantize_row(enum qtype t, const void *src, float *dst, int64_t n) {
    assert(qtype_supported(t) && n % qtype_block_elems(t) == 0);
    switch (t) {
    case QTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case QTYPE_F16: {
        const uint8_t *p = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = fp16_to_f32(h);
        }
        return;
    }
    case QTYPE_BF16: {
        const uint8_t *p = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        return;
    }
#define EACH_BLOCK(fn, block, elems)                                                                                   \
    for (int64_t i = 0; i < n / (elems); i++) fn((const block *)src + i, dst + i * (elems));                           \
    return
    case QTYPE_Q4_0: EACH_BLOCK(dequant_q4_0, block_q4_0, 32);
    case QTYPE_Q4_1: EACH_BLOCK(dequant_q4_1, block_q4_1, 32);
    case QTYPE_Q5_0: EACH_BLOCK(dequant_q5_0, block_q5_0, 32);
    case QTYPE_Q5_1: EACH_BLOCK(dequant_q5_1, block_q5_1, 32);
    case QTYPE_Q2_K: EACH_BLOCK(dequant_q2_K, block_q2_K, QK_K);
    case QTYPE_Q3_K: EACH_BLOCK(dequant_q3_K, block_q3_K, QK_K);
    case QTYPE_IQ4_NL: EACH_BLOCK(dequant_iq4_nl, block_iq4_nl, 32);
    case QTYPE_IQ4_XS: EACH_BLOCK(dequant_iq4_xs, block_iq4_xs, QK_K);
    case QTYPE_IQ3_XXS: EACH_BLOCK(dequant_iq3_xxs, block_iq3_xxs, QK_K);
    case QTYPE_IQ3_S: EACH_BLOCK(dequant_iq3_s, block_iq3_s, QK_K);
    case QTYPE_IQ2_XXS: EACH_BLOCK(dequant_iq2_xxs, block_iq2_xxs, QK_K);
    case QTYPE_IQ2_XS: EACH_BLOCK(dequant_iq2_xs, block_iq2_xs, QK_K);
    case QTYPE_IQ2_S: EACH_BLOCK(dequant_iq2_s, block_iq2_s, QK_K);
    case QTYPE_IQ1_S: EACH_BLOCK(dequant_iq1_s, block_iq1_s, QK_K);
    case QTYPE_IQ1_M: EACH_BLOCK(dequant_iq1_m, block_iq1_m, QK_K);
    case QTYPE_MXFP4: EACH_BLOCK(dequant_mxfp4, block_mxfp4, 32);
#undef EACH_BLOCK
    case QTYPE_Q8_0:
        for (int64_t i = 0; i < n / QK8_0; i++) dequant_q8_0((const block_q8_0 *)src + i, dst + i * QK8_0);
        return;
    case QTYPE_Q4_K:
        for (int64_t i = 0; i < n / QK_K; i++) dequant_q4_K((const block_q4_K *)src + i, dst + i * QK_K);
        return;
    case QTYPE_Q5_K:
        for (int64_t i = 0; i < n / QK_K; i++) dequant_q5_K((const block_q5_K *)src + i, dst + i * QK_K);
        return;
    case QTYPE_Q6_K:
        for (int64_t i = 0; i < n / QK_K; i++) dequant_q6_K((const block_q6_K *)src + i, dst + i * QK_K);
        return;
    default: return;
    }
}
