/* Quant formats (runtime/gguf/quant.c):
 *   - the type table, checked against ggml's own traits;
 *   - hand-built blocks whose floats are worked out by hand here, so a layout error shows up
 *     without trusting any other code;
 *   - dequantization bit-identical to the real ggml (libggml-base.so) on thousands of random
 *     blocks, and each side's dequantizer reading the other side's quantized blocks;
 *   - round-trip error on random data at awkward shapes, against fixed bounds and against
 *     ggml's reference quantizer on the same data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/base/fp16.h"
#include "runtime/base/rng.h"
#include "runtime/gguf/quant.h"
#include "tests/ggml_oracle.h"

static const enum qtype supported[] = {
    QTYPE_F32,   QTYPE_F16,     QTYPE_BF16,   QTYPE_Q4_0,  QTYPE_Q4_1,  QTYPE_Q5_0,   QTYPE_Q5_1,   QTYPE_Q8_0,
    QTYPE_Q2_K,  QTYPE_Q3_K,    QTYPE_Q4_K,   QTYPE_Q5_K,  QTYPE_Q6_K,  QTYPE_IQ4_NL, QTYPE_IQ4_XS, QTYPE_IQ3_XXS,
    QTYPE_IQ3_S, QTYPE_IQ2_XXS, QTYPE_IQ2_XS, QTYPE_IQ2_S, QTYPE_IQ1_S, QTYPE_IQ1_M,  QTYPE_MXFP4};
enum { N_SUPPORTED = sizeof supported / sizeof supported[0] };
static const enum qtype blocked[] = {QTYPE_Q4_0,   QTYPE_Q4_1,   QTYPE_Q5_0,    QTYPE_Q5_1,  QTYPE_Q8_0,
                                     QTYPE_Q2_K,   QTYPE_Q3_K,   QTYPE_Q4_K,    QTYPE_Q5_K,  QTYPE_Q6_K,
                                     QTYPE_IQ4_NL, QTYPE_IQ4_XS, QTYPE_IQ3_XXS, QTYPE_IQ3_S, QTYPE_IQ2_XXS,
                                     QTYPE_IQ2_XS, QTYPE_IQ2_S,  QTYPE_IQ1_S,   QTYPE_IQ1_M, QTYPE_MXFP4};
enum { N_BLOCKED = sizeof blocked / sizeof blocked[0] };

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* ---- the type table ---- */

static void test_type_table(void **state) {
    (void)state;
    static const struct {
        enum qtype t;
        const char *name;
        int64_t elems;
        size_t bytes;
    } want[] = {
        {QTYPE_F32, "F32", 1, 4},           {QTYPE_F16, "F16", 1, 2},
        {QTYPE_Q4_0, "Q4_0", 32, 18},       {QTYPE_Q4_1, "Q4_1", 32, 20},
        {QTYPE_Q5_0, "Q5_0", 32, 22},       {QTYPE_Q5_1, "Q5_1", 32, 24},
        {QTYPE_Q8_0, "Q8_0", 32, 34},       {QTYPE_Q8_1, "Q8_1", 32, 36},
        {QTYPE_Q2_K, "Q2_K", 256, 84},      {QTYPE_Q3_K, "Q3_K", 256, 110},
        {QTYPE_Q4_K, "Q4_K", 256, 144},     {QTYPE_Q5_K, "Q5_K", 256, 176},
        {QTYPE_Q6_K, "Q6_K", 256, 210},     {QTYPE_Q8_K, "Q8_K", 256, 292},
        {QTYPE_BF16, "BF16", 1, 2},         {QTYPE_IQ2_XXS, "IQ2_XXS", 256, 66},
        {QTYPE_IQ2_XS, "IQ2_XS", 256, 74},  {QTYPE_IQ3_XXS, "IQ3_XXS", 256, 98},
        {QTYPE_IQ1_S, "IQ1_S", 256, 50},    {QTYPE_IQ4_NL, "IQ4_NL", 32, 18},
        {QTYPE_IQ3_S, "IQ3_S", 256, 110},   {QTYPE_IQ2_S, "IQ2_S", 256, 82},
        {QTYPE_IQ4_XS, "IQ4_XS", 256, 136}, {QTYPE_I8, "I8", 1, 1},
        {QTYPE_I16, "I16", 1, 2},           {QTYPE_I32, "I32", 1, 4},
        {QTYPE_I64, "I64", 1, 8},           {QTYPE_F64, "F64", 1, 8},
        {QTYPE_IQ1_M, "IQ1_M", 256, 56},    {QTYPE_TQ1_0, "TQ1_0", 256, 54},
        {QTYPE_TQ2_0, "TQ2_0", 256, 66},    {QTYPE_MXFP4, "MXFP4", 32, 17},
        {QTYPE_NVFP4, "NVFP4", 64, 36},     {QTYPE_Q1_0, "Q1_0", 128, 18},
        {QTYPE_Q2_0, "Q2_0", 64, 18},
    };
    int n_known = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        enum qtype t = want[i].t, back;
        assert_true(qtype_known((uint32_t)t));
        assert_string_equal(qtype_name(t), want[i].name);
        assert_int_equal(qtype_block_elems(t), want[i].elems);
        assert_int_equal(qtype_block_bytes(t), want[i].bytes);
        assert_int_equal(qtype_row_bytes(t, want[i].elems * 3), want[i].bytes * 3);
        assert_int_equal(qtype_from_name(want[i].name, &back), 0);
        assert_int_equal(back, t);
        char lower[12] = {0};
        for (size_t k = 0; want[i].name[k]; k++) lower[k] = (char)tolower((unsigned char)want[i].name[k]);
        assert_int_equal(qtype_from_name(lower, &back), 0);
        assert_int_equal(back, t);
    }
    for (uint32_t t = 0; t < QTYPE_COUNT + 10; t++) n_known += qtype_known(t);
    assert_int_equal(n_known, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < N_SUPPORTED; i++) assert_true(qtype_supported(supported[i]));
    int n_supported = 0;
    for (uint32_t t = 0; t < QTYPE_COUNT; t++) n_supported += qtype_supported((enum qtype)t);
    assert_int_equal(n_supported, N_SUPPORTED);

    enum qtype out = QTYPE_F32;
    assert_int_equal(qtype_from_name("Q4_K_M", &out), -1);
    assert_int_equal(qtype_from_name("", &out), -1);
    assert_int_equal(qtype_from_name(NULL, &out), -1);
    assert_string_equal(qtype_name((enum qtype)4), "?"); /* ggml's removed Q4_2 */
    assert_string_equal(qtype_removed_name(4), "Q4_2");
    assert_string_equal(qtype_removed_name(38), "IQ4_NL_8_8");
    assert_null(qtype_removed_name(QTYPE_Q4_K));
    assert_null(qtype_removed_name(1000));
    assert_string_equal(qtype_name((enum qtype)1000), "?");
    assert_false(qtype_known(4));
    assert_false(qtype_known(QTYPE_COUNT));
    assert_false(qtype_known(0xffffffffu));
    assert_int_equal(qtype_block_bytes((enum qtype)5), 0);
    assert_int_equal(qtype_row_bytes(QTYPE_Q4_K, 4096), 16 * 144);
    assert_int_equal(qtype_row_bytes(QTYPE_F16, 7), 14);
}

