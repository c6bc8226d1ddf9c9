/* shaders/matvec.comp against a double CPU reference: random weights of every supported type
 * (quantized by quant_quantize_row), dequantized by quant_dequantize_row and dotted in double.
 * Awkward sizes (rows 1, 7, 129, 1000; n_in 32*7, 256*3, odd float lengths), several vectors
 * (more than one workgroup's worth), dense slices and MoE expert ids read from a GPU buffer
 * (at an offset, out-of-range ids give zeros), shared x, weights split over several parts,
 * several specializations. Pins the push block to its C struct.
 *
 * Tolerance: |got - want| <= 1e-4 * sum_i |w_i x_i| per output (float accumulation).
 *
 * CINDER_MATVEC_BENCH=1 instead times the decode shapes (lm_heads 151936 x 512/256/2048,
 * expert and attention matrices) against cpu_matvec (see docs/kernels/matvec.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/gguf/quant.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/vk/op_matvec.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    const uint32_t want[] = {
        offsetof(cvk_matvec_push, n_in),     offsetof(cvk_matvec_push, row_bytes),
        offsetof(cvk_matvec_push, n_rows),   offsetof(cvk_matvec_push, n_slices),
        offsetof(cvk_matvec_push, row0),     offsetof(cvk_matvec_push, rows),
        offsetof(cvk_matvec_push, r_begin),  offsetof(cvk_matvec_push, n_vec),
        offsetof(cvk_matvec_push, x_stride), offsetof(cvk_matvec_push, y_stride),
        offsetof(cvk_matvec_push, slice),    offsetof(cvk_matvec_push, ids_offset),
        offsetof(cvk_matvec_push, lpr),      offsetof(cvk_matvec_push, x0),
    };
    size_t checked = 0; /* every type's matvec module, and the texel kernel's */
    for (size_t s = 0; s < cinder_spv_all_count; s++) {
        const cinder_spv_module *m = &cinder_spv_all[s];
        if (strcmp(m->shader, "matvec") && strcmp(m->shader, "matvec_texel")) continue;
        checked++;
        assert_int_equal(cvk_spirv_reflect(m->code, *m->size, &si), 0);
        assert_int_equal(si.n_push, 14);
        for (int i = 0; i < 14; i++) assert_int_equal(si.push_offset[i], want[i]);
        assert_int_equal(si.push_size, sizeof(cvk_matvec_push));
        assert_int_equal(si.n_bindings, 4);
    }
    assert_true(checked > 2);
}

typedef struct tcase {
    enum qtype type;
    uint32_t n_in, n_rows, n_slices, n_vec;
    bool use_ids, x_shared;
    uint32_t slice; /* dense */
    cvk_matvec_cfg cfg;
} tcase;

/* Runs one case, checked against the CPU; weights split into parts of at most max_part bytes
 * (0: the device's), in the layout of t->cfg. Returns the outputs y (n_vec x n_rows, free()). */
