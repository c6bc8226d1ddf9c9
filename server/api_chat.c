/* POST /v1/chat/completions and /v1/completions: request -> prompt ids -> a job -> a reply in
 * OpenAI's shape, whole or streamed as Server-Sent Events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/error.h"
#include "runtime/text/reply_stream.h"
#include "runtime/text/toolcall.h"
#include "server/api_generate.h"

/* ---- replies ---- */

/* One choice of the reply (one job; n of them when the request asks for n). */
typedef struct choice_ctx {
    job *j;
    uint32_t index;
    reply_stream rs;      /* chat */
    char call_prefix[96]; /* tool call ids: call_<id>_<i>, or call_<id>_<choice>_<i> when n > 1 (rs borrows it) */
    bool sent_role, tool_calls;
    bool ended;       /* its finish chunk went out */
    bool echoed;      /* completions with echo: its prompt chunk went out */
    uint32_t lp_sent; /* the job's log-probability entries already in chunks */
    size_t lp_chars;  /* completions: characters of text those entries cover (text_offset) */
} choice_ctx;

typedef struct reply_ctx {
    server *s;
    struct MHD_Connection *c;
    bool chat, include_usage;
    bool echo; /* completions: each choice's text begins with its prompt's */
    char id[48];
    json_int_t created;
    uint32_t n;          /* choices of all prompts */
    uint32_t per_prompt; /* choices of each prompt (the request's n) */
    job **jobs;          /* [n], the choices' jobs in order: prompt by prompt */
    choice_ctx *ch;      /* [n] */
    api_text *text;      /* [n] the stream's view of each choice's text */
    bool remembered;     /* its calls and replies are in the server's memories */
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
 * the offsets counted on from *chars (moved past these tokens). Entries [from, to) of a job's
 * lp or plp, at most top_max alternatives each (the caller holds the bridge mutex while the job
 * runs). NULL: out of memory. */
static json_t *logprobs_json(const reply_ctx *x, const token_logprob *entries, uint32_t from, uint32_t to,
                             uint32_t top_max, size_t *chars) {
    const tokenizer *t = x->s->model.tok;
    json_t *list = json_array(), *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    bool ok = list && tokens && lps && tops && offs;
    for (uint32_t i = from; i < to && ok; i++) {
        const token_logprob *lp = &entries[i];
        json_t *top = x->chat ? json_array() : json_object();
        for (uint32_t k = 0; k < lp->n_top && k < top_max && top; k++) {
            json_t *e = token_entry(t, lp->top_id[k], lp->top_logprob[k]);
            int rc = !e ? -1
                : x->chat
                ? json_array_append(top, e)
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
            ok = !json_array_append(tokens, json_object_get(e, "token")) &&
                !json_array_append(lps, json_object_get(e, "logprob")) && !json_array_append_new(tops, top) &&
                !json_array_append_new(offs, json_integer((json_int_t)*chars));
            *chars += token_chars(t, lp->id);
            json_decref(e);
        }
    }
    json_t *out = !ok ? NULL
        : x->chat     ? json_pack("{s:O, s:n}", "content", list, "refusal")
                      : json_pack("{s:O, s:O, s:O, s:O}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                                  "text_offset", offs);
    json_decref(list), json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs);
    return out;
}

/* The job of the choice's prompt's first choice: its echo_text and plp serve every choice. */
static job *lead_of(const reply_ctx *x, const choice_ctx *ch) {
    return x->jobs[ch->index / x->per_prompt * x->per_prompt];
}

/* Completions with echo and logprobs: the prompt's entries, the first token's logprob and
 * top_logprobs null (nothing comes before it), text offsets from 0 (*chars moved past them);
 * lead's plp as far as it goes (the caller holds the bridge mutex while it runs). NULL: out of
 * memory. */
static json_t *echo_logprobs_json(const reply_ctx *x, const job *lead, size_t *chars) {
    const tokenizer *t = x->s->model.tok;
    *chars = token_chars(t, lead->ids[0]);
    json_t *o = logprobs_json(x, lead->plp, 0, lead->n_plp, lead->top_logprobs, chars);
    json_t *first = o ? token_entry(t, lead->ids[0], 0) : NULL;
    bool ok = first && !json_array_insert(json_object_get(o, "tokens"), 0, json_object_get(first, "token")) &&
        !json_array_insert_new(json_object_get(o, "token_logprobs"), 0, json_null()) &&
        !json_array_insert_new(json_object_get(o, "top_logprobs"), 0, json_null()) &&
        !json_array_insert_new(json_object_get(o, "text_offset"), 0, json_integer(0));
    json_decref(first);
    if (!ok) json_decref(o);
    return ok ? o : NULL;
}

/* Completions' lists of b appended to a's (b dropped). -1: out of memory. */
static int extend_logprobs(json_t *a, json_t *b) {
    static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    int rc = 0;
    for (size_t i = 0; i < 4 && !rc; i++)
        rc = json_array_extend(json_object_get(a, keys[i]), json_object_get(b, keys[i]));
    json_decref(b);
    return rc;
}

/* The choice's entries not yet sent, or NULL when none are asked for or new (*fail: out of
 * memory, or an entry was lost). The caller sends them, then moves lp_sent and lp_chars. */
static json_t *new_logprobs(const reply_ctx *x, const choice_ctx *ch, uint32_t *to, size_t *chars, bool *fail) {
    *fail = false;
    *chars = ch->lp_chars;
    *to = ch->lp_sent;
    if (!ch->j->logprobs) return NULL;
    pthread_mutex_lock(&x->s->b.mu);
    *to = ch->j->n_lp;
    json_t *lp = *to > ch->lp_sent ? logprobs_json(x, ch->j->lp, ch->lp_sent, *to, ch->j->top_logprobs, chars) : NULL;
    *fail = ch->j->lp_lost || (*to > ch->lp_sent && !lp);
    pthread_mutex_unlock(&x->s->b.mu);
    return lp;
}

/* A streamed chunk of choice `index`; lp (stolen) null when there is none. */
static json_t *chunk(const reply_ctx *x, uint32_t index, json_t *delta, const char *finish, json_t *lp) {
    if (!lp) lp = json_null();
    json_t *ch = json_pack("{s:i, s:o, s:o, s:s?}", "index", (json_int_t)index, x->chat ? "delta" : "text", delta,
                           "logprobs", lp, "finish_reason", finish);
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", x->id, "object",
                     x->chat ? "chat.completion.chunk" : "text_completion", "created", x->created, "model",
                     x->s->model_name, "system_fingerprint", x->s->fingerprint, "choices", ch);
}

