/* kv/kv_pages: randomized operations against a naive model, with the invariant checker after
 * every step. The model keeps, per sequence, the token values it should read back and, per
 * page, the "device" contents; a sequence reads its tokens through its block table, so a page
 * written by two holders (a missed copy on write) or freed while held shows up as a wrong
 * value. Refcounts are recomputed from scratch (tables + external holds) and compared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_pages.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"

#define MAX_SEQ 8
#define MAX_HOLD 64

typedef struct model {
    kv_pages pool;
    kv_seq seq[MAX_SEQ];
    uint32_t *want[MAX_SEQ]; /* token values each sequence should read back */
    uint32_t want_cap[MAX_SEQ];
    uint32_t *data;          /* [n_pages][page_tokens] "device" memory */
    uint32_t hold[MAX_HOLD]; /* pages held outside sequences (a prefix cache, say) */
    uint32_t n_hold;
    uint32_t next_value;
} model;

static void check_all(model *m) {
    kv_pages *p = &m->pool;
    if (kv_pages_check(p)) fail_msg("%s", cd_errmsg());
    uint32_t *refs = calloc(p->n_pages, sizeof *refs);
    for (int s = 0; s < MAX_SEQ; s++) {
        kv_seq *q = &m->seq[s];
        assert_int_equal(q->n_pages, kv_pages_for(p, q->n_tokens));
        for (uint32_t i = 0; i < q->n_pages; i++) refs[q->pages[i]]++;
        for (uint32_t t = 0; t < q->n_tokens; t++) {
            uint32_t page = q->pages[t / p->page_tokens];
            uint32_t got = m->data[(size_t)page * p->page_tokens + t % p->page_tokens];
            if (got != m->want[s][t])
                fail_msg("seq %d token %u: page %u holds %u, want %u", s, t, page, got, m->want[s][t]);
        }
    }
    for (uint32_t i = 0; i < m->n_hold; i++) refs[m->hold[i]]++;
    uint32_t used = 0;
    for (uint32_t i = 0; i < p->n_pages; i++) {
        if (refs[i] != p->ref[i]) fail_msg("page %u: %u holders counted, ref says %u", i, refs[i], p->ref[i]);
        used += refs[i] > 0;
    }
    assert_int_equal(used + p->n_free, p->n_pages);
    free(refs);
}

static void want_reserve(model *m, int s, uint32_t n) {
    if (n <= m->want_cap[s]) return;
    m->want_cap[s] = n * 2 + 16;
    m->want[s] = realloc(m->want[s], m->want_cap[s] * sizeof(uint32_t));
}

/* append n tokens to sequence s as the engine would: copy on write first, then write */
static int do_append(model *m, int s, uint32_t n) {
    kv_seq *q = &m->seq[s];
    kv_pages *p = &m->pool;
    kv_seq before = *q;
    uint32_t free_before = p->n_free, pt = p->page_tokens;
    uint32_t tail = before.n_pages ? before.pages[before.n_pages - 1] : 0;
    kv_cow cow;
    if (kv_seq_append(p, q, n, &cow)) {
        /* all or nothing: nothing changed */
        assert_int_equal(q->n_tokens, before.n_tokens);
        assert_int_equal(q->n_pages, before.n_pages);
        assert_int_equal(p->n_free, free_before);
        if (before.n_pages) assert_int_equal(q->pages[before.n_pages - 1], tail);
        return -1;
    }
    if (cow.n_tokens) {
        assert_int_equal(cow.src, tail);
        assert_int_equal(cow.n_tokens, before.n_tokens % pt);
        memcpy(m->data + (size_t)cow.dst * pt, m->data + (size_t)cow.src * pt, cow.n_tokens * sizeof(uint32_t));
    }
    want_reserve(m, s, q->n_tokens);
    for (uint32_t t = before.n_tokens; t < q->n_tokens; t++) {
        uint32_t page = q->pages[t / pt];
        assert_true(p->ref[page] == 1); /* we only ever write pages nobody else holds */
        m->want[s][t] = ++m->next_value;
        m->data[(size_t)page * pt + t % pt] = m->want[s][t];
    }
    return 0;
}

static void model_free(model *m) {
    for (int s = 0; s < MAX_SEQ; s++) {
        kv_seq_free(&m->pool, &m->seq[s]);
        free(m->want[s]);
    }
    for (uint32_t i = 0; i < m->n_hold; i++) assert_int_equal(kv_page_release(&m->pool, m->hold[i]), 0);
    assert_int_equal(m->pool.n_free, m->pool.n_pages); /* everything came back */
    assert_int_equal(kv_pages_check(&m->pool), 0);
    kv_pages_free(&m->pool);
    free(m->data);
}

