/* shaders/get_rows.comp against runtime/gguf/quant.c: random tables of every supported type
 * (quantized by tu_quantize_row), gathered at random ids (repeats and out-of-range ids
 * included) and compared with quant_dequantize_row of the same rows. Also pins
 * shaders/quant_blocks.glsl to quant.h byte for byte, the push block to its C struct, and
 * runs a table split over several parts (one dispatch per part). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/gguf/quant.h"
#include "runtime/vk/op_get_rows.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

/* --- layouts --- */

/* Value of `const uint NAME = V;` in the GLSL text; fails the test when absent. */
static long glsl_const(const char *text, const char *name) {
    char pat[96];
    snprintf(pat, sizeof pat, "const uint %s = ", name);
    const char *p = strstr(text, pat);
    if (!p) fail_msg("quant_blocks.glsl lacks %s", name);
    return strtol(p + strlen(pat), NULL, 0); /* decimal, or 0x hex */
}

static void test_quant_blocks_glsl_matches_quant_h(void **state) {
    (void)state;
    char *t = tu_read_file(tu_src_path("shaders/quant_blocks.glsl"), NULL);
    assert_non_null(t);
    const struct {
        const char *name;
        long want;
    } pins[] = {
        {"QTYPE_F32", QTYPE_F32},
        {"QTYPE_F16", QTYPE_F16},
        {"QTYPE_BF16", QTYPE_BF16},
        {"QTYPE_Q8_0", QTYPE_Q8_0},
        {"QTYPE_Q4_K", QTYPE_Q4_K},
        {"QTYPE_Q5_K", QTYPE_Q5_K},
        {"QTYPE_Q6_K", QTYPE_Q6_K},
        {"QK8_0", QK8_0},
        {"QK_K", QK_K},
        {"K_SCALE_SIZE", K_SCALE_SIZE},
        {"Q8_0_BYTES", sizeof(block_q8_0)},
        {"Q8_0_D", offsetof(block_q8_0, d)},
        {"Q8_0_QS", offsetof(block_q8_0, qs)},
        {"Q4_K_BYTES", sizeof(block_q4_K)},
        {"Q4_K_D", offsetof(block_q4_K, d)},
        {"Q4_K_DMIN", offsetof(block_q4_K, dmin)},
        {"Q4_K_SCALES", offsetof(block_q4_K, scales)},
        {"Q4_K_QS", offsetof(block_q4_K, qs)},
        {"Q5_K_BYTES", sizeof(block_q5_K)},
        {"Q5_K_D", offsetof(block_q5_K, d)},
        {"Q5_K_DMIN", offsetof(block_q5_K, dmin)},
        {"Q5_K_SCALES", offsetof(block_q5_K, scales)},
        {"Q5_K_QH", offsetof(block_q5_K, qh)},
        {"Q5_K_QS", offsetof(block_q5_K, qs)},
        {"Q6_K_BYTES", sizeof(block_q6_K)},
        {"Q6_K_QL", offsetof(block_q6_K, ql)},
        {"Q6_K_QH", offsetof(block_q6_K, qh)},
        {"Q6_K_SCALES", offsetof(block_q6_K, scales)},
        {"Q6_K_D", offsetof(block_q6_K, d)},
        {"QTYPE_Q4_0", QTYPE_Q4_0},
        {"QTYPE_Q4_1", QTYPE_Q4_1},
        {"QTYPE_Q5_0", QTYPE_Q5_0},
        {"QTYPE_Q5_1", QTYPE_Q5_1},
        {"QTYPE_Q2_K", QTYPE_Q2_K},
        {"QTYPE_Q3_K", QTYPE_Q3_K},
        {"Q4_0_BYTES", sizeof(block_q4_0)},
        {"Q4_0_D", offsetof(block_q4_0, d)},
        {"Q4_0_QS", offsetof(block_q4_0, qs)},
        {"Q4_1_BYTES", sizeof(block_q4_1)},
        {"Q4_1_D", offsetof(block_q4_1, d)},
        {"Q4_1_M", offsetof(block_q4_1, m)},
        {"Q4_1_QS", offsetof(block_q4_1, qs)},
        {"Q5_0_BYTES", sizeof(block_q5_0)},
        {"Q5_0_D", offsetof(block_q5_0, d)},
        {"Q5_0_QH", offsetof(block_q5_0, qh)},
        {"Q5_0_QS", offsetof(block_q5_0, qs)},
        {"Q5_1_BYTES", sizeof(block_q5_1)},
        {"Q5_1_D", offsetof(block_q5_1, d)},
        {"Q5_1_M", offsetof(block_q5_1, m)},
        {"Q5_1_QH", offsetof(block_q5_1, qh)},
        {"Q5_1_QS", offsetof(block_q5_1, qs)},
        {"Q2_K_BYTES", sizeof(block_q2_K)},
        {"Q2_K_SCALES", offsetof(block_q2_K, scales)},
        {"Q2_K_QS", offsetof(block_q2_K, qs)},
        {"Q2_K_D", offsetof(block_q2_K, d)},
        {"Q2_K_DMIN", offsetof(block_q2_K, dmin)},
        {"Q3_K_BYTES", sizeof(block_q3_K)},
        {"Q3_K_HMASK", offsetof(block_q3_K, hmask)},
        {"Q3_K_QS", offsetof(block_q3_K, qs)},
        {"Q3_K_SCALES", offsetof(block_q3_K, scales)},
        {"Q3_K_D", offsetof(block_q3_K, d)},
        {"QTYPE_IQ4_NL", QTYPE_IQ4_NL},
        {"QTYPE_IQ4_XS", QTYPE_IQ4_XS},
        {"IQ4_NL_BYTES", sizeof(block_iq4_nl)},
        {"IQ4_NL_D", offsetof(block_iq4_nl, d)},
        {"IQ4_NL_QS", offsetof(block_iq4_nl, qs)},
        {"IQ4_XS_BYTES", sizeof(block_iq4_xs)},
        {"IQ4_XS_D", offsetof(block_iq4_xs, d)},
        {"IQ4_XS_SCALES_H", offsetof(block_iq4_xs, scales_h)},
        {"IQ4_XS_SCALES_L", offsetof(block_iq4_xs, scales_l)},
        {"IQ4_XS_QS", offsetof(block_iq4_xs, qs)},
        {"QTYPE_IQ3_XXS", QTYPE_IQ3_XXS},
        {"QTYPE_IQ3_S", QTYPE_IQ3_S},
        {"IQ3_XXS_BYTES", sizeof(block_iq3_xxs)},
        {"IQ3_XXS_D", offsetof(block_iq3_xxs, d)},
        {"IQ3_XXS_QS", offsetof(block_iq3_xxs, qs)},
        {"IQ3_XXS_SS", offsetof(block_iq3_xxs, qs) + QK_K / 4},
        {"IQ3_S_BYTES", sizeof(block_iq3_s)},
        {"IQ3_S_D", offsetof(block_iq3_s, d)},
        {"IQ3_S_QS", offsetof(block_iq3_s, qs)},
        {"IQ3_S_QH", offsetof(block_iq3_s, qh)},
        {"IQ3_S_SIGNS", offsetof(block_iq3_s, signs)},
        {"IQ3_S_SCALES", offsetof(block_iq3_s, scales)},
        {"QTYPE_IQ2_XXS", QTYPE_IQ2_XXS},
        {"QTYPE_IQ2_XS", QTYPE_IQ2_XS},
        {"QTYPE_IQ2_S", QTYPE_IQ2_S},
        {"IQ2_LEVELS", quant_iq2_levels[0] | quant_iq2_levels[1] << 8 | quant_iq2_levels[2] << 16},
        {"IQ2_XXS_BYTES", sizeof(block_iq2_xxs)},
        {"IQ2_XXS_QS", offsetof(block_iq2_xxs, qs)},
        {"IQ2_XS_BYTES", sizeof(block_iq2_xs)},
        {"IQ2_XS_QS", offsetof(block_iq2_xs, qs)},
        {"IQ2_XS_SCALES", offsetof(block_iq2_xs, scales)},
        {"IQ2_S_BYTES", sizeof(block_iq2_s)},
        {"IQ2_S_QS", offsetof(block_iq2_s, qs)},
        {"IQ2_S_SIGNS", offsetof(block_iq2_s, qs) + QK_K / 8},
        {"IQ2_S_QH", offsetof(block_iq2_s, qh)},
        {"IQ2_S_SCALES", offsetof(block_iq2_s, scales)},
        {"QTYPE_IQ1_S", QTYPE_IQ1_S},
        {"QTYPE_IQ1_M", QTYPE_IQ1_M},
        {"IQ1_S_BYTES", sizeof(block_iq1_s)},
        {"IQ1_S_QS", offsetof(block_iq1_s, qs)},
        {"IQ1_S_QH", offsetof(block_iq1_s, qh)},
        {"IQ1_M_BYTES", sizeof(block_iq1_m)},
        {"IQ1_M_QS", offsetof(block_iq1_m, qs)},
        {"IQ1_M_QH", offsetof(block_iq1_m, qh)},
        {"IQ1_M_SCALES", offsetof(block_iq1_m, scales)},
        {"QTYPE_MXFP4", QTYPE_MXFP4},
        {"MXFP4_BYTES", sizeof(block_mxfp4)},
        {"MXFP4_E", offsetof(block_mxfp4, e)},
        {"MXFP4_QS", offsetof(block_mxfp4, qs)},
    };
    for (size_t i = 0; i < sizeof pins / sizeof *pins; i++)
        if (glsl_const(t, pins[i].name) != pins[i].want)
            fail_msg("%s: GLSL %ld, C %ld", pins[i].name, glsl_const(t, pins[i].name), pins[i].want);
    /* the IQ4 table, value by value */
    const char *pat = "const int IQ4NL_VALUES[16] = int[16](", *p = strstr(t, pat);
    if (!p) fail_msg("quant_blocks.glsl lacks the IQ4NL_VALUES table");
    p += strlen(pat);
    for (int i = 0; i < 16; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v != quant_iq4nl_values[i])
            fail_msg("IQ4NL_VALUES[%d]: GLSL %ld, C %d", i, v, quant_iq4nl_values[i]);
        p = end + 1; /* past the comma */
    }
    free(t);
    /* the IQ grids, entry by entry (shaders/iq_grids.glsl; the C tables are ggml's: test_quant);
     * the IQ2 and IQ1 tables hold two 16-bit entries a word, entry 2w in the low half */
    t = tu_read_file(tu_src_path("shaders/iq_grids.glsl"), NULL);
    assert_non_null(t);
    const struct {
        const char *pat;
        const uint32_t *c32;
        const uint16_t *c16;
        int n;
    } grids[] = {{"uint IQ3XXS_GRID[256] = uint[256](", quant_iq3xxs_grid, NULL, 256},
                 {"uint IQ3S_GRID[512] = uint[512](", quant_iq3s_grid, NULL, 512},
                 {"uint IQ2XXS_GRID[128] = uint[128](", NULL, quant_iq2xxs_grid, 128},
                 {"uint IQ2XS_GRID[256] = uint[256](", NULL, quant_iq2xs_grid, 256},
                 {"uint IQ2S_GRID[512] = uint[512](", NULL, quant_iq2s_grid, 512},
                 {"uint IQ1S_GRID[1024] = uint[1024](", NULL, quant_iq1s_grid, 1024}};
    for (size_t g = 0; g < sizeof grids / sizeof *grids; g++) {
        p = strstr(t, grids[g].pat);
        if (!p) fail_msg("iq_grids.glsl lacks %s", grids[g].pat);
        p += strlen(grids[g].pat);
        for (int i = 0; i < grids[g].n; i++) {
            char *end;
            unsigned long v = strtoul(p, &end, 16);
            uint32_t want = grids[g].c32 ? grids[g].c32[i]
                                         : (uint32_t)grids[g].c16[2 * i] | (uint32_t)grids[g].c16[2 * i + 1] << 16;
            if (end == p || v != want) fail_msg("%s word %d: GLSL %#lx, C %#x", grids[g].pat, i, v, want);
            p = end + 1;
        }
    }
    free(t);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    const uint32_t want[] = {offsetof(cvk_get_rows_push, n),         offsetof(cvk_get_rows_push, row_bytes),
                             offsetof(cvk_get_rows_push, row0),      offsetof(cvk_get_rows_push, rows),
                             offsetof(cvk_get_rows_push, n_rows),    offsetof(cvk_get_rows_push, n_ids),
                             offsetof(cvk_get_rows_push, dst_stride)};
    size_t checked = 0; /* every type's module */
    for (size_t k = 0; k < cinder_spv_all_count; k++) {
        const cinder_spv_module *m = &cinder_spv_all[k];
        if (strcmp(m->shader, "get_rows")) continue;
        assert_int_equal(cvk_spirv_reflect(m->code, *m->size, &si), 0);
        assert_int_equal(si.n_push, 7);
        for (int i = 0; i < 7; i++) assert_int_equal(si.push_offset[i], want[i]);
        assert_int_equal(si.push_size, sizeof(cvk_get_rows_push));
        assert_int_equal(si.n_bindings, 3);
        checked++;
    }
    assert_true(checked > 1);
}

