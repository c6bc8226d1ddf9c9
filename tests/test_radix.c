/* radix: the worked examples of radix.h, page-boundary cases, pins, leaf-first LRU order,
 * namespaces, exact stats, out-of-memory injection, and a randomized run against a naive
 * model with radix_check after every step. The model keeps, per namespace, every cached
 * whole-page prefix (k * page_tokens tokens) with its page id, and a pin count per page id
 * held by live handles; it answers a match by scanning all of them. The microbenchmark is
 * tests/bench_radix.c (a build target: it asserts nothing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix/radix.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"

#if defined(__SANITIZE_ADDRESS__)
#define RADIX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RADIX_TEST_ASAN 1
#endif
#endif

#define CHECK_TREE(t)                                                                                                  \
    do {                                                                                                               \
        if (radix_check(t)) fail_msg("radix_check: %s", cd_errmsg());                                                  \
    } while (0)

static const uint8_t NS_A[RADIX_NS_BYTES] = {1};
static const uint8_t NS_B[RADIX_NS_BYTES] = {2};
static const uint8_t NS_C[RADIX_NS_BYTES] = {1, [31] = 1};

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* ---- scripted helpers: tokens are the bytes of a string ----------------------------------- */

static uint32_t str_ids(const char *s, int32_t *out) {
    uint32_t n = (uint32_t)strlen(s);
    for (uint32_t i = 0; i < n; i++) out[i] = (unsigned char)s[i];
    return n;
}

static uint32_t insert_str(radix_tree *t, const uint8_t *ns, const char *s, const uint32_t *pages) {
    int32_t ids[256];
    uint32_t n = str_ids(s, ids), first_new = UINT32_MAX;
    if (radix_insert(t, ns, ids, n, pages, &first_new)) fail_msg("insert %s: %s", s, cd_errmsg());
    CHECK_TREE(t);
    return first_new;
}

/* Matches ids[0..n), expects want tokens and, when pages is given, exactly those page ids
 * (ceil(want / pt) of them), then releases. */
static void expect_ids(radix_tree *t, const uint8_t *ns, const int32_t *ids, uint32_t n, uint32_t want,
                       const uint32_t *pages) {
    radix_match m;
    if (radix_match_prefix(t, ns, ids, n, &m)) fail_msg("match: %s", cd_errmsg());
    CHECK_TREE(t);
    assert_int_equal(m.n_tokens, want);
    assert_int_equal(m.n_pages, ceil_div(want, t->page_tokens));
    if (want == 0) {
        assert_null(m.node);
        assert_null(m.pages);
    } else {
        assert_non_null(m.node);
        assert_true(t->stats.pinned_pages >= m.n_pages);
    }
    for (uint32_t i = 0; pages && i < m.n_pages; i++) assert_int_equal(m.pages[i], pages[i]);
    radix_release(t, &m);
    assert_null(m.pages);
    assert_null(m.node);
    CHECK_TREE(t);
}

static void expect_str(radix_tree *t, const uint8_t *ns, const char *s, uint32_t want, const uint32_t *pages) {
    int32_t ids[256];
    uint32_t n = str_ids(s, ids);
    expect_ids(t, ns, ids, n, want, pages);
}

static radix_match pin_str(radix_tree *t, const uint8_t *ns, const char *s, uint32_t want) {
    int32_t ids[256];
    uint32_t n = str_ids(s, ids);
    radix_match m;
    if (radix_match_prefix(t, ns, ids, n, &m)) fail_msg("match %s: %s", s, cd_errmsg());
    assert_int_equal(m.n_tokens, want);
    CHECK_TREE(t);
    return m;
}

/* Push-style eviction built on the pulled one (radix.h Rule 3), so the tests read as sequences of
 * reported victims: each victim is offered to demote (slots, or 0: dropped), then demoted or
 * dropped, and its pages reported to victim once the tree is consistent again. */
typedef struct evict_ops {
    radix_victim_fn victim;
    int (*demote)(void *ctx, const uint32_t *pages, uint32_t n, uint32_t *slots);
    radix_victim_fn host_free;
    void *ctx;
} evict_ops;

static uint64_t evict_tiered(radix_tree *t, uint64_t want, const evict_ops *ops) {
    static const evict_ops none = {0};
    static uint32_t pages[1 << 14], slots[1 << 14];
    if (!ops) ops = &none;
    uint64_t got = 0;
    radix_victim v;
    while (got < want && radix_gpu_victim(t, &v)) {
        uint32_t n = v.n_pages;
        assert_true(n <= sizeof pages / sizeof *pages);
        memcpy(pages, v.pages, n * sizeof *pages);
        bool saved = ops->demote && ops->demote(ops->ctx, pages, n, slots);
        if (saved) assert_int_equal(radix_demote(t, &v, slots), 0);
        else assert_int_equal(radix_drop(t, &v, ops->host_free, ops->ctx), 0);
        if (ops->victim) ops->victim(ops->ctx, pages, n);
        got += n;
    }
    return got;
}

/* One tier: every victim dropped. */
static uint64_t evict(radix_tree *t, uint64_t want, radix_victim_fn fn, void *ctx) {
    evict_ops ops = {.victim = fn, .ctx = ctx};
    return evict_tiered(t, want, &ops);
}

/* Victims in the order reported. */
typedef struct victim_log {
    const radix_tree *t;
    uint32_t pages[256];
    uint32_t n_pages;
    uint32_t sizes[64];
    uint32_t n_victims;
} victim_log;

static void log_victim(void *ctx, const uint32_t *pages, uint32_t n) {
    victim_log *v = ctx;
    if (v->t && radix_check(v->t)) fail_msg("radix_check inside the victim callback: %s", cd_errmsg());
    assert_true(n >= 1);
    assert_true(v->n_pages + n <= 256 && v->n_victims < 64);
    memcpy(v->pages + v->n_pages, pages, n * sizeof *pages);
    v->n_pages += n;
    v->sizes[v->n_victims++] = n;
}

/* Evicts want pages and expects exactly the page ids `pages` (n of them) in that order. */
static void expect_evict(radix_tree *t, uint64_t want, const uint32_t *pages, uint32_t n) {
    victim_log v = {.t = t};
    uint64_t before = t->stats.pages;
    uint64_t got = evict(t, want, log_victim, &v);
    CHECK_TREE(t);
    assert_int_equal(got, n);
    assert_int_equal(v.n_pages, n);
    assert_int_equal(t->stats.pages, before - n);
    for (uint32_t i = 0; i < n; i++) assert_int_equal(v.pages[i], pages[i]);
}

/* The pulled eviction itself: the victim is named, the tree is unchanged until the caller
 * decides, and a decision about a node that is no longer the victim changes nothing. */
static void test_pull_eviction(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    radix_victim v;
    assert_false(radix_gpu_victim(&t, &v));
    assert_null(v.node);
    assert_int_equal(radix_drop(&t, &v, NULL, NULL), -1); /* nothing named */
    assert_int_equal(insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){10, 11}), 0);
    assert_int_equal(insert_str(&t, NS_A, "wxyz", (uint32_t[]){20}), 0); /* newer */
    assert_true(radix_gpu_victim(&t, &v));                               /* the older leaf */
    assert_int_equal(v.n_pages, 2);
    assert_int_equal(v.pages[0], 10);
    assert_int_equal(v.pages[1], 11);
    radix_stats before = t.stats;
    assert_int_equal(t.stats.pages, 3); /* naming it changed nothing */
    /* a match pins it: it is no longer the victim, and both decisions refuse */
    radix_match m = pin_str(&t, NS_A, "abcdefgh", 8);
    assert_int_equal(radix_demote(&t, &v, (uint32_t[]){5, 6}), -1);
    assert_non_null(strstr(cd_errmsg(), "not the GPU victim"));
    assert_int_equal(radix_drop(&t, &v, NULL, NULL), -1);
    assert_int_equal(t.stats.evictions, before.evictions);
    CHECK_TREE(&t);
    radix_release(&t, &m);
    /* the match touched it: now [wxyz] is the least recently used */
    assert_true(radix_gpu_victim(&t, &v));
    assert_int_equal(v.pages[0], 20);
    assert_int_equal(radix_demote(&t, &v, (uint32_t[]){7}), 0);
    CHECK_TREE(&t);
    assert_int_equal(t.stats.pages, 2);
    assert_int_equal(t.stats.host_slots, 1);
    assert_int_equal(t.stats.evictions, before.evictions + 1);
    assert_true(radix_gpu_victim(&t, &v));
    assert_int_equal(v.pages[0], 10);
    assert_int_equal(radix_drop(&t, &v, NULL, NULL), 0);
    CHECK_TREE(&t);
    assert_int_equal(t.stats.pages, 0);
    assert_false(radix_gpu_victim(&t, &v)); /* [wxyz] is on the host now */
    assert_int_equal(radix_evict_host(&t, UINT64_MAX, NULL, NULL), 1);
    assert_int_equal(t.stats.nodes, 0);
    radix_free(&t);
}

/* ---- the worked examples of radix.h (page_tokens 4) --------------------------------------- */

static void test_header_examples(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 0), -1);
    assert_int_equal(radix_init(&t, 4), 0);
    CHECK_TREE(&t);
    /* "abcdefgh" (P0 P1) then "abcdwxyz" (P0 Q1): a split at the page boundary after "abcd" */
    assert_int_equal(insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){100, 101}), 0);
    assert_int_equal(t.stats.nodes, 1);
    assert_int_equal(insert_str(&t, NS_A, "abcdwxyz", (uint32_t[]){200, 201}), 1);
    assert_int_equal(t.stats.nodes, 3); /* [abcd] - [efgh], [wxyz] */
    assert_int_equal(t.stats.pages, 3);
    /* "abcdwxAB" diverges inside the first page of [wxyz]: [wxAB] joins its chain */
    assert_int_equal(insert_str(&t, NS_A, "abcdwxAB", (uint32_t[]){300, 301}), 1);
    assert_int_equal(t.stats.nodes, 4);
    assert_int_equal(t.stats.pages, 4);
    assert_int_equal(t.n_slots, 3); /* (root,a) (abcd,e) (abcd,w): the chain shares one slot */
    /* the four queries of the header */
    expect_str(&t, NS_A, "abcdefXY", 6, (uint32_t[]){100, 101});
    expect_str(&t, NS_A, "abcd", 4, (uint32_t[]){100});
    expect_str(&t, NS_A, "abcdefgX", 7, (uint32_t[]){100, 101});
    expect_str(&t, NS_A, "abcX", 3, (uint32_t[]){100});
    /* through the chain */
    expect_str(&t, NS_A, "abcdwxyz", 8, (uint32_t[]){100, 201});
    expect_str(&t, NS_A, "abcdwxAB", 8, (uint32_t[]){100, 301});
    expect_str(&t, NS_A, "abcdwxA", 7, (uint32_t[]){100, 301});
    expect_str(&t, NS_A, "abcdwxyQ", 7, (uint32_t[]){100, 201});
    expect_str(&t, NS_A, "abcdefghijkl", 8, (uint32_t[]){100, 101});
    { /* "abcdwx" matches two tokens of both [wxyz] and [wxAB]: either page will do */
        radix_match m = pin_str(&t, NS_A, "abcdwx", 6);
        assert_int_equal(m.n_pages, 2);
        assert_int_equal(m.pages[0], 100);
        assert_true(m.pages[1] == 201 || m.pages[1] == 301);
        radix_release(&t, &m);
    }
    /* what is cached stays the tree's: nothing new, the caller's pages are not taken */
    assert_int_equal(insert_str(&t, NS_A, "abcdwxAB", (uint32_t[]){400, 401}), 2);
    assert_int_equal(insert_str(&t, NS_A, "abcdwxyz1234", (uint32_t[]){500, 501, 502}), 2);
    assert_int_equal(t.stats.pages, 5);
    expect_str(&t, NS_A, "abcdwxyz1234", 12, (uint32_t[]){100, 201, 502});
    FILE *f = tmpfile();
    assert_non_null(f);
    radix_dump(&t, f);
    assert_true(ftell(f) > 0);
    fclose(f);
    victim_log v = {.t = &t};
    assert_int_equal(evict(&t, UINT64_MAX, log_victim, &v), 5);
    assert_int_equal(t.stats.nodes, 0);
    assert_int_equal(t.n_roots, 0);
    CHECK_TREE(&t);
    radix_free(&t);
    radix_free(&t); /* a zeroed tree is fine */
}

/* ---- page boundaries at page_tokens 4 and 16 ---------------------------------------------- */

