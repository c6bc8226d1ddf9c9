/* The engine with every tier of the prefix cache on (GPU pages, a host tier, a disk tier),
 * driven at random against a naive model: the same engine with the cache off, which runs each
 * request alone and recomputes everything.
 *
 * Each run draws a new seed (time and pid) unless CINDER_TEST_SEED gives one; the seed is
 * printed first, so a failure reproduces with CINDER_TEST_SEED=<seed>. From the seed: the page
 * size, the GPU pool (one request's worth to 1.5: it evicts), the host tier's free slots, the disk
 * chunk size and the disk budget (from a few chunks to plenty), then a branching trace of
 * requests (shared system prompts, next turns that include the reply, branches cut at any
 * token, agent loops), some run alone and some in bursts of 2-4 submitted together. Midway
 * the cached engine is freed and started again on the same directory with another pool size:
 * the disk tier is then the only warm tier. CINDER_TEST_REQUESTS sets the trace length
 * (default 24; a soak: CINDER_TEST_REQUESTS=400).
 *
 * After every request (and burst), with nothing running:
 * - the radix tree's checker and the page pool's checker pass;
 * - every GPU page is free or held once, by the cache, counted page by page from the pool's
 *   refcounts, and those counts are engine_cache_info's: free + cached + pinned = the pool,
 *   nothing pinned, nothing private; the host tier's free + cached + pinned (+ the slots the
 *   test holds back) = its slots; the disk tier's files within the budget.
 * Every reply's tokens equal the naive model's, and the logits of its last token are the same
 * bits (the forward pass is batch invariant: docs/ARCHITECTURE.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#define MAX_LEN 320u /* the context of both engines; prompts stay 16 below it */
#define MAX_BURST 4u
#define MAX_GEN 6u

static uint64_t seed;
static uint32_t n_requests = 24;

static model *tiny(void) {
    static model *m;
    if (!m && model_load(&m, tu_make_model("er_tiny.gguf", "tiny", NULL, 11, NULL), (model_load_opts){0}))
        fail_msg("%s", cd_errmsg());
    return m;
}

typedef struct config {
    uint32_t page, pool, host_mb, host_keep, chunk_pages;
    uint64_t max_bytes;
} config;

typedef struct state {
    config c;
    char dir[4096];
    engine plain, cached;
    uint32_t reserved; /* host slots the test holds so the tier runs full */
    tu_trace h;
    uint64_t requests, bursts, cached_tokens, prompt_tokens, restored_tokens, disk_tokens;
    uint64_t chunks_written, disk_evicted, evicted_pages, demoted_pages;
} state;

static void start_cached(state *s) {
    engine_opts o = {.n_ctx = MAX_LEN,
                     .pool_tokens = s->c.pool,
                     .page_tokens = s->c.page,
                     .max_seqs = MAX_BURST,
                     .chunk_tokens = 64,
                     .host_cache_mb = s->c.host_mb,
                     .cache_dir = s->dir,
                     .disk_chunk_pages = s->c.chunk_pages,
                     .cache_dir_max_bytes = s->c.max_bytes};
    if (vk_engine_init(&s->cached, tiny(), &o)) fail_msg("seed %llu: %s", (unsigned long long)seed, cd_errmsg());
    /* hold back all but host_keep slots, so the host tier fills and evicts its own entries */
    s->reserved = 0;
    uint32_t slot;
    while (kv_host_free_count(&s->cached.host) > s->c.host_keep && kv_host_slot_alloc(&s->cached.host, &slot) == 0)
        s->reserved++;
}

static void add_stats(state *s, const engine_stats *t) {
    s->restored_tokens += t->restored_tokens;
    s->disk_tokens += t->disk_tokens;
    s->chunks_written += t->disk_chunks_written;
    s->disk_evicted += t->disk_evicted_chunks;
    s->evicted_pages += t->evicted_pages;
    s->demoted_pages += t->demoted_pages;
}

