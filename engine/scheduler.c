/* The continuous-batching scheduler (engine.h): requests in, one forward pass per step over
 * every running sequence, tokens out. Runs on the thread that owns the GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "engine/lookup_draft.h"
#include "engine/pass.h"
#include "engine/request.h"

static engine_req *find(const engine *e, uint32_t handle) {
    for (uint32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->handle == handle) return e->reqs[i];
    return NULL;
}

uint32_t engine_running(const engine *e) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->n_reqs; i++) n += e->reqs[i]->state == REQ_RUNNING;
    return n;
}

uint32_t engine_waiting(const engine *e) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->n_reqs; i++) n += e->reqs[i]->state == REQ_WAITING;
    return n;
}

static void req_free(engine_req *q) {
    free(q->all);
    free(q->stop);
    sampler_free(&q->smp);
    logit_adjust_free(&q->adj);
    json_mask_free(&q->jm);
    engine_reply_free(&q->reply);
    free(q);
}

/* ---- submit ---- */

static int check_request(const engine *e, const engine_request *rq) {
    if (rq->n == 0) return cd_fail("the prompt is empty");
    if (rq->n >= e->g.n_ctx)
        return cd_fail("the prompt has %u tokens; the context holds %u (prompt + at least one generated)", rq->n,
                       e->g.n_ctx);
    uint32_t need = kv_pages_for(&e->pool.pages, rq->n + 1), have = e->pool.pages.n_pages;
    if (need > have)
        return cd_fail("KV pool too small: the prompt has %u tokens and needs %u KV pages; the pool holds %u pages "
                       "(%u tokens)",
                       rq->n, need, have, have * e->pool.lay.page_tokens);
    for (uint32_t i = 0; i < rq->n; i++)
        if (rq->ids[i] < 0 || (uint32_t)rq->ids[i] >= e->m->cfg.n_vocab)
            return cd_fail("token id %d at prompt position %u out of range (vocab %u)", rq->ids[i], i,
                           e->m->cfg.n_vocab);
    if (rq->json_object && rq->json_schema) return cd_fail("json_object and json_schema exclude each other");
    if (rq->json_lazy && (!rq->json_schema || rq->json_trigger < 0 || (uint32_t)rq->json_trigger >= e->m->cfg.n_vocab))
        return cd_fail("json_lazy needs json_schema and a trigger token in the vocabulary");
    if (rq->top_logprobs > TOP_LOGPROBS_MAX)
        return cd_fail("top_logprobs %u is more than %d", rq->top_logprobs, TOP_LOGPROBS_MAX);
    if (rq->prompt_top_logprobs > TOP_LOGPROBS_MAX)
        return cd_fail("prompt_top_logprobs %u is more than %d", rq->prompt_top_logprobs, TOP_LOGPROBS_MAX);
    return logit_adjust_check(rq->adjust, (int32_t)e->m->cfg.n_vocab);
}

/* The scratch of the logit adjustments, one per host worker, made for the first request that
 * needs it. */
static int need_adj_scratch(engine *e) {
    size_t n = (size_t)e->n_workers * e->m->cfg.n_vocab;
    if (!e->adj_count) e->adj_count = calloc(n, sizeof *e->adj_count);
    if (!e->adj_logits) e->adj_logits = malloc(n * sizeof *e->adj_logits);
    return e->adj_count && e->adj_logits ? 0 : cd_fail("out of memory for the logit adjustments' scratch");
}

static int grow_reqs(engine *e) {
    if (e->n_reqs < e->cap_reqs) return 0;
    uint32_t cap = e->cap_reqs ? 2 * e->cap_reqs : 16;
    void *p = realloc(e->reqs, cap * sizeof *e->reqs);
    if (!p) return cd_fail("out of memory for %u requests", cap);
    e->reqs = p;
    p = realloc(e->pass, cap * sizeof *e->pass);
    if (!p) return cd_fail("out of memory for %u requests", cap);
    e->pass = p;
    e->cap_reqs = cap;
    return 0;
}

/* The request's cache namespace: the engine's, or derived from it and the request's salt. */
static int request_ns(const engine *e, const engine_request *rq, uint8_t ns[RADIX_NS_BYTES]) {
    const char *salt = rq->cache_salt;
    if (!e->cache_on || !salt || !*salt) {
        memcpy(ns, e->cache.ns, RADIX_NS_BYTES);
        return 0;
    }
    return kv_cache_namespace_salt(e->cache.ns, salt, strlen(salt), ns);
}