static void boundaries(uint32_t pt) {
    radix_tree t;
    assert_int_equal(radix_init(&t, pt), 0);
    int32_t seq[64], q[64];
    for (uint32_t i = 0; i < 4 * pt; i++) seq[i] = 1000 + (int32_t)i;
    /* 3 whole pages and a partial one: the partial page is not stored */
    uint32_t first_new = 7;
    assert_int_equal(radix_insert(&t, NS_A, seq, 4 * pt - 1, (uint32_t[]){10, 11, 12, 13}, &first_new), 0);
    assert_int_equal(first_new, 0);
    assert_int_equal(t.stats.pages, 3);
    assert_int_equal(t.stats.inserted_tokens, 3 * pt);
    CHECK_TREE(&t);
    const uint32_t all[] = {10, 11, 12};
    struct {
        uint32_t diverge, want;
    } cases[] = {
        {2 * pt, 2 * pt},         /* ends exactly on a page boundary */
        {2 * pt + 1, 2 * pt + 1}, /* one token into a page */
        {3 * pt - 1, 3 * pt - 1}, /* one token before a page's end */
        {1, 1},                   /* one token */
        {0, 0},                   /* nothing */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(q, seq, sizeof seq);
        q[cases[c].diverge] = -5;
        expect_ids(&t, NS_A, q, 4 * pt, cases[c].want, all);
    }
    expect_ids(&t, NS_A, seq, 3 * pt, 3 * pt, all);     /* the whole of what is cached */
    expect_ids(&t, NS_A, seq, 3 * pt + 3, 3 * pt, all); /* a longer query */
    expect_ids(&t, NS_A, seq, 2 * pt, 2 * pt, all);     /* a shorter one, on a boundary */
    expect_ids(&t, NS_A, seq, pt - 1, pt - 1, all);     /* shorter than a page */
    expect_ids(&t, NS_A, seq, 0, 0, NULL);              /* empty */
    expect_ids(&t, NS_B, seq, 3 * pt, 0, NULL);         /* another namespace */
    /* an insert shorter than a page stores nothing, not even a namespace */
    first_new = 7;
    assert_int_equal(radix_insert(&t, NS_B, seq, pt - 1, NULL, &first_new), 0);
    assert_int_equal(first_new, 0);
    assert_int_equal(t.n_roots, 1);
    /* the matches of 2 pages and of 1 token cut the 3-page node after pages 2 and 1 (Rule 5) */
    assert_int_equal(t.stats.nodes, 3);
    assert_int_equal(t.stats.match_splits, 2);
    /* an insert ending inside an edge on a page boundary: nothing new, no split */
    assert_int_equal(radix_insert(&t, NS_A, seq, 2 * pt + 1, (uint32_t[]){20, 21}, &first_new), 0);
    assert_int_equal(first_new, 2);
    assert_int_equal(t.stats.nodes, 3);
    /* diverging in the middle of page 1 (its own node now): the leaf takes pages 1.. beside it */
    memcpy(q, seq, sizeof seq);
    q[pt + pt / 2] = -7;
    assert_int_equal(radix_insert(&t, NS_A, q, 3 * pt, (uint32_t[]){30, 31, 32}, &first_new), 0);
    assert_int_equal(first_new, 1);
    assert_int_equal(t.stats.nodes, 4);
    assert_int_equal(t.stats.pages, 5);
    CHECK_TREE(&t);
    expect_ids(&t, NS_A, q, 3 * pt, 3 * pt, (uint32_t[]){10, 31, 32});
    expect_ids(&t, NS_A, seq, 3 * pt, 3 * pt, all);
    q[pt + pt / 2 + 1] = -8; /* pt 4 and 16: the divergence is inside page 1 of both */
    expect_ids(&t, NS_A, q, 3 * pt, pt + pt / 2 + 1, (uint32_t[]){10, 31});
    radix_free(&t);
}

static void test_page_boundaries(void **state) {
    (void)state;
    boundaries(4);
    boundaries(16);
}

/* ---- pins --------------------------------------------------------------------------------- */

static void test_pins(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){1, 2});
    radix_match m1 = pin_str(&t, NS_A, "abcdefgX", 7); /* pins the single node [abcdefgh] */
    assert_int_equal(radix_evictable_pages(&t), 0);
    expect_evict(&t, UINT64_MAX, NULL, 0);
    /* splitting the pinned edge: the upper part inherits the pin (radix_check verifies that a
     * lock is at least the sum of its children's) */
    assert_int_equal(insert_str(&t, NS_A, "abcdwxyz", (uint32_t[]){3, 4}), 1);
    assert_int_equal(t.stats.pinned_pages, 2);
    assert_int_equal(radix_evictable_pages(&t), 1);
    expect_evict(&t, UINT64_MAX, (uint32_t[]){4}, 1); /* only the unpinned leaf */
    expect_evict(&t, UINT64_MAX, NULL, 0);
    radix_match m2 = pin_str(&t, NS_A, "abcdQ", 4); /* pins the upper part alone */
    radix_release(&t, &m1);                         /* the handle still names the lower node */
    CHECK_TREE(&t);
    assert_int_equal(t.stats.pinned_pages, 1);
    expect_evict(&t, UINT64_MAX, (uint32_t[]){2}, 1);
    radix_release(&t, &m2);
    CHECK_TREE(&t);
    assert_int_equal(t.stats.pinned_pages, 0);
    expect_evict(&t, UINT64_MAX, (uint32_t[]){1}, 1); /* every lock is back to 0 */
    assert_int_equal(t.stats.nodes, 0);
    radix_release(&t, &m2); /* a zeroed match is fine */

    /* a match ending before its node's last page pins the matched pages only (Rule 5): the
     * rest of a long branch that shares a prefix with a request stays evictable */
    insert_str(&t, NS_A, "abcdefghijklmnop", (uint32_t[]){1, 2, 3, 4});
    radix_match m5 = pin_str(&t, NS_A, "abcdeZ", 5); /* [abcdefgh] ─ [ijklmnop] */
    assert_int_equal(t.stats.match_splits, 1);
    assert_int_equal(t.stats.nodes, 2);
    assert_int_equal(t.stats.pinned_pages, 2);
    assert_int_equal(radix_evictable_pages(&t), 2);
    expect_evict(&t, UINT64_MAX, (uint32_t[]){3, 4}, 2);
    radix_release(&t, &m5);
    expect_evict(&t, UINT64_MAX, (uint32_t[]){1, 2}, 2);
    assert_int_equal(t.stats.nodes, 0);

    /* a pinned path is never evicted, however much is asked for; released, it is */
    insert_str(&t, NS_A, "aaaabbbbcccc", (uint32_t[]){10, 11, 12});
    insert_str(&t, NS_A, "aaaabbbbdddd", (uint32_t[]){10, 11, 13});
    insert_str(&t, NS_A, "aaaaeeee", (uint32_t[]){10, 14});
    insert_str(&t, NS_B, "aaaabbbb", (uint32_t[]){15, 16});
    radix_match m3 = pin_str(&t, NS_A, "aaaabbbbdd", 10);
    radix_match m4 = pin_str(&t, NS_A, "aaaabbbbdd", 10); /* twice: lock 2 */
    assert_int_equal(radix_evictable_pages(&t), 4);
    victim_log v = {.t = &t};
    assert_int_equal(evict(&t, UINT64_MAX, log_victim, &v), 4);
    assert_int_equal(t.stats.pages, 3);
    expect_str(&t, NS_A, "aaaabbbbdddd", 12, (uint32_t[]){10, 11, 13});
    radix_release(&t, &m3);
    assert_int_equal(radix_evictable_pages(&t), 0);
    radix_release(&t, &m4);
    assert_int_equal(radix_evictable_pages(&t), 3);
    expect_evict(&t, UINT64_MAX, (uint32_t[]){13, 11, 10}, 3); /* leaf first: each parent in turn */
    assert_int_equal(t.n_roots, 0);
    CHECK_TREE(&t);
    radix_free(&t);
}

/* ---- leaf-first LRU ----------------------------------------------------------------------- */

static void test_lru_order(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    insert_str(&t, NS_A, "aaaa", (uint32_t[]){1});
    insert_str(&t, NS_A, "bbbb", (uint32_t[]){2});
    insert_str(&t, NS_A, "cccc", (uint32_t[]){3});
    expect_str(&t, NS_A, "bbbbXX", 4, (uint32_t[]){2}); /* a match moves [bbbb] to the back */
    expect_evict(&t, 1, (uint32_t[]){1}, 1);
    expect_evict(&t, 1, (uint32_t[]){3}, 1);
    expect_evict(&t, 1, (uint32_t[]){2}, 1);
    /* evicting a leaf makes its parent a leaf, evictable in its turn */
    insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){10, 11});
    insert_str(&t, NS_A, "abcdwxyz", (uint32_t[]){20, 21});
    insert_str(&t, NS_A, "zzzz", (uint32_t[]){30});
    expect_evict(&t, 1, (uint32_t[]){11}, 1);
    expect_evict(&t, 1, (uint32_t[]){21}, 1);
    expect_evict(&t, 1, (uint32_t[]){10}, 1); /* [abcd] was used with [wxyz], before [zzzz] */
    expect_evict(&t, 1, (uint32_t[]){30}, 1);
    /* an insert of something cached touches it; so does a partial match */
    insert_str(&t, NS_A, "pppp", (uint32_t[]){40});
    insert_str(&t, NS_A, "qqqq", (uint32_t[]){41});
    insert_str(&t, NS_A, "mmmmnnnn", (uint32_t[]){50, 51});
    insert_str(&t, NS_A, "rrrr", (uint32_t[]){52});
    assert_int_equal(insert_str(&t, NS_A, "pppp", (uint32_t[]){42}), 1);
    expect_str(&t, NS_A, "mmmmn", 5, (uint32_t[]){50, 51});
    expect_evict(&t, 1, (uint32_t[]){41}, 1);
    expect_evict(&t, 1, (uint32_t[]){52}, 1);
    expect_evict(&t, 1, (uint32_t[]){40}, 1);
    expect_evict(&t, 1, (uint32_t[]){50, 51}, 2); /* a node goes whole */
    /* a split's lower part keeps its last use (the insert did not use its pages) */
    insert_str(&t, NS_A, "kkkkllll", (uint32_t[]){60, 61}); /* t1 */
    insert_str(&t, NS_A, "ssss", (uint32_t[]){62});         /* t2 */
    insert_str(&t, NS_A, "kkkkoooo", (uint32_t[]){60, 63}); /* t3: split, [llll] stays at t1 */
    expect_evict(&t, 1, (uint32_t[]){61}, 1);
    expect_evict(&t, 1, (uint32_t[]){62}, 1);
    expect_evict(&t, 2, (uint32_t[]){63, 60}, 2); /* at least 2 pages: two victims */
    assert_int_equal(t.n_roots, 0);
    radix_free(&t);
}

/* ---- namespaces --------------------------------------------------------------------------- */

static void test_namespaces(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    assert_int_equal(insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){1, 2}), 0);
    assert_int_equal(insert_str(&t, NS_B, "abcdefgh", (uint32_t[]){3, 4}), 0); /* nothing shared */
    assert_int_equal(t.n_roots, 2);
    expect_str(&t, NS_A, "abcdefgh", 8, (uint32_t[]){1, 2});
    expect_str(&t, NS_B, "abcdefgh", 8, (uint32_t[]){3, 4});
    expect_str(&t, NS_C, "abcdefgh", 0, NULL); /* differs from NS_A in its last byte only */
    assert_int_equal(insert_str(&t, NS_C, "abcdwxyz", (uint32_t[]){5, 6}), 0);
    assert_int_equal(t.n_roots, 3);
    expect_str(&t, NS_A, "abcdwxyz", 4, (uint32_t[]){1});
    /* one LRU across namespaces; A's match of "abcd" cut [efgh] off its node, which keeps the
     * last use of A's insert, the oldest */
    expect_evict(&t, 1, (uint32_t[]){2}, 1);
    expect_evict(&t, 1, (uint32_t[]){3, 4}, 2); /* B's, touched before C's insert and A's match */
    assert_int_equal(t.n_roots, 2);             /* B's root went with its last node */
    expect_str(&t, NS_B, "abcdefgh", 0, NULL);
    expect_evict(&t, 1, (uint32_t[]){5, 6}, 2);
    expect_evict(&t, 1, (uint32_t[]){1}, 1);
    assert_int_equal(t.n_roots, 0);
    insert_str(&t, NS_B, "xxxx", (uint32_t[]){7});
    insert_str(&t, NS_A, "yyyy", (uint32_t[]){8});
    insert_str(&t, NS_B, "zzzz", (uint32_t[]){9});
    expect_evict(&t, UINT64_MAX, (uint32_t[]){7, 8, 9}, 3);
    CHECK_TREE(&t);
    radix_free(&t);
}

/* ---- stats -------------------------------------------------------------------------------- */

static void test_stats(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    assert_int_equal(t.stats.bytes, 0);
    insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){1, 2});
    uint64_t bytes_one = t.stats.bytes;
    assert_true(bytes_one >= 8 * 4 + 2 * 4);
    insert_str(&t, NS_A, "abcdefghij", (uint32_t[]){8, 9}); /* nothing new */
    assert_int_equal(t.stats.bytes, bytes_one);
    insert_str(&t, NS_A, "abcdwxyz", (uint32_t[]){5, 6});
    assert_true(t.stats.bytes > bytes_one);
    radix_match m;
    int32_t ids[16];
    const char *q[] = {"abcdefgh", "abcdefgX", "zzz", "", "abcdwxyz12"};
    for (int i = 0; i < 5; i++) {
        uint32_t n = str_ids(q[i], ids);
        assert_int_equal(radix_match_prefix(&t, NS_A, ids, n, &m), 0);
        radix_release(&t, &m);
    }
    radix_stats s = t.stats;
    assert_int_equal(s.lookups, 5);
    assert_int_equal(s.full_hits, 1);
    assert_int_equal(s.partial_hits, 2);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.hit_tokens, 8 + 7 + 8);
    assert_int_equal(s.inserted_tokens, 12);
    assert_int_equal(s.nodes, 3);
    assert_int_equal(s.pages, 3);
    assert_int_equal(s.pinned_pages, 0);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(t.clock, 8); /* 3 inserts, 5 matches */
    victim_log v = {.t = &t};
    assert_int_equal(evict(&t, 2, log_victim, &v), 2);
    assert_int_equal(t.stats.evictions, 2);
    assert_int_equal(t.stats.evicted_pages, 2);
    assert_int_equal(evict(&t, 100, NULL, NULL), 1);
    assert_int_equal(t.stats.evictions, 3);
    assert_int_equal(t.stats.evicted_pages, 3);
    assert_int_equal(t.stats.nodes, 0);
    assert_int_equal(t.stats.pages, 0);
    assert_true(t.stats.bytes > 0); /* the tables stay */
    assert_int_equal(t.clock, 8);   /* eviction does not move the clock */
    CHECK_TREE(&t);
    radix_free(&t);
}

