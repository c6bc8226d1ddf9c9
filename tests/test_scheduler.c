/* The continuous-batching scheduler (engine/engine.h) on the tiny preset:
 *
 * - Random interleavings: requests with shared prefixes and different lengths arrive at random
 *   steps, some are cancelled; every completed request's tokens equal the same request run
 *   alone with the cache off (batch invariance + cache invisibility, exact). Afterwards no page
 *   is pinned and every page is either free or held by the cache alone (no leak).
 * - Preemption: a pool too small for every running sequence; all complete with the same tokens.
 * - Dedup: 8 requests with one uncached long prefix, submitted in the same step, prefill it once.
 * - Chunked prefill: while a long prompt is prefilled, a decoding sequence gets a token every step.
 * - Next turn: a chat's next prompt is cached up to its new message (the last page too).
 * - Cancel: pins and pages are released at once; the request's computed KV stays cached.
 * - Per-request sampling: seeded sampled requests (drawn on the device, or on the host for
 *   top_k "all") give the same tokens alone and batched; a device draw is the host sampler's.
 * - Cache salts: the same salt hits, another salt or none misses, the tokens are the same; dedup
 *   pairs only requests of one namespace.
 * - Logit adjustments (logit_bias, presence and frequency penalties): each token is the argmax or
 *   the host sampler's draw over the raw logits adjusted as logit_adjust_apply says; the same
 *   tokens alone and batched with others; bad lists are refused at submit.
 * - JSON objects (response_format json_object): the reply is a prefix of one JSON object and ends
 *   with it (jansson reads it), greedy and sampled, alone and batched alike.
 * - Log-probabilities: each token's and the top_logprobs best are the raw row's (a naive
 *   log-softmax and sort of logits_out); asking for them changes no token, wherever it is drawn.
 * - Prompt log-probabilities: position p's is the raw row of the prompt cut at p, exactly, cached
 *   or not, alone and batched, with max_tokens 0; in the interleavings (preemptions included) one
 *   job in four asks for them and gives those of the request alone.
 * - Errors: empty prompt, prompt past the context, prompt larger than the pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "runtime/text/json_prefix.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#define N_CTX 1280u

static model *tiny(void) {
    static model *m;
    if (!m) {
        const char *path = tu_make_model("sched_tiny.gguf", "tiny", NULL, 21, NULL);
        if (model_load(&m, path, (model_load_opts){0})) fail_msg("%s", cd_errmsg());
    }
    return m;
}

static void init(engine *e, const engine_opts *o) {
    if (vk_engine_init(e, tiny(), o)) fail_msg("%s", cd_errmsg());
}

/* Prompt log-probabilities as a request gives them (engine_request.on_prompt_logprob): every
 * position 1..n-1 once, in order. */
typedef struct prompt_lps {
    token_logprob *lp; /* [n], lp[0] unused */
    uint32_t n, next;  /* next: the position expected next (1 at the start) */
    bool bad;          /* a position came out of order, twice or past the prompt */
} prompt_lps;

static void prompt_lps_init(prompt_lps *l, uint32_t n) {
    *l = (prompt_lps){.lp = calloc(n, sizeof *l->lp), .n = n, .next = 1};
    assert_non_null(l->lp);
}

static void on_prompt_lp(void *ctx, uint32_t pos, const token_logprob *lp) {
    prompt_lps *l = ctx;
    if (pos != l->next || pos >= l->n) {
        l->bad = true;
        return;
    }
    l->lp[pos] = *lp;
    l->next++;
}

static bool lp_equal(const token_logprob *a, const token_logprob *b) {
    if (a->id != b->id || a->logprob != b->logprob || a->rank != b->rank || a->n_top != b->n_top) return false;
    for (uint32_t k = 0; k < a->n_top; k++)
        if (a->top_id[k] != b->top_id[k] || a->top_logprob[k] != b->top_logprob[k]) return false;
    return true;
}

/* Positions [1, upto) of got equal want's (exactly: rows are batch invariant). */
static void assert_prompt_lps(const prompt_lps *got, const prompt_lps *want, uint32_t upto, const char *what) {
    if (got->bad) fail_msg("%s: prompt log-probabilities out of order", what);
    for (uint32_t p = 1; p < upto; p++)
        if (!lp_equal(&got->lp[p], &want->lp[p]))
            fail_msg("%s: prompt position %u: logprob %.9g (token %d), want %.9g (token %d)", what, p,
                     got->lp[p].logprob, got->lp[p].id, want->lp[p].logprob, want->lp[p].id);
}

/* Greedy tokens of one request alone, cache off: the reference (its prompt log-probabilities
 * into lps when not NULL). */
static uint32_t reference_lps(engine *plain, const int32_t *ids, uint32_t n, uint32_t max_tokens, int32_t *out,
                              const sampler_params *sp, prompt_lps *lps) {
    engine_request rq = {.ids = ids,
                         .n = n,
                         .max_tokens = max_tokens,
                         .ignore_eos = true,
                         .sp = sp,
                         .on_prompt_logprob = lps ? on_prompt_lp : NULL,
                         .prompt_top_logprobs = 3,
                         .ctx = lps};
    engine_reply r;
    if (engine_generate(plain, &rq, &r)) fail_msg("%s", cd_errmsg());
    memcpy(out, r.ids, r.n * sizeof *out);
    uint32_t k = r.n;
    engine_reply_free(&r);
    if (lps && lps->next != n) fail_msg("the reference gave %u of %u prompt log-probabilities", lps->next - 1, n - 1);
    return k;
}

static uint32_t reference(engine *plain, const int32_t *ids, uint32_t n, uint32_t max_tokens, int32_t *out,
                          const sampler_params *sp) {
    return reference_lps(plain, ids, n, max_tokens, out, sp, NULL);
}

/* No pin left, and every page either free or held once, by the cache. */
static void assert_no_leak(engine *e) {
    const kv_pages *p = &e->pool.pages;
    if (kv_pages_check(p)) fail_msg("%s", cd_errmsg());
    uint64_t held = 0;
    for (uint32_t i = 0; i < p->n_pages; i++) {
        if (p->ref[i] > 1) fail_msg("page %u has %u holders after every request finished", i, p->ref[i]);
        held += p->ref[i];
    }
    if (e->cache_on) {
        if (radix_check(&e->cache.tree)) fail_msg("%s", cd_errmsg());
        assert_int_equal(e->cache.tree.stats.pinned_pages, 0);
        assert_int_equal(held, e->cache.tree.stats.pages);
    } else {
        assert_int_equal(held, 0);
    }
    assert_int_equal(kv_pages_free_count(p) + held, p->n_pages);
    assert_int_equal(engine_running(e) + engine_waiting(e), 0);
}

typedef struct job {
    int32_t ids[400];
    uint32_t n, max_tokens, arrive, cancel_at; /* steps; cancel_at 0 = never */
    uint32_t handle;
    bool submitted, done;
    int32_t want[64];
    uint32_t n_want;
    uint32_t preempted;
    bool plp;                 /* asks for its prompt's log-probabilities: */
    prompt_lps got, want_lps; /* as it gave them, and as the request alone does */
} job;

/* A prompt: one of three shared system prompts (or none), then a random tail. */
static void make_job(rng *r, const int32_t sys[3][200], job *j) {
    uint32_t k = (uint32_t)rng_below(r, 4), n = 0;
    if (k < 3) {
        n = 40 + (uint32_t)rng_below(r, 160); /* cut anywhere, mid-page included */
        memcpy(j->ids, sys[k], n * sizeof *j->ids);
    }
    uint32_t tail = 1 + (uint32_t)rng_below(r, 60);
    for (uint32_t i = 0; i < tail; i++) j->ids[n + i] = (int32_t)rng_below(r, 150000);
    j->n = n + tail;
    j->max_tokens = 1 + (uint32_t)rng_below(r, 24);
}

/* The next turn of an earlier job's chat: its prompt, its reply, a few new tokens (when they
 * fit); it arrives later. Its prompt continues the earlier job's cached tail. */
static void next_turn(rng *r, const job *prev, job *j) {
    uint32_t extra = 1 + (uint32_t)rng_below(r, 20), n = prev->n + prev->n_want + extra;
    if (n > sizeof j->ids / sizeof j->ids[0]) return;
    memcpy(j->ids, prev->ids, prev->n * sizeof *j->ids);
    memcpy(j->ids + prev->n, prev->want, prev->n_want * sizeof *j->ids);
    for (uint32_t i = prev->n + prev->n_want; i < n; i++) j->ids[i] = (int32_t)rng_below(r, 150000);
    j->n = n;
}