/* Nothing running: the checkers pass and every page and slot is accounted for. */
static void check_idle(state *s, const char *after) {
    engine *e = &s->cached;
    const kv_pages *p = e->cache.pages;
    if (radix_check(&e->cache.tree)) fail_msg("seed %llu, after %s: %s", (unsigned long long)seed, after, cd_errmsg());
    if (kv_pages_check(p)) fail_msg("seed %llu, after %s: %s", (unsigned long long)seed, after, cd_errmsg());
    assert_int_equal(engine_running(e) + engine_waiting(e), 0);
    uint32_t n_free = 0, held = 0;
    for (uint32_t i = 0; i < p->n_pages; i++) {
        if (p->ref[i] > 1)
            fail_msg("seed %llu, after %s: page %u has %u holders with nothing running", (unsigned long long)seed,
                     after, i, p->ref[i]);
        if (p->ref[i]) held++;
        else n_free++;
    }
    engine_cache_info ci;
    engine_cache_info_get(e, &ci);
    if (ci.gpu_free != n_free || ci.gpu_cached != held || ci.gpu_pinned != 0 || ci.gpu_private != 0 ||
        ci.gpu_free + ci.gpu_cached + ci.gpu_pinned != ci.gpu_pages || held != e->cache.tree.stats.pages)
        fail_msg("seed %llu, after %s: pool %u pages: counted %u free, %u held; the engine says %u free, %u cached, "
                 "%u pinned, %u private; the tree holds %llu",
                 (unsigned long long)seed, after, ci.gpu_pages, n_free, held, ci.gpu_free, ci.gpu_cached, ci.gpu_pinned,
                 ci.gpu_private, (unsigned long long)e->cache.tree.stats.pages);
    assert_true(ci.host_slots > 0);
    if (ci.host_free + ci.host_cached + ci.host_pinned + s->reserved != ci.host_slots || ci.host_pinned != 0)
        fail_msg("seed %llu, after %s: host tier %u slots: %u free, %u cached, %u pinned, %u held back",
                 (unsigned long long)seed, after, ci.host_slots, ci.host_free, ci.host_cached, ci.host_pinned,
                 s->reserved);
    assert_false(e->cache.host_broken);
    assert_true(ci.disk);
    if (ci.disk_bytes > ci.disk_budget_bytes)
        fail_msg("seed %llu, after %s: %llu bytes of chunk files, budget %llu", (unsigned long long)seed, after,
                 (unsigned long long)ci.disk_bytes, (unsigned long long)ci.disk_budget_bytes);
}

typedef struct job {
    int32_t ids[MAX_LEN];
    uint32_t n, max_tokens, handle;
    engine_reply want, got;
    float *want_logits, *got_logits;
} job;

/* Requests submitted together to the cached engine (after each ran alone on the naive one);
 * each reply equals its reference, token for token and in its last logits, bit for bit. */
static void burst(state *s, rng *r, job *jobs, uint32_t k) {
    uint32_t n_vocab = s->cached.m->cfg.n_vocab;
    for (uint32_t i = 0; i < k; i++) {
        job *j = &jobs[i];
        j->n = tu_trace_next(&s->h, r, j->ids);
        j->max_tokens = 1 + (uint32_t)rng_below(r, MAX_GEN);
        engine_request rq = {
            .ids = j->ids, .n = j->n, .max_tokens = j->max_tokens, .ignore_eos = true, .logits_out = j->want_logits};
        if (engine_generate(&s->plain, &rq, &j->want)) fail_msg("seed %llu: %s", (unsigned long long)seed, cd_errmsg());
        rq.logits_out = j->got_logits;
        if (engine_submit(&s->cached, &rq, &j->handle))
            fail_msg("seed %llu: %s", (unsigned long long)seed, cd_errmsg());
    }
    uint32_t done = 0;
    bool finished[MAX_BURST] = {0};
    for (uint32_t step = 0; done < k; step++) {
        if (step > 10000)
            fail_msg("seed %llu: a burst of %u did not finish in 10000 steps", (unsigned long long)seed, k);
        if (engine_step(&s->cached, NULL)) fail_msg("seed %llu: %s", (unsigned long long)seed, cd_errmsg());
        for (uint32_t i = 0; i < k; i++) {
            if (finished[i]) continue;
            int got = engine_poll(&s->cached, jobs[i].handle, &jobs[i].got);
            if (got < 0) fail_msg("seed %llu: %s", (unsigned long long)seed, cd_errmsg());
            if (got) finished[i] = true, done++;
        }
    }
    for (uint32_t i = 0; i < k; i++) {
        job *j = &jobs[i];
        const engine_reply *a = &j->got, *b = &j->want;
        assert_int_equal(a->finish, ENGINE_LENGTH);
        assert_int_equal(a->cached_tokens + a->prefilled_tokens, j->n);
        assert_int_equal(b->cached_tokens, 0);
        if (a->n != b->n || memcmp(a->ids, b->ids, a->n * sizeof *a->ids))
            fail_msg("seed %llu, request %llu (%u tokens, %u cached: %u from host, %u from disk, burst of %u, "
                     "preempted %u): tokens differ from the naive model's",
                     (unsigned long long)seed, (unsigned long long)s->requests, j->n, a->cached_tokens,
                     a->restored_tokens, a->disk_tokens, k, a->preempted);
        if (memcmp(j->got_logits, j->want_logits, n_vocab * sizeof *j->got_logits))
            fail_msg("seed %llu, request %llu (%u tokens, %u cached, %u from disk): logits differ (rel L2 %.3g)",
                     (unsigned long long)seed, (unsigned long long)s->requests, j->n, a->cached_tokens, a->disk_tokens,
                     tu_rel_l2(j->got_logits, j->want_logits, n_vocab));
        s->requests++;
        s->cached_tokens += a->cached_tokens;
        s->prompt_tokens += j->n;
        tu_trace_remember(&s->h, j->ids, j->n, a->ids, a->n);
        engine_reply_free(&j->got);
        engine_reply_free(&j->want);
    }
    if (k > 1) s->bursts++;
}