/* Misuse is an error, and the checker notices a damaged tree. */
static void test_errors_and_check(void **state) {
    (void)state;
    radix_tree z = {0};
    radix_match m;
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint32_t first_new = 9;
    assert_int_equal(radix_match_prefix(&z, NS_A, ids, 8, &m), -1);
    assert_null(m.node);
    radix_release(&z, &m);
    assert_int_equal(radix_insert(&z, NS_A, ids, 8, (uint32_t[]){1, 2}, &first_new), -1);
    assert_int_equal(first_new, 9);
    radix_free(&z);
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    assert_int_equal(radix_insert(&t, NS_A, ids, 8, NULL, &first_new), -1);
    assert_int_equal(radix_insert(&t, NS_A, NULL, 8, (uint32_t[]){1, 2}, &first_new), -1);
    assert_int_equal(radix_match_prefix(&t, NS_A, NULL, 8, &m), -1);
    insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){1, 2});
    insert_str(&t, NS_A, "abcdwxyz", (uint32_t[]){1, 3});
    insert_str(&t, NS_A, "qqqq", (uint32_t[]){4});
    struct {
        uint64_t *field;
        const char *says;
    } damage[] = {
        {&t.stats.pages, "pages"},
        {&t.stats.nodes, "nodes"},
        {&t.stats.bytes, "bytes"},
        {&t.stats.pinned_pages, "pinned"},
    };
    for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
        (*damage[i].field)++;
        assert_int_equal(radix_check(&t), -1);
        assert_non_null(strstr(cd_errmsg(), damage[i].says));
        (*damage[i].field)--;
        CHECK_TREE(&t);
    }
    t.n_slots++;
    assert_int_equal(radix_check(&t), -1);
    t.n_slots--;
    assert_true(t.gpu_lru.n >= 2);
    radix_node *h0 = t.gpu_lru.v[0];
    t.gpu_lru.v[0] = t.gpu_lru.v[1];
    t.gpu_lru.v[1] = h0;
    assert_int_equal(radix_check(&t), -1);
    assert_non_null(strstr(cd_errmsg(), "heap"));
    t.gpu_lru.v[1] = t.gpu_lru.v[0];
    t.gpu_lru.v[0] = h0;
    t.clock--;
    assert_int_equal(radix_check(&t), -1); /* the last insert's nodes were used after the clock */
    t.clock++;
    CHECK_TREE(&t);
    radix_free(&t);
}

/* ---- the host tier ------------------------------------------------------------------------ */

/* What a tiered eviction, host eviction or restore reported, in order, and a demote callback
 * that hands out slots next_slot, next_slot + 1, ... while `budget` lasts (then fails). Every
 * callback checks the tree first: it must be consistent during the call. */
typedef struct tier_log {
    const radix_tree *t;
    uint32_t victims[64], n_victims; /* GPU pages given up */
    uint32_t asked[64], n_asked;     /* GPU pages demote was asked about */
    uint32_t freed[64], n_freed;     /* host slots given back */
    uint32_t next_slot, budget;
    uint32_t calls; /* callback calls, any kind */
} tier_log;

static void tl_push(uint32_t *dst, uint32_t *n, const uint32_t *ids, uint32_t k) {
    assert_true(k >= 1 && *n + k <= 64);
    memcpy(dst + *n, ids, k * sizeof *ids);
    *n += k;
}

static void tl_victim(void *ctx, const uint32_t *pages, uint32_t n) {
    tier_log *l = ctx;
    if (l->t && radix_check(l->t)) fail_msg("radix_check inside the victim callback: %s", cd_errmsg());
    tl_push(l->victims, &l->n_victims, pages, n);
    l->calls++;
}

static void tl_host_free(void *ctx, const uint32_t *slots, uint32_t n) {
    tier_log *l = ctx;
    if (l->t && radix_check(l->t)) fail_msg("radix_check inside the host_free callback: %s", cd_errmsg());
    tl_push(l->freed, &l->n_freed, slots, n);
    l->calls++;
}

static int tl_demote(void *ctx, const uint32_t *pages, uint32_t n, uint32_t *slots) {
    tier_log *l = ctx;
    if (l->t && radix_check(l->t)) fail_msg("radix_check inside the demote callback: %s", cd_errmsg());
    tl_push(l->asked, &l->n_asked, pages, n);
    l->calls++;
    if (n > l->budget) return 0;
    l->budget -= n;
    for (uint32_t i = 0; i < n; i++) slots[i] = l->next_slot++;
    return 1;
}

static evict_ops tl_ops(tier_log *l) {
    return (evict_ops){.victim = tl_victim, .demote = tl_demote, .host_free = tl_host_free, .ctx = l};
}

static void tl_reset(tier_log *l, const radix_tree *t, uint32_t next_slot, uint32_t budget) {
    *l = (tier_log){.t = t, .next_slot = next_slot, .budget = budget};
}

static void expect_ids_eq(const uint32_t *got, uint32_t n_got, const uint32_t *want, uint32_t n_want) {
    assert_int_equal(n_got, n_want);
    for (uint32_t i = 0; i < n_want; i++)
        if (got[i] != want[i]) fail_msg("id %u of %u: %u, expected %u", i, n_want, got[i], want[i]);
}

/* A tiered eviction of want pages: expects the victims' GPU pages, the slots freed with
 * dropped subtrees, in order. */
static void expect_tiered(radix_tree *t, tier_log *l, uint64_t want, const uint32_t *victims, uint32_t n_victims,
                          const uint32_t *freed, uint32_t n_freed) {
    l->n_victims = l->n_asked = l->n_freed = 0;
    evict_ops ops = tl_ops(l);
    uint64_t pages = t->stats.pages;
    assert_int_equal(evict_tiered(t, want, &ops), n_victims);
    CHECK_TREE(t);
    assert_int_equal(t->stats.pages, pages - n_victims);
    expect_ids_eq(l->victims, l->n_victims, victims, n_victims);
    expect_ids_eq(l->freed, l->n_freed, freed, n_freed);
}

static void expect_evict_host(radix_tree *t, tier_log *l, uint64_t want, const uint32_t *freed, uint32_t n_freed) {
    l->n_freed = 0;
    uint64_t slots = t->stats.host_slots;
    assert_int_equal(radix_evict_host(t, want, tl_host_free, l), n_freed);
    CHECK_TREE(t);
    assert_int_equal(t->stats.host_slots, slots - n_freed);
    expect_ids_eq(l->freed, l->n_freed, freed, n_freed);
}

/* A pinned match with its residency: n_gpu_pages, and pages[0 .. n_gpu_pages + n_restore). */
static radix_match pin_tiers(radix_tree *t, const uint8_t *ns, const char *s, uint32_t want_tokens, uint32_t want_gpu,
                             const uint32_t *ids, uint32_t n_ids) {
    radix_match m = pin_str(t, ns, s, want_tokens);
    assert_int_equal(m.n_gpu_pages, want_gpu);
    assert_int_equal(m.n_gpu_pages + m.n_restore, m.n_restore ? n_ids : m.n_pages);
    assert_int_equal(n_ids, m.n_restore ? m.n_gpu_pages + m.n_restore : m.n_pages);
    expect_ids_eq(m.pages, n_ids, ids, n_ids);
    return m;
}

static void expect_tiers(radix_tree *t, const uint8_t *ns, const char *s, uint32_t want_tokens, uint32_t want_gpu,
                         const uint32_t *ids, uint32_t n_ids) {
    radix_match m = pin_tiers(t, ns, s, want_tokens, want_gpu, ids, n_ids);
    radix_release(t, &m);
    CHECK_TREE(t);
}

/* Rule 3, saved: demoted nodes stay cached on the host; a parent whose children all went to
 * the host becomes GPU-evictable and is demoted in its turn (before younger leaves). */
static void test_demote_saved(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){1, 2});                      /* t1 */
    assert_int_equal(insert_str(&t, NS_A, "aaaacccc", (uint32_t[]){1, 3}), 1); /* t2: [aaaa] ─ [bbbb], [cccc] */
    insert_str(&t, NS_A, "ddddeeee", (uint32_t[]){4, 5});                      /* t3 */
    assert_int_equal(t.gpu_lru.n, 3);
    expect_tiered(&t, &l, 1, (uint32_t[]){2}, 1, NULL, 0); /* [bbbb] -> slot 900 */
    expect_ids_eq(l.asked, l.n_asked, (uint32_t[]){2}, 1);
    assert_int_equal(t.stats.nodes, 4);
    assert_int_equal(t.stats.pages, 4);
    assert_int_equal(t.stats.host_slots, 1);
    assert_int_equal(t.stats.demotions, 1);
    assert_int_equal(t.stats.demoted_pages, 1);
    assert_int_equal(t.stats.evictions, 1);
    assert_int_equal(t.stats.evicted_pages, 1);
    assert_int_equal(t.host_lru.n, 1);
    assert_int_equal(t.gpu_lru.n, 2); /* [aaaa] still has a GPU child, [cccc] */
    assert_int_equal(radix_evictable_pages(&t), 4);
    assert_int_equal(radix_evictable_host_slots(&t), 1);
    /* still cached: a match goes through the host node */
    expect_tiers(&t, NS_A, "aaaabbbb", 8, 1, (uint32_t[]){1, 900}, 2); /* t4 */
    expect_tiers(&t, NS_A, "aaaacccc", 8, 2, (uint32_t[]){1, 3}, 2);   /* t5 */
    /* [ddddeeee] (t3) goes next, then [bbbb] is the only host leaf... [cccc] (t5) then [aaaa]
     * (t5, now without GPU children) */
    expect_tiered(&t, &l, 1, (uint32_t[]){4, 5}, 2, NULL, 0); /* slots 901 902 */
    expect_tiered(&t, &l, 1, (uint32_t[]){3}, 1, NULL, 0);    /* 903 */
    assert_int_equal(t.gpu_lru.n, 1);                         /* [aaaa]: host children only */
    expect_tiered(&t, &l, 5, (uint32_t[]){1}, 1, NULL, 0);    /* 904; nothing GPU-evictable left */
    assert_int_equal(t.stats.pages, 0);
    assert_int_equal(t.stats.host_slots, 5);
    assert_int_equal(t.stats.nodes, 4);
    assert_int_equal(t.stats.demotions, 4);
    assert_int_equal(t.stats.demoted_pages, 5);
    assert_int_equal(t.host_lru.n, 3);
    expect_tiers(&t, NS_A, "aaaabbbbX", 8, 0, (uint32_t[]){904, 900}, 2);
    expect_tiers(&t, NS_A, "ddddeeee", 8, 0, (uint32_t[]){901, 902}, 2);
    expect_tiers(&t, NS_B, "ddddeeee", 0, 0, NULL, 0);
    FILE *f = tmpfile();
    assert_non_null(f);
    radix_dump(&t, f);
    assert_true(ftell(f) > 0);
    fclose(f);
    /* Rule 4: host LRU; [aaaa] becomes host-evictable after both its children */
    expect_evict_host(&t, &l, 1, (uint32_t[]){903}, 1);           /* [cccc], t5 */
    expect_evict_host(&t, &l, 1, (uint32_t[]){900}, 1);           /* [bbbb], t6 */
    expect_evict_host(&t, &l, 2, (uint32_t[]){904, 901, 902}, 3); /* [aaaa] t6, then [ddddeeee] t7 */
    assert_int_equal(t.stats.nodes, 0);
    assert_int_equal(t.n_roots, 0);
    assert_int_equal(t.stats.host_evictions, 4);
    assert_int_equal(t.stats.host_evicted_slots, 5);
    assert_int_equal(radix_evict_host(&t, 1, tl_host_free, &l), 0);
    radix_free(&t);
}

/* Rule 3, dropped: no demote callback or no host space: the victim and its host subtree go,
 * children before parents, then the victim's pages; a namespace left empty goes too. */