static float *run_case_y(const tcase *t, uint64_t seed, uint64_t max_part) {
    rng r;
    rng_seed(&r, seed);
    uint32_t ns = t->n_slices ? t->n_slices : 1;
    size_t rb = qtype_row_bytes(t->type, t->n_in), prb = cvk_matvec_row_bytes(&t->cfg, t->type, t->n_in);
    uint64_t total = (uint64_t)t->n_rows * ns;
    uint8_t *w = tu_quantized_rows(&r, t->type, t->n_in, total), *packed = malloc(prb * total);
    cvk_matvec_pack_rows(&t->cfg, t->type, t->n_in, w, packed, total);
    /* padded x strides: 3 floats, or for Q6_K (the texel kernel reads x in 16-byte texels) 4 */
    uint32_t xs = t->n_in + (seed % 2 ? (t->type == QTYPE_Q6_K ? 4 : 3) : 0), ys = t->n_rows + (seed % 3 ? 0 : 5);
    size_t n_x = (size_t)(t->n_vec - 1) * xs + t->n_in, n_y = (size_t)(t->n_vec - 1) * ys + t->n_rows;
    float *x = malloc(n_x * sizeof *x);
    for (size_t i = 0; i < n_x; i++) x[i] = rng_normal(&r);
    uint32_t ids_off = 3;
    int32_t *ids = malloc((ids_off + t->n_vec) * sizeof *ids);
    for (uint32_t i = 0; i < ids_off + t->n_vec; i++) ids[i] = (int32_t)rng_below(&r, ns);
    if (t->use_ids && t->n_vec > 2) ids[ids_off + 1] = -1, ids[ids_off + 2] = (int32_t)ns; /* out of range */

    cvk_buffer bw, bx, by, bi;
    uint64_t saved = vk->mem.max_part;
    if (max_part) vk->mem.max_part = max_part;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, prb * total, prb, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    if (max_part) assert_true(bw.n_parts >= 3);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, 64 + n_x * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, 32 + n_y * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bi, (ids_off + t->n_vec) * 4, 4, CVK_MEM_DEVICE), 0);
    vk->stager.force_staging = seed & 1;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), packed), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bx, 64, n_x * 4), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bi), ids), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_pipeline p;
    if (cvk_matvec_pipeline(&p, &vk->dev, vk->pcache.cache, t->type, &t->cfg)) fail_msg("%s", cd_errmsg());
    cvk_matvec_args a = {.w = &bw,
                         .type = t->type,
                         .n_in = t->n_in,
                         .n_rows = t->n_rows,
                         .n_slices = t->n_slices,
                         .x = cvk_view_range(&bx, 64, n_x * 4),
                         .x_stride = xs,
                         .x_shared = t->x_shared,
                         .y = cvk_view_range(&by, 32, n_y * 4),
                         .y_stride = ys,
                         .n_vec = t->n_vec,
                         .use_ids = t->use_ids,
                         .ids = cvk_view_whole(&bi),
                         .ids_offset = ids_off,
                         .slice = t->slice};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&by), 0x7fc00000u), 0); /* NaN: unwritten shows */
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    if (cvk_matvec(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    float *got = malloc(n_y * 4);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_range(&by, 32, n_y * 4), got), 0);
    vk->stager.force_staging = false;

    float *row = malloc(t->n_in * sizeof *row);
    double worst = 0;
    for (uint32_t v = 0; v < t->n_vec; v++) {
        int32_t s = t->use_ids ? ids[ids_off + v] : (int32_t)t->slice;
        const float *xv = x + (t->x_shared ? 0 : (size_t)v * xs);
        for (uint32_t rr = 0; rr < t->n_rows; rr++) {
            float g = got[(size_t)v * ys + rr];
            if (s < 0 || (uint32_t)s >= ns) {
                if (g != 0.0f) fail_msg("vector %u (id %d) row %u = %g, want 0", v, s, rr, g);
                continue;
            }
            quant_dequantize_row(t->type, w + rb * ((uint64_t)s * t->n_rows + rr), row, t->n_in);
            double want = 0, mag = 0;
            for (uint32_t i = 0; i < t->n_in; i++) {
                want += (double)row[i] * xv[i];
                mag += fabs((double)row[i] * xv[i]);
            }
            double err = fabs((double)g - want);
            if (isnan(g) || err > 1e-4 * mag + 1e-30)
                fail_msg("%s n_in=%u n_rows=%u: vector %u slice %d row %u = %.9g, want %.9g (|wx| %.3g)",
                         qtype_name(t->type), t->n_in, t->n_rows, v, s, rr, g, want, mag);
            if (mag > 0) worst = fmax(worst, err / mag);
        }
    }
    if (seed < 100)
        printf("  %-4s n_in=%-4u rows=%-4u slices=%u vec=%u %s parts=%u  worst err/|wx| = %.2g\n", qtype_name(t->type),
               t->n_in, t->n_rows, ns, t->n_vec, t->use_ids ? "ids  " : "dense", bw.n_parts, worst);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &by);
    cvk_buffer_destroy(&vk->mem, &bi);
    free(w), free(packed), free(x), free(ids), free(row);
    float *y = malloc((size_t)t->n_vec * t->n_rows * sizeof *y);
    for (uint32_t v = 0; v < t->n_vec; v++) memcpy(y + (size_t)v * t->n_rows, got + (size_t)v * ys, t->n_rows * 4);
    free(got);
    return y;
}