/* head (NULL: none) then gen[0..len), NUL-terminated, *n its length; NULL: out of memory. */
static char *joined(const char *head, const char *gen, size_t len, size_t *n) {
    size_t f = head ? strlen(head) : 0;
    char *t = malloc(f + len + 1);
    if (!t) return NULL;
    if (f) memcpy(t, head, f);
    if (len) memcpy(t + f, gen, len);
    t[f + len] = 0;
    *n = f + len;
    return t;
}

/* The whole reply text: the forced start of a tool call, then what was generated. */
static char *full_text(const job *j, const char *gen, size_t len, size_t *n) { return joined(j->forced, gen, len, n); }

/* The choice's new text (x->text[index]) as chunks; *lp (its new log-probabilities, or NULL)
 * goes in the first one, and is NULL afterwards if it went. */
static int stream_deltas(reply_ctx *x, choice_ctx *ch, json_t **lp, char **out, size_t *olen, size_t *cap) {
    const api_text *at = &x->text[ch->index];
    const char *gen = at->text;
    size_t len = at->len;
    if (!x->chat) {
        if (len <= at->seen) return 0;
        json_t *t = json_stringn(gen + at->seen, len - at->seen), *l = *lp;
        *lp = NULL;
        return sse_event(out, olen, cap, chunk(x, ch->index, t, NULL, l));
    }
    size_t n;
    char *full = full_text(ch->j, gen, len, &n);
    json_t *deltas = json_array();
    int rc = full && deltas ? reply_stream_feed(&ch->rs, full, n, at->done, deltas) : -1;
    free(full);
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) {
        if (json_object_get(d, "tool_calls")) ch->tool_calls = true;
        json_t *l = *lp;
        *lp = NULL;
        if (!rc) rc = sse_event(out, olen, cap, chunk(x, ch->index, json_incref(d), NULL, l));
        else json_decref(l);
    }
    json_decref(deltas);
    return rc;
}

/* A failed or cancelled choice ends the stream: an error event, as OpenAI's stream does. */
static int stream_error(const job *j, char **out, size_t *len, size_t *cap) {
    json_t *e = json_pack("{s:{s:s, s:s}}", "error", "message", j->err[0] ? j->err : "the request was cancelled",
                          "type", "server_error");
    return sse_event(out, len, cap, e) || buf_printf(out, len, cap, "data: [DONE]\n\n") ? -1 : 0;
}