int engine_submit(engine *e, const engine_request *rq, uint32_t *handle) {
    uint8_t ns[RADIX_NS_BYTES];
    CD_TRY(check_request(e, rq) || request_ns(e, rq, ns) || grow_reqs(e));
    engine_req *q = calloc(1, sizeof *q);
    if (!q) return cd_fail("out of memory");
    const sampler_params *sp = rq->sp ? rq->sp : &e->sp;
    q->rq = *rq;
    q->all = malloc(((size_t)rq->n + rq->max_tokens + 1) * sizeof *q->all);
    q->reply.ids = malloc(((size_t)rq->max_tokens + 1) * sizeof *q->reply.ids);
    q->stop = malloc(((size_t)rq->n_stop + 1) * sizeof *q->stop);
    q->sample = sp->temperature > 0;
    q->adjusted = logit_adjust_active(rq->adjust);
    if (rq->json_object && !e->any_object) e->any_object = json_schema_any_object();
    json_schema *schema = rq->json_object ? e->any_object : rq->json_schema;
    if (schema) json_mask_init(&q->jm, &e->json_vocab, schema);
    if (schema && rq->json_tail && json_mask_set_tail(&q->jm, rq->json_tail)) {
        req_free(q);
        return cd_fail_ctx("json_schema: ");
    }
    if (schema && rq->json_coder && json_mask_set_coder(&q->jm, rq->json_coder)) {
        req_free(q);
        return -1;
    }
    if (schema && rq->json_lazy) json_mask_set_trigger(&q->jm, rq->json_trigger, rq->json_once);
    if (schema && rq->json_forced && !json_mask_feed(&q->jm, rq->json_forced, strlen(rq->json_forced))) {
        req_free(q);
        return cd_fail("json_schema: the forced text is not the start of an instance of the schema");
    }
    bool json = rq->json_object || rq->json_schema, masked = q->adjusted || json;
    /* top_k within the device's limit: only the id crosses to the host; else (top_k "all", a
     * CPU device: engine_opts.draw, or logits to adjust or mask) the logits row comes down and
     * the host chooses */
    q->sample_gpu =
        e->draw_on_device && !masked && cvk_sample_row_on_device(sp->temperature, sp->top_k, CVK_SAMPLE_MAX_K);
    if (q->sample_gpu) sampler_init_draws(&q->smp, *sp);
    if (!q->all || !q->reply.ids || !q->stop || (masked && need_adj_scratch(e)) ||
        (json && (!schema || (!e->json_vocab.first && json_vocab_init(&e->json_vocab, e->m->tok)))) ||
        (q->adjusted && logit_adjust_copy(&q->adj, rq->adjust)) ||
        (q->sample && !q->sample_gpu && sampler_init(&q->smp, *sp, (int32_t)e->m->cfg.n_vocab))) {
        req_free(q);
        return cd_fail("out of memory for a request of %u + %u tokens", rq->n, rq->max_tokens);
    }
    memcpy(q->all, rq->ids, rq->n * sizeof *q->all);
    if (rq->n_stop) memcpy(q->stop, rq->stop_ids, rq->n_stop * sizeof *q->stop);
    q->rq.ids = q->all;
    q->rq.stop_ids = q->stop;
    q->rq.sp = NULL;
    q->rq.cache_salt = NULL;                    /* the caller's memory: only its namespace is kept */
    q->rq.adjust = NULL;                        /* the caller's memory: q->adj is the copy */
    q->rq.json_schema = NULL;                   /* the caller's reference: q->jm holds one */
    q->rq.json_forced = q->rq.json_tail = NULL; /* read into q->jm */
    memcpy(q->ns, ns, RADIX_NS_BYTES);
    q->n_prompt = q->n_all = rq->n;
    q->reply.prompt_tokens = rq->n;
    q->handle = ++e->next_handle;
    q->state = REQ_WAITING;
    q->submit_step = e->n_steps;
    q->t_submit = cd_now_ms();
    e->reqs[e->n_reqs++] = q;
    *handle = q->handle;
    return 0;
}

/* ---- finishing, preempting, cancelling ---- */

static void add_stats(engine *e, const engine_reply *r) {
    engine_stats *s = &e->stats;
    s->requests++;
    s->prompt_tokens += r->prompt_tokens;
    s->cached_tokens += r->cached_tokens;
    s->prefilled_tokens += r->prefilled_tokens;
    s->recomputed_tokens += r->recomputed_tokens;
    s->generated_tokens += r->n;
    s->draft_tokens += r->draft_tokens;
    s->accepted_tokens += r->accepted_tokens;
    s->evicted_pages += r->evicted_pages;
    s->restored_tokens += r->restored_tokens;
    s->restored_pages += r->restored_pages;
    s->demoted_pages += r->demoted_pages;
    s->restore_ms += r->restore_ms;
    s->disk_tokens += r->disk_tokens;
    s->disk_chunks_read += r->disk_chunks_read;
    s->disk_chunks_written += r->disk_chunks_written;
    s->disk_bytes_read += r->disk_bytes_read;
    s->disk_bytes_written += r->disk_bytes_written;
    s->disk_rejected += r->disk_rejected;
    s->disk_evicted_chunks += r->disk_evicted_chunks;
    s->disk_evicted_bytes += r->disk_evicted_bytes;
    s->disk_over_budget += r->disk_over_budget;
    s->disk_read_ms += r->disk_read_ms;
    s->disk_write_ms += r->disk_write_ms;
}

/* The running request's computed K/V into the cache, then its pages and row go back. The pin
 * goes first: its match may end in a tail this commit makes redundant (radix.h, Tails), and
 * nothing evicts between the two. */
