/* The server's reply memory (runtime/text/reply_memory.h): a hit gives the ids recorded for exactly
 * the text up to a boundary, the longest such entry; another namespace, another text or a
 * boundary the entry does not end at misses; the bounds forget the oldest first; texts whose
 * hashes collide (the hash masked to nothing) are told apart by their bytes; and a random run
 * against a naive model (the last ids put for each salt and text). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rng.h"
#include "runtime/text/reply_memory.h"

static void put(reply_memory *m, const char *salt, const char *text, const int32_t *ids, size_t n) {
    assert_int_equal(reply_memory_put(m, salt, ids, n, text, strlen(text)), 0);
}

/* find over text at the given boundaries: the ids' first value (or -1 for a miss) and their end. */
static int32_t find(reply_memory *m, const char *salt, const char *text, const size_t *ends, size_t n_ends,
                    size_t *end) {
    int32_t *ids;
    size_t n;
    if (!reply_memory_find(m, salt, text, ends, n_ends, &ids, &n, end)) return -1;
    int32_t first = ids[0];
    free(ids);
    return first;
}

#define PROMPT "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
#define TURN1 PROMPT "hello<|im_end|>"
#define TURN2                                                                                                          \
    TURN1 "\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"                                                \
          "again<|im_end|>"

static void test_hit_miss_longest(void **state) {
    (void)state;
    reply_memory m;
    assert_int_equal(reply_memory_init(&m, 16, 1000, 10000), 0);
    const int32_t a[] = {100, 1, 2}, b[] = {200, 1, 2, 3, 4};
    put(&m, NULL, TURN1, a, 3);
    put(&m, NULL, TURN2, b, 5);
    const char *next = TURN2 "\n<|im_start|>user\nthird<|im_end|>\n";
    size_t ends[] = {strlen(PROMPT) - strlen("\n<|im_start|>assistant\n"), strlen(TURN1), strlen(TURN2),
                     strlen(next) - 1};
    size_t end;
    assert_int_equal(find(&m, NULL, next, ends, 4, &end), 200); /* the longest */
    assert_int_equal(end, strlen(TURN2));
    assert_int_equal(find(&m, NULL, next, ends, 2, &end), 100); /* TURN2's end not a boundary: TURN1 */
    assert_int_equal(end, strlen(TURN1));
    int32_t *ids;
    size_t n;
    assert_true(reply_memory_find(&m, NULL, next, ends, 4, &ids, &n, &end));
    assert_int_equal(n, 5);
    assert_memory_equal(ids, b, sizeof b);
    free(ids);
    /* the reply sent back changed: its text no longer matches, the prompt before it does not either */
    const char *changed = PROMPT "hellO<|im_end|>\n";
    size_t e2[] = {strlen(TURN1)};
    assert_int_equal(find(&m, NULL, changed, e2, 1, &end), -1);
    /* a boundary that is not where any entry ends */
    size_t e3[] = {ends[0], ends[3]};
    assert_int_equal(find(&m, NULL, next, e3, 2, &end), -1);
    assert_int_equal(find(&m, NULL, next, NULL, 0, &end), -1);
    reply_memory_free(&m);
}

static void test_namespaces(void **state) {
    (void)state;
    reply_memory m;
    assert_int_equal(reply_memory_init(&m, 16, 1000, 10000), 0);
    const int32_t a[] = {1, 2}, b[] = {7, 8};
    put(&m, "tenant-a", TURN1, a, 2);
    size_t ends[] = {strlen(TURN1)}, end;
    assert_int_equal(find(&m, "tenant-a", TURN1, ends, 1, &end), 1);
    assert_int_equal(find(&m, "tenant-b", TURN1, ends, 1, &end), -1);
    assert_int_equal(find(&m, NULL, TURN1, ends, 1, &end), -1);
    assert_int_equal(find(&m, "", TURN1, ends, 1, &end), -1);
    put(&m, "", TURN1, b, 2); /* "" is the unsalted namespace */
    assert_int_equal(find(&m, NULL, TURN1, ends, 1, &end), 7);
    assert_int_equal(find(&m, "tenant-a", TURN1, ends, 1, &end), 1);
    m.hash_mask = 0; /* every hash equal: the salt is still compared */
    put(&m, "x", TURN1, b, 2);
    assert_int_equal(find(&m, "y", TURN1, ends, 1, &end), -1);
    assert_int_equal(find(&m, "x", TURN1, ends, 1, &end), 7);
    reply_memory_free(&m);
}

