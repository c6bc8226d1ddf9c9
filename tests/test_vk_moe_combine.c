/* shaders/moe_combine.comp against the order of cpu_ref.c moe(): the k expert outputs of each
 * token weighted, summed in float from j = 0, then added into the residual. Awkward n, k of 1,
 * 2, 8, several tokens, a strided e, more workgroups than one grid dimension, bad arguments.
 * With the norm fused: the bits of the combine followed by rmsnorm.comp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/vk/op_moe_combine.h"
#include "runtime/vk/op_rmsnorm.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"

static cvk_pipeline pipe, norm_pipe;

static int setup(void **state) {
    if (vk_setup(state)) return -1;
    return cvk_moe_combine_pipeline(&pipe, &vk->dev, vk->pcache.cache, 0) ||
        cvk_rmsnorm_pipeline(&norm_pipe, &vk->dev, vk->pcache.cache, 0);
}

static int teardown(void **state) {
    cvk_pipeline_destroy(&vk->dev, &pipe);
    cvk_pipeline_destroy(&vk->dev, &norm_pipe);
    return vk_teardown(state);
}

static void test_push_layout(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_moe_combine, cinder_spv_moe_combine_size, &si), 0);
    const uint32_t want[] = {offsetof(cvk_moe_combine_push, n),    offsetof(cvk_moe_combine_push, k),
                             offsetof(cvk_moe_combine_push, rows), offsetof(cvk_moe_combine_push, e_stride),
                             offsetof(cvk_moe_combine_push, norm), offsetof(cvk_moe_combine_push, eps)};
    assert_int_equal(si.n_push, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_moe_combine_push));
    assert_int_equal(si.n_bindings, 5);
}

static cvk_buffer upload(const float *x, size_t n) {
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, n * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&b), x), 0);
    return b;
}

static void one(rng *r, uint32_t n, uint32_t k, uint32_t rows, uint32_t e_stride) {
    uint32_t es = e_stride ? e_stride : n;
    size_t nx = (size_t)n * rows, ne = (size_t)rows * k * es, nw = (size_t)rows * k;
    float *x = malloc(nx * 4), *e = malloc(ne * 4), *w = malloc(nw * 4), *ref = malloc(nx * 4), *got = malloc(nx * 4);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(r);
    for (size_t i = 0; i < ne; i++) e[i] = rng_normal(r) * 3;
    for (size_t i = 0; i < nw; i++) w[i] = rng_f32(r);
    for (uint32_t t = 0; t < rows; t++)
        for (uint32_t i = 0; i < n; i++) {
            float acc = 0;
            for (uint32_t j = 0; j < k; j++) acc += w[t * k + j] * e[((size_t)t * k + j) * es + i];
            ref[(size_t)t * n + i] = x[(size_t)t * n + i] + acc;
        }
    cvk_buffer bx = upload(x, nx), be = upload(e, ne), bw = upload(w, nw);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    cvk_moe_combine_args a = {.x = cvk_view_whole(&bx),
                              .e = cvk_view_whole(&be),
                              .w = cvk_view_whole(&bw),
                              .n = n,
                              .k = k,
                              .rows = rows,
                              .e_stride = e_stride};
    assert_int_equal(cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe, &a), 0);
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx), got), 0);
    double worst = 0;
    for (size_t i = 0; i < nx; i++) {
        double d = got[i] - ref[i];
        d = d < 0 ? -d : d;
        if (d > worst) worst = d;
    }
    print_message("n %u k %u rows %u e_stride %u: worst abs diff %.3g\n", n, k, rows, es, worst);
    assert_true(worst <= 1e-5);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &be);
    cvk_buffer_destroy(&vk->mem, &bw);
    free(x), free(e), free(w), free(ref), free(got);
}

static void test_against_cpu(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 31);
    one(&r, 1, 1, 1, 0);
    one(&r, 256, 2, 1, 0);
    one(&r, 2047, 8, 1, 0);
    one(&r, 100, 8, 7, 133);
    one(&r, 257, 4, 300, 0);
    one(&r, 4096, 8, 40, 0);   /* 163 840 elements: 640 workgroups */
    one(&r, 70001, 1, 257, 0); /* over 65 535 workgroups: the 2-D grid */
}

/* The fused norm against the two stages it replaces (combine, then rmsnorm into another
 * buffer): x and y bit for bit, at awkward widths and a row count over one grid dimension. */
