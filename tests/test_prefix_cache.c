/* The prefix cache is invisible to the math: the engine with the cache and the engine
 * without it, on the same model, produce the same greedy tokens for every request of random
 * branching traces (shared system prompts, multi-turn continuations that include the previous
 * reply, branches cut at any token of an earlier prompt, agent loops appending tool results),
 * and the same logits bit for bit (the forward pass is batch invariant). Also: token accounting, hits where a
 * prefix was seen, eviction under a small pool, namespace isolation by fingerprint and by cache
 * salt (the host tier included), and the host tier: the same equivalence under a pool small enough to demote and restore all along,
 * and restored pages bit-identical to the demoted ones (in other page ids). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#define MAX_LEN 512

static model *tiny(void) {
    static model *m;
    if (!m && model_load(&m, tu_make_model("pc_tiny.gguf", "tiny", NULL, 7, NULL), (model_load_opts){0}))
        fail_msg("%s", cd_errmsg());
    return m;
}

typedef struct pair {
    engine cached, plain;
    float *la, *lb;
} pair;

/* A random trace's shape: the page size, pool tokens (0: the default), host tier MiB, requests,
 * the seed; the model (NULL: tiny f32) and engine_opts.int_dot. */
typedef struct trace_case {
    uint32_t page, pool, host_mb, n_req;
    uint64_t seed;
    model *m;
    int int_dot;
} trace_case;

static void pair_init(pair *p, model *m, const trace_case *c) {
    engine_opts a = {.n_ctx = MAX_LEN,
                     .pool_tokens = c->pool,
                     .page_tokens = c->page,
                     .host_cache_mb = c->host_mb,
                     .int_dot = c->int_dot};
    engine_opts b = {.n_ctx = MAX_LEN, .page_tokens = c->page, .no_prefix_cache = true, .int_dot = c->int_dot};
    if (vk_engine_init(&p->cached, m, &a) || vk_engine_init(&p->plain, m, &b)) fail_msg("%s", cd_errmsg());
    p->la = malloc(m->cfg.n_vocab * sizeof *p->la);
    p->lb = malloc(m->cfg.n_vocab * sizeof *p->lb);
}

static void pair_free(pair *p) {
    engine_free(&p->cached);
    engine_free(&p->plain);
    free(p->la);
    free(p->lb);
}

/* One request on both engines: same tokens, close logits, exact accounting. */
static void run_both(pair *p, tu_trace *h, const int32_t *ids, uint32_t n, uint32_t max_tokens) {
    engine_request ra = {.ids = ids, .n = n, .max_tokens = max_tokens, .ignore_eos = true, .logits_out = p->la};
    engine_request rb = {.ids = ids, .n = n, .max_tokens = max_tokens, .ignore_eos = true, .logits_out = p->lb};
    engine_reply a, b;
    if (engine_generate(&p->cached, &ra, &a) || engine_generate(&p->plain, &rb, &b)) fail_msg("%s", cd_errmsg());
    assert_int_equal(a.cached_tokens + a.prefilled_tokens, n);
    assert_int_equal(b.cached_tokens, 0);
    assert_true(a.cached_tokens < n);
    assert_int_equal(a.n, b.n);
    for (uint32_t i = 0; i < a.n; i++)
        if (a.ids[i] != b.ids[i])
            fail_msg("request %u (%u tokens, %u cached): token %u is %d with the cache, %d without", h->n, n,
                     a.cached_tokens, i, a.ids[i], b.ids[i]);
    /* the cache is invisible to the math: the last logits are the same bits (gpu_model.h) */
    if (memcmp(p->la, p->lb, p->cached.m->cfg.n_vocab * sizeof *p->la))
        fail_msg("request %u: logits with and without the cache differ (rel L2 %.3g)", h->n,
                 tu_rel_l2(p->la, p->lb, p->cached.m->cfg.n_vocab));
    tu_trace_remember(h, ids, n, a.ids, a.n);
    engine_reply_free(&a);
    engine_reply_free(&b);
}

