/* The integer family (runtime/gguf/xq8.h, runtime/vk/op_xq8.h) against its CPU arithmetic,
 * bit for bit: shaders/xq8_quantize.comp against xq8_quantize on random tokens and on the
 * blocks its rules are about (zeros, below 2^-116, an infinity, a NaN, ties at half a step,
 * the largest magnitude at and just under a power of two, subnormals beside normal values),
 * with a token stride; shaders/matvec_xq8.comp against xq8_dot_row for Q8_0, Q4_K and Q6_K
 * at n_in 768 and 2048 (Q8_0 also 96), 1, 67 and 200 rows, 1, 3 and 7 tokens, in several
 * shapes (lanes per row 1, 2 and 8, 1-8 tokens per workgroup, workgroups of 32 and 64: all the
 * same bits), the weights in one part and in many. And the family against the float
 * arithmetic it replaces: within the error of x's 8-bit blocks of a double-precision product
 * of the dequantized weights with the unquantized x. Argument errors; the push layouts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/gguf/xq8.h"
#include "runtime/vk/op_xq8.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

static void check_push(const char *shader, const uint32_t *want, uint32_t n, uint32_t size, uint32_t bindings) {
    size_t checked = 0;
    for (size_t s = 0; s < cinder_spv_all_count; s++) {
        const cinder_spv_module *m = &cinder_spv_all[s];
        if (strcmp(m->shader, shader)) continue;
        cvk_spirv_info si;
        assert_int_equal(cvk_spirv_reflect(m->code, *m->size, &si), 0);
        assert_int_equal(si.n_push, n);
        for (uint32_t i = 0; i < n; i++) assert_int_equal(si.push_offset[i], want[i]);
        assert_int_equal(si.push_size, size);
        assert_int_equal(si.n_bindings, bindings);
        checked++;
    }
    assert_true(checked > 0);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    const uint32_t q[] = {offsetof(cvk_xq8_quantize_push, n_in), offsetof(cvk_xq8_quantize_push, n_tokens),
                          offsetof(cvk_xq8_quantize_push, x_stride)};
    check_push("xq8_quantize", q, 3, sizeof(cvk_xq8_quantize_push), 3);
    const uint32_t m[] = {offsetof(cvk_xq8_matvec_push, n_in),      offsetof(cvk_xq8_matvec_push, row_bytes),
                          offsetof(cvk_xq8_matvec_push, row0),      offsetof(cvk_xq8_matvec_push, rows),
                          offsetof(cvk_xq8_matvec_push, n_tokens),  offsetof(cvk_xq8_matvec_push, y_stride),
                          offsetof(cvk_xq8_matvec_push, accumulate)};
    check_push("matvec_xq8", m, 7, sizeof(cvk_xq8_matvec_push), 4);
    for (uint32_t t = 0; t < 64; t++) /* a module for each of the family's types and no other */
        if (qtype_supported((enum qtype)t))
            for (size_t s = 0; s < cinder_spv_all_count; s++)
                if (!strcmp(cinder_spv_all[s].shader, "matvec_xq8") && cinder_spv_all[s].qtype == t)
                    assert_true(xq8_type((enum qtype)t));
}

static cvk_buffer device_buffer(uint64_t bytes, uint64_t granule) {
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, bytes ? bytes : 4, granule, CVK_MEM_DEVICE), 0);
    /* NaN-filled, so a read of what nothing wrote fails (weights of 210- or 34-byte blocks are
     * written whole by their upload instead: a fill takes whole words) */
    if (b.size % 4 == 0 && vk_poison(vk, &b))
        fail_msg("poisoning %llu bytes: %s", (unsigned long long)b.size, cd_errmsg());
    return b;
}

static void upload(cvk_buffer *b, const void *src) {
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(b), src), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
}

static cvk_pipeline quantize_pipe;
static const cvk_pipeline *quantizer(void) {
    if (!quantize_pipe.layout && cvk_xq8_quantize_pipeline(&quantize_pipe, &vk->dev, vk->pcache.cache))
        fail_msg("%s", cd_errmsg());
    return &quantize_pipe;
}

/* x (n_tokens vectors x_stride floats apart) quantized on the GPU into q (32 bytes a block) and
 * d (8 bytes a block: d's bits, the sum), left in xq/xd too when asked. */