static void test_demote_dropped(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 2);
    insert_str(&t, NS_A, "aaaabbbbcccc", (uint32_t[]){1, 2, 3}); /* t1 */
    insert_str(&t, NS_A, "aaaabbbbdddd", (uint32_t[]){1, 2, 4}); /* t2 */
    insert_str(&t, NS_A, "aaaaeeee", (uint32_t[]){1, 5});        /* t3: [aaaa] ─ [bbbb] ─ [cccc], [dddd]; [eeee] */
    assert_int_equal(t.stats.nodes, 5);
    expect_tiered(&t, &l, 2, (uint32_t[]){3, 4}, 2, NULL, 0); /* [cccc] -> 900, [dddd] -> 901 */
    assert_int_equal(t.stats.host_slots, 2);
    /* [bbbb] (t2) is GPU-evictable with host children; the budget is spent: dropped */
    expect_tiered(&t, &l, 1, (uint32_t[]){2}, 1, (uint32_t[]){901, 900}, 2);
    expect_ids_eq(l.asked, l.n_asked, (uint32_t[]){2}, 1);
    assert_int_equal(t.stats.nodes, 2);
    assert_int_equal(t.stats.host_slots, 0);
    assert_int_equal(t.stats.host_evictions, 2);
    assert_int_equal(t.stats.host_evicted_slots, 2);
    assert_int_equal(t.stats.evictions, 3);
    assert_int_equal(t.stats.demotions, 2);
    assert_int_equal(t.host_lru.n, 0);
    expect_str(&t, NS_A, "aaaabbbbcccc", 4, (uint32_t[]){1});
    /* the callbacks ran with the tree consistent: 2 victims + 1 asked + 2 freed, no more */
    assert_int_equal(l.calls, 2 + 2 + 1 + 1 + 2);
    /* a namespace whose only child is dropped with its host subtree */
    insert_str(&t, NS_B, "qqqqrrrr", (uint32_t[]){10, 11});
    insert_str(&t, NS_B, "qqqqssss", (uint32_t[]){10, 12});
    assert_int_equal(t.n_roots, 2);
    tl_reset(&l, &t, 910, 100);
    /* LRU: [eeee] (t3); then [aaaa] (t4, the match above) before [rrrr] (t5), [ssss] (t6) */
    expect_tiered(&t, &l, 3, (uint32_t[]){5, 1, 11}, 3, NULL, 0); /* 910, 911, 912 */
    assert_int_equal(t.gpu_lru.n, 1);                             /* [ssss]; [qqqq] has it */
    l.budget = 0;
    expect_tiered(&t, &l, 1, (uint32_t[]){12}, 1, NULL, 0);
    expect_tiered(&t, &l, 1, (uint32_t[]){10}, 1, (uint32_t[]){912}, 1); /* [qqqq] with [rrrr] */
    assert_int_equal(t.n_roots, 1);                                      /* NS_B went */
    expect_evict_host(&t, &l, UINT64_MAX, (uint32_t[]){910, 911}, 2);
    assert_int_equal(t.n_roots, 0);
    assert_int_equal(t.stats.nodes, 0);
    /* no demote callback: today's behaviour (radix_evict is the same call) */
    insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){20, 21});
    evict_ops only_victim = {.victim = tl_victim, .ctx = &l};
    l.n_victims = 0;
    assert_int_equal(evict_tiered(&t, 1, &only_victim), 2);
    expect_ids_eq(l.victims, l.n_victims, (uint32_t[]){20, 21}, 2);
    assert_int_equal(t.stats.demotions, 5);
    assert_int_equal(evict_tiered(&t, 1, NULL), 0);
    CHECK_TREE(&t);
    radix_free(&t);
}

/* Rule 5: a match through GPU and host nodes; GPU pages first, the partial last page on a
 * host node, the deepest node's pages past the match listed for restore. */
static void test_match_mixed(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "abcdefghijkl", (uint32_t[]){1, 2, 3});
    insert_str(&t, NS_A, "abcdXXXX", (uint32_t[]){1, 9});     /* [abcd] ─ [efghijkl], [XXXX] */
    expect_tiered(&t, &l, 1, (uint32_t[]){2, 3}, 2, NULL, 0); /* [efghijkl] -> 900 901 */
    /* partial page on a host node: the match cuts it into [efgh|H 900] ─ [ijkl|H 901] */
    expect_tiers(&t, NS_A, "abcdefgZ", 7, 1, (uint32_t[]){1, 900}, 2);
    assert_int_equal(t.stats.match_splits, 1);
    expect_tiers(&t, NS_A, "abcdeZ", 5, 1, (uint32_t[]){1, 900}, 2);           /* one token into it */
    expect_tiers(&t, NS_A, "abcdefghij", 10, 1, (uint32_t[]){1, 900, 901}, 3); /* into its last page */
    expect_tiers(&t, NS_A, "abcdefghijkl", 12, 1, (uint32_t[]){1, 900, 901}, 3);
    expect_tiers(&t, NS_A, "abcdQ", 4, 1, (uint32_t[]){1}, 1); /* ends at the GPU node */
    expect_tiers(&t, NS_A, "abZ", 2, 1, (uint32_t[]){1}, 1);
    expect_tiers(&t, NS_A, "abcdXXZ", 6, 2, (uint32_t[]){1, 9}, 2);
    /* all on the host: [XXXX] (older) then [abcd] */
    expect_tiered(&t, &l, 2, (uint32_t[]){9, 1}, 2, NULL, 0); /* 902, 903 */
    expect_tiers(&t, NS_A, "abZ", 2, 0, (uint32_t[]){903}, 1);
    expect_tiers(&t, NS_A, "abcdefgh", 8, 0, (uint32_t[]){903, 900}, 2);
    expect_tiers(&t, NS_A, "abcdXXXX", 8, 0, (uint32_t[]){903, 902}, 2);
    assert_int_equal(t.stats.lookups, 10);
    assert_int_equal(t.stats.hit_tokens, 7 + 5 + 10 + 12 + 4 + 2 + 6 + 2 + 8 + 8);
    radix_free(&t);
}

/* Rule 6: restore moves the path back to the GPU with the caller's pages, frees the slots and
 * leaves an all-GPU match; a stale handle takes only what is still on the host; a split on the
 * path in between does not matter; a handle that does not describe its path is refused. */
static void test_restore(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "abcdefghijkl", (uint32_t[]){1, 2, 3});
    insert_str(&t, NS_A, "abcdXXXX", (uint32_t[]){1, 9});
    expect_tiered(&t, &l, UINT64_MAX, (uint32_t[]){2, 3, 9, 1}, 4, NULL, 0); /* 900 901, 902, 903 */
    /* the match cuts [efghijkl] into [efgh|H 900] ─ [ijkl|H 901] and pins the upper part */
    radix_match m = pin_tiers(&t, NS_A, "abcdefgZ", 7, 0, (uint32_t[]){903, 900}, 2);
    assert_int_equal(t.stats.pinned_host_slots, 2);
    assert_int_equal(radix_evictable_host_slots(&t), 2); /* [ijkl], [XXXX] */
    l.n_freed = 0;
    assert_int_equal(radix_restore(&t, &m, (uint32_t[]){20, 21}, tl_host_free, &l), 2);
    CHECK_TREE(&t);
    expect_ids_eq(l.freed, l.n_freed, (uint32_t[]){900, 903}, 2); /* deepest node first */
    assert_int_equal(m.n_gpu_pages, 2);
    assert_int_equal(m.n_pages, 2);
    assert_int_equal(m.n_restore, 0);
    expect_ids_eq(m.pages, 2, (uint32_t[]){20, 21}, 2);
    assert_int_equal(t.stats.pages, 2);
    assert_int_equal(t.stats.pinned_pages, 2);
    assert_int_equal(t.stats.host_slots, 2);
    assert_int_equal(t.stats.pinned_host_slots, 0);
    assert_int_equal(t.stats.restores, 2);
    assert_int_equal(t.stats.restored_pages, 2);
    assert_int_equal(t.gpu_lru.n, 0);                             /* all pinned */
    assert_int_equal(radix_restore(&t, &m, NULL, NULL, NULL), 0); /* nothing left to restore */
    radix_release(&t, &m);
    CHECK_TREE(&t);
    assert_int_equal(t.gpu_lru.n, 1); /* [efgh]; [abcd] has a GPU child; [ijkl], [XXXX] are on the host */
    expect_tiers(&t, NS_A, "abcdefghijkl", 12, 2, (uint32_t[]){20, 21, 901}, 3);
    expect_tiers(&t, NS_A, "abcdXXXX", 8, 1, (uint32_t[]){20, 902}, 2);
    /* both on the host again; two handles, the shorter one restores first */
    expect_evict_host(&t, &l, 1, (uint32_t[]){901}, 1);                  /* [ijkl]: [XXXX] was touched after it */
    expect_tiered(&t, &l, UINT64_MAX, (uint32_t[]){21, 20}, 2, NULL, 0); /* 904, 905 */
    radix_match a = pin_tiers(&t, NS_A, "abcdefgZ", 7, 0, (uint32_t[]){905, 904}, 2);
    radix_match b = pin_tiers(&t, NS_A, "abcdZ", 4, 0, (uint32_t[]){905}, 1);
    l.n_freed = 0;
    assert_int_equal(radix_restore(&t, &b, (uint32_t[]){30}, tl_host_free, &l), 1);
    expect_ids_eq(b.pages, 1, (uint32_t[]){30}, 1);
    assert_int_equal(radix_match_host_left(&t, &a), 1);                                 /* [abcd] came back with b */
    assert_int_equal(radix_restore(&t, &a, (uint32_t[]){40, 41}, tl_host_free, &l), 1); /* 40 stays ours */
    CHECK_TREE(&t);
    expect_ids_eq(l.freed, l.n_freed, (uint32_t[]){905, 904}, 2);
    expect_ids_eq(a.pages, 2, (uint32_t[]){30, 41}, 2);
    assert_int_equal(a.n_gpu_pages, 2);
    radix_release(&t, &b);
    radix_release(&t, &a);
    CHECK_TREE(&t);
    expect_tiers(&t, NS_A, "abcdefghijkl", 8, 2, (uint32_t[]){30, 41}, 2);
    /* a split of a GPU node on the pinned path between match and restore */
    radix_free(&t);
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "abcdefghijkl", (uint32_t[]){1, 2, 3});
    insert_str(&t, NS_A, "abcdefghmnop", (uint32_t[]){1, 2, 4}); /* [abcdefgh] ─ [ijkl], [mnop] */
    expect_tiered(&t, &l, 1, (uint32_t[]){3}, 1, NULL, 0);       /* [ijkl] -> 900 */
    m = pin_tiers(&t, NS_A, "abcdefghijZ", 10, 2, (uint32_t[]){1, 2, 900}, 3);
    assert_int_equal(insert_str(&t, NS_A, "abcdQQQQ", (uint32_t[]){7, 8}), 1); /* splits [abcdefgh] */
    assert_int_equal(t.stats.nodes, 5);
    /* a handle that does not describe its path is refused, and nothing changes */
    radix_tree before = t;
    m.pages[2] = 901;
    assert_int_equal(radix_restore(&t, &m, (uint32_t[]){50}, tl_host_free, &l), -1);
    assert_non_null(strstr(cd_errmsg(), "slots"));
    m.pages[2] = 900;
    m.n_gpu_pages = 1; /* says [ijkl] is 1 page at path page 1 */
    m.n_restore = 1;
    assert_int_equal(radix_restore(&t, &m, (uint32_t[]){50}, tl_host_free, &l), -1);
    m.n_gpu_pages = 2;
    assert_int_equal(radix_restore(&t, &m, NULL, tl_host_free, &l), -1);
    assert_memory_equal(&before, &t, sizeof t);
    CHECK_TREE(&t);
    l.n_freed = 0;
    assert_int_equal(radix_restore(&t, &m, (uint32_t[]){50}, tl_host_free, &l), 1);
    expect_ids_eq(l.freed, l.n_freed, (uint32_t[]){900}, 1);
    expect_ids_eq(m.pages, 3, (uint32_t[]){1, 2, 50}, 3);
    radix_release(&t, &m);
    CHECK_TREE(&t);
    expect_tiers(&t, NS_A, "abcdefghijkl", 12, 3, (uint32_t[]){1, 2, 50}, 3);
    radix_free(&t);
}

/* Rule 5: a pinned host node is never host-evicted (its slots may be under a DMA); released,
 * it is. Nor does a GPU eviction touch a pinned path. */
static void test_pins_host(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){1, 2});
    insert_str(&t, NS_A, "aaaacccc", (uint32_t[]){1, 3});
    insert_str(&t, NS_A, "ddddeeee", (uint32_t[]){4, 5});
    expect_tiered(&t, &l, UINT64_MAX, (uint32_t[]){2, 3, 1, 4, 5}, 5, NULL, 0); /* 900, 901, 902, 903 904 */
    radix_match m = pin_tiers(&t, NS_A, "aaaacccc", 8, 0, (uint32_t[]){902, 901}, 2);
    radix_match m2 = pin_tiers(&t, NS_A, "aaaacc", 6, 0, (uint32_t[]){902, 901}, 2); /* lock 2 */
    assert_int_equal(t.stats.pinned_host_slots, 2);
    assert_int_equal(radix_evictable_host_slots(&t), 3);
    expect_evict_host(&t, &l, UINT64_MAX, (uint32_t[]){900, 903, 904}, 3);
    assert_int_equal(t.stats.nodes, 2);
    expect_evict_host(&t, &l, UINT64_MAX, NULL, 0);
    radix_release(&t, &m);
    expect_evict_host(&t, &l, UINT64_MAX, NULL, 0); /* still pinned once */
    radix_release(&t, &m2);
    CHECK_TREE(&t);
    assert_int_equal(radix_evictable_host_slots(&t), 2);
    expect_evict_host(&t, &l, 1, (uint32_t[]){901}, 1);
    expect_evict_host(&t, &l, 1, (uint32_t[]){902}, 1);
    assert_int_equal(t.n_roots, 0);
    /* a GPU node pinned above host children is neither demoted nor dropped */
    insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){1, 2});
    insert_str(&t, NS_A, "aaaacccc", (uint32_t[]){1, 3});
    m = pin_tiers(&t, NS_A, "aaaaZ", 4, 1, (uint32_t[]){1}, 1);
    expect_tiered(&t, &l, UINT64_MAX, (uint32_t[]){2, 3}, 2, NULL, 0);
    assert_int_equal(radix_evictable_pages(&t), 0);
    l.budget = 0;
    expect_tiered(&t, &l, UINT64_MAX, NULL, 0, NULL, 0);
    radix_release(&t, &m);
    expect_tiered(&t, &l, UINT64_MAX, (uint32_t[]){1}, 1, (uint32_t[]){906, 905}, 2);
    assert_int_equal(t.n_roots, 0);
    CHECK_TREE(&t);
    radix_free(&t);
}

/* Rule 7: an insert walks host nodes as cached, adopts nothing for them, and stores nothing
 * that would hang below one; after a restore it goes through. */