/* The choice's last chunk: finish_reason and the rest of its log-probabilities. */
static int choice_end(reply_ctx *x, choice_ctx *ch, char **out, size_t *len, size_t *cap) {
    const char *fr = api_finish_reason(ch->j);
    if (ch->tool_calls && ch->j->out.finish == JOB_STOP) fr = "tool_calls";
    uint32_t to;
    size_t chars;
    bool fail;
    json_t *lp = new_logprobs(x, ch, &to, &chars, &fail);
    if (fail) {
        json_decref(lp);
        return -1;
    }
    ch->ended = true;
    return sse_event(out, len, cap, chunk(x, ch->index, x->chat ? json_object() : json_string(""), fr, lp));
}

/* After every choice's end: the usage (when asked for) and [DONE]. */
static int stream_end(reply_ctx *x, char **out, size_t *len, size_t *cap) {
    int rc = 0;
    if (x->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", x->id, "object",
                              x->chat ? "chat.completion.chunk" : "text_completion", "created", x->created, "model",
                              x->s->model_name, "system_fingerprint", x->s->fingerprint, "choices", "usage",
                              api_usage(x->jobs, x->n, x->per_prompt));
        json_t *t = api_timings(x->jobs, x->n);
        if (u && t) json_object_set_new(u, "timings", t);
        else json_decref(t);
        rc = sse_event(out, len, cap, u);
    }
    return rc || buf_printf(out, len, cap, "data: [DONE]\n\n") ? -1 : 0;
}

/* Completions with echo: whether the choice's prompt chunk can go out, all its prompt's entries
 * there when it asks for logprobs (the bridge mutex held). */
static bool echo_ready(const reply_ctx *x, const choice_ctx *ch) {
    const job *lead = lead_of(x, ch);
    return !ch->j->logprobs || lead->n_plp + 1 >= lead->n_ids || lead->state == JOB_DONE;
}

/* The choice's first chunk with echo: its prompt's text and, with logprobs, entries. */
static int stream_echo(reply_ctx *x, choice_ctx *ch, char **out, size_t *len, size_t *cap) {
    const job *lead = lead_of(x, ch);
    json_t *lp = NULL;
    size_t chars = 0;
    pthread_mutex_lock(&x->s->b.mu);
    bool lost = lead->lp_lost;
    if (ch->j->logprobs && !lost) lp = echo_logprobs_json(x, lead, &chars);
    pthread_mutex_unlock(&x->s->b.mu);
    if (lost || (ch->j->logprobs && !lp)) return -1;
    ch->echoed = true;
    ch->lp_chars = chars;
    return sse_event(out, len, cap, chunk(x, ch->index, json_string(lead->echo_text), NULL, lp));
}

/* One choice's news (x->text[index].text set): its chunks, and its end once done. 1 when a
 * failed or cancelled choice ended the whole stream. */
static int stream_choice(reply_ctx *x, choice_ctx *ch, char **out, size_t *len, size_t *cap) {
    uint32_t to;
    size_t chars;
    bool fail;
    json_t *lp = new_logprobs(x, ch, &to, &chars, &fail);
    int rc = fail ? -1 : stream_deltas(x, ch, &lp, out, len, cap);
    api_text *at = &x->text[ch->index];
    at->seen = at->len;
    if (lp) json_decref(lp); /* no chunk took it: sent with the next */
    else if (!fail) ch->lp_sent = to, ch->lp_chars = chars;
    if (rc || !at->done) return rc;
    if (!api_finish_reason(ch->j)) return stream_error(ch->j, out, len, cap) ? -1 : 1;
    return choice_end(x, ch, out, len, cap);
}

static void remember(reply_ctx *x);

