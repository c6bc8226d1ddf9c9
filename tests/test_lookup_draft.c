/* Prompt lookup (engine/lookup_draft.h): on hand-made histories and against a
 * brute-force reference on random ones (small alphabets, so suffixes recur): the longest suffix
 * of 4..2 tokens that occurred before, its latest occurrence, the tokens after it up to k_max
 * and the history's end; nothing for histories too short or without a repeat. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rng.h"
#include "engine/lookup_draft.h"

/* The definition, spelled out: for g = MAX..MIN, the largest start i with i + g < n and
 * toks[i, i + g) == toks[n - g, n); the tokens toks[i + g, ...) up to k_max and n. */
static uint32_t reference(const int32_t *toks, uint32_t n, uint32_t k_max, int32_t *out) {
    for (int g = LOOKUP_NGRAM_MAX; g >= LOOKUP_NGRAM_MIN; g--) {
        for (int i = (int)n - g - 1; i >= 0; i--) {
            bool same = true;
            for (int t = 0; t < g && same; t++) same = toks[i + t] == toks[(int)n - g + t];
            if (!same) continue;
            uint32_t k = 0;
            for (uint32_t p = (uint32_t)(i + g); p < n && k < k_max; p++) out[k++] = toks[p];
            return k;
        }
    }
    return 0;
}

static void test_examples(void **state) {
    (void)state;
    int32_t out[8];
    /* {"city": "Paris"} ... {"city": -> "Paris"} */
    const int32_t a[] = {5, 6, 7, 8, 9, 10, 11, 1, 2, 5, 6, 7};
    assert_int_equal(lookup_draft(a, 12, 3, out), 3);
    assert_int_equal(out[0], 8), assert_int_equal(out[1], 9), assert_int_equal(out[2], 10);
    assert_int_equal(lookup_draft(a, 12, 16, out), 9); /* up to the end of the history: 8 9 10 11 1 2 5 6 7 */
    assert_int_equal(out[6], 5);
    /* the latest occurrence wins, and the longest suffix before shorter ones */
    const int32_t b[] = {1, 2, 3, 1, 2, 4, 9, 1, 2};
    assert_int_equal(lookup_draft(b, 9, 1, out), 1);
    assert_int_equal(out[0], 4);
    const int32_t c[] = {7, 1, 2, 3, 5, 0, 2, 3, 6, 1, 2, 3}; /* 1 2 3 (g = 3) beats the later 2 3 */
    assert_int_equal(lookup_draft(c, 12, 1, out), 1);
    assert_int_equal(out[0], 5);
    /* no repeat, a single-token repeat (below the minimum), too short */
    const int32_t d[] = {1, 2, 3, 4, 5, 6, 1};
    assert_int_equal(lookup_draft(d, 7, 4, out), 0);
    assert_int_equal(lookup_draft(d, 1, 4, out), 0);
    assert_int_equal(lookup_draft(d, 0, 4, out), 0);
    /* a run: the suffix overlaps its occurrence; one token follows */
    const int32_t e[] = {3, 3, 3, 3, 3};
    assert_int_equal(lookup_draft(e, 5, 4, out), 1);
    assert_int_equal(out[0], 3);
    assert_int_equal(lookup_draft(a, 12, 0, out), 0);
}

static void test_random_against_reference(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 17);
    int32_t toks[300], got[16], want[16];
    uint32_t found = 0;
    for (int it = 0; it < 20000; it++) {
        uint32_t n = rng_below(&r, 300) + 1, alphabet = 2 + rng_below(&r, it % 3 ? 6 : 200), k = rng_below(&r, 17);
        for (uint32_t i = 0; i < n; i++) toks[i] = (int32_t)rng_below(&r, alphabet);
        memset(got, 0xff, sizeof got);
        uint32_t a = lookup_draft(toks, n, k, got), b = reference(toks, n, k, want);
        assert_int_equal(a, b);
        assert_memory_equal(got, want, a * sizeof *got);
        assert_int_equal(got[a < 16 ? a : 15] == -1, a < 16); /* nothing written past the count */
        found += a > 0;
    }
    assert_true(found > 5000 && found < 19000); /* both outcomes were exercised */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