static void random_trace(const trace_case *c) {
    uint32_t page = c->page, pool = c->pool, host_mb = c->host_mb;
    pair p;
    pair_init(&p, c->m ? c->m : tiny(), c);
    /* 1 MiB is ~256 slots here, more than the traces fill: keep all but 48 out of use, so the
     * tier runs full and evicts its own LRU entries as well */
    uint32_t reserved = 0, slot;
    if (host_mb)
        while (kv_host_free_count(&p.cached.host) > 48 && kv_host_slot_alloc(&p.cached.host, &slot) == 0) reserved++;
    rng r;
    rng_seed(&r, c->seed);
    int32_t *ids = malloc(MAX_LEN * sizeof *ids);
    tu_trace *h = calloc(1, sizeof *h);
    tu_trace_init(h, &r,
                  &(tu_trace_shape){.sys_len = 64,
                                    .question = 24,
                                    .question_span = 40,
                                    .message_span = 12,
                                    .tool = 20,
                                    .tool_span = 30,
                                    .max_len = MAX_LEN});
    for (uint32_t i = 0; i < c->n_req; i++) {
        uint32_t n = tu_trace_next(h, &r, ids);
        run_both(&p, h, ids, n, 2 + (uint32_t)rng_below(&r, 5));
    }
    const engine_stats *s = &p.cached.stats;
    print_message("page %u pool %u: %llu requests, %llu of %llu prompt tokens cached, %llu pages evicted\n", page, pool,
                  (unsigned long long)s->requests, (unsigned long long)s->cached_tokens,
                  (unsigned long long)s->prompt_tokens, (unsigned long long)s->evicted_pages);
    assert_true(s->cached_tokens > s->prompt_tokens / 4); /* the traces are built to share a lot */
    if (radix_check(&p.cached.cache.tree)) fail_msg("%s", cd_errmsg());
    if (kv_pages_check(&p.cached.pool.pages)) fail_msg("%s", cd_errmsg());
    if (pool) assert_true(s->evicted_pages > 0);
    if (host_mb) {
        const radix_stats *t = &p.cached.cache.tree.stats;
        print_message("host tier: %llu pages demoted, %llu restored (%llu tokens), %llu host evictions, %u slots held "
                      "by the tree\n",
                      (unsigned long long)t->demoted_pages, (unsigned long long)s->restored_pages,
                      (unsigned long long)s->restored_tokens, (unsigned long long)t->host_evictions,
                      (unsigned)t->host_slots);
        assert_false(p.cached.cache.host_broken);
        assert_true(t->demotions > 0);
        assert_true(t->restores > 0 && s->restored_pages > 0 && s->restored_tokens > 0);
        assert_true(t->host_evictions > 0);
        assert_int_equal(kv_host_used(&p.cached.host) - reserved, t->host_slots); /* the rest are the tree's */
    }
    free(ids);
    free(h);
    pair_free(&p);
}

static void test_random_traces_page16(void **st) {
    (void)st;
    random_trace(&(trace_case){.page = 16, .n_req = 40, .seed = 1});
}
static void test_random_traces_page4(void **st) {
    (void)st;
    random_trace(&(trace_case){.page = 4, .n_req = 40, .seed = 2});
}
/* A pool of 160 tokens: requests run with the cache evicting older entries all along. */
static void test_random_traces_small_pool(void **st) {
    (void)st;
    random_trace(&(trace_case){.page = 4, .pool = 160, .n_req = 40, .seed = 3});
}
/* The same pool with a 1 MiB host tier (~256 pages of the tiny model at page size 4, fewer than
 * the traces write, so the tier evicts too): victims are demoted, matches restore them. */
static void test_random_traces_host_tier(void **st) {
    (void)st;
    random_trace(&(trace_case){.page = 4, .pool = 160, .host_mb = 1, .n_req = 32, .seed = 5});
}

/* The integer family (int_dot: q/k/v/o as int8 dot products) keeps the invariant: a Q4_K_M
 * file's requests give the same tokens and logits bits from cached pages as from scratch. Its
 * namespace differs from the float family's (other rounding), and an f32 file's does not (no
 * product of its runs integer, int_dot on or not). */
static void test_random_traces_int_dot(void **st) {
    (void)st;
    model *q, *f;
    if (model_load(&q, tu_make_model("pc_q4km.gguf", "tiny", "q4_k_m", 7, NULL), (model_load_opts){0}) ||
        model_load(&f, tu_make_model("pc_f32.gguf", "tiny", "f32", 7, NULL), (model_load_opts){0}))
        fail_msg("%s", cd_errmsg());
    random_trace(&(trace_case){.page = 4, .n_req = 24, .seed = 6, .m = q, .int_dot = 1});
    model *ms[2] = {q, f};
    for (int i = 0; i < 2; i++) {
        engine e[2];
        for (int j = 0; j < 2; j++) {
            engine_opts o = {.n_ctx = 64, .pool_tokens = 64, .page_tokens = 4, .int_dot = j ? 1 : -1};
            if (vk_engine_init(&e[j], ms[i], &o)) fail_msg("%s", cd_errmsg());
        }
        assert_string_equal(gpu_model_family(&e[1].g), i == 0 ? "xq8" : "float");
        assert_int_equal(memcmp(e[0].cache.ns, e[1].cache.ns, RADIX_NS_BYTES) != 0, i == 0);
        engine_free(&e[0]);
        engine_free(&e[1]);
    }
    model_free(q);
    model_free(f);
}

/* Restored KV is bit-identical to what was demoted, in other page ids: fill the pool with
 * random bytes, cache 8 pages, demote them all, scribble over the pool, hold the original page
 * ids so the restore must use others, match + restore, compare. */