/* --- gathers --- */

typedef struct tcase {
    enum qtype type;
    uint32_t n, n_rows, n_ids, dst_stride;
} tcase;

/* Runs one gather; the table is split into parts of at most max_part bytes (0: the device's). */
static void run_case(const tcase *t, uint64_t seed, uint64_t max_part) {
    rng r;
    rng_seed(&r, seed);
    size_t rb = qtype_row_bytes(t->type, t->n);
    uint32_t stride = t->dst_stride ? t->dst_stride : t->n;
    float *row = malloc(t->n * sizeof *row);
    uint8_t *table = malloc(rb * t->n_rows);
    for (uint32_t i = 0; i < t->n_rows; i++) {
        float scale = (i % 5 == 0) ? 1e-3f : (i % 7 == 0 ? 300.0f : 1.0f);
        for (uint32_t j = 0; j < t->n; j++) row[j] = rng_normal(&r) * scale + (i % 3 == 0 ? 0.3f * scale : 0);
        tu_quantize_row(t->type, row, table + rb * i, t->n);
    }
    int32_t *ids = malloc(t->n_ids * sizeof *ids);
    for (uint32_t i = 0; i < t->n_ids; i++) ids[i] = (int32_t)rng_below(&r, t->n_rows);
    if (t->n_ids > 3) ids[1] = -1, ids[2] = (int32_t)t->n_rows, ids[3] = ids[0];
    size_t n_dst = (size_t)(t->n_ids - 1) * stride + t->n;

    cvk_buffer bt, bi, bd;
    uint64_t saved = vk->mem.max_part;
    if (max_part) vk->mem.max_part = max_part;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bt, rb * t->n_rows, rb, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    if (max_part) assert_true(bt.n_parts >= 3);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bi, 64 + t->n_ids * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bd, 32 + n_dst * 4, 4, CVK_MEM_DEVICE), 0);
    vk->stager.force_staging = seed & 1;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bt), table), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bi, 64, t->n_ids * 4), ids), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_pipeline p;
    if (cvk_get_rows_pipeline(&p, &vk->dev, vk->pcache.cache, t->type, seed % 3 ? 256 : 64))
        fail_msg("%s", cd_errmsg());
    cvk_get_rows_args a = {.table = &bt,
                           .type = t->type,
                           .n = t->n,
                           .n_rows = t->n_rows,
                           .ids = cvk_view_range(&bi, 64, t->n_ids * 4),
                           .n_ids = t->n_ids,
                           .dst = cvk_view_range(&bd, 32, n_dst * 4),
                           .dst_stride = stride};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&bd), 0x7fc00000u), 0); /* NaN: unwritten shows */
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    if (cvk_get_rows(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    float *got = malloc(n_dst * 4);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_range(&bd, 32, n_dst * 4), got), 0);
    vk->stager.force_staging = false;

    double worst = 0;
    for (uint32_t i = 0; i < t->n_ids; i++) {
        bool oob = ids[i] < 0 || (uint32_t)ids[i] >= t->n_rows;
        if (oob) memset(row, 0, t->n * sizeof *row);
        else quant_dequantize_row(t->type, table + rb * (size_t)ids[i], row, t->n);
        double mx = 0;
        for (uint32_t j = 0; j < t->n; j++) mx = fmax(mx, fabs(row[j]));
        for (uint32_t j = 0; j < t->n; j++) {
            float g = got[(size_t)i * stride + j];
            double err = fabs((double)g - row[j]);
            /* every type: the bits of quant_dequantize_row (each weight one rounding or none) */
            if (isnan(g) || memcmp(&g, &row[j], 4))
                fail_msg("%s n=%u: out row %u (id %d) [%u] = %.9g, want %.9g", qtype_name(t->type), t->n, i, ids[i], j,
                         g, row[j]);
            if (mx > 0) worst = fmax(worst, err / mx);
        }
    }
    if (t->type >= QTYPE_Q8_0 && t->type != QTYPE_BF16 && seed < 30)
        printf("  %-5s n=%-5u parts=%u worst error / row max = %.2g\n", qtype_name(t->type), t->n, bt.n_parts, worst);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bt);
    cvk_buffer_destroy(&vk->mem, &bi);
    cvk_buffer_destroy(&vk->mem, &bd);
    free(row), free(table), free(ids), free(got);
}