static int produce(void *ctx, char **out, size_t *len, size_t *cap) {
    reply_ctx *x = ctx;
    if (x->chat && !x->ch[0].sent_role) { /* every choice's first chunk: the role */
        for (uint32_t k = 0; k < x->n; k++) {
            x->ch[k].sent_role = true;
            json_t *d = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
            if (sse_event(out, len, cap, chunk(x, k, d, NULL, NULL))) return -1;
        }
        return 1;
    }
    if (x->echo) { /* a choice's news waits for its prompt chunk */
        pthread_mutex_lock(&x->s->b.mu);
        for (uint32_t k = 0; k < x->n; k++) x->text[k].hold = !x->ch[k].echoed && !echo_ready(x, &x->ch[k]);
        pthread_mutex_unlock(&x->s->b.mu);
    }
    if (!api_wait_text(x->s, x->jobs, x->n, x->c, x->text)) return -1; /* the client left */
    int rc = 0;
    bool all_ended = true;
    for (uint32_t k = 0; k < x->n; k++) {
        if (x->echo && !x->ch[k].echoed && !x->text[k].hold && !rc) rc = stream_echo(x, &x->ch[k], out, len, cap);
        if (x->text[k].text && !rc) rc = stream_choice(x, &x->ch[k], out, len, cap);
        free(x->text[k].text);
        x->text[k].text = NULL;
        all_ended = all_ended && x->ch[k].ended;
    }
    if (rc) return rc > 0 ? 0 : -1; /* rc 1: an error event ended the stream */
    if (!all_ended) return 1;
    remember(x);
    return stream_end(x, out, len, cap) ? -1 : 0;
}

/* A finished chat choice's tool calls, by the ids the reply gave them, with the bytes each was
 * generated as (server/call_memory.h). Best effort: a failure only costs the next prompt reuse. */