/* Runs the jobs through e (arrivals and cancels at their steps) until all are done. */
static void run_jobs(engine *e, job *jobs, uint32_t n_jobs) {
    uint32_t done = 0;
    for (uint32_t step = 0; done < n_jobs; step++) {
        if (step > 20000) fail_msg("the jobs did not finish in 20000 steps");
        for (uint32_t i = 0; i < n_jobs; i++) {
            job *j = &jobs[i];
            if (!j->submitted && j->arrive <= step) {
                engine_request rq = {.ids = j->ids,
                                     .n = j->n,
                                     .max_tokens = j->max_tokens,
                                     .ignore_eos = true,
                                     .on_prompt_logprob = j->plp ? on_prompt_lp : NULL,
                                     .prompt_top_logprobs = 3,
                                     .ctx = &j->got};
                if (engine_submit(e, &rq, &j->handle)) fail_msg("%s", cd_errmsg());
                j->submitted = true;
            }
            if (j->submitted && !j->done && j->cancel_at && j->cancel_at <= step)
                assert_int_equal(engine_cancel(e, j->handle), 0);
        }
        if (engine_step(e, NULL)) fail_msg("%s", cd_errmsg());
        for (uint32_t i = 0; i < n_jobs; i++) {
            job *j = &jobs[i];
            engine_reply r;
            if (!j->submitted || j->done) continue;
            int got = engine_poll(e, j->handle, &r);
            if (got < 0) fail_msg("%s", cd_errmsg());
            if (!got) continue;
            j->done = true;
            j->preempted = r.preempted;
            done++;
            if (j->plp) assert_prompt_lps(&j->got, &j->want_lps, j->got.next, "a job");
            if (r.finish == ENGINE_CANCELLED) {
                assert_true(r.n <= j->n_want);
                assert_memory_equal(r.ids, j->want, r.n * sizeof *r.ids); /* what it got so far is right */
            } else {
                if (j->plp && j->got.next != j->n)
                    fail_msg("job %u gave %u of its %u prompt log-probabilities", i, j->got.next - 1, j->n - 1);
                assert_int_equal(r.finish, ENGINE_LENGTH);
                assert_int_equal(r.cached_tokens + r.prefilled_tokens,
                                 j->n); /* recomputing after a preemption is apart */
                if (r.n != j->n_want || memcmp(r.ids, j->want, r.n * sizeof *r.ids))
                    fail_msg("job %u (%u tokens, %u cached, preempted %u): tokens differ from the request alone", i,
                             j->n, r.cached_tokens, r.preempted);
            }
            engine_reply_free(&r);
        }
    }
}

/* ---- speculative decoding (engine_opts.spec_tokens) ----
 * An oracle guesser knows each request's reply without guessing (its prompt and tokens) and
 * guesses it, spoiling one guess in three (a token in its middle), so guesses are kept whole,
 * kept in part and dropped, on tiny's random weights, where every token's K/V matters; one in
 * eleven ends with an id outside the vocabulary (the engine guesses up to it). */
#define ORACLE_MAX 40
typedef struct oracle_entry {
    const int32_t *prompt, *want;
    uint32_t n_prompt, n_want;
} oracle_entry;
static oracle_entry oracle[ORACLE_MAX];
static uint32_t n_oracle, oracle_calls;

static uint32_t oracle_guess(void *ctx, const int32_t *toks, uint32_t n, uint32_t k_max, int32_t *out) {
    (void)ctx;
    const oracle_entry *best = NULL;
    for (uint32_t i = 0; i < n_oracle; i++) { /* the longest prompt the sequence begins with, then its reply */
        const oracle_entry *o = &oracle[i];
        if (o->n_prompt > n || n - o->n_prompt > o->n_want || (best && best->n_prompt >= o->n_prompt)) continue;
        if (!memcmp(toks, o->prompt, o->n_prompt * sizeof *toks) &&
            !memcmp(toks + o->n_prompt, o->want, (n - o->n_prompt) * sizeof *toks))
            best = o;
    }
    if (!best) return 0;
    uint32_t g = n - best->n_prompt, k = best->n_want - g < k_max ? best->n_want - g : k_max;
    memcpy(out, best->want + g, k * sizeof *out);
    uint32_t call = oracle_calls++;
    if (k && call % 3 == 1) out[k / 2] = (out[k / 2] + 1) % 1000;  /* wrong from there on */
    if (k && call % 11 == 5) out[k - 1] = call % 2 ? -7 : 1 << 30; /* not a token: the engine drops it */
    return k;
}

static void interleavings(uint32_t page, uint32_t pool, uint32_t max_seqs, uint32_t chunk, uint64_t seed,
                          uint32_t n_jobs, bool expect_preempt, uint32_t spec) {
    rng r;
    rng_seed(&r, seed);
    int32_t sys[3][200];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 200; i++) sys[k][i] = (int32_t)rng_below(&r, 150000);
    job *jobs = calloc(n_jobs, sizeof *jobs);
    engine plain;
    engine_opts po = {.n_ctx = N_CTX, .page_tokens = page, .no_prefix_cache = true};
    init(&plain, &po);
    rng r_lp; /* who asks for prompt log-probabilities (one in four; one in three of those only them) */
    rng_seed(&r_lp, seed * 977 + 5);
    for (uint32_t i = 0; i < n_jobs; i++) {
        job *j = &jobs[i];
        make_job(&r, sys, j);
        if (i && rng_below(&r, 4) == 0) next_turn(&r, &jobs[rng_below(&r, i)], j);
        j->arrive = (uint32_t)rng_below(&r, 3 * n_jobs);
        if (rng_below(&r, 6) == 0) j->cancel_at = j->arrive + (uint32_t)rng_below(&r, 8);
        j->plp = rng_below(&r_lp, 4) == 0;
        if (j->plp && rng_below(&r_lp, 3) == 0) j->max_tokens = 0;
        if (j->plp) prompt_lps_init(&j->got, j->n), prompt_lps_init(&j->want_lps, j->n);
        j->n_want = reference_lps(&plain, j->ids, j->n, j->max_tokens, j->want, NULL, j->plp ? &j->want_lps : NULL);
    }
    engine_free(&plain);
    engine e;
    engine_opts o = {.n_ctx = N_CTX,
                     .pool_tokens = pool,
                     .page_tokens = page,
                     .max_seqs = max_seqs,
                     .chunk_tokens = chunk,
                     .spec_tokens = spec,
                     .guess = oracle_guess};
    n_oracle = 0;
    for (uint32_t i = 0; i < n_jobs && i < ORACLE_MAX; i++)
        oracle[n_oracle++] = (oracle_entry){jobs[i].ids, jobs[i].want, jobs[i].n, jobs[i].n_want};
    init(&e, &o);
    run_jobs(&e, jobs, n_jobs);
    print_message(
        "page %u, pool %u, %u seqs, chunk %u: %u jobs, %llu steps, %llu cached of %llu prompt tokens, "
        "%llu preempted (%llu tokens recomputed), %llu cancelled, %llu dedup tokens, %llu of %llu guesses kept\n",
        page, pool, max_seqs, chunk, n_jobs, (unsigned long long)e.stats.steps,
        (unsigned long long)e.stats.cached_tokens, (unsigned long long)e.stats.prompt_tokens,
        (unsigned long long)e.stats.preempted, (unsigned long long)e.stats.recomputed_tokens,
        (unsigned long long)e.stats.cancelled, (unsigned long long)e.stats.dedup_tokens,
        (unsigned long long)e.stats.accepted_tokens, (unsigned long long)e.stats.draft_tokens);
    uint32_t plp = 0, plp_preempted = 0;
    for (uint32_t i = 0; i < n_jobs; i++) plp += jobs[i].plp, plp_preempted += jobs[i].plp && jobs[i].preempted;
    print_message("%u jobs asked for prompt log-probabilities, %u of them were preempted\n", plp, plp_preempted);
    assert_true(e.stats.cached_tokens > 0);
    if (spec) assert_true(e.stats.accepted_tokens > 0);
    if (expect_preempt) assert_true(e.stats.preempted > 0);
    assert_no_leak(&e);
    engine_free(&e);
    for (uint32_t i = 0; i < n_jobs; i++) free(jobs[i].got.lp), free(jobs[i].want_lps.lp);
    free(jobs);
}

static void test_interleavings(void **state) {
    (void)state;
    interleavings(16, 8192, 8, 96, 1, 20, false, 0);
}

static void test_interleavings_page4(void **state) {
    (void)state;
    interleavings(4, 4096, 5, 37, 2, 16, false, 0);
}

/* A pool a third of what the running sequences want: the youngest are preempted and resume. */
static void test_preemption(void **state) {
    (void)state;
    interleavings(16, 512, 8, 128, 3, 16, true, 0);
}

/* The same with speculative decoding: guesses among arrivals, cancels, preemptions and cache
 * hits change no token (run_jobs compares each with the request alone, without guessing). */
static void test_preemption_speculative(void **state) {
    (void)state;
    interleavings(16, 512, 8, 128, 3, 16, true, 4);
    interleavings(4, 4096, 5, 37, 2, 16, false, 3);
}

static void random_ids(rng *r, int32_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)rng_below(r, 150000);
}