static void test_random_engine(void **st) {
    (void)st;
    state *s = calloc(1, sizeof *s);
    rng r;
    rng_seed(&r, seed);
    static const uint32_t pages[] = {4, 8, 16};
    config *c = &s->c;
    c->page = pages[rng_below(&r, 3)];
    c->pool = MAX_LEN + (uint32_t)rng_below(&r, MAX_LEN / 2 + 1);
    c->host_mb = 1;
    c->host_keep = 8 + (uint32_t)rng_below(&r, 56);
    c->chunk_pages = (16 + (uint32_t)rng_below(&r, 49)) / c->page; /* 16 to 64 tokens a chunk */
    if (c->chunk_pages == 0) c->chunk_pages = 1;
    c->max_bytes = rng_below(&r, 2) ? (64u << 10) + rng_below(&r, 512u << 10) : 64u << 20;
    snprintf(s->dir, sizeof s->dir, "%s", tu_tmp_path("engine_random"));
    assert_int_equal(tu_remove_tree(s->dir), 0);
    print_message("seed %llu: page %u, pool %u tokens, host tier %u free slots, disk chunks of %u pages, "
                  "budget %llu KiB, %u requests\n",
                  (unsigned long long)seed, c->page, c->pool, c->host_keep, c->chunk_pages,
                  (unsigned long long)(c->max_bytes >> 10), n_requests);

    engine_opts po = {.n_ctx = MAX_LEN, .page_tokens = c->page, .no_prefix_cache = true};
    if (vk_engine_init(&s->plain, tiny(), &po)) fail_msg("%s", cd_errmsg());
    start_cached(s);
    tu_trace_init(&s->h, &r,
                  &(tu_trace_shape){.sys_len = 128,
                                    .question = 32,
                                    .question_span = 97,
                                    .message_span = 24,
                                    .tool = 30,
                                    .tool_span = 50,
                                    .max_len = MAX_LEN});
    uint32_t n_vocab = tiny()->cfg.n_vocab;
    job *jobs = calloc(MAX_BURST, sizeof *jobs);
    for (uint32_t i = 0; i < MAX_BURST; i++) {
        jobs[i].want_logits = malloc(n_vocab * sizeof(float));
        jobs[i].got_logits = malloc(n_vocab * sizeof(float));
    }
    uint32_t restart_at = n_requests / 3 + (uint32_t)rng_below(&r, n_requests / 3 + 1);
    bool restarted = false;
    char after[96];
    while (s->requests < n_requests) {
        if (!restarted && s->requests >= restart_at) {
            /* a new process on the same directory: only the disk tier is warm, another pool size */
            add_stats(s, &s->cached.stats);
            engine_free(&s->cached);
            c->pool = MAX_LEN + (uint32_t)rng_below(&r, MAX_LEN / 2 + 1);
            print_message("restart after %llu requests: pool %u tokens\n", (unsigned long long)s->requests, c->pool);
            start_cached(s);
            restarted = true;
            check_idle(s, "the restart");
        }
        uint32_t k = rng_below(&r, 4) == 0 ? 2 + (uint32_t)rng_below(&r, MAX_BURST - 1) : 1;
        if (k > n_requests - s->requests) k = (uint32_t)(n_requests - s->requests);
        burst(s, &r, jobs, k);
        snprintf(after, sizeof after, "request %llu", (unsigned long long)s->requests);
        check_idle(s, after);
    }
    add_stats(s, &s->cached.stats);
    print_message("seed %llu: %llu requests (%llu bursts), %llu of %llu prompt tokens cached (%llu from host, %llu "
                  "from disk); %llu pages evicted, %llu demoted; %llu chunks written, %llu evicted for the budget\n",
                  (unsigned long long)seed, (unsigned long long)s->requests, (unsigned long long)s->bursts,
                  (unsigned long long)s->cached_tokens, (unsigned long long)s->prompt_tokens,
                  (unsigned long long)s->restored_tokens, (unsigned long long)s->disk_tokens,
                  (unsigned long long)s->evicted_pages, (unsigned long long)s->demoted_pages,
                  (unsigned long long)s->chunks_written, (unsigned long long)s->disk_evicted);
    assert_true(s->cached_tokens > 0);
    assert_true(s->chunks_written > 0);
    for (uint32_t i = 0; i < MAX_BURST; i++) {
        free(jobs[i].want_logits);
        free(jobs[i].got_logits);
    }
    free(jobs);
    engine_free(&s->cached);
    engine_free(&s->plain);
    assert_int_equal(tu_remove_tree(s->dir), 0);
    free(s);
}

int main(void) {
    const char *env = getenv("CINDER_TEST_SEED");
    seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    const char *n = getenv("CINDER_TEST_REQUESTS");
    if (n && atoi(n) > 0) n_requests = (uint32_t)atoi(n);
    /* first, so a failure (or a crash) can be reproduced */
    fprintf(stderr, "test_engine_random: CINDER_TEST_SEED=%llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_engine),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