/* Every type we know has ggml's block size, byte size and (case aside) name, and every type
 * the oracle's ggml knows (below its GGML_TYPE_COUNT: the prebuilt checks no bounds) we know. */
static void test_type_table_vs_ggml(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    for (uint32_t t = 0; t < GGML_ORACLE_TYPE_COUNT; t++)
        if (g->blck_size((int)t) > 0 && !qtype_known(t))
            fail_msg("ggml type %u (%s) has no name in cinder", t, g->type_name((int)t));
    for (uint32_t t = 0; t < QTYPE_COUNT; t++) {
        if (!qtype_known(t)) continue;
        assert_int_equal(g->blck_size((int)t), qtype_block_elems((enum qtype)t));
        assert_int_equal(g->type_size((int)t), qtype_block_bytes((enum qtype)t));
        if (strcasecmp(g->type_name((int)t), qtype_name((enum qtype)t)) != 0)
            fail_msg("type %u: ggml calls it %s, we call it %s", t, g->type_name((int)t), qtype_name((enum qtype)t));
    }
}

/* ---- hand-built blocks ---- */

static void expect_floats(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s: element %d is %.9g, expected %.9g", what, i, got[i], want[i]);
}

static void test_hand_q8_0(void **state) {
    (void)state;
    block_q8_0 b[2];
    b[0].d = 0x3800; /* 0.5 */
    b[1].d = 0xc400; /* -4 */
    for (int i = 0; i < 32; i++) {
        b[0].qs[i] = (int8_t)(i * 8 - 128); /* -128, -120, ..., 120 */
        b[1].qs[i] = (int8_t)(i - 5);
    }
    float y[64], want[64];
    for (int i = 0; i < 32; i++) {
        want[i] = 0.5f * (float)(i * 8 - 128);
        want[32 + i] = -4.0f * (float)(i - 5);
    }
    quant_dequantize_row(QTYPE_Q8_0, b, y, 64);
    expect_floats(y, want, 64, "Q8_0");
    assert_true(y[0] == -64.0f && y[31] == 60.0f && y[32] == 20.0f && y[63] == -104.0f);
}

/* The Q4_K/Q5_K example below: d = 0.25, dmin = 0.5, and for sub-blocks 0..7
 *   sc = 1 2 3 4 17 33 50 63,  m = 0 5 10 63 16 31 47 1
 * packed by hand:
 *   bytes 0-3 : sc[0..3] | top two bits of sc[4..7] << 6 = 0x41 0x82 0xC3 0xC4
 *   bytes 4-7 : m[0..3]  | top two bits of m[4..7]  << 6 = 0x40 0x45 0x8A 0x3F
 *   bytes 8-11: low 4 bits of sc[4..7] | low 4 of m[4..7] << 4 = 0x01 0xF1 0xF2 0x1F */
static const int hand_sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
static const int hand_m[8] = {0, 5, 10, 63, 16, 31, 47, 1};
static const uint8_t hand_scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x45, 0x8A, 0x3F, 0x01, 0xF1, 0xF2, 0x1F};
/* qs byte 32*g + l holds (l + g) & 15 in its low nibble, (3l + g) & 15 in its high nibble */
static uint8_t hand_qs(int g, int l) { return (uint8_t)(((l + g) & 15) | (((3 * l + g) & 15) << 4)); }
/* so weight l of sub-block j (which lives in group g = j / 2) has 4-bit level: */
static int hand_nibble(int j, int l) { return j % 2 == 0 ? (l + j / 2) & 15 : (3 * l + j / 2) & 15; }

static void test_hand_q4_K(void **state) {
    (void)state;
    block_q4_K b;
    b.d = 0x3400;    /* 0.25 */
    b.dmin = 0x3800; /* 0.5 */
    memcpy(b.scales, hand_scales, 12);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b.qs[32 * g + l] = hand_qs(g, l);
    float y[256], want[256];
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++)
            want[32 * j + l] = 0.25f * (float)hand_sc[j] * (float)hand_nibble(j, l) - 0.5f * (float)hand_m[j];
    quant_dequantize_row(QTYPE_Q4_K, &b, y, 256);
    expect_floats(y, want, 256, "Q4_K");
    /* a few by hand: (sub-block, l) -> q -> 0.25*sc*q - 0.5*m */
    assert_true(y[0] == 0.0f);             /* (0,0): q 0 */
    assert_true(y[32 * 3 + 5] == -31.5f);  /* (3,5): q (15+1)&15 = 0, -0.5*63 */
    assert_true(y[32 * 6 + 7] == 101.5f);  /* (6,7): q 7+3 = 10, 0.25*50*10 - 0.5*47 */
    assert_true(y[32 * 7 + 4] == 235.75f); /* (7,4): q 12+3 = 15, 0.25*63*15 - 0.5*1 */
}

