/* POST /v1/chat/completions and /v1/completions: request -> prompt ids -> a job -> a reply in
 * OpenAI's shape, whole or streamed as Server-Sent Events. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/error.h"
#include "runtime/text/reply_stream.h"
#include "runtime/text/toolcall.h"
#include "server/api_generate.h"

/* ---- replies ---- */

typedef struct reply_ctx {
    server *s;
    job *j;
    struct MHD_Connection *c;
    bool chat, include_usage, sent_role, tool_calls;
    char id[48];
    json_int_t created;
    reply_stream rs;  /* chat */
    char call_prefix[80]; /* tool call ids: call_<id>_<index> (rs borrows it) */
    size_t seen;      /* bytes of the job's stable text already turned into chunks */
    uint32_t lp_sent; /* the job's log-probability entries already in chunks */
    size_t lp_chars;  /* completions: characters of text those entries cover (text_offset) */
} reply_ctx;

/* ---- log-probabilities (job.lp) in OpenAI's shapes ---- */

/* {"token", "logprob", "bytes"}: the token's text (a part of a UTF-8 sequence as U+FFFD) and bytes. */
static json_t *token_entry(const tokenizer *t, int32_t id, float logprob) {
    size_t n;
    const char *p = tok_piece(t, id, &n);
    json_t *bytes = json_array();
    for (size_t i = 0; i < n && bytes; i++)
        if (json_array_append_new(bytes, json_integer((unsigned char)p[i]))) json_decref(bytes), bytes = NULL;
    char *text = NULL;
    if (!bytes || tok_decode(t, &id, 1, &text)) {
        json_decref(bytes);
        return NULL;
    }
    json_t *o = json_pack("{s:s, s:f, s:o}", "token", text, "logprob", (double)logprob, "bytes", bytes);
    free(text);
    return o;
}

/* Characters (code points) token id adds to a valid UTF-8 text: its bytes that start one. */
static size_t token_chars(const tokenizer *t, int32_t id) {
    size_t n, c = 0;
    const char *p = tok_piece(t, id, &n);
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

/* Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}.
 * Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"},
 * the offsets counted on from *chars (moved past these tokens). Entries [from, to) of j->lp (the
 * caller holds the bridge mutex while the job runs). NULL: out of memory. */
static json_t *logprobs_json(const reply_ctx *x, uint32_t from, uint32_t to, size_t *chars) {
    const tokenizer *t = x->s->model.tok;
    const job *j = x->j;
    json_t *list = json_array(), *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    bool ok = list && tokens && lps && tops && offs;
    for (uint32_t i = from; i < to && ok; i++) {
        const token_logprob *lp = &j->lp[i];
        json_t *top = x->chat ? json_array() : json_object();
        for (uint32_t k = 0; k < lp->n_top && top; k++) {
            json_t *e = token_entry(t, lp->top_id[k], lp->top_logprob[k]);
            int rc = !e ? -1
                     : x->chat ? json_array_append(top, e)
                               : json_object_set(top, json_string_value(json_object_get(e, "token")), json_object_get(e, "logprob"));
            json_decref(e);
            if (rc) json_decref(top), top = NULL;
        }
        json_t *e = top ? token_entry(t, lp->id, lp->logprob) : NULL;
        if (!e) {
            json_decref(top);
            ok = false;
        } else if (x->chat) {
            if (json_object_set_new(e, "top_logprobs", top)) json_decref(e), ok = false;
            else ok = !json_array_append_new(list, e);
        } else {
            ok = !json_array_append(tokens, json_object_get(e, "token")) && !json_array_append(lps, json_object_get(e, "logprob")) &&
                 !json_array_append_new(tops, top) && !json_array_append_new(offs, json_integer((json_int_t)*chars));
            *chars += token_chars(t, lp->id);
            json_decref(e);
        }
    }
    json_t *out = !ok ? NULL
                  : x->chat ? json_pack("{s:O, s:n}", "content", list, "refusal")
                            : json_pack("{s:O, s:O, s:O, s:O}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                                        "text_offset", offs);
    json_decref(list), json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs);
    return out;
}

/* The entries of j->lp not yet sent, or NULL when none are asked for or new (*fail: out of
 * memory, or an entry was lost). The caller sends them, then moves lp_sent and lp_chars. */
static json_t *new_logprobs(const reply_ctx *x, uint32_t *to, size_t *chars, bool *fail) {
    *fail = false;
    *chars = x->lp_chars;
    *to = x->lp_sent;
    if (!x->j->logprobs) return NULL;
    pthread_mutex_lock(&x->s->b.mu);
    *to = x->j->n_lp;
    json_t *lp = *to > x->lp_sent ? logprobs_json(x, x->lp_sent, *to, chars) : NULL;
    *fail = x->j->lp_lost || (*to > x->lp_sent && !lp);
    pthread_mutex_unlock(&x->s->b.mu);
    return lp;
}

/* lp (stolen) in a chunk or reply choice: null when there is none. */
static json_t *chunk(const reply_ctx *x, json_t *delta, const char *finish, json_t *lp) {
    if (!lp) lp = json_null();
    json_t *ch = x->chat ? json_pack("{s:i, s:o, s:o, s:s?}", "index", 0, "delta", delta, "logprobs", lp, "finish_reason", finish)
                         : json_pack("{s:i, s:o, s:o, s:s?}", "index", 0, "text", delta, "logprobs", lp, "finish_reason", finish);
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", x->id, "object",
                     x->chat ? "chat.completion.chunk" : "text_completion", "created", x->created, "model",
                     x->s->model_name, "system_fingerprint", x->s->fingerprint, "choices", ch);
}