static void run_case(const tcase *t, uint64_t seed, uint64_t max_part) { free(run_case_y(t, seed, max_part)); }

static const enum qtype all_types[] = {
    QTYPE_F32,     QTYPE_F16,    QTYPE_BF16,   QTYPE_Q8_0,  QTYPE_Q4_K, QTYPE_Q5_K,
    QTYPE_Q6_K,    QTYPE_Q4_0,   QTYPE_Q4_1,   QTYPE_Q5_0,  QTYPE_Q5_1, QTYPE_Q2_K,
    QTYPE_Q3_K,    QTYPE_IQ4_NL, QTYPE_IQ4_XS, QTYPE_MXFP4, /* MXFP4: 17-byte blocks, rows at odd offsets */
    QTYPE_IQ3_XXS, QTYPE_IQ3_S,                             /* the 3-bit grids: 98- and 110-byte blocks */
    QTYPE_IQ2_XXS, QTYPE_IQ2_XS, QTYPE_IQ2_S,               /* the 2-bit: 66, 74, 82 */
    QTYPE_IQ1_S,   QTYPE_IQ1_M};                            /* the 1-bit: 50, 56 */

static uint32_t awkward_n_in(enum qtype t, uint32_t k) {
    if (qtype_block_elems(t) == QK_K) return 256 * (k % 2 ? 3 : 1);
    if (qtype_block_elems(t) == 32) return 32 * (k % 2 ? 7 : 1);
    return k % 2 ? 32 * 7 : 37; /* float types: n_in % 4 != 0 exercises the tail */
}

static void test_dense_every_type(void **state) {
    (void)state;
    const uint32_t rows[] = {1, 7, 129, 1000};
    uint64_t seed = 1;
    for (size_t ti = 0; ti < sizeof all_types / sizeof *all_types; ti++)
        for (uint32_t k = 0; k < 4; k++) {
            tcase t = {.type = all_types[ti],
                       .n_in = awkward_n_in(all_types[ti], k),
                       .n_rows = rows[k],
                       .n_slices = k == 2 ? 3 : 1,
                       .n_vec = 1 + (k * 3) % 7,
                       .slice = k == 2 ? 2 : 0};
            run_case(&t, seed++, 0);
        }
}

static void test_moe_ids_every_type(void **state) {
    (void)state;
    uint64_t seed = 40;
    for (size_t ti = 0; ti < sizeof all_types / sizeof *all_types; ti++) {
        enum qtype ty = all_types[ti];
        tcase a = {.type = ty,
                   .n_in = awkward_n_in(ty, 1),
                   .n_rows = 129,
                   .n_slices = 5,
                   .n_vec = 6,
                   .use_ids = true,
                   .x_shared = true};
        run_case(&a, seed++, 0);
        tcase b = {.type = ty, .n_in = awkward_n_in(ty, 0), .n_rows = 7, .n_slices = 9, .n_vec = 4, .use_ids = true};
        run_case(&b, seed++, 0);
    }
}