static void test_hand_q5_K(void **state) {
    (void)state;
    block_q5_K b;
    b.d = 0x3400;
    b.dmin = 0x3800;
    memcpy(b.scales, hand_scales, 12);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b.qs[32 * g + l] = hand_qs(g, l);
    for (int l = 0; l < 32; l++) b.qh[l] = (uint8_t)(0x5A ^ (l * 7)); /* bit j: 5th bit of sub-block j */
    float y[256], want[256];
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) {
            int q = hand_nibble(j, l) + 16 * ((b.qh[l] >> j) & 1);
            want[32 * j + l] = 0.25f * (float)hand_sc[j] * (float)q - 0.5f * (float)hand_m[j];
        }
    quant_dequantize_row(QTYPE_Q5_K, &b, y, 256);
    expect_floats(y, want, 256, "Q5_K");
    /* (6,7): qh[7] = 0x5A ^ 49 = 0x6B, bit 6 set: q = 10 + 16 = 26 -> 0.25*50*26 - 23.5 */
    assert_true(y[32 * 6 + 7] == 301.5f);
    /* (0,0): qh[0] = 0x5A, bit 0 clear: q = 0 -> 0 */
    assert_true(y[0] == 0.0f);
    /* (1,0): bit 1 of 0x5A set: q = (0 + 0)&15 + 16 = 16 -> 0.25*2*16 - 0.5*5 */
    assert_true(y[32] == 5.5f);
}

/* Q6_K: ql bytes 0x21 in the first 32 of each 64, 0x43 in the second 32; qh bytes 0xE4 in
 * the first half (bit pairs 0,1,2,3 from the bottom) and 0x1B in the second (3,2,1,0). So in
 * half h, quarter t the 6-bit level is
 *   h=0: t0 1|0<<4 = 1   t1 3|1<<4 = 19   t2 2|2<<4 = 34   t3 4|3<<4 = 52
 *   h=1: t0 1|3<<4 = 49  t1 3|2<<4 = 35   t2 2|1<<4 = 18   t3 4|0<<4 = 4
 * and y = 0.5 * scales[w/16] * (q - 32) with scales[k] = 9k - 70. */
static void test_hand_q6_K(void **state) {
    (void)state;
    static const int level[2][4] = {{1, 19, 34, 52}, {49, 35, 18, 4}};
    block_q6_K b;
    b.d = 0x3800;
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 64; l++) b.ql[64 * h + l] = l < 32 ? 0x21 : 0x43;
        for (int l = 0; l < 32; l++) b.qh[32 * h + l] = h ? 0x1B : 0xE4;
    }
    for (int k = 0; k < 16; k++) b.scales[k] = (int8_t)(9 * k - 70);
    float y[256], want[256];
    for (int w = 0; w < 256; w++)
        want[w] = 0.5f * (float)(9 * (w / 16) - 70) * (float)(level[w / 128][(w % 128) / 32] - 32);
    quant_dequantize_row(QTYPE_Q6_K, &b, y, 256);
    expect_floats(y, want, 256, "Q6_K");
    assert_true(y[0] == 1085.0f);   /* 0.5 * -70 * (1 - 32) */
    assert_true(y[40] == 338.0f);   /* sub-block 2 (scale -52), quarter 1: 0.5 * -52 * (19 - 32) */
    assert_true(y[255] == -910.0f); /* 0.5 * 65 * (4 - 32) */
}

static void test_hand_floats(void **state) {
    (void)state;
    const uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    const uint16_t bf[4] = {0x3f80, 0x4049, 0xc2f7, 0x0000};
    const float f[3] = {1.5f, -0.0f, 1e-30f};
    float y[4];
    quant_dequantize_row(QTYPE_F16, h, y, 4);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && y[2] == 65504.0f && y[3] == 0x1p-24f);
    quant_dequantize_row(QTYPE_BF16, bf, y, 4);
    assert_true(y[0] == 1.0f && y[1] == 3.140625f && y[2] == -123.5f && y[3] == 0.0f);
    quant_dequantize_row(QTYPE_F32, f, y, 3);
    assert_memory_equal(y, f, sizeof f);
    uint16_t out[3];
    quant_quantize_row(QTYPE_F16, f, out, 3);
    assert_true(out[0] == 0x3e00 && out[1] == 0x8000 && out[2] == 0x0000);
    quant_quantize_row(QTYPE_BF16, f, out, 3);
    assert_true(out[0] == 0x3fc0 && out[1] == 0x8000 && out[2] == 0x0da2);
}

/* The quantizer packs what the dequantizer unpacks: a Q4_K/Q5_K/Q6_K built from data that sits
 * exactly on a grid the format can hold comes back exactly. */
static void test_exact_grid(void **state) {
    (void)state;
    float x[512], y[512];
    rng r;
    rng_seed(&r, 7);
    /* Q6_K: x = 0.5 * sc * (q - 32) with the same scale across the row: every value is
     * representable; the quantizer must find it (or another exact representation). */
    for (int i = 0; i < 512; i++) x[i] = 0.25f * (float)((int)rng_below(&r, 64) - 32);
    for (int i = 0; i < 512; i += 16) x[i] = -8.0f; /* each sub-block reaches level -32 */
    uint8_t buf[2 * 210];
    quant_quantize_row(QTYPE_Q6_K, x, buf, 512);
    quant_dequantize_row(QTYPE_Q6_K, buf, y, 512);
    expect_floats(y, x, 512, "Q6_K exact grid");
    /* Q8_0: integers with amax 127 in each block */
    for (int i = 0; i < 512; i++) x[i] = (float)((int)rng_below(&r, 255) - 127);
    for (int i = 0; i < 512; i += 32) x[i] = 127;
    uint8_t b8[16 * 34];
    quant_quantize_row(QTYPE_Q8_0, x, b8, 512);
    quant_dequantize_row(QTYPE_Q8_0, b8, y, 512);
    expect_floats(y, x, 512, "Q8_0 exact grid");
}

