/* shaders/matmul.comp against a double-accumulated CPU product on the dequantized weights
 * (tu_quantize_row makes random weights of every supported type, quant_dequantize_row
 * gives the reference's view of them), at awkward sizes: T = 1, 5, 33, 130 tokens; n_rows =
 * 1, 17, 200; n_in = 2 super-blocks for K-quants, 5 blocks of 32 otherwise. Plain, gather,
 * scatter and gather+scatter modes on one expert slice of several; weights split over
 * buffer parts (one dispatch per part, a slice straddling parts); several tile shapes, k
 * steps not dividing n_in. Expert-grouped mode (groups built on the host, every type, empty
 * experts, dropped pairs, token- and pair-indexed X, split weights). Unwritten output rows
 * are checked to stay untouched (NaN fill).
 *
 * CINDER_MATMUL_BENCH=1 runs, instead of the tests, a timing of a 512-token x (768 x 2048) Q4_K product against a
 * naive CPU loop (docs/kernels/matmul.md); CINDER_MATMUL_BENCH_TYPE=F32 (etc.) and
 * CINDER_MATMUL_TILE=bm,bn,bk,tm,tn vary it. CINDER_MATMUL_BENCH=kernels times every kernel
 * shape on 1, 8, 32 and 128 tokens of a 768 x 2048 expert (CINDER_MATMUL_BENCH_TEXEL=1: the
 * texel kernels only, a CPU device's; CINDER_MATMUL_BENCH_ROWS="bm,bn,tm;...": these texel rows
 * kernels instead). */
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
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/op_matmul.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#if defined(__SANITIZE_ADDRESS__)
#define MATMUL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MATMUL_TEST_ASAN 1
#endif
#endif

/* The types the sweeps run over. Under AddressSanitizer, one per kind of decoder (float, the
 * texel block types, a legacy 32-block, a 256-block K-quant of the generic branch, a table
 * type): the host code ASan checks is the same for every type, and each type's kernels are
 * proved by the release run of the same shaders on the same device (scripts/test.sh runs both),
 * where the whole list costs minutes of CI. */
static const enum qtype all_types[] = {
#ifdef MATMUL_TEST_ASAN
    QTYPE_F32, QTYPE_Q8_0, QTYPE_Q4_K, QTYPE_Q6_K, QTYPE_Q5_0, QTYPE_Q3_K, QTYPE_IQ4_XS};
#else
    QTYPE_F32,  QTYPE_F16,  QTYPE_BF16, QTYPE_Q8_0, QTYPE_Q4_K, QTYPE_Q5_K,   QTYPE_Q6_K, QTYPE_Q4_0,
    QTYPE_Q4_1, QTYPE_Q5_0, QTYPE_Q5_1, QTYPE_Q2_K, QTYPE_Q3_K, QTYPE_IQ4_XS, QTYPE_MXFP4};
/* IQ4_NL is IQ4_XS's 32-weight block with its own scale: one qb_decode8 branch, the same table;
 * it runs here in test_every_type_awkward_sizes only (CI time), bit-exact in test_vk_get_rows,
 * against the CPU reference in test_vk_matvec and the mix-lowbit model's head. */
#endif

/* The rows kernel through texel buffers, block types only: the CPU device's tile
 * (cvk_matmul_tile_one_texel: one token, 8 rows per invocation) beside one token of 4 rows and
 * 8 tokens of one row. */
static const cvk_matmul_tile *const texel_one = &cvk_matmul_tile_one_texel;
static const cvk_matmul_tile texel_one4 = {.bm = 256, .bn = 1, .tm = 4, .rows = true, .texel = true};
static const cvk_matmul_tile texel_rows = {.bm = 64, .bn = 8, .rows = true, .texel = true};
static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    const uint32_t want[] = {
        offsetof(cvk_matmul_push, n_in),      offsetof(cvk_matmul_push, row_bytes), offsetof(cvk_matmul_push, n_rows),
        offsetof(cvk_matmul_push, part_row0), offsetof(cvk_matmul_push, part_rows), offsetof(cvk_matmul_push, expert0),
        offsetof(cvk_matmul_push, n_tokens),  offsetof(cvk_matmul_push, x_stride),  offsetof(cvk_matmul_push, x_rows),
        offsetof(cvk_matmul_push, y_stride),  offsetof(cvk_matmul_push, y_rows),    offsetof(cvk_matmul_push, ids_off),
        offsetof(cvk_matmul_push, n_ids),     offsetof(cvk_matmul_push, flags),     offsetof(cvk_matmul_push, item0),
        offsetof(cvk_matmul_push, expert1),   offsetof(cvk_matmul_push, x0),
    };
    size_t checked = 0; /* every module of the three shaders: one per weight type */
    for (size_t k = 0; k < cinder_spv_all_count; k++) {
        const cinder_spv_module *m = &cinder_spv_all[k];
        if (strcmp(m->shader, "matmul") && strcmp(m->shader, "matmul_rows") && strcmp(m->shader, "matmul_rows_texel"))
            continue;
        assert_int_equal(cvk_spirv_reflect(m->code, *m->size, &si), 0);
        assert_int_equal(si.n_push, 17);
        for (int i = 0; i < 17; i++) assert_int_equal(si.push_offset[i], want[i]);
        assert_int_equal(si.push_size, sizeof(cvk_matmul_push));
        assert_int_equal(si.n_bindings, 7);
        checked++;
    }
    assert_true(checked >= 3);
}

/* Each weight type the GPU computes with has its module of each product shader (cmake/shaders.cmake
 * builds one per type from a shader's "// weight types:" line), the texel kernel exactly the types
 * cvk_matmul_texel_type names, and no module is built for a type the host does not compute. */
static void test_a_module_per_type(void **state) {
    (void)state;
    static const char *every[] = {"matmul", "matmul_rows", "matvec", "get_rows"};
    for (uint32_t t = 0; t < QTYPE_COUNT; t++) {
        bool gpu = qtype_supported((enum qtype)t);
        for (size_t s = 0; s < sizeof every / sizeof *every; s++) {
            const cinder_spv_module *m = cvk_spirv_module(every[s], t);
            if (gpu != (m != NULL))
                fail_msg("%s: type %s %s a module", every[s], qtype_name((enum qtype)t), gpu ? "lacks" : "has");
            if (m) assert_int_equal(m->qtype, t), assert_string_equal(m->shader, every[s]);
        }
        bool texel = gpu && cvk_matmul_texel_type((enum qtype)t);
        if (texel != (cvk_spirv_module("matmul_rows_texel", t) != NULL))
            fail_msg("matmul_rows_texel: type %s %s a module", qtype_name((enum qtype)t), texel ? "lacks" : "has");
    }
    assert_null(cvk_spirv_module("matmul", CINDER_SPV_UNTYPED)); /* typed: no module for every type */
    assert_non_null(strstr(cd_errmsg(), "no shader module matmul"));
    assert_null(cvk_spirv_module("matmul", QTYPE_COUNT));
    assert_non_null(strstr(cd_errmsg(), "no matmul module for weight type"));
    assert_non_null(cvk_spirv_module("rmsnorm", CINDER_SPV_UNTYPED));
}

/* --- products --- */

typedef struct tcase {
    enum qtype type;
    uint32_t T, n_rows, n_in;
    uint32_t mode;               /* CVK_MATMUL_GATHER | CVK_MATMUL_SCATTER */
    uint32_t n_expert, expert;   /* slices in the weight buffer; the one used */
    uint64_t max_part;           /* 0: the device's */
    const cvk_matmul_tile *tile; /* NULL: default */
} tcase;

static bool is_nan_fill(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u == 0x7fc00000u;
}