static void test_configs(void **state) {
    (void)state;
    const cvk_matvec_cfg cfgs[] = {
        {.wg = 32, .rows = 1, .nvec = 1},
        {.wg = 128, .rows = 4, .nvec = 2},
        {.wg = 256, .rows = 8, .nvec = 8},
        {.wg = 64, .rows = 3, .nvec = 5},
        {.wg = 32, .rows = 2, .nvec = 4, .subgroup_size = 8},
        /* lanes per row fixed: within a subgroup, one lane per row, whole subgroups (shared memory) */
        {.wg = 64, .rows = 2, .nvec = 1, .lanes_per_row = 4},
        {.wg = 64, .rows = 3, .nvec = 2, .lanes_per_row = 1},
        {.wg = 128, .rows = 1, .nvec = 3, .lanes_per_row = 32},
        {.wg = 64, .rows = 2, .nvec = 1, .lanes_per_row = 64},
        {.wg = 32, .rows = 2, .nvec = 4, .subgroup_size = 8, .lanes_per_row = 16},
    };
    uint64_t seed = 50;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++)
        for (size_t ti = 0; ti < sizeof all_types / sizeof *all_types; ti += 2 + c % 2) {
            tcase t = {.type = all_types[ti],
                       .n_in = awkward_n_in(all_types[ti], (uint32_t)c + 1),
                       .n_rows = 131,
                       .n_slices = 2,
                       .n_vec = 11,
                       .slice = 1,
                       .cfg = cfgs[c]};
            run_case(&t, seed++, 0);
        }
}

/* cvk_matvec_choose's configuration at the decode shapes (row counts cut down), and the
 * per-call lanes per row of a default pipeline at every unit count from 1 to 33. */
static void test_choose(void **state) {
    (void)state;
    const struct {
        enum qtype t;
        uint32_t n_in, n_rows, n_vec;
    } shapes[] = {
        {QTYPE_Q6_K, 512, 1001, 1},  {QTYPE_Q6_K, 256, 999, 1}, {QTYPE_Q8_0, 512, 300, 1}, {QTYPE_F16, 512, 300, 1},
        {QTYPE_Q4_K, 2048, 130, 1},  {QTYPE_Q5_K, 768, 77, 1},  {QTYPE_BF16, 4, 65, 1},    {QTYPE_F32, 2048, 17, 5},
        {QTYPE_Q6_K, 256, 40000, 1}, /* lm_head-sized: the texel kernel on CPU devices */
    };
    uint64_t seed = 120;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        tcase t = {.type = shapes[i].t,
                   .n_in = shapes[i].n_in,
                   .n_rows = shapes[i].n_rows,
                   .n_vec = shapes[i].n_vec,
                   .cfg = cvk_matvec_choose(&vk->dev, shapes[i].t, shapes[i].n_in, shapes[i].n_rows, shapes[i].n_vec)};
        run_case(&t, seed++, 0);
    }
    for (uint32_t u = 1; u <= 33; u += 1 + u / 8) {
        tcase t = {.type = QTYPE_Q8_0, .n_in = 32 * u, .n_rows = 37, .n_vec = 2};
        run_case(&t, 200 + u, 0);
    }
}

/* The aligned Q6_K layout (cfg.a16, the texel kernel's): bodies, then d's, then zero padding. */
static void test_aligned_layout(void **state) {
    (void)state;
    uint8_t src[2 * 210], dst[2 * 224];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 7 + 1);
    cvk_matvec_cfg a = {.a16 = true};
    assert_int_equal(cvk_matvec_row_bytes(&a, QTYPE_Q6_K, 256), 224);
    assert_int_equal(cvk_matvec_row_bytes(&a, QTYPE_Q6_K, 2048), 1680);
    cvk_matvec_pack_rows(&a, QTYPE_Q6_K, 256, src, dst, 2);
    for (int r = 0; r < 2; r++) {
        assert_memory_equal(dst + 224 * r, src + 210 * r, 208);
        assert_memory_equal(dst + 224 * r + 208, src + 210 * r + 208, 2);
        for (int k = 210; k < 224; k++) assert_int_equal(dst[224 * r + k], 0);
    }
}

/* The texel kernel (cfg.texel, matvec_texel.comp): against the CPU at awkward row counts, one
 * to 8 vectors, several vectors per workgroup or one, ids (out-of-range ids give zeros), split
 * weights; each vector's sums the same whatever the vectors per workgroup and rows per lane
 * (every width of the batch head and the one-row head agree). */