/* The whole reply text: the forced start of a tool call, then what was generated. */
static char *full_text(const job *j, const char *gen, size_t len, size_t *n) {
    size_t f = j->forced ? strlen(j->forced) : 0;
    char *t = malloc(f + len + 1);
    if (!t) return NULL;
    if (f) memcpy(t, j->forced, f);
    memcpy(t + f, gen, len);
    t[f + len] = 0;
    *n = f + len;
    return t;
}

/* The new text as chunks; *lp (the new log-probabilities, or NULL) goes in the first one, and
 * is NULL afterwards if it went. */
static int stream_deltas(reply_ctx *x, const char *gen, size_t len, bool done, json_t **lp, char **out, size_t *olen,
                         size_t *cap) {
    if (!x->chat) {
        if (len <= x->seen) return 0;
        json_t *t = json_stringn(gen + x->seen, len - x->seen), *l = *lp;
        *lp = NULL;
        return sse_event(out, olen, cap, chunk(x, t, NULL, l));
    }
    size_t n;
    char *full = full_text(x->j, gen, len, &n);
    json_t *deltas = json_array();
    int rc = full && deltas ? reply_stream_feed(&x->rs, full, n, done, deltas) : -1;
    free(full);
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) {
        if (json_object_get(d, "tool_calls")) x->tool_calls = true;
        json_t *l = *lp;
        *lp = NULL;
        if (!rc) rc = sse_event(out, olen, cap, chunk(x, json_incref(d), NULL, l));
        else json_decref(l);
    }
    json_decref(deltas);
    return rc;
}