static void run_case(const tcase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    bool gat = t->mode & CVK_MATMUL_GATHER, sca = t->mode & CVK_MATMUL_SCATTER;
    uint32_t n_exp = t->n_expert ? t->n_expert : 1, total_rows = n_exp * t->n_rows;
    uint32_t x_rows = gat ? t->T + 7 : t->T, y_rows = sca ? t->T + 5 : t->T;
    /* padded x rows: 3 floats, or 4 for the texel kernel (x rows at whole texels) */
    uint32_t xs = t->n_in + (t->mode ? (t->tile && t->tile->texel ? 4 : 3) : 0), ys = t->n_rows + (t->mode ? 2 : 0);
    uint32_t ids_off = t->mode ? 3 : 0;
    size_t rb = qtype_row_bytes(t->type, t->n_in);

    /* weights: every slice random, rows of different magnitudes, some offset */
    float *row = malloc(t->n_in * sizeof *row);
    uint8_t *wq = malloc(rb * total_rows);
    for (uint32_t i = 0; i < total_rows; i++) {
        float scale = (i % 5 == 0) ? 1e-2f : (i % 7 == 0 ? 30.0f : 1.0f);
        for (uint32_t j = 0; j < t->n_in; j++) row[j] = rng_normal(&r) * scale + (i % 3 == 0 ? 0.3f * scale : 0);
        tu_quantize_row(t->type, row, wq + rb * i, t->n_in);
    }
    float *wd = malloc(sizeof(float) * t->n_rows * t->n_in); /* the slice, dequantized */
    for (uint32_t i = 0; i < t->n_rows; i++)
        quant_dequantize_row(t->type, wq + rb * ((size_t)t->expert * t->n_rows + i), wd + (size_t)i * t->n_in, t->n_in);
    size_t nx = (size_t)(x_rows - 1) * xs + t->n_in, ny = (size_t)(y_rows - 1) * ys + t->n_rows;
    float *x = malloc(nx * sizeof *x);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&r);

    /* lists: gather with repeats and a -1 pad; scatter to distinct rows, one out of range */
    uint32_t n_ids = ids_off + t->T;
    int32_t *gl = calloc(n_ids, 4), *sl = calloc(n_ids, 4);
    uint32_t *perm = malloc(y_rows * 4);
    for (uint32_t i = 0; i < y_rows; i++) perm[i] = i;
    for (uint32_t i = y_rows - 1; i > 0; i--) {
        uint32_t j = rng_below(&r, i + 1), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    for (uint32_t i = 0; i < t->T; i++) {
        gl[ids_off + i] = gat ? (int32_t)rng_below(&r, x_rows) : (int32_t)i;
        sl[ids_off + i] = sca ? (int32_t)perm[i] : (int32_t)i;
    }
    if (gat && t->T > 3) gl[ids_off + 2] = -1;
    if (sca && t->T > 4) sl[ids_off + 4] = (int32_t)y_rows;

    cvk_buffer bw, bx, by, bl;
    uint64_t saved = vk->mem.max_part;
    if (t->max_part) vk->mem.max_part = t->max_part;
    int rc = cvk_buffer_create(&vk->mem, &bw, rb * total_rows, rb, CVK_MEM_DEVICE);
    vk->mem.max_part = saved; /* before the assert: a failure must not shrink the parts of the tests after it */
    assert_int_equal(rc, 0);
    if (t->max_part) assert_true(bw.n_parts >= 3);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, nx * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, ny * 4, 4, CVK_MEM_DEVICE), 0);
    uint64_t lb = ((n_ids * 4 + 255) / 256) * 256; /* two lists, each at an aligned offset */
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, 2 * lb, 4, CVK_MEM_DEVICE), 0);
    vk->stager.force_staging = seed & 1;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), wq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bl, 0, n_ids * 4), gl), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bl, lb, n_ids * 4), sl), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_pipeline p;
    if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, t->type, t->tile)) fail_msg("%s", cd_errmsg());
    cvk_matmul_args a = {.w = &bw,
                         .type = t->type,
                         .n_in = t->n_in,
                         .n_rows = t->n_rows,
                         .expert = t->expert,
                         .x = cvk_view_whole(&bx),
                         .x_rows = x_rows,
                         .x_stride = xs,
                         .y = cvk_view_whole(&by),
                         .y_rows = y_rows,
                         .y_stride = ys,
                         .n_tokens = t->T,
                         .gather = gat ? cvk_view_range(&bl, 0, n_ids * 4) : (cvk_view){0},
                         .scatter = sca ? cvk_view_range(&bl, lb, n_ids * 4) : (cvk_view){0},
                         .ids_off = ids_off};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&by), 0x7fc00000u), 0);
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    float *got = malloc(ny * 4);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), got), 0);
    vk->stager.force_staging = false;

    /* reference; rows of Y no token writes must keep the fill */
    bool *written = calloc(y_rows, 1);
    double worst = 0;
    for (uint32_t tk = 0; tk < t->T; tk++) {
        int32_t g = gl[ids_off + tk], s = sl[ids_off + tk];
        if (g < 0 || (uint32_t)g >= x_rows || s < 0 || (uint32_t)s >= y_rows) continue;
        written[s] = true;
        const float *xr = x + (size_t)g * xs;
        for (uint32_t m = 0; m < t->n_rows; m++) {
            const float *wr = wd + (size_t)m * t->n_in;
            double sum = 0, mag = 0;
            for (uint32_t i = 0; i < t->n_in; i++) sum += (double)wr[i] * xr[i], mag += fabs((double)wr[i] * xr[i]);
            float v = got[(size_t)s * ys + m];
            double err = fabs(v - sum);
            if (isnan(v) || err > 2e-5 * mag + 1e-30)
                fail_msg("%s T=%u n_rows=%u n_in=%u mode=%u: token %u (x %d -> y %d) row %u = %.9g, want %.9g",
                         qtype_name(t->type), t->T, t->n_rows, t->n_in, t->mode, tk, g, s, m, v, sum);
            if (mag > 0) worst = fmax(worst, err / mag);
        }
    }
    for (uint32_t s = 0; s < y_rows; s++)
        for (uint32_t m = 0; m < (written[s] ? 0 : t->n_rows); m++)
            if (!is_nan_fill(got[(size_t)s * ys + m])) fail_msg("row %u of Y written, no token maps there", s);
    if (t->T == 130 && t->n_rows == 200 && !t->tile)
        printf("  %-5s T=%-3u rows=%-3u n_in=%-3u mode=%u parts=%-2u worst |err| / sum|w*x| = %.2g\n",
               qtype_name(t->type), t->T, t->n_rows, t->n_in, t->mode, bw.n_parts, worst);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &by);
    cvk_buffer_destroy(&vk->mem, &bl);
    free(row), free(wq), free(wd), free(x), free(gl), free(sl), free(perm), free(got), free(written);
}

static uint32_t n_in_for(enum qtype t) { return qtype_block_elems(t) == QK_K ? 2 * QK_K : 5 * 32; }

/* The types added for the small files (Q4_0 .. Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4) share the kernels' code
 * outside their decoders: the biggest cases below run for the first seven only (CI time). */
static bool decoder_only_type(enum qtype t) { return qtype_block_elems(t) > 1 && !cvk_matmul_texel_type(t); }

/* The types that run in test_every_type_awkward_sizes only (CI time): IQ4_NL (above), and the
 * grid types (IQ3, IQ2, IQ1), qb_decode8 branches whose grids lavapipe reads per lane (slow there); they
 * are bit-exact in test_vk_get_rows and against the CPU reference in test_vk_matvec and
 * test_vk_moe_group. */
static const enum qtype awkward_only_types[] = {QTYPE_IQ4_NL, QTYPE_IQ3_XXS, QTYPE_IQ3_S, QTYPE_IQ2_XXS,
                                                QTYPE_IQ2_XS, QTYPE_IQ2_S,   QTYPE_IQ1_S, QTYPE_IQ1_M};

/* Every type x T in {1, 5, 33, 130} x n_rows in {1, 17, 200}, plain (T 130: the first seven; the
 * grid types T 1 and 5). */
static void test_every_type_awkward_sizes(void **state) {
    (void)state;
    const uint32_t Ts[] = {1, 5, 33, 130}, rows[] = {1, 17, 200};
    const size_t n_all = sizeof all_types / sizeof *all_types;
    uint64_t seed = 1;
    for (size_t ti = 0; ti < n_all + sizeof awkward_only_types / sizeof *awkward_only_types; ti++) {
        enum qtype ty = ti < n_all ? all_types[ti] : awkward_only_types[ti - n_all];
        bool grid = ti >= n_all && ty != QTYPE_IQ4_NL; /* T 1 and 5 (lavapipe reads their grids per lane) */
        for (size_t i = 0; i < (grid ? 2u : decoder_only_type(ty) ? 3u : 4u); i++)
            for (size_t j = 0; j < 3; j++) {
                tcase t = {.type = ty, .T = Ts[i], .n_rows = rows[j], .n_in = n_in_for(ty)};
                run_case(&t, seed++);
            }
    }
}

/* Gather, scatter and both, from the middle slice of three experts. The lists do not depend on
 * the weights' type: the types here are one per decoder family and row alignment (the first
 * seven, a 22-byte legacy block, the 110-byte Q3_K, MXFP4's 85-byte rows at odd offsets), not
 * all_types (CI time). */
static void test_gather_scatter(void **state) {
    (void)state;
    const enum qtype types[] = {QTYPE_F32,  QTYPE_F16,  QTYPE_BF16, QTYPE_Q8_0, QTYPE_Q4_K,
                                QTYPE_Q5_K, QTYPE_Q6_K, QTYPE_Q5_0, QTYPE_Q3_K, QTYPE_MXFP4};
    const uint32_t Ts[] = {1, 5, 33, 130}, rows[] = {1, 17, 200};
    uint64_t seed = 100;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (uint32_t mode = 1; mode <= 3; mode++)
            for (size_t i = 0; i < 4; i++) {
                tcase t = {.type = types[ti],
                           .T = Ts[i],
                           .n_rows = rows[(i + mode) % 3],
                           .n_in = n_in_for(types[ti]),
                           .mode = mode,
                           .n_expert = 3,
                           .expert = 1};
                run_case(&t, seed++);
            }
}

/* Weights in parts of ~2-20 rows; expert slices straddle part boundaries. */
static void test_split_parts(void **state) {
    (void)state;
    uint64_t seed = 200;
    for (size_t ti = 0; ti < sizeof all_types / sizeof *all_types; ti++) {
        enum qtype ty = all_types[ti];
        uint32_t n_in = n_in_for(ty);
        uint64_t rb = qtype_row_bytes(ty, n_in);
        /* rounded down to whole rows by the split, and at least a 16-byte multiple of rows (MXFP4's
         * 85-byte rows: 16 of them) */
        uint64_t low = rb & (~rb + 1); /* the largest power of two dividing rb */
        uint64_t unit = rb * (16 / (low < 16 ? low : 16));
        uint64_t max_part = (rb * (ty == QTYPE_F32 ? 7 : 13) > unit ? rb * (ty == QTYPE_F32 ? 7 : 13) : unit) + 15;
        tcase a = {.type = ty, .T = 33, .n_rows = 17, .n_in = n_in, .n_expert = 4, .expert = 2, .max_part = max_part};
        run_case(&a, seed++);
        tcase b = {.type = ty,
                   .T = 130,
                   .n_rows = 200,
                   .n_in = n_in,
                   .mode = 3,
                   .n_expert = 2,
                   .expert = 1,
                   .max_part = rb * 37};
        run_case(&b, seed++);
    }
}