static void gpu_quantize(const float *x, uint32_t n_in, uint32_t n_tokens, uint32_t x_stride, uint8_t *q, uint32_t *d,
                         cvk_buffer *keep_q, cvk_buffer *keep_d) {
    uint32_t xs = x_stride ? x_stride : n_in;
    cvk_buffer bx = device_buffer(((uint64_t)(n_tokens - 1) * xs + n_in) * 4, 4);
    cvk_buffer bq = device_buffer(cvk_xq8_q_bytes(n_in, n_tokens), 16),
               bd = device_buffer(cvk_xq8_d_bytes(n_in, n_tokens), 8);
    upload(&bx, x);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    cvk_xq8_quantize_args a = {.x = cvk_view_whole(&bx),
                               .n_in = n_in,
                               .n_tokens = n_tokens,
                               .x_stride = x_stride,
                               .xq = cvk_view_whole(&bq),
                               .xd = cvk_view_whole(&bd)};
    if (cvk_xq8_quantize(&vk->cmd, &vk->dpool, quantizer(), &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    if (q) assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bq), q), 0);
    if (d) assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bd), d), 0);
    cvk_buffer_destroy(&vk->mem, &bx);
    if (keep_q) *keep_q = bq, *keep_d = bd;
    else cvk_buffer_destroy(&vk->mem, &bq), cvk_buffer_destroy(&vk->mem, &bd);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The GPU's blocks equal xq8_quantize's, byte for byte. */
static void expect_same_blocks(const float *x, uint32_t n_in, uint32_t n_tokens, uint32_t x_stride) {
    uint32_t nb = n_in / XQ8_BLOCK, xs = x_stride ? x_stride : n_in;
    uint8_t *q = malloc((size_t)nb * n_tokens * 32);
    uint32_t *d = malloc((size_t)nb * n_tokens * 8);
    xq8_block *want = malloc(sizeof *want * nb);
    gpu_quantize(x, n_in, n_tokens, x_stride, q, d, NULL, NULL);
    for (uint32_t t = 0; t < n_tokens; t++) {
        xq8_quantize(x + (size_t)t * xs, n_in, want);
        for (uint32_t b = 0; b < nb; b++) {
            size_t k = (size_t)t * nb + b;
            uint32_t packed = ((uint32_t)want[b].mult << 16) | ((uint32_t)want[b].sum & 0xffff);
            if (d[2 * k] != bits(want[b].d) || d[2 * k + 1] != packed || memcmp(q + 32 * k, want[b].q, 32))
                fail_msg("token %u block %u: GPU d %08x mult|sum %08x, CPU d %08x mult|sum %08x (q %s)", t, b, d[2 * k],
                         d[2 * k + 1], bits(want[b].d), packed, memcmp(q + 32 * k, want[b].q, 32) ? "differ" : "equal");
        }
    }
    free(q), free(d), free(want);
}

static void test_quantize_random(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 11);
    const uint32_t n_in = 2048, n_tokens = 5, stride = 2048 + 96;
    float *x = malloc(sizeof *x * stride * n_tokens);
    for (uint32_t i = 0; i < stride * n_tokens; i++) x[i] = rng_normal(&r) * (i % 97 == 0 ? 40.0f : 1.0f);
    expect_same_blocks(x, n_in, n_tokens, stride);
    free(x);
}