static int leave_gpu(engine *e, engine_req *q) {
    int rc = 0;
    if (e->cache_on) kv_cache_release(&e->cache, &q->m);
    q->m = (radix_match){0};
    if (e->cache_on && q->n_kv) {
        kv_cache_written w;
        rc = kv_cache_commit(&e->cache, q->ns, q->all, q->n_kv, &q->seq, KV_COMMIT_FINAL, &w);
        q->reply.disk_chunks_written += w.disk_chunks_written;
        q->reply.disk_bytes_written += w.disk_bytes_written;
        q->reply.disk_evicted_chunks += w.disk_evicted_chunks;
        q->reply.disk_evicted_bytes += w.disk_evicted_bytes;
        q->reply.disk_over_budget += w.disk_over_budget;
        q->reply.disk_write_ms += w.disk_write_ms;
    }
    kv_seq_free(&e->pool.pages, &q->seq);
    e->row_free[q->row] = 1;
    return rc;
}

/* A commit to the cache failed: the request goes on (its reply does not depend on the cache),
 * the failure is said and counted, and that KV is simply not cached. */
static void commit_failed(engine *e, const char *what) {
    fprintf(stderr, "cinder: %s: %s; the reply stands, that KV is not cached\n", what, cd_errmsg());
    e->stats.cache_errors++;
}

static void finish(engine *e, engine_req *q, enum engine_finish why) {
    if (q->state == REQ_DONE) return; /* e.g. cancelled from its own token callback */
    if (q->state == REQ_RUNNING && leave_gpu(e, q)) commit_failed(e, "caching a finished request");
    q->state = REQ_DONE;
    q->reply.finish = why;
    q->reply.decode_ms = q->reply.n ? q->t_last - (q->t_submit + q->reply.ttft_ms) : 0;
    if (why == ENGINE_CANCELLED) e->stats.cancelled++;
    add_stats(e, &q->reply);
}

static void preempt(engine *e, engine_req *q) {
    if (leave_gpu(e, q)) commit_failed(e, "caching a preempted request"); /* it recomputes on resume */
    q->state = REQ_WAITING;
    q->n_kv = 0;
    q->prompt_committed = false;
    q->reply.preempted++;
    e->stats.preempted++;
}

int engine_cancel(engine *e, uint32_t handle) {
    engine_req *q = find(e, handle);
    if (!q) return cd_fail("no request %u", handle);
    if (q->state != REQ_DONE) finish(e, q, ENGINE_CANCELLED);
    return 0;
}

int engine_poll(engine *e, uint32_t handle, engine_reply *r) {
    for (uint32_t i = 0; i < e->n_reqs; i++) {
        engine_req *q = e->reqs[i];
        if (q->handle != handle) continue;
        if (q->state != REQ_DONE) return 0;
        *r = q->reply;
        q->reply = (engine_reply){0};
        req_free(q);
        memmove(&e->reqs[i], &e->reqs[i + 1], (e->n_reqs - i - 1) * sizeof *e->reqs);
        e->n_reqs--;
        return 1;
    }
    return cd_fail("no request %u", handle);
}

/* ---- admission ---- */