/* Tile shapes other than the default: small, skewed, k step not dividing n_in. */
static void test_tiles(void **state) {
    (void)state;
    const cvk_matmul_tile tiles[] = {
        {.bm = 16, .bn = 16, .bk = 8, .tm = 4, .tn = 4},
        {.bm = 32, .bn = 8, .bk = 128, .tm = 4, .tn = 4}, /* Q8_0 / float n_in 160: a partial last step */
        {.bm = 8, .bn = 64, .bk = 64, .tm = 4, .tn = 8},
        {.bm = 128, .bn = 32, .bk = 16, .tm = 8, .tn = 4},
        {.bm = 128, .bn = 64, .bk = 32, .tm = 8, .tn = 4},
        {.bm = 64, .bn = 64, .bk = 16, .tm = 8, .tn = 8}, /* 8 x 8 register blocks (cinder profile --big-tile) */
        {.bm = 32, .bn = 16, .bk = 32, .tm = 8, .tn = 8},
        {.bm = 256, .bn = 1, .tm = 4, .rows = true}, /* rows per invocation: rows past n_rows, several tokens */
        {.bm = 96, .bn = 3, .tm = 3, .rows = true},
        {.bm = 4, .bn = 8, .kl = 8, .rows = true}, /* split k: 2 chunks (n_in 512) over 8 lanes */
        {.bm = 16, .bn = 1, .kl = 2, .rows = true},
        {.bm = 8, .bn = 8, .kl = 4, .tm = 2, .rows = true},  /* split k, 2 rows per lane: each x load feeds both */
        {.bm = 12, .bn = 3, .kl = 2, .tm = 3, .rows = true}, /* 3 rows and 3 tokens a lane */
    };
    uint64_t seed = 300;
    for (size_t i = 0; i < sizeof tiles / sizeof *tiles; i++) {
        tcase a = {.type = QTYPE_F32,
                   .T = 33,
                   .n_rows = 200,
                   .n_in = 160,
                   .mode = 3,
                   .n_expert = 2,
                   .expert = 1,
                   .tile = &tiles[i]};
        run_case(&a, seed++);
        tcase b = {.type = QTYPE_Q4_K, .T = 130, .n_rows = 17, .n_in = 512, .tile = &tiles[i]};
        run_case(&b, seed++);
        tcase c = {.type = QTYPE_Q6_K, .T = 5, .n_rows = 200, .n_in = 256, .mode = 1, .tile = &tiles[i]};
        run_case(&c, seed++);
    }
}

/* --- expert-grouped mode --- */

typedef struct gcase {
    enum qtype type;
    uint32_t T, k, n_expert, n_rows, n_in;
    uint32_t dist; /* 0 uniform, 1 odd experts only, 2 every token's slot 0 on the last expert,
                                    3 expert e gets counts[e % 8] tokens (the rest of the slots dropped) */
    bool down;     /* x rows are the pairs (gather = scatter list), else the tokens */
    uint32_t ids_off;
    uint64_t max_part;           /* 0: the device's */
    const cvk_matmul_tile *tile; /* NULL: default */
    /* work items (the forward pass's way): list 0 = experts with <= split tokens in items of
     * tile's bn, list 1 = the rest in items of tile1's bn, two indirect dispatches */
    bool items;
    const cvk_matmul_tile *tile1; /* NULL: default */
    uint32_t split;
    const uint32_t *counts; /* dist 3: 8 counts */
} gcase;

/* The last grouped case's weights, quantized and dequantized, kept for the next case of the same
 * seed and shape (every tiling of test_grouped_items runs one case's weights): quantizing them
 * again cost a quarter of that test. */
static struct {
    uint64_t seed;
    enum qtype type;
    uint32_t rows, n_in;
    uint8_t *wq;
    float *wd;
} grouped_weights;

static void make_grouped_weights(const gcase *g, uint64_t seed) {
    if (grouped_weights.wq && grouped_weights.seed == seed && grouped_weights.type == g->type &&
        grouped_weights.rows == g->n_expert * g->n_rows && grouped_weights.n_in == g->n_in)
        return;
    rng r;
    rng_seed(&r, seed ^ 0x5eedull);
    size_t rb = qtype_row_bytes(g->type, g->n_in);
    uint32_t total_rows = g->n_expert * g->n_rows;
    free(grouped_weights.wq), free(grouped_weights.wd);
    grouped_weights.seed = seed, grouped_weights.type = g->type, grouped_weights.rows = total_rows;
    grouped_weights.n_in = g->n_in;
    float *row = malloc(g->n_in * sizeof *row);
    uint8_t *wq = grouped_weights.wq = malloc(rb * total_rows);
    float *wd = grouped_weights.wd = malloc(sizeof(float) * total_rows * g->n_in);
    for (uint32_t i = 0; i < total_rows; i++) {
        float scale = (i % 5 == 0) ? 1e-2f : 1.0f;
        for (uint32_t j = 0; j < g->n_in; j++) row[j] = rng_normal(&r) * scale;
        tu_quantize_row(g->type, row, wq + rb * i, g->n_in);
        quant_dequantize_row(g->type, wq + rb * i, wd + (size_t)i * g->n_in, g->n_in);
    }
    free(row);
}

/* Routes T tokens to k distinct experts each (some pairs dropped as -1), groups the pairs on
 * the host (counting sort by expert, then pair index), runs one grouped call and checks
 * every written row against the double product and every other row for the NaN fill. */
static float *run_grouped(const gcase *g, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    uint32_t T = g->T, k = g->k, E = g->n_expert, P = T * k;
    size_t rb = qtype_row_bytes(g->type, g->n_in);
    uint32_t total_rows = E * g->n_rows;
    make_grouped_weights(g, seed);
    const uint8_t *wq = grouped_weights.wq;
    const float *wd = grouped_weights.wd;
    /* routing: k distinct experts per token */
    int32_t *ids = malloc(P * 4);
    if (g->dist == 3) { /* expert e on counts[e % 8] consecutive tokens (mod T): distinct per token */
        uint32_t *used = calloc(T, 4), cursor = 0;
        for (uint32_t q = 0; q < P; q++) ids[q] = -1;
        for (uint32_t e = 0; e < E; e++)
            for (uint32_t i = 0; i < g->counts[e % 8]; i++, cursor++) {
                uint32_t t = cursor % T;
                assert_true(g->counts[e % 8] <= T && used[t] < k);
                ids[t * k + used[t]++] = (int32_t)e;
            }
        free(used);
    }
    for (uint32_t t = 0; t < (g->dist == 3 ? 0 : T); t++)
        for (uint32_t j = 0; j < k; j++) {
            int32_t e;
            bool dup;
            do {
                if (g->dist == 2 && j == 0) e = (int32_t)E - 1;
                else if (g->dist == 1) e = (int32_t)(2 * rng_below(&r, E / 2) + 1);
                else e = (int32_t)rng_below(&r, E);
                dup = false;
                for (uint32_t q = 0; q < j; q++) dup |= ids[t * k + q] == e;
            } while (dup);
            ids[t * k + j] = e;
        }
    if (P > 5 && g->dist != 3) ids[P / 2] = -1, ids[P - 1] = (int32_t)E; /* dropped */
    /* host grouping: groups, gather (token), scatter (pair); lists start at ids_off */
    uint32_t *groups = calloc(E, 8), n_ids = g->ids_off + P;
    int32_t *gl = malloc(n_ids * 4), *sl = malloc(n_ids * 4);
    for (uint32_t i = 0; i < n_ids; i++) gl[i] = sl[i] = -1;
    uint32_t off = 0;
    for (uint32_t e = 0; e < E; e++) {
        groups[2 * e] = off;
        for (uint32_t q = 0; q < P; q++)
            if (ids[q] == (int32_t)e) gl[g->ids_off + off] = (int32_t)(q / k), sl[g->ids_off + off] = (int32_t)q, off++;
        groups[2 * e + 1] = off - groups[2 * e];
    }
    /* work lists as moe_group writes them: {expert, first token}, list 1 at cap */
    cvk_pipeline p, p1;
    if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, g->type, g->tile)) fail_msg("%s", cd_errmsg());
    if (cvk_matmul_pipeline(&p1, &vk->dev, vk->pcache.cache, g->type, g->tile1)) fail_msg("%s", cd_errmsg());
    uint32_t tile0 = cvk_matmul_token_tile(&p), tile1 = cvk_matmul_token_tile(&p1);
    uint32_t cap = P / (tile0 < tile1 ? tile0 : tile1) + 1 + E, nl[2] = {0, 0};
    uint32_t *items = calloc(2ull * cap, 8);
    for (uint32_t e = 0; e < E; e++) {
        uint32_t c = groups[2 * e + 1], l = c > g->split, tile = l ? tile1 : tile0;
        for (uint32_t t0 = 0; t0 < c; t0 += tile) {
            items[2 * (l * cap + nl[l])] = e;
            items[2 * (l * cap + nl[l]) + 1] = t0;
            nl[l]++;
        }
    }
    uint32_t disp[6] = {nl[0], cvk_matmul_row_tiles(&p, g->n_rows), 1, nl[1], cvk_matmul_row_tiles(&p1, g->n_rows), 1};
    uint32_t x_rows = g->down ? P : T, y_rows = P;
    uint32_t xs = g->n_in + 4, ys = g->n_rows + 3; /* padded x rows at whole texels (the texel kernels') */
    size_t nx = (size_t)(x_rows - 1) * xs + g->n_in, ny = (size_t)(y_rows - 1) * ys + g->n_rows;
    float *x = malloc(nx * 4), *got = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&r);

    cvk_buffer bw, bx, by, bl, bg, bit, bd;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bit, 16ull * cap, 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bd, 64, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bit), items), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bd, 4, 24), disp), 0); /* at 4: not 16-aligned */
    uint64_t saved = vk->mem.max_part;
    if (g->max_part) vk->mem.max_part = g->max_part;
    int rc = cvk_buffer_create(&vk->mem, &bw, rb * total_rows, rb, CVK_MEM_DEVICE);
    vk->mem.max_part = saved; /* as in run_case */
    assert_int_equal(rc, 0);
    if (g->max_part) assert_true(bw.n_parts >= 3);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, nx * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, ny * 4, 4, CVK_MEM_DEVICE), 0);
    uint64_t lb = ((n_ids * 4 + 255) / 256) * 256;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, 2 * lb, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bg, E * 8, 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), wq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bl, 0, n_ids * 4), gl), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bl, lb, n_ids * 4), sl), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bg), groups), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_view sv = cvk_view_range(&bl, lb, n_ids * 4);
    cvk_matmul_args a = {.w = &bw,
                         .type = g->type,
                         .n_in = g->n_in,
                         .n_rows = g->n_rows,
                         .x = cvk_view_whole(&bx),
                         .x_rows = x_rows,
                         .x_stride = xs,
                         .y = cvk_view_whole(&by),
                         .y_rows = y_rows,
                         .y_stride = ys,
                         .n_tokens = T,
                         .gather = g->down ? sv : cvk_view_range(&bl, 0, n_ids * 4),
                         .scatter = sv,
                         .ids_off = g->ids_off,
                         .groups = cvk_view_whole(&bg),
                         .n_experts = E};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&by), 0x7fc00000u), 0);
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    if (!g->items) {
        if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    } else {
        for (uint32_t l = 0; l < 2; l++) {
            a.items = cvk_view_whole(&bit), a.item0 = l * cap, a.item_tile = l ? tile1 : tile0;
            a.dispatch = cvk_view_range(&bd, 4 + 12 * l, 12);
            if (cvk_matmul(&vk->cmd, &vk->dpool, l ? &p1 : &p, &a)) fail_msg("%s", cd_errmsg());
        }
    }
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), got), 0);

    bool *written = calloc(y_rows, 1);
    double worst = 0;
    for (uint32_t q = 0; q < P; q++) {
        int32_t e = ids[q];
        if (e < 0 || (uint32_t)e >= E) continue;
        written[q] = true;
        const float *xr = x + (size_t)(g->down ? q : q / k) * xs;
        for (uint32_t m = 0; m < g->n_rows; m++) {
            const float *wr = wd + ((size_t)e * g->n_rows + m) * g->n_in;
            double sum = 0, mag = 0;
            for (uint32_t i = 0; i < g->n_in; i++) sum += (double)wr[i] * xr[i], mag += fabs((double)wr[i] * xr[i]);
            float v = got[(size_t)q * ys + m];
            double err = fabs(v - sum);
            if (isnan(v) || err > 2e-5 * mag + 1e-30)
                fail_msg("grouped %s T=%u k=%u E=%u rows=%u: pair %u (expert %d) row %u = %.9g, want %.9g",
                         qtype_name(g->type), T, k, E, g->n_rows, q, e, m, v, sum);
            if (mag > 0) worst = fmax(worst, err / mag);
        }
    }
    for (uint32_t q = 0; q < y_rows; q++)
        for (uint32_t m = 0; m < (written[q] ? 0 : g->n_rows); m++)
            if (!is_nan_fill(got[(size_t)q * ys + m])) fail_msg("grouped: row %u of Y written, no pair maps there", q);
    print_message(
        "grouped %-5s T=%-3u k=%u E=%-3u rows=%-3u dist=%u down=%d parts=%-2u items=%d (%u + %u) worst %.2g\n",
        qtype_name(g->type), T, k, E, g->n_rows, g->dist, g->down, bw.n_parts, g->items, nl[0], nl[1], worst);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_pipeline_destroy(&vk->dev, &p1);
    cvk_buffer_destroy(&vk->mem, &bit);
    cvk_buffer_destroy(&vk->mem, &bd);
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &by);
    cvk_buffer_destroy(&vk->mem, &bl);
    cvk_buffer_destroy(&vk->mem, &bg);
    free(ids), free(groups), free(gl), free(sl), free(x), free(written), free(items);
    return got;
}