/* 8 requests sharing one uncached 1,000-token prefix, submitted together: it is prefilled once. */
static void test_dedup(void **state) {
    (void)state;
    enum { N = 8, PREFIX = 1000, TAIL = 9 };
    rng r;
    rng_seed(&r, 4);
    int32_t ids[N][PREFIX + TAIL];
    random_ids(&r, ids[0], PREFIX + TAIL);
    for (int i = 1; i < N; i++) {
        memcpy(ids[i], ids[0], PREFIX * sizeof(int32_t));
        random_ids(&r, ids[i] + PREFIX, TAIL);
    }
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = N, .chunk_tokens = 256};
    init(&e, &o);
    uint32_t h[N];
    for (int i = 0; i < N; i++) {
        engine_request rq = {.ids = ids[i], .n = PREFIX + TAIL, .max_tokens = 4, .ignore_eos = true};
        if (engine_submit(&e, &rq, &h[i])) fail_msg("%s", cd_errmsg());
    }
    uint32_t busy = 1;
    while (busy)
        if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
    uint64_t prefilled = 0;
    for (int i = 0; i < N; i++) {
        engine_reply rp;
        assert_int_equal(engine_poll(&e, h[i], &rp), 1);
        prefilled += rp.prefilled_tokens;
        engine_reply_free(&rp);
    }
    /* once: the prefix (1,000 tokens) + each tail (and the partial page the prefix ends in) */
    uint64_t bound = PREFIX + N * (TAIL + 16);
    print_message("dedup: %llu prompt tokens prefilled for %u requests (bound %llu), dedup saved %llu\n",
                  (unsigned long long)prefilled, N, (unsigned long long)bound,
                  (unsigned long long)e.stats.dedup_tokens);
    assert_true(prefilled <= bound);
    assert_true(e.stats.dedup_tokens >= (uint64_t)(N - 1) * (PREFIX - 16));
    assert_no_leak(&e);
    engine_free(&e);
}

typedef struct watch {
    engine *e;
    uint64_t last_step, max_gap;
    uint32_t tokens;
} watch;

static bool on_token(void *ctx, int32_t id) {
    (void)id;
    watch *w = ctx;
    if (w->tokens++ && w->e->stats.steps - w->last_step > w->max_gap) w->max_gap = w->e->stats.steps - w->last_step;
    w->last_step = w->e->stats.steps;
    return true;
}

/* A running stream keeps getting a token every step while a 1,100-token prompt is prefilled in
 * chunks of 128. */
static void test_chunked_prefill(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 5);
    int32_t a[20], b[1100];
    random_ids(&r, a, 20);
    random_ids(&r, b, 1100);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 2, .chunk_tokens = 128};
    init(&e, &o);
    watch w = {.e = &e};
    engine_request ra = {.ids = a, .n = 20, .max_tokens = 30, .ignore_eos = true, .on_token = on_token, .ctx = &w};
    engine_request rb = {.ids = b, .n = 1100, .max_tokens = 2, .ignore_eos = true};
    uint32_t ha, hb;
    if (engine_submit(&e, &ra, &ha) || engine_step(&e, NULL) || engine_submit(&e, &rb, &hb))
        fail_msg("%s", cd_errmsg());
    engine_reply rpa, rpb;
    uint32_t steps_b = 0;
    for (;;) {
        if (engine_step(&e, NULL)) fail_msg("%s", cd_errmsg());
        int got = engine_poll(&e, hb, &rpb);
        steps_b++;
        if (got) break;
    }
    assert_true(steps_b >= 1100 / 128); /* it was chunked */
    uint32_t busy = 1;
    while (busy)
        if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
    assert_int_equal(engine_poll(&e, ha, &rpa), 1);
    print_message("chunked prefill: b took %u steps; a got %u tokens, the longest gap %llu step(s)\n", steps_b,
                  w.tokens, (unsigned long long)w.max_gap);
    assert_int_equal(w.tokens, 30);
    assert_int_equal(w.max_gap, 1);
    engine_reply_free(&rpa);
    engine_reply_free(&rpb);
    assert_no_leak(&e);
    engine_free(&e);
}

/* A chat's next turn (its prompt = the last prompt + the reply + a new message) is served from
 * the cache up to the reply's last computed token: the previous turn's partly filled last page
 * is cached (radix.h, Tails). Every turn's tokens equal the uncached run's. */
static void test_next_turn(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 12);
    int32_t ids[400], want[16];
    uint32_t n = 37; /* mid-page at 16 tokens per page */
    random_ids(&r, ids, n);
    engine plain, e;
    engine_opts po = {.n_ctx = N_CTX, .no_prefix_cache = true}, o = {.n_ctx = N_CTX, .max_seqs = 2};
    init(&plain, &po);
    init(&e, &o);
    for (int turn = 0; turn < 4; turn++) {
        uint32_t max = 5 + 3 * (uint32_t)turn, n_want = reference(&plain, ids, n, max, want, NULL);
        engine_request rq = {.ids = ids, .n = n, .max_tokens = max, .ignore_eos = true};
        engine_reply rp;
        if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
        assert_int_equal(rp.n, n_want);
        assert_memory_equal(rp.ids, want, n_want * sizeof *want);
        if (turn) assert_int_equal(rp.cached_tokens, n - 4); /* all but the new message */
        else assert_int_equal(rp.cached_tokens, 0);
        /* the next prompt: this one, the reply, 4 new tokens; the reply's last token was never
         * fed to the model, so it is the first token to compute along with the new ones */
        memcpy(ids + n, rp.ids, rp.n * sizeof *ids);
        n += rp.n;
        random_ids(&r, ids + n, 3);
        n += 3;
        engine_reply_free(&rp);
    }
    assert_true(e.cache.tree.stats.dropped_tails > 0); /* each turn's tail gave way to the next */
    assert_no_leak(&e);
    engine_free(&e);
    engine_free(&plain);
}

/* Cancel mid-decode: no pin and no page of it left but what the cache keeps; a later request
 * with the same prompt hits the cache. */
static void test_cancel(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 6);
    int32_t a[100];
    random_ids(&r, a, 100);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4};
    init(&e, &o);
    engine_request rq = {.ids = a, .n = 100, .max_tokens = 50, .ignore_eos = true};
    uint32_t h;
    if (engine_submit(&e, &rq, &h)) fail_msg("%s", cd_errmsg());
    for (int i = 0; i < 5; i++)
        if (engine_step(&e, NULL)) fail_msg("%s", cd_errmsg());
    assert_int_equal(engine_cancel(&e, h), 0);
    assert_int_equal(engine_running(&e), 0);
    assert_int_equal(e.cache.tree.stats.pinned_pages, 0);
    engine_reply rp;
    assert_int_equal(engine_poll(&e, h, &rp), 1);
    assert_int_equal(rp.finish, ENGINE_CANCELLED);
    assert_int_equal(rp.n, 5);
    engine_reply_free(&rp);
    assert_no_leak(&e);
    assert_int_equal(engine_cancel(&e, h), -1); /* handed back: unknown now */
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    assert_int_equal(rp.cached_tokens, 99); /* all but the last token: the partly filled last page too */
    engine_reply_free(&rp);
    engine_free(&e);
}

/* Seeded sampled requests: the same tokens alone and batched with each other and a greedy
 * one: a request with top_k 40 (drawn where `draw` says) and one drawn on the host (top_k "all"). */
static void sampling_batched(int draw) {
    rng r;
    rng_seed(&r, 7);
    int32_t a[30], b[45], c[12];
    random_ids(&r, a, 30);
    random_ids(&r, b, 45);
    random_ids(&r, c, 12);
    sampler_params sa = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1234};
    sampler_params sb = {.temperature = 1.0f, .top_k = 0, .top_p = 0.9f, .seed = 5};
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 3, .draw = draw};
    init(&e, &o);
    assert_int_equal(e.draw_on_device, draw == ENGINE_DRAW_DEVICE);
    int32_t alone_a[20], alone_b[20], other[20];
    uint32_t n_a = reference(&e, a, 30, 20, alone_a, &sa), n_b = reference(&e, b, 45, 20, alone_b, &sb);
    engine_request ra = {.ids = a, .n = 30, .max_tokens = 20, .ignore_eos = true, .sp = &sa};
    engine_request rb = {.ids = b, .n = 45, .max_tokens = 20, .ignore_eos = true, .sp = &sb};
    engine_request rc = {.ids = c, .n = 12, .max_tokens = 20, .ignore_eos = true};
    uint32_t ha, hb, hc;
    if (engine_submit(&e, &rc, &hc) || engine_step(&e, NULL) || engine_submit(&e, &ra, &ha) || engine_step(&e, NULL) ||
        engine_submit(&e, &rb, &hb))
        fail_msg("%s", cd_errmsg());
    uint32_t busy = 1;
    while (busy)
        if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
    engine_reply rp;
    assert_int_equal(engine_poll(&e, ha, &rp), 1);
    assert_int_equal(rp.n, n_a);
    assert_memory_equal(rp.ids, alone_a, n_a * sizeof *alone_a);
    engine_reply_free(&rp);
    assert_int_equal(engine_poll(&e, hb, &rp), 1);
    assert_int_equal(rp.n, n_b);
    assert_memory_equal(rp.ids, alone_b, n_b * sizeof *alone_b);
    engine_reply_free(&rp);
    assert_int_equal(engine_poll(&e, hc, &rp), 1);
    engine_reply_free(&rp);
    /* another seed gives other tokens (the seed is really used) */
    sa.seed = 99;
    assert_int_equal(reference(&e, a, 30, 20, other, &sa), 20);
    assert_true(memcmp(other, alone_a, sizeof other) != 0);
    engine_free(&e);
}

