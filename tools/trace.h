/* Reading a request trace (the format of scripts/scenarios/README.md): one JSON object per line,
 * a header first ("kind": "tokens" or "chat"), then one request per line. Everything a trace can
 * say is checked here, before the engine sees it (fuzzed: tests/fuzz/fuzz_trace.c); the replay
 * itself is tools/bench_trace.c. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/chat_template.h"
#include "runtime/text/conversation.h"
#include "runtime/text/tokenizer.h"

typedef struct trace {
    json_t *header;
    json_t *lines; /* array of request objects */
    bool chat;
} trace;

/* Parses buf[0..len) (name is for messages); on failure *t is empty and cd_errmsg() names the line. */
int trace_parse(const char *name, const char *buf, size_t len, trace *t);
int trace_load(const char *path, trace *t);
void trace_free(trace *t); /* zeroed traces are fine */

/* A positive header integer that fits 32 bits, or 0. */
uint32_t trace_header_u32(const trace *t, const char *key);
/* Request no's max_tokens (16 when absent; 1 .. 2^20). */
int trace_max_tokens(const json_t *req, size_t no, uint32_t *out);
/* Token ids of a "tokens" request, checked against the vocabulary (*ids malloc'd). */
int trace_request_ids(const json_t *req, size_t no, uint32_t n_vocab, int32_t **ids, size_t *n);

/* Chat traces: the named sessions, each a conversation. */
typedef struct trace_session {
    char *name;
    conversation c;
} trace_session;

typedef struct trace_sessions {
    trace_session *s;
    size_t n, cap;
    chat_template_id template; /* every session renders with it */
    /* the replies generated, shared by the sessions as a server's are by its clients: each
     * comes back in its session's next prompt as the ids generated (conv_reply) */
    reply_memory replies;
} trace_sessions;

/* The prompt of a chat request: its session's history + "append" (and "tools"), rendered and
 * tokenized (*ids malloc'd); *conv is the session, for the reply to join (conv_reply). */
int trace_chat_ids(trace_sessions *ss, const json_t *req, size_t no, const tokenizer *tok, conversation **conv,
                   int32_t **ids, size_t *n);
void trace_sessions_free(trace_sessions *ss);