/* IQ4_NL and IQ4_XS by hand. The table (ggml's kvalues_iq4nl):
 *   level  0    1    2   3   4   5   6   7  8  9 10 11 12 13 14  15
 *   value -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113
 * IQ4_NL, d = 0.5, qs[i] = i | (15 - i) << 4: weight i < 16 has level i, weight 16 + i level
 * 15 - i. IQ4_XS, d = -0.25, the same 16 bytes in every sub-block j and ls[j] = 32 + j - 4 (so
 * the sub-block's scale is d * (j - 4)): ls = 28 29 30 31 32 33 34 35 = 0x1C 0x1D 0x1E 0x1F
 * 0x20 0x21 0x22 0x23, low nibbles C D E F 0 1 2 3 pack as scales_l = 0xDC 0xFE 0x10 0x32 and
 * the high 2 bits 1 1 1 1 2 2 2 2 at bits 2j as scales_h = 0b10101010_01010101 = 0xAA55. */
static void test_hand_iq4(void **state) {
    (void)state;
    static const int v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    block_iq4_nl nl = {.d = 0x3800}; /* 0.5 */
    for (int i = 0; i < 16; i++) nl.qs[i] = (uint8_t)(i | (15 - i) << 4);
    float y[256], want[256];
    for (int i = 0; i < 16; i++) want[i] = 0.5f * (float)v[i], want[16 + i] = 0.5f * (float)v[15 - i];
    quant_dequantize_row(QTYPE_IQ4_NL, &nl, y, 32);
    expect_floats(y, want, 32, "IQ4_NL");
    assert_true(y[0] == -63.5f && y[15] == 56.5f && y[16] == 56.5f);
    block_iq4_xs xs = {.d = 0xb400, .scales_h = 0xAA55, .scales_l = {0xDC, 0xFE, 0x10, 0x32}}; /* d = -0.25 */
    for (int j = 0; j < 8; j++) memcpy(xs.qs + 16 * j, nl.qs, 16);
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 32; i++) want[32 * j + i] = -0.25f * (float)(j - 4) * (float)v[i < 16 ? i : 31 - i];
    quant_dequantize_row(QTYPE_IQ4_XS, &xs, y, 256);
    expect_floats(y, want, 256, "IQ4_XS");
    assert_true(y[0] == -127.0f && y[128] == 0.0f && y[255] == -0.25f * 3 * -127.0f);
}

/* The 3-bit grid types by hand: the layout of quant.h read without trusting the grids beyond
 * their first two entries (ggml's iq3xxs_grid starts 0x04040404, 0x04040414; iq3s_grid
 * 0x01010101, 0x01010103; every entry is checked against ggml's dequantizer on random blocks
 * below). IQ3_XXS sub-block 1, scale 3: step 1.0 * 3.5 * 0.5 = 1.75; its first group is grid
 * point 1 (20, 4, 4, 4), the second point 0; sign field 0 = 1: weight 0 negative, and the
 * odd count makes weight 7 negative too. */
static void test_hand_iq3(void **state) {
    (void)state;
    block_iq3_xxs xxs = {.d = 0x3c00}; /* 1.0 */
    xxs.qs[8] = 1;
    uint32_t w = 3u << 28 | 1u;
    memcpy(xxs.qs + 64 + 4, &w, 4);
    float y[256], want[256];
    for (int i = 0; i < 256; i++) want[i] = i < 32 ? 0.25f * 4 : 0; /* sub-blocks 0, 2..7: scale 0, step 0.25 */
    for (int i = 32; i < 64; i++) want[i] = 1.75f * 4;
    want[32] = -1.75f * 20, want[39] = -1.75f * 4;
    for (int i = 64; i < 256; i++) want[i] = 0.25f * 4;
    quant_dequantize_row(QTYPE_IQ3_XXS, &xxs, y, 256);
    expect_floats(y, want, 256, "IQ3_XXS");
    /* IQ3_S: d = 0.5; sub-block 3 (scale nibble 1 of scales[1] = 2: step 0.5 * 5 = 2.5), group 5
     * (pair 2, second half) is point 1 | 256 (qh bit 5) = 257, group 0 point 1: (3, 1, 1, 1);
     * sign byte 2 = 0x81: weights 16 and 23 negative. Everything else point 0 (1, 1, 1, 1), and
     * the other sub-blocks step 0.5 (scale 0) or, for sub-block 2, 0.5 * 1 too (nibble 0). */
    block_iq3_s s = {.d = 0x3800};
    s.scales[1] = 2u << 4;
    s.qs[24 + 0] = 1, s.qs[24 + 5] = 1, s.qh[3] = 1u << 5, s.signs[12 + 2] = 0x81;
    for (int i = 0; i < 256; i++) want[i] = 0.5f;
    for (int i = 96; i < 128; i++) want[i] = 2.5f;
    want[96] = 2.5f * 3;
    /* point 257's magnitudes, from the C table: the grid is not retyped here */
    for (int j = 0; j < 4; j++) want[96 + 20 + j] = 2.5f * (float)((quant_iq3s_grid[257] >> (8 * j)) & 0xFF);
    want[96 + 16] = -want[96 + 16], want[96 + 23] = -want[96 + 23];
    quant_dequantize_row(QTYPE_IQ3_S, &s, y, 256);
    expect_floats(y, want, 256, "IQ3_S");
    assert_true(quant_iq3xxs_grid[1] == 0x04040414u && quant_iq3s_grid[1] == 0x01010103u);
}

/* MXFP4 by hand. The doubled E2M1 levels (ggml's kvalues_mxfp4):
 *   level  0 1 2 3 4 5 6 7  8  9 10 11 12 13 14  15
 *   value  0 1 2 3 4 6 8 12 0 -1 -2 -3 -4 -6 -8 -12
 * e = 130 is 2^(130 - 128) = 4; qs[i] = i | (15 - i) << 4: weight i < 16 level i, 16 + i level
 * 15 - i. The scale bytes at the ends: 0 and 1 are the subnormals 2^-128 and 2^-127, 2 the
 * smallest normal 2^-126, 255 is 2^127 (ggml reads it so; E8M0's NaN). */