static void test_sampling_batched(void **state) {
    (void)state;
    sampling_batched(ENGINE_DRAW_DEVICE);
    sampling_batched(ENGINE_DRAW_HOST);
}

/* The host's sampler over the same logits, drawing from the same seed, step by step. */
typedef struct draw_check {
    sampler host;
    const float *logits;
    uint32_t draws, differ, not_argmax;
} draw_check;

static bool check_draw(void *ctx, int32_t id) {
    draw_check *d = ctx;
    int32_t want = sampler_sample(&d->host, d->logits);
    d->draws++;
    d->differ += want != id;
    d->not_argmax += id != sampler_argmax(d->logits, d->host.n_vocab);
    return true;
}

/* A token drawn on the device is the one sampler_sample draws from the same logits and seed
 * (but within float rounding of a boundary between two tokens: the GPU sums in float). */
static void test_sampling_on_device(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 11);
    const model *m = tiny();
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4, .draw = ENGINE_DRAW_DEVICE};
    init(&e, &o);
    assert_true(e.draw_on_device);
    const sampler_params sps[] = {{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 3},
                                  {.temperature = 1.5f, .top_k = CVK_SAMPLE_MAX_K, .top_p = 1.0f, .seed = 4},
                                  {.temperature = 0.3f, .top_k = 1, .top_p = 0.5f, .seed = 5}};
    /* the largest k takes k barrier-separated rounds per draw (~0.35 s a draw on lavapipe): few */
    const uint32_t n_draws[] = {56, 8, 56};
    float *logits = malloc((size_t)m->cfg.n_vocab * sizeof *logits);
    uint32_t draws = 0, differ = 0, not_argmax = 0;
    for (size_t k = 0; k < sizeof sps / sizeof *sps; k++) {
        int32_t ids[25];
        random_ids(&r, ids, 25);
        draw_check d = {.logits = logits};
        if (sampler_init(&d.host, sps[k], (int32_t)m->cfg.n_vocab)) fail_msg("%s", cd_errmsg());
        engine_request rq = {.ids = ids,
                             .n = 25,
                             .max_tokens = n_draws[k],
                             .ignore_eos = true,
                             .sp = &sps[k],
                             .on_token = check_draw,
                             .ctx = &d,
                             .logits_out = logits};
        engine_reply rp;
        if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
        assert_int_equal(d.draws, rp.n);
        engine_reply_free(&rp);
        sampler_free(&d.host);
        draws += d.draws, differ += d.differ, not_argmax += d.not_argmax;
    }
    printf("  %u device draws, %u not the argmax, %u differ from the host's\n", draws, not_argmax, differ);
    assert_int_equal(draws, 120);
    assert_true(differ * 50 <= draws);
    assert_true(not_argmax >= 6); /* the draws do sample (tiny's logits are peaked: few leave the argmax; 12 here) */
    free(logits);
    engine_free(&e);
}

/* One greedy request with a cache salt, start to end; its tokens into out (the first call) or
 * compared with out. Returns its cached tokens. */
static uint32_t salted(engine *e, const int32_t *ids, uint32_t n, const char *salt, int32_t *out, uint32_t *n_out) {
    engine_request rq = {.ids = ids, .n = n, .max_tokens = 6, .ignore_eos = true, .cache_salt = salt};
    engine_reply rp;
    if (engine_generate(e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    if (!*n_out) {
        memcpy(out, rp.ids, rp.n * sizeof *out);
        *n_out = rp.n;
    }
    assert_int_equal(rp.n, *n_out);
    if (memcmp(rp.ids, out, rp.n * sizeof *out)) fail_msg("salt %s: other tokens than the first request's", salt);
    uint32_t cached = rp.cached_tokens;
    engine_reply_free(&rp);
    return cached;
}

/* Submits two requests for ids in one step and steps once: how many run (the second waits when
 * it is paired with the first's prefill). Then runs both to the end; their cached tokens. */
static uint32_t pair_run(engine *e, const int32_t *ids, uint32_t n, const char *sa, const char *sb,
                         uint32_t cached[2]) {
    engine_request ra = {.ids = ids, .n = n, .max_tokens = 2, .ignore_eos = true, .cache_salt = sa};
    engine_request rb = ra;
    rb.cache_salt = sb;
    uint32_t h[2], busy = 1;
    if (engine_submit(e, &ra, &h[0]) || engine_submit(e, &rb, &h[1]) || engine_step(e, NULL))
        fail_msg("%s", cd_errmsg());
    uint32_t running = engine_running(e);
    while (busy)
        if (engine_step(e, &busy)) fail_msg("%s", cd_errmsg());
    for (int i = 0; i < 2; i++) {
        engine_reply rp;
        assert_int_equal(engine_poll(e, h[i], &rp), 1);
        cached[i] = rp.cached_tokens;
        engine_reply_free(&rp);
    }
    return running;
}

/* Cache salts (engine_request.cache_salt): isolation in pairs. */
static void test_cache_salt(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 8);
    int32_t a[100], b[300], c[300], want[8];
    random_ids(&r, a, 100);
    random_ids(&r, b, 300);
    random_ids(&r, c, 300);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 2};
    init(&e, &o);
    uint32_t n_want = 0;
    assert_int_equal(salted(&e, a, 100, "a", want, &n_want), 0);
    assert_int_equal(salted(&e, a, 100, "a", want, &n_want), 99); /* the same salt hits (all but the last token) */
    assert_int_equal(salted(&e, a, 100, "b", want, &n_want), 0);  /* another salt misses */
    assert_int_equal(salted(&e, a, 100, NULL, want, &n_want), 0); /* so does none */
    assert_int_equal(salted(&e, a, 100, "b", want, &n_want), 99); /* each hits its own */
    assert_int_equal(salted(&e, a, 100, NULL, want, &n_want), 99);
    assert_int_equal(salted(&e, a, 100, "", want, &n_want), 99); /* empty: no salt */
    assert_int_equal(salted(&e, a, 100, "a", want, &n_want), 99);
    /* dedup: requests of two salts both run at once and both compute the prefix; two of one
     * salt are paired (the second waits for the first's prefill, then hits it) */
    uint32_t cached[2];
    uint64_t dedup0 = e.stats.dedup_tokens;
    assert_int_equal(pair_run(&e, b, 300, "x", "y", cached), 2);
    assert_int_equal(cached[0], 0);
    assert_int_equal(cached[1], 0);
    assert_int_equal(e.stats.dedup_tokens, dedup0);
    assert_int_equal(pair_run(&e, c, 300, "x", "x", cached), 1);
    assert_int_equal(cached[0], 0);
    assert_int_equal(cached[1], 288);
    assert_int_equal(e.stats.dedup_tokens, dedup0 + 288);
    assert_no_leak(&e);
    engine_free(&e);
}

/* Each token chosen under a logit_adjust, checked as it comes: the argmax (greedy) or the host
 * sampler's draw (same seed) over the raw logits (logits_out) adjusted for the tokens so far. */
typedef struct adjust_check {
    const logit_adjust *a;
    const float *raw;
    float *row;
    uint32_t *count;
    int32_t n_vocab;
    int32_t gen[64];
    uint32_t n, differ, not_raw_argmax;
    sampler host;
    bool sample;
} adjust_check;

static bool check_adjusted(void *ctx, int32_t id) {
    adjust_check *c = ctx;
    memcpy(c->row, c->raw, (size_t)c->n_vocab * sizeof *c->row);
    logit_adjust_apply(c->a, c->gen, c->n, c->row, c->n_vocab, c->count);
    int32_t want = c->sample ? sampler_sample(&c->host, c->row) : sampler_argmax(c->row, c->n_vocab);
    c->differ += want != id;
    c->not_raw_argmax += id != sampler_argmax(c->raw, c->n_vocab);
    if (c->n < 64) c->gen[c->n++] = id;
    return true;
}