static uint32_t common_prefix(const int32_t *a, const int32_t *b, uint32_t n) {
    uint32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Whether q still has prompt positions whose log-probabilities it reads (rq.on_prompt_logprob). */
static bool wants_prompt_rows(const engine_req *q) { return q->rq.on_prompt_logprob && q->lp_next + 1 < q->n_prompt; }

/* The tokens of q a cache match may take (it always leaves the last one to compute): the
 * cache holds K/V, not logits, so positions whose rows q still reads are computed. */
static uint32_t matchable(const engine_req *q) { return wants_prompt_rows(q) ? q->lp_next + 1 : q->n_all; }

/* Tokens the cache would serve q now (a peek: matched and released at once). */
static uint32_t cached_now(engine *e, const engine_req *q) {
    if (!e->cache_on || matchable(q) < 2) return 0;
    radix_match m;
    if (kv_cache_match(&e->cache, q->ns, q->all, matchable(q) - 1, &m)) return 0;
    uint32_t n = m.n_tokens;
    kv_cache_release(&e->cache, &m);
    return n;
}

/* Whether a running request of q's namespace is still prefilling a prefix q shares beyond what q
 * would get from the cache by more than a page: q then waits for its commit instead of computing
 * it again. (Another namespace's commit would never serve q, so q would wait for nothing.) */
static bool prefix_in_flight(const engine *e, const engine_req *q, uint32_t cached) {
    if (!e->cache_on || wants_prompt_rows(q)) return false; /* it computes its prompt anyway */
    for (uint32_t i = 0; i < e->n_reqs; i++) {
        const engine_req *p = e->reqs[i];
        if (p == q || p->state != REQ_RUNNING || p->prompt_committed) continue;
        if (memcmp(p->ns, q->ns, RADIX_NS_BYTES)) continue;
        uint32_t n = q->n_all - 1 < p->n_target ? q->n_all - 1 : p->n_target;
        if (common_prefix(q->all, p->all, n) >= cached + e->pool.lay.page_tokens) return true;
    }
    return false;
}

/* Charges q with the pages the cache evicted and demoted since `before`. */
static void charge_moves(const engine *e, engine_req *q, kv_cache_moves before) {
    kv_cache_moves now = kv_cache_moves_get(&e->cache);
    q->reply.evicted_pages += now.freed_pages - before.freed_pages;
    q->reply.demoted_pages += now.demoted_pages - before.demoted_pages;
}

/* Reserves free pages for n more tokens of q's sequence (copy on write of a shared partial last
 * page included), evicting unpinned cache entries if short. 1: not enough pages. */
static int reserve(engine *e, engine_req *q, uint32_t n) {
    uint32_t need = kv_pool_pages_needed(&e->pool, &q->seq, n);
    kv_cache_moves before = kv_cache_moves_get(&e->cache);
    if (need > kv_pages_free_count(&e->pool.pages) && e->cache_on) kv_cache_reclaim(&e->cache, need);
    charge_moves(e, q, before);
    if (need > kv_pages_free_count(&e->pool.pages)) return 1;
    return kv_pool_extend(&e->pool, &q->seq, n);
}

static uint32_t free_row(const engine *e) {
    for (uint32_t r = 0; r < e->max_seqs; r++)
        if (e->row_free[r]) return r;
    return UINT32_MAX;
}

/* Acquires q's cached prefix and reserves the pages of the rest. 1: no room now (q waits). */
static int admit_one(engine *e, engine_req *q) {
    kv_cache_hit hit = {0};
    kv_cache_moves before = kv_cache_moves_get(&e->cache);
    double t0 = cd_now_ms();
    if (e->cache_on && kv_cache_acquire(&e->cache, q->ns, q->all, matchable(q), &q->seq, &q->m, &hit)) {
        kv_seq_free(&e->pool.pages, &q->seq);
        kv_cache_release(&e->cache, &q->m);
        return -1;
    }
    charge_moves(e, q, before);
    uint32_t cached = q->seq.n_tokens;
    int rc = reserve(e, q, q->n_all - cached);
    if (rc) {
        kv_seq_free(&e->pool.pages, &q->seq);
        if (e->cache_on) kv_cache_release(&e->cache, &q->m);
        return rc;
    }
    if (!q->reply.preempted) { /* the first admission is the request's cache hit */
        engine_reply *r = &q->reply;
        r->cached_tokens = cached;
        q->n_kv_max = cached;
        r->queued_ms = t0 - q->t_submit;
        r->acquire_ms = cd_now_ms() - t0;
        r->restored_tokens = hit.restored_tokens;
        r->restored_pages = hit.restored_pages;
        r->restore_ms = hit.restore_ms;
        r->disk_tokens = hit.disk_tokens;
        r->disk_chunks_read = hit.disk_chunks_read;
        r->disk_rejected = hit.disk_rejected;
        r->disk_bytes_read = hit.disk_bytes_read;
        r->disk_read_ms = hit.disk_read_ms;
        if (q->deferred && cached > q->deferred_base) e->stats.dedup_tokens += cached - q->deferred_base;
    }
    q->n_kv = cached;
    q->n_target = q->n_all;
    q->row = free_row(e);
    e->row_free[q->row] = 0;
    q->admit_no = ++e->n_admitted;
    q->state = REQ_RUNNING;
    return 0;
}

/* The next waiting request to admit: one past the age bound first (oldest), else the longest
 * cached prefix (ties: the oldest). Requests whose prefix another is prefilling are skipped. */
static engine_req *pick(engine *e) {
    engine_req *best = NULL, *aged = NULL;
    uint32_t best_cached = 0;
    for (uint32_t i = 0; i < e->n_reqs; i++) {
        engine_req *q = e->reqs[i];
        if (q->state != REQ_WAITING) continue;
        uint32_t cached = cached_now(e, q);
        if (prefix_in_flight(e, q, cached)) {
            if (!q->deferred) q->deferred_base = cached;
            q->deferred = true;
            continue;
        }
        if (e->n_steps - q->submit_step > e->max_wait_steps && !aged) aged = q; /* reqs are in submit order */
        if (!best || cached > best_cached) best = q, best_cached = cached;
    }
    return aged ? aged : best;
}

static void admit(engine *e) {
    uint32_t running = engine_running(e);
    while (running < e->max_seqs) {
        engine_req *q = pick(e);
        if (!q) break;
        int rc = admit_one(e, q);
        if (rc < 0) { /* this request fails (its reply says so); the others go on */
            finish(e, q, ENGINE_ERROR);
            continue;
        }
        if (rc > 0) break; /* no room: wait for running requests to finish */
        running++;
    }
}

/* ---- one step ---- */

/* The youngest running request (largest admission number). */
static engine_req *youngest(const engine *e) {
    engine_req *y = NULL;
    for (uint32_t i = 0; i < e->n_reqs; i++) {
        engine_req *q = e->reqs[i];
        if (q->state == REQ_RUNNING && (!y || q->admit_no > y->admit_no)) y = q;
    }
    return y;
}

/* Room in every decoding sequence for its next token; the youngest running requests are
 * preempted while the pool is short. A request alone that cannot grow ends (length). */
static int grow_decoders(engine *e) {
    for (uint32_t i = 0; i < e->n_reqs; i++) {
        engine_req *q = e->reqs[i];
        if (q->state != REQ_RUNNING || q->n_kv < q->n_target || q->seq.n_tokens > q->n_kv) continue;
        for (;;) {
            int rc = reserve(e, q, 1);
            if (rc < 0) return -1;
            if (rc == 0) break;
            engine_req *y = youngest(e);
            if (y == q && engine_running(e) == 1) {
                finish(e, q, ENGINE_LENGTH); /* the whole pool is this request's */
                break;
            }
            preempt(e, y);
            if (y == q) break;
        }
    }
    return 0;
}

/* Appends token id at pos of p's request to the pass; out: it has an output row (p's next). */
static void add_token(engine *e, pass_entry *p, int32_t id, uint32_t pos, bool out, uint32_t *nb, uint32_t *no) {
    e->b_ids[*nb] = id;
    e->b_row[*nb] = p->q->row;
    e->b_pos[*nb] = pos;
    if (out) {
        e->b_out[*no] = *nb;
        e->b_owner[(*no)++] = (uint32_t)(p - e->pass);
    }
    (*nb)++;
}

/* A new entry of the pass for q, its first output row the pass's next (*no). */
static pass_entry *pass_add(engine *e, engine_req *q, uint32_t no) {
    pass_entry *p = &e->pass[e->n_pass++];
    *p = (pass_entry){.q = q, .first_out = no};
    return p;
}

/* p's prompt chunk [n_kv, n_kv + n), shortened to the prompt rows left (*room), and its output
 * rows: each position's whose log-probability its request still reads (lp_pos, n_lp), then the
 * last one's when the chunk ends the prefill (gen_row; none for max_tokens 0). */
static uint32_t chunk_rows(pass_entry *p, uint32_t n, uint32_t *room) {
    const engine_req *q = p->q;
    uint32_t a = q->n_kv, from = a > q->lp_next ? a : q->lp_next, end = q->n_prompt - 1;
    uint32_t hi = a + n < end ? a + n : end;
    if (wants_prompt_rows(q) && hi > from) {
        uint32_t k = hi - from < *room ? hi - from : *room;
        if (k < hi - from) n = from + k - a; /* the chunk ends after its last row */
        p->lp_pos = from, p->n_lp = k;
        *room -= k;
    }
    p->gen_row = a + n == q->n_target && q->rq.max_tokens > 0;
    return n;
}

/* Adds the prompt tokens [n_kv, n_kv + n) of p's request to the pass, with the output rows
 * chunk_rows chose. */
static void add_tokens(engine *e, pass_entry *p, uint32_t n, uint32_t *nb, uint32_t *no) {
    const engine_req *q = p->q;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t pos = q->n_kv + i;
        bool out = (pos >= p->lp_pos && pos - p->lp_pos < p->n_lp) || (pos + 1 == q->n_target && p->gen_row);
        add_token(e, p, q->all[pos], pos, out, nb, no);
    }
    p->fed = n;
}