/* Every type; uniform, half the experts empty, one expert in every token; token- and
 * pair-indexed X (gate/up vs down); list offsets; awkward T; a tile whose token extent
 * leaves most token tiles empty. */
/* Accumulate (y += W x, the residual add folded into wo / the dense down projection): the
 * bits of the plain product added to y's old value in one float add, for the tiled and the rows
 * kernels, every token count class, with a scatter (rows no token maps to keep their value). */
static void test_accumulate(void **state) {
    (void)state;
    const cvk_matmul_tile split = {.bm = 16, .bn = 8, .kl = 2, .rows = true};
    const cvk_matmul_tile *tiles[] = {NULL,       &cvk_matmul_tile_rows, &cvk_matmul_tile_one, &split, texel_one,
                                      &texel_one4};
    const enum qtype types[] = {QTYPE_Q4_K, QTYPE_F32, QTYPE_Q6_K};
    const uint32_t Ts[] = {1, 7, 70};
    rng r;
    rng_seed(&r, 4242);
    for (size_t ti = 0; ti < sizeof tiles / sizeof *tiles; ti++)
        for (size_t k = 0; k < 3; k++)
            for (size_t n = 0; n < 3; n++) {
                enum qtype ty = types[k];
                if (tiles[ti] && tiles[ti]->texel && !cvk_matmul_texel_type(ty)) continue;
                uint32_t T = Ts[n], n_rows = 37, n_in = n_in_for(ty), y_rows = T + 3;
                size_t rb = qtype_row_bytes(ty, n_in), nx = (size_t)T * n_in, ny = (size_t)y_rows * n_rows;
                float *row = malloc(n_in * 4), *x = malloc(nx * 4), *y0 = malloc(ny * 4), *plain = malloc(ny * 4),
                      *got = malloc(ny * 4);
                uint8_t *wq = malloc(rb * n_rows);
                int32_t *sl = malloc(T * 4);
                for (uint32_t i = 0; i < n_rows; i++) {
                    for (uint32_t j = 0; j < n_in; j++) row[j] = rng_normal(&r);
                    tu_quantize_row(ty, row, wq + rb * i, n_in);
                }
                for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&r);
                for (size_t i = 0; i < ny; i++) y0[i] = rng_normal(&r) * 4;
                for (uint32_t i = 0; i < T; i++) sl[i] = (int32_t)(y_rows - 1 - i); /* reversed; rows 0-2 left alone */
                cvk_buffer bw, bx, by, bp, bl;
                assert_int_equal(cvk_buffer_create(&vk->mem, &bw, rb * n_rows, rb, CVK_MEM_DEVICE), 0);
                assert_int_equal(cvk_buffer_create(&vk->mem, &bx, nx * 4, 4, CVK_MEM_DEVICE), 0);
                assert_int_equal(cvk_buffer_create(&vk->mem, &by, ny * 4, 4, CVK_MEM_DEVICE), 0);
                assert_int_equal(cvk_buffer_create(&vk->mem, &bp, ny * 4, 4, CVK_MEM_DEVICE), 0);
                assert_int_equal(cvk_buffer_create(&vk->mem, &bl, T * 4, 4, CVK_MEM_DEVICE), 0);
                assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), wq), 0);
                assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
                assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&by), y0), 0);
                assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bp), y0), 0);
                assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bl), sl), 0);
                assert_int_equal(cvk_stager_flush(&vk->stager), 0);
                cvk_pipeline p;
                if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, ty, tiles[ti])) fail_msg("%s", cd_errmsg());
                cvk_matmul_args a = {.w = &bw,
                                     .type = ty,
                                     .n_in = n_in,
                                     .n_rows = n_rows,
                                     .x = cvk_view_whole(&bx),
                                     .x_rows = T,
                                     .y = cvk_view_whole(&bp),
                                     .y_rows = y_rows,
                                     .n_tokens = T,
                                     .scatter = cvk_view_whole(&bl)};
                assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
                if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
                a.y = cvk_view_whole(&by), a.accumulate = true;
                if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
                cvk_barrier_device_to_host(vk->cmd.cb);
                assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
                assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bp), plain), 0);
                assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), got), 0);
                bool *hit = calloc(y_rows, 1);
                for (uint32_t i = 0; i < T; i++) hit[sl[i]] = true;
                for (uint32_t s = 0; s < y_rows; s++)
                    for (uint32_t m = 0; m < n_rows; m++) {
                        size_t o = (size_t)s * n_rows + m;
                        float want = hit[s] ? y0[o] + plain[o] : y0[o];
                        if (memcmp(&got[o], &want, 4))
                            fail_msg("%s %s T=%u: y[%u][%u] = %.9g, want %.9g (y0 %.9g + %.9g)", qtype_name(ty),
                                     tiles[ti] ? "rows" : "tiled", T, s, m, got[o], want, y0[o], plain[o]);
                    }
                assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
                cvk_pipeline_destroy(&vk->dev, &p);
                cvk_buffer *bufs[] = {&bw, &bx, &by, &bp, &bl};
                for (size_t i = 0; i < 5; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
                free(row), free(x), free(y0), free(plain), free(got), free(wq), free(sl), free(hit);
            }
}

/* x bound at an offset into its buffer (the forward pass's last T % 4 tokens of a dense
 * projection on a CPU device): the texel kernels, one and four tokens per column, for x at
 * whole texels (4, 8, 12 and 20 floats in), bit for bit against x at offset 0; an offset or
 * a row stride that is not whole texels is refused. */