/* One request under adjustment a, start to end, every token checked (above); its tokens to out. */
static uint32_t adjusted_run(engine *e, const int32_t *ids, uint32_t n, const sampler_params *sp, const logit_adjust *a,
                             int32_t *out) {
    const model *m = tiny();
    int32_t V = (int32_t)m->cfg.n_vocab;
    float *raw = malloc((size_t)V * sizeof *raw), *row = malloc((size_t)V * sizeof *row);
    uint32_t *count = calloc((size_t)V, sizeof *count);
    assert_true(raw && row && count);
    adjust_check c = {.a = a, .raw = raw, .row = row, .count = count, .n_vocab = V, .sample = sp->temperature > 0};
    if (c.sample && sampler_init(&c.host, *sp, V)) fail_msg("%s", cd_errmsg());
    engine_request rq = {.ids = ids,
                         .n = n,
                         .max_tokens = 40,
                         .ignore_eos = true,
                         .sp = sp,
                         .adjust = a,
                         .on_token = check_adjusted,
                         .ctx = &c,
                         .logits_out = raw};
    engine_reply rp;
    if (engine_generate(e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    assert_int_equal(rp.n, 40);
    assert_int_equal(c.n, 40);
    assert_int_equal(c.differ, 0);
    assert_true(c.not_raw_argmax > 0); /* the adjustment changed the choice somewhere */
    memcpy(out, rp.ids, rp.n * sizeof *out);
    engine_reply_free(&rp);
    sampler_free(&c.host);
    free(raw), free(row), free(count);
    return 40;
}

static void test_logit_adjust(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 31);
    int32_t a[37], b[52], plain[40], first[40], alone_g[40], alone_s[40], alone_b[40];
    random_ids(&r, a, 37);
    random_ids(&r, b, 52);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4, .draw = ENGINE_DRAW_DEVICE};
    init(&e, &o);
    const sampler_params greedy = {0}, hot = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 17};
    assert_int_equal(reference(&e, a, 37, 40, plain, &greedy), 40);
    /* greedy: the plain reply's first token banned, tokens repeated are penalized */
    logit_bias ban[] = {{plain[0], -100}};
    const logit_adjust ag = {.presence = 1.5f, .frequency = 2, .bias = ban, .n_bias = 1};
    adjusted_run(&e, a, 37, &greedy, &ag, alone_g);
    assert_int_not_equal(alone_g[0], plain[0]);
    /* sampled: a push towards one token, and a frequency penalty */
    logit_bias push[] = {{7, 6}, {(int32_t)tiny()->cfg.n_vocab - 1, -3}};
    const logit_adjust as = {.frequency = 1.2f, .bias = push, .n_bias = 2};
    adjusted_run(&e, a, 37, &hot, &as, alone_s);
    /* the same three together (one plain): each gives its tokens alone */
    assert_int_equal(reference(&e, b, 52, 40, alone_b, &greedy), 40);
    engine_request rq[3] = {{.ids = a, .n = 37, .max_tokens = 40, .ignore_eos = true, .sp = &greedy, .adjust = &ag},
                            {.ids = a, .n = 37, .max_tokens = 40, .ignore_eos = true, .sp = &hot, .adjust = &as},
                            {.ids = b, .n = 52, .max_tokens = 40, .ignore_eos = true, .sp = &greedy}};
    const int32_t *want[3] = {alone_g, alone_s, alone_b};
    uint32_t h[3], busy = 1;
    for (int i = 0; i < 3; i++)
        if (engine_submit(&e, &rq[i], &h[i])) fail_msg("%s", cd_errmsg());
    while (busy)
        if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
    for (int i = 0; i < 3; i++) {
        engine_reply rp;
        assert_int_equal(engine_poll(&e, h[i], &rp), 1);
        assert_int_equal(rp.n, 40);
        assert_memory_equal(rp.ids, want[i], 40 * sizeof *rp.ids);
        if (i == 0) memcpy(first, rp.ids, sizeof first);
        engine_reply_free(&rp);
    }
    assert_true(memcmp(first, plain, sizeof plain) != 0);
    /* refused at submit, naming the problem */
    logit_bias far[] = {{(int32_t)tiny()->cfg.n_vocab, 1}};
    const logit_adjust bad[] = {{.bias = far, .n_bias = 1}, {.presence = 3}};
    const char *msg[] = {"vocabulary", "presence_penalty"};
    for (int i = 0; i < 2; i++) {
        engine_request q = {.ids = a, .n = 37, .max_tokens = 4, .adjust = &bad[i]};
        assert_int_equal(engine_submit(&e, &q, &h[0]), -1);
        assert_non_null(strstr(cd_errmsg(), msg[i]));
    }
    assert_no_leak(&e);
    engine_free(&e);
}

/* Each token's token_logprob against the raw row (logits_out, written before the callback): a
 * log-softmax in double and a full sort written out here. */
typedef struct logprob_check {
    const float *raw;
    int32_t n_vocab;
    uint32_t top, calls, tokens;
    int32_t last; /* the id reported, for the token callback */
    double worst; /* largest |logprob - reference| */
    bool bad;
} logprob_check;

static int32_t *sort_by;
static const float *sort_row;
static int desc_by_value(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_row[x] != sort_row[y]) return sort_row[x] > sort_row[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void check_logprob(void *ctx, const token_logprob *lp) {
    logprob_check *c = ctx;
    double m = -1e300, sum = 0;
    for (int32_t i = 0; i < c->n_vocab; i++) m = c->raw[i] > m ? c->raw[i] : m;
    for (int32_t i = 0; i < c->n_vocab; i++) sum += exp((double)c->raw[i] - m);
    double lse = m + log(sum), d = fabs(lp->logprob - (c->raw[lp->id] - lse));
    c->worst = d > c->worst ? d : c->worst;
    for (int32_t i = 0; i < c->n_vocab; i++) sort_by[i] = i;
    sort_row = c->raw;
    qsort(sort_by, (size_t)c->n_vocab, sizeof *sort_by, desc_by_value);
    if (lp->n_top != c->top || lp->logprob > 0) c->bad = true;
    for (uint32_t i = 0; i < lp->n_top && i < TOP_LOGPROBS_MAX; i++) {
        if (lp->top_id[i] != sort_by[i]) c->bad = true;
        d = fabs(lp->top_logprob[i] - (c->raw[sort_by[i]] - lse));
        c->worst = d > c->worst ? d : c->worst;
    }
    c->last = lp->id;
    c->calls++;
}

static bool logprob_token(void *ctx, int32_t id) {
    logprob_check *c = ctx;
    if (id != c->last) c->bad = true; /* reported just before, for the same token */
    c->tokens++;
    return true;
}

static void test_logprobs(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 44);
    int32_t a[29];
    random_ids(&r, a, 29);
    const model *m = tiny();
    int32_t V = (int32_t)m->cfg.n_vocab;
    float *raw = malloc((size_t)V * sizeof *raw);
    sort_by = malloc((size_t)V * sizeof *sort_by);
    assert_true(raw && sort_by);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4, .draw = ENGINE_DRAW_DEVICE};
    init(&e, &o);
    logit_bias push[] = {{11, 4}};
    const logit_adjust adj = {.frequency = 1, .bias = push, .n_bias = 1};
    const sampler_params sps[] = {{0},
                                  {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 5},
                                  {.temperature = 1.1f, .top_k = 0, .top_p = 1, .seed = 6}};
    const uint32_t tops[] = {0, 5, TOP_LOGPROBS_MAX};
    for (size_t k = 0; k < 3; k++)
        for (int adjusted = 0; adjusted < 2; adjusted++) {
            engine_request rq = {.ids = a,
                                 .n = 29,
                                 .max_tokens = 12,
                                 .ignore_eos = true,
                                 .sp = &sps[k],
                                 .adjust = adjusted ? &adj : NULL};
            int32_t plain[12], with[12];
            engine_reply rp;
            if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
            memcpy(plain, rp.ids, sizeof plain);
            engine_reply_free(&rp);
            logprob_check c = {.raw = raw, .n_vocab = V, .top = tops[k]};
            rq.on_logprob = check_logprob, rq.on_token = logprob_token, rq.ctx = &c, rq.logits_out = raw;
            rq.top_logprobs = tops[k];
            if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
            memcpy(with, rp.ids, sizeof with);
            engine_reply_free(&rp);
            assert_memory_equal(with, plain, sizeof plain); /* asking changes no token */
            assert_int_equal(c.calls, 12);
            assert_int_equal(c.tokens, 12);
            assert_false(c.bad);
            assert_true(c.worst < 1e-5);
        }
    engine_request big = {.ids = a, .n = 29, .max_tokens = 2, .top_logprobs = TOP_LOGPROBS_MAX + 1};
    uint32_t h;
    assert_int_equal(engine_submit(&e, &big, &h), -1);
    assert_non_null(strstr(cd_errmsg(), "top_logprobs"));
    free(raw), free(sort_by);
    engine_free(&e);
}

/* Prompt log-probabilities (engine_request.on_prompt_logprob): position p's is a[p]'s under the
 * raw row of the prompt a[0..p) (a request of its own, logits_out), exactly; given whole over
 * several passes (149 rows, 64 a pass), when the prompt is cached (computed all the same),
 * batched with decoding requests and another such request (the rows a pass has are shared), with
 * the sampled tokens unchanged; max_tokens 0 gives the prompt's and caches it. */
