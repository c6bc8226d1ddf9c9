/* Tensor element types and the quant block layouts, byte-exact to ggml's (the numbering is
 * ggml's `enum ggml_type`, which GGUF files store). One definition of each block layout,
 * pinned by static asserts; the GLSL includes in shaders/ mirror these structs and a test
 * checks the two agree.
 *
 * Every ggml type has its name and block size here (so errors and `cinder info` can say what a
 * file holds); qtype_supported says which ones cinder computes with, and the model loader
 * refuses the others by name. */
#pragma once
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qtype {
    QTYPE_F32 = 0,
    QTYPE_F16 = 1,
    QTYPE_Q4_0 = 2,
    QTYPE_Q4_1 = 3,
    QTYPE_Q5_0 = 6,
    QTYPE_Q5_1 = 7,
    QTYPE_Q8_0 = 8,
    QTYPE_Q8_1 = 9,
    QTYPE_Q2_K = 10,
    QTYPE_Q3_K = 11,
    QTYPE_Q4_K = 12,
    QTYPE_Q5_K = 13,
    QTYPE_Q6_K = 14,
    QTYPE_Q8_K = 15,
    QTYPE_IQ2_XXS = 16,
    QTYPE_IQ2_XS = 17,
    QTYPE_IQ3_XXS = 18,
    QTYPE_IQ1_S = 19,
    QTYPE_IQ4_NL = 20,
    QTYPE_IQ3_S = 21,
    QTYPE_IQ2_S = 22,
    QTYPE_IQ4_XS = 23,
    QTYPE_I8 = 24,
    QTYPE_I16 = 25,
    QTYPE_I32 = 26,
    QTYPE_I64 = 27,
    QTYPE_F64 = 28,
    QTYPE_IQ1_M = 29,
    QTYPE_BF16 = 30,
    QTYPE_TQ1_0 = 34,
    QTYPE_TQ2_0 = 35,
    QTYPE_MXFP4 = 39,
    QTYPE_NVFP4 = 40,
    QTYPE_Q1_0 = 41,
    QTYPE_Q2_0 = 42,
    QTYPE_COUNT = 48, /* bound for tables indexed by type; ggml's numbering stays below it */
};

