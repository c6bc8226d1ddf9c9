/* The HTTP layer of cinder serve (libmicrohttpd, a thread per connection): request bodies with
 * limits, routing, JSON and OpenAI-shaped error replies, Server-Sent Event streams, and noticing
 * a client that went away. Handlers (api_*.c) see one complete request at a time. */
#pragma once
#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/tokenizer.h"
#include "server/api_request.h"
#include "server/bridge.h"
#include "server/server.h"

typedef struct server {
    server_opts o;
    bridge b;
    struct MHD_Daemon *d;
    /* set once before ready (read-only afterwards) */
    api_model model; /* what requests are checked against (tokenizer, context) */
    char model_name[256];
    char fingerprint[24]; /* system_fingerprint: the model fingerprint's first bytes */
    char kv_topic[600];   /* the KV event stream's topic (server.c) */
    call_memory calls;    /* tool calls generated here, by id (thread-safe) */
    reply_memory replies; /* the token sequences chat requests ran, by their text (thread-safe) */
    atomic_uint_fast64_t next_id;
} server;

typedef struct http_req {
    struct MHD_Connection *c;
    const char *method, *url;
    char *body; /* NUL-terminated */
    size_t len;
} http_req;

int http_start(server *s);
void http_quiesce(server *s); /* stop accepting connections */
void http_stop(server *s);

/* Replies (each returns the MHD result for the access handler). body is stolen. */
enum MHD_Result http_json(struct MHD_Connection *c, unsigned status, json_t *body);
enum MHD_Result http_text(struct MHD_Connection *c, unsigned status, const char *type, char *text /* freed */);
/* {"error": {"message", "type", "param", "code"}}; param may be NULL. */
enum MHD_Result http_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A streamed reply: produce() is called whenever the client can take more; it appends to *out
 * (a growing buffer) and returns 1 while more will come, 0 at the end, -1 to abort the stream.
 * done() runs once when the stream ends for any reason (the client gone included). */
typedef struct http_stream {
    int (*produce)(void *ctx, char **out, size_t *len, size_t *cap);
    void (*done)(void *ctx);
    void *ctx;
} http_stream;
enum MHD_Result http_sse(struct MHD_Connection *c, http_stream st);

/* True when the client closed its side of the connection (or it broke). */
bool http_client_gone(struct MHD_Connection *c);
/* Appends printf output to a growing buffer; -1 when out of memory. */
int buf_printf(char **out, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The handlers (api_chat.c, api_info.c, api_tokens.c). */
enum MHD_Result api_chat_completions(server *s, const http_req *r);
enum MHD_Result api_completions(server *s, const http_req *r);
enum MHD_Result api_models(server *s, const http_req *r);
enum MHD_Result api_health(server *s, const http_req *r);
/* The chat page (api_page.c): open without the API key (the page's own requests carry it). */
enum MHD_Result api_page(server *s, const http_req *r);
enum MHD_Result api_page_css(server *s, const http_req *r);
enum MHD_Result api_page_js(server *s, const http_req *r);
enum MHD_Result api_metrics(server *s, const http_req *r);
enum MHD_Result api_cache(server *s, const http_req *r);
/* render, tokenize, detokenize (vLLM's shapes) */
enum MHD_Result api_chat_render(server *s, const http_req *r);
enum MHD_Result api_completions_render(server *s, const http_req *r);
enum MHD_Result api_tokenize_text(server *s, const http_req *r);
enum MHD_Result api_detokenize_ids(server *s, const http_req *r);