static void test_restore_bit_identical(void **st) {
    (void)st;
    engine e;
    engine_opts o = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4, .host_cache_mb = 1};
    if (vk_engine_init(&e, tiny(), &o)) fail_msg("%s", cd_errmsg());
    kv_pages *kp = &e.pool.pages;
    uint64_t pb = e.pool.lay.page_bytes, size = e.pool.buf.size;
    assert_int_equal(kp->n_pages, 16);
    uint8_t *bytes = malloc(size), *back = malloc(size), *orig = malloc(8 * pb);
    rng r;
    rng_seed(&r, 11);
    for (uint64_t i = 0; i < size; i++) bytes[i] = (uint8_t)rng_below(&r, 256);
    if (cvk_stager_upload(&e.vk->stager, cvk_view_whole(&e.pool.buf), bytes) || cvk_stager_flush(&e.vk->stager))
        fail_msg("%s", cd_errmsg());
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = 500 + i;
    kv_seq s;
    kv_seq_init(&s);
    assert_int_equal(kv_seq_append(kp, &s, 32, NULL), 0);
    uint32_t first[8];
    for (int i = 0; i < 8; i++) {
        first[i] = s.pages[i];
        memcpy(orig + i * pb, bytes + first[i] * pb, pb);
    }
    assert_int_equal(kv_cache_insert(&e.cache, NULL, ids, &s, false), 0);
    kv_seq_free(kp, &s);
    kv_cache_reclaim(&e.cache, 16); /* all 8 demoted */
    assert_int_equal(kv_pages_free_count(kp), 16);
    assert_int_equal(e.cache.tree.stats.demoted_pages, 8);
    assert_int_equal(e.cache.tree.stats.host_slots, 8);
    assert_int_equal(kv_host_used(&e.host), 8);
    if (kv_host_sync(&e.host)) fail_msg("%s", cd_errmsg()); /* the copies are asynchronous */
    for (uint32_t i = 0; i < 8; i++) /* the slots hold the pages, byte for byte, in host memory */
        assert_memory_equal(kv_host_slot_ptr(&e.host, i), orig + i * pb, pb); /* slots 0.. in path order */
    for (uint64_t i = 0; i < size; i++) bytes[i] = (uint8_t)rng_below(&r, 256);
    if (cvk_stager_upload(&e.vk->stager, cvk_view_whole(&e.pool.buf), bytes) || cvk_stager_flush(&e.vk->stager))
        fail_msg("%s", cd_errmsg());
    uint32_t held[16], n_held = 0; /* hold the original ids: allocate everything, free the others */
    for (uint32_t i = 0; i < 16; i++) assert_int_equal(kv_page_alloc(kp, &held[i]), 0);
    for (uint32_t i = 0; i < 16; i++) {
        bool orig_id = false;
        for (int k = 0; k < 8; k++) orig_id |= held[i] == first[k];
        if (orig_id) held[n_held++] = held[i];
        else kv_page_release(kp, held[i]);
    }
    assert_int_equal(n_held, 8);
    radix_match m;
    assert_int_equal(kv_cache_match(&e.cache, NULL, ids, 32, &m), 0);
    assert_int_equal(m.n_tokens, 32);
    assert_int_equal(m.n_gpu_pages, 0);
    assert_int_equal(m.n_restore, 8);
    uint32_t taken;
    assert_int_equal(kv_cache_restore(&e.cache, &m, &taken), 0);
    assert_int_equal(taken, 8);
    assert_int_equal(m.n_gpu_pages, 8);
    assert_int_equal(kv_host_used(&e.host), 0);
    if (cvk_stager_download(&e.vk->stager, cvk_view_whole(&e.pool.buf), back)) fail_msg("%s", cd_errmsg());
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 8; k++) assert_int_not_equal(m.pages[i], first[k]);
        if (memcmp(back + m.pages[i] * pb, orig + i * pb, pb)) fail_msg("restored page %d differs", i);
    }
    radix_release(&e.cache.tree, &m);
    for (uint32_t i = 0; i < n_held; i++) kv_page_release(kp, held[i]);
    if (radix_check(&e.cache.tree) || kv_pages_check(kp)) fail_msg("%s", cd_errmsg());
    free(bytes);
    free(back);
    free(orig);
    engine_free(&e);
}

/* Two requests matching the same demoted prefix before either restores it: the prefix comes
 * back once. A 32-token conversation cached as two nodes ([0,16) and [16,32), page 4), both
 * demoted; a match of the first 16 tokens and one of all 32, pinned together. Restoring the
 * long one copies 8 pages, the short one then copies none and reads the same pages; the other
 * order copies 4 then the remaining 4. */
static void restore_twice(engine *e, const int32_t *ids, bool short_first) {
    kv_prefix_cache *c = &e->cache;
    kv_cache_reclaim(c, e->pool.pages.n_pages); /* demote everything */
    assert_int_equal(c->tree.stats.pages, 0);
    radix_match ms, ml;
    assert_int_equal(kv_cache_match(c, NULL, ids, 16, &ms), 0);
    assert_int_equal(kv_cache_match(c, NULL, ids, 32, &ml), 0);
    assert_int_equal(ms.n_restore, 4);
    assert_int_equal(ml.n_restore, 8);
    radix_match *first = short_first ? &ms : &ml, *second = short_first ? &ml : &ms;
    uint64_t pb = e->g.lay.page_bytes, before = e->host.bytes_to_gpu;
    uint32_t t1, t2;
    assert_int_equal(kv_cache_restore(c, first, &t1), 0);
    assert_int_equal(e->host.bytes_to_gpu - before, t1 * pb);
    assert_int_equal(radix_match_host_left(&c->tree, second), short_first ? 4 : 0);
    assert_int_equal(kv_cache_restore(c, second, &t2), 0);
    assert_int_equal(t1, short_first ? 4 : 8);
    assert_int_equal(t2, short_first ? 4 : 0);
    assert_int_equal(e->host.bytes_to_gpu - before, 8 * pb); /* each page copied once */
    assert_int_equal(ms.n_gpu_pages, 4);
    assert_int_equal(ml.n_gpu_pages, 8);
    assert_memory_equal(ms.pages, ml.pages, 4 * sizeof *ms.pages);
    assert_int_equal(c->tree.stats.pages, 8);
    assert_int_equal(kv_host_used(&e->host), 0);
    radix_release(&c->tree, &ms);
    radix_release(&c->tree, &ml);
    if (radix_check(&c->tree) || kv_pages_check(&e->pool.pages)) fail_msg("%s", cd_errmsg());
}