static void test_insert_over_host(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){1, 2});
    insert_str(&t, NS_A, "aaaacccc", (uint32_t[]){1, 3});
    expect_tiered(&t, &l, 1, (uint32_t[]){2}, 1, NULL, 0); /* [bbbb] -> 900 */
    /* nothing new: the host copy wins, the caller's pages stay the caller's */
    assert_int_equal(insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){7, 8}), 2);
    assert_int_equal(t.stats.pages, 2);
    assert_int_equal(t.stats.host_slots, 1);
    assert_int_equal(t.stats.blocked_inserts, 0);
    /* a new leaf below the host node: blocked, nothing taken */
    uint64_t inserted = t.stats.inserted_tokens;
    assert_int_equal(insert_str(&t, NS_A, "aaaabbbbdddd", (uint32_t[]){7, 8, 9}), 3);
    assert_int_equal(t.stats.blocked_inserts, 1);
    assert_int_equal(t.stats.nodes, 3);
    assert_int_equal(t.stats.inserted_tokens, inserted);
    expect_tiers(&t, NS_A, "aaaabbbbdddd", 8, 1, (uint32_t[]){1, 900}, 2);
    /* a sibling of the host node under a GPU node is fine, even in the same chain */
    assert_int_equal(insert_str(&t, NS_A, "aaaabbbXeeee", (uint32_t[]){7, 10, 11}), 1);
    assert_int_equal(t.stats.nodes, 4);
    expect_tiers(&t, NS_A, "aaaabbbXeeee", 12, 3, (uint32_t[]){1, 10, 11}, 3);
    expect_tiers(&t, NS_A, "aaaabbbbeeee", 8, 1, (uint32_t[]){1, 900}, 2);
    /* a split of a host edge: blocked; the touch moves it back in the host LRU */
    radix_free(&t);
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "qqqqrrrrssss", (uint32_t[]){20, 21, 22});
    insert_str(&t, NS_A, "zzzz", (uint32_t[]){23});
    expect_tiered(&t, &l, UINT64_MAX, (uint32_t[]){20, 21, 22, 23}, 4, NULL, 0); /* 900 901 902, 903 */
    assert_int_equal(insert_str(&t, NS_A, "qqqqrrrrtttt", (uint32_t[]){30, 31, 32}), 3);
    assert_int_equal(t.stats.blocked_inserts, 1);
    assert_int_equal(t.stats.nodes, 2);
    expect_evict_host(&t, &l, 1, (uint32_t[]){903}, 1); /* [zzzz]: [qqqq..] (older) was touched after it */
    assert_int_equal(insert_str(&t, NS_A, "qqqq", (uint32_t[]){30}), 1);
    assert_int_equal(insert_str(&t, NS_A, "qqqZyyyy", (uint32_t[]){40, 41}), 0); /* under the root */
    /* restore, then the same insert goes through: the tree takes the new page only */
    radix_match m = pin_tiers(&t, NS_A, "qqqqrrrrtttt", 8, 0, (uint32_t[]){900, 901}, 2); /* cuts [ssss] off */
    assert_int_equal(radix_restore(&t, &m, (uint32_t[]){50, 51}, tl_host_free, &l), 2);
    assert_int_equal(insert_str(&t, NS_A, "qqqqrrrrtttt", (uint32_t[]){30, 31, 32}), 2);
    radix_release(&t, &m);
    CHECK_TREE(&t);
    expect_tiers(&t, NS_A, "qqqqrrrrtttt", 12, 3, (uint32_t[]){50, 51, 32}, 3);
    expect_tiers(&t, NS_A, "qqqqrrrrssss", 12, 2, (uint32_t[]){50, 51, 902}, 3); /* [ssss] stayed on the host */
    assert_int_equal(t.stats.host_slots, 1);
    radix_free(&t);
}

/* The checker notices damage to the host tier's bookkeeping, and duplicate host slots. */
static int dup_demote(void *ctx, const uint32_t *pages, uint32_t n, uint32_t *slots) {
    (void)ctx;
    (void)pages;
    for (uint32_t i = 0; i < n; i++) slots[i] = 77;
    return 1;
}

static void test_tiers_check(void **state) {
    (void)state;
    radix_tree t;
    tier_log l;
    assert_int_equal(radix_init(&t, 4), 0);
    tl_reset(&l, &t, 900, 100);
    insert_str(&t, NS_A, "aaaabbbb", (uint32_t[]){1, 2});
    insert_str(&t, NS_A, "aaaacccc", (uint32_t[]){1, 3});
    insert_str(&t, NS_A, "dddd", (uint32_t[]){4});
    expect_tiered(&t, &l, 2, (uint32_t[]){2, 3}, 2, NULL, 0);
    radix_match m = pin_str(&t, NS_A, "aaaabbbb", 8);
    struct {
        uint64_t *field;
        const char *says;
    } damage[] = {
        {&t.stats.host_slots, "host_slots"},
        {&t.stats.pinned_host_slots, "pinned_host_slots"},
        {&t.stats.pages, "pages"},
        {&t.stats.pinned_pages, "pinned"},
    };
    for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
        (*damage[i].field)++;
        assert_int_equal(radix_check(&t), -1);
        assert_non_null(strstr(cd_errmsg(), damage[i].says));
        (*damage[i].field)--;
        CHECK_TREE(&t);
    }
    /* the two heaps swapped: each entry is in the wrong heap */
    assert_int_equal(t.gpu_lru.n, 1);  /* [dddd]; [aaaa] is pinned */
    assert_int_equal(t.host_lru.n, 1); /* [cccc]; [bbbb] is pinned */
    radix_heap g = t.gpu_lru;
    t.gpu_lru = t.host_lru;
    t.host_lru = g;
    assert_int_equal(radix_check(&t), -1);
    assert_non_null(strstr(cd_errmsg(), "heap"));
    t.host_lru = t.gpu_lru;
    t.gpu_lru = g;
    t.host_lru.n = 0;
    assert_int_equal(radix_check(&t), -1);
    assert_non_null(strstr(cd_errmsg(), "host heap"));
    t.host_lru.n = 1;
    CHECK_TREE(&t);
    radix_release(&t, &m);
    /* a demote callback handing out one slot twice */
    evict_ops dup = {.demote = dup_demote};
    assert_int_equal(evict_tiered(&t, 1, &dup), 1); /* [dddd] -> 77 */
    CHECK_TREE(&t);
    assert_int_equal(evict_tiered(&t, 1, &dup), 1); /* [aaaa] -> 77 again */
    assert_int_equal(radix_check(&t), -1);
    assert_non_null(strstr(cd_errmsg(), "host slot 77"));
    radix_free(&t);
}

/* ---- the naive model ---------------------------------------------------------------------- */

/* Per namespace, every cached whole-page prefix (k * page_tokens tokens) with the id holding
 * its last page and the tier it is on. GPU pages and host slots are drawn from one counter, so
 * an id names one entry; when an entry moves (demote: page -> slot, restore: slot -> page)
 * fwd[old] = new, so handles can follow the ids they pinned. */

#define M_NS 3
#define M_MAX_PAGES 24 /* whole pages of a generated sequence, at most */
#define M_MAX_TOK 111  /* tokens of a generated sequence, at most */
#define M_STEMS 8
#define M_ALPHA 3
#define M_HANDLES 8
#define M_NONE UINT32_MAX

typedef struct m_entry {
    uint32_t ns, n_pages, id;
    bool host;
    int32_t tokens[M_MAX_TOK];
} m_entry;

typedef struct m_handle {
    radix_match r;
    uint32_t ids[M_MAX_PAGES + 1]; /* the ids pinned at match time (r.pages changes on restore) */
    uint32_t n;
} m_handle;

typedef struct model {
    radix_tree t;
    uint32_t pt, max_pages, budget; /* budget: GPU pages the tree may hold before an insert evicts */
    uint32_t host_budget;           /* host slots demote may hand out; 0: one tier (radix_evict) */
    rng r;
    uint8_t ns[M_NS][RADIX_NS_BYTES];
    int32_t stems[M_STEMS][M_MAX_TOK];
    m_entry *e;
    uint32_t n_e, cap_e, n_host;
    int32_t *entry_of; /* id -> entry, -1 */
    uint32_t *pins;    /* id -> live handles holding it */
    uint32_t *fwd;     /* id -> the id that replaced it, M_NONE */
    uint32_t n_ids, cap_ids;
    m_handle h[M_HANDLES];
    uint32_t n_h;
    /* what the callbacks saw */
    uint64_t victim_pages, last_victim, freed_slots, last_freed;
    uint32_t saved[M_MAX_PAGES], n_saved; /* pages demote just saved, awaiting their victim report */
    bool no_demote;                       /* demote refuses everything (model_finish) */
    bool restoring;                       /* host_free reports a restore's slots */
    uint32_t expect_free[M_MAX_PAGES + 1], n_expect_free, n_restore_freed;
    bool oom;
    uint64_t n_failed, n_restore_calls, n_stale_restores;
} model;

static void model_init(model *m, uint32_t pt, uint64_t seed, bool tiers) {
    memset(m, 0, sizeof *m);
    assert_int_equal(radix_init(&m->t, pt), 0);
    m->pt = pt;
    m->max_pages = 96 / pt < M_MAX_PAGES ? 96 / pt : M_MAX_PAGES; /* 24 pages at pt <= 4, 6 at pt 16 */
    m->budget = 16 * m->max_pages;
    m->host_budget = tiers ? 8 * m->max_pages : 0;
    rng_seed(&m->r, seed);
    for (int i = 0; i < M_NS; i++) m->ns[i][i * 7] = (uint8_t)(i + 1);
    uint32_t len = m->max_pages * pt + pt - 1;
    for (int s = 0; s < M_STEMS; s++) { /* each stem shares a random prefix with an earlier one */
        uint32_t cut = s ? rng_below(&m->r, len + 1) : 0;
        if (s) memcpy(m->stems[s], m->stems[rng_below(&m->r, (uint32_t)s)], cut * sizeof(int32_t));
        for (uint32_t i = cut; i < len; i++) m->stems[s][i] = (int32_t)rng_below(&m->r, M_ALPHA);
    }
}

static void model_free(model *m) {
    for (uint32_t i = 0; i < m->n_h; i++) radix_release(&m->t, &m->h[i].r);
    radix_free(&m->t);
    free(m->e);
    free(m->entry_of);
    free(m->pins);
    free(m->fwd);
}

static uint32_t model_new_id(model *m) {
    if (m->n_ids == m->cap_ids) {
        m->cap_ids = m->cap_ids ? 2 * m->cap_ids : 4096;
        m->entry_of = realloc(m->entry_of, m->cap_ids * sizeof *m->entry_of);
        m->pins = realloc(m->pins, m->cap_ids * sizeof *m->pins);
        m->fwd = realloc(m->fwd, m->cap_ids * sizeof *m->fwd);
        assert_true(m->entry_of && m->pins && m->fwd);
    }
    m->entry_of[m->n_ids] = -1;
    m->pins[m->n_ids] = 0;
    m->fwd[m->n_ids] = M_NONE;
    return m->n_ids++;
}

static uint32_t model_resolve(const model *m, uint32_t id) {
    while (m->fwd[id] != M_NONE) id = m->fwd[id];
    return id;
}

static m_entry *model_entry_of(model *m, uint32_t id) {
    if (id >= m->n_ids || m->entry_of[id] < 0) fail_msg("id %u is not cached in the model", id);
    return &m->e[m->entry_of[id]];
}

/* the entry for the k-page prefix of ids in namespace ns, or -1 */
static int model_find(const model *m, uint32_t ns, const int32_t *ids, uint32_t k) {
    for (uint32_t i = 0; i < m->n_e; i++) {
        const m_entry *e = &m->e[i];
        if (e->ns == ns && e->n_pages == k && memcmp(e->tokens, ids, (size_t)k * m->pt * sizeof *ids) == 0)
            return (int)i;
    }
    return -1;
}

/* how many leading whole pages of ids are cached (on either tier) */
static uint32_t model_cached(const model *m, uint32_t ns, const int32_t *ids, uint32_t np) {
    uint32_t k = 0;
    while (k < np && model_find(m, ns, ids, k + 1) >= 0) k++;
    return k;
}

/* longest prefix of whole pages, then the best partial extension among cached pages that
 * extend it */
static uint32_t model_match_tokens(const model *m, uint32_t ns, const int32_t *ids, uint32_t n) {
    uint32_t pt = m->pt, k = model_cached(m, ns, ids, n / pt), base = k * pt, best = 0;
    if (base == n) return n;
    uint32_t left = n - base < pt ? n - base : pt;
    for (uint32_t i = 0; i < m->n_e; i++) {
        const m_entry *e = &m->e[i];
        if (e->ns != ns || e->n_pages != k + 1 || memcmp(e->tokens, ids, base * sizeof *ids)) continue;
        uint32_t l = 0;
        while (l < left && e->tokens[base + l] == ids[base + l]) l++;
        if (l > best) best = l;
    }
    if (best >= pt) fail_msg("model: a whole page extends a prefix it did not count");
    return base + best;
}

static void model_add(model *m, uint32_t ns, const int32_t *ids, uint32_t k, uint32_t id) {
    if (m->n_e == m->cap_e) {
        m->cap_e = m->cap_e ? 2 * m->cap_e : 64;
        m->e = realloc(m->e, m->cap_e * sizeof *m->e);
        assert_non_null(m->e);
    }
    m_entry *e = &m->e[m->n_e];
    e->ns = ns;
    e->n_pages = k;
    e->id = id;
    e->host = false;
    memcpy(e->tokens, ids, (size_t)k * m->pt * sizeof *ids);
    m->entry_of[id] = (int32_t)m->n_e++;
}