/* Speculative decoding: the guessed next tokens of p's request (lookup_draft.h) into p->draft,
 * as many as fit *room (the pass's rows for guesses, taken), what is left of its max_tokens (the
 * pass gives one token more than it guesses), the context and its reserved pages, which may
 * grow from free pages only. */
static uint32_t guess(engine *e, pass_entry *p, uint32_t *room) {
    engine_req *q = p->q;
    uint32_t left = q->rq.max_tokens - q->reply.n, k = e->spec_tokens < *room ? e->spec_tokens : *room;
    if (!k || left < 2) return 0;
    if (k > left - 1) k = left - 1;
    if (k > e->g.n_ctx - q->n_all) k = e->g.n_ctx - q->n_all; /* positions up to n_all - 1 + k */
    uint32_t k_max = k;
    k = e->guess ? e->guess(e->guess_ctx, q->all, q->n_all, k_max, p->draft)
                 : lookup_draft(q->all, q->n_all, k_max, p->draft);
    if (k > k_max) k = 0; /* a guesser that broke its contract guesses nothing */
    for (uint32_t i = 0; i < k; i++)
        if (p->draft[i] < 0 || (uint32_t)p->draft[i] >= e->m->cfg.n_vocab)
            k = i; /* nor past a token not in the vocabulary */
    if (k && q->seq.n_tokens < q->n_all + k) {
        uint32_t more = q->n_all + k - q->seq.n_tokens;
        if (kv_pool_pages_needed(&e->pool, &q->seq, more) > kv_pages_free_count(&e->pool.pages) ||
            kv_pool_extend(&e->pool, &q->seq, more))
            k = q->seq.n_tokens - q->n_all; /* grow_decoders left room for the last token */
    }
    *room -= k;
    return k;
}

/* The decode token of p's request (its last, at n_kv = n_all - 1) and its guess after it, each
 * with an output row. */
static void add_decode(engine *e, pass_entry *p, uint32_t *nb, uint32_t *no) {
    const engine_req *q = p->q;
    add_token(e, p, q->all[q->n_kv], q->n_kv, true, nb, no);
    for (uint32_t i = 0; i < p->n_draft; i++) add_token(e, p, p->draft[i], q->n_kv + 1 + i, true, nb, no);
    p->fed = 1 + p->n_draft;
    p->gen_row = true;
}

/* The pass (e->pass, e->n_pass): decode tokens first (one per decoding sequence, and its
 * guess), then prompt chunks of prefilling ones in admission order, up to chunk_tokens and the
 * pass's capacity (output rows: one per sequence, ENGINE_SPEC_ROWS for guesses,
 * ENGINE_PROMPT_ROWS for prompt positions). Each entry's tokens and rows follow the previous
 * entry's. */