static void test_hand_mxfp4(void **state) {
    (void)state;
    static const int v[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    block_mxfp4 b = {.e = 130};
    for (int i = 0; i < 16; i++) b.qs[i] = (uint8_t)(i | (15 - i) << 4);
    float y[32], want[32];
    for (int i = 0; i < 16; i++) want[i] = 4.0f * (float)v[i], want[16 + i] = 4.0f * (float)v[15 - i];
    quant_dequantize_row(QTYPE_MXFP4, &b, y, 32);
    expect_floats(y, want, 32, "MXFP4");
    assert_true(y[7] == 48.0f && y[15] == -48.0f && y[16] == -48.0f && y[31] == 0.0f);
    assert_true(quant_e8m0_half(0) == ldexpf(1.0f, -128) && quant_e8m0_half(1) == ldexpf(1.0f, -127));
    assert_true(quant_e8m0_half(2) == ldexpf(1.0f, -126) && quant_e8m0_half(127) == 0.5f);
    assert_true(quant_e8m0_half(255) == ldexpf(1.0f, 127));
}

/* Data on the MXFP4 grid (a level times 2^k, each block reaching 12 * 2^k) comes back exactly,
 * at steps from 2^-20 to 2^20. */
static void test_exact_grid_mxfp4(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 10);
    float x[512], y[512];
    uint8_t buf[512];
    for (int i = 0; i < 512; i++) {
        float s = ldexpf(1.0f, (int)(i / 32) * 3 - 20);
        x[i] = s * (float)quant_mxfp4_values[i % 32 == 5 ? (i / 32 % 2 ? 7 : 15) : rng_below(&r, 16)];
    }
    quant_quantize_row(QTYPE_MXFP4, x, buf, 512);
    quant_dequantize_row(QTYPE_MXFP4, buf, y, 512);
    expect_floats(y, x, 512, "MXFP4 exact grid");
}

/* Data on the IQ4 grids (a table value times a step, each block reaching -127) comes back
 * exactly: the quantizer finds the step and every level. */
static void test_exact_grid_iq4(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 9);
    float x[512], y[512];
    uint8_t buf[512];
    for (int i = 0; i < 512; i++) x[i] = 0.375f * (float)quant_iq4nl_values[rng_below(&r, 16)];
    for (int i = 0; i < 512; i += 32) x[i] = 0.375f * -127.0f;
    quant_quantize_row(QTYPE_IQ4_NL, x, buf, 512);
    quant_dequantize_row(QTYPE_IQ4_NL, buf, y, 512);
    expect_floats(y, x, 512, "IQ4_NL exact grid");
    /* IQ4_XS: sub-block j at step sc[j] / 64, the largest |sc| 32 (so d = 1/64 and the scales are
     * sc[j], sign and all; a zero scale's sub-block is zeros) */
    static const int sc[8] = {-32, -20, -7, 0, 3, 11, 25, 31};
    for (int i = 0; i < 512; i++) {
        float s = (float)sc[(i / 32) % 8] / 64.0f;
        x[i] = i % 32 == 0 ? s * -127.0f : s * (float)quant_iq4nl_values[rng_below(&r, 16)];
    }
    quant_quantize_row(QTYPE_IQ4_XS, x, buf, 512);
    quant_dequantize_row(QTYPE_IQ4_XS, buf, y, 512);
    expect_floats(y, x, 512, "IQ4_XS exact grid");
}

/* ---- bit-exact against ggml ---- */

/* A random fp16 that is finite (any sign, normal or subnormal). */
static uint16_t rand_finite_half(rng *r) {
    for (;;) {
        uint16_t h = (uint16_t)rng_u64(r);
        if ((h & 0x7c00) != 0x7c00) return h;
    }
}

static void random_blocks(enum qtype t, uint8_t *buf, int64_t nblocks, rng *r) {
    size_t bs = qtype_block_bytes(t);
    for (size_t i = 0; i < bs * (size_t)nblocks; i++) buf[i] = (uint8_t)rng_u64(r);
    for (int64_t b = 0; b < nblocks; b++) {
        uint8_t *p = buf + (size_t)b * bs;
        uint16_t d = rand_finite_half(r), dmin = rand_finite_half(r);
        switch (t) {
        case QTYPE_Q4_0:
        case QTYPE_Q5_0:
        case QTYPE_Q8_0:
        case QTYPE_IQ4_NL:
        case QTYPE_IQ4_XS:
            memcpy(p, &d, 2); /* d first */
            break;
        case QTYPE_IQ3_XXS:
        case QTYPE_IQ3_S:
        case QTYPE_IQ2_XXS:
        case QTYPE_IQ2_XS:
        case QTYPE_IQ2_S:
        case QTYPE_IQ1_S:
        case QTYPE_IQ1_M: tu_set_grid_d(t, p, d); break;
        case QTYPE_Q4_1:
        case QTYPE_Q5_1:
            memcpy(p, &d, 2);
            memcpy(p + 2, &dmin, 2);
            break; /* d, m */
        case QTYPE_Q2_K:
            memcpy(&((block_q2_K *)p)->d, &d, 2);
            memcpy(&((block_q2_K *)p)->dmin, &dmin, 2);
            break;
        case QTYPE_Q3_K: memcpy(&((block_q3_K *)p)->d, &d, 2); break;
        case QTYPE_Q4_K:
            memcpy(&((block_q4_K *)p)->d, &d, 2);
            memcpy(&((block_q4_K *)p)->dmin, &dmin, 2);
            break;
        case QTYPE_Q5_K:
            memcpy(&((block_q5_K *)p)->d, &d, 2);
            memcpy(&((block_q5_K *)p)->dmin, &dmin, 2);
            break;
        case QTYPE_Q6_K: memcpy(&((block_q6_K *)p)->d, &d, 2); break;
        default: break;
        }
    }
}

static void expect_same_bits(const float *ours, const float *theirs, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (fp32_to_bits(ours[i]) != fp32_to_bits(theirs[i]))
            fail_msg("%s: element %lld: ours %.9g (%08x), ggml %.9g (%08x)", what, (long long)i, ours[i],
                     fp32_to_bits(ours[i]), theirs[i], fp32_to_bits(theirs[i]));
}

