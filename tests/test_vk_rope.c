/* shaders/rope_neox.comp against cpu_rope_neox on random heads at awkward sizes (pairs not a
 * multiple of the workgroup, odd head counts, strided tokens, tiny heads) and positions up
 * to 40 959, for Qwen3's theta 1e6 and the classic 1e4; replayed with new positions
 * without re-recording; bad arguments. Bound: 2e-6 of each pair's norm (measured ~2e-7). */
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
#include "runtime/model/cpu_ref.h"
#include "runtime/vk/op_rope.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"



typedef struct tcase {
    uint32_t tokens, heads, head_dim, stride, wg, n_pos;
    float theta;
} tcase;

/* Worst |gpu - cpu| over every pair, relative to the pair's norm (what a rotation keeps). */
static double compare(const float *got, const float *x, const uint32_t *pos, const tcase *t, uint32_t stride) {
    uint32_t d = t->head_dim, half = d / 2;
    float *head = malloc(d * sizeof *head);
    double worst = 0;
    for (uint32_t tok = 0; tok < t->tokens; tok++)
        for (uint32_t h = 0; h < t->heads; h++) {
            size_t base = (size_t)tok * stride + (size_t)h * d;
            memcpy(head, x + base, d * sizeof *head);
            cpu_rope_neox(head, d, pos[tok], t->theta);
            for (uint32_t i = 0; i < half; i++) {
                double norm = hypot(x[base + i], x[base + i + half]) + 1e-30;
                double e = fmax(fabs((double)got[base + i] - head[i]), fabs((double)got[base + i + half] - head[i + half]));
                if (e / norm > worst) worst = e / norm;
            }
        }
    free(head);
    return worst;
}

static void run_case(const tcase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    uint32_t stride = t->stride ? t->stride : t->heads * t->head_dim;
    size_t nx = (size_t)t->tokens * stride;
    float *x = malloc(nx * 4), *y = malloc(nx * 4);
    uint32_t *pos = malloc(t->tokens * 4);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&r) * 3.0f;
    for (uint32_t i = 0; i < t->tokens; i++) pos[i] = rng_below(&r, t->n_pos);
    pos[0] = t->n_pos - 1; /* the last position the table holds */
    if (t->tokens > 1) pos[1] = 0;

    cvk_rope_table tab;
    if (cvk_rope_table_create(&tab, &vk->mem, &vk->stager, t->head_dim, t->theta, t->n_pos)) fail_msg("%s", cd_errmsg());
    cvk_buffer bx, bp;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, nx * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bp, t->tokens * 4, 4, CVK_MEM_DEVICE), 0);
    vk->stager.force_staging = seed & 1;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bp), pos), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_pipeline p;
    assert_int_equal(cvk_rope_pipeline(&p, &vk->dev, vk->pcache.cache, t->wg), 0);
    cvk_rope_args a = {.x = cvk_view_whole(&bx), .pos = cvk_view_whole(&bp), .table = &tab, .tokens = t->tokens,
                       .heads = t->heads, .tok_stride = t->stride};
    assert_int_equal(cvk_cmd_begin_reusable(&vk->cmd), 0);
    if (cvk_rope(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx), y), 0);
    double worst = compare(y, x, pos, t, stride);
    if (worst > 2e-6)
        fail_msg("tokens=%u heads=%u d=%u theta=%g: error %.3g of the pair norm", t->tokens, t->heads, t->head_dim,
                 t->theta, worst);

    /* decode-style replay: new positions and inputs, same command buffer */
    for (uint32_t i = 0; i < t->tokens; i++) pos[i] = rng_below(&r, t->n_pos);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&r);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bp), pos), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx), y), 0);
    double worst2 = compare(y, x, pos, t, stride);
    if (worst2 > 2e-6) fail_msg("replay: error %.3g of the pair norm", worst2);
    vk->stager.force_staging = false;
    printf("  tokens=%u heads=%u d=%u stride=%u wg=%u theta=%g n_pos=%u: worst %.2g, %.2g\n", t->tokens, t->heads,
           t->head_dim, stride, t->wg, t->theta, t->n_pos, worst, worst2);

    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_rope_table_destroy(&vk->mem, &tab);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &bp);
    free(x), free(y), free(pos);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_rope_neox, cinder_spv_rope_neox_size, &si), 0);
    const uint32_t want[] = {offsetof(cvk_rope_push, tokens), offsetof(cvk_rope_push, heads),
                             offsetof(cvk_rope_push, head_dim), offsetof(cvk_rope_push, tok_stride),
                             offsetof(cvk_rope_push, shift), offsetof(cvk_rope_push, n_hi)};
    assert_int_equal(si.n_push, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_rope_push));
    assert_int_equal(si.n_bindings, 3);
}