static void model_remove(model *m, uint32_t id) {
    int32_t i = m->entry_of[id];
    m->n_host -= m->e[i].host;
    m->entry_of[id] = -1;
    m->e[i] = m->e[--m->n_e];
    if ((uint32_t)i < m->n_e) m->entry_of[m->e[i].id] = i;
}

/* The entry held by `from` is now held by `to` on the other tier; pins follow. */
static void model_move(model *m, uint32_t from, uint32_t to, bool host) {
    m_entry *e = model_entry_of(m, from);
    if (e->host == host) fail_msg("model: id %u moves to the tier it is on", from);
    m->entry_of[to] = m->entry_of[from];
    m->entry_of[from] = -1;
    e->id = to;
    e->host = host;
    m->n_host += host ? 1 : (uint32_t)-1;
    m->fwd[from] = to;
    m->pins[to] = m->pins[from];
    m->pins[from] = 0;
}

/* entries extending e by one page (GPU-resident ones only, or all) */
static uint32_t model_extensions(const model *m, const m_entry *e, bool gpu_only) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->n_e; i++) {
        const m_entry *f = &m->e[i];
        n += f->ns == e->ns && f->n_pages == e->n_pages + 1 && (!gpu_only || !f->host) &&
            memcmp(f->tokens, e->tokens, (size_t)e->n_pages * m->pt * sizeof(int32_t)) == 0;
    }
    return n;
}

/* ids are one node's pages as a callback reports them: consecutive cached prefixes of one
 * sequence, all on the tier `host` says, none held by a live handle, with no branch inside the
 * node (one extension each but the last); the last has no extension on the GPU (gpu_only) or
 * none at all (a leaf on its tier). */
static void model_node(model *m, const uint32_t *ids, uint32_t n, bool host, bool gpu_only, const char *what) {
    if (n == 0) fail_msg("%s: no ids", what);
    for (uint32_t i = 0; i < n; i++) {
        m_entry *e = model_entry_of(m, ids[i]);
        if (e->host != host) fail_msg("%s: id %u is on the %s", what, ids[i], e->host ? "host" : "GPU");
        if (m->pins[ids[i]]) fail_msg("%s: id %u while a handle holds it", what, ids[i]);
        if (i == 0) continue;
        m_entry *prev = model_entry_of(m, ids[i - 1]);
        if (e->ns != prev->ns || e->n_pages != prev->n_pages + 1 ||
            memcmp(e->tokens, prev->tokens, (size_t)prev->n_pages * m->pt * sizeof(int32_t)))
            fail_msg("%s: ids %u, %u are not consecutive pages of one sequence", what, ids[i - 1], ids[i]);
    }
    for (uint32_t i = 0; i < n; i++) {
        bool last = i + 1 == n;
        uint32_t ext = model_extensions(m, model_entry_of(m, ids[i]), last && gpu_only);
        if (ext != (last ? 0u : 1u)) fail_msg("%s: id %u of %u has %u cached extensions", what, i, n, ext);
    }
}

/* Rule 3: asked about a GPU-evictable node; saves it (fresh slots) while the host budget lasts,
 * four times out of five. */
static int model_demote(void *ctx, const uint32_t *pages, uint32_t n, uint32_t *slots) {
    model *m = ctx;
    model_node(m, pages, n, false, true, "demote");
    m->n_saved = 0;
    if (m->no_demote || m->n_host + n > m->host_budget || rng_below(&m->r, 5) == 0) return 0;
    for (uint32_t i = 0; i < n; i++) {
        slots[i] = model_new_id(m);
        model_move(m, pages[i], slots[i], true);
    }
    memcpy(m->saved, pages, n * sizeof *pages);
    m->n_saved = n;
    return 1;
}

/* A GPU victim: just saved (its entries are on the host now), or dropped (a leaf by now: its
 * host subtree was reported first). */
static void model_victim(void *ctx, const uint32_t *pages, uint32_t n) {
    model *m = ctx;
    if (m->n_saved == n && memcmp(m->saved, pages, n * sizeof *pages) == 0) {
        for (uint32_t i = 0; i < n; i++)
            if (!model_entry_of(m, model_resolve(m, pages[i]))->host) fail_msg("a saved page is not on the host");
        m->n_saved = 0;
    } else {
        if (m->n_saved) fail_msg("a demoted node was not reported as a victim next");
        model_node(m, pages, n, false, false, "dropped victim");
        for (uint32_t i = 0; i < n; i++) model_remove(m, pages[i]);
    }
    m->victim_pages += n;
    m->last_victim = n;
}

/* Host slots given back: a restore's (checked against what it should free), or a host leaf's
 * (radix_evict_host, or below a dropped victim, children first). */
static void model_host_free(void *ctx, const uint32_t *slots, uint32_t n) {
    model *m = ctx;
    if (m->restoring) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k = 0;
            while (k < m->n_expect_free && m->expect_free[k] != slots[i]) k++;
            if (k == m->n_expect_free) fail_msg("restore freed slot %u, not one it restored", slots[i]);
            m->expect_free[k] = M_NONE;
        }
        m->n_restore_freed += n;
        return;
    }
    model_node(m, slots, n, true, false, "host_free");
    for (uint32_t i = 0; i < n; i++) model_remove(m, slots[i]);
    m->freed_slots += n;
    m->last_freed = n;
}

static void model_check(model *m) {
    CHECK_TREE(&m->t);
    if (m->t.stats.pages != m->n_e - m->n_host || m->t.stats.host_slots != m->n_host)
        fail_msg("tree holds %llu pages and %llu slots, model %u and %u", (unsigned long long)m->t.stats.pages,
                 (unsigned long long)m->t.stats.host_slots, m->n_e - m->n_host, m->n_host);
    uint32_t held[2] = {0};
    for (uint32_t i = 0; i < m->n_e; i++) held[m->e[i].host] += m->pins[m->e[i].id] > 0;
    assert_true(m->t.stats.pinned_pages >= held[0]); /* the tree pins whole nodes */
    assert_true(m->t.stats.pinned_host_slots >= held[1]);
}

/* A failed operation changed nothing: the tree struct (tables, counts, stats, clock) is as it
 * was except for the allocation counter. Node contents are compared by model_verify. */
static void expect_unchanged(model *m, const radix_tree *before) {
    radix_tree b;
    memcpy(&b, before, sizeof b);
    b.n_allocs = m->t.n_allocs;
    if (memcmp(&b, &m->t, sizeof b)) fail_msg("a failed operation changed the tree");
    m->n_failed++;
}

static void model_match_check(model *m, uint32_t ns, const int32_t *ids, uint32_t n, const radix_match *r) {
    uint32_t want = model_match_tokens(m, ns, ids, n), pt = m->pt;
    if (r->n_tokens != want)
        fail_msg("match of %u tokens (pt %u): %u matched, model says %u", n, pt, r->n_tokens, want);
    assert_int_equal(r->n_pages, ceil_div(want, pt));
    assert_true((r->node != NULL) == (want > 0));
    assert_true((r->pages != NULL) == (want > 0));
    for (uint32_t i = 0; i < r->n_pages; i++) {
        m_entry *e = model_entry_of(m, r->pages[i]);
        uint32_t upto = (i + 1) * pt < want ? (i + 1) * pt : want;
        if (e->ns != ns || e->n_pages != i + 1 || memcmp(e->tokens, ids, upto * sizeof *ids))
            fail_msg("match page %u (id %u) does not hold tokens %u.. of the query", i, r->pages[i], i * pt);
        if (e->host != (i >= r->n_gpu_pages))
            fail_msg("match page %u of %u (id %u) is on the %s, n_gpu_pages %u", i, r->n_pages, r->pages[i],
                     e->host ? "host" : "GPU", r->n_gpu_pages);
    }
    if (r->n_restore == 0) {
        assert_int_equal(r->n_gpu_pages, r->n_pages);
        return;
    }
    /* Rule 5: the deepest node's pages past the match follow, on the host, one sequence */
    assert_true(r->n_gpu_pages < r->n_pages);
    for (uint32_t i = r->n_pages; i < r->n_gpu_pages + r->n_restore; i++) {
        m_entry *e = model_entry_of(m, r->pages[i]), *prev = model_entry_of(m, r->pages[i - 1]);
        if (!e->host || e->ns != ns || e->n_pages != i + 1 ||
            memcmp(e->tokens, prev->tokens, (size_t)i * pt * sizeof(int32_t)))
            fail_msg("match: restore slot %u (id %u) does not continue the path on the host", i, r->pages[i]);
    }
}

/* Rule 6 on a live handle, maybe one made stale by another handle's restore: the tree takes
 * the suffix of the slots still on the host. */
static void model_restore(model *m, m_handle *hd) {
    radix_match *r = &hd->r;
    if (!r->n_restore) return;
    uint32_t n_gpu = r->n_gpu_pages, nr = r->n_restore, old[M_MAX_PAGES + 1], g[M_MAX_PAGES + 1], still = 0;
    memcpy(old, r->pages + n_gpu, nr * sizeof *old);
    for (uint32_t i = 0; i < nr; i++) g[i] = model_new_id(m);
    while (still < nr && m->fwd[old[nr - 1 - still]] == M_NONE) still++;
    for (uint32_t i = 0; i < nr; i++) {
        bool host = model_entry_of(m, model_resolve(m, old[i]))->host;
        if (host != (i >= nr - still)) fail_msg("model: a restore slot on the %s out of order", host ? "host" : "GPU");
    }
    radix_stats b = m->t.stats;
    uint64_t clock = m->t.clock;
    m->restoring = true;
    m->n_expect_free = still;
    memcpy(m->expect_free, old + nr - still, still * sizeof *old);
    m->n_restore_freed = 0;
    int taken = radix_restore(&m->t, r, g, model_host_free, m);
    m->restoring = false;
    m->n_restore_calls++;
    if (taken != (int)still) fail_msg("restore took %d pages, the model expects %u (%s)", taken, still, cd_errmsg());
    assert_int_equal(m->n_restore_freed, still);
    for (uint32_t i = nr - still; i < nr; i++) model_move(m, old[i], g[i], false);
    assert_int_equal(r->n_gpu_pages, r->n_pages);
    assert_int_equal(r->n_restore, 0);
    for (uint32_t i = n_gpu; i < r->n_pages; i++)
        if (r->pages[i] != model_resolve(m, old[i - n_gpu])) fail_msg("restore: match page %u is not its page", i);
    for (uint32_t i = 0; i < r->n_pages; i++)
        if (model_entry_of(m, r->pages[i])->host) fail_msg("restore: match page %u is still on the host", i);
    assert_int_equal(m->t.stats.restored_pages, b.restored_pages + still);
    assert_int_equal(m->t.stats.pages, b.pages + still);
    assert_int_equal(m->t.clock, clock); /* a restore is no use: the match was */
    m->n_stale_restores += still < nr;
}

static void model_unpin(model *m, m_handle *hd) {
    for (uint32_t k = 0; k < hd->n; k++) m->pins[model_resolve(m, hd->ids[k])]--;
    radix_release(&m->t, &hd->r);
}

static int model_match(model *m, uint32_t ns, const int32_t *ids, uint32_t n, bool keep) {
    radix_tree before;
    memcpy(&before, &m->t, sizeof before);
    m_handle hd;
    if (radix_match_prefix(&m->t, m->ns[ns], ids, n, &hd.r)) {
        if (!m->oom) fail_msg("match: %s", cd_errmsg());
        assert_null(hd.r.node);
        assert_null(hd.r.pages);
        expect_unchanged(m, &before);
        return -1;
    }
    model_match_check(m, ns, ids, n, &hd.r);
    radix_stats s = m->t.stats, b = before.stats;
    assert_int_equal(m->t.clock, before.clock + 1);
    assert_int_equal(s.lookups, b.lookups + 1);
    assert_int_equal(s.hit_tokens, b.hit_tokens + hd.r.n_tokens);
    assert_int_equal(s.misses, b.misses + (hd.r.n_tokens == 0));
    assert_int_equal(s.full_hits, b.full_hits + (hd.r.n_tokens > 0 && hd.r.n_tokens == n));
    assert_int_equal(s.partial_hits, b.partial_hits + (hd.r.n_tokens > 0 && hd.r.n_tokens < n));
    hd.n = hd.r.n_pages;
    if (hd.n) memcpy(hd.ids, hd.r.pages, hd.n * sizeof *hd.ids);
    for (uint32_t i = 0; i < hd.n; i++) m->pins[hd.ids[i]]++;
    if (hd.r.n_restore && rng_below(&m->r, 2)) model_restore(m, &hd);
    if (keep && m->n_h < M_HANDLES && hd.r.node) m->h[m->n_h++] = hd;
    else model_unpin(m, &hd);
    return 0;
}

static void model_release(model *m, uint32_t i) {
    model_unpin(m, &m->h[i]);
    m->h[i] = m->h[--m->n_h];
}

/* Rule 3 (radix_evict with one tier) */
static void model_evict(model *m, uint64_t want) {
    radix_stats b = m->t.stats;
    m->victim_pages = m->last_victim = 0;
    m->n_saved = 0;
    evict_ops ops = {.victim = model_victim, .demote = model_demote, .host_free = model_host_free, .ctx = m};
    uint64_t got = m->host_budget ? evict_tiered(&m->t, want, &ops) : evict(&m->t, want, model_victim, m);
    if (m->n_saved) fail_msg("a demoted node was never reported as a victim");
    assert_int_equal(got, m->victim_pages);
    assert_int_equal(m->t.stats.pages, b.pages - got);
    assert_int_equal(m->t.stats.evicted_pages, b.evicted_pages + got);
    assert_int_equal(m->t.stats.host_slots,
                     b.host_slots + (m->t.stats.demoted_pages - b.demoted_pages) -
                         (m->t.stats.host_evicted_slots - b.host_evicted_slots));
    if (got < want) {
        assert_int_equal(radix_evictable_pages(&m->t), 0);
        assert_int_equal(m->t.gpu_lru.n, 0);
    } else if (got) {
        assert_true(got - m->last_victim < want); /* stopped at the first victim that reached it */
    }
}