static void fuzz(uint64_t seed, uint32_t n_pages, uint32_t page_tokens, int steps) {
    rng r;
    rng_seed(&r, seed);
    model m = {0};
    assert_int_equal(kv_pages_init(&m.pool, n_pages, page_tokens), 0);
    uint32_t pt = m.pool.page_tokens;
    m.data = calloc((size_t)n_pages * pt, sizeof(uint32_t));
    int exhausted = 0, cows = 0;
    for (int step = 0; step < steps; step++) {
        int s = (int)rng_below(&r, MAX_SEQ), op = (int)rng_below(&r, 100);
        kv_seq *q = &m.seq[s];
        if (op < 45) { /* append: mostly short (decode), sometimes long (prefill) */
            uint32_t n = rng_below(&r, 4) ? 1 + rng_below(&r, 3) : 1 + rng_below(&r, 5 * pt);
            uint32_t free_before = m.pool.n_free;
            bool cow_due = q->n_tokens % pt && m.pool.ref[q->pages[q->n_pages - 1]] > 1;
            if (do_append(&m, s, n)) {
                exhausted++;
                assert_non_null(strstr(cd_errmsg(), "free pages"));
            } else if (cow_due) {
                cows++;
            }
            (void)free_before;
        } else if (op < 58) { /* fork into an empty slot */
            int d = (int)rng_below(&r, MAX_SEQ);
            if (d != s && m.seq[d].n_pages == 0) {
                kv_seq_free(&m.pool, &m.seq[d]);
                assert_int_equal(kv_seq_fork(&m.pool, q, &m.seq[d]), 0);
                want_reserve(&m, d, q->n_tokens);
                if (q->n_tokens) memcpy(m.want[d], m.want[s], q->n_tokens * sizeof(uint32_t));
            }
        } else if (op < 68) { /* finish a sequence */
            kv_seq_free(&m.pool, q);
        } else if (op < 76) { /* truncate (rollback of speculative tokens, say) */
            if (q->n_tokens) assert_int_equal(kv_seq_truncate(&m.pool, q, rng_below(&r, q->n_tokens + 1)), 0);
        } else if (op < 86) { /* the "cache" takes a reference to a full page of s */
            uint32_t full = q->n_tokens / pt;
            if (full && m.n_hold < MAX_HOLD) {
                uint32_t page = q->pages[rng_below(&r, full)];
                assert_int_equal(kv_page_retain(&m.pool, page), 0);
                m.hold[m.n_hold++] = page;
            }
        } else if (op < 94) { /* the "cache" lets go of one */
            if (m.n_hold) {
                uint32_t i = rng_below(&r, m.n_hold);
                assert_int_equal(kv_page_release(&m.pool, m.hold[i]), 0);
                m.hold[i] = m.hold[--m.n_hold];
            }
        } else { /* a new sequence starts from a prefix of s's full pages (a cache hit) */
            int d = (int)rng_below(&r, MAX_SEQ);
            uint32_t full = q->n_tokens / pt;
            if (d != s && m.seq[d].n_pages == 0 && full) {
                uint32_t k = 1 + rng_below(&r, full);
                uint32_t *ids = malloc(k * sizeof *ids);
                memcpy(ids, q->pages, k * sizeof *ids);
                kv_seq_free(&m.pool, &m.seq[d]);
                assert_int_equal(kv_seq_attach(&m.pool, &m.seq[d], ids, k, k * pt), 0);
                want_reserve(&m, d, k * pt);
                memcpy(m.want[d], m.want[s], k * pt * sizeof(uint32_t));
                free(ids);
            }
        }
        check_all(&m);
    }
    fprintf(stderr, "seed %llu: %d exhausted, %d copies on write, %u free at the end\n", (unsigned long long)seed,
            exhausted, cows, m.pool.n_free);
    assert_true(exhausted > 0);        /* the pools are small enough to run out */
    if (pt > 1) assert_true(cows > 0); /* (page_tokens 1 never shares a partly filled page) */
    model_free(&m);
}

static void test_fuzz(void **state) {
    (void)state;
    fuzz(1, 24, 4, 20000);
    fuzz(2, 20, 16, 20000);
    fuzz(3, 7, 1, 20000);
    fuzz(4, 16, 0, 10000); /* default page size */
}