static void test_x_offset(void **state) {
    (void)state;
    const cvk_matmul_tile *tiles[] = {texel_one, &cvk_matmul_tile_eight_texel};
    const enum qtype types[] = {QTYPE_Q8_0, QTYPE_Q4_K, QTYPE_Q5_K, QTYPE_Q6_K};
    const uint32_t offs[] = {4, 8, 12, 20}, T = 6, n_rows = 37;
    rng r;
    rng_seed(&r, 777);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t k = 0; k < 4; k++) {
            enum qtype ty = types[k];
            uint32_t n_in = n_in_for(ty), off = offs[(ti * 4 + k) % 4];
            size_t rb = qtype_row_bytes(ty, n_in), nx = (size_t)T * n_in, ny = (size_t)T * n_rows;
            float *row = malloc(n_in * 4), *x = calloc(nx + 20, 4), *want = malloc(ny * 4), *got = malloc(ny * 4);
            uint8_t *wq = malloc(rb * n_rows);
            for (uint32_t i = 0; i < n_rows; i++) {
                for (uint32_t j = 0; j < n_in; j++) row[j] = rng_normal(&r);
                tu_quantize_row(ty, row, wq + rb * i, n_in);
            }
            for (size_t i = 0; i < nx; i++) x[off + i] = rng_normal(&r);
            cvk_buffer bw, bx0, bx, by;
            assert_int_equal(cvk_buffer_create(&vk->mem, &bw, rb * n_rows, rb, CVK_MEM_DEVICE), 0);
            assert_int_equal(cvk_buffer_create(&vk->mem, &bx0, nx * 4, 4, CVK_MEM_DEVICE), 0);
            assert_int_equal(cvk_buffer_create(&vk->mem, &bx, (nx + 20) * 4, 4, CVK_MEM_DEVICE), 0);
            assert_int_equal(cvk_buffer_create(&vk->mem, &by, ny * 4, 4, CVK_MEM_DEVICE), 0);
            assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), wq), 0);
            assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx0), x + off), 0);
            assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
            assert_int_equal(cvk_stager_flush(&vk->stager), 0);
            cvk_pipeline p;
            if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, ty, tiles[ti])) fail_msg("%s", cd_errmsg());
            for (int pass = 0; pass < 2; pass++) {
                cvk_matmul_args a = {.w = &bw,
                                     .type = ty,
                                     .n_in = n_in,
                                     .n_rows = n_rows,
                                     .x = pass ? cvk_view_range(&bx, off * 4ull, nx * 4) : cvk_view_whole(&bx0),
                                     .x_rows = T,
                                     .y = cvk_view_whole(&by),
                                     .y_rows = T,
                                     .n_tokens = T};
                assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
                if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
                cvk_barrier_device_to_host(vk->cmd.cb);
                assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
                assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), pass ? got : want), 0);
                assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
            }
            for (size_t i = 0; i < ny; i++)
                if (memcmp(&got[i], &want[i], 4))
                    fail_msg("%s bn %u x at float %u: y[%zu] = %.9g, want %.9g", qtype_name(ty), tiles[ti]->bn, off, i,
                             got[i], want[i]);
            cvk_matmul_args bad = {.w = &bw,
                                   .type = ty,
                                   .n_in = n_in,
                                   .n_rows = n_rows,
                                   .x = cvk_view_range(&bx, 8, nx * 4),
                                   .x_rows = T,
                                   .y = cvk_view_whole(&by),
                                   .y_rows = T,
                                   .n_tokens = T};
            assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
            assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &bad), -1); /* 2 floats in: not a texel */
            assert_non_null(strstr(cd_errmsg(), "texel"));
            bad.x = cvk_view_whole(&bx), bad.x_stride = n_in + 2, bad.x_rows = T - 1; /* rows off whole texels */
            assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &bad), -1);
            assert_non_null(strstr(cd_errmsg(), "whole texels"));
            assert_int_equal(cvk_cmd_run(&vk->cmd), 0); /* nothing was recorded */
            assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
            cvk_pipeline_destroy(&vk->dev, &p);
            cvk_buffer *bufs[] = {&bw, &bx0, &bx, &by};
            for (size_t i = 0; i < 4; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
            free(row), free(x), free(want), free(got), free(wq);
        }
}

static void test_grouped(void **state) {
    (void)state;
    const cvk_matmul_tile small = {.bm = 16, .bn = 8, .bk = 16, .tm = 4, .tn = 4};
    uint64_t seed = 400;
    for (size_t ti = 0; ti < sizeof all_types / sizeof *all_types; ti++) {
        enum qtype ty = all_types[ti];
        uint32_t n_in = n_in_for(ty);
        gcase a = {.type = ty, .T = 33, .k = 2, .n_expert = 8, .n_rows = 17, .n_in = n_in};
        free(run_grouped(&a, seed++));
        gcase b = {.type = ty,
                   .T = 130,
                   .k = 4,
                   .n_expert = 10,
                   .n_rows = 70,
                   .n_in = n_in,
                   .dist = 1,
                   .down = true,
                   .ids_off = 3};
        free(run_grouped(&b, seed++));
    }
    const uint32_t Ts[] = {1, 7, 100};
    for (size_t i = 0; i < 3; i++) {
        gcase c = {
            .type = QTYPE_Q4_K, .T = Ts[i], .k = 8, .n_expert = 128, .n_rows = 9, .n_in = 256, .dist = i == 2 ? 2 : 0};
        free(run_grouped(&c, seed++));
        gcase d = {.type = QTYPE_F32,
                   .T = Ts[i],
                   .k = 1,
                   .n_expert = 3,
                   .n_rows = 40,
                   .n_in = 64,
                   .dist = 2,
                   .down = true,
                   .tile = &small};
        free(run_grouped(&d, seed++));
    }
}

/* Grouped with weights in parts of a few rows: slices straddle parts, parts hold several
 * slices (one dispatch covering an expert range) or part of one. */
static void test_grouped_split_parts(void **state) {
    (void)state;
    uint64_t seed = 500;
    const enum qtype types[] = {QTYPE_F32, QTYPE_Q4_K, QTYPE_Q6_K, QTYPE_Q8_0};
    for (size_t ti = 0; ti < 4; ti++) {
        enum qtype ty = types[ti];
        uint32_t n_in = n_in_for(ty);
        uint64_t rb = qtype_row_bytes(ty, n_in);
        gcase a = {.type = ty, .T = 45, .k = 3, .n_expert = 8, .n_rows = 5, .n_in = n_in, .max_part = rb * 13 + 7};
        free(run_grouped(&a, seed++)); /* parts of 13 rows: 2-3 experts each, straddling */
        gcase b = {.type = ty,
                   .T = 70,
                   .k = 2,
                   .n_expert = 4,
                   .n_rows = 30,
                   .n_in = n_in,
                   .down = true,
                   .dist = 1,
                   .max_part = rb * (ty == QTYPE_Q8_0 ? 16 : 7)}; /* Q8_0: parts are whole 8-row units */
        free(run_grouped(&b, seed++));                            /* parts of 7 (16) rows: slices over 2-5 parts */
    }
}

/* Work items (moe_group's lists, indirect dispatches): 128 experts with 0, 1, 3, 17, 33, 0, 2
 * and 5 tokens (T = 130, k = 8: some slots dropped), a decode-like step (8 tokens, 8 of 128
 * experts each: 0-2 per expert) and a 512-token chunk; every type; gate/up (token rows) and
 * down (pair rows); weights split into parts. Each case is checked against the double
 * product, and its output compared bit for bit across tilings: the grid over every expert
 * with the default tile, the rows kernel (bn 8 and 1, split k) and an
 * 8-token tile for list 0, the default and a 32-token tile for list 1, splits 0 (everything in
 * list 1), 4, 16 and all. Float rows also at n_in 1001 (not whole 32-weight groups). */
static void test_grouped_items(void **state) {
    (void)state;
    static const uint32_t counts[8] = {0, 1, 3, 17, 33, 0, 2, 5};
    const cvk_matmul_tile few = {.bm = 64, .bn = 8, .bk = 32, .tm = 4, .tn = 4},
                          t32 = {.bm = 32, .bn = 32, .bk = 16, .tm = 4, .tn = 4};
    const cvk_matmul_tile one = {.bm = 64, .bn = 1, .rows = true}, three = {.bm = 96, .bn = 1, .tm = 3, .rows = true};
    const cvk_matmul_tile rows2 = {.bm = 128, .bn = 8, .tm = 2, .rows = true};
    /* split k: lanes per row over the 32-weight chunks (a GPU's decode kernels) */
    const cvk_matmul_tile split8 = {.bm = 4, .bn = 8, .kl = 8, .rows = true},
                          split2 = {.bm = 12, .bn = 1, .kl = 2, .rows = true};
    const cvk_matmul_tile split4 = {.bm = 4, .bn = 1, .kl = 8, .rows = true};              /* a GPU's one token */
    const cvk_matmul_tile split_rows = {.bm = 8, .bn = 4, .kl = 4, .tm = 2, .rows = true}; /* 2 rows a lane */
    struct {
        const cvk_matmul_tile *t0, *t1;
        uint32_t split;
    } tilings[] = {{&cvk_matmul_tile_rows, NULL, 16},
                   {&few, NULL, 4},
                   {&one, &t32, UINT32_MAX},
                   {&cvk_matmul_tile_rows, &t32, 0},
                   {&cvk_matmul_tile_rows, &cvk_matmul_tile_rows, UINT32_MAX},
                   {&cvk_matmul_tile_one, NULL, 16},
                   {&three, &rows2, 4},
                   {&split8, NULL, 16},
                   {&split2, &split8, 4},
                   {&split4, &split8, 4},
                   {&split_rows, &split8, 4},
                   {texel_one, &t32, 16},
                   {&texel_rows, NULL, 4},
                   /* a CPU device's: experts with up to 3 tokens in list 0, the others in 8-token texel
         * items (partly empty ones too); and every expert in 8-token texel items */
                   {texel_one, &cvk_matmul_tile_eight_texel, 3},
                   {texel_one, &cvk_matmul_tile_eight_texel, 0}};
    const size_t n_tilings = sizeof tilings / sizeof *tilings;
    uint64_t seed = 600;
    for (size_t ti = 0; ti < sizeof all_types / sizeof *all_types; ti++) {
        enum qtype ty = all_types[ti];
        uint32_t n_in = n_in_for(ty);
        uint64_t rb = qtype_row_bytes(ty, n_in);
        gcase cases[] = {
            {.type = ty, .T = 130, .k = 8, .n_expert = 128, .n_rows = 24, .n_in = n_in, .dist = 3, .counts = counts},
            {.type = ty,
             .T = 130,
             .k = 8,
             .n_expert = 128,
             .n_rows = 70,
             .n_in = n_in,
             .dist = 3,
             .counts = counts,
             .down = true,
             .ids_off = 5},
            {.type = ty, .T = 8, .k = 8, .n_expert = 128, .n_rows = 17, .n_in = n_in},
            {.type = ty,
             .T = 33,
             .k = 8,
             .n_expert = 32,
             .n_rows = 9,
             .n_in = n_in,
             .dist = 3,
             .counts = counts,
             .max_part = rb * (ty == QTYPE_Q8_0 ? 16 : 13) + 7},
            /* many chunks of k: 11 (block types), 8 with a partial last one (the others) */
            {.type = ty,
             .T = 6,
             .k = 4,
             .n_expert = 8,
             .n_rows = 13,
             .n_in = qtype_block_elems(ty) == QK_K ? 11 * QK_K : 2016},
            /* float rows not in whole 32-weight groups (nor in vec4s of x): a weight at a time */
            {.type = ty, .T = 6, .k = 4, .n_expert = 8, .n_rows = 13, .n_in = 1001},
        };
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            if (ty != QTYPE_Q4_K && ty != QTYPE_Q6_K && ci == 1) continue; /* the big down case: two types */
            if (decoder_only_type(ty) && (ci == 0 || ci == 3)) continue;   /* T 130 and 33: the first seven */
            if (ci == 5 && qtype_block_elems(ty) != 1) continue;           /* n_in 1001: float types */
            uint64_t cs = seed++;
            gcase base = cases[ci];
            float *want = run_grouped(&base, cs);
            uint32_t P = base.T * base.k, ys = base.n_rows + 3;
            size_t ny = (size_t)(P - 1) * ys + base.n_rows;
            for (size_t k = 0; k < n_tilings; k++) {
                bool split = tilings[k].t0->kl > 1;
                if (ci >= 4 && k != 0 && !split && !tilings[k].t0->texel)
                    continue; /* many chunks: the rows kernel, the split and texel forms */
                if (tilings[k].t0->texel && !cvk_matmul_texel_type(ty)) continue;
                /* their decoders in each kernel form: rows, tiled, split k with 2 rows a lane (CI time) */
                if (decoder_only_type(ty) && k != 0 && k != 2 && k != 10) continue;
                gcase c = base;
                c.items = true, c.tile = tilings[k].t0, c.tile1 = tilings[k].t1, c.split = tilings[k].split;
                float *got = run_grouped(&c, cs);
                if (memcmp(got, want, ny * 4))
                    fail_msg("items %s case %zu tiling %zu: not the same bits as the grid over every expert",
                             qtype_name(ty), ci, k);
                free(got);
            }
            free(want);
        }
    }
    /* a 512-token chunk at the real expert count (~32 tokens per expert), Q4_K */
    gcase big = {.type = QTYPE_Q4_K, .T = 512, .k = 8, .n_expert = 128, .n_rows = 8, .n_in = 256};
    float *want = run_grouped(&big, seed);
    big.items = true, big.tile = &cvk_matmul_tile_rows, big.split = 32;
    float *got = run_grouped(&big, seed);
    assert_memory_equal(got, want, ((size_t)(512 * 8 - 1) * 11 + 8) * 4);
    free(got), free(want);
}