/* Rule 4 */
static void model_evict_host(model *m, uint64_t want) {
    uint64_t before = m->t.stats.host_slots;
    m->freed_slots = m->last_freed = 0;
    uint64_t got = radix_evict_host(&m->t, want, model_host_free, m);
    assert_int_equal(got, m->freed_slots);
    assert_int_equal(m->t.stats.host_slots, before - got);
    if (got < want) {
        assert_int_equal(radix_evictable_host_slots(&m->t), 0);
        assert_int_equal(m->t.host_lru.n, 0);
    } else if (got) {
        assert_true(got - m->last_freed < want);
    }
}

/* Rule 7: the tree takes the pages past the cached prefix, unless the node they would hang
 * from (the one holding the prefix's last page) is on the host. */
static int model_insert(model *m, uint32_t ns, const int32_t *ids, uint32_t n) {
    uint32_t pt = m->pt, np = n / pt, pages[M_MAX_PAGES + 1];
    for (uint32_t i = 0; i < np; i++) pages[i] = model_new_id(m);
    uint32_t k = model_cached(m, ns, ids, np), first_new = UINT32_MAX;
    bool blocked = k < np && k > 0 && m->e[model_find(m, ns, ids, k)].host;
    uint32_t want = blocked ? np : k;
    radix_tree before;
    memcpy(&before, &m->t, sizeof before);
    if (radix_insert(&m->t, m->ns[ns], ids, n, pages, &first_new)) {
        if (!m->oom) fail_msg("insert: %s", cd_errmsg());
        assert_int_equal(first_new, UINT32_MAX);
        expect_unchanged(m, &before);
        return -1;
    }
    if (first_new != want)
        fail_msg("insert of %u pages: first_new %u, model says %u (%s)", np, first_new, want, blocked ? "blocked" : "");
    for (uint32_t i = want; i < np; i++) model_add(m, ns, ids, i + 1, pages[i]);
    assert_int_equal(m->t.stats.inserted_tokens, before.stats.inserted_tokens + (uint64_t)(np - want) * pt);
    assert_int_equal(m->t.stats.blocked_inserts, before.stats.blocked_inserts + blocked);
    assert_int_equal(m->t.clock, before.clock + 1);
    return 0;
}

/* Every cached prefix matches in full, with its id last (with injection paused); the cached
 * prefixes are prefix-closed, and so is GPU residency (Rule 1). */
static void model_verify(model *m) {
    uint32_t fail_every = m->t.fail_every;
    m->t.fail_every = 0;
    for (uint32_t i = 0; i < m->n_e; i++) {
        m_entry *e = &m->e[i];
        if (e->n_pages > 1) {
            int p = model_find(m, e->ns, e->tokens, e->n_pages - 1);
            if (p < 0) fail_msg("model: a cached prefix without its parent");
            if (!e->host && m->e[p].host) fail_msg("model: a GPU page after a host page");
        }
        radix_match r;
        assert_int_equal(radix_match_prefix(&m->t, m->ns[e->ns], e->tokens, e->n_pages * m->pt, &r), 0);
        model_match_check(m, e->ns, e->tokens, e->n_pages * m->pt, &r);
        assert_int_equal(r.n_tokens, e->n_pages * m->pt);
        assert_int_equal(r.pages[e->n_pages - 1], e->id);
        radix_release(&m->t, &r);
    }
    m->t.fail_every = fail_every;
    model_check(m);
}

/* A query or insert: a stem's prefix with a few tokens changed (mid-page divergences). */
static uint32_t model_gen(model *m, int32_t *out) {
    uint32_t len = rng_below(&m->r, m->max_pages * m->pt + m->pt);
    memcpy(out, m->stems[rng_below(&m->r, M_STEMS)], len * sizeof *out);
    for (uint32_t k = rng_below(&m->r, 3); k && len; k--)
        out[rng_below(&m->r, len)] = (int32_t)rng_below(&m->r, M_ALPHA);
    return len;
}

/* One random operation; returns -1 when it failed (only under injection). */
static int model_step(model *m) {
    int32_t ids[M_MAX_TOK];
    uint32_t ns = rng_below(&m->r, M_NS), u = rng_below(&m->r, 100);
    int rc = 0;
    if (u < 38) {
        uint32_t n = model_gen(m, ids);
        rc = model_match(m, ns, ids, n, rng_below(&m->r, 3) == 0);
    } else if (u < 70) {
        uint32_t n = model_gen(m, ids);
        rc = model_insert(m, ns, ids, n);
        if (!rc && m->t.stats.pages > m->budget) {
            model_check(m);
            if (m->host_budget && rng_below(&m->r, 2)) model_evict_host(m, 1 + rng_below(&m->r, 2 * m->max_pages));
            model_evict(m, m->t.stats.pages - m->budget);
        }
    } else if (u < 81) {
        if (m->n_h) model_release(m, rng_below(&m->r, m->n_h));
    } else if (u < 86) {
        if (m->n_h) model_restore(m, &m->h[rng_below(&m->r, m->n_h)]);
    } else if (u < 95) {
        model_evict(m, rng_below(&m->r, 64) == 0 ? UINT64_MAX : 1 + rng_below(&m->r, 8));
    } else {
        model_evict_host(m, rng_below(&m->r, 64) == 0 ? UINT64_MAX : 1 + rng_below(&m->r, 8));
    }
    model_check(m);
    return rc;
}

static void model_finish(model *m) {
    model_verify(m);
    while (m->n_h) model_release(m, m->n_h - 1);
    model_check(m);
    m->no_demote = true;
    model_evict(m, UINT64_MAX);
    model_check(m);
    model_evict_host(m, UINT64_MAX);
    model_check(m);
    assert_int_equal(m->n_e, 0);
    assert_int_equal(m->t.stats.nodes, 0);
    assert_int_equal(m->t.n_roots, 0);
    model_free(m);
}

/* ---- tails: a finished sequence's partly filled last page (radix.h, Tails) ----------------- */

static uint32_t insert_tail_str(radix_tree *t, const char *s, const uint32_t *pages, victim_log *dropped) {
    int32_t ids[256];
    uint32_t n = str_ids(s, ids), first_new = UINT32_MAX;
    if (radix_insert_tail(t, NS_A, ids, n, pages, &first_new, dropped ? log_victim : NULL, dropped))
        fail_msg("insert_tail %s: %s", s, cd_errmsg());
    CHECK_TREE(t);
    return first_new;
}

/* The worked example of radix.h and the cases around it, page_tokens 4. */
static void test_tails(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    victim_log d = {.t = &t};
    /* a tail: 6 tokens in pages 10 (whole) and 11 (2 tokens) */
    assert_int_equal(insert_tail_str(&t, "abcdef", (uint32_t[]){10, 11}, &d), 0);
    assert_int_equal(t.stats.pages, 2);
    assert_int_equal(t.stats.inserted_tokens, 6);
    expect_str(&t, NS_A, "abcdefXY", 6, (uint32_t[]){10, 11});
    expect_str(&t, NS_A, "abcdeZ", 5, (uint32_t[]){10, 11});
    expect_str(&t, NS_A, "abcdefgh", 6, (uint32_t[]){10, 11});
    expect_str(&t, NS_A, "abcdef", 6, (uint32_t[]){10, 11});
    /* the same or fewer tokens: nothing new, the caller keeps its pages */
    assert_int_equal(insert_tail_str(&t, "abcdef", (uint32_t[]){20, 21}, &d), 2);
    assert_int_equal(insert_tail_str(&t, "abcde", (uint32_t[]){20, 21}, &d), 2);
    assert_int_equal(insert_tail_str(&t, "abcd", (uint32_t[]){20}, &d), 1);
    assert_int_equal(d.n_pages, 0);
    /* a longer tail through it: the tail node is cut before its last page, the new tail hangs
     * beside the old one, which is given back */
    assert_int_equal(insert_tail_str(&t, "abcdefg", (uint32_t[]){10, 31}, &d), 1);
    assert_int_equal(d.n_pages, 1);
    assert_int_equal(d.pages[0], 11);
    assert_int_equal(t.stats.dropped_tails, 1);
    assert_int_equal(t.stats.nodes, 2); /* [abcd|10] - [efg|31] */
    assert_int_equal(t.stats.pages, 2);
    expect_str(&t, NS_A, "abcdefgX", 7, (uint32_t[]){10, 31});
    /* whole pages through a tail without a dropped callback: the tail stays beside them */
    assert_int_equal(insert_str(&t, NS_A, "abcdefgh", (uint32_t[]){10, 41}), 1);
    assert_int_equal(t.stats.nodes, 3);
    expect_str(&t, NS_A, "abcdefghX", 8, (uint32_t[]){10, 41});
    { /* "abcdefgX" matches 3 tokens of both [efg] and [efgh]: either page will do */
        radix_match m = pin_str(&t, NS_A, "abcdefgX", 7);
        assert_true(m.pages[1] == 31 || m.pages[1] == 41);
        radix_release(&t, &m);
    }
    /* the next tail insert walks past the chain and gives the stale [efg] back */
    assert_int_equal(insert_tail_str(&t, "abcdefghij", (uint32_t[]){10, 41, 51}, &d), 2);
    assert_int_equal(d.n_pages, 2);
    assert_int_equal(d.pages[1], 31);
    assert_int_equal(t.stats.nodes, 3); /* [abcd] - [efgh] - [ij|51] */
    /* a pinned tail is not given back; once unpinned it is an ordinary LRU leaf */
    radix_match pin = pin_str(&t, NS_A, "abcdefghiZ", 9);
    assert_int_equal(insert_tail_str(&t, "abcdefghijkl", (uint32_t[]){10, 41, 61}, &d), 2);
    assert_int_equal(d.n_pages, 2);
    assert_int_equal(t.stats.nodes, 4); /* [efgh] - [ij|51] (pinned), [ijkl|61] */
    expect_str(&t, NS_A, "abcdefghijkl", 12, (uint32_t[]){10, 41, 61});
    radix_release(&t, &pin);
    CHECK_TREE(&t);
    /* a match that ends before a tail node's last page cuts it there (Rule 5); the lower part
     * keeps the tail */
    assert_int_equal(insert_tail_str(&t, "wxyzWXYZab", (uint32_t[]){70, 71, 72}, &d), 0);
    expect_str(&t, NS_A, "wxyzQ", 4, (uint32_t[]){70});
    assert_int_equal(t.stats.match_splits, 1);
    expect_str(&t, NS_A, "wxyzWXYZabc", 10, (uint32_t[]){70, 71, 72});
    /* a tail-only namespace root */
    int32_t ids[4];
    uint32_t first_new = 9;
    assert_int_equal(radix_insert_tail(&t, NS_B, ids, 0, NULL, &first_new, log_victim, &d), 0);
    assert_int_equal(first_new, 0);
    assert_int_equal(radix_insert_tail(&t, NS_B, (int32_t[]){5, 6}, 2, (uint32_t[]){80}, &first_new, log_victim, &d),
                     0);
    assert_int_equal(first_new, 0);
    CHECK_TREE(&t);
    int32_t q[3] = {5, 6, 7};
    expect_ids(&t, NS_B, q, 3, 2, (uint32_t[]){80});
    expect_ids(&t, NS_A, q, 3, 0, NULL);
    /* every page comes back exactly once: 10 41 61 51 70 71 72 80 */
    victim_log v = {.t = &t};
    assert_int_equal(evict(&t, UINT64_MAX, log_victim, &v), 8);
    assert_int_equal(t.stats.nodes, 0);
    radix_free(&t);
}

/* Tails on the host tier: demoted whole, matched, restored, evicted from the host. */
static void test_tails_host(void **state) {
    (void)state;
    radix_tree t;
    assert_int_equal(radix_init(&t, 4), 0);
    victim_log d = {.t = &t};
    assert_int_equal(insert_tail_str(&t, "abcdefghij", (uint32_t[]){10, 11, 12}, &d), 0);
    tier_log l;
    tl_reset(&l, &t, 500, 100);
    evict_ops ops = tl_ops(&l);
    assert_int_equal(evict_tiered(&t, 1, &ops), 3);
    CHECK_TREE(&t);
    assert_int_equal(t.stats.host_slots, 3);
    radix_match m = pin_str(&t, NS_A, "abcdefghiQ", 9);
    assert_int_equal(m.n_restore, 3);
    assert_int_equal(m.n_gpu_pages, 0);
    assert_int_equal(radix_restore(&t, &m, (uint32_t[]){20, 21, 22}, tl_host_free, &l), 3);
    CHECK_TREE(&t);
    for (uint32_t i = 0; i < 3; i++) assert_int_equal(m.pages[i], 20 + i);
    radix_release(&t, &m);
    /* a longer tail cannot hang below a host node (Rule 7), and a host tail is not dropped */
    tl_reset(&l, &t, 600, 100);
    ops = tl_ops(&l);
    assert_int_equal(evict_tiered(&t, 1, &ops), 3);
    assert_int_equal(insert_tail_str(&t, "abcdefghijk", (uint32_t[]){30, 31, 32}, &d), 3);
    assert_int_equal(t.stats.blocked_inserts, 1);
    assert_int_equal(d.n_pages, 0);
    assert_int_equal(radix_evict_host(&t, UINT64_MAX, tl_host_free, &l), 3);
    assert_int_equal(t.stats.nodes, 0);
    CHECK_TREE(&t);
    radix_free(&t);
}