/* Random bytes with finite fp16 scales: every bit of every field is exercised. */
static void test_dequant_random_blocks_vs_ggml(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    rng r;
    rng_seed(&r, 42);
    enum { NB = 4096 };
    for (size_t k = 0; k < N_BLOCKED; k++) {
        enum qtype t = blocked[k];
        int64_t n = NB * qtype_block_elems(t);
        uint8_t *buf = xmalloc(qtype_row_bytes(t, n));
        float *a = xmalloc((size_t)n * sizeof *a), *b = xmalloc((size_t)n * sizeof *b);
        for (int rep = 0; rep < 2; rep++) {
            random_blocks(t, buf, NB, &r);
            quant_dequantize_row(t, buf, a, n);
            ggml_deq(g, t)(buf, b, n);
            expect_same_bits(a, b, n, qtype_name(t));
        }
        /* odd block counts, row by row, as the CPU reference calls it */
        for (int64_t nb = 1; nb <= 7; nb += 3) {
            int64_t m = nb * qtype_block_elems(t);
            random_blocks(t, buf, nb, &r);
            quant_dequantize_row(t, buf, a, m);
            ggml_deq(g, t)(buf, b, m);
            expect_same_bits(a, b, m, qtype_name(t));
        }
        print_message("%s: %d random blocks bit-identical to ggml\n", qtype_name(t), 2 * NB + 11);
        free(buf);
        free(a);
        free(b);
    }
}

/* F16 and BF16 rows: every 16-bit pattern (NaN included) dequantizes to ggml's bits. */
static void test_dequant_halves_vs_ggml(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    static uint16_t h[65536];
    static float a[65536], b[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    quant_dequantize_row(QTYPE_F16, h, a, 65536);
    g->fp16_to_fp32_row(h, b, 65536);
    expect_same_bits(a, b, 65536, "F16");
    quant_dequantize_row(QTYPE_BF16, h, a, 65536);
    g->bf16_to_fp32_row(h, b, 65536);
    expect_same_bits(a, b, 65536, "BF16");
}

/* ---- random data ---- */

enum dist {
    DIST_NORMAL,
    DIST_OUTLIERS,
    DIST_UNIFORM,
    DIST_NEAR_ONE,
    DIST_POSITIVE,
    DIST_SCALED,
    DIST_SPARSE,
    DIST_LLM,
    DIST_TINY,
    N_DIST
};
static const char *const dist_names[N_DIST] = {"normal",       "outliers", "uniform",   "near-one", "positive",
                                               "block-scaled", "sparse",   "llm-scale", "tiny"};

static void fill(float *x, int64_t n, enum dist d, rng *r) {
    float block_scale = 1;
    for (int64_t i = 0; i < n; i++) {
        float z = rng_normal(r);
        switch (d) {
        case DIST_NORMAL: x[i] = z; break;
        case DIST_OUTLIERS: x[i] = rng_below(r, 64) == 0 ? 8 * z : z; break;
        case DIST_UNIFORM: x[i] = 2 * rng_f32(r) - 1; break;
        case DIST_NEAR_ONE: x[i] = 1 + 0.1f * z; break; /* norm weights */
        case DIST_POSITIVE: x[i] = fabsf(z); break;
        case DIST_SCALED: /* each 32 values at their own scale, 1e-3 .. 1e3 */
            if (i % 32 == 0) block_scale = powf(10.0f, 6 * rng_f32(r) - 3);
            x[i] = block_scale * z;
            break;
        case DIST_SPARSE: x[i] = rng_below(r, 10) == 0 ? z : 0; break;
        /* typical LLM weights: K-quant scales d fall among the fp16 subnormals */
        case DIST_LLM: x[i] = 0.02f * z; break;
        case DIST_TINY: x[i] = 1e-4f * z; break;
        default: break;
        }
    }
}

/* Rows of awkward lengths and counts for type t (lengths multiples of its block size). */
typedef struct shape {
    int64_t n, rows;
} shape;
static bool slow_quantizer(enum qtype t) {
    switch (t) {
    case QTYPE_IQ3_XXS:
    case QTYPE_IQ3_S:
    case QTYPE_IQ2_XXS:
    case QTYPE_IQ2_XS:
    case QTYPE_IQ2_S:
    case QTYPE_IQ1_S:
    case QTYPE_IQ1_M: return true;
    default: return false;
    }
}

static int shapes_for(enum qtype t, shape out[5]) {
    int64_t be = qtype_block_elems(t);
    if (be == 1) {
        static const shape s[] = {{1, 1}, {7, 3}, {1000, 7}, {4099, 13}, {2, 1001}};
        memcpy(out, s, sizeof s);
        return 5;
    }
    static const int64_t k_blocks[] = {1, 3, 11, 16, 43}, q8_blocks[] = {1, 3, 37, 125, 344};
    static const int64_t rows[] = {1, 3, 7, 13, 5};
    for (int i = 0; i < 5; i++) out[i] = (shape){(be == QK_K ? k_blocks : q8_blocks)[i] * be, rows[i]};
    /* the grid types' quantizers (ours and ggml's) run at 0.002-0.1 Mweights/s: 119 blocks of
     * them, not 510 (CI time), the same awkward row lengths */
    if (slow_quantizer(t)) {
        out[3].rows = 2;
        return 4;
    }
    return 5;
}

typedef struct errstat {
    double se, ss;
} errstat; /* sum of squared errors, of squared values */
static double rel_rmse(errstat e) { return e.ss > 0 ? sqrt(e.se / e.ss) : sqrt(e.se); }
static void accumulate(errstat *e, const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - x[i];
        e->se += d * d;
        e->ss += (double)x[i] * x[i];
    }
}

/* Quantizes every row of every shape both ways; returns our error and (for the block types)
 * ggml's reference quantizer's error on the same data. Checks on the way that ggml's
 * dequantizer reads our blocks exactly as ours does, and ours reads ggml's exactly as ggml. */