static void test_prompt_logprobs(void **state) {
    (void)state;
    enum { NA = 150, NC = 90, TOP = 3 };
    rng r;
    rng_seed(&r, 45);
    int32_t a[NA + 5], b[20], c[NC];
    random_ids(&r, a, NA + 5);
    random_ids(&r, b, 20);
    random_ids(&r, c, NC);
    const model *m = tiny();
    int32_t V = (int32_t)m->cfg.n_vocab;
    float *raw = malloc((size_t)V * sizeof *raw);
    assert_non_null(raw);
    prompt_lps oracle, got, got_c, want_c;
    prompt_lps_init(&oracle, NA);
    engine ref;
    engine_opts ro = {.n_ctx = N_CTX};
    init(&ref, &ro);
    for (uint32_t p = 1; p < NA; p++) { /* the row after a[0..p) */
        engine_request rq = {.ids = a, .n = p, .max_tokens = 1, .ignore_eos = true, .logits_out = raw};
        engine_reply rp;
        if (engine_generate(&ref, &rq, &rp)) fail_msg("%s", cd_errmsg());
        engine_reply_free(&rp);
        sampler_logprob(raw, V, a[p], TOP, &oracle.lp[p]);
    }
    engine_free(&ref);

    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4, .draw = ENGINE_DRAW_DEVICE};
    init(&e, &o);
    /* hot enough that tiny's peaked rows do not always give the argmax: the draws matter */
    const sampler_params sampled = {.temperature = 2.0f, .top_k = 40, .top_p = 1.0f, .seed = 8};
    int32_t plain[12], plain_b[12], greedy[12];
    engine_request rq = {.ids = a, .n = NA, .max_tokens = 12, .ignore_eos = true};
    engine_reply rp;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg()); /* also caches a's prompt */
    memcpy(greedy, rp.ids, sizeof greedy);
    engine_reply_free(&rp);
    rq.sp = &sampled;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    memcpy(plain, rp.ids, sizeof plain);
    engine_reply_free(&rp);
    assert_memory_not_equal(plain, greedy, sizeof plain);
    engine_request rb = {.ids = b, .n = 20, .max_tokens = 12, .ignore_eos = true, .sp = &sampled};
    if (engine_generate(&e, &rb, &rp)) fail_msg("%s", cd_errmsg());
    memcpy(plain_b, rp.ids, sizeof plain_b);
    engine_reply_free(&rp);
    prompt_lps_init(&want_c, NC);
    engine_request rc = {
        .ids = c, .n = NC, .max_tokens = 3, .ignore_eos = true, .on_prompt_logprob = on_prompt_lp, .ctx = &want_c};
    if (engine_generate(&e, &rc, &rp)) fail_msg("%s", cd_errmsg());
    engine_reply_free(&rp);

    /* alone, with a's prompt cached: all of it is computed and given */
    prompt_lps_init(&got, NA);
    rq.on_prompt_logprob = on_prompt_lp, rq.prompt_top_logprobs = TOP, rq.ctx = &got;
    uint64_t scored0 = e.stats.scored_tokens;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    assert_int_equal(got.next, NA);
    assert_int_equal(e.stats.scored_tokens - scored0, NA - 1);
    assert_prompt_lps(&got, &oracle, NA, "alone");
    assert_int_equal(rp.cached_tokens, 0);
    assert_int_equal(rp.prefilled_tokens, NA);
    assert_memory_equal(rp.ids, plain, sizeof plain); /* asking changes no token */
    engine_reply_free(&rp);

    /* batched: b decoding (sampled), c's prompt log-probabilities too, a's prompt again without */
    for (int round = 0; round < 2; round++) {
        free(got.lp);
        prompt_lps_init(&got, NA);
        prompt_lps_init(&got_c, NC);
        rc.ctx = &got_c;
        rc.prompt_top_logprobs = 0;
        engine_request ra = {.ids = a, .n = NA, .max_tokens = 2, .ignore_eos = true};
        uint32_t h[4];
        if (engine_submit(&e, &rb, &h[0])) fail_msg("%s", cd_errmsg());
        if (round) /* b decodes while the others prefill */
            for (int s = 0; s < 2; s++)
                if (engine_step(&e, NULL)) fail_msg("%s", cd_errmsg());
        if (engine_submit(&e, &rq, &h[1]) || engine_submit(&e, &rc, &h[2]) || engine_submit(&e, &ra, &h[3]))
            fail_msg("%s", cd_errmsg());
        uint32_t busy = 1;
        while (busy)
            if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
        assert_int_equal(engine_poll(&e, h[0], &rp), 1);
        assert_memory_equal(rp.ids, plain_b, sizeof plain_b);
        engine_reply_free(&rp);
        assert_int_equal(engine_poll(&e, h[1], &rp), 1);
        assert_memory_equal(rp.ids, plain, sizeof plain);
        engine_reply_free(&rp);
        assert_int_equal(engine_poll(&e, h[2], &rp), 1);
        engine_reply_free(&rp);
        assert_int_equal(engine_poll(&e, h[3], &rp), 1);
        assert_true(rp.cached_tokens > 0);
        engine_reply_free(&rp);
        assert_int_equal(got.next, NA);
        assert_prompt_lps(&got, &oracle, NA, "batched");
        assert_int_equal(got_c.next, NC);
        for (uint32_t p = 1; p < NC; p++) /* no alternatives asked: the token's own, the same */
            if (got_c.lp[p].id != c[p] || got_c.lp[p].logprob != want_c.lp[p].logprob || got_c.lp[p].n_top)
                fail_msg("batched: c's prompt position %u differs", p);
        free(got_c.lp);
    }

    /* max_tokens 0: the prompt's log-probabilities, no token, and the prompt cached */
    engine_free(&e);
    init(&e, &o);
    free(got.lp);
    prompt_lps_init(&got, NA);
    rq.max_tokens = 0;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    assert_int_equal(rp.n, 0);
    assert_int_equal(rp.finish, ENGINE_LENGTH);
    assert_int_equal(got.next, NA);
    assert_prompt_lps(&got, &oracle, NA, "max_tokens 0");
    engine_reply_free(&rp);
    engine_request more = {.ids = a, .n = NA + 5, .max_tokens = 1, .ignore_eos = true};
    if (engine_generate(&e, &more, &rp)) fail_msg("%s", cd_errmsg());
    assert_true(rp.cached_tokens >= NA - 16);
    engine_reply_free(&rp);

    rq.prompt_top_logprobs = TOP_LOGPROBS_MAX + 1;
    uint32_t h;
    assert_int_equal(engine_submit(&e, &rq, &h), -1);
    assert_non_null(strstr(cd_errmsg(), "prompt_top_logprobs"));
    assert_no_leak(&e);
    engine_free(&e);
    free(raw), free(oracle.lp), free(got.lp), free(want_c.lp);
}

/* A JSON-object request's tokens as text (an end token not included). */
static char *reply_text(const engine_reply *rp, bool *ended) {
    const tokenizer *t = tiny()->tok;
    uint32_t n = rp->n;
    *ended = n && tok_is_eog(t, rp->ids[n - 1]);
    char *text = NULL;
    if (tok_decode(t, rp->ids, *ended ? n - 1 : n, &text)) fail_msg("%s", cd_errmsg());
    return text;
}

static void test_json_object(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 61);
    int32_t a[33], b[21];
    random_ids(&r, a, 33);
    random_ids(&r, b, 21);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4, .draw = ENGINE_DRAW_DEVICE};
    init(&e, &o);
    const sampler_params greedy = {0}, hot = {.temperature = 1.5f, .top_k = 40, .top_p = 1, .seed = 8};
    const sampler_params *sps[] = {&greedy, &hot};
    int32_t alone[2][48];
    for (int k = 0; k < 2; k++) { /* the reply stays a JSON-object prefix (json_prefix: tested against jansson) */
        engine_request rq = {.ids = a, .n = 33, .max_tokens = 48, .sp = sps[k], .json_object = true};
        engine_reply rp;
        if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
        bool ended;
        char *text = reply_text(&rp, &ended);
        static json_prefix p;
        json_schema *any = json_schema_any_object();
        json_prefix_init(&p, any);
        if (!json_prefix_feed(&p, text, strlen(text))) fail_msg("not a JSON-object prefix: %s", text);
        json_schema_unref(any);
        assert_true(strchr(text, '{') != NULL);
        assert_true(ended == json_prefix_done(&p)); /* an end token only once the object is whole */
        printf("  json_object (%s): %u tokens, %s: %.80s\n", k ? "sampled" : "greedy", rp.n, ended ? "ended" : "open",
               text);
        memset(alone[k], 0, sizeof alone[k]);
        memcpy(alone[k], rp.ids, rp.n * sizeof *rp.ids);
        free(text);
        engine_reply_free(&rp);
    }
    /* pushed to "{}" at once: whole, so the end token follows, and jansson reads the object */
    int32_t braces = tok_find(tiny()->tok, "{}");
    assert_true(braces >= 0);
    logit_bias push[] = {{braces, 100}};
    const logit_adjust adj = {.bias = push, .n_bias = 1};
    engine_request rq = {.ids = b, .n = 21, .max_tokens = 16, .sp = &greedy, .json_object = true, .adjust = &adj};
    engine_reply rp;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    bool ended;
    char *text = reply_text(&rp, &ended);
    assert_true(ended);
    assert_int_equal(rp.finish, ENGINE_STOP);
    json_error_t je;
    json_t *obj = json_loads(text, 0, &je);
    assert_true(obj && json_is_object(obj));
    json_decref(obj);
    free(text);
    engine_reply_free(&rp);
    /* batched with a plain request: the same tokens as alone */
    engine_request rqs[3] = {{.ids = a, .n = 33, .max_tokens = 48, .sp = &greedy, .json_object = true},
                             {.ids = a, .n = 33, .max_tokens = 48, .sp = &hot, .json_object = true},
                             {.ids = b, .n = 21, .max_tokens = 20, .sp = &greedy, .ignore_eos = true}};
    uint32_t h[3], busy = 1;
    for (int i = 0; i < 3; i++)
        if (engine_submit(&e, &rqs[i], &h[i])) fail_msg("%s", cd_errmsg());
    while (busy)
        if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
    for (int i = 0; i < 3; i++) {
        assert_int_equal(engine_poll(&e, h[i], &rp), 1);
        if (i < 2) assert_memory_equal(rp.ids, alone[i], rp.n * sizeof *rp.ids);
        engine_reply_free(&rp);
    }
    assert_no_leak(&e);
    engine_free(&e);
}