static void build_pass(engine *e, uint32_t *nb, uint32_t *no) {
    *nb = *no = 0;
    e->n_pass = 0;
    uint32_t guess_room = e->max_out - e->max_seqs - ENGINE_PROMPT_ROWS, lp_room = ENGINE_PROMPT_ROWS;
    for (uint32_t i = 0; i < e->n_reqs; i++) {
        engine_req *q = e->reqs[i];
        if (q->state != REQ_RUNNING || q->n_kv < q->n_target) continue;
        pass_entry *p = pass_add(e, q, *no);
        p->n_draft = guess(e, p, &guess_room);
        add_decode(e, p, nb, no);
    }
    uint32_t budget = e->chunk_tokens, cap = e->g.n_batch;
    for (const engine_req *last = NULL;;) { /* oldest admission first, each prefilling request once */
        engine_req *next = NULL;
        for (uint32_t i = 0; i < e->n_reqs; i++) {
            engine_req *q = e->reqs[i];
            if (q->state == REQ_RUNNING && q->n_kv < q->n_target && (!last || q->admit_no > last->admit_no) &&
                (!next || q->admit_no < next->admit_no))
                next = q;
        }
        uint32_t room = cap - *nb < budget ? cap - *nb : budget;
        if (!next || !room) break;
        last = next;
        pass_entry *p = pass_add(e, next, *no);
        uint32_t n = chunk_rows(p, next->n_target - next->n_kv < room ? next->n_target - next->n_kv : room, &lp_room);
        add_tokens(e, p, n, nb, no);
        budget -= n;
    }
}

static bool is_stop(const engine *e, const engine_req *q, int32_t id) {
    if (!q->rq.ignore_eos && tok_is_eog(e->m->tok, id)) return true;
    for (uint32_t i = 0; i < q->rq.n_stop; i++)
        if (q->stop[i] == id) return true;
    return false;
}

/* The token chosen after q's last fed token. */
static void emit(engine *e, engine_req *q, int32_t id) {
    double t = cd_now_ms();
    engine_reply *r = &q->reply;
    if (r->n == 0) r->ttft_ms = t - q->t_submit;
    else if (t - q->t_last > r->itl_ms_max) r->itl_ms_max = t - q->t_last;
    q->t_last = t;
    q->all[q->n_all++] = r->ids[r->n++] = id;
    q->n_target = q->n_all - 1; /* decode: feed it next step */
    bool more = !q->rq.on_token || q->rq.on_token(q->rq.ctx, id);
    if (q->state == REQ_DONE) return; /* the callback cancelled it */
    if (is_stop(e, q, id)) {
        r->eog = tok_is_eog(e->m->tok, id) && !q->rq.ignore_eos;
        finish(e, q, ENGINE_STOP);
    } else if (!more) {
        finish(e, q, ENGINE_STOP);
    } else if (r->n >= q->rq.max_tokens || q->n_all >= e->g.n_ctx) {
        finish(e, q, ENGINE_LENGTH);
    }
}

/* ---- the host's say in a pass's tokens ----
 * A row's token is the device's choice (argmax, or its draw) unless its request draws on the
 * host, adjusts (logit_bias, penalties) or masks (json_object, json_schema) the row; then the row comes down
 * and the host chooses from an adjusted copy. The raw row also goes to logits_out and the
 * logprobs. The rows the host reads come down in one download (on a GPU one copy and one wait
 * a pass, not one a row) and are shared among the host's workers (host_workers.h: threads that
 * sleep between passes). Each row's result depends only on its own row and request, whichever
 * worker takes it (batch invariance). */

static bool json_masked(const engine_req *q) { return q->jm.schema != NULL; }
static bool host_draws(const engine_req *q) { return q->adjusted || json_masked(q) || (q->sample && !q->sample_gpu); }
/* Whether the host reads the rows of p (its prompt positions' rows are always read). */
static bool host_reads(const pass_entry *p) {
    const engine_req *q = p->q;
    return host_draws(q) || q->rq.logits_out || q->rq.on_logprob || p->n_lp;
}

/* Row raw's token for q (id: the device's choice; worker w's scratch), its logprobs into *lp
 * when asked; `ahead` tokens of q's guess were chosen before it in this pass (they sit in
 * reply.ids past reply.n, where emit will put them). */
static int32_t choose_from_row(engine *e, engine_req *q, const float *raw, uint32_t w, int32_t id, token_logprob *lp,
                               uint32_t ahead) {
    int32_t V = (int32_t)e->m->cfg.n_vocab;
    const float *pick = raw;
    bool masking = json_masked(q) && json_mask_active(&q->jm); /* a lazy mask waiting changes nothing */
    if (q->adjusted || masking) {
        float *adj = e->adj_logits + (size_t)w * (size_t)V;
        memcpy(adj, raw, (size_t)V * sizeof *raw);
        if (q->adjusted)
            logit_adjust_apply(&q->adj, q->reply.ids, q->reply.n + ahead, adj, V, e->adj_count + (size_t)w * (size_t)V);
        if (masking) json_mask_apply(&q->jm, adj, V);
        pick = adj;
    }
    if (host_draws(q)) id = q->sample ? sampler_sample(&q->smp, pick) : sampler_argmax(pick, V);
    if (json_masked(q)) json_mask_accept(&q->jm, id);
    if (q->rq.on_logprob) sampler_logprob(raw, V, id, q->rq.top_logprobs, lp);
    return id;
}

