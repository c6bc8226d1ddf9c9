/* The range allocator under every device memory block (runtime/vk/vk_arena.c), fuzzed
 * against a naive byte map: random allocations (random sizes and alignments) and releases;
 * after every step the invariant checker runs and the free list must be exactly the
 * complement of the map. An allocation may fail only when the map has no aligned gap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/vk/vk_arena.h"

#define CAP 4096

typedef struct live {
    uint64_t off, size;
} live;

static void expect_matches_map(const cvk_arena *a, const uint8_t *map) {
    if (cvk_arena_check(a)) fail_msg("%s", cd_errmsg());
    uint8_t seen[CAP] = {0};
    for (uint32_t i = 0; i < a->n_free; i++)
        for (uint64_t b = a->free[i].off; b < a->free[i].off + a->free[i].size; b++) seen[b] = 1;
    for (int b = 0; b < CAP; b++)
        if (seen[b] == map[b]) fail_msg("byte %d: free list and map disagree", b); /* map: 1 = used */
}

static bool map_has_gap(const uint8_t *map, uint64_t size, uint64_t align) {
    for (uint64_t s = 0; s + size <= CAP; s += align) {
        uint64_t k = 0;
        while (k < size && !map[s + k]) k++;
        if (k == size) return true;
    }
    return false;
}

static void fuzz(uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    cvk_arena a;
    assert_int_equal(cvk_arena_init(&a, CAP), 0);
    uint8_t map[CAP] = {0};
    live lv[512];
    int n = 0;
    for (int step = 0; step < 4000; step++) {
        if (n > 0 && (rng_below(&r, 100) < 45 || n == 512)) {
            int i = (int)rng_below(&r, (uint32_t)n);
            assert_int_equal(cvk_arena_release(&a, lv[i].off, lv[i].size), 0);
            memset(map + lv[i].off, 0, lv[i].size);
            lv[i] = lv[--n];
        } else {
            uint64_t size = 1 + rng_below(&r, rng_below(&r, 4) == 0 ? 1024 : 64);
            uint64_t align = 1ull << rng_below(&r, 8);
            uint64_t off;
            bool gap = map_has_gap(map, size, align);
            int rc = cvk_arena_alloc(&a, size, align, &off);
            assert_int_equal(rc, gap ? 0 : -1);
            if (rc == 0) {
                assert_int_equal(off % align, 0);
                for (uint64_t b = off; b < off + size; b++) assert_int_equal(map[b], 0);
                memset(map + off, 1, size);
                lv[n++] = (live){off, size};
            }
        }
        expect_matches_map(&a, map);
    }
    while (n > 0) {
        assert_int_equal(cvk_arena_release(&a, lv[n - 1].off, lv[n - 1].size), 0);
        n--;
    }
    assert_true(cvk_arena_empty(&a));
    assert_int_equal(a.n_free, 1);
    cvk_arena_free_all(&a);
}

static void test_fuzz_against_map(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 6; seed++) fuzz(seed);
}

static void test_worked_example(void **state) {
    (void)state;
    cvk_arena a;
    uint64_t o1, o2;
    assert_int_equal(cvk_arena_init(&a, 100), 0);
    assert_int_equal(cvk_arena_alloc(&a, 30, 1, &o1), 0);
    assert_int_equal(o1, 0);
    assert_int_equal(cvk_arena_alloc(&a, 20, 16, &o2), 0);
    assert_int_equal(o2, 32);
    assert_int_equal(a.n_free, 2); /* {30..32} {52..100} */
    assert_int_equal(cvk_arena_release(&a, o1, 30), 0);
    assert_int_equal(a.n_free, 2);
    assert_int_equal(a.free[0].off, 0);
    assert_int_equal(a.free[0].size, 32);
    assert_int_equal(cvk_arena_release(&a, o2, 20), 0);
    assert_int_equal(a.n_free, 1);
    assert_int_equal(a.free[0].size, 100);
    cvk_arena_free_all(&a);
}

static void test_bad_calls(void **state) {
    (void)state;
    cvk_arena a;
    uint64_t off;
    assert_int_equal(cvk_arena_init(&a, 64), 0);
    assert_int_equal(cvk_arena_alloc(&a, 0, 1, &off), -1);
    assert_int_equal(cvk_arena_alloc(&a, 8, 3, &off), -1);  /* not a power of two */
    assert_int_equal(cvk_arena_alloc(&a, 65, 1, &off), -1); /* too big */
    assert_int_equal(cvk_arena_alloc(&a, 16, 1, &off), 0);
    assert_int_equal(cvk_arena_release(&a, 32, 8), -1); /* free space: double free */
    assert_int_equal(cvk_arena_release(&a, 60, 8), -1); /* past the end */
    assert_int_equal(cvk_arena_check(&a), 0);
    assert_int_equal(cvk_arena_alloc(&a, 48, 1, &off), 0);
    assert_int_equal(cvk_arena_alloc(&a, 1, 1, &off), -1); /* full */
    cvk_arena_free_all(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_fuzz_against_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