/* A tail insert that cuts a node and drops a tail fails cleanly at each allocation. */
static void test_tails_oom(void **state) {
    (void)state;
    for (uint32_t every = 1; every <= 4; every++) {
        radix_tree t;
        assert_int_equal(radix_init(&t, 4), 0);
        victim_log d = {.t = &t};
        assert_int_equal(insert_tail_str(&t, "abcdef", (uint32_t[]){10, 11}, &d), 0);
        int32_t ids[8];
        uint32_t n = str_ids("abcdefg", ids), first_new = 77;
        t.fail_every = every;
        t.n_allocs = 0;
        int rc = radix_insert_tail(&t, NS_A, ids, n, (uint32_t[]){10, 31}, &first_new, log_victim, &d);
        t.fail_every = 0;
        CHECK_TREE(&t);
        if (rc) { /* nothing changed */
            assert_int_equal(first_new, 77);
            assert_int_equal(d.n_pages, 0);
            assert_int_equal(t.stats.nodes, 1);
            expect_str(&t, NS_A, "abcdefg", 6, (uint32_t[]){10, 11});
        } else {
            assert_int_equal(first_new, 1);
            assert_int_equal(d.n_pages, 1);
            expect_str(&t, NS_A, "abcdefg", 7, (uint32_t[]){10, 31});
        }
        radix_free(&t);
    }
}

/* Tail inserts against a naive model: every inserted sequence is remembered whole (tail
 * inserts) or cut to whole pages; with nothing evicted, a match is the longest common prefix
 * with any of them, and every page it returns holds the query's tokens (its writer's prefix
 * equals the query's up to that page's matched end). Pages given back are ones the tree took,
 * never pinned, each once; at the end eviction returns every page still held. Random pins
 * and evictions in between. */
#define TR_SEQ 256 /* more than the inserts of a run: the model forgets nothing */
#define TR_MAX 80
typedef struct tr_page {
    int32_t prefix[TR_MAX]; /* the writer's tokens up to the end of this page */
    uint32_t len;           /* tokens of prefix that are valid */
    bool held;              /* the tree holds it */
} tr_page;

typedef struct tr_model {
    radix_tree t;
    rng r;
    tr_page *pg;
    uint32_t n_pg, cap;
    int32_t seqs[TR_SEQ][TR_MAX];
    uint32_t lens[TR_SEQ], n_seqs;
    bool evicted; /* something left: matches may be shorter than the model's */
    radix_match pins[4];
} tr_model;

static void tr_dropped(void *ctx, const uint32_t *ids, uint32_t n) {
    tr_model *m = ctx;
    for (uint32_t i = 0; i < n; i++) {
        assert_true(ids[i] < m->n_pg && m->pg[ids[i]].held);
        m->pg[ids[i]].held = false;
        for (int k = 0; k < 4; k++)
            for (uint32_t j = 0; m->pins[k].node && j < m->pins[k].n_pages; j++)
                assert_int_not_equal(m->pins[k].pages[j], ids[i]);
    }
}

static void tr_evicted(void *ctx, const uint32_t *ids, uint32_t n) {
    tr_model *m = ctx;
    m->evicted = true;
    for (uint32_t i = 0; i < n; i++) {
        assert_true(ids[i] < m->n_pg && m->pg[ids[i]].held);
        m->pg[ids[i]].held = false;
    }
}

static void tr_query(tr_model *m, const int32_t *q, uint32_t n) {
    uint32_t pt = m->t.page_tokens, want = 0;
    for (uint32_t s = 0; s < m->n_seqs; s++) {
        uint32_t l = 0;
        while (l < n && l < m->lens[s] && m->seqs[s][l] == q[l]) l++;
        if (l > want) want = l;
    }
    radix_match r;
    assert_int_equal(radix_match_prefix(&m->t, NS_A, q, n, &r), 0);
    CHECK_TREE(&m->t);
    if (m->evicted) assert_true(r.n_tokens <= want);
    else assert_int_equal(r.n_tokens, want);
    for (uint32_t i = 0; i < r.n_pages; i++) { /* each page holds the query's tokens */
        uint32_t end = (i + 1) * pt < r.n_tokens ? (i + 1) * pt : r.n_tokens;
        const tr_page *p = &m->pg[r.pages[i]];
        assert_true(p->held && p->len >= end);
        assert_memory_equal(p->prefix, q, end * sizeof *q);
    }
    int k = (int)rng_below(&m->r, 8);
    if (k < 4) { /* keep the pin a while */
        radix_release(&m->t, &m->pins[k]);
        m->pins[k] = r;
    } else {
        radix_release(&m->t, &r);
    }
}

static void tr_insert(tr_model *m, const int32_t *q, uint32_t n, bool tail) {
    uint32_t pt = m->t.page_tokens, np = (n + pt - 1) / pt, first_new = UINT32_MAX;
    uint32_t ids[TR_MAX];
    for (uint32_t i = 0; i < np; i++) { /* fresh pages written by this sequence */
        if (m->n_pg == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 1024;
            m->pg = realloc(m->pg, m->cap * sizeof *m->pg);
            assert_non_null(m->pg);
        }
        tr_page *p = &m->pg[m->n_pg];
        p->len = (i + 1) * pt < n ? (i + 1) * pt : n;
        memcpy(p->prefix, q, p->len * sizeof *q);
        p->held = false;
        ids[i] = m->n_pg++;
    }
    uint32_t n_ins = tail ? n : n - n % pt;
    if (tail) assert_int_equal(radix_insert_tail(&m->t, NS_A, q, n, ids, &first_new, tr_dropped, m), 0);
    else assert_int_equal(radix_insert(&m->t, NS_A, q, n, ids, &first_new), 0);
    CHECK_TREE(&m->t);
    uint32_t taken_end = (n_ins + pt - 1) / pt;
    assert_true(first_new <= taken_end);
    for (uint32_t i = first_new; i < taken_end; i++) m->pg[ids[i]].held = true;
    assert_true(m->n_seqs < TR_SEQ);
    if (n_ins) {
        memcpy(m->seqs[m->n_seqs], q, n_ins * sizeof *q);
        m->lens[m->n_seqs++] = n_ins;
    }
}

static void test_tails_random(void **state) {
    (void)state;
    const uint32_t pts[] = {1, 2, 3, 4, 7};
    uint64_t dropped = 0, splits = 0;
    for (uint32_t c = 0; c < 5 * 6; c++) {
        tr_model m = {0};
        uint32_t pt = pts[c % 5];
        assert_int_equal(radix_init(&m.t, pt), 0);
        rng_seed(&m.r, 1000 + c);
        int32_t stem[TR_MAX];
        for (uint32_t i = 0; i < TR_MAX; i++) stem[i] = (int32_t)rng_below(&m.r, 3);
        for (int step = 0; step < 400; step++) {
            /* chat-like: a query is a previous sequence (or the stem) cut somewhere, then new tokens */
            int32_t q[TR_MAX];
            const int32_t *base = stem;
            uint32_t blen = TR_MAX;
            if (m.n_seqs && rng_below(&m.r, 4)) {
                uint32_t i = rng_below(&m.r, m.n_seqs);
                base = m.seqs[i];
                blen = m.lens[i];
            }
            uint32_t cut = rng_below(&m.r, 3) ? rng_below(&m.r, blen + 1) : blen; /* or the next turn */
            uint32_t n = cut + rng_below(&m.r, TR_MAX - cut + 1);
            memcpy(q, base, cut * sizeof *q);
            for (uint32_t i = cut; i < n; i++) q[i] = (int32_t)rng_below(&m.r, 3);
            uint32_t op = rng_below(&m.r, 10);
            if (op < 4) tr_query(&m, q, n);
            else if (op < 8) tr_insert(&m, q, n, true);
            else if (op < 9) tr_insert(&m, q, n, false);
            else if (rng_below(&m.r, 4) == 0) {
                evict(&m.t, 1 + rng_below(&m.r, 8), tr_evicted, &m);
                CHECK_TREE(&m.t);
            }
        }
        for (int k = 0; k < 4; k++) radix_release(&m.t, &m.pins[k]);
        dropped += m.t.stats.dropped_tails;
        splits += m.t.stats.match_splits;
        evict(&m.t, UINT64_MAX, tr_evicted, &m);
        assert_int_equal(m.t.stats.nodes, 0);
        for (uint32_t i = 0; i < m.n_pg; i++) assert_false(m.pg[i].held);
        radix_free(&m.t);
        free(m.pg);
    }

    assert_true(dropped > 100 && splits > 100); /* the cases under test did happen */
}

/* ---- out of memory ------------------------------------------------------------------------ */

static void test_out_of_memory(void **state) {
    (void)state;
    const uint32_t every[] = {2, 3, 4, 5, 7, 11, 31};
    for (size_t i = 0; i < sizeof every / sizeof every[0]; i++) {
        model m;
        model_init(&m, i % 2 ? 16 : 4, 100 + i, i != 3); /* one tier when every 5th allocation fails */
        m.oom = true;
        m.t.fail_every = every[i];
        for (int step = 0; step < 6000; step++) {
            if (model_step(&m)) model_verify(&m); /* the failed operation had no effect */
        }
        assert_true(m.n_failed > 0);
        m.t.fail_every = 0;
        model_finish(&m);
    }
}

/* ---- randomized operations against the model ---------------------------------------------- */

static void test_stress(void **state) {
    (void)state;
    /* A million operations by default, under ASan too: on a 2-core machine this test takes
     * about 9 s in a release build and 35 s under ASan+UBSan (-O1), the whole binary 37 s.
     * CINDER_RADIX_STRESS_OPS overrides the count. page_tokens 3 runs with one tier
     * (radix_evict, no demotion), the others with a host tier of half the GPU budget. */
    uint64_t ops = 1000000;
    const char *env = getenv("CINDER_RADIX_STRESS_OPS");
    if (env && *env) ops = strtoull(env, NULL, 10);
    const uint32_t pts[] = {1, 2, 3, 4, 16};
    const uint32_t n_pts = sizeof pts / sizeof pts[0];
    double t0 = cd_now_ms();
    uint64_t done = 0, max_nodes = 0, max_host = 0, restore_calls = 0, stale = 0;
    radix_stats sum = {0};
    for (uint32_t c = 0; c < n_pts; c++) {
        model m;
        model_init(&m, pts[c], 7 + c, pts[c] != 3);
        uint64_t share = ops / n_pts + (c < ops % n_pts);
        for (uint64_t s = 0; s < share; s++) {
            model_step(&m);
            if (m.t.stats.nodes > max_nodes) max_nodes = m.t.stats.nodes;
            if (m.t.stats.host_slots > max_host) max_host = m.t.stats.host_slots;
            if ((s & 8191) == 8191) model_verify(&m);
        }
        done += share;
        const radix_stats *st = &m.t.stats;
        sum.lookups += st->lookups;
        sum.full_hits += st->full_hits;
        sum.partial_hits += st->partial_hits;
        sum.evictions += st->evictions;
        sum.inserted_tokens += st->inserted_tokens;
        sum.demotions += st->demotions;
        sum.restores += st->restores;
        sum.restored_pages += st->restored_pages;
        sum.host_evictions += st->host_evictions;
        sum.blocked_inserts += st->blocked_inserts;
        restore_calls += m.n_restore_calls;
        stale += m.n_stale_restores;
        model_finish(&m);
    }
    print_message("radix stress: %llu operations (page_tokens 1, 2, 3, 4, 16; up to %llu nodes, %llu host slots), "
                  "radix_check after each, %.2f s\n",
                  (unsigned long long)done, (unsigned long long)max_nodes, (unsigned long long)max_host,
                  (cd_now_ms() - t0) / 1e3);
    print_message("radix stress: %llu lookups (%llu full, %llu partial hits), %llu tokens inserted, %llu evictions\n",
                  (unsigned long long)sum.lookups, (unsigned long long)sum.full_hits,
                  (unsigned long long)sum.partial_hits, (unsigned long long)sum.inserted_tokens,
                  (unsigned long long)sum.evictions);
    print_message("radix stress: %llu demotions, %llu restore calls (%llu stale; %llu nodes, %llu pages), %llu host "
                  "evictions, %llu blocked inserts\n",
                  (unsigned long long)sum.demotions, (unsigned long long)restore_calls, (unsigned long long)stale,
                  (unsigned long long)sum.restores, (unsigned long long)sum.restored_pages,
                  (unsigned long long)sum.host_evictions, (unsigned long long)sum.blocked_inserts);
}

/* ---- microbenchmark ----------------------------------------------------------------------- */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_examples), cmocka_unit_test(test_pull_eviction),
        cmocka_unit_test(test_page_boundaries), cmocka_unit_test(test_pins),
        cmocka_unit_test(test_lru_order),       cmocka_unit_test(test_namespaces),
        cmocka_unit_test(test_stats),           cmocka_unit_test(test_errors_and_check),
        cmocka_unit_test(test_demote_saved),    cmocka_unit_test(test_demote_dropped),
        cmocka_unit_test(test_match_mixed),     cmocka_unit_test(test_restore),
        cmocka_unit_test(test_pins_host),       cmocka_unit_test(test_insert_over_host),
        cmocka_unit_test(test_tiers_check),     cmocka_unit_test(test_tails),
        cmocka_unit_test(test_tails_host),      cmocka_unit_test(test_tails_oom),
        cmocka_unit_test(test_tails_random),    cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