static void remember_calls(const reply_ctx *x, const choice_ctx *ch) {
    const job *j = ch->j;
    if (!x->chat || j->err_status || j->out.finish == JOB_CANCELLED) return;
    size_t n, off[64], len[64];
    char *full = full_text(j, j->text ? j->text : "", j->len, &n);
    json_t *msg = NULL;
    if (!full || toolcall_parse_as(full, n, j->calls, &msg)) {
        free(full);
        return;
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    size_t spans = toolcall_spans_as(full, n, j->calls, off, len, 64);
    for (size_t i = 0; i < json_array_size(calls) && i < spans && i < 64; i++) {
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        char id[128];
        snprintf(id, sizeof id, "%s%zu", ch->call_prefix, i);
        if (name && args) call_memory_put(&x->s->calls, id, name, args, full + off[i], len[i]);
    }
    json_decref(msg);
    free(full);
}

/* A finished chat choice's whole sequence, prompt + reply, as the text it stands for
 * (runtime/text/reply_memory.h): the reply sent back in the next request becomes these ids. The
 * reply ends in the <|im_end|> the template closes the turn with (one cut by max_tokens gets
 * it, another end token is swapped for it); one a stop string
 * cut (its text ends before the tokens it generated), failed or cancelled is not kept. Best
 * effort: a failure only costs the next prompt reuse. */
static void remember_reply(const reply_ctx *x, const choice_ctx *ch) {
    const job *j = ch->j, *lead = lead_of(x, ch);
    const tokenizer *t = x->s->model.tok;
    reply_memory *m = x->s->model.replies;
    bool ended = j->out.finish == JOB_STOP || j->out.finish == JOB_LENGTH;
    if (!x->chat || !m || !lead->prompt_text || !j->keep_gen || j->err_status || !ended || j->stopped_by_string ||
        (j->out.finish == JOB_STOP && !j->out.eog))
        return;
    reply_memory_remember(m, t, j->cache_salt, j->ids, j->n_ids, lead->prompt_text, strlen(lead->prompt_text), j->gen,
                          j->n_gen_kept);
}

/* Both memories, once, before the reply's end goes out: the client's next request may come at
 * once and should find them. */
static void remember(reply_ctx *x) {
    if (x->remembered) return;
    x->remembered = true;
    for (uint32_t k = 0; k < x->n; k++) remember_calls(x, &x->ch[k]), remember_reply(x, &x->ch[k]);
}

static void reply_done(void *ctx) {
    reply_ctx *x = ctx;
    pthread_mutex_lock(&x->s->b.mu);
    bool running = false;
    for (uint32_t k = 0; k < x->n; k++) running = running || x->jobs[k]->state != JOB_DONE;
    pthread_mutex_unlock(&x->s->b.mu);
    if (running) api_cancel(x->s, x->jobs, x->n); /* the client left before the end */
    else remember(x);
    pthread_mutex_lock(&x->s->b.mu);
    for (uint32_t k = 0; k < x->n; k++) job_unref(x->jobs[k]);
    pthread_mutex_unlock(&x->s->b.mu);
    if (x->chat)
        for (uint32_t k = 0; k < x->n; k++) reply_stream_free(&x->ch[k].rs);
    free(x->jobs);
    free(x->ch);
    free(x->text);
    free(x);
}

/* A whole completions choice's logprobs: with echo, its prompt's entries first (every one there). */
static json_t *whole_completion_logprobs(const reply_ctx *x, const choice_ctx *ch) {
    const job *j = ch->j, *lead = lead_of(x, ch);
    size_t chars = 0;
    if (j->lp_lost || (x->echo && (lead->lp_lost || lead->n_plp + 1 != lead->n_ids))) return NULL;
    json_t *echoed = x->echo ? echo_logprobs_json(x, lead, &chars) : NULL;
    json_t *gen = (!x->echo || echoed) ? logprobs_json(x, j->lp, 0, j->n_lp, j->top_logprobs, &chars) : NULL;
    if (!x->echo || !gen) return gen;
    if (extend_logprobs(echoed, gen)) json_decref(echoed), echoed = NULL;
    return echoed;
}

/* {"logprob", "rank", "decoded_token"} under the key of token id, into d (vLLM's Logprob). */
static int vllm_entry(json_t *d, const tokenizer *t, int32_t id, float logprob, uint32_t rank) {
    char key[16], *text = NULL;
    snprintf(key, sizeof key, "%d", id);
    if (tok_decode(t, &id, 1, &text)) return -1;
    json_t *e =
        json_pack("{s:f, s:i, s:s}", "logprob", (double)logprob, "rank", (json_int_t)rank, "decoded_token", text);
    free(text);
    return e ? json_object_set_new(d, key, e) : -1;
}

/* vLLM's prompt_logprobs for lead's prompt (all its entries there): null for the first token,
 * then per position the prompt token's entry and the k most likely tokens' (k + 1 at most, rank
 * 1..k). NULL: out of memory, or an entry missing. */
static json_t *vllm_prompt_logprobs(const reply_ctx *x, const job *lead) {
    const tokenizer *t = x->s->model.tok;
    uint32_t k_max = (uint32_t)lead->vllm_prompt_logprobs;
    json_t *list = lead->lp_lost || lead->n_plp + 1 != lead->n_ids ? NULL : json_array();
    bool ok = list && !json_array_append_new(list, json_null());
    for (uint32_t i = 0; i < lead->n_plp && ok; i++) {
        const token_logprob *lp = &lead->plp[i];
        json_t *d = json_object();
        ok = d && !vllm_entry(d, t, lp->id, lp->logprob, lp->rank);
        for (uint32_t k = 0; k < lp->n_top && k < k_max && ok; k++)
            if (lp->top_id[k] != lp->id) ok = !vllm_entry(d, t, lp->top_id[k], lp->top_logprob[k], k + 1);
        if (!ok || json_array_append_new(list, d)) json_decref(d), ok = false;
    }
    if (!ok) json_decref(list);
    return ok ? list : NULL;
}

/* One choice of a whole completions reply: with echo, its text begins with the prompt's. */
static json_t *whole_completion(const reply_ctx *x, const choice_ctx *ch) {
    const job *j = ch->j;
    json_t *lp = j->logprobs ? whole_completion_logprobs(x, ch) : json_null();
    size_t n;
    char *text = joined(x->echo ? lead_of(x, ch)->echo_text : NULL, j->text, j->len, &n);
    if (!lp || !text) {
        json_decref(lp);
        free(text);
        cd_fail("out of memory for the reply (or a log-probability was lost)");
        return NULL;
    }
    json_t *o = json_pack("{s:i, s:s%, s:o, s:s}", "index", (json_int_t)ch->index, "text", text, n, "logprobs", lp,
                          "finish_reason", api_finish_reason(j));
    free(text);
    if (o && j->vllm_prompt_logprobs >= 0) {
        json_t *plp = vllm_prompt_logprobs(x, lead_of(x, ch));
        if (!plp || json_object_set_new(o, "prompt_logprobs", plp)) json_decref(o), o = NULL;
    }
    return o;
}

/* One choice of the whole reply (its job done). */
static json_t *whole_choice(const reply_ctx *x, const choice_ctx *ch) {
    if (!x->chat) return whole_completion(x, ch);
    const job *j = ch->j;
    const char *fr = api_finish_reason(j);
    json_t *lp = json_null();
    size_t chars = 0;
    if (j->logprobs && (j->lp_lost || !(lp = logprobs_json(x, j->lp, 0, j->n_lp, j->top_logprobs, &chars)))) {
        cd_fail("out of memory for the log-probabilities");
        return NULL;
    }
    size_t n;
    char *full = full_text(j, j->text ? j->text : "", j->len, &n);
    json_t *msg = NULL;
    if (!full || toolcall_parse_as(full, n, j->calls, &msg)) {
        free(full);
        json_decref(lp);
        return NULL;
    }
    free(full);
    json_t *calls = json_object_get(msg, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char id[128];
        snprintf(id, sizeof id, "%s%zu", ch->call_prefix, i);
        json_object_set_new(c, "id", json_string(id));
    }
    if (json_array_size(calls) && j->out.finish == JOB_STOP) fr = "tool_calls";
    return json_pack("{s:i, s:o, s:o, s:s}", "index", (json_int_t)ch->index, "message", msg, "logprobs", lp,
                     "finish_reason", fr);
}

/* The whole reply as one JSON object (every choice done). */
static json_t *whole_reply(const reply_ctx *x) {
    json_t *choices = json_array();
    for (uint32_t k = 0; k < x->n && choices; k++) {
        json_t *c = whole_choice(x, &x->ch[k]);
        if (!c || json_array_append_new(choices, c)) json_decref(choices), choices = NULL;
    }
    if (!choices) return NULL;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", x->id, "object",
                          x->chat ? "chat.completion" : "text_completion", "created", x->created, "model",
                          x->s->model_name, "system_fingerprint", x->s->fingerprint, "choices", choices, "usage",
                          api_usage(x->jobs, x->n, x->per_prompt));
    json_t *t = api_timings(x->jobs, x->n);
    if (o && t) json_object_set_new(o, "timings", t);
    else json_decref(t);
    if (o && x->chat && x->jobs[0]->vllm_prompt_logprobs >= 0) { /* chat: one prompt, at the top (vLLM) */
        json_t *plp = vllm_prompt_logprobs(x, x->jobs[0]);
        if (!plp || json_object_set_new(o, "prompt_logprobs", plp)) json_decref(o), o = NULL;
    }
    return o;
}