static void test_texel(void **state) {
    (void)state;
    const struct {
        uint32_t n_in, n_rows, n_vec, wg, rows, nvec;
        bool ids;
        uint64_t max_part;
    } cases[] = {
        {256, 1, 1, 64, 8, 1, false, 0},       {768, 1001, 1, 64, 8, 1, false, 0},
        {2048, 77, 3, 64, 16, 3, false, 0},    {256, 4097, 7, 128, 8, 8, false, 0},
        {512, 131, 5, 8, 3, 2, false, 0},      {768, 40, 6, 64, 1, 1, true, 0},
        {512, 501, 2, 64, 8, 2, false, 24000}, {256, 999, 4, 16, 4, 4, true, 30000},
        {768, 333, 8, 128, 16, 8, false, 0}, /* cvk_matvec_choose's 8-vector head */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cvk_matvec_cfg c = {.wg = cases[i].wg,
                            .rows = cases[i].rows,
                            .nvec = cases[i].nvec,
                            .lanes_per_row = 1,
                            .a16 = true,
                            .texel = true};
        tcase t = {.type = QTYPE_Q6_K,
                   .n_in = cases[i].n_in,
                   .n_rows = cases[i].n_rows,
                   .n_vec = cases[i].n_vec,
                   .n_slices = cases[i].ids ? 5 : 1,
                   .use_ids = cases[i].ids,
                   .x_shared = cases[i].ids && i % 2,
                   .cfg = c};
        float *many = run_case_y(&t, 400 + i, cases[i].max_part);
        t.cfg.nvec = 1, t.cfg.wg = 64, t.cfg.rows = 8; /* the one-row head's shape */
        float *one = run_case_y(&t, 400 + i, cases[i].max_part);
        size_t n = (size_t)t.n_vec * t.n_rows * sizeof *one;
        if (memcmp(many, one, n))
            fail_msg("texel n_in=%u rows=%u vec=%u: sums depend on the vectors per workgroup", t.n_in, t.n_rows,
                     t.n_vec);
        free(many), free(one);
    }
}

