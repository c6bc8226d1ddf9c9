#include "server/bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"

/* Seconds: TTFT, inter-token and end-to-end latencies of a local engine span ms to minutes. */
const double hist_bounds[HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

void hist_add(histogram *h, double v) {
    for (int i = 0; i < HIST_BUCKETS; i++)
        if (v <= hist_bounds[i]) h->count[i]++;
    h->count[HIST_BUCKETS]++;
    h->sum += v;
    h->n++;
}

int bridge_init(bridge *b, uint32_t max_queue) {
    *b = (bridge){.max_queue = max_queue};
    b->incoming_tail = &b->incoming;
    if (pthread_mutex_init(&b->mu, NULL)) return cd_fail("pthread_mutex_init failed");
    if (pthread_cond_init(&b->wake, NULL) || pthread_cond_init(&b->listed, NULL)) {
        pthread_mutex_destroy(&b->mu);
        return cd_fail("pthread_cond_init failed");
    }
    return 0;
}

void bridge_free(bridge *b) {
    for (job *j = b->incoming, *next; j; j = next) {
        next = j->next;
        job_unref(j);
    }
    pthread_cond_destroy(&b->wake);
    pthread_cond_destroy(&b->listed);
    pthread_mutex_destroy(&b->mu);
    free(b->list_hash);
    free(b->list_medium);
}

int bridge_submit(bridge *b, job **jobs, uint32_t n) {
    pthread_mutex_lock(&b->mu);
    int rc = !b->ready ? -1 : b->stopping || b->n_incoming + b->snap.waiting + n > b->max_queue ? 1 : 0;
    for (uint32_t k = 0; !rc && k < n; k++) {
        jobs[k]->next = NULL;
        *b->incoming_tail = jobs[k];
        b->incoming_tail = &jobs[k]->next;
        b->n_incoming++;
    }
    if (!rc) {
        b->snap.queued = b->n_incoming;
        pthread_cond_signal(&b->wake);
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void bridge_cancel(bridge *b, job *j) {
    pthread_mutex_lock(&b->mu);
    j->cancel = true;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->mu);
}

void bridge_stop(bridge *b) {
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->mu);
}

void bridge_load_progress(void *ctx, uint64_t done, uint64_t total) {
    bridge *b = ctx;
    pthread_mutex_lock(&b->mu);
    b->load_done = done, b->load_total = total;
    pthread_mutex_unlock(&b->mu);
}

double bridge_load_fraction(bridge *b) {
    pthread_mutex_lock(&b->mu);
    double f = b->load_total ? (double)b->load_done / (double)b->load_total : 0.0;
    pthread_mutex_unlock(&b->mu);
    return f > 1 ? 1 : f;
}

bool bridge_ready(bridge *b) {
    pthread_mutex_lock(&b->mu);
    bool r = b->ready;
    pthread_mutex_unlock(&b->mu);
    return r;
}

void bridge_count_rejected(bridge *b) {
    pthread_mutex_lock(&b->mu);
    b->snap.req_rejected++;
    pthread_mutex_unlock(&b->mu);
}

/* ---- the engine thread ---- */

/* The bridge whose engine thread this is: on_token's way back to the mutex (thread-local, so
 * two servers in one process, as tests may run, keep apart). */
static _Thread_local bridge *bridge_of_thread;

typedef struct runner {
    bridge *b;
    engine *e;
    job *active;      /* submitted to the engine, not finished */
    uint64_t ev_mark; /* the KV event batch of the last step (kv_pub_flush) */
} runner;

/* Per generated token (engine thread, inside engine_step). */
static bool on_token(void *ctx, int32_t id) {
    job *j = ctx;
    char piece[1024];
    int n = tok_is_eog(j->tok, id) ? 0 : tok_stream_push(j->tok, &j->ts, id, piece, sizeof piece);
    double t = cd_now_ms();
    bridge *b = bridge_of_thread;
    pthread_mutex_lock(&b->mu);
    bool more = n <= 0 || job_append(j, piece, (size_t)n);
    if (j->n_gen++ == 0) hist_add(&b->snap.ttft, (t - j->t_submit_ms) / 1e3);
    else hist_add(&b->snap.itl, (t - j->t_last_ms) / 1e3);
    j->t_last_ms = t;
    job_signal(j);
    pthread_mutex_unlock(&b->mu);
    return more;
}

/* Appends lp to j's list (*list, *n, *cap: lp or plp); the bridge mutex held. */
static void keep_logprob(job *j, token_logprob **list, uint32_t *n, uint32_t *cap, const token_logprob *lp) {
    if (*n == *cap) {
        uint32_t grown = *cap ? 2 * *cap : 64;
        token_logprob *p = realloc(*list, grown * sizeof *p);
        if (p) *list = p, *cap = grown;
    }
    if (*n < *cap) (*list)[(*n)++] = *lp;
    else j->lp_lost = true;
}

/* A token's log-probabilities, kept for the reply (an end token is not output: not kept). */
static void on_logprob(void *ctx, const token_logprob *lp) {
    job *j = ctx;
    if (tok_is_eog(j->tok, lp->id)) return;
    bridge *b = bridge_of_thread;
    pthread_mutex_lock(&b->mu);
    keep_logprob(j, &j->lp, &j->n_lp, &j->cap_lp, lp);
    pthread_mutex_unlock(&b->mu);
}

/* A prompt token's (positions 1.. in order): the last one wakes a stream waiting to echo them. */
static void on_prompt_logprob(void *ctx, uint32_t pos, const token_logprob *lp) {
    job *j = ctx;
    bridge *b = bridge_of_thread;
    pthread_mutex_lock(&b->mu);
    keep_logprob(j, &j->plp, &j->n_plp, &j->cap_plp, lp);
    if (pos + 1 == j->n_ids) job_signal(j);
    pthread_mutex_unlock(&b->mu);
}

static void finish_job(runner *r, job *j, engine_reply *rep, int err_status, const char *err) {
    bridge *b = r->b;
    char tail[8];
    int nt = tok_stream_flush(&j->ts, tail, sizeof tail);
    pthread_mutex_lock(&b->mu);
    if (nt > 0 && !j->stopped_by_string) job_append(j, tail, (size_t)nt);
    j->stable = j->len;
    if (rep) {
        static const job_finish finish[] = {[ENGINE_STOP] = JOB_STOP,
                                            [ENGINE_LENGTH] = JOB_LENGTH,
                                            [ENGINE_CANCELLED] = JOB_CANCELLED,
                                            [ENGINE_ERROR] = JOB_FAILED};
        j->out = (job_outcome){.cached_tokens = rep->cached_tokens,
                               .host_tokens = rep->restored_tokens,
                               .disk_tokens = rep->disk_tokens,
                               .ttft_ms = rep->ttft_ms,
                               .decode_ms = rep->decode_ms,
                               .n = rep->n,
                               .eog = rep->eog,
                               .finish = finish[rep->finish]};
        if (j->keep_gen) { /* the ids the reply memory takes: rep's, moved */
            j->gen = rep->ids, j->n_gen_kept = rep->n;
            rep->ids = NULL, rep->n = 0;
        }
    }
    j->err_status = err_status;
    if (err) snprintf(j->err, sizeof j->err, "%s", err);
    j->state = JOB_DONE;
    j->ev_mark = r->ev_mark; /* its final commit was in the step just flushed: the reply waits for it */
    if (err_status == 400) b->snap.req_rejected++;
    else if (err_status || (rep && rep->finish == ENGINE_ERROR)) b->snap.req_error++;
    else if (rep->finish == ENGINE_CANCELLED) b->snap.req_cancelled++;
    else if (rep->finish == ENGINE_LENGTH) b->snap.req_length++;
    else b->snap.req_ok++;
    if (!err_status) hist_add(&b->snap.e2e, (cd_now_ms() - j->t_submit_ms) / 1e3);
    job_signal(j);
    job_unref(j); /* the engine thread's reference */
    pthread_mutex_unlock(&b->mu);
}

static void start_job(runner *r, job *j) {
    j->tok = engine_tokenizer(r->e);
    j->t_submit_ms = j->t_last_ms = cd_now_ms();
    engine_request rq = {.ids = j->ids,
                         .n = j->n_ids,
                         .max_tokens = j->max_tokens,
                         .on_token = on_token,
                         .ctx = j,
                         .sp = &j->sp,
                         .cache_salt = j->cache_salt,
                         .adjust = &j->adjust,
                         .on_logprob = j->logprobs ? on_logprob : NULL,
                         .top_logprobs = j->top_logprobs,
                         .on_prompt_logprob = j->prompt_logprobs ? on_prompt_logprob : NULL,
                         .prompt_top_logprobs = j->prompt_top,
                         .json_object = j->json_object,
                         .json_schema = j->schema,
                         .json_forced = j->forced_json,
                         .json_tail = j->json_tail,
                         .json_lazy = j->json_lazy,
                         .json_trigger = j->json_trigger,
                         .json_once = j->json_once,
                         .json_coder = j->coder_tools};
    if (engine_submit(r->e, &rq, &j->handle)) {
        finish_job(r, j, NULL, 400, cd_errmsg());
        return;
    }
    pthread_mutex_lock(&r->b->mu);
    j->state = JOB_RUNNING;
    job_signal(j); /* a streamed reply starts once the engine took the request */
    pthread_mutex_unlock(&r->b->mu);
    j->next = r->active;
    r->active = j;
}

/* Jobs finished in the last step are handed back; cancelled ones are cancelled first. */
static void retire(runner *r) {
    for (job **p = &r->active; *p;) {
        job *j = *p;
        pthread_mutex_lock(&r->b->mu);
        bool cancel = j->cancel;
        pthread_mutex_unlock(&r->b->mu);
        if (cancel) engine_cancel(r->e, j->handle);
        engine_reply rep;
        if (engine_poll(r->e, j->handle, &rep) == 1) {
            *p = j->next;
            finish_job(r, j, &rep, rep.finish == ENGINE_ERROR ? 500 : 0,
                       rep.finish == ENGINE_ERROR ? "the engine failed while running the request" : NULL);
            engine_reply_free(&rep);
        } else {
            p = &j->next;
        }
    }
}

static void publish(runner *r) {
    bridge_snapshot *s = &r->b->snap;
    engine_cache_info ci;
    engine_cache_info_get(r->e, &ci);
    pthread_mutex_lock(&r->b->mu);
    s->stats = engine_stats_get(r->e);
    s->cache = ci;
    s->running = engine_running(r->e);
    s->waiting = engine_waiting(r->e);
    pthread_mutex_unlock(&r->b->mu);
}

/* Takes the queued jobs; waits while there is nothing to do. */
static job *take_incoming(runner *r, bool *stopping) {
    bridge *b = r->b;
    pthread_mutex_lock(&b->mu);
    while (!b->stopping && !b->incoming && !r->active && !b->list_want) pthread_cond_wait(&b->wake, &b->mu);
    job *in = b->incoming;
    b->incoming = NULL;
    b->incoming_tail = &b->incoming;
    b->n_incoming = 0;
    b->snap.queued = 0;
    *stopping = b->stopping;
    pthread_mutex_unlock(&b->mu);
    return in;
}

/* A listing of the cache's pages, growing (the engine thread's, until handed over). */
typedef struct listing {
    uint64_t *hash;
    uint8_t *medium;
    uint32_t n, cap;
    bool oom;
} listing;

static void list_one(void *ctx, uint64_t hash, kv_medium m) {
    listing *l = ctx;
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 1024;
        uint64_t *h = realloc(l->hash, cap * sizeof *h);
        if (h) l->hash = h;
        uint8_t *md = h ? realloc(l->medium, cap) : NULL;
        if (md) l->medium = md;
        if (!h || !md) {
            l->oom = true;
            return;
        }
        l->cap = cap;
    }
    l->hash[l->n] = hash;
    l->medium[l->n++] = (uint8_t)m;
}