static int stream_end(reply_ctx *x, char **out, size_t *len, size_t *cap) {
    job *j = x->j;
    const char *fr = api_finish_reason(j);
    if (!fr) { /* failed or cancelled: an error event, as OpenAI's stream does */
        json_t *e = json_pack("{s:{s:s, s:s}}", "error", "message", j->err[0] ? j->err : "the request was cancelled",
                              "type", "server_error");
        return sse_event(out, len, cap, e) || buf_printf(out, len, cap, "data: [DONE]\n\n") ? -1 : 0;
    }
    if (x->tool_calls && j->out.finish == JOB_STOP) fr = "tool_calls";
    uint32_t to;
    size_t chars;
    bool fail;
    json_t *lp = new_logprobs(x, &to, &chars, &fail); /* the rest */
    if (fail) {
        json_decref(lp);
        return -1;
    }
    int rc = sse_event(out, len, cap, chunk(x, x->chat ? json_object() : json_string(""), fr, lp));
    if (!rc && x->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", x->id, "object",
                              x->chat ? "chat.completion.chunk" : "text_completion", "created", x->created, "model",
                              x->s->model_name, "system_fingerprint", x->s->fingerprint, "choices", "usage", api_usage(j));
        rc = sse_event(out, len, cap, u);
    }
    return rc || buf_printf(out, len, cap, "data: [DONE]\n\n") ? -1 : 0;
}

static int produce(void *ctx, char **out, size_t *len, size_t *cap) {
    reply_ctx *x = ctx;
    if (x->chat && !x->sent_role) {
        x->sent_role = true;
        return sse_event(out, len, cap, chunk(x, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL)) ? -1 : 1;
    }
    char *text;
    size_t n;
    bool done;
    if (!api_wait_text(x->s, x->j, x->c, x->seen, &text, &n, &done)) return -1; /* the client left */
    if (!text) return 1;
    uint32_t to;
    size_t chars;
    bool fail;
    json_t *lp = new_logprobs(x, &to, &chars, &fail);
    int rc = fail ? -1 : stream_deltas(x, text, n, done, &lp, out, len, cap);
    free(text);
    x->seen = n;
    if (lp) json_decref(lp); /* no chunk took it: sent with the next */
    else if (!fail) x->lp_sent = to, x->lp_chars = chars;
    if (rc) return -1;
    if (!done) return 1;
    return stream_end(x, out, len, cap) ? -1 : 0;
}

/* A finished chat reply's tool calls, by the ids the reply gave them, with the bytes each was
 * generated as (server/call_memory.h). Best effort: a failure only costs the next prompt reuse. */
static void remember_calls(const reply_ctx *x) {
    const job *j = x->j;
    if (!x->chat || j->err_status || j->out.finish == JOB_CANCELLED) return;
    size_t n, off[64], len[64];
    char *full = full_text(j, j->text ? j->text : "", j->len, &n);
    json_t *msg = NULL;
    if (!full || toolcall_parse(full, n, &msg)) {
        free(full);
        return;
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    size_t spans = toolcall_spans(full, n, off, len, 64);
    for (size_t i = 0; i < json_array_size(calls) && i < spans && i < 64; i++) {
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        char id[100];
        snprintf(id, sizeof id, "%s%zu", x->call_prefix, i);
        if (name && args) call_memory_put(&x->s->calls, id, name, args, full + off[i], len[i]);
    }
    json_decref(msg);
    free(full);
}

static void reply_done(void *ctx) {
    reply_ctx *x = ctx;
    pthread_mutex_lock(&x->s->b.mu);
    bool running = x->j->state != JOB_DONE;
    pthread_mutex_unlock(&x->s->b.mu);
    if (!running) remember_calls(x);
    if (running) bridge_cancel(&x->s->b, x->j); /* the client left before the end */
    pthread_mutex_lock(&x->s->b.mu);
    job_unref(x->j);
    pthread_mutex_unlock(&x->s->b.mu);
    if (x->chat) reply_stream_free(&x->rs);
    free(x);
}

/* The whole reply as one JSON object (the job is done). */
static json_t *whole_reply(const reply_ctx *x) {
    const job *j = x->j;
    const char *fr = api_finish_reason(j);
    json_t *choice, *lp = json_null();
    size_t chars = 0;
    if (j->logprobs && (j->lp_lost || !(lp = logprobs_json(x, 0, j->n_lp, &chars)))) {
        cd_fail("out of memory for the log-probabilities");
        return NULL;
    }
    if (x->chat) {
        size_t n;
        char *full = full_text(j, j->text ? j->text : "", j->len, &n);
        json_t *msg = NULL;
        if (!full || toolcall_parse(full, n, &msg)) {
            free(full);
            json_decref(lp);
            return NULL;
        }
        free(full);
        json_t *calls = json_object_get(msg, "tool_calls");
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c) {
            char id[100];
            snprintf(id, sizeof id, "%s%zu", x->call_prefix, i);
            json_object_set_new(c, "id", json_string(id));
        }
        if (json_array_size(calls) && j->out.finish == JOB_STOP) fr = "tool_calls";
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", lp, "finish_reason", fr);
    } else {
        choice = json_pack("{s:i, s:s%, s:o, s:s}", "index", 0, "text", j->text ? j->text : "", j->len, "logprobs", lp,
                           "finish_reason", fr);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o}", "id", x->id, "object",
                     x->chat ? "chat.completion" : "text_completion", "created", x->created, "model", x->s->model_name,
                     "system_fingerprint", x->s->fingerprint, "choices", choice, "usage", api_usage(j));
}