/* Drops `refs` references to each of n jobs: the connection's (1), or both when the engine
 * never took them (2). */
static void drop_jobs(server *s, job **jobs, uint32_t n, int refs) {
    pthread_mutex_lock(&s->b.mu);
    for (uint32_t k = 0; k < n; k++)
        for (int i = 0; i < refs; i++) job_unref(jobs[k]);
    pthread_mutex_unlock(&s->b.mu);
}

/* The reply's state for the n submitted jobs; NULL when out of memory. */
static reply_ctx *reply_new(server *s, const http_req *r, const api_prepared *p, job **jobs, uint32_t n) {
    reply_ctx *x = calloc(1, sizeof *x);
    choice_ctx *ch = calloc(n, sizeof *ch);
    api_text *text = calloc(n, sizeof *text);
    if (!x || !ch || !text) {
        free(x), free(ch), free(text);
        return NULL;
    }
    *x = (reply_ctx){.s = s,
                     .c = r->c,
                     .chat = p->chat,
                     .include_usage = p->include_usage,
                     .echo = jobs[0]->echo,
                     .created = time(NULL),
                     .n = n,
                     .per_prompt = p->n,
                     .jobs = jobs,
                     .ch = ch,
                     .text = text};
    api_new_id(s, p->chat ? "chatcmpl-" : "cmpl-", x->id, sizeof x->id);
    for (uint32_t k = 0; k < n; k++) {
        ch[k] = (choice_ctx){.j = jobs[k], .index = k};
        if (!p->chat) continue;
        if (p->n == 1) snprintf(ch[k].call_prefix, sizeof ch[k].call_prefix, "call_%s_", x->id);
        else snprintf(ch[k].call_prefix, sizeof ch[k].call_prefix, "call_%s_%u_", x->id, k);
        reply_stream_init_as(&ch[k].rs, ch[k].call_prefix, jobs[k]->calls);
    }
    return x;
}

/* Submits the request's jobs (its prompts' choices) and answers: streamed, or whole once done.
 * Takes the caller's references to p->prompts and the array. */