typedef struct host_rows_job {
    engine *e;
    uint32_t lo;
    const uint32_t *rows; /* each item's output row: a prompt position's, or a request's first
                           * choosing row (the rows of its guess follow) */
} host_rows_job;

/* Whether the choice t on p's choosing row i keeps the guessed token fed after that row: then
 * row i + 1 follows from its request's own tokens (and is chosen too). */
static bool guess_kept(const engine *e, const pass_entry *p, uint32_t i, int32_t t) {
    return i < p->n_draft && p->draft[i] == t && !is_stop(e, p->q, t);
}

/* One item: a prompt position's log-probabilities (rows apart: each depends on its row alone),
 * or a request's choosing rows in order (each row's choice depends on the tokens before it:
 * penalties, the JSON mask, the generator), up to the first whose choice drops the guess. */
static void host_row_work(void *ctx, uint32_t item, uint32_t worker) {
    const host_rows_job *h = ctx;
    engine *e = h->e;
    uint32_t j = h->rows[item];
    const pass_entry *p = &e->pass[e->b_owner[j]];
    engine_req *q = p->q;
    int32_t V = (int32_t)e->m->cfg.n_vocab;
    if (j - p->first_out < p->n_lp) {
        uint32_t pos = p->lp_pos + (j - p->first_out);
        sampler_logprob(e->host_rows + (size_t)(j - h->lo) * (size_t)V, V, q->all[pos + 1], q->rq.prompt_top_logprobs,
                        &e->b_lp[j]);
        return;
    }
    for (uint32_t i = 0;; i++, j++) {
        const float *raw = e->host_rows + (size_t)(j - h->lo) * e->m->cfg.n_vocab;
        int32_t t = e->b_next[j] = choose_from_row(e, q, raw, worker, e->b_next[j], &e->b_lp[j], i);
        if (!guess_kept(e, p, i, t)) break;
        q->reply.ids[q->reply.n + i] = t; /* the next row's penalties count it */
    }
}

/* e->b_next[j] for every output row the host reads, from rows [lo, hi) downloaded together into
 * e->host_rows (*first = lo). A request's rows (its guess's) are consecutive and go to one
 * worker. */
static int choose_on_host(engine *e, uint32_t no, uint32_t *first) {
    uint32_t lo = no, hi = 0;
    for (uint32_t i = 0; i < e->n_pass; i++) {
        const pass_entry *p = &e->pass[i];
        uint32_t rows = pass_entry_rows(p);
        if (!rows || !host_reads(p)) continue;
        lo = p->first_out < lo ? p->first_out : lo;
        hi = p->first_out + rows;
    }
    *first = lo;
    if (lo >= hi) return 0;
    size_t V = e->m->cfg.n_vocab;
    if (hi - lo > e->cap_host_rows) {
        float *p = realloc(e->host_rows, (size_t)(hi - lo) * V * sizeof *p);
        if (!p) return cd_fail("out of memory for %u rows of logits", hi - lo);
        e->host_rows = p, e->cap_host_rows = hi - lo;
    }
    CD_TRY(gpu_model_batch_logits_rows(&e->g, lo, hi - lo, e->host_rows));
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->n_pass; i++) { /* items: each prompt position's row, each first choosing row */
        const pass_entry *p = &e->pass[i];
        if (!host_reads(p)) continue;
        for (uint32_t k = 0; k < p->n_lp; k++) e->host_list[n++] = p->first_out + k;
        if (p->gen_row) e->host_list[n++] = p->first_out + p->n_lp;
    }
    if (n > 1 && !e->workers.inited) host_workers_init(&e->workers, e->n_workers - 1);
    host_rows_job h = {.e = e, .lo = lo, .rows = e->host_list};
    host_workers_run(&e->workers, n, host_row_work, &h);
    return 0;
}

/* The tokens of p's request from its choosing rows (host rows from lo): each row's, in order,
 * while the guessed token after a row is the one chosen there (its K/V, written in the pass,
 * then counts). */
static void emit_rows(engine *e, const pass_entry *p, uint32_t lo) {
    engine_req *q = p->q;
    size_t V = e->m->cfg.n_vocab;
    q->reply.draft_tokens += p->n_draft; /* before emit: its finish adds the reply to the stats */
    uint32_t i = 0;
    for (uint32_t j = p->first_out + p->n_lp;; i++, j++) {
        if (q->rq.logits_out) memcpy(q->rq.logits_out, e->host_rows + (size_t)(j - lo) * V, V * sizeof(float));
        if (q->rq.on_logprob) q->rq.on_logprob(q->rq.ctx, &e->b_lp[j]);
        int32_t t = e->b_next[j];
        emit(e, q, t);
        if (q->state != REQ_RUNNING || !guess_kept(e, p, i, t)) break;
        q->n_kv++; /* the guessed token at this position is the sequence's */
        if (q->n_kv > q->n_kv_max) q->n_kv_max = q->n_kv;
        q->reply.accepted_tokens++;
    }
    if (q->sample_gpu) /* one draw per token emitted (device_draws drew on a copy) */
        for (uint32_t d = 0; d <= i; d++) (void)rng_f32(&q->smp.rng);
}