static void test_exhaustion(void **state) {
    (void)state;
    kv_pages p;
    assert_int_equal(kv_pages_init(&p, 3, 0), 0);
    assert_int_equal(p.page_tokens, 16);
    uint32_t a, b, c, d;
    assert_int_equal(kv_page_alloc(&p, &a), 0);
    assert_int_equal(kv_page_alloc(&p, &b), 0);
    assert_int_equal(kv_page_alloc(&p, &c), 0);
    assert_true(a != b && b != c && a != c);
    assert_int_equal(kv_page_alloc(&p, &d), -1);
    assert_non_null(strstr(cd_errmsg(), "all 3 pages"));
    /* a retained page comes back only at its last release */
    assert_int_equal(kv_page_retain(&p, b), 0);
    assert_int_equal(kv_page_release(&p, b), 0);
    assert_int_equal(kv_page_alloc(&p, &d), -1);
    assert_int_equal(kv_page_release(&p, b), 0);
    assert_int_equal(kv_page_alloc(&p, &d), 0);
    assert_int_equal(d, b);
    /* misuse is an error, not a crash, and changes nothing */
    assert_int_equal(kv_page_release(&p, 7), -1);
    assert_int_equal(kv_page_release(&p, a), 0);
    assert_int_equal(kv_page_release(&p, a), -1);
    assert_non_null(strstr(cd_errmsg(), "free page"));
    assert_int_equal(kv_page_retain(&p, a), -1);
    assert_int_equal(kv_pages_check(&p), 0);
    /* a sequence that does not fit takes nothing */
    kv_seq s;
    kv_seq_init(&s);
    kv_cow cow;
    assert_int_equal(kv_seq_append(&p, &s, 16, &cow), 0); /* the one free page */
    assert_int_equal(kv_seq_append(&p, &s, 1, &cow), -1);
    assert_int_equal(s.n_tokens, 16);
    assert_int_equal(kv_seq_truncate(&p, &s, 0), 0);
    assert_int_equal(p.n_free, 1);
    assert_int_equal(kv_seq_append(&p, &s, 17, &cow), -1); /* needs 2 */
    assert_int_equal(s.n_tokens, 0);
    assert_int_equal(s.n_pages, 0);
    kv_seq_free(&p, &s);
    kv_page_release(&p, c);
    kv_page_release(&p, d);
    assert_int_equal(p.n_free, 3);
    assert_int_equal(kv_pages_check(&p), 0);
    kv_pages_free(&p);
    assert_int_equal(kv_pages_init(&p, 0, 16), -1);
}

static void test_fork_share_cow(void **state) {
    (void)state;
    kv_pages p;
    assert_int_equal(kv_pages_init(&p, 10, 4), 0);
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    kv_cow cow;
    assert_int_equal(kv_seq_append(&p, &a, 6, &cow), 0); /* pages: full, 2 of 4 */
    assert_int_equal(cow.n_tokens, 0);
    assert_int_equal(kv_seq_fork(&p, &a, &b), 0);
    assert_int_equal(b.n_tokens, 6);
    assert_memory_equal(a.pages, b.pages, 2 * sizeof(uint32_t));
    assert_int_equal(kv_page_refs(&p, a.pages[0]), 2);
    assert_int_equal(kv_page_refs(&p, a.pages[1]), 2);
    assert_int_equal(p.n_free, 8);
    /* forking into a non-empty sequence is refused */
    assert_int_equal(kv_seq_fork(&p, &a, &b), -1);
    /* first append to b copies the shared tail */
    uint32_t shared_tail = a.pages[1];
    assert_int_equal(kv_seq_append(&p, &b, 1, NULL), -1); /* needs somewhere to report the copy */
    assert_int_equal(kv_seq_append(&p, &b, 1, &cow), 0);
    assert_int_equal(cow.src, shared_tail);
    assert_int_equal(cow.n_tokens, 2);
    assert_int_equal(b.pages[1], cow.dst);
    assert_int_equal(b.pages[0], a.pages[0]);
    assert_int_equal(kv_page_refs(&p, shared_tail), 1);
    /* now a owns its tail alone: no copy */
    assert_int_equal(kv_seq_append(&p, &a, 3, &cow), 0);
    assert_int_equal(cow.n_tokens, 0);
    assert_int_equal(a.n_pages, 3);
    /* a page-aligned fork needs no copy either */
    kv_seq c;
    kv_seq_init(&c);
    assert_int_equal(kv_seq_truncate(&p, &a, 8), 0);
    assert_int_equal(kv_seq_fork(&p, &a, &c), 0);
    assert_int_equal(kv_seq_append(&p, &c, 1, &cow), 0);
    assert_int_equal(cow.n_tokens, 0);
    /* attach: a cache hit over pages held elsewhere */
    kv_seq d;
    kv_seq_init(&d);
    assert_int_equal(kv_seq_attach(&p, &d, a.pages, 2, 4), -1); /* 4 tokens do not need 2 pages of 4 */
    assert_int_equal(kv_seq_attach(&p, &d, a.pages, 2, 8), 0);
    assert_int_equal(kv_page_refs(&p, a.pages[0]), 4);         /* a, b, c, d */
    assert_int_equal(kv_seq_attach(&p, &d, a.pages, 1, 4), 0); /* pages may repeat */
    kv_seq_free(&p, &a);
    kv_seq_free(&p, &b);
    kv_seq_free(&p, &c);
    assert_int_equal(kv_pages_check(&p), 0);
    kv_seq_free(&p, &d);
    assert_int_equal(p.n_free, 10);
    assert_int_equal(kv_pages_check(&p), 0);
    kv_pages_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_fork_share_cow),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