/* The blocks the rules are about, one each (n_in = 32 * count). */
static void test_quantize_edges(void **state) {
    (void)state;
    enum { NB = 10 };
    float x[NB * 32];
    rng r;
    rng_seed(&r, 12);
    for (int i = 0; i < NB * 32; i++) x[i] = rng_normal(&r);
    for (int i = 0; i < 32; i++) x[i] = 0.0f;                               /* 0: zeros */
    for (int i = 0; i < 32; i++) x[32 + i] = ldexpf(1.5f, -122) * (i - 16); /* 1: below 2^-116 */
    x[64 + 5] = INFINITY;                                                   /* 2: an infinity */
    x[96 + 7] = NAN;                                                        /* 3: a NaN */
    x[128] = 1.0f; /* 4: d = 2^-6, the others half-way between two steps (ties to even) */
    for (int i = 1; i < 32; i++) x[128 + i] = ((float)i - 16.0f + 0.5f) / 64.0f;
    x[160] = 8.0f;                    /* 5: amax a power of two */
    x[192] = nextafterf(16.0f, 0.0f); /* 6: just under one: 127.99.. clamps */
    x[193] = -nextafterf(16.0f, 0.0f);
    x[224] = 1.0f, x[225] = ldexpf(1.0f, -130), x[226] = -ldexpf(1.0f, -140);        /* 7: subnormals beside 1 */
    for (int i = 0; i < 32; i++) x[256 + i] = ldexpf(1.0f, -116) * (i & 1 ? 1 : -1); /* 8: amax at 2^-116 */
    x[288] = 3e38f;                                                                  /* 9: near the largest float */
    expect_same_blocks(x, NB * 32, 1, 0);
    xq8_block b[NB];
    xq8_quantize(x, NB * 32, b);
    assert_true(b[0].d == 0.0f && b[1].d == 0.0f && isnan(b[2].d) && isnan(b[3].d));
    assert_true(b[8].d > 0.0f);
    assert_int_equal(b[6].q[0], 127);
    assert_int_equal(b[6].q[1], -127);
    for (int j = 0; j < 8; j++) { /* the shared reciprocals are the floats nearest 1 / (9 + j) */
        float want = 1.0f / (float)(9 + j);
        assert_int_equal(xq8_recip[j], bits(want));
    }
    for (uint32_t k = 0; k < NB; k++) /* the largest |x| / d in [113.8, 128) */
        if (b[k].d > 0.0f) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * k + i]));
            float step = b[k].d * (float)b[k].mult;
            assert_true(amax / step >= 113.7f && amax / step < 128.0f);
        }
}

typedef struct mcase {
    enum qtype type;
    uint32_t n_in, n_rows, n_tokens;
} mcase;

static cvk_pipeline mv_pipes[16];
static struct {
    enum qtype type;
    cvk_xq8_cfg cfg;
} mv_keys[16];
static uint32_t n_mv;
static const cvk_pipeline *matvec_pipe(enum qtype type, const cvk_xq8_cfg *cfg) {
    for (uint32_t i = 0; i < n_mv; i++)
        if (mv_keys[i].type == type && !memcmp(&mv_keys[i].cfg, cfg, sizeof *cfg)) return &mv_pipes[i];
    assert_true(n_mv < 16);
    if (cvk_xq8_matvec_pipeline(&mv_pipes[n_mv], &vk->dev, vk->pcache.cache, type, cfg)) fail_msg("%s", cd_errmsg());
    mv_keys[n_mv].type = type, mv_keys[n_mv].cfg = *cfg;
    return &mv_pipes[n_mv++];
}

static int teardown(void **state) {
    for (uint32_t i = 0; i < n_mv; i++) cvk_pipeline_destroy(&vk->dev, &mv_pipes[i]);
    cvk_pipeline_destroy(&vk->dev, &quantize_pipe);
    n_mv = 0;
    return vk_teardown(state);
}

/* y (n_tokens x n_rows) of the case on the GPU, the weights in parts of max_part bytes (0: the
 * device's); with y0, y starts as y0 and the product is added to it (accumulate). */
static void gpu_matvec(const mcase *c, const uint8_t *w, const float *x, const cvk_xq8_cfg *cfg, uint64_t max_part,
                       const float *y0, float *y) {
    size_t rb = qtype_row_bytes(c->type, c->n_in);
    cvk_buffer bq, bd;
    gpu_quantize(x, c->n_in, c->n_tokens, 0, NULL, NULL, &bq, &bd);
    uint64_t saved = vk->mem.max_part;
    if (max_part) vk->mem.max_part = max_part;
    cvk_buffer bw = device_buffer(rb * c->n_rows, rb);
    vk->mem.max_part = saved;
    if (max_part) assert_true(bw.n_parts > 1);
    cvk_buffer by = device_buffer((uint64_t)c->n_tokens * c->n_rows * 4, 4);
    upload(&bw, w);
    if (y0) upload(&by, y0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    cvk_xq8_matvec_args a = {.w = &bw,
                             .type = c->type,
                             .n_in = c->n_in,
                             .n_rows = c->n_rows,
                             .xq = cvk_view_whole(&bq),
                             .xd = cvk_view_whole(&bd),
                             .n_tokens = c->n_tokens,
                             .y = cvk_view_whole(&by),
                             .accumulate = y0 != NULL};
    if (cvk_xq8_matvec(&vk->cmd, &vk->dpool, matvec_pipe(c->type, cfg), &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), y), 0);
    cvk_buffer_destroy(&vk->mem, &bq), cvk_buffer_destroy(&vk->mem, &bd);
    cvk_buffer_destroy(&vk->mem, &bw), cvk_buffer_destroy(&vk->mem, &by);
}