/* A host-tier restore whose copy fails (injected: kv_host_tier.fail_copies) does not fail the
 * request: acquire serves the GPU part of the match (here none), the rest is recomputed, the
 * tier is marked broken (no restore or demotion again), and the reply equals the uncached one. */
static void test_failed_restore_recomputes(void **st) {
    (void)st;
    engine e, ref;
    engine_opts o = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4, .host_cache_mb = 1};
    engine_opts off = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4, .no_prefix_cache = true};
    if (vk_engine_init(&e, tiny(), &o) || vk_engine_init(&ref, tiny(), &off)) fail_msg("%s", cd_errmsg());
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 700 + 3 * i;
    engine_request rq = {.ids = ids, .n = 40, .max_tokens = 6};
    engine_reply a, b, want;
    if (engine_generate(&e, &rq, &a)) fail_msg("%s", cd_errmsg());
    kv_cache_reclaim(&e.cache, 16); /* every page of the prompt demoted to host slots */
    assert_true(e.cache.tree.stats.host_slots > 0);
    if (kv_host_sync(&e.host)) fail_msg("%s", cd_errmsg());
    e.host.fail_copies = 1;
    if (engine_generate(&e, &rq, &b)) fail_msg("the failed restore failed the request: %s", cd_errmsg());
    assert_int_equal(b.finish, ENGINE_LENGTH);
    assert_int_equal(b.restored_tokens, 0);
    assert_true(e.cache.host_broken);
    assert_int_equal(e.host.fail_copies, 0); /* the copy was tried */
    if (engine_generate(&ref, &rq, &want)) fail_msg("%s", cd_errmsg());
    assert_int_equal(b.n, want.n);
    assert_memory_equal(b.ids, want.ids, want.n * sizeof *want.ids);
    assert_memory_equal(a.ids, want.ids, want.n * sizeof *want.ids);
    engine_reply_free(&a);
    engine_reply_free(&b);
    engine_reply_free(&want);
    engine_free(&e);
    engine_free(&ref);
}

/* A commit to the cache that fails (injected: kv_prefix_cache.fail_commits), the prompt's and
 * the finished request's, does not fail the request: the reply is the uncached one, the
 * failures are counted, nothing of it is cached, and no page leaks. */
static void test_failed_commit_counted(void **st) {
    (void)st;
    engine e, ref;
    engine_opts o = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4};
    engine_opts off = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4, .no_prefix_cache = true};
    if (vk_engine_init(&e, tiny(), &o) || vk_engine_init(&ref, tiny(), &off)) fail_msg("%s", cd_errmsg());
    int32_t ids[30];
    for (int i = 0; i < 30; i++) ids[i] = 900 + 5 * i;
    engine_request rq = {.ids = ids, .n = 30, .max_tokens = 5};
    engine_reply a, b, want;
    e.cache.fail_commits = 2;
    if (engine_generate(&e, &rq, &a)) fail_msg("a failed commit failed the request: %s", cd_errmsg());
    assert_int_equal(a.finish, ENGINE_LENGTH);
    assert_int_equal(e.stats.cache_errors, 2);
    assert_int_equal(e.cache.fail_commits, 0);
    engine_cache_info ci;
    engine_cache_info_get(&e, &ci);
    assert_int_equal(ci.gpu_free + ci.gpu_cached, ci.gpu_pages); /* nothing cached, nothing leaked */
    assert_int_equal(ci.gpu_cached, 0);
    if (engine_generate(&e, &rq, &b)) fail_msg("%s", cd_errmsg());
    assert_int_equal(b.cached_tokens, 0);
    if (engine_generate(&ref, &rq, &want)) fail_msg("%s", cd_errmsg());
    assert_memory_equal(a.ids, want.ids, want.n * sizeof *want.ids);
    assert_memory_equal(b.ids, want.ids, want.n * sizeof *want.ids);
    engine_reply_free(&a);
    engine_reply_free(&b);
    engine_reply_free(&want);
    engine_free(&e);
    engine_free(&ref);
}

