#include "server/api_generate.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/clock.h"

enum MHD_Result api_reply_err(struct MHD_Connection *c, const api_err *e) {
    return http_error(c, e->status, e->param, "%s", e->msg);
}

int api_submit(server *s, job **jobs, uint32_t n, api_err *e) {
    if (n > s->o.queue)
        return api_fail(e, 400, "n",
                        "the request has %u choices (prompts times n); this server queues %u requests at most "
                        "(--queue), and each choice is one",
                        n, s->o.queue);
    int rc = bridge_submit(&s->b, jobs, n);
    if (rc < 0) return api_fail(e, 503, NULL, "the model is loading");
    if (rc > 0)
        return api_fail(e, 503, NULL, "the server is busy: %u requests are waiting (--queue); retry later", s->o.queue);
    return 0;
}

void api_cancel(server *s, job **jobs, uint32_t n) {
    for (uint32_t k = 0; k < n; k++) bridge_cancel(&s->b, jobs[k]);
}

/* Waits on the choices' cv at most 100 ms (the caller holds the mutex). */
static void wait_a_while(server *s, job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(job_cv(j), &s->b.mu, &ts);
}

/* The least state of the n jobs (queued < running < done). */
static job_state least_state(job **jobs, uint32_t n) {
    job_state st = JOB_DONE;
    for (uint32_t k = 0; k < n; k++)
        if (jobs[k]->state < st) st = jobs[k]->state;
    return st;
}

/* Waits until every job reaches state `until`; a client that leaves meanwhile cancels them (the
 * engine thread then finishes them). */
static void wait_until(server *s, job **jobs, uint32_t n, struct MHD_Connection *c, job_state until) {
    bool cancelled = false;
    pthread_mutex_lock(&s->b.mu);
    while (least_state(jobs, n) < until) {
        wait_a_while(s, jobs[0]);
        if (least_state(jobs, n) == JOB_DONE || cancelled) continue;
        pthread_mutex_unlock(&s->b.mu);
        if (http_client_gone(c)) {
            api_cancel(s, jobs, n);
            cancelled = true;
        }
        pthread_mutex_lock(&s->b.mu);
    }
    pthread_mutex_unlock(&s->b.mu);
    if (until == JOB_DONE) api_wait_events(s, jobs, n);
}

void api_wait_events(server *s, job **jobs, uint32_t n) {
    if (!s->b.pub) return;
    uint64_t mark = 0;
    pthread_mutex_lock(&s->b.mu);
    for (uint32_t k = 0; k < n; k++)
        if (jobs[k]->state == JOB_DONE && jobs[k]->ev_mark > mark) mark = jobs[k]->ev_mark;
    pthread_mutex_unlock(&s->b.mu);
    kv_pub_wait(s->b.pub, mark);
}

void api_wait_done(server *s, job **jobs, uint32_t n, struct MHD_Connection *c) { wait_until(s, jobs, n, c, JOB_DONE); }

void api_wait_started(server *s, job **jobs, uint32_t n, struct MHD_Connection *c) {
    wait_until(s, jobs, n, c, JOB_RUNNING);
}

/* Choice k has something to hand over: stable text past seen[k], or its end (not yet told). */
static bool has_news(const job *j, size_t seen, bool told_done) {
    return j->stable > seen || (j->state == JOB_DONE && !told_done);
}

bool api_wait_text(server *s, job **jobs, uint32_t n, struct MHD_Connection *c, api_text *t) {
    pthread_mutex_lock(&s->b.mu);
    bool moved = false, ended = false;
    for (uint32_t k = 0; k < n && !moved; k++) moved = !t[k].hold && has_news(jobs[k], t[k].seen, t[k].done);
    if (!moved) wait_a_while(s, jobs[0]);
    moved = false;
    for (uint32_t k = 0; k < n; k++) {
        job *j = jobs[k];
        t[k].text = NULL;
        if (t[k].hold || !has_news(j, t[k].seen, t[k].done)) continue;
        moved = true;
        t[k].text = strndup(j->text ? j->text : "", j->stable);
        if (t[k].text) {
            ended = ended || (!t[k].done && j->state == JOB_DONE);
            t[k].len = j->stable, t[k].done = j->state == JOB_DONE;
        } /* else: out of memory, next time */
    }
    pthread_mutex_unlock(&s->b.mu);
    if (ended) api_wait_events(s, jobs, n); /* the stream's end follows its final commit's events */
    if (!moved && http_client_gone(c)) {
        api_cancel(s, jobs, n);
        return false;
    }
    return true;
}

json_t *api_usage(job **jobs, uint32_t n, uint32_t per_prompt) {
    uint32_t gen = 0, cached = 0, prompt = 0;
    for (uint32_t p = 0; p < n; p += per_prompt) {
        uint32_t least = jobs[p]->out.cached_tokens;
        for (uint32_t k = p; k < p + per_prompt; k++) {
            const job *j = jobs[k];
            gen += j->out.n && j->out.eog ? j->out.n - 1 : j->out.n; /* the end token is not output */
            if (j->out.cached_tokens < least) least = j->out.cached_tokens;
        }
        prompt += jobs[p]->n_ids;
        cached += least;
    }
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)gen, "total_tokens", (json_int_t)prompt + gen, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached);
}

json_t *api_timings(job **jobs, uint32_t n) {
    if (n != 1) return NULL;
    const job_outcome *o = &jobs[0]->out;
    uint32_t gen = o->n && o->eog ? o->n - 1 : o->n, prefilled = jobs[0]->n_ids - o->cached_tokens;
    /* the first token comes at the end of the prefill; the rest are the decode's */
    double per_s = gen > 1 && o->decode_ms > 0 ? (gen - 1) * 1000.0 / o->decode_ms : 0;
    return json_pack("{s:i, s:i, s:i, s:i, s:f, s:i, s:f, s:f}", "cache_n", (json_int_t)o->cached_tokens,
                     "cache_host_n", (json_int_t)o->host_tokens, "cache_disk_n", (json_int_t)o->disk_tokens, "prompt_n",
                     (json_int_t)prefilled, "prompt_ms", o->ttft_ms, "predicted_n", (json_int_t)gen, "predicted_ms",
                     o->decode_ms, "predicted_per_second", per_s);
}

const char *api_finish_reason(const job *j) {
    if (j->err_status) return NULL;
    switch (j->out.finish) {
    case JOB_STOP: return "stop";
    case JOB_LENGTH: return "length";
    default: return NULL;
    }
}

void api_new_id(server *s, const char *prefix, char *out, size_t cap) {
    uint64_t n = atomic_fetch_add(&s->next_id, 1);
    snprintf(out, cap, "%s%llx%06llx", prefix, (unsigned long long)time(NULL), (unsigned long long)n);
}

int sse_event(char **out, size_t *len, size_t *cap, json_t *obj) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) return -1;
    int rc = buf_printf(out, len, cap, "data: %s\n\n", s);
    free(s);
    return rc;
}