#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* Q8_0: 32 weights = d * q, d stored as fp16. */
typedef struct {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");

/* The 32-weight legacy blocks. Weight i < 16 is the low nibble of qs[i], weight i >= 16 the
 * high nibble of qs[i - 16]; Q5_0/Q5_1 take bit i of qh (little-endian) as the fifth bit.
 * Q4_0: d * (q - 8); Q4_1: d * q + m; Q5_0: d * (q - 16); Q5_1: d * q + m. */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");

typedef struct {
    uint16_t d, m;
    uint8_t qs[16];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");

typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 layout");

typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 layout");

/* Q2_K: 16 sub-blocks of 16; scales[k] holds sub-block k's 4-bit scale (low nibble) and 4-bit
 * min (high nibble); weight = d * sc * q - dmin * m with 2-bit q. Weight 128h + 32j + l (h < 2,
 * j < 4, l < 32) is bits 2j..2j+1 of qs[32h + l], in sub-block 8h + 2j + l / 16. */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K layout");

/* Q3_K: 16 sub-blocks of 16 with 6-bit scales (stored + 32) packed in 12 bytes; weight = d *
 * (sc - 32) * q with q in -4..3. Weight 128h + 32j + l: bits 2j..2j+1 of qs[32h + l] less 4
 * unless bit 4h + j of hmask[l] is set, in sub-block 8h + 2j + l / 16. Scale k: low 4 bits
 * from byte k % 8 (low nibble for k < 8, high for k >= 8), high 2 bits from byte 8 + k % 4,
 * bits 2 (k / 4) and up. */
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K layout");

/* The non-linear 4-bit types: a level q (0..15) stands for kvalues_iq4nl[q], 16 int8 values
 * spaced more closely near zero (quant.c holds the table in ggml's order).
 * IQ4_NL: 32 weights, weight i = d * kvalues[level i]; the levels are nibbles as in Q4_0 (i < 16
 * the low nibble of qs[i], i >= 16 the high nibble of qs[i - 16]). */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");

/* IQ4_XS: 256 weights in 8 sub-blocks of 32, each an IQ4_NL block whose scale is
 * d * (ls - 32) for a 6-bit ls: its low 4 bits in nibble j % 2 of scales_l[j / 2], its high 2
 * bits at bits 2j, 2j + 1 of scales_h. Sub-block j's levels are qs[16j .. 16j + 15], nibbles
 * placed as in IQ4_NL. */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs layout");

/* The 16 values of the non-linear levels (ggml's kvalues_iq4nl), for the quantizer. */
extern const int8_t quant_iq4nl_values[16];

/* The 3-bit grid types: a group of 4 weights is a point of a grid (an index into a table of 4
 * magnitudes, byte j of the entry the magnitude of weight j) with a sign per weight, times the
 * sub-block's step. The tables are ggml's (iq_grids.c, written from ggml's own dequantizers by
 * scripts/gen_iq_grids.py). Weight i of a 32-weight sub-block ib: group 2l + h (l = i % 32 / 8,
 * h = i % 8 / 4), magnitude byte i % 4 of its grid entry, sign bit i % 8 of sign byte l.
 *
 * IQ3_XXS: qs[8 ib + 2l + h] is the index into quant_iq3xxs_grid (magnitudes 4 .. 62); the word
 * at qs[64 + 4 ib] holds 4 seven-bit sign fields (bits 7l .. 7l + 6: signs of weights 0..6 of
 * group-pair l, the eighth sign makes their count even) and the scale s in bits 28..31; the
 * step is d * (0.5 + s) * 0.5. */
typedef struct {
    uint16_t d;
    uint8_t qs[3 * QK_K / 8];
} block_iq3_xxs;
static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs layout");

/* IQ3_S: the index is qs[8 ib + 2l + h] | bit (2l + h) of qh[ib] << 8, into quant_iq3s_grid
 * (magnitudes 1 .. 15); sign byte l is signs[4 ib + l] (8 free signs); the step is
 * d * (1 + 2 s), s nibble ib % 2 of scales[ib / 2]. */
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;
static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s layout");

extern const uint32_t quant_iq3xxs_grid[256];
extern const uint32_t quant_iq3s_grid[512];
/* IQ3_XXS's sign byte of a 7-bit field: bit 7 set when the field has an odd number of ones. */
static inline uint8_t quant_ksigns(uint32_t field) {
    return (uint8_t)((field & 127u) | (uint32_t)__builtin_parity(field & 127u) << 7);
}

/* The 2-bit grid types: a group of 8 weights is a point of a grid whose coordinates take three
 * magnitudes (quant_iq2_levels: 8, 25, 43), with a sign per weight, times the step of its scale.
 * The tables are ggml's iq2xxs_grid, iq2xs_grid and iq2s_grid (iq_grids.c, written from ggml's own
 * dequantizers by scripts/gen_iq_grids.py), each entry 8 two-bit codes: bits 2j, 2j + 1 the level
 * of weight j. Weight i of a 32-weight sub-block ib is weight i % 8 of group l = i % 32 / 8. A
 * step is d * (0.5 + s) * 0.25, s a 4-bit scale: exact, and so is step * level (no weight rounds).
 *
 * IQ2_XXS: per sub-block 8 bytes at qs[4 ib]: bytes 0..3 the groups' indices into
 * quant_iq2xxs_grid, then a word of 4 seven-bit sign fields (bits 7l .. 7l + 6, the eighth sign
 * of each group making their count even, as IQ3_XXS) and the sub-block's scale in bits 28..31. */
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs layout");

/* IQ2_XS: qs[4 ib + l] is a 9-bit index into quant_iq2xs_grid and the group's 7-bit sign field
 * above it (bits 9..15); scales[ib] holds a scale per 16 weights (groups 0-1 the low nibble,
 * groups 2-3 the high). */
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
} block_iq2_xs;
static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs layout");

/* IQ2_S: group l of sub-block ib has the index qs[4 ib + l] | bits 2l, 2l + 1 of qh[ib] << 8 into
 * quant_iq2s_grid and 8 free signs, byte qs[32 + 4 ib + l]; scales as IQ2_XS. */
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
} block_iq2_s;
static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s layout");

extern const uint16_t quant_iq2xxs_grid[256];
extern const uint16_t quant_iq2xs_grid[512];
extern const uint16_t quant_iq2s_grid[1024];
extern const uint8_t quant_iq2_levels[3];

/* The 1-bit grid types: a group of 8 weights is a point of quant_iq1s_grid (ggml's iq1s_grid,
 * 2048 points, codes as the IQ2 grids', code c the value c - 1: -1, 0 or 1) plus a delta of
 * +1/8 or -1/8, times a step d * (2 s + 1), s a 3-bit scale: weight = step * (g + delta), as
 * ggml computes it (g + delta exact, one rounding in the product).
 *
 * IQ1_S: group l of sub-block ib has the index qs[4 ib + l] | bits 3l .. 3l + 2 of qh[ib] << 8;
 * qh[ib] bits 12..14 are the sub-block's scale, bit 15 its delta's sign (set: -1/8). */
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} block_iq1_s;
static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s layout");