static void test_every_type_awkward_sizes(void **state) {
    (void)state;
    const tcase cases[] = {
        {QTYPE_F32, 37, 13, 19, 0},       {QTYPE_F32, 1, 3, 5, 4},        {QTYPE_F16, 1001, 7, 11, 1003},
        {QTYPE_BF16, 5, 40, 33, 0},       {QTYPE_BF16, 300, 9, 8, 0},     {QTYPE_Q8_0, 96, 11, 17, 0},
        {QTYPE_Q8_0, 544, 5, 9, 547},     {QTYPE_Q4_K, 256, 9, 13, 0},    {QTYPE_Q4_K, 768, 4, 6, 770},
        {QTYPE_Q5_K, 512, 6, 7, 0},       {QTYPE_Q5_K, 256, 3, 5, 0},     {QTYPE_Q6_K, 256, 10, 12, 0},
        {QTYPE_Q6_K, 2304, 3, 4, 2305},   {QTYPE_Q4_0, 96, 7, 9, 0},      {QTYPE_Q4_1, 32, 5, 6, 33},
        {QTYPE_Q5_0, 160, 9, 13, 0},      {QTYPE_Q5_1, 544, 4, 5, 545},   {QTYPE_Q2_K, 256, 9, 11, 0},
        {QTYPE_Q2_K, 768, 3, 4, 771},     {QTYPE_Q3_K, 512, 6, 8, 0},     {QTYPE_Q3_K, 256, 11, 13, 257},
        {QTYPE_IQ4_NL, 96, 7, 9, 0},      {QTYPE_IQ4_NL, 544, 4, 5, 545}, {QTYPE_IQ4_XS, 256, 9, 11, 0},
        {QTYPE_IQ4_XS, 768, 3, 4, 771},   {QTYPE_MXFP4, 96, 7, 9, 0},     /* 51-byte rows: odd offsets */
        {QTYPE_MXFP4, 544, 4, 5, 545},    {QTYPE_IQ3_XXS, 256, 9, 11, 0}, /* 98-byte blocks */
        {QTYPE_IQ3_XXS, 768, 3, 4, 771},  {QTYPE_IQ3_S, 512, 6, 8, 0},    {QTYPE_IQ3_S, 256, 11, 13, 257},
        {QTYPE_IQ2_XXS, 256, 9, 11, 0},                                 /* 66-byte blocks */
        {QTYPE_IQ2_XXS, 768, 3, 4, 771},  {QTYPE_IQ2_XS, 512, 6, 8, 0}, /* 74 */
        {QTYPE_IQ2_XS, 256, 11, 13, 257}, {QTYPE_IQ2_S, 256, 7, 9, 0},  /* 82 */
        {QTYPE_IQ2_S, 768, 4, 5, 769},    {QTYPE_IQ1_S, 256, 9, 11, 0}, /* 50 */
        {QTYPE_IQ1_S, 768, 3, 4, 771},    {QTYPE_IQ1_M, 512, 6, 8, 0},  /* 56 */
        {QTYPE_IQ1_M, 256, 11, 13, 257},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 1 + i, 0);
}