/* --- gate-up pairs (glu) --- */

typedef struct glu_case {
    enum qtype type;
    uint32_t T, E, n_rows, n_in;
    uint32_t mode;               /* 0 plain on slice E - 1; 1 grouped (grid over every expert); 2 work items */
    uint64_t max_part_slices;    /* the pair buffer in parts of this many pair slices, rounded up to
                                    16-byte multiples (0: one part) */
    const cvk_matmul_tile *tile; /* NULL: default */
} glu_case;

/* The pair product against two separate products and cvk_swiglu, bit for bit: G and U random
 * (E slices of n_rows rows each), the pair buffer built from them (slice e: G's rows, then U's);
 * plain mode on the last slice, grouped mode (k = 2 experts per token, grouped on the host) as
 * a grid over every expert and as work items of the pipeline's tile dispatched indirectly with
 * cvk_matmul_row_tiles(glu) row tiles. Rows no token maps to keep the NaN fill. */
static void run_glu(const glu_case *c, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    const uint32_t k = c->mode ? 2 : 1, P = c->T * k, E = c->E, nr = c->n_rows;
    size_t rb = qtype_row_bytes(c->type, c->n_in), slice = rb * nr;
    uint8_t *gq = malloc(slice * E), *uq = malloc(slice * E), *pq = malloc(2 * slice * E);
    float *row = malloc(c->n_in * 4);
    for (uint32_t i = 0; i < 2 * E * nr; i++) {
        for (uint32_t j = 0; j < c->n_in; j++) row[j] = rng_normal(&r) * (i % 3 ? 1.0f : 0.1f);
        tu_quantize_row(c->type, row, (i < E * nr ? gq : uq) + rb * (i % (E * nr)), c->n_in);
    }
    for (uint32_t e = 0; e < E; e++) {
        memcpy(pq + 2 * e * slice, gq + e * slice, slice);
        memcpy(pq + (2 * e + 1) * slice, uq + e * slice, slice);
    }
    float *x = malloc((size_t)c->T * c->n_in * 4);
    for (size_t i = 0; i < (size_t)c->T * c->n_in; i++) x[i] = rng_normal(&r);
    /* routing (grouped modes): pair q = t*k + j to expert (3t + 5j) % E, counting sort by expert */
    uint32_t *groups = calloc(E, 8), n_items = 0;
    int32_t *gl = malloc(P * 4), *sl = malloc(P * 4);
    uint32_t *items = calloc(P + E, 8);
    cvk_pipeline p, pg; /* plain, and its gate-up pair variant */
    cvk_matmul_tile t = c->tile ? *c->tile : cvk_matmul_tile_default;
    if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, c->type, &t)) fail_msg("%s", cd_errmsg());
    t.glu = true;
    if (cvk_matmul_pipeline(&pg, &vk->dev, vk->pcache.cache, c->type, &t)) fail_msg("%s", cd_errmsg());
    uint32_t tile = cvk_matmul_token_tile(&p), off = 0;
    for (uint32_t e = 0; e < E; e++) {
        groups[2 * e] = off;
        for (uint32_t q = 0; q < P; q++)
            if (c->mode && (3 * (q / k) + 5 * (q % k)) % E == e)
                gl[off] = (int32_t)(q / k), sl[off] = (int32_t)q, off++;
        groups[2 * e + 1] = off - groups[2 * e];
        for (uint32_t t0 = 0; t0 < groups[2 * e + 1]; t0 += tile, n_items++)
            items[2 * n_items] = e, items[2 * n_items + 1] = t0;
    }
    uint32_t disp[3] = {n_items, cvk_matmul_row_tiles(&pg, nr), 1};
    uint32_t y_rows = c->mode ? P + 1 : c->T + 1; /* one row nothing writes */

    cvk_buffer bg, bu, bp, bx, bhg, bhu, bh, bl, bgr, bit, bd;
    uint64_t saved = vk->mem.max_part;
    uint64_t unit = 2 * slice; /* parts hold whole multiples of lcm(pair slice, 16) bytes */
    while (unit % 16) unit += 2 * slice;
    if (c->max_part_slices) vk->mem.max_part = c->max_part_slices * unit + 15;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bp, 2 * slice * E, 2 * slice, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    if (c->max_part_slices) assert_true(bp.n_parts >= 2);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bg, slice * E, rb, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bu, slice * E, rb, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, (size_t)c->T * c->n_in * 4, 4, CVK_MEM_DEVICE), 0);
    cvk_buffer *outs[3] = {&bhg, &bhu, &bh};
    for (int i = 0; i < 3; i++)
        assert_int_equal(cvk_buffer_create(&vk->mem, outs[i], (size_t)y_rows * nr * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, 512ull + P * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bgr, E * 8ull, 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bit, 8ull * (P + E), 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bd, 12, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bg), gq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bu), uq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bp), pq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    if (c->mode) {
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bl, 0, P * 4), gl), 0);
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bl, 256, P * 4), sl), 0);
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bgr), groups), 0);
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_range(&bit, 0, 8ull * n_items + 8), items), 0);
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bd), disp), 0);
    }
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_pipeline ps;
    assert_int_equal(cvk_swiglu_pipeline(&ps, &vk->dev, vk->pcache.cache, 0), 0);
    cvk_matmul_args a = {.type = c->type,
                         .n_in = c->n_in,
                         .n_rows = nr,
                         .x = cvk_view_whole(&bx),
                         .x_rows = c->T,
                         .y_rows = y_rows,
                         .n_tokens = c->T,
                         .expert = c->mode ? 0 : E - 1};
    if (c->mode) {
        a.gather = cvk_view_range(&bl, 0, P * 4), a.scatter = cvk_view_range(&bl, 256, P * 4);
        a.groups = cvk_view_whole(&bgr), a.n_experts = E;
    }
    if (c->mode == 2) a.items = cvk_view_whole(&bit), a.item_tile = tile, a.dispatch = cvk_view_whole(&bd);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(outs[i]), 0x7fc00000u), 0);
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    cvk_barrier_compute_to_indirect(vk->cmd.cb);
    cvk_matmul_args ag = a, au = a, ap = a;
    ag.w = &bg, ag.y = cvk_view_whole(&bhg);
    au.w = &bu, au.y = cvk_view_whole(&bhu);
    ap.w = &bp, ap.y = cvk_view_whole(&bh), ap.glu = true;
    if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &ag) || cvk_matmul(&vk->cmd, &vk->dpool, &p, &au) ||
        cvk_matmul(&vk->cmd, &vk->dpool, &pg, &ap))
        fail_msg("%s", cd_errmsg());
    cvk_barrier_compute_to_compute(vk->cmd.cb);
    /* not over the spare last row: silu(NaN) * NaN need not keep the fill's bits (NVIDIA's does not) */
    cvk_swiglu_args sa = {
        .g = cvk_view_whole(&bhg), .u = cvk_view_whole(&bhu), .h = cvk_view_whole(&bhg), .n = nr, .rows = y_rows - 1};
    assert_int_equal(cvk_swiglu(&vk->cmd, &vk->dpool, &ps, &sa), 0);
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    size_t ny = (size_t)y_rows * nr;
    float *want = malloc(ny * 4), *got = malloc(ny * 4);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bhg), want), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bh), got), 0);
    size_t written = 0;
    for (size_t i = 0; i < ny; i++) {
        if (is_nan_fill(want[i]) != is_nan_fill(got[i]) || (!is_nan_fill(want[i]) && memcmp(&want[i], &got[i], 4)))
            fail_msg("glu %s T=%u E=%u rows=%u mode=%u tile bn %u: y[%zu][%zu] = %.9g, two products + swiglu %.9g",
                     qtype_name(c->type), c->T, E, nr, c->mode, tile, i / nr, i % nr, got[i], want[i]);
        written += !is_nan_fill(got[i]);
    }
    assert_int_equal(written, (size_t)(y_rows - 1) * nr); /* every token's row, not the spare one */
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_pipeline_destroy(&vk->dev, &pg);
    cvk_pipeline_destroy(&vk->dev, &ps);
    cvk_buffer *bufs[] = {&bg, &bu, &bp, &bx, &bhg, &bhu, &bh, &bl, &bgr, &bit, &bd};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
    free(gq), free(uq), free(pq), free(row), free(x), free(groups), free(gl), free(sl), free(items), free(want),
        free(got);
}