static void test_split_weights(void **state) {
    (void)state;
    const tcase cases[] = {
        {QTYPE_Q4_K, 256, 50, 1, 3, false, false, 0, {0}},       /* 144-byte rows, 13 per part */
        {QTYPE_Q6_K, 512, 23, 3, 5, false, false, 2, {0}},       /* dense, slice 2 of 3 */
        {QTYPE_Q6_K, 512, 23, 3, 5, true, false, 0, {0}},        /* ids over 3 slices */
        {QTYPE_Q5_K, 256, 10, 6, 7, true, true, 0, {.rows = 3}}, /* slices straddle parts */
        {QTYPE_Q8_0, 64, 101, 2, 4, false, false, 1, {0}},       {QTYPE_F16, 33 * 2, 77, 1, 2, false, false, 0, {0}},
        {QTYPE_F32, 3, 500, 4, 3, true, false, 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 80 + i, 2000);
}

static void test_rejects_mismatches(void **state) {
    (void)state;
    cvk_pipeline p;
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_1, NULL), -1);
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0,
                                         &(cvk_matvec_cfg){.wg = 32, .rows = 16, .nvec = 8}),
                     -1);
    assert_int_equal(
        cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0, &(cvk_matvec_cfg){.wg = 64, .lanes_per_row = 3}),
        -1);
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0,
                                         &(cvk_matvec_cfg){.wg = 64, .lanes_per_row = 128}),
                     -1);
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q6_K, /* a16: the texel kernel's */
                                         &(cvk_matvec_cfg){.wg = 64, .rows = 16, .lanes_per_row = 1, .a16 = true}),
                     -1);
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q6_K, /* and one lane per row */
                                         &(cvk_matvec_cfg){.wg = 64, .rows = 16, .a16 = true}),
                     -1);
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q6_K, /* texel: a16 rows */
                                         &(cvk_matvec_cfg){.wg = 64, .rows = 8, .lanes_per_row = 1, .texel = true}),
                     -1);
    assert_int_equal(
        cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q4_K, /* and Q6_K */
                            &(cvk_matvec_cfg){.wg = 64, .rows = 8, .lanes_per_row = 1, .a16 = true, .texel = true}),
        -1);
    { /* texel: x must start on a texel, its stride whole texels */
        cvk_matvec_cfg tc = {.wg = 64, .rows = 8, .nvec = 2, .lanes_per_row = 1, .a16 = true, .texel = true};
        assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q6_K, &tc), 0);
        cvk_buffer w, x;
        assert_int_equal(
            cvk_buffer_create(&vk->mem, &w, cvk_matvec_row_bytes(&tc, QTYPE_Q6_K, 256) * 4, 1, CVK_MEM_DEVICE), 0);
        assert_int_equal(cvk_buffer_create(&vk->mem, &x, 8192, 4, CVK_MEM_DEVICE), 0);
        cvk_matvec_args ta = {.w = &w,
                              .type = QTYPE_Q6_K,
                              .n_in = 256,
                              .n_rows = 4,
                              .x = cvk_view_range(&x, 4, 2048),
                              .y = cvk_view_range(&x, 4096, 1024),
                              .n_vec = 1};
        assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &ta), -1);
        assert_non_null(strstr(cd_errmsg(), "texel"));
        ta.x = cvk_view_range(&x, 16, 4000), ta.n_vec = 2, ta.x_stride = 258;
        assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &ta), -1);
        assert_non_null(strstr(cd_errmsg(), "texel"));
        cvk_pipeline_destroy(&vk->dev, &p);
        cvk_buffer_destroy(&vk->mem, &w);
        cvk_buffer_destroy(&vk->mem, &x);
    }
    assert_int_equal(cvk_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0, NULL), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4096, 1, CVK_MEM_DEVICE), 0);
    cvk_matvec_args a = {.w = &b,
                         .type = QTYPE_Q4_K,
                         .n_in = 256,
                         .n_rows = 1,
                         .x = cvk_view_whole(&b),
                         .y = cvk_view_whole(&b),
                         .n_vec = 1};
    assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &a), -1); /* pipeline for Q8_0 */
    a.type = QTYPE_Q8_0;
    a.n_in = 33;
    assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &a), -1); /* not whole blocks */
    assert_non_null(strstr(cd_errmsg(), "blocks"));
    a.n_in = 32;
    a.slice = 1;
    assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &a), -1); /* slice out of range */
    a.slice = 0;
    a.n_rows = 200; /* 200 * 34 bytes > 4096 */
    assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n_rows = 1;
    a.use_ids = true;
    a.ids = cvk_view_range(&b, 0, 4);
    a.ids_offset = 1;
    assert_int_equal(cvk_matvec(&vk->cmd, &vk->dpool, &p, &a), -1); /* ids too small */
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

/* --- timing (CINDER_MATVEC_BENCH=1) --- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Times every configuration of cfgs[] on one shape, interleaved (round k runs each once), best
 * of `rounds`; cpu_matvec (best of 3) for reference. */
