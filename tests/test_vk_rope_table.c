/* The RoPE table (runtime/vk/rope_table.h): its dimensions cover every position with balanced
 * lo/hi halves, and bad sizes are refused. What the kernel makes of it, against cpu_rope_neox at
 * positions up to 262,143: tests/test_vk_head_norm_rope.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
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
        assert_true(((uint64_t)n_hi << shift) >= n_pos[i]);             /* covers every position */
        assert_true(n_hi == 1 || ((uint64_t)(n_hi - 1) << shift) < n_pos[i]); /* and no more rows */
        assert_true(n_hi <= 2 * (1u << shift) + 1);                      /* balanced */
    }
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_rope_table tab;
    assert_int_equal(cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 7, 1e4f, 100), -1);
    assert_non_null(strstr(cd_errmsg(), "even"));
    assert_int_equal(cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 8, 1e4f, 100), 0);
    assert_true(tab.n_pos == 100 && tab.head_dim == 8);
    cvk_rope_table_destroy(&vk->mem, &tab);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_dims),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