static void test_table_dims(void **state) {
    (void)state;
    const uint32_t n_pos[] = {1, 2, 15, 16, 17, 255, 256, 257, 40960, 65536, 65537, 262144, 1000000, UINT32_MAX};
    for (size_t i = 0; i < sizeof n_pos / sizeof *n_pos; i++) {
        uint32_t shift, n_hi;
        cvk_rope_table_dims(n_pos[i], &shift, &n_hi);
        assert_true(shift >= 4 && shift <= 16);
        assert_true(((uint64_t)n_hi << shift) >= n_pos[i]);             /* covers every position */
        assert_true(n_hi == 1 || ((uint64_t)(n_hi - 1) << shift) < n_pos[i]); /* and no more rows */
        assert_true(n_hi <= 2 * (1u << shift) + 1);                      /* balanced */
    }
}

static void test_awkward_sizes(void **state) {
    (void)state;
    const tcase cases[] = {
        {.tokens = 1, .heads = 1, .head_dim = 128, .wg = 64, .n_pos = 40960, .theta = 1e6f},
        {.tokens = 7, .heads = 3, .head_dim = 128, .wg = 64, .n_pos = 40960, .theta = 1e6f},
        {.tokens = 33, .heads = 4, .head_dim = 128, .stride = 4 * 128 + 20, .wg = 256, .n_pos = 40960, .theta = 1e6f},
        {.tokens = 5, .heads = 7, .head_dim = 64, .wg = 32, .n_pos = 40001, .theta = 10000.0f},
        {.tokens = 129, .heads = 1, .head_dim = 6, .wg = 64, .n_pos = 37, .theta = 10000.0f},
        {.tokens = 3, .heads = 5, .head_dim = 2, .wg = 128, .n_pos = 1, .theta = 500000.0f},
        {.tokens = 2, .heads = 32, .head_dim = 128, .wg = 64, .n_pos = 262144, .theta = 1e6f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 300 + i);
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_rope_table tab;
    assert_int_equal(cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 7, 1e4f, 100), -1);
    assert_non_null(strstr(cd_errmsg(), "even"));
    assert_int_equal(cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 8, 1e4f, 100), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 400, 4, CVK_MEM_DEVICE), 0);
    cvk_pipeline p;
    assert_int_equal(cvk_rope_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64), 0);
    cvk_rope_args a = {.x = cvk_view_whole(&b), .pos = cvk_view_whole(&b), .table = &tab, .tokens = 4, .heads = 4};
    assert_int_equal(cvk_rope(&vk->cmd, &vk->dpool, &p, &a), -1); /* 128 floats in 100 */
    assert_non_null(strstr(cd_errmsg(), "needs"));
    a.tokens = 3, a.tok_stride = 31; /* below heads * head_dim */
    assert_int_equal(cvk_rope(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.table = NULL;
    assert_int_equal(cvk_rope(&vk->cmd, &vk->dpool, &p, &a), -1);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_rope_table_destroy(&vk->mem, &tab);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_table_dims),
        cmocka_unit_test(test_awkward_sizes),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