static void bench_shape(enum qtype type, uint32_t n_in, uint32_t n_rows, const cvk_matvec_cfg *cfgs, size_t n_cfg,
                        int rounds, uint32_t n_vec) {
    rng r;
    rng_seed(&r, 7);
    size_t rb = qtype_row_bytes(type, n_in);
    enum { DISTINCT = 64 }; /* quantize 64 rows, tile them: quantizing 150k rows is slow */
    uint8_t *few = tu_quantized_rows(&r, type, n_in, DISTINCT);
    uint8_t *w = malloc(rb * n_rows);
    for (uint32_t i = 0; i < n_rows; i++) memcpy(w + rb * i, few + rb * (i % DISTINCT), rb);
    /* n_vec copies of one x: every vector's y is checked against the one reference */
    float *x = malloc((size_t)n_vec * n_in * sizeof *x), *ref = malloc(n_rows * sizeof *ref);
    float *got = malloc((size_t)n_vec * n_rows * sizeof *got), *scratch = malloc(n_in * sizeof *scratch);
    for (uint32_t i = 0; i < n_in; i++) x[i] = rng_normal(&r);
    for (uint32_t v = 1; v < n_vec; v++) memcpy(x + (size_t)v * n_in, x, n_in * sizeof *x);
    gguf_tensor t = {.n_dims = 2, .ne = {n_in, n_rows, 1, 1}, .type = type, .nbytes = rb * n_rows, .data = w};
    double cpu = 1e30;
    for (int k = 0; k < 3; k++) {
        double t0 = now_s();
        cpu_matvec(ref, &t, 0, x, scratch);
        cpu = fmin(cpu, now_s() - t0);
    }

    cvk_buffer bw, bx, by, ba = {0}; /* ba: the weights in the aligned layout (cfg.a16) */
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, rb * n_rows, rb, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, (uint64_t)n_vec * n_in * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, (uint64_t)n_vec * n_rows * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), w), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    enum { MAXC = 16 };
    assert_true(n_cfg <= MAXC);
    cvk_pipeline p[MAXC];
    double best[MAXC], worst[MAXC];
    cvk_matvec_cfg used[MAXC];
    for (size_t c = 0; c < n_cfg; c++) {
        used[c] = cfgs[c].wg ? cfgs[c] : cvk_matvec_choose(&vk->dev, type, n_in, n_rows, n_vec);
        if (cvk_matvec_pipeline(&p[c], &vk->dev, vk->pcache.cache, type, &used[c])) fail_msg("%s", cd_errmsg());
        best[c] = 1e30, worst[c] = 0;
        if (used[c].a16 && !ba.n_parts) {
            uint64_t arb = cvk_matvec_row_bytes(&used[c], type, n_in);
            uint8_t *packed = malloc(arb * n_rows);
            cvk_matvec_pack_rows(&used[c], type, n_in, w, packed, n_rows);
            assert_int_equal(cvk_buffer_create(&vk->mem, &ba, arb * n_rows, arb, CVK_MEM_DEVICE), 0);
            assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&ba), packed), 0);
            assert_int_equal(cvk_stager_flush(&vk->stager), 0);
            free(packed);
        }
    }
    cvk_matvec_args a = {.w = &bw,
                         .type = type,
                         .n_in = n_in,
                         .n_rows = n_rows,
                         .x = cvk_view_whole(&bx),
                         .y = cvk_view_whole(&by),
                         .n_vec = n_vec,
                         .x_stride = n_in,
                         .y_stride = n_rows};
    for (int k = 0; k < rounds; k++)
        for (size_t c = 0; c < n_cfg; c++) {
            assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
            a.w = used[c].a16 ? &ba : &bw;
            if (cvk_matvec(&vk->cmd, &vk->dpool, &p[c], &a)) fail_msg("%s", cd_errmsg());
            cvk_barrier_device_to_host(vk->cmd.cb);
            double t0 = now_s();
            assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
            best[c] = fmin(best[c], now_s() - t0);
            assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
            if (k == 0) {
                assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), got), 0);
                for (size_t i = 0; i < (size_t)n_vec * n_rows; i++)
                    worst[c] = fmax(worst[c], fabs((double)got[i] - ref[i % n_rows]) / (fabs(ref[i % n_rows]) + 1e-3));
            }
        }
    for (size_t c = 0; c < n_cfg; c++) {
        printf("  bench %-4s %5u x %6u (n_in x rows) x %u vectors %s wg=%-3u rows=%-2u lpr=%-2u parts=%u: lavapipe "
               "%9.3f ms, cpu_matvec (one vector) %8.3f ms, cpu/gpu %5.2f%s (max rel diff %.2g)\n",
               qtype_name(type), n_in, n_rows, n_vec, cfgs[c].wg ? "fixed " : "choose", used[c].wg, used[c].rows,
               used[c].lanes_per_row, bw.n_parts, best[c] * 1e3, cpu * 1e3, cpu / best[c],
               used[c].texel ? " texel" : "", worst[c]);
        cvk_pipeline_destroy(&vk->dev, &p[c]);
    }
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &ba);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &by);
    free(few), free(w), free(x), free(ref), free(got), free(scratch);
}