/* response_format json_schema: the reply is an instance (ended: whole, jansson reads it and it
 * has what the schema requires), the caller's reference may go at once (the engine holds its
 * own), and batched with a json_object and a plain request each gives the tokens it gives alone. */
static void test_json_schema(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 67);
    int32_t a[29], b[17];
    random_ids(&r, a, 29);
    random_ids(&r, b, 17);
    engine e;
    engine_opts o = {.n_ctx = N_CTX, .max_seqs = 4, .draw = ENGINE_DRAW_DEVICE};
    init(&e, &o);
    const char *text_schema =
        "{\"type\": \"object\", \"properties\": {\"answer\": {\"enum\": [\"yes\", \"no\"]}, \"n\": {\"type\": "
        "\"integer\"}, "
        "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 3}, \"maxItems\": 2}}, "
        "\"required\": [\"answer\", \"n\"]}";
    const sampler_params greedy = {0}, hot = {.temperature = 1.2f, .top_k = 40, .top_p = 1, .seed = 5};
    const sampler_params *sps[] = {&greedy, &hot};
    int32_t alone[2][64];
    uint32_t n_alone[2];
    for (int k = 0; k < 2; k++) {
        json_schema *sc = json_schema_compile_text(text_schema, true);
        assert_non_null(sc);
        engine_request rq = {.ids = a, .n = 29, .max_tokens = 64, .sp = sps[k], .json_schema = sc};
        uint32_t h, busy = 1;
        if (engine_submit(&e, &rq, &h)) fail_msg("%s", cd_errmsg());
        json_schema_unref(sc); /* the engine holds its own reference */
        while (busy)
            if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
        engine_reply rp;
        assert_int_equal(engine_poll(&e, h, &rp), 1);
        bool ended;
        char *text = reply_text(&rp, &ended);
        static json_prefix p;
        json_schema *check = json_schema_compile_text(text_schema, true);
        json_prefix_init(&p, check);
        if (!json_prefix_feed(&p, text, strlen(text))) fail_msg("not a prefix of an instance: %s", text);
        assert_true(ended == json_prefix_done(&p));
        if (ended) {
            json_t *v = json_loads(text, 0, NULL);
            const char *answer = json_string_value(json_object_get(v, "answer"));
            assert_true(answer && (!strcmp(answer, "yes") || !strcmp(answer, "no")));
            assert_true(json_is_integer(json_object_get(v, "n")));
            json_decref(v);
        }
        for (char *c = text; *c; c++) *c = *c == '\n' ? ' ' : *c; /* shown on one line (after the checks) */
        printf("  json_schema (%s): %u tokens, %s: %.100s\n", k ? "sampled" : "greedy", rp.n, ended ? "ended" : "open",
               text);
        json_schema_unref(check);
        n_alone[k] = rp.n;
        memcpy(alone[k], rp.ids, rp.n * sizeof *rp.ids);
        free(text);
        engine_reply_free(&rp);
    }
    /* a forced tool call: the prompt ends with the call's start; the reply finishes the object,
     * writes the closing tag and ends */
    json_schema *call = json_schema_compile_text(
        "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get\"}, \"arguments\": {\"type\": \"object\", "
        "\"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": [\"id\"], \"additionalProperties\": false}}, "
        "\"required\": [\"name\", \"arguments\"], \"additionalProperties\": false}",
        true);
    assert_non_null(call);
    const char *forced = "{\"name\": \"get\", \"arguments\": ";
    engine_request rq = {.ids = b,
                         .n = 17,
                         .max_tokens = 64,
                         .sp = &greedy,
                         .json_schema = call,
                         .json_forced = forced,
                         .json_tail = "\n</tool_call>"};
    engine_reply rp;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    bool ended;
    char *text = reply_text(&rp, &ended);
    assert_true(ended);
    size_t tl = strlen(text), cl = strlen("\n</tool_call>");
    assert_true(tl > cl && !strcmp(text + tl - cl, "\n</tool_call>"));
    char whole[512];
    snprintf(whole, sizeof whole, "%s%.*s", forced, (int)(tl - cl), text);
    json_t *v = json_loads(whole, 0, NULL);
    assert_non_null(v);
    assert_true(json_is_integer(json_object_get(json_object_get(v, "arguments"), "id")));
    printf("  forced call: %s\n", whole);
    json_decref(v);
    free(text);
    engine_reply_free(&rp);
    rq.json_forced = "{\"name\": \"put\"";
    uint32_t h0;
    assert_int_equal(engine_submit(&e, &rq, &h0), -1);
    assert_non_null(strstr(cd_errmsg(), "forced text"));
    json_schema_unref(call);

    json_schema *sc = json_schema_compile_text(text_schema, true);
    engine_request both = {.ids = a, .n = 29, .max_tokens = 4, .json_object = true, .json_schema = sc};
    uint32_t h[4], busy = 1;
    assert_int_equal(engine_submit(&e, &both, &h[0]), -1); /* one shape at a time */
    assert_non_null(strstr(cd_errmsg(), "exclude"));
    engine_request rqs[4] = {{.ids = a, .n = 29, .max_tokens = 64, .sp = &greedy, .json_schema = sc},
                             {.ids = a, .n = 29, .max_tokens = 64, .sp = &hot, .json_schema = sc},
                             {.ids = b, .n = 17, .max_tokens = 24, .sp = &greedy, .json_object = true},
                             {.ids = b, .n = 17, .max_tokens = 20, .sp = &greedy, .ignore_eos = true}};
    for (int i = 0; i < 4; i++)
        if (engine_submit(&e, &rqs[i], &h[i])) fail_msg("%s", cd_errmsg());
    json_schema_unref(sc);
    while (busy)
        if (engine_step(&e, &busy)) fail_msg("%s", cd_errmsg());
    for (int i = 0; i < 4; i++) {
        engine_reply rp;
        assert_int_equal(engine_poll(&e, h[i], &rp), 1);
        if (i < 2) {
            assert_int_equal(rp.n, n_alone[i]);
            assert_memory_equal(rp.ids, alone[i], rp.n * sizeof *rp.ids);
        }
        engine_reply_free(&rp);
    }
    assert_no_leak(&e);
    engine_free(&e);
}

/* ---- speculative decoding (engine_opts.spec_tokens): the oracle is above interleavings ---- */

typedef struct spec_case {
    sampler_params sp;
    bool adjust, logprobs, json, stop;
    uint32_t max_tokens;
} spec_case;

typedef struct spec_seen {
    float lp[48];
    uint32_t n_lp;
} spec_seen;

static void spec_logprob(void *ctx, const token_logprob *lp) {
    spec_seen *s = ctx;
    if (s->n_lp < 48) s->lp[s->n_lp++] = lp->logprob;
}

/* Every kind of request gives the tokens (and log-probabilities) it gives without guessing,
 * alone and batched, drawn on the device or on the host. */