/* Gate-up pairs: the kernels the forward pass uses (the default tile, the GPU's 8-token tile, a
 * 16-row tile whose row tiles end mid-pair-block, the rows kernel with 8 tokens and with one,
 * split k, the texel forms) x plain (1, 5, 70 tokens), grouped and work items, and pair slices
 * over parts: every kernel on Q4_K, and Q8_0, F16 and Q6_K (other row sizes, so other pair
 * blocks and part splits) on the default tile, the rows kernel, split k and the texel rows. The
 * pair and its SwiGLU are the epilogue's; each type's decoding is the same code as without
 * pairs, which the other tests run on every type and tile (CI time). */
static void test_glu(void **state) {
    (void)state;
    const cvk_matmul_tile few = {.bm = 64, .bn = 8, .bk = 32, .tm = 4, .tn = 4},
                          small = {.bm = 16, .bn = 8, .bk = 16, .tm = 4, .tn = 4},
                          one = {.bm = 64, .bn = 1, .rows = true};
    const cvk_matmul_tile split = {.bm = 8, .bn = 8, .kl = 4, .rows = true},
                          split1 = {.bm = 4, .bn = 1, .kl = 8, .rows = true}, /* a GPU's one token */
        split_rows = {.bm = 12, .bn = 3, .kl = 4, .tm = 3, .rows = true};     /* 3 rows a lane */
    const cvk_matmul_tile *tiles[] = {
        NULL,        &few,      &small,     &cvk_matmul_tile_rows, &one, &cvk_matmul_tile_one, &split, &split1,
        &split_rows, texel_one, &texel_rows};
    const enum qtype types[] = {QTYPE_Q4_K, QTYPE_Q8_0, QTYPE_F16, QTYPE_Q6_K};
    uint64_t seed = 900;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t k = 0; k < sizeof tiles / sizeof *tiles; k++) {
            if (tiles[k] && tiles[k]->texel && !cvk_matmul_texel_type(types[ti])) continue;
            bool some = !tiles[k] || tiles[k] == &cvk_matmul_tile_rows || tiles[k] == &split || tiles[k] == &texel_rows;
            if (types[ti] != QTYPE_Q4_K && !some) continue;
            uint32_t n_in = n_in_for(types[ti]);
            const uint32_t Ts[] = {1, 5, 70};
            for (size_t i = 0; i < 3; i++) {
                glu_case c = {.type = types[ti], .T = Ts[i], .E = 3, .n_rows = 37, .n_in = n_in, .tile = tiles[k]};
                run_glu(&c, seed++);
            }
            glu_case g = {.type = types[ti], .T = 33, .E = 7, .n_rows = 21, .n_in = n_in, .mode = 1, .tile = tiles[k]};
            run_glu(&g, seed++);
            g.mode = 2, g.max_part_slices = 1;
            run_glu(&g, seed++);
        }
}

static void test_rejects_mismatches(void **state) {
    (void)state;
    cvk_pipeline p;
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_1, NULL), -1);
    cvk_matmul_tile bad = {.bm = 64, .bn = 64, .bk = 32, .tm = 2, .tn = 4}; /* tm not a multiple of 4 */
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F32, &bad), -1);
    bad = (cvk_matmul_tile){.bm = 68, .bn = 64, .bk = 32, .tm = 8, .tn = 4}; /* bm % tm */
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F32, &bad), -1);
    cvk_matmul_tile huge = {.bm = 256, .bn = 256, .bk = 32, .tm = 4, .tn = 4}; /* 4096 invocations */
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F32, &huge), -1);
    bad = (cvk_matmul_tile){
        .bm = 32, .bn = 8, .bk = 48, .tm = 4, .tn = 4}; /* bk neither dividing nor a multiple of the 32-k chunk */
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F32, &bad), -1);
    assert_non_null(strstr(cd_errmsg(), "divide 256"));
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F16, texel_one), -1); /* block types */
    assert_non_null(strstr(cd_errmsg(), "block types"));
    /* split k: a row's lanes meet by subgroupShuffle, so within the smallest subgroup, a power of 2 */
    uint32_t min_sg = vk->dev.info.caps.min_subgroup_size;
    bad = (cvk_matmul_tile){.bm = 2, .bn = 1, .kl = 2 * min_sg, .rows = true};
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F32, &bad), -1);
    assert_non_null(strstr(cd_errmsg(), "subgroup"));
    bad = (cvk_matmul_tile){.bm = 8, .bn = 1, .kl = 3, .rows = true};
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_F32, &bad), -1);
    bad = (cvk_matmul_tile){.bm = 8, .bn = 1, .kl = 2, .rows = true, .texel = true};
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q4_K, &bad), -1);
    assert_non_null(strstr(cd_errmsg(), "split"));
    assert_int_equal(cvk_matmul_pipeline(&p, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0, NULL), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4096, 1, CVK_MEM_DEVICE), 0);
    cvk_matmul_args a = {.w = &b,
                         .type = QTYPE_Q4_K,
                         .n_in = 256,
                         .n_rows = 1,
                         .x = cvk_view_whole(&b),
                         .x_rows = 1,
                         .y = cvk_view_whole(&b),
                         .y_rows = 1,
                         .n_tokens = 1};
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1); /* pipeline for Q8_0 */
    a.type = QTYPE_Q8_0;
    a.n_in = 33;
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1); /* not whole blocks */
    assert_non_null(strstr(cd_errmsg(), "blocks"));
    a.n_in = 64;
    a.n_rows = 100; /* 68-byte rows: 60 fit */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n_rows = 4;
    a.expert = 20; /* slice 20 of 4-row slices: rows 80..83 */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.expert = 0;
    a.n_tokens = 2;
    a.gather = cvk_view_range(&b, 0, 4); /* one entry for two tokens */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.gather = (cvk_view){0};
    a.n_experts = 2; /* without groups */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.groups = cvk_view_range(&b, 0, 8); /* one entry for two experts */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.groups = cvk_view_range(&b, 0, 16);
    a.expert = 1; /* grouped takes expert 0 */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.expert = 0;
    a.n_experts = 20; /* 80 rows of 4-row slices */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n_experts = 4, a.glu = true;                                  /* 4 pair slices of 8 rows: 32 rows, 60 fit */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &p, &a), -1); /* a plain pipeline */
    assert_non_null(strstr(cd_errmsg(), "plain pipeline"));
    cvk_pipeline pg;
    cvk_matmul_tile gt = cvk_matmul_tile_default;
    gt.glu = true;
    assert_int_equal(cvk_matmul_pipeline(&pg, &vk->dev, VK_NULL_HANDLE, QTYPE_Q8_0, &gt), 0);
    a.glu = false;
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &pg, &a), -1); /* a pair pipeline, plain args */
    a.glu = true, a.accumulate = true;
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &pg, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "accumulate"));
    a.accumulate = false, a.n_experts = 8; /* 64 rows */
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &pg, &a), -1);
    cvk_buffer parts;
    uint64_t saved = vk->mem.max_part;
    vk->mem.max_part = 68 * 12; /* parts of 12 rows: the second pair slice straddles */
    assert_int_equal(cvk_buffer_create(&vk->mem, &parts, 68 * 32, 68, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    a.w = &parts, a.n_experts = 4;
    assert_int_equal(cvk_matmul(&vk->cmd, &vk->dpool, &pg, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "pair slices"));
    cvk_buffer_destroy(&vk->mem, &parts);
    cvk_pipeline_destroy(&vk->dev, &pg);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

/* --- timing (CINDER_MATMUL_BENCH=1) --- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A timing run, not a test: main runs it only when CINDER_MATMUL_BENCH is set. */
static void bench_q4k(void **state) {
    (void)state;
    const uint32_t T = 512, n_rows = 768, n_in = 2048;
    enum qtype ty = QTYPE_Q4_K; /* CINDER_MATMUL_BENCH_TYPE=F32 etc. to compare */
    const char *tn = getenv("CINDER_MATMUL_BENCH_TYPE");
    if (tn && qtype_from_name(tn, &ty)) fail_msg("CINDER_MATMUL_BENCH_TYPE=%s: unknown type", tn);
    rng r;
    rng_seed(&r, 42);
    size_t rb = qtype_row_bytes(ty, n_in);
    float *row = malloc(n_in * 4), *wd = malloc((size_t)n_rows * n_in * 4);
    float *x = malloc((size_t)T * n_in * 4);
    float *ycpu = malloc((size_t)T * n_rows * 4), *ygpu = malloc((size_t)T * n_rows * 4);
    uint8_t *wq = malloc(rb * n_rows);
    for (uint32_t i = 0; i < n_rows; i++) {
        for (uint32_t j = 0; j < n_in; j++) row[j] = rng_normal(&r);
        tu_quantize_row(ty, row, wq + rb * i, n_in);
    }
    for (size_t i = 0; i < (size_t)T * n_in; i++) x[i] = rng_normal(&r);

    double t0 = now_s(); /* naive CPU: dequantize, then the triple loop, one thread */
    for (uint32_t i = 0; i < n_rows; i++) quant_dequantize_row(ty, wq + rb * i, wd + (size_t)i * n_in, n_in);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t m = 0; m < n_rows; m++) {
            float s = 0;
            const float *a = wd + (size_t)m * n_in, *b = x + (size_t)t * n_in;
            for (uint32_t i = 0; i < n_in; i++) s += a[i] * b[i];
            ycpu[(size_t)t * n_rows + m] = s;
        }
    double cpu = now_s() - t0;

    cvk_buffer bw, bx, by;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, rb * n_rows, rb, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, (size_t)T * n_in * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, (size_t)T * n_rows * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), wq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_pipeline p;
    cvk_matmul_tile tile = cvk_matmul_tile_default; /* CINDER_MATMUL_TILE=bm,bn,bk,tm,tn to try others */
    const char *ts = getenv("CINDER_MATMUL_TILE");
    if (ts && sscanf(ts, "%u,%u,%u,%u,%u", &tile.bm, &tile.bn, &tile.bk, &tile.tm, &tile.tn) != 5)
        fail_msg("CINDER_MATMUL_TILE=%s: want bm,bn,bk,tm,tn", ts);
    if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, ty, &tile)) fail_msg("%s", cd_errmsg());
    cvk_matmul_args a = {.w = &bw,
                         .type = ty,
                         .n_in = n_in,
                         .n_rows = n_rows,
                         .x = cvk_view_whole(&bx),
                         .x_rows = T,
                         .y = cvk_view_whole(&by),
                         .y_rows = T,
                         .n_tokens = T};
    bool timed = cvk_timer_enable(&vk->timer, true) == 0;
    double best_wall = 1e9, best_gpu = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
        if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
        cvk_barrier_device_to_host(vk->cmd.cb);
        double w0 = now_s();
        assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
        best_wall = fmin(best_wall, now_s() - w0);
        cvk_timing tm[4];
        uint32_t n = 0;
        if (timed && cvk_timer_read(&vk->timer, tm, 4, &n) == 0 && n)
            best_gpu = fmin(best_gpu, (tm[0].end_ns - tm[0].start_ns) * 1e-9);
        assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    }
    cvk_timer_enable(&vk->timer, false);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), ygpu), 0);
    double flops = 2.0 * T * n_rows * n_in;
    printf("  tile %ux%ux%u / %ux%u\n", tile.bm, tile.bn, tile.bk, tile.tm, tile.tn);
    printf("  %s %u tokens x (%u x %u): lavapipe %.1f ms (timestamps %.1f ms, %.2f GFLOP/s), naive CPU %.1f ms "
           "(%.2f GFLOP/s)\n",
           qtype_name(ty), T, n_rows, n_in, best_wall * 1e3, best_gpu * 1e3, flops / best_gpu * 1e-9, cpu * 1e3,
           flops / cpu * 1e-9);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)T * n_rows; i++)
        num += (ygpu[i] - ycpu[i]) * (double)(ygpu[i] - ycpu[i]), den += (double)ycpu[i] * ycpu[i];
    printf("  rel L2 vs CPU: %.2g\n", sqrt(num / den));
    assert_true(sqrt(num / den) < 1e-5);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &by);
    free(row), free(wd), free(x), free(ycpu), free(ygpu), free(wq);
}