/* A timing run, not a test: only with CINDER_MATVEC_BENCH=1 (see docs/kernels/matvec.md).
 * CINDER_MATVEC_BENCH_CFGS="wg,rows,lpr,nvec[,texel];..." replaces the configurations (0,0,0,0:
 * cvk_matvec_choose; texel 1: the texel kernel, Q6_K shapes only), CINDER_MATVEC_BENCH_SHAPES="type:n_in:n_rows;..." the shapes,
 * CINDER_MATVEC_BENCH_NVEC the vectors per call (1; a batched decode's head has one per sequence). */
static void bench(void **state) {
    (void)state;
    cvk_matvec_cfg cfgs[16] = {{.wg = 64, .rows = 2, .nvec = 4}, {0}};
    size_t n_cfg = 2;
    const char *e = getenv("CINDER_MATVEC_BENCH_CFGS");
    if (e) {
        n_cfg = 0;
        for (const char *s = e; *s && n_cfg < 16;) {
            unsigned wg = 0, rows = 0, lpr = 0, nvec = 0, texel = 0;
            int n = 0, n2 = 0;
            if (sscanf(s, "%u,%u,%u,%u%n", &wg, &rows, &lpr, &nvec, &n) < 4) break;
            s += n;
            if (sscanf(s, ",%u%n", &texel, &n2) == 1) s += n2; /* optional fifth field: 1 = the texel kernel */
            cfgs[n_cfg++] = (cvk_matvec_cfg){
                .wg = wg, .rows = rows, .nvec = nvec, .lanes_per_row = lpr, .texel = texel != 0, .a16 = texel != 0};
            if (*s == ';') s++;
        }
    }
    const char *shapes = getenv("CINDER_MATVEC_BENCH_SHAPES");
    if (!shapes)
        shapes = "Q6_K:512:151936;Q6_K:256:151936;Q8_0:512:151936;F16:512:151936;Q6_K:2048:151936;"
                 "Q4_K:512:256;Q4_K:256:512;Q6_K:512:1024;Q4_K:2048:768;Q4_K:768:2048";
    int rounds = getenv("CINDER_MATVEC_BENCH_ROUNDS") ? atoi(getenv("CINDER_MATVEC_BENCH_ROUNDS")) : 5;
    int n_vec = getenv("CINDER_MATVEC_BENCH_NVEC") ? atoi(getenv("CINDER_MATVEC_BENCH_NVEC")) : 1;
    assert_true(n_vec >= 1 && n_vec <= 64);
    for (const char *s = shapes; *s;) {
        char name[8] = {0};
        unsigned n_in = 0, n_rows = 0;
        int n = 0;
        if (sscanf(s, "%7[^:]:%u:%u%n", name, &n_in, &n_rows, &n) < 3) break;
        enum qtype t = QTYPE_COUNT;
        for (int k = 0; k < QTYPE_COUNT; k++)
            if (qtype_supported((enum qtype)k) && !strcmp(qtype_name((enum qtype)k), name)) t = (enum qtype)k;
        assert_true(t != QTYPE_COUNT);
        bench_shape(t, n_in, n_rows, cfgs, n_cfg, rounds, (uint32_t)n_vec);
        s += n;
        if (*s == ';') s++;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_dense_every_type),
        cmocka_unit_test(test_moe_ids_every_type),
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_aligned_layout),
        cmocka_unit_test(test_texel),
        cmocka_unit_test(test_split_weights),
        cmocka_unit_test(test_rejects_mismatches),
    };
    const char *e = getenv("CINDER_MATVEC_BENCH");
    if (e && *e && *e != '0') {
        const struct CMUnitTest timing[] = {cmocka_unit_test(bench)};
        return tu_status(cmocka_run_group_tests(timing, vk_setup, vk_teardown));
    }
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER")); /* e.g. "*moe*" */
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
