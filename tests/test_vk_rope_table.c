/* The RoPE table (runtime/vk/rope_table.h): its dimensions cover every position with balanced
 * lo/hi halves, and bad sizes are refused. What the kernel makes of it, against cpu_rope_neox at
 * positions up to 262,143: tests/test_vk_head_norm_rope.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/rope_table.h"
#include "tests/vk_fixture.h"

static void test_table_dims(void **state) {
    (void)state;
    const uint32_t n_pos[] = {1, 2, 15, 16, 17, 255, 256, 257, 40960, 65536, 65537, 262144, 1000000, UINT32_MAX};
    for (size_t i = 0; i < sizeof n_pos / sizeof *n_pos; i++) {
        uint32_t shift, n_hi;
        cvk_rope_table_dims(n_pos[i], &shift, &n_hi);
        assert_true(shift >= 4 && shift <= 16);
        assert_true(((uint64_t)n_hi << shift) >= n_pos[i]);                   /* covers every position */
        assert_true(n_hi == 1 || ((uint64_t)(n_hi - 1) << shift) < n_pos[i]); /* and no more rows */
        assert_true(n_hi <= 2 * (1u << shift) + 1);                           /* balanced */
    }
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_rope_table tab;
    double freq[4] = {1, 0.1, 0.01, 0.001};
    assert_int_equal(cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 7, freq, 1.0, 100), -1);
    assert_non_null(strstr(cd_errmsg(), "even"));
    assert_int_equal(cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 8, freq, 1.0, 100), 0);
    assert_true(tab.n_pos == 100 && tab.head_dim == 8);
    cvk_rope_table_destroy(&vk->mem, &tab);
}

/* The table as the kernel reads it: cos/sin of lo row (p & mask) and hi row (p >> shift)
 * combined by the angle-addition formula give pos * freq[i], scaled once by mscale (YaRN's
 * attention factor rides in the lo rows only). */
static void test_fill_scaled(void **state) {
    (void)state;
    const uint32_t d = 16, n_pos = 5000;
    double freq[8], mscale = 1.25;
    for (uint32_t i = 0; i < d / 2; i++) freq[i] = pow(1e4, -2.0 * i / d) / (1 + i % 3);
    uint32_t shift, n_hi;
    cvk_rope_table_dims(n_pos, &shift, &n_hi);
    float *tab = malloc(((size_t)(1u << shift) + n_hi) * d * sizeof *tab);
    assert_non_null(tab);
    cvk_rope_table_fill(tab, d, freq, mscale, shift, n_hi);
    const uint32_t pos[] = {0, 1, 17, 255, 256, 4097, n_pos - 1};
    for (size_t k = 0; k < sizeof pos / sizeof *pos; k++)
        for (uint32_t i = 0; i < d / 2; i++) {
            const float *a = tab + ((size_t)(pos[k] & ((1u << shift) - 1)) * (d / 2) + i) * 2;
            const float *b = tab + ((size_t)((1u << shift) + (pos[k] >> shift)) * (d / 2) + i) * 2;
            double c = (double)a[0] * b[0] - (double)a[1] * b[1], s = (double)a[1] * b[0] + (double)a[0] * b[1];
            assert_float_equal(c, cos(pos[k] * freq[i]) * mscale, 1e-6);
            assert_float_equal(s, sin(pos[k] * freq[i]) * mscale, 1e-6);
        }
    free(tab);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_dims),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_fill_scaled),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