static void fused_norm(rng *r, uint32_t n, uint32_t k, uint32_t rows) {
    size_t nx = (size_t)n * rows, ne = nx * k, nw = (size_t)rows * k;
    float *x = malloc(nx * 4), *e = malloc(ne * 4), *w = malloc(nw * 4), *g = malloc(n * 4);
    float *got_x = malloc(nx * 4), *got_y = malloc(nx * 4), *ref_x = malloc(nx * 4), *ref_y = malloc(nx * 4);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(r);
    for (size_t i = 0; i < ne; i++) e[i] = rng_normal(r) * 3;
    for (size_t i = 0; i < nw; i++) w[i] = rng_f32(r);
    for (uint32_t i = 0; i < n; i++) g[i] = 0.5f + rng_f32(r);
    cvk_buffer bx1 = upload(x, nx), bx2 = upload(x, nx), be = upload(e, ne), bw = upload(w, nw), bg = upload(g, n);
    cvk_buffer by1 = upload(x, nx), by2 = upload(x, nx);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    cvk_moe_combine_args a = {.x = cvk_view_whole(&bx1),
                              .e = cvk_view_whole(&be),
                              .w = cvk_view_whole(&bw),
                              .n = n,
                              .k = k,
                              .rows = rows,
                              .norm_w = cvk_view_whole(&bg),
                              .y = cvk_view_whole(&by1),
                              .eps = 1e-6f};
    assert_int_equal(cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe, &a), 0);
    cvk_moe_combine_args b = {
        .x = cvk_view_whole(&bx2), .e = cvk_view_whole(&be), .w = cvk_view_whole(&bw), .n = n, .k = k, .rows = rows};
    assert_int_equal(cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe, &b), 0);
    cvk_barrier_compute_to_compute(vk->cmd.cb);
    cvk_rmsnorm_args rn = {.x = cvk_view_whole(&bx2),
                           .w = cvk_view_whole(&bg),
                           .y = cvk_view_whole(&by2),
                           .n = n,
                           .rows = rows,
                           .eps = 1e-6f};
    assert_int_equal(cvk_rmsnorm(&vk->cmd, &vk->dpool, &norm_pipe, &rn), 0);
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx1), got_x), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by1), got_y), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx2), ref_x), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by2), ref_y), 0);
    size_t differ = 0;
    for (size_t i = 0; i < nx; i++)
        differ += memcmp(&got_x[i], &ref_x[i], 4) != 0 || memcmp(&got_y[i], &ref_y[i], 4) != 0;
    print_message("fused norm n %u k %u rows %u: %zu of %zu elements differ from combine + rmsnorm\n", n, k, rows,
                  differ, nx);
    assert_int_equal(differ, 0);
    /* and the norm is a norm: row 0's y against the CPU */
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += (double)ref_x[i] * ref_x[i];
    double scale = 1 / sqrt(ss / n + 1e-6);
    for (uint32_t i = 0; i < n; i++)
        assert_true(fabs(got_y[i] - ref_x[i] * scale * g[i]) <= 1e-5 * (1 + fabs(got_y[i])));
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer *bufs[] = {&bx1, &bx2, &be, &bw, &bg, &by1, &by2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
    free(x), free(e), free(w), free(g), free(got_x), free(got_y), free(ref_x), free(ref_y);
}

static void test_norm_fused(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 37);
    fused_norm(&r, 1, 1, 1);
    fused_norm(&r, 2048, 8, 5); /* the real model's width */
    fused_norm(&r, 1000, 3, 9);
    fused_norm(&r, 3, 2, 65537); /* over 65 535 rows: the 2-D grid */
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 64, 4, CVK_MEM_DEVICE), 0);
    cvk_view v = cvk_view_whole(&b);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe,
                                     &(cvk_moe_combine_args){.x = v, .e = v, .w = v, .n = 8, .k = 0, .rows = 1}),
                     -1);
    assert_int_equal(cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe,
                                     &(cvk_moe_combine_args){.x = v, .e = v, .w = v, .n = 17, .k = 1, .rows = 1}),
                     -1);
    assert_int_equal(
        cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe,
                        &(cvk_moe_combine_args){.x = v, .e = v, .w = v, .n = 8, .k = 2, .rows = 1, .e_stride = 4}),
        -1);
    assert_int_equal(
        cvk_moe_combine(
            &vk->cmd, &vk->dpool, &pipe,
            &(cvk_moe_combine_args){
                .x = v, .e = v, .w = v, .n = 8, .k = 2, .rows = 1, .norm_w = cvk_view_range(&b, 0, 16), .y = v}),
        -1);
    assert_int_equal(cvk_moe_combine(&vk->cmd, &vk->dpool, &pipe,
                                     &(cvk_moe_combine_args){.x = v, .e = v, .w = v, .n = 8, .k = 2, .rows = 1}),
                     0);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout),
        cmocka_unit_test(test_against_cpu),
        cmocka_unit_test(test_norm_fused),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, setup, teardown));
}