/* IQ1_M: no d field. Group l of sub-block ib has the index qs[4 ib + l] | a nibble of qh[2 ib +
 * l / 2] << 8 (bits 0..2 for even l, 4..6 for odd) and its own delta sign (bit 3 or 7 of the
 * same byte). The 16-bit word scales[ib / 2] (little-endian) holds four 3-bit scales, one per 16
 * weights: bits 6 (ib % 2) + 0..2 for groups 0-1 of sub-block ib, + 3..5 for groups 2-3; the top
 * nibbles of the four words are d's fp16 bits (word w's nibble is bits 4w .. 4w + 3 of d). */
typedef struct {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
} block_iq1_m;
static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m layout");

extern const uint16_t quant_iq1s_grid[2048];

/* MXFP4 (OCP Microscaling FP4): 32 weights, each an E2M1 float (1 sign, 2 exponent, 1 mantissa
 * bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6) times a shared power of two 2^(e - 127), e an E8M0 byte.
 * ggml holds the levels doubled as integers (quant_mxfp4_values: 0, 1, 2, 3, 4, 6, 8, 12 and
 * their negatives, level 8 a negative zero) and the scale halved: weight i = 2^(e - 128) *
 * values[level i], the levels as nibbles placed as in Q4_0. No weight rounds; below e = 3 the
 * weights are subnormal floats, which a GPU may flush to zero (no real file has them). */
typedef struct {
    uint8_t e;
    uint8_t qs[16];
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 layout");

/* ggml's kvalues_mxfp4, in level order. */
extern const int8_t quant_mxfp4_values[16];
/* 2^(e - 128), exactly (subnormal for e < 2): the scale an MXFP4 block's E8M0 byte stands for. */
float quant_e8m0_half(uint8_t e);

/* Q4_K: super-block of 256 = 8 sub-blocks of 32; 6-bit scales and mins packed in 12 bytes;
 * weight = d * sc * q - dmin * m with 4-bit q. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");

/* K-quant sub-block scales (Q4_K, Q5_K): the scale and min of sub-block j.
 *
 * Eight 6-bit scales sc[0..7] and eight 6-bit mins m[0..7] packed in 12 bytes:
 *
 *   byte 0..3  : bits 0-5 = sc[0..3],        bits 6-7 = high 2 bits of sc[4..7]
 *   byte 4..7  : bits 0-5 = m[0..3],         bits 6-7 = high 2 bits of m[4..7]
 *   byte 8..11 : bits 0-3 = low 4 of sc[4..7], bits 4-7 = low 4 of m[4..7]
 */
static inline void k_scale_min_get(const uint8_t s[K_SCALE_SIZE], int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q5_K: as Q4_K plus one high bit per weight in qh. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; weight = d * sc * (q - 32), q 6-bit split into
 * 4 low bits (ql) and 2 high bits (qh). */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

const char *qtype_name(enum qtype t); /* "Q4_K", "?" when unknown */
/* ggml's name for a type number it once had and removed from GGUF files (4 "Q4_2", 31
 * "Q4_0_4_4", ...), NULL for any other number: errors name what an old file holds. */
const char *qtype_removed_name(uint32_t t);
/* The types cinder computes with, by name, comma-separated ("F32, F16, ..."), into buf (cut
 * to n bytes): what an error about an unsupported tensor lists. Returns buf. */
const char *qtype_supported_names(char *buf, size_t n);
int qtype_from_name(const char *name, enum qtype *out); /* case-insensitive; 0 or -1 */
bool qtype_known(uint32_t t);                           /* a ggml type whose block size we know */
bool qtype_supported(enum qtype t);                     /* one of the types cinder computes with */
int64_t qtype_block_elems(enum qtype t);                /* weights per block (1 for float types) */
size_t qtype_block_bytes(enum qtype t);                 /* bytes per block */
/* Bytes of a row of n elements; 0 when the type is unknown or n is not a multiple of the
 * block size (callers treat 0 as an invalid row). */
size_t qtype_row_bytes(enum qtype t, int64_t n);

/* Row conversion. n must be a multiple of qtype_block_elems(t); t must be supported. */
void quant_dequantize_row(enum qtype t, const void *src, float *dst, int64_t n);
void quant_quantize_row(enum qtype t, const float *src, void *dst, int64_t n);