static void test_restore_once(void **st) {
    (void)st;
    engine e;
    engine_opts o = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4, .host_cache_mb = 1};
    if (vk_engine_init(&e, tiny(), &o)) fail_msg("%s", cd_errmsg());
    kv_pages *kp = &e.pool.pages;
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = 700 + i;
    for (uint32_t n = 16; n <= 32; n += 16) { /* two inserts: the tree holds two nodes */
        kv_seq s;
        kv_seq_init(&s);
        assert_int_equal(kv_seq_append(kp, &s, n, NULL), 0);
        assert_int_equal(kv_cache_insert(&e.cache, NULL, ids, &s, false), 0);
        kv_seq_free(kp, &s);
    }
    assert_int_equal(e.cache.tree.stats.nodes, 2);
    restore_twice(&e, ids, false);
    restore_twice(&e, ids, true);
    engine_free(&e);
}

/* The host tier follows the namespace: a salted prefix demoted to host slots is restored for
 * its own namespace only (the slots hang in the tree's nodes, under the namespace's root). */
static void test_salted_host_tier(void **st) {
    (void)st;
    engine e;
    engine_opts o = {.n_ctx = 256, .pool_tokens = 64, .page_tokens = 4, .host_cache_mb = 1};
    if (vk_engine_init(&e, tiny(), &o)) fail_msg("%s", cd_errmsg());
    kv_pages *kp = &e.pool.pages;
    uint8_t sa[RADIX_NS_BYTES], sb[RADIX_NS_BYTES];
    assert_int_equal(kv_cache_namespace_salt(e.cache.ns, "a", 1, sa), 0);
    assert_int_equal(kv_cache_namespace_salt(e.cache.ns, "b", 1, sb), 0);
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = 900 + i;
    kv_seq s;
    kv_seq_init(&s);
    assert_int_equal(kv_seq_append(kp, &s, 32, NULL), 0);
    assert_int_equal(kv_cache_commit(&e.cache, sa, ids, 32, &s, KV_COMMIT_PROMPT, NULL), 0);
    kv_seq_free(kp, &s);
    kv_cache_reclaim(&e.cache, kp->n_pages); /* all 8 pages demoted */
    assert_int_equal(e.cache.tree.stats.pages, 0);
    assert_int_equal(e.cache.tree.stats.host_slots, 8);
    const uint8_t *ask[] = {NULL, sb, sa};
    for (int i = 0; i < 3; i++) {
        radix_match m;
        kv_cache_hit hit;
        kv_seq_init(&s);
        assert_int_equal(kv_cache_acquire(&e.cache, ask[i], ids, 32, &s, &m, &hit), 0);
        assert_int_equal(hit.cached_tokens, i == 2 ? 31 : 0);
        assert_int_equal(hit.restored_tokens, i == 2 ? 31 : 0);
        assert_int_equal(e.cache.tree.stats.host_slots, i == 2 ? 0 : 8);
        kv_seq_free(kp, &s);
        kv_cache_release(&e.cache, &m);
    }
    if (radix_check(&e.cache.tree) || kv_pages_check(kp)) fail_msg("%s", cd_errmsg());
    engine_free(&e);
}

/* Page-boundary cases of token-granular reuse at page size 4 after a 12-token request (its KV:
 * 12 prompt + 3 generated = 15 tokens, 3 whole pages cached). */
static void test_page_boundaries(void **st) {
    (void)st;
    pair p;
    pair_init(&p, tiny(), &(trace_case){.page = 4});
    tu_trace *h = calloc(1, sizeof *h);
    int32_t base[32], q[32];
    rng r;
    rng_seed(&r, 9);
    tu_rand_ids(&r, base, 32);
    run_both(&p, h, base, 12, 4);
    /* shared tokens -> expected cached tokens: on a boundary (8), one into a page (9), one
     * before a page's end (11), all whole pages (12), nothing (0) */
    uint32_t shared[] = {8, 9, 11, 12, 0, 1};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        memcpy(q, base, sizeof q);
        q[shared[i]] = 7; /* diverge right after the shared part */
        engine_request rq = {.ids = q, .n = 20, .max_tokens = 2, .ignore_eos = true};
        engine_reply a;
        if (engine_generate(&p.cached, &rq, &a)) fail_msg("%s", cd_errmsg());
        assert_int_equal(a.cached_tokens, shared[i]);
        engine_reply_free(&a);
        run_both(&p, h, q, 20, 2); /* and the answer equals the uncached one */
    }
    free(h);
    pair_free(&p);
}

/* A pool too small for the request itself: a clear error, and the cache still works after. */
static void test_pool_exhausted(void **st) {
    (void)st;
    engine e;
    engine_opts o = {.n_ctx = 256, .pool_tokens = 32, .page_tokens = 4};
    if (vk_engine_init(&e, tiny(), &o)) fail_msg("%s", cd_errmsg());
    int32_t ids[64];
    rng r;
    rng_seed(&r, 4);
    tu_rand_ids(&r, ids, 64);
    engine_request big = {.ids = ids, .n = 40, .max_tokens = 2, .ignore_eos = true};
    engine_reply a;
    assert_int_equal(engine_generate(&e, &big, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "KV pool too small"));
    engine_reply_free(&a);
    engine_request ok = {.ids = ids, .n = 20, .max_tokens = 2, .ignore_eos = true};
    for (int k = 0; k < 2; k++) {
        if (engine_generate(&e, &ok, &a)) fail_msg("%s", cd_errmsg());
        assert_int_equal(a.cached_tokens, k ? 19 : 0); /* n - 1: one token is always prefilled */
        engine_reply_free(&a);
    }
    if (radix_check(&e.cache.tree) || kv_pages_check(&e.pool.pages)) fail_msg("%s", cd_errmsg());
    engine_free(&e);
}