static enum MHD_Result run_job(server *s, const http_req *r, const api_prepared *p) {
    api_err e;
    uint32_t n = p->n_prompts * p->n;
    job **jobs = calloc(n, sizeof *jobs);
    if (!jobs || job_choices(p->prompts, p->n_prompts, p->n, jobs)) {
        free(jobs);
        drop_jobs(s, p->prompts, p->n_prompts, 2);
        free(p->prompts);
        bridge_count_rejected(&s->b);
        return http_error(r->c, 500, NULL, "out of memory");
    }
    free(p->prompts);
    if (api_submit(s, jobs, n, &e)) {
        drop_jobs(s, jobs, n, 2);
        free(jobs);
        bridge_count_rejected(&s->b);
        return api_reply_err(r->c, &e);
    }
    reply_ctx *x = reply_new(s, r, p, jobs, n);
    if (!x) { /* cannot answer: cancel and let go */
        api_cancel(s, jobs, n);
        drop_jobs(s, jobs, n, 1);
        free(jobs);
        return MHD_NO;
    }
    if (p->stream) {
        api_wait_started(s, jobs, n, r->c);
        pthread_mutex_lock(&s->b.mu);
        bool refused = false;
        for (uint32_t k = 0; k < n; k++) refused = refused || (jobs[k]->state == JOB_DONE && jobs[k]->err_status);
        pthread_mutex_unlock(&s->b.mu);
        if (!refused) return http_sse(r->c, (http_stream){.produce = produce, .done = reply_done, .ctx = x});
    }
    api_wait_done(s, jobs, n, r->c);
    const job *failed = NULL;
    for (uint32_t k = 0; k < n && !failed; k++)
        if (jobs[k]->err_status || jobs[k]->out.finish == JOB_CANCELLED) failed = jobs[k];
    enum MHD_Result rc;
    if (failed && failed->err_status) rc = http_error(r->c, failed->err_status, NULL, "%s", failed->err);
    else if (failed) rc = http_error(r->c, 500, NULL, "the request was cancelled");
    else {
        remember(x);
        json_t *body = whole_reply(x);
        rc = body ? http_json(r->c, 200, body)
                  : http_error(r->c, 500, NULL, "could not build the reply: %s", cd_errmsg());
    }
    reply_done(x);
    return rc;
}

/* The session headers agents and proxies send (a proxy hashes on one to keep a conversation on one
 * replica: docs/FLEET.md); the first present is logged with the request. */
static const char *const session_headers[] = {"X-Session-Id", "X-Session-Affinity",       "Session-Id",
                                              "Session_Id",   "X-Claude-Code-Session-Id", "X-Conversation-Id"};

/* One line per request that names its session: the header, the value (printable ASCII, at most
 * 128 bytes: a header is the client's text), the prompt's tokens. */
static void log_session(const http_req *r, const api_prepared *p) {
    for (size_t i = 0; i < sizeof session_headers / sizeof *session_headers; i++) {
        const char *v = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, session_headers[i]);
        if (!v) continue;
        char clean[129];
        size_t n = 0;
        for (; v[n] && n < sizeof clean - 1; n++) clean[n] = v[n] >= 0x20 && v[n] < 0x7f ? v[n] : '?';
        clean[n] = 0;
        uint32_t tokens = 0;
        for (uint32_t k = 0; k < p->n_prompts; k++) tokens += p->prompts[k]->n_ids;
        fprintf(stderr, "cinder serve: %s %s %s: %s, %u prompt tokens\n", r->method, r->url, session_headers[i], clean,
                tokens);
        return;
    }
}

static enum MHD_Result generate(server *s, const http_req *r, bool chat) {
    api_err e = {0};
    api_prepared p;
    uint64_t seed =
        (uint64_t)time(NULL) ^ (uint64_t)atomic_fetch_add(&s->next_id, 1) << 32; /* unseeded: differs per request */
    if (!bridge_ready(&s->b)) { /* the server listens while it loads: no tokenizer to check a request with yet */
        bridge_count_rejected(&s->b);
        return http_error(r->c, 503, NULL, "the model is loading");
    }
    if (api_prepare(&s->model, chat, r->body, r->len, seed, &p, &e)) {
        bridge_count_rejected(&s->b);
        return api_reply_err(r->c, &e);
    }
    if (chat && p.prompts[0]->reply_reused) reply_memory_count(&s->replies, p.prompts[0]->reply_reused);
    log_session(r, &p);
    return run_job(s, r, &p);
}

enum MHD_Result api_chat_completions(server *s, const http_req *r) { return generate(s, r, true); }
enum MHD_Result api_completions(server *s, const http_req *r) { return generate(s, r, false); }