static void round_trip(enum qtype t, enum dist d, uint64_t seed, errstat *ours, errstat *theirs) {
    const ggml_oracle *g = ggml_oracle_get();
    rng r;
    rng_seed(&r, seed);
    shape sh[5];
    int ns = shapes_for(t, sh);
    *ours = *theirs = (errstat){0, 0};
    for (int s = 0; s < ns; s++) {
        int64_t n = sh[s].n;
        size_t rb = qtype_row_bytes(t, n);
        float *x = xmalloc((size_t)n * sizeof *x), *y = xmalloc((size_t)n * sizeof *y);
        float *y2 = xmalloc((size_t)n * sizeof *y2);
        uint8_t *q = xmalloc(rb);
        for (int64_t row = 0; row < sh[s].rows; row++) {
            fill(x, n, d, &r);
            quant_quantize_row(t, x, q, n);
            quant_dequantize_row(t, q, y, n);
            for (int64_t i = 0; i < n; i++)
                if (!isfinite(y[i]))
                    fail_msg("%s %s: non-finite output %g at %lld", qtype_name(t), dist_names[d], y[i], (long long)i);
            accumulate(ours, x, y, n);
            if (!ggml_quant(g, t)) continue;
            ggml_deq(g, t)(q, y2, n);
            expect_same_bits(y, y2, n, "ggml dequantizing our blocks");
            ggml_quant(g, t)(x, q, n);
            ggml_deq(g, t)(q, y2, n);
            quant_dequantize_row(t, q, y, n);
            expect_same_bits(y, y2, n, "ours dequantizing ggml's blocks");
            accumulate(theirs, x, y2, n);
        }
        free(x);
        free(y);
        free(y2);
        free(q);
    }
}

/* Error bounds on normal data (relative RMSE = ||dequant - x|| / ||x||). Measured values are
 * in docs/QUANTS.md; the bounds leave a modest margin above them. */
static double normal_bound(enum qtype t) {
    switch (t) {
    case QTYPE_F32: return 0;
    case QTYPE_F16: return 2.5e-4;    /* measured 2.09e-4 */
    case QTYPE_BF16: return 2.0e-3;   /* 1.67e-3 */
    case QTYPE_Q8_0: return 6.2e-3;   /* 5.37e-3 */
    case QTYPE_Q6_K: return 1.9e-2;   /* 1.65e-2 */
    case QTYPE_Q5_K: return 4.0e-2;   /* 3.44e-2 */
    case QTYPE_Q4_K: return 8.0e-2;   /* 6.99e-2 */
    case QTYPE_Q5_1: return 3.8e-2;   /* 3.32e-2 */
    case QTYPE_Q5_0: return 4.5e-2;   /* 3.98e-2 */
    case QTYPE_Q4_1: return 7.8e-2;   /* 6.93e-2 */
    case QTYPE_Q4_0: return 9.0e-2;   /* 8.11e-2 */
    case QTYPE_Q3_K: return 1.6e-1;   /* 1.43e-1 */
    case QTYPE_Q2_K: return 2.9e-1;   /* 2.63e-1 */
    case QTYPE_IQ4_NL: return 8.0e-2; /* 7.31e-2 */
    case QTYPE_IQ4_XS: return 8.0e-2; /* 7.39e-2 */
    case QTYPE_IQ3_XXS: return 0.19;  /* 0.176 (ggml ref without an imatrix 0.213) */
    case QTYPE_IQ3_S: return 0.14;    /* 0.129 (ggml ref 0.166) */
    case QTYPE_IQ2_XXS: return 0.35;  /* 0.328 (ggml with a flat imatrix 0.344) */
    case QTYPE_IQ2_XS: return 0.30;   /* 0.284 (0.299) */
    case QTYPE_IQ2_S: return 0.25;    /* 0.238 (0.248) */
    case QTYPE_IQ1_S: return 0.46;    /* 0.446 (0.485) */
    case QTYPE_IQ1_M: return 0.43;    /* 0.414 (0.451) */
    case QTYPE_MXFP4: return 0.12;    /* 0.112 (ggml ref 0.116) */
    default: return 0;
    }
}

static void test_round_trip_normal(void **state) {
    (void)state;
    for (size_t k = 0; k < N_SUPPORTED; k++) {
        enum qtype t = supported[k];
        errstat ours, theirs;
        round_trip(t, DIST_NORMAL, 100 + k, &ours, &theirs);
        double e = rel_rmse(ours);
        if (theirs.ss > 0)
            print_message("%-5s normal: rel RMSE %.5f (ggml ref %.5f, ratio %.3f), bound %.5f\n", qtype_name(t), e,
                          rel_rmse(theirs), e / rel_rmse(theirs), normal_bound(t));
        else print_message("%-5s normal: rel RMSE %.3g, bound %.3g\n", qtype_name(t), e, normal_bound(t));
        if (!(e <= normal_bound(t))) fail_msg("%s: rel RMSE %g above bound %g", qtype_name(t), e, normal_bound(t));
    }
}

/* On every distribution our quantizer is within 1.1x of ggml's reference quantizer. */
static void test_round_trip_vs_ggml(void **state) {
    (void)state;
    for (size_t k = 0; k < N_BLOCKED; k++) {
        enum qtype t = blocked[k];
        for (int d = 0; d < N_DIST; d++) {
            errstat ours, theirs;
            round_trip(t, (enum dist)d, 1000 + 10 * k + (uint64_t)d, &ours, &theirs);
            double a = rel_rmse(ours), b = rel_rmse(theirs);
            print_message("%-5s %-12s: rel RMSE %.5f, ggml ref %.5f, ratio %.3f\n", qtype_name(t), dist_names[d], a, b,
                          a / b);
            if (!(a <= 1.1 * b))
                fail_msg("%s %s: our error %g is above 1.1x ggml's %g", qtype_name(t), dist_names[d], a, b);
        }
    }
}

/* Degenerate rows: all zeros come back as exact zeros, constants come back close, and
 * extreme or non-finite inputs never produce non-finite output from finite input. */