/* Makes the listing a connection thread asked for (between steps: what the events so far say). */
static void make_listing(runner *r) {
    bridge *b = r->b;
    pthread_mutex_lock(&b->mu);
    bool want = b->list_want;
    pthread_mutex_unlock(&b->mu);
    if (!want) return;
    listing l = {0};
    int rc = engine_cache_pages(r->e, list_one, &l) || l.oom ? -1 : 0;
    pthread_mutex_lock(&b->mu);
    free(b->list_hash);
    free(b->list_medium);
    b->list_hash = l.hash, b->list_medium = l.medium, b->n_list = l.n, b->list_rc = rc;
    b->list_want = false;
    b->list_gen++;
    pthread_cond_broadcast(&b->listed);
    pthread_mutex_unlock(&b->mu);
}

int bridge_list_pages(bridge *b) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&b->mu);
    uint64_t gen = b->list_gen;
    b->list_want = true;
    pthread_cond_signal(&b->wake);
    while (b->list_gen == gen && !b->stopping)
        if (pthread_cond_timedwait(&b->listed, &b->mu, &ts)) break;
    return b->list_gen != gen && !b->list_rc ? 0 : -1;
}

/* Ends the step for the KV event stream: its batch is queued before any reply it concerns. */
static void flush_events(runner *r) {
    if (r->b->pub) r->ev_mark = kv_pub_flush(r->b->pub);
}

