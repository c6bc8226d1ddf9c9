/* shaders/swiglu.comp against the CPU (cpu_silu(g) * u) on random data at awkward sizes: n not
 * a multiple of the workgroup, strided rows, in place over g, more workgroups than one grid
 * dimension holds; extreme inputs for silu; bad arguments. (The residual add is the matmul's
 * accumulate mode: test_vk_matmul test_accumulate.) */
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
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"

static cvk_buffer upload(const float *x, size_t n) {
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, n * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&b), x), 0);
    return b;
}

static float *random_floats(rng *r, size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(r) * scale;
    return x;
}

static void run(void) {
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
}

static void test_push_layouts_match_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_swiglu, cinder_spv_swiglu_size, &si), 0);
    const uint32_t want[] = {offsetof(cvk_swiglu_push, n), offsetof(cvk_swiglu_push, rows),
                             offsetof(cvk_swiglu_push, g_stride), offsetof(cvk_swiglu_push, u_stride),
                             offsetof(cvk_swiglu_push, h_stride)};
    assert_int_equal(si.n_push, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_swiglu_push));
    assert_int_equal(si.n_bindings, 3);
}

typedef struct swiglu_case {
    uint32_t n, rows, gs, us, hs, wg;
    bool in_place; /* h = g */
    bool fused;    /* g and u the two halves of one [rows][2n] buffer */
} swiglu_case;

static void swiglu_case_run(const swiglu_case *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    uint32_t gs = t->fused ? 2 * t->n : (t->gs ? t->gs : t->n), us = t->fused ? 2 * t->n : (t->us ? t->us : t->n);
    uint32_t hs = t->in_place ? gs : (t->hs ? t->hs : t->n);
    size_t ng = (size_t)t->rows * gs, nu = (size_t)t->rows * us, nh = (size_t)t->rows * hs;
    float *g = random_floats(&r, ng, 4.0f), *u = random_floats(&r, nu, 1.0f), *h = calloc(nh, 4);
    const float extreme[] = {-200.0f, -88.0f, -30.0f, -1e-30f, 0.0f, 1e-30f, 30.0f, 88.0f, 200.0f};
    for (size_t i = 0; i < sizeof extreme / sizeof *extreme && i < t->n; i++) g[i] = extreme[i];
    cvk_buffer bg = upload(g, ng), bu, bh;
    if (!t->fused) bu = upload(u, nu);
    if (!t->in_place) assert_int_equal(cvk_buffer_create(&vk->mem, &bh, nh * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_pipeline p;
    assert_int_equal(cvk_swiglu_pipeline(&p, &vk->dev, vk->pcache.cache, t->wg), 0);
    cvk_buffer *out = t->in_place ? &bg : &bh;
    cvk_swiglu_args a = {.g = cvk_view_whole(&bg),
                         .u = t->fused ? cvk_view_range(&bg, 0, 0) : cvk_view_whole(&bu),
                         .h = cvk_view_whole(out),
                         .n = t->n,
                         .rows = t->rows,
                         .g_stride = gs,
                         .u_stride = us,
                         .h_stride = hs};
    if (t->fused) { /* u starts n floats in: needs that offset to be aligned for a binding */
        uint64_t align = vk->dev.info.props.limits.minStorageBufferOffsetAlignment, off = (uint64_t)t->n * 4;
        assert_int_equal(off % align, 0);
        a.u = cvk_view_range(&bg, off, ng * 4 - off);
        memcpy(u, g, ng * 4); /* the reference reads u from the same buffer, n floats in */
    }
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_swiglu(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    run();
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(out), h), 0);
    for (uint32_t row = 0; row < t->rows; row++)
        for (uint32_t i = 0; i < t->n; i++) {
            float gv = g[(size_t)row * gs + i], uv = u[(size_t)row * us + i + (t->fused ? t->n : 0)];
            float want = cpu_silu(gv) * uv, got = h[(size_t)row * hs + i];
            /* the floor: a device may flush denormal intermediates, and Vulkan bounds a division's
             * error only for divisors below 2^126 (NVIDIA: silu(-88) * 1.16 = -0, want -6.2e-37) */
            if (!(fabsf(got - want) <= 4e-6f * fabsf(want) + 1e-35f))
                fail_msg("swiglu n=%u rows=%u: [%u][%u] silu(%.9g) * %.9g = %.9g, want %.9g", t->n, t->rows, row, i, gv,
                         uv, got, want);
        }
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bg);
    if (!t->fused) cvk_buffer_destroy(&vk->mem, &bu);
    if (!t->in_place) cvk_buffer_destroy(&vk->mem, &bh);
    free(g), free(u), free(h);
}

static void test_swiglu(void **state) {
    (void)state;
    const swiglu_case cases[] = {
        {.n = 1, .rows = 1, .wg = 256},
        {.n = 9, .rows = 5, .wg = 64},
        {.n = 768, .rows = 8, .wg = 256}, /* Qwen3-30B-A3B: n_ff_exp = 768, k = 8 */
        {.n = 1000, .rows = 7, .gs = 1003, .us = 1001, .hs = 1005, .wg = 128},
        {.n = 513, .rows = 3, .wg = 32, .in_place = true},
        {.n = 768, .rows = 5, .wg = 256, .fused = true},
        {.n = 3, .rows = 700001, .wg = 32}, /* 65 626 workgroups: a second grid row */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) swiglu_case_run(&cases[i], 20 + i);
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 400, 4, CVK_MEM_DEVICE), 0);
    cvk_pipeline ps;
    assert_int_equal(cvk_swiglu_pipeline(&ps, &vk->dev, VK_NULL_HANDLE, 64), 0);
    cvk_view v = cvk_view_whole(&b);
    cvk_swiglu_args sa = {.g = v, .u = v, .h = v, .n = 10, .rows = 11};
    assert_int_equal(cvk_swiglu(&vk->cmd, &vk->dpool, &ps, &sa), -1);
    sa.rows = 2, sa.h_stride = 9;
    assert_int_equal(cvk_swiglu(&vk->cmd, &vk->dpool, &ps, &sa), -1);
    assert_non_null(strstr(cd_errmsg(), "stride"));
    cvk_pipeline big;
    assert_int_equal(cvk_swiglu_pipeline(&big, &vk->dev, VK_NULL_HANDLE, 1u << 20), -1);
    cvk_pipeline_destroy(&vk->dev, &ps);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layouts_match_glsl),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