static void test_split_table(void **state) {
    (void)state;
    const tcase cases[] = {
        {QTYPE_Q4_K, 256, 50, 40, 0}, /* 144-byte rows: 13 per 2000-byte part, 4 parts */
        {QTYPE_Q6_K, 512, 23, 31, 0}, /* 420-byte rows: lcm 1680, 4 rows per part */
        {QTYPE_Q8_0, 64, 101, 64, 0}, /* 68-byte rows: lcm 272, 28 rows per part */
        {QTYPE_F16, 33, 77, 50, 35},  /* 66-byte rows: lcm 528, 24 rows per part */
        {QTYPE_F32, 3, 500, 70, 0},   /* 12-byte rows: lcm 48, 164 rows per part */
        {QTYPE_MXFP4, 96, 90, 60, 0}, /* 51-byte rows: lcm 816, 32 rows per part */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 20 + i, 2000);
}

static void test_rejects_mismatches(void **state) {
    (void)state;
    cvk_pipeline p;
    assert_int_equal(cvk_get_rows_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_1, 32), -1);
    assert_int_equal(cvk_get_rows_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0, 64), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4096, 1, CVK_MEM_DEVICE), 0);
    cvk_get_rows_args a = {.table = &b,
                           .type = QTYPE_Q4_K,
                           .n = 256,
                           .n_rows = 1,
                           .ids = cvk_view_whole(&b),
                           .n_ids = 1,
                           .dst = cvk_view_whole(&b)};
    assert_int_equal(cvk_get_rows(&vk->cmd, &vk->dpool, &p, &a), -1); /* pipeline for Q8_0 */
    a.type = QTYPE_Q8_0;
    a.n = 33;
    assert_int_equal(cvk_get_rows(&vk->cmd, &vk->dpool, &p, &a), -1); /* not whole blocks */
    assert_non_null(strstr(cd_errmsg(), "blocks"));
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_blocks_glsl_matches_quant_h),
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_every_type_awkward_sizes),
        cmocka_unit_test(test_split_table),
        cmocka_unit_test(test_rejects_mismatches),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
