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

int api_submit(server *s, job *j, api_err *e) {
    int rc = bridge_submit(&s->b, j);
    if (rc < 0) return api_fail(e, 503, NULL, "the model is loading");
    if (rc > 0) return api_fail(e, 503, NULL, "the server is busy: %u requests are waiting (--queue); retry later", s->o.queue);
    return 0;
}

/* Waits on j->cv at most 100 ms (the caller holds the mutex). */
static void wait_a_while(server *s, job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &s->b.mu, &ts);
}

/* Waits until j reaches state `until` (queued < running < done); a client that leaves
 * meanwhile cancels it (the engine thread then finishes it). */
static void wait_until(server *s, job *j, struct MHD_Connection *c, job_state until) {
    bool cancelled = false;
    pthread_mutex_lock(&s->b.mu);
    while (j->state < until) {
        wait_a_while(s, j);
        if (j->state == JOB_DONE || cancelled) continue;
        pthread_mutex_unlock(&s->b.mu);
        if (http_client_gone(c)) {
            bridge_cancel(&s->b, j);
            cancelled = true;
        }
        pthread_mutex_lock(&s->b.mu);
    }
    pthread_mutex_unlock(&s->b.mu);
}

void api_wait_done(server *s, job *j, struct MHD_Connection *c) { wait_until(s, j, c, JOB_DONE); }

void api_wait_started(server *s, job *j, struct MHD_Connection *c) { wait_until(s, j, c, JOB_RUNNING); }

bool api_wait_text(server *s, job *j, struct MHD_Connection *c, size_t seen, char **text, size_t *len, bool *done) {
    pthread_mutex_lock(&s->b.mu);
    if (j->stable <= seen && j->state != JOB_DONE) wait_a_while(s, j);
    bool moved = j->stable > seen || j->state == JOB_DONE;
    *done = j->state == JOB_DONE;
    *len = j->stable;
    *text = moved ? strndup(j->text ? j->text : "", j->stable) : NULL;
    pthread_mutex_unlock(&s->b.mu);
    if (moved && !*text) *len = seen; /* out of memory: try again next time */
    if (!moved && http_client_gone(c)) {
        bridge_cancel(&s->b, j);
        return false;
    }
    return true;
}

json_t *api_usage(const job *j) {
    uint32_t gen = j->out.n && j->out.eog ? j->out.n - 1 : j->out.n; /* the end token is not output */
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", (json_int_t)j->n_ids, "completion_tokens",
                     (json_int_t)gen, "total_tokens", (json_int_t)(j->n_ids + gen), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)j->out.cached_tokens);
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