/* After a pass: commit finished prefills, then the chosen tokens. */
static int after_pass(engine *e, uint32_t no) {
    for (uint32_t i = 0; i < e->n_pass; i++) {
        const pass_entry *p = &e->pass[i];
        engine_req *q = p->q;
        bool prefill = q->n_kv < q->n_target;
        uint32_t lo = q->n_kv, hi = lo + (prefill ? p->fed : 1); /* a decode's guessed tokens count when kept */
        q->n_kv = hi;
        if (prefill) { /* prompt positions new to it; positions it had before a preemption */
            uint32_t new_lo = lo > q->n_kv_max ? lo : q->n_kv_max, new_hi = hi < q->n_prompt ? hi : q->n_prompt;
            uint32_t again_hi = hi < q->n_kv_max ? hi : q->n_kv_max;
            q->reply.prefilled_tokens += new_hi > new_lo ? new_hi - new_lo : 0;
            q->reply.recomputed_tokens += again_hi > lo ? again_hi - lo : 0;
        }
        if (hi > q->n_kv_max) q->n_kv_max = hi;
        if (prefill && q->n_kv == q->n_target && e->cache_on && !q->prompt_committed) {
            /* others can match it now; a failure only means they will not */
            if (kv_cache_commit(&e->cache, q->ns, q->all, q->n_kv, &q->seq, KV_COMMIT_PROMPT, NULL))
                commit_failed(e, "caching a prompt");
            q->prompt_committed = true;
        }
    }
    uint32_t lo;
    CD_TRY(choose_on_host(e, no, &lo));
    for (uint32_t i = 0; i < e->n_pass; i++) { /* on this thread: the callbacks */
        const pass_entry *p = &e->pass[i];
        engine_req *q = p->q;
        for (uint32_t k = 0; k < p->n_lp; k++)
            q->rq.on_prompt_logprob(q->rq.ctx, p->lp_pos + k + 1, &e->b_lp[p->first_out + k]);
        if (p->n_lp) q->lp_next = p->lp_pos + p->n_lp;
        e->stats.scored_tokens += p->n_lp;
        if (p->gen_row) emit_rows(e, p, lo);
    }
    for (uint32_t i = 0; i < e->n_pass; i++) { /* max_tokens 0: the prompt was all it asked for */
        engine_req *q = e->pass[i].q;
        if (q->state == REQ_RUNNING && !q->rq.max_tokens && q->n_kv >= q->n_target) finish(e, q, ENGINE_LENGTH);
    }
    return 0;
}

/* The draws of the pass's output rows made on the device (this step's u from each request's
 * generator, one per token as sampler_sample takes): NULL when every row is greedy or drawn on
 * the host. A request's rows draw ahead on a copy of its generator; emit_rows advances the
 * generator once per token it keeps (a guess's dropped rows draw nothing, as without guessing). */
static const cvk_sample_row *device_draws(engine *e, uint32_t no) {
    bool any = false;
    for (uint32_t j = 0; j < no; j++) e->b_sample[j] = (cvk_sample_row){0};
    for (uint32_t i = 0; i < e->n_pass; i++) {
        const pass_entry *p = &e->pass[i];
        const engine_req *q = p->q;
        if (!q->sample_gpu || !p->gen_row) continue; /* a prompt position's row chooses nothing */
        rng ahead = q->smp.rng;
        const sampler_params *sp = &q->smp.p;
        for (uint32_t j = p->first_out + p->n_lp; j < p->first_out + pass_entry_rows(p); j++)
            e->b_sample[j] = (cvk_sample_row){sp->temperature, sp->top_k, sp->top_p, rng_f32(&ahead)};
        any = true;
    }
    return any ? e->b_sample : NULL;
}

static void fail_running(engine *e) {
    for (uint32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->state == REQ_RUNNING) finish(e, e->reqs[i], ENGINE_ERROR);
}

int engine_step(engine *e, uint32_t *busy) {
    e->stats.steps++;
    e->n_steps++;
    admit(e);
    int rc = grow_decoders(e);
    uint32_t nb = 0, no = 0;
    e->n_pass = 0;
    if (!rc) {
        build_pass(e, &nb, &no);
        for (uint32_t i = 0; i < e->n_pass && !rc; i++) {
            const engine_req *q = e->pass[i].q;
            rc = gpu_model_set_table(&e->g, q->row, q->seq.pages, q->seq.n_pages);
        }
    }
    if (!rc && nb) {
        gpu_batch b = {.n = nb,
                       .ids = e->b_ids,
                       .row = e->b_row,
                       .pos = e->b_pos,
                       .n_out = no,
                       .out = e->b_out,
                       .sample = device_draws(e, no)};
        rc = gpu_forward_batch(&e->g, &b, e->b_next) || after_pass(e, no);
    }
    if (rc) fail_running(e);
    if (busy) *busy = engine_running(e) + engine_waiting(e);
    return rc ? -1 : 0;
}
