/* shaders/rmsnorm.comp against a double-precision CPU reference, on random rows at awkward
 * sizes (n not a multiple of the workgroup, n smaller than it, strided rows, in place, more
 * rows than one grid dimension holds), for several workgroup and subgroup sizes. */
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
#include "runtime/vk/op_rmsnorm.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"

static void reference(const float *x, const float *w, float *y, uint32_t n, uint32_t rows, uint32_t xs, uint32_t ys,
                      float eps) {
    for (uint32_t r = 0; r < rows; r++) {
        double ss = 0;
        for (uint32_t i = 0; i < n; i++) ss += (double)x[r * xs + i] * x[r * xs + i];
        double scale = 1.0 / sqrt(ss / n + eps);
        for (uint32_t i = 0; i < n; i++) y[r * ys + i] = (float)(x[r * xs + i] * scale * w[i]);
    }
}

typedef struct tcase {
    uint32_t n, rows, xs, ys, wg, subgroup;
    bool in_place;
} tcase;

static void fill_random(rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(r) * scale;
}

static void run_case(const tcase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    uint32_t xs = t->xs ? t->xs : t->n, ys = t->in_place ? xs : (t->ys ? t->ys : t->n);
    size_t nx = (size_t)t->rows * xs, ny = (size_t)t->rows * ys;
    float *x = malloc(nx * 4), *w = malloc(t->n * 4), *y = calloc(ny, 4), *ref = calloc(ny, 4);
    fill_random(&r, x, nx, 1.0f);
    for (uint32_t row = 0; row < t->rows; row += 3) /* some rows large, some tiny */
        for (uint32_t i = 0; i < t->n; i++) x[(size_t)row * xs + i] *= row % 2 ? 1e-3f : 50.0f;
    for (uint32_t i = 0; i < t->n; i++) w[i] = 1.0f + 0.5f * rng_normal(&r);
    float eps = 1e-6f;
    reference(x, w, ref, t->n, t->rows, xs, ys, eps);

    cvk_buffer bx, bw, by;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, nx * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, t->n * 4, 4, CVK_MEM_DEVICE), 0);
    if (!t->in_place) assert_int_equal(cvk_buffer_create(&vk->mem, &by, ny * 4, 4, CVK_MEM_DEVICE), 0);
    vk->stager.force_staging = seed & 1;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), w), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_pipeline p;
    cvk_pipeline_desc d;
    uint32_t spec = t->wg;
    if (t->subgroup) { /* the op's pipeline, but asking for a subgroup size */
        d = (cvk_pipeline_desc){.name = "rmsnorm",
                                .spv = cinder_spv_rmsnorm,
                                .spv_size = cinder_spv_rmsnorm_size,
                                .n_bindings = 3,
                                .push_size = sizeof(cvk_rmsnorm_push),
                                .spec = &spec,
                                .n_spec = 1,
                                .subgroup_size = t->subgroup,
                                .full_subgroups = true};
        assert_int_equal(cvk_pipeline_create(&p, &vk->dev, vk->pcache.cache, &d), 0);
    } else {
        assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, vk->pcache.cache, t->wg), 0);
    }
    cvk_buffer *out = t->in_place ? &bx : &by;
    cvk_rmsnorm_args a = {.x = cvk_view_whole(&bx),
                          .w = cvk_view_whole(&bw),
                          .y = cvk_view_whole(out),
                          .n = t->n,
                          .rows = t->rows,
                          .x_stride = xs,
                          .y_stride = ys,
                          .eps = eps};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_rmsnorm(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(out), y), 0);
    vk->stager.force_staging = false;

    for (uint32_t row = 0; row < t->rows; row++) {
        double mx = 0;
        for (uint32_t i = 0; i < t->n; i++) mx = fmax(mx, fabs(ref[(size_t)row * ys + i]));
        for (uint32_t i = 0; i < t->n; i++) {
            size_t k = (size_t)row * ys + i;
            if (fabs((double)y[k] - ref[k]) > 2e-6 * mx + 1e-30)
                fail_msg("n=%u rows=%u wg=%u: row %u [%u] = %.9g, want %.9g", t->n, t->rows, t->wg, row, i, y[k],
                         ref[k]);
        }
    }
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &bw);
    if (!t->in_place) cvk_buffer_destroy(&vk->mem, &by);
    free(x), free(w), free(y), free(ref);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_rmsnorm, cinder_spv_rmsnorm_size, &si), 0);
    const uint32_t want[] = {offsetof(cvk_rmsnorm_push, n), offsetof(cvk_rmsnorm_push, rows),
                             offsetof(cvk_rmsnorm_push, x_stride), offsetof(cvk_rmsnorm_push, y_stride),
                             offsetof(cvk_rmsnorm_push, eps)};
    assert_int_equal(si.n_push, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_rmsnorm_push));
    assert_int_equal(si.n_bindings, 3);
}

static void test_awkward_sizes(void **state) {
    (void)state;
    const tcase cases[] = {
        {.n = 1, .rows = 1, .wg = 256},
        {.n = 7, .rows = 3, .wg = 256},
        {.n = 129, .rows = 17, .wg = 64},
        {.n = 1000, .rows = 5, .xs = 1003, .ys = 1001, .wg = 256},
        {.n = 2051, .rows = 4, .wg = 128},
        {.n = 5000, .rows = 2, .wg = 32},
        {.n = 128, .rows = 33, .xs = 136, .wg = 128, .in_place = true},
        {.n = 4099, .rows = 3, .wg = 1024},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 100 + i);
}

static void test_many_rows(void **state) {
    (void)state;
    tcase t = {.n = 3, .rows = 70001, .wg = 32}; /* two rows of the grid: 65535 + 4466 */
    run_case(&t, 7);
}

static void test_subgroup_sizes(void **state) {
    (void)state;
    const cvk_caps *c = &vk->dev.info.caps;
    for (uint32_t s = c->min_subgroup_size; s && s <= c->max_subgroup_size; s *= 2) {
        tcase t = {.n = 777, .rows = 9, .wg = s * 4 > 64 ? s * 4 : 64, .subgroup = s};
        run_case(&t, 1000 + s);
    }
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 400, 4, CVK_MEM_DEVICE), 0);
    cvk_pipeline p;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64), 0);
    cvk_rmsnorm_args a = {
        .x = cvk_view_whole(&b), .w = cvk_view_whole(&b), .y = cvk_view_whole(&b), .n = 50, .rows = 3, .eps = 1e-6f};
    assert_int_equal(cvk_rmsnorm(&vk->cmd, &vk->dpool, &p, &a), -1); /* 150 floats in 100 */
    assert_non_null(strstr(cd_errmsg(), "needs"));
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 100), -1);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_awkward_sizes),
        cmocka_unit_test(test_many_rows),
        cmocka_unit_test(test_subgroup_sizes),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