static void test_bounds(void **state) {
    (void)state;
    reply_memory m;
    const int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    char text[4][8] = {"t0", "t1", "t2", "t3"};
    size_t ends[] = {2}, end, held, tokens;
    /* entries: 3 at most */
    assert_int_equal(reply_memory_init(&m, 3, 1000, 1000), 0);
    for (int i = 0; i < 4; i++) put(&m, NULL, text[i], ids + i, 1);
    assert_int_equal(find(&m, NULL, "t0", ends, 1, &end), -1);
    for (int i = 1; i < 4; i++) assert_int_equal(find(&m, NULL, text[i], ends, 1, &end), 1 + i);
    reply_memory_held(&m, &held, &tokens);
    assert_int_equal(held, 3);
    assert_int_equal(tokens, 3);
    /* the same text again replaces its entry (and refreshes it: t1 is the oldest no more) */
    put(&m, NULL, "t1", ids + 9, 1);
    reply_memory_held(&m, &held, &tokens);
    assert_int_equal(held, 3);
    put(&m, NULL, "t0", ids, 1);
    assert_int_equal(find(&m, NULL, "t2", ends, 1, &end), -1);
    assert_int_equal(find(&m, NULL, "t1", ends, 1, &end), 10);
    reply_memory_free(&m);
    /* tokens: 10 at most; 4 each, so the third forgets the first; 11 alone is not kept */
    assert_int_equal(reply_memory_init(&m, 100, 10, 1000), 0);
    for (int i = 0; i < 3; i++) put(&m, NULL, text[i], ids + i, 4);
    assert_int_equal(find(&m, NULL, "t0", ends, 1, &end), -1);
    assert_int_equal(find(&m, NULL, "t1", ends, 1, &end), 2);
    assert_int_equal(find(&m, NULL, "t2", ends, 1, &end), 3);
    put(&m, NULL, "t3", ids, 11);
    assert_int_equal(find(&m, NULL, "t3", ends, 1, &end), -1);
    assert_int_equal(find(&m, NULL, "t2", ends, 1, &end), 3);
    reply_memory_held(&m, &held, &tokens);
    assert_int_equal(tokens, 8);
    reply_memory_free(&m);
    /* text bytes: 5 at most, 2 each */
    assert_int_equal(reply_memory_init(&m, 100, 100, 5), 0);
    for (int i = 0; i < 3; i++) put(&m, NULL, text[i], ids + i, 1);
    assert_int_equal(find(&m, NULL, "t0", ends, 1, &end), -1);
    assert_int_equal(find(&m, NULL, "t2", ends, 1, &end), 3);
    reply_memory_free(&m);
}

static void test_collisions(void **state) {
    (void)state;
    reply_memory m;
    assert_int_equal(reply_memory_init(&m, 16, 1000, 1000), 0);
    m.hash_mask = 0; /* every text collides: only the bytes tell them apart */
    const int32_t a[] = {1}, b[] = {2};
    put(&m, NULL, "abc", a, 1);
    put(&m, NULL, "abd", b, 1);
    size_t ends[] = {3}, end;
    assert_int_equal(find(&m, NULL, "abc!", ends, 1, &end), 1);
    assert_int_equal(find(&m, NULL, "abd!", ends, 1, &end), 2);
    assert_int_equal(find(&m, NULL, "abe!", ends, 1, &end), -1);
    reply_memory_free(&m);
}

/* Random puts and finds over a small alphabet (so texts are often prefixes of each other and
 * hashes, masked to 2 bits half the time, collide): a hit must be an entry put for exactly that
 * salt and text prefix, with the last ids put for it; the entry just put is always found; the
 * bounds always hold. */
typedef struct naive {
    char salt[4], text[16];
    int32_t id;
} naive;

static void test_random(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 47);
    reply_memory m;
    assert_int_equal(reply_memory_init(&m, 8, 40, 64), 0);
    naive *log = calloc(4000, sizeof *log);
    size_t n_log = 0;
    for (int step = 0; step < 4000; step++) {
        m.hash_mask = rng_u64(&r) & 1 ? 3 : ~(uint64_t)0;
        char salt[4] = {0}, text[16] = {0};
        if (rng_below(&r, 3)) salt[0] = (char)('a' + rng_below(&r, 2));
        size_t len = 1 + rng_below(&r, 14);
        for (size_t i = 0; i < len; i++) text[i] = (char)('x' + rng_below(&r, 2));
        int32_t ids[12];
        size_t n = 1 + rng_below(&r, 12);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)step;
        put(&m, salt, text, ids, n);
        log[n_log++] = (naive){.id = step};
        memcpy(log[n_log - 1].salt, salt, 4), memcpy(log[n_log - 1].text, text, 16);
        size_t ends[15], end;
        for (size_t i = 0; i < len; i++) ends[i] = i + 1;
        int32_t got = find(&m, salt, text, ends, len, &end);
        assert_int_equal(got, step); /* the newest and longest possible */
        /* another text: a hit is the last put for its salt and prefix */
        for (size_t i = 0; i < len; i++) text[i] = (char)('x' + rng_below(&r, 2));
        got = find(&m, salt, text, ends, len, &end);
        if (got >= 0) {
            const naive *e = &log[got];
            assert_string_equal(e->salt, salt);
            assert_int_equal(strlen(e->text), end);
            assert_memory_equal(e->text, text, end);
            for (size_t k = (size_t)got + 1; k < n_log; k++)
                assert_false(!strcmp(log[k].salt, salt) && !strcmp(log[k].text, e->text));
        }
        size_t held, tokens;
        reply_memory_held(&m, &held, &tokens);
        assert_true(held <= 8 && tokens <= 40 && m.bytes <= 64);
    }
    free(log);
    reply_memory_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_miss_longest), cmocka_unit_test(test_namespaces), cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_collisions),       cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