/* Submits j and answers: streamed, or whole once done. Takes the caller's reference to j. */
static enum MHD_Result run_job(server *s, const http_req *r, const api_prepared *p) {
    job *j = p->j;
    bool chat = p->chat;
    api_err e;
    if (api_submit(s, j, &e)) {
        j->refs = 1;
        job_unref(j);
        bridge_count_rejected(&s->b);
        return api_reply_err(r->c, &e);
    }
    reply_ctx *x = calloc(1, sizeof *x);
    if (!x) { /* cannot answer: cancel and let go */
        bridge_cancel(&s->b, j);
        pthread_mutex_lock(&s->b.mu);
        job_unref(j);
        pthread_mutex_unlock(&s->b.mu);
        return MHD_NO;
    }
    *x = (reply_ctx){.s = s, .j = j, .c = r->c, .chat = chat, .include_usage = p->include_usage, .created = time(NULL)};
    api_new_id(s, chat ? "chatcmpl-" : "cmpl-", x->id, sizeof x->id);
    if (chat) {
        snprintf(x->call_prefix, sizeof x->call_prefix, "call_%s_", x->id);
        reply_stream_init(&x->rs, x->call_prefix);
    }
    if (p->stream) {
        api_wait_started(s, j, r->c);
        pthread_mutex_lock(&s->b.mu);
        bool refused = j->state == JOB_DONE && j->err_status;
        pthread_mutex_unlock(&s->b.mu);
        if (!refused) return http_sse(r->c, (http_stream){.produce = produce, .done = reply_done, .ctx = x});
    }
    api_wait_done(s, j, r->c);
    enum MHD_Result rc;
    if (j->err_status) rc = http_error(r->c, j->err_status, NULL, "%s", j->err);
    else if (j->out.finish == JOB_CANCELLED) rc = http_error(r->c, 500, NULL, "the request was cancelled");
    else {
        json_t *body = whole_reply(x);
        rc = body ? http_json(r->c, 200, body) : http_error(r->c, 500, NULL, "could not build the reply: %s", cd_errmsg());
    }
    reply_done(x);
    return rc;
}

static enum MHD_Result generate(server *s, const http_req *r, bool chat) {
    api_err e = {0};
    api_prepared p;
    uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)atomic_fetch_add(&s->next_id, 1) << 32; /* unseeded: differs per request */
    if (api_prepare(&s->model, chat, r->body, r->len, seed, &p, &e)) {
        bridge_count_rejected(&s->b);
        return api_reply_err(r->c, &e);
    }
    return run_job(s, r, &p);
}

enum MHD_Result api_chat_completions(server *s, const http_req *r) { return generate(s, r, true); }
enum MHD_Result api_completions(server *s, const http_req *r) { return generate(s, r, false); }