static void speculative(int draw) {
    rng r;
    rng_seed(&r, 61);
    static const spec_case cases[] = {
        {.max_tokens = 40},
        {.sp = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 8}, .max_tokens = 40},
        {.sp = {.temperature = 1.2f, .top_k = 0, .top_p = 0.9f, .seed = 9}, .max_tokens = 40},
        {.adjust = true, .max_tokens = 40},
        {.adjust = true, .sp = {.temperature = 0.7f, .top_k = 40, .top_p = 0.95f, .seed = 10}, .max_tokens = 40},
        {.logprobs = true, .max_tokens = 40},
        {.json = true, .max_tokens = 40},
        {.stop = true, .max_tokens = 40},
        {.max_tokens = 3},
    };
    enum { N = sizeof cases / sizeof *cases };
    int32_t prompts[N][40], want[N][48];
    /* three tokens pushed far above the rest, which the penalties take turns among: each row's
     * choice depends on the tokens chosen before it, in this pass too */
    logit_bias push[] = {{11, 100}, {12, 100}, {500, 100}};
    const logit_adjust adj = {.presence = 1, .frequency = 2, .bias = push, .n_bias = 3};
    engine plain, spec;
    engine_opts po = {.n_ctx = N_CTX, .max_seqs = N, .draw = draw};
    engine_opts so = po;
    so.spec_tokens = 4, so.guess = oracle_guess;
    init(&plain, &po), init(&spec, &so);
    spec_seen want_lp[N], got_lp[N];
    engine_request rq[N];
    int32_t stop_id[N];
    n_oracle = 0;
    for (int k = 0; k < N; k++) {
        const spec_case *c = &cases[k];
        random_ids(&r, prompts[k], 40);
        rq[k] = (engine_request){.ids = prompts[k],
                                 .n = 40,
                                 .max_tokens = c->max_tokens,
                                 .ignore_eos = !c->json,
                                 .sp = &c->sp,
                                 .adjust = c->adjust ? &adj : NULL,
                                 .json_object = c->json,
                                 .on_logprob = c->logprobs ? spec_logprob : NULL,
                                 .top_logprobs = c->logprobs ? 3 : 0};
        want_lp[k].n_lp = 0;
        rq[k].ctx = &want_lp[k];
        engine_reply rp;
        if (engine_generate(&plain, &rq[k], &rp)) fail_msg("%s", cd_errmsg());
        if (c->stop) { /* a stop token the reply reaches in its middle */
            stop_id[k] = rp.ids[rp.n / 2];
            rq[k].stop_ids = &stop_id[k], rq[k].n_stop = 1;
            engine_reply_free(&rp);
            want_lp[k].n_lp = 0;
            if (engine_generate(&plain, &rq[k], &rp)) fail_msg("%s", cd_errmsg());
            assert_true(rp.n < c->max_tokens);
        }
        memcpy(want[k], rp.ids, rp.n * sizeof *rp.ids);
        oracle[n_oracle++] = (oracle_entry){prompts[k], want[k], 40, rp.n};
        engine_reply_free(&rp);
    }
    for (int round = 0; round < 2; round++) { /* each alone, then all batched */
        uint32_t h[N];
        for (int k = 0; k < N; k++) {
            got_lp[k].n_lp = 0;
            rq[k].ctx = &got_lp[k];
            if (engine_submit(&spec, &rq[k], &h[k])) fail_msg("%s", cd_errmsg());
            for (uint32_t busy = 1; round == 0 && busy;)
                if (engine_step(&spec, &busy)) fail_msg("%s", cd_errmsg());
        }
        for (uint32_t busy = 1; busy;)
            if (engine_step(&spec, &busy)) fail_msg("%s", cd_errmsg());
        for (int k = 0; k < N; k++) {
            engine_reply rp;
            assert_int_equal(engine_poll(&spec, h[k], &rp), 1);
            if (rp.n != oracle[k].n_want || memcmp(rp.ids, want[k], rp.n * sizeof *rp.ids))
                fail_msg("draw %d, %s: case %d: tokens differ with speculative decoding", draw,
                         round ? "batched" : "alone", k);
            assert_int_equal(got_lp[k].n_lp, want_lp[k].n_lp);
            assert_memory_equal(got_lp[k].lp, want_lp[k].lp, want_lp[k].n_lp * sizeof *got_lp[k].lp);
            engine_reply_free(&rp);
        }
    }
    uint64_t total = 0;
    for (int k = 0; k < N; k++) total += oracle[k].n_want;
    print_message("draw %d: %llu tokens guessed, %llu kept; %llu steps with guessing, %llu without\n", draw,
                  (unsigned long long)spec.stats.draft_tokens, (unsigned long long)spec.stats.accepted_tokens,
                  (unsigned long long)spec.stats.steps, (unsigned long long)plain.stats.steps);
    assert_int_equal(spec.stats.generated_tokens, 2 * total);
    assert_true(spec.stats.accepted_tokens > total / 2);                    /* guesses kept ... */
    assert_true(spec.stats.draft_tokens > spec.stats.accepted_tokens + 20); /* ... and dropped */
    assert_true(spec.stats.accepted_tokens <= spec.stats.generated_tokens);
    assert_true(spec.stats.steps < plain.stats.steps); /* several tokens a pass */
    assert_no_leak(&spec);
    engine_free(&plain), engine_free(&spec);
}

static void test_speculative(void **state) {
    (void)state;
    speculative(ENGINE_DRAW_HOST);
    speculative(ENGINE_DRAW_DEVICE);
}

/* The real guesser: a scripted model whose greedy reply cycles (" one two three four five" and
 * again) is guessed by prompt lookup from its second round on; the tokens are those without
 * guessing, in fewer passes. */
static void cycle_script(synth_spec *s) { s->script = " one two three four five one"; }

static void test_speculative_lookup(void **state) {
    (void)state;
    model *m;
    const char *path = tu_make_model("sched_cycle.gguf", "tiny", NULL, 5, cycle_script);
    if (model_load(&m, path, (model_load_opts){0})) fail_msg("%s", cd_errmsg());
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(m->tok, "Count: one", 10, false, &ids, &n)) fail_msg("%s", cd_errmsg());
    engine e[2];
    engine_reply rp[2];
    for (int k = 0; k < 2; k++) {
        engine_opts o = {.n_ctx = 256, .spec_tokens = 4 * k};
        if (vk_engine_init(&e[k], m, &o)) fail_msg("%s", cd_errmsg());
        engine_request rq = {.ids = ids, .n = (uint32_t)n, .max_tokens = 60, .ignore_eos = true};
        if (engine_generate(&e[k], &rq, &rp[k])) fail_msg("%s", cd_errmsg());
    }
    char *text = NULL;
    if (tok_decode(m->tok, rp[0].ids, 10, &text)) fail_msg("%s", cd_errmsg());
    assert_string_equal(text, " two three four five one two three four five one");
    assert_int_equal(rp[1].n, rp[0].n);
    assert_memory_equal(rp[1].ids, rp[0].ids, rp[0].n * sizeof *rp[0].ids);
    print_message("lookup: %llu guessed, %llu kept; %llu passes for 60 tokens (%llu without)\n",
                  (unsigned long long)e[1].stats.draft_tokens, (unsigned long long)e[1].stats.accepted_tokens,
                  (unsigned long long)e[1].stats.steps, (unsigned long long)e[0].stats.steps);
    assert_true(e[1].stats.accepted_tokens >= 40 && e[1].stats.accepted_tokens <= e[1].stats.draft_tokens);
    assert_int_equal(e[1].stats.accepted_tokens, rp[1].accepted_tokens);
    assert_int_equal(e[1].stats.draft_tokens, rp[1].draft_tokens);
    assert_true(e[1].stats.steps * 3 < e[0].stats.steps);
    free(text), free(ids);
    for (int k = 0; k < 2; k++) engine_reply_free(&rp[k]), engine_free(&e[k]);
    model_free(m);
}

static void test_errors(void **state) {
    (void)state;
    engine e;
    engine_opts o = {.n_ctx = 64, .pool_tokens = 48, .page_tokens = 16, .max_seqs = 2};
    init(&e, &o);
    int32_t ids[80] = {0};
    uint32_t h;
    engine_request rq = {.ids = ids, .n = 0, .max_tokens = 4};
    assert_int_equal(engine_submit(&e, &rq, &h), -1);
    assert_non_null(strstr(cd_errmsg(), "empty"));
    rq.n = 64;
    assert_int_equal(engine_submit(&e, &rq, &h), -1);
    assert_non_null(strstr(cd_errmsg(), "64 tokens; the context holds 64"));
    rq.n = 50;
    assert_int_equal(engine_submit(&e, &rq, &h), -1);
    assert_non_null(strstr(cd_errmsg(), "the pool holds 3 pages (48 tokens)"));
    ids[3] = -5;
    rq.n = 10;
    assert_int_equal(engine_submit(&e, &rq, &h), -1);
    assert_non_null(strstr(cd_errmsg(), "out of range"));
    ids[3] = 0;
    assert_int_equal(engine_cancel(&e, 12345), -1);
    /* a lone request that outgrows the pool ends with "length", and nothing leaks */
    rq.n = 40;
    rq.max_tokens = 20;
    rq.ignore_eos = true;
    engine_reply rp;
    if (engine_generate(&e, &rq, &rp)) fail_msg("%s", cd_errmsg());
    assert_int_equal(rp.finish, ENGINE_LENGTH);
    assert_int_equal(rp.n, 48 - 40 + 1);
    engine_reply_free(&rp);
    assert_no_leak(&e);
    engine_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_next_turn),
        cmocka_unit_test(test_sampling_batched),
        cmocka_unit_test(test_sampling_on_device),
        cmocka_unit_test(test_cache_salt),
        cmocka_unit_test(test_logit_adjust),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_prompt_logprobs),
        cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_json_schema),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_speculative_lookup),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_dedup),
        cmocka_unit_test(test_interleavings),
        cmocka_unit_test(test_interleavings_page4),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_preemption_speculative),
    };
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER")); /* e.g. "*salt*" */
    if (getenv("TEST_FILTER")) cmocka_set_test_filter(getenv("TEST_FILTER"));               /* e.g. test_speculative* */
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