/* The case in every shape (and, split, with the weights in parts): the same bits as
 * xq8_dot_row, and within x's quantization error of the float product. */
static void run_mcase(const mcase *c, uint64_t seed, bool split) {
    rng r;
    rng_seed(&r, seed);
    size_t rb = qtype_row_bytes(c->type, c->n_in), n_y = (size_t)c->n_tokens * c->n_rows;
    uint8_t *w = tu_quantized_rows(&r, c->type, c->n_in, c->n_rows);
    float *x = malloc(sizeof *x * c->n_in * c->n_tokens), *want = malloc(n_y * 4), *exact = malloc(n_y * 4);
    float *got = malloc(n_y * 4), *row = malloc(sizeof *row * c->n_in);
    for (size_t i = 0; i < (size_t)c->n_in * c->n_tokens; i++) x[i] = rng_normal(&r);
    xq8_block *xb = malloc(sizeof *xb * (c->n_in / XQ8_BLOCK));
    for (uint32_t t = 0; t < c->n_tokens; t++) {
        xq8_quantize(x + (size_t)t * c->n_in, c->n_in, xb);
        for (uint32_t i = 0; i < c->n_rows; i++) {
            want[(size_t)t * c->n_rows + i] = xq8_dot_row(c->type, w + rb * i, xb, c->n_in);
            quant_dequantize_row(c->type, w + rb * i, row, c->n_in);
            double s = 0;
            for (uint32_t k = 0; k < c->n_in; k++) s += (double)row[k] * x[(size_t)t * c->n_in + k];
            exact[(size_t)t * c->n_rows + i] = (float)s;
        }
    }
    /* x's 8-bit blocks: 0.3-1.0 % of the float product at these sizes (docs/kernels/xq8.md) */
    double err = tu_rel_l2(want, exact, n_y);
    assert_true(err < 2e-2);
    uint32_t min_sg = vk->dev.info.caps.min_subgroup_size ? vk->dev.info.caps.min_subgroup_size : 1;
    const cvk_xq8_cfg cfgs[] = {
        {0}, {.kl = 1, .nt = 4}, {.wg = 64, .kl = 2, .nt = 8}, {.kl = min_sg < 8 ? min_sg : 8, .nt = 3}};
    for (size_t k = 0; k < sizeof cfgs / sizeof *cfgs; k++) {
        if (cfgs[k].kl > min_sg) continue;
        gpu_matvec(c, w, x, &cfgs[k], 0, NULL, got);
        for (size_t i = 0; i < n_y; i++)
            if (bits(got[i]) != bits(want[i]))
                fail_msg("%s n_in %u rows %u tokens %u (wg %u kl %u nt %u): y[%zu] = %.9g, the CPU's %.9g",
                         qtype_name(c->type), c->n_in, c->n_rows, c->n_tokens, cfgs[k].wg, cfgs[k].kl, cfgs[k].nt, i,
                         got[i], want[i]);
    }
    if (split) {           /* parts of a few rows */
        uint64_t lcm = rb; /* a part is a multiple of lcm(row, 16) bytes */
        while (lcm % 16) lcm += rb;
        gpu_matvec(c, w, x, &cfgs[0], 2 * lcm, NULL, got);
        assert_memory_equal(got, want, n_y * 4);
    }
    /* accumulate: y0 + the product, one float add (a residual) */
    float *y0 = malloc(n_y * 4);
    for (size_t i = 0; i < n_y; i++) y0[i] = rng_normal(&r), want[i] = y0[i] + want[i];
    gpu_matvec(c, w, x, &cfgs[1], 0, y0, got);
    for (size_t i = 0; i < n_y; i++)
        if (bits(got[i]) != bits(want[i]))
            fail_msg("accumulate: y[%zu] = %.9g, y0 + the CPU's %.9g", i, got[i], want[i]);
    free(y0);
    fprintf(stderr, "  %s n_in %u rows %u tokens %u: the GPU's bits are the CPU's; rel L2 to the float product %.2e\n",
            qtype_name(c->type), c->n_in, c->n_rows, c->n_tokens, err);
    free(w), free(x), free(want), free(exact), free(got), free(row), free(xb);
}