/* Namespaces: the key changes with one weight, the RoPE base, the code id (another driver or
 * compiler), the page size, the tenant and a cache salt (a salt's key also depends on the
 * tenant); a tree holding one namespace serves nothing to another, through acquire and commit
 * too. */
static void bump_rope(synth_spec *s) { s->cfg.rope.freq_base = 5e5f; }

/* the code id of dev (as a CPU device when cpu) on a host of this cpuinfo */
static void code_on_host(cvk_phys_info dev, bool cpu, const char *cpuinfo, uint8_t out[CVK_CODE_ID_BYTES]) {
    if (cpu) dev.props.deviceType = VK_PHYSICAL_DEVICE_TYPE_CPU;
    FILE *f = fmemopen((void *)cpuinfo, strlen(cpuinfo), "r");
    assert_non_null(f);
    cvk_code_id_from(&dev, f, out);
    fclose(f);
}

/* A CPU device's code follows the host CPU: another instruction set gives another code id, while
 * its stepping, clock and the other processors' lines do not; a GPU's id ignores the host. */
static void test_host_cpu_in_code_id(const cvk_phys_info *dev) {
    static const char a[] = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                            "model name\t: AMD EPYC\nstepping\t: 0\ncpu MHz\t\t: 2400.000\n"
                            "flags\t\t: fpu sse2 avx2 fma avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n";
    static const char a2[] = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                             "model name\t: AMD EPYC\nstepping\t: 1\ncpu MHz\t\t: 3100.000\n"
                             "flags\t\t: fpu sse2 avx2 fma avx512f\n\nprocessor\t: 1\nflags\t\t: sse2\n";
    static const char b[] = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                            "model name\t: AMD EPYC\nstepping\t: 0\ncpu MHz\t\t: 2400.000\n"
                            "flags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n";
    static const char c[] = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 2\n"
                            "model name\t: AMD EPYC\nstepping\t: 0\ncpu MHz\t\t: 2400.000\n"
                            "flags\t\t: fpu sse2 avx2 fma avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n";
    static const char arm[] = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU part\t: 0xd40\n\n";
    static const char arm2[] = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU part\t: 0xd40\n\n";
    uint8_t id[8][CVK_CODE_ID_BYTES];
    code_on_host(*dev, true, a, id[0]);
    code_on_host(*dev, true, a2, id[1]); /* another stepping, clock and second processor */
    code_on_host(*dev, true, b, id[2]);  /* no AVX-512 */
    code_on_host(*dev, true, c, id[3]);  /* another family */
    code_on_host(*dev, true, arm, id[4]);
    code_on_host(*dev, true, arm2, id[5]); /* no SVE */
    code_on_host(*dev, false, a, id[6]);   /* a device not of CPU type on host a, then on host b */
    code_on_host(*dev, false, b, id[7]);
    assert_memory_equal(id[0], id[1], CVK_CODE_ID_BYTES);
    assert_memory_not_equal(id[0], id[2], CVK_CODE_ID_BYTES);
    assert_memory_not_equal(id[0], id[3], CVK_CODE_ID_BYTES);
    assert_memory_not_equal(id[2], id[3], CVK_CODE_ID_BYTES);
    assert_memory_not_equal(id[4], id[5], CVK_CODE_ID_BYTES);
    assert_memory_equal(id[6], id[7], CVK_CODE_ID_BYTES);
    uint8_t gpu[CVK_CODE_ID_BYTES];
    cvk_code_id(dev, gpu); /* such a device's id reads no host file: the same as with any cpuinfo */
    assert_memory_equal(gpu, id[6], CVK_CODE_ID_BYTES);
    /* llvmpipe built on another LLVM, or run at another vector width (name, driverInfo, subgroup) */
    uint8_t drv[4][CVK_CODE_ID_BYTES];
    cvk_phys_info lp = *dev;
    snprintf(lp.props.deviceName, sizeof lp.props.deviceName, "llvmpipe (LLVM 15.0.6, 256 bits)");
    snprintf(lp.driver_info, sizeof lp.driver_info, "Mesa 22.3.6 (LLVM 15.0.6)");
    lp.caps.subgroup_size = 8;
    code_on_host(lp, true, a, drv[0]);
    snprintf(lp.props.deviceName, sizeof lp.props.deviceName, "llvmpipe (LLVM 15.0.6, 512 bits)");
    code_on_host(lp, true, a, drv[1]);
    lp.caps.subgroup_size = 16;
    code_on_host(lp, true, a, drv[2]);
    snprintf(lp.props.deviceName, sizeof lp.props.deviceName, "llvmpipe (LLVM 15.0.6, 256 bits)");
    lp.caps.subgroup_size = 8;
    snprintf(lp.driver_info, sizeof lp.driver_info, "Mesa 22.3.6 (LLVM 16.0.0)");
    code_on_host(lp, true, a, drv[3]);
    for (int i = 0; i < 4; i++) {
        assert_memory_not_equal(drv[i], id[0], CVK_CODE_ID_BYTES); /* id[0]: no name, no driverInfo */
        for (int j = i + 1; j < 4; j++) assert_memory_not_equal(drv[i], drv[j], CVK_CODE_ID_BYTES);
    }
    /* lines longer than the reader's buffer: a kept one counts whole, an ignored one not at all */
    static char longer[2][12000];
    uint8_t lid[4][CVK_CODE_ID_BYTES];
    for (int v = 0; v < 2; v++) {
        int n = snprintf(longer[v], sizeof longer[v], "vendor_id\t: X\nflags\t\t:");
        for (int i = 0; i < 1500; i++) n += snprintf(longer[v] + n, sizeof longer[v] - (size_t)n, " f%03d", i);
        snprintf(longer[v] + n, sizeof longer[v] - (size_t)n, " last%d\n\n", v); /* differ past 4 KiB */
    }
    code_on_host(*dev, true, longer[0], lid[0]);
    code_on_host(*dev, true, longer[1], lid[1]);
    assert_memory_not_equal(lid[0], lid[1], CVK_CODE_ID_BYTES);
    for (int v = 0; v < 2; v++) { /* an ignored line whose 4 KiB piece boundary starts "flags" */
        int n = snprintf(longer[v], sizeof longer[v], "vendor_id\t: X\nbugs\t\t: ");
        n += snprintf(longer[v] + n, sizeof longer[v] - (size_t)n, "%*s", 4095 - n + 14, "");
        snprintf(longer[v] + n, sizeof longer[v] - (size_t)n, "flags : v%d\n\n", v);
    }
    code_on_host(*dev, true, longer[0], lid[2]);
    code_on_host(*dev, true, longer[1], lid[3]);
    assert_memory_equal(lid[2], lid[3], CVK_CODE_ID_BYTES);
    /* this machine's own: readable on Linux, and not the id without a host */
    cvk_phys_info here = *dev;
    here.props.deviceType = VK_PHYSICAL_DEVICE_TYPE_CPU;
    uint8_t own[CVK_CODE_ID_BYTES], none[CVK_CODE_ID_BYTES];
    cvk_code_id(&here, own);
    cvk_code_id_from(&here, NULL, none);
    assert_memory_not_equal(own, none, CVK_CODE_ID_BYTES);
}
static void test_namespaces(void **st) {
    (void)st;
    model *a, *b, *c;
    if (model_load(&a, tu_make_model("ns_a.gguf", "tiny", NULL, 7, NULL), (model_load_opts){0}))
        fail_msg("%s", cd_errmsg());
    const char *b_path = tu_one_weight_changed(tu_tmp_path("ns_a.gguf"), "ns_b.gguf");
    assert_non_null(b_path);
    if (model_load(&b, b_path, (model_load_opts){0}) ||
        model_load(&c, tu_make_model("ns_c.gguf", "tiny", NULL, 7, bump_rope), (model_load_opts){0}))
        fail_msg("%s", cd_errmsg());
    /* code ids: a device, the same with a newer driver, with another compiler (pipelineCacheUUID) */
    cvk_phys_info dev = {.props = {.vendorID = 0x1002, .deviceID = 0x744c, .driverVersion = 100}};
    uint8_t code[4][CVK_CODE_ID_BYTES];
    cvk_code_id(&dev, code[0]);
    dev.props.driverVersion++;
    cvk_code_id(&dev, code[1]);
    dev.props.driverVersion--, dev.props.pipelineCacheUUID[7] ^= 1;
    cvk_code_id(&dev, code[2]);
    dev.props.pipelineCacheUUID[7] ^= 1;
    cvk_code_id(&dev, code[3]); /* the same again */
    assert_memory_not_equal(code[0], code[1], CVK_CODE_ID_BYTES);
    assert_memory_not_equal(code[0], code[2], CVK_CODE_ID_BYTES);
    assert_memory_equal(code[0], code[3], CVK_CODE_ID_BYTES);
    uint8_t var[3][CVK_CODE_ID_BYTES]; /* another choice of kernels: another id, the same for the same */
    for (int i = 0; i < 3; i++) memcpy(var[i], code[0], CVK_CODE_ID_BYTES);
    cvk_code_id_variant(var[0], "xq8");
    cvk_code_id_variant(var[1], "xq4");
    cvk_code_id_variant(var[2], "xq8");
    assert_memory_not_equal(var[0], code[0], CVK_CODE_ID_BYTES);
    assert_memory_not_equal(var[0], var[1], CVK_CODE_ID_BYTES);
    assert_memory_equal(var[0], var[2], CVK_CODE_ID_BYTES);
    test_host_cpu_in_code_id(&dev);
    uint8_t k[7][RADIX_NS_BYTES];
    assert_int_equal(kv_cache_namespace(a->fingerprint, code[0], "f16", 16, NULL, 0, k[0]), 0);
    assert_int_equal(kv_cache_namespace(b->fingerprint, code[0], "f16", 16, NULL, 0, k[1]), 0); /* other weights */
    assert_int_equal(kv_cache_namespace(c->fingerprint, code[0], "f16", 16, NULL, 0, k[2]), 0); /* other RoPE base */
    assert_int_equal(kv_cache_namespace(a->fingerprint, code[0], "f16", 4, NULL, 0, k[3]), 0);  /* other page size */
    assert_int_equal(kv_cache_namespace(a->fingerprint, code[0], "f16", 16, "alice", 5, k[4]), 0);
    assert_int_equal(kv_cache_namespace(a->fingerprint, code[1], "f16", 16, NULL, 0, k[5]), 0); /* other driver */
    assert_int_equal(kv_cache_namespace(a->fingerprint, code[3], "f16", 16, NULL, 0, k[6]), 0); /* the same again */
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++) assert_memory_not_equal(k[i], k[j], RADIX_NS_BYTES);
    assert_memory_equal(k[0], k[6], RADIX_NS_BYTES);
    uint8_t sk[4][RADIX_NS_BYTES];
    assert_int_equal(kv_cache_namespace_salt(k[0], "a", 1, sk[0]), 0);
    assert_int_equal(kv_cache_namespace_salt(k[0], "b", 1, sk[1]), 0);
    assert_int_equal(kv_cache_namespace_salt(k[4], "a", 1, sk[2]), 0); /* tenant alice, the same salt */
    assert_int_equal(kv_cache_namespace_salt(k[0], "a", 1, sk[3]), 0); /* the same again */
    for (int i = 0; i < 3; i++) {
        for (int j = i + 1; j < 3; j++) assert_memory_not_equal(sk[i], sk[j], RADIX_NS_BYTES);
        for (int j = 0; j < 6; j++) assert_memory_not_equal(sk[i], k[j], RADIX_NS_BYTES);
    }
    assert_memory_equal(sk[0], sk[3], RADIX_NS_BYTES);

    kv_pages pool;
    kv_prefix_cache pc;
    assert_int_equal(kv_pages_init(&pool, 64, 16), 0);
    assert_int_equal(kv_cache_init(&pc, &pool, k[0]), 0);
    kv_seq s;
    kv_seq_init(&s);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = i;
    assert_int_equal(kv_seq_append(&pool, &s, 64, NULL), 0);
    assert_int_equal(kv_cache_insert(&pc, NULL, ids, &s, false), 0);
    for (int i = 0; i < 7; i++) {
        radix_match m;
        assert_int_equal(radix_match_prefix(&pc.tree, k[i], ids, 64, &m), 0);
        assert_int_equal(m.n_tokens, i == 0 || i == 6 ? 64 : 0);
        radix_release(&pc.tree, &m);
    }
    /* the door: a prompt committed under salt a is acquired under a only */
    int32_t other[64];
    for (int i = 0; i < 64; i++) other[i] = 1000 + i;
    kv_seq s2;
    kv_seq_init(&s2);
    assert_int_equal(kv_seq_append(&pool, &s2, 64, NULL), 0);
    assert_int_equal(kv_cache_commit(&pc, sk[0], other, 64, &s2, KV_COMMIT_PROMPT, NULL), 0);
    kv_seq_free(&pool, &s2);
    const uint8_t *ask[] = {NULL, k[0], sk[1], sk[2], sk[0]};
    for (int i = 0; i < 5; i++) {
        radix_match m;
        kv_cache_hit hit;
        kv_seq_init(&s2);
        assert_int_equal(kv_cache_acquire(&pc, ask[i], other, 64, &s2, &m, &hit), 0);
        assert_int_equal(hit.cached_tokens, i == 4 ? 63 : 0);
        assert_int_equal(s2.n_tokens, hit.cached_tokens);
        kv_seq_free(&pool, &s2);
        kv_cache_release(&pc, &m);
    }
    if (radix_check(&pc.tree)) fail_msg("%s", cd_errmsg());
    kv_seq_free(&pool, &s);
    kv_cache_free(&pc);
    assert_int_equal(kv_pages_free_count(&pool), 64); /* every reference given back */
    kv_pages_free(&pool);
    model_free(a);
    model_free(b);
    model_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_namespaces),
        cmocka_unit_test(test_page_boundaries),
        cmocka_unit_test(test_pool_exhausted),
        cmocka_unit_test(test_random_traces_page16),
        cmocka_unit_test(test_random_traces_page4),
        cmocka_unit_test(test_random_traces_small_pool),
        cmocka_unit_test(test_restore_bit_identical),
        cmocka_unit_test(test_restore_once),
        cmocka_unit_test(test_failed_restore_recomputes),
        cmocka_unit_test(test_failed_commit_counted),
        cmocka_unit_test(test_salted_host_tier),
        cmocka_unit_test(test_random_traces_host_tier),
        cmocka_unit_test(test_random_traces_int_dot),
    };
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER")); /* e.g. "*host*" */
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    model_free(tiny());
    return tu_status(rc);
}