/* CINDER_MATMUL_BENCH=kernels: one 768 x 2048 Q4_K expert (CINDER_MATMUL_BENCH_TYPE and _SHAPE to vary)
 * times 1, 8 and 32 tokens through each few-token kernel and tile, best wall time of 5
 * (lavapipe: the per-weight decode cost against the per-token fma cost). */
static void bench_kernels(void **state) {
    (void)state;
    uint32_t n_rows = 768, n_in = 2048;
    const uint32_t Tmax = 128;
    enum qtype ty = QTYPE_Q4_K;
    const char *tn = getenv("CINDER_MATMUL_BENCH_TYPE"), *sh = getenv("CINDER_MATMUL_BENCH_SHAPE");
    if (tn && qtype_from_name(tn, &ty)) fail_msg("CINDER_MATMUL_BENCH_TYPE=%s: unknown type", tn);
    /* CINDER_MATMUL_BENCH_SHAPE="rows,in": e.g. "2048,768", an expert's down projection */
    if (sh && (sscanf(sh, "%u,%u", &n_rows, &n_in) != 2 || !n_rows || n_in % 256))
        fail_msg("CINDER_MATMUL_BENCH_SHAPE=%s: rows,in (in a multiple of 256)", sh);
    rng r;
    rng_seed(&r, 42);
    size_t rb = qtype_row_bytes(ty, n_in);
    float *row = malloc(n_in * 4), *x = malloc((size_t)Tmax * n_in * 4);
    uint8_t *wq = malloc(rb * 2 * n_rows); /* a gate-up pair slice; plain products use its first half */
    for (uint32_t i = 0; i < 2 * n_rows; i++) {
        for (uint32_t j = 0; j < n_in; j++) row[j] = rng_normal(&r);
        tu_quantize_row(ty, row, wq + rb * i, n_in);
    }
    for (size_t i = 0; i < (size_t)Tmax * n_in; i++) x[i] = rng_normal(&r);
    cvk_buffer bw, bx, by;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, rb * 2 * n_rows, rb, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, (size_t)Tmax * n_in * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, (size_t)Tmax * n_rows * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), wq), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    const cvk_matmul_tile tiles[] = {{.bm = 64, .bn = 1, .rows = true},
                                     {.bm = 128, .bn = 1, .tm = 2, .rows = true},
                                     {.bm = 256, .bn = 1, .tm = 4, .rows = true},
                                     {.bm = 512, .bn = 1, .tm = 8, .rows = true},
                                     {.bm = 64, .bn = 4, .rows = true},
                                     {.bm = 64, .bn = 8, .rows = true},
                                     {.bm = 64, .bn = 16, .rows = true},
                                     {.bm = 64, .bn = 8, .bk = 32, .tm = 4, .tn = 4},
                                     {.bm = 64, .bn = 32, .bk = 32, .tm = 4, .tn = 4},
                                     cvk_matmul_tile_default,
                                     texel_one4,
                                     cvk_matmul_tile_one_texel,
                                     texel_rows,
                                     {.bm = 4, .bn = 1, .kl = 8, .rows = true},
                                     {.bm = 8, .bn = 4, .kl = 4, .rows = true}}; /* a GPU's split k */
    const uint32_t Ts[] = {1, 8, 32, 128};
    /* CINDER_MATMUL_BENCH_ROWS="bm,bn,tm;...": these texel rows kernels instead */
    cvk_matmul_tile own[16];
    size_t n_tiles = sizeof tiles / sizeof *tiles, n_own = 0;
    for (const char *s = getenv("CINDER_MATMUL_BENCH_ROWS"); s && *s && n_own < 16;) {
        unsigned bm, bn, tm;
        int n = 0;
        if (sscanf(s, "%u,%u,%u%n", &bm, &bn, &tm, &n) < 3) break;
        own[n_own++] = (cvk_matmul_tile){.bm = bm, .bn = bn, .tm = tm, .rows = true, .texel = true};
        s += n;
        if (*s == ';') s++;
    }
    const cvk_matmul_tile *list = n_own ? own : tiles;
    if (n_own) n_tiles = n_own;
    for (size_t ti = 0; ti < 2 * n_tiles; ti++) { /* plain, then gate-up pairs */
        cvk_pipeline p;
        cvk_matmul_tile tile = list[ti / 2];
        tile.glu = ti % 2;
        if (getenv("CINDER_MATMUL_BENCH_TEXEL") && !tile.texel) continue; /* the CPU device's kernels only */
        if (cvk_matmul_pipeline(&p, &vk->dev, vk->pcache.cache, ty, &tile)) fail_msg("%s", cd_errmsg());
        printf("%s %-5s%s bm %-3u bn %-2u tm %u %s:", qtype_name(ty), tile.rows ? "rows" : "tiled",
               tile.texel ? "/texel" : "", tile.bm, tile.bn, tile.tm, tile.glu ? "pairs" : "plain");
        for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) {
            cvk_matmul_args a = {.w = &bw,
                                 .type = ty,
                                 .n_in = n_in,
                                 .n_rows = n_rows,
                                 .x = cvk_view_whole(&bx),
                                 .x_rows = Ts[k],
                                 .y = cvk_view_whole(&by),
                                 .y_rows = Ts[k],
                                 .n_tokens = Ts[k],
                                 .glu = tile.glu};
            double best = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
                if (cvk_matmul(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
                double t0 = now_s();
                assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
                best = fmin(best, now_s() - t0);
                assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
            }
            printf("  T=%-2u %8.2f ms", Ts[k], best * 1e3);
        }
        printf("\n");
        fflush(stdout);
        cvk_pipeline_destroy(&vk->dev, &p);
    }
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &by);
    free(row), free(x), free(wq);
}

/* Frees the weights test_grouped kept, then the Vulkan context. */
static int matmul_teardown(void **state) {
    free(grouped_weights.wq), free(grouped_weights.wd);
    grouped_weights.wq = NULL, grouped_weights.wd = NULL;
    return vk_teardown(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_a_module_per_type),
        cmocka_unit_test(test_every_type_awkward_sizes),
        cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_split_parts),
        cmocka_unit_test(test_tiles),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_grouped),
        cmocka_unit_test(test_grouped_split_parts),
        cmocka_unit_test(test_grouped_items),
        cmocka_unit_test(test_x_offset),
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_rejects_mismatches),
    };
    if (getenv("CINDER_MATMUL_BENCH") && !strcmp(getenv("CINDER_MATMUL_BENCH"), "kernels")) {
        const struct CMUnitTest timing[] = {cmocka_unit_test(bench_kernels)};
        return tu_status(cmocka_run_group_tests(timing, vk_setup, vk_teardown));
    }
    if (getenv("CINDER_MATMUL_BENCH")) {
        const struct CMUnitTest timing[] = {cmocka_unit_test(bench_q4k)};
        return tu_status(cmocka_run_group_tests(timing, vk_setup, vk_teardown));
    }
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER")); /* e.g. "*offset*" */
    return tu_status(cmocka_run_group_tests(tests, vk_setup, matmul_teardown));
}