int bridge_run(bridge *b, engine *e) {
    runner r = {.b = b, .e = e};
    bridge_of_thread = b;
    flush_events(&r); /* the cleared event of engine_init: seq 0 */
    publish(&r);
    for (;;) {
        bool stopping;
        job *in = take_incoming(&r, &stopping);
        make_listing(&r);
        for (job *j = in, *next; j; j = next) {
            next = j->next;
            if (stopping) finish_job(&r, j, NULL, 503, "the server is shutting down");
            else start_job(&r, j);
        }
        if (stopping) {
            for (job *j = r.active; j; j = j->next) bridge_cancel(b, j);
            retire(&r);
            flush_events(&r);
            break;
        }
        retire(&r); /* cancellations first: they free pages for this step */
        flush_events(&r);
        uint32_t busy = 0;
        if (r.active && engine_step(e, &busy)) /* the requests in the pass failed; the server goes on */
            fprintf(stderr, "cinder serve: a forward pass failed: %s\n", cd_errmsg());
        flush_events(&r); /* the step's commits, before retire hands their replies back */
        publish(&r);      /* before the replies go out: a client that reads /v1/cache next sees its request gone */
        retire(&r);
        publish(&r); /* and after: retire may have cancelled some */
    }
    publish(&r);
    pthread_mutex_lock(&b->mu);
    pthread_cond_broadcast(&b->listed); /* a listing asked for now will not be made */
    pthread_mutex_unlock(&b->mu);
    return 0;
}
