/* What the two generating endpoints share once a request is a job (api_request.h): handing it
 * to the engine, waiting for it (noticing a client that left), usage, ids, SSE framing. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "server/api_request.h"
#include "server/http.h"
#include "server/job.h"

enum MHD_Result api_reply_err(struct MHD_Connection *c, const api_err *e);

/* Hands j to the engine: 0, or a 503 (queue full / loading / stopping) in *e. */
int api_submit(server *s, job *j, api_err *e);
/* Waits until j is done; a client that leaves meanwhile cancels it. */
void api_wait_done(server *s, job *j, struct MHD_Connection *c);
/* Waits until the engine took j (running) or refused it (done, err_status set), at most about
 * one engine step: a stream starts only then, so a refusal is an HTTP error, not an event. */
void api_wait_started(server *s, job *j, struct MHD_Connection *c);
/* Waits (at most ~100 ms) for text past *seen or the end; false when the client has left (the
 * job is cancelled then). Fills a copy of the stable text and whether the job is done. */
bool api_wait_text(server *s, job *j, struct MHD_Connection *c, size_t seen, char **text, size_t *len, bool *done);
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}} */
json_t *api_usage(const job *j);
/* "stop", "length" (or NULL when it failed/cancelled: see j->err_status) */
const char *api_finish_reason(const job *j);
/* A fresh response id with the given prefix ("chatcmpl-", "cmpl-"). */
void api_new_id(server *s, const char *prefix, char *out, size_t cap);
/* One Server-Sent Event: "data: JSON\n\n" (obj stolen). */
int sse_event(char **out, size_t *len, size_t *cap, json_t *obj);
