/* What the two generating endpoints share once a request is a job (api_request.h): handing it
 * to the engine, waiting for it (noticing a client that left), usage, ids, SSE framing. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "server/api_request.h"
#include "server/http.h"
#include "server/job.h"

enum MHD_Result api_reply_err(struct MHD_Connection *c, const api_err *e);

/* A request's jobs (job.h, job_choices: its prompts' choices) travel together: submitted all or
 * none, waited on together, cancelled together. */

/* Hands the n jobs to the engine: 0, or a 503 (queue full / loading / stopping) in *e, or a 400
 * naming n when the queue could never hold n. */
int api_submit(server *s, job **jobs, uint32_t n, api_err *e);
/* Asks the engine thread to cancel them (the client is gone). */
void api_cancel(server *s, job **jobs, uint32_t n);
/* Waits until all are done; a client that leaves meanwhile cancels them. */
void api_wait_done(server *s, job **jobs, uint32_t n, struct MHD_Connection *c);
/* With KV events on: waits until the batch holding the done jobs' final commits is sent (kv_pub_wait). */
void api_wait_events(server *s, job **jobs, uint32_t n);
/* Waits until the engine took all (running) or refused them (done, err_status set), at most
 * about one engine step: a stream starts only then, so a refusal is an HTTP error, not an event. */
void api_wait_started(server *s, job **jobs, uint32_t n, struct MHD_Connection *c);
/* One choice's text as the streaming side has it. */
typedef struct api_text {
    size_t seen; /* in: bytes already handed over; the caller moves it to len after using text */
    bool hold;   /* in: the choice's news waits (echo: until its prompt chunk can go out) */
    bool done;   /* in/out: the choice's end was handed over (it stays true) */
    char *text;  /* out: NULL (nothing new), or a copy of the stable text (the caller frees it) */
    size_t len;  /* out, with text: its length */
} api_text;
/* Waits (at most ~100 ms) until some choice has text past its seen or has ended, then copies
 * each such choice's stable text (t[k].text) and whether it is done. False when the client has
 * left (the jobs are cancelled then). */
bool api_wait_text(server *s, job **jobs, uint32_t n, struct MHD_Connection *c, api_text *t);
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}
 * over n jobs, per_prompt choices of each prompt in turn: each prompt once, the completions
 * summed, of a prompt's cached tokens the least any of its choices had (what was cached before
 * the request came: the others share the first's prefill). */
json_t *api_usage(job **jobs, uint32_t n, uint32_t per_prompt);
/* llama-server's `timings` for a one-choice reply (NULL otherwise): cache_n (cache_host_n and
 * cache_disk_n of them from host memory and disk), prompt_n prefilled, prompt_ms the time to the first
 * token, predicted_n / predicted_ms / predicted_per_second the decode after it. */
json_t *api_timings(job **jobs, uint32_t n);
/* "stop", "length" (or NULL when it failed/cancelled: see j->err_status) */
const char *api_finish_reason(const job *j);
/* A fresh response id with the given prefix ("chatcmpl-", "cmpl-"). */
void api_new_id(server *s, const char *prefix, char *out, size_t cap);
/* One Server-Sent Event: "data: JSON\n\n" (obj stolen). */
int sse_event(char **out, size_t *len, size_t *cap, json_t *obj);