static void test_matvec_every_type(void **state) {
    (void)state;
    const enum qtype types[] = {QTYPE_Q8_0, QTYPE_Q4_K, QTYPE_Q6_K};
    uint64_t seed = 100;
    for (size_t i = 0; i < 3; i++) {
        run_mcase(&(mcase){types[i], 768, 67, 3}, seed++, false);
        run_mcase(&(mcase){types[i], 2048, 200, 1}, seed++, false);
        run_mcase(&(mcase){types[i], 768, 1, 7}, seed++, false);
    }
    run_mcase(&(mcase){QTYPE_Q8_0, 96, 67, 7}, seed++, false);
}

static void test_split_weights(void **state) {
    (void)state;
    run_mcase(&(mcase){QTYPE_Q4_K, 768, 67, 3}, 300, true);
    run_mcase(&(mcase){QTYPE_Q6_K, 256, 20, 2}, 301, true);
}

static void test_rejects(void **state) {
    (void)state;
    cvk_pipeline p = {0};
    assert_int_not_equal(cvk_xq8_matvec_pipeline(&p, &vk->dev, vk->pcache.cache, QTYPE_F32, NULL), 0);
    assert_non_null(strstr(cd_errmsg(), "F32"));
    assert_int_not_equal(cvk_xq8_matvec_pipeline(&p, &vk->dev, vk->pcache.cache, QTYPE_Q4_K, &(cvk_xq8_cfg){.kl = 3}),
                         0);
    assert_int_not_equal(cvk_xq8_matvec_pipeline(&p, &vk->dev, vk->pcache.cache, QTYPE_Q4_K, &(cvk_xq8_cfg){.nt = 9}),
                         0);
    const cvk_pipeline *q4 = matvec_pipe(QTYPE_Q4_K, &(cvk_xq8_cfg){0});
    cvk_buffer w = device_buffer(qtype_row_bytes(QTYPE_Q4_K, 256) * 4, qtype_row_bytes(QTYPE_Q4_K, 256));
    cvk_buffer q = device_buffer(cvk_xq8_q_bytes(256, 2), 16), d = device_buffer(cvk_xq8_d_bytes(256, 2), 8);
    cvk_buffer y = device_buffer(4 * 4 * 2, 4);
    cvk_xq8_matvec_args a = {.w = &w,
                             .type = QTYPE_Q4_K,
                             .n_in = 256,
                             .n_rows = 4,
                             .xq = cvk_view_whole(&q),
                             .xd = cvk_view_whole(&d),
                             .n_tokens = 2,
                             .y = cvk_view_whole(&y)};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    cvk_xq8_matvec_args bad = a;
    bad.type = QTYPE_Q6_K;
    assert_int_not_equal(cvk_xq8_matvec(&vk->cmd, &vk->dpool, q4, &bad), 0);
    assert_non_null(strstr(cd_errmsg(), "another type"));
    bad = a, bad.n_tokens = 3;
    assert_int_not_equal(cvk_xq8_matvec(&vk->cmd, &vk->dpool, q4, &bad), 0);
    bad = a, bad.n_rows = 5;
    assert_int_not_equal(cvk_xq8_matvec(&vk->cmd, &vk->dpool, q4, &bad), 0);
    bad = a, bad.n_in = 100;
    assert_int_not_equal(cvk_xq8_matvec(&vk->cmd, &vk->dpool, q4, &bad), 0);
    cvk_xq8_quantize_args qa = {
        .x = cvk_view_whole(&y), .n_in = 33, .n_tokens = 1, .xq = cvk_view_whole(&q), .xd = cvk_view_whole(&d)};
    assert_int_not_equal(cvk_xq8_quantize(&vk->cmd, &vk->dpool, quantizer(), &qa), 0);
    assert_non_null(strstr(cd_errmsg(), "multiple of 32"));
    qa.n_in = 32, qa.n_tokens = 9; /* x of 16 floats */
    assert_int_not_equal(cvk_xq8_quantize(&vk->cmd, &vk->dpool, quantizer(), &qa), 0);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &w), cvk_buffer_destroy(&vk->mem, &q);
    cvk_buffer_destroy(&vk->mem, &d), cvk_buffer_destroy(&vk->mem, &y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_quantize_random),
        cmocka_unit_test(test_quantize_edges),
        cmocka_unit_test(test_matvec_every_type),
        cmocka_unit_test(test_split_weights),
        cmocka_unit_test(test_rejects),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, teardown));
}