static void test_degenerate(void **state) {
    (void)state;
    enum { N = 512 };
    float x[N], y[N];
    uint8_t q[N * 4];
    for (size_t k = 0; k < N_SUPPORTED; k++) {
        enum qtype t = supported[k];
        memset(x, 0, sizeof x);
        quant_quantize_row(t, x, q, N);
        quant_dequantize_row(t, q, y, N);
        for (int i = 0; i < N; i++) assert_true(y[i] == 0.0f);
        static const float consts[] = {0.37f, -1.5f, 0.05f, -250.0f};
        for (size_t c = 0; c < sizeof consts / sizeof consts[0]; c++) {
            for (int i = 0; i < N; i++) x[i] = consts[c];
            quant_quantize_row(t, x, q, N);
            quant_dequantize_row(t, q, y, N);
            /* 0.05 puts K-quant d among fp16 subnormals; MXFP4 has 2 significant bits (0.05 -> 0.046875) */
            double e = tu_rel_l2(y, x, N), tol = t == QTYPE_BF16 ? 4e-3 : t == QTYPE_MXFP4 ? 6.5e-2 : 2e-3;
            if (!(e < tol)) fail_msg("%s constant %g: rel error %g", qtype_name(t), consts[c], e);
        }
        /* one spike among zeros */
        memset(x, 0, sizeof x);
        x[77] = 100.0f;
        quant_quantize_row(t, x, q, N);
        quant_dequantize_row(t, q, y, N);
        bool iq1 = t == QTYPE_IQ1_S || t == QTYPE_IQ1_M;
        if (t == QTYPE_IQ3_XXS || t == QTYPE_IQ3_S || t == QTYPE_IQ2_XXS || t == QTYPE_IQ2_XS || t == QTYPE_IQ2_S ||
            iq1) {
            /* no zero in the grids and one step per 32 (16 for IQ2_XS, IQ2_S, IQ1_M): the least-squares fit puts the spike near
             * 89 and its sub-block-mates at its step times the smallest magnitude, other
             * sub-blocks of its super-block at d times that; other super-blocks are exact zeros.
             * The error is held to ggml's own quantizer's on the same row. */
            float y2[N];
            uint8_t q2[N * 4];
            ggml_quant(ggml_oracle_get(), t)(x, q2, N);
            quant_dequantize_row(t, q2, y2, N);
            double ours = tu_rel_l2(y, x, N), theirs = tu_rel_l2(y2, x, N);
            if (!(ours <= 1.1 * theirs)) fail_msg("%s spike: rel error %g, ggml's %g", qtype_name(t), ours, theirs);
            /* the IQ2 grids' top level is only 43 / 8 of their least (IQ1's 9 / 1, the delta), so the
             * spike's 31 group-mates (all at the least level, one step for the 32) pull the
             * least-squares step down to about half the spike's: a smaller total error than
             * ggml's, which keeps the spike near 100 */
            bool low = t == QTYPE_IQ2_XXS || t == QTYPE_IQ2_XS || t == QTYPE_IQ2_S || iq1;
            print_message("%s spike: %g (ours rel error %g, ggml's %g)\n", qtype_name(t), y[77], ours, theirs);
            if (!(y[77] > (low ? 40.0f : 80.0f) && y[77] < 120.0f)) fail_msg("%s spike: %g", qtype_name(t), y[77]);
            for (int i = 0; i < N; i++)
                if (i / QK_K != 77 / QK_K) assert_true(y[i] == 0.0f);
        } else {
            assert_true(fabsf(y[77] - 100.0f) < (t == QTYPE_MXFP4 ? 4.5f : 0.5f)); /* MXFP4's nearest: 96 */
            /* the IQ4 table has no zero: the spike's block-mates come back as its step times 1 (under 1) */
            bool no_zero = t == QTYPE_IQ4_NL || t == QTYPE_IQ4_XS;
            for (int i = 0; i < N; i++)
                if (i != 77) assert_true(fabsf(y[i]) < (no_zero && i / 32 == 77 / 32 ? 1.0f : 1e-3f));
        }
        /* huge and tiny magnitudes stay finite in the block formats */
        if (qtype_block_elems(t) > 1) {
            static const float mags[] = {1e-30f, 1e-7f, 1e6f, 1e30f};
            rng r;
            rng_seed(&r, 3);
            for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++) {
                for (int i = 0; i < N; i++) x[i] = mags[m] * rng_normal(&r);
                quant_quantize_row(t, x, q, N);
                quant_dequantize_row(t, q, y, N);
                for (int i = 0; i < N; i++) assert_true(isfinite(y[i]));
            }
            /* NaN and inf in the input: no crash, no sanitizer report (the output is undefined) */
            for (int i = 0; i < N; i++) x[i] = rng_normal(&r);
            x[5] = NAN;
            x[300] = INFINITY;
            x[301] = -INFINITY;
            quant_quantize_row(t, x, q, N);
            quant_dequantize_row(t, q, y, N);
        }
    }
}

/* Quantizing is deterministic and writes exactly qtype_row_bytes (ASan checks the bound). */
static void test_quantize_bounds_and_determinism(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 11);
    for (size_t k = 0; k < N_SUPPORTED; k++) {
        enum qtype t = supported[k];
        int64_t n = 3 * (qtype_block_elems(t) > 1 ? qtype_block_elems(t) : 5);
        size_t rb = qtype_row_bytes(t, n);
        float *x = xmalloc((size_t)n * sizeof *x);
        uint8_t *a = xmalloc(rb), *b = xmalloc(rb);
        fill(x, n, DIST_NORMAL, &r);
        quant_quantize_row(t, x, a, n);
        quant_quantize_row(t, x, b, n);
        assert_memory_equal(a, b, rb);
        free(x);
        free(a);
        free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_type_table_vs_ggml),
        cmocka_unit_test(test_hand_q8_0),
        cmocka_unit_test(test_hand_q4_K),
        cmocka_unit_test(test_hand_q5_K),
        cmocka_unit_test(test_hand_q6_K),
        cmocka_unit_test(test_hand_floats),
        cmocka_unit_test(test_exact_grid),
        cmocka_unit_test(test_hand_iq4),
        cmocka_unit_test(test_exact_grid_iq4),
        cmocka_unit_test(test_hand_iq3),
        cmocka_unit_test(test_hand_mxfp4),
        cmocka_unit_test(test_exact_grid_mxfp4),
        cmocka_unit_test(test_dequant_random_blocks_vs_ggml),
        cmocka_unit_test(test_dequant_halves_vs_ggml),
        cmocka_unit_test(test_round_trip_normal),
        cmocka_unit_test(test_round_trip_vs_ggml),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_quantize_bounds_and_determinism),
    };
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER")); /* e.g. "*degenerate*" */
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
