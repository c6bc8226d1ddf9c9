/* cinder serve: an OpenAI-compatible HTTP server over the continuous-batching engine.
 *
 *   connection threads (libmicrohttpd, one per connection)      engine thread (the caller's)
 *     parse, validate, render the chat template, tokenize   ─►   bridge_run: scheduler steps
 *     answer JSON or stream Server-Sent Events              ◄─   text and outcomes (server/job.h)
 *
 * /health answers 503 {"status":"loading"} until the weights are on the GPU. SIGINT/SIGTERM stop
 * new requests, cancel running ones (their computed KV stays cached and is written through to
 * the disk tier), and return 0. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "runtime/model/rope.h"
#include "runtime/text/chat_thinking.h"

typedef struct server_opts {
    const char *host;          /* "127.0.0.1" by default: loopback only */
    uint16_t port;             /* 8080; 0 = any free port (printed) */
    uint32_t queue;            /* requests waiting for a slot at most (503 beyond) */
    uint32_t max_body_kb;      /* request body limit */
    uint32_t max_header_kb;    /* memory per connection for the request line and headers */
    uint32_t max_conns;        /* connections at once */
    uint32_t idle_s;           /* an idle connection is closed after this */
    const char *api_key;       /* non-NULL: "Authorization: Bearer KEY" required on /v1 */
    const char *alias;         /* the model's name in /v1/models and responses (file name by default) */
    bool preserve_reasoning;   /* history keeps assistant reasoning everywhere (chat.h) */
    bool strict_template;      /* history exactly as the template renders it (no as_generated) */
    const char *chat_template; /* --chat-template NAME, or NULL: the one the model file carries */
    chat_think_ask think;      /* --think / --no-think: for requests that do not say (chat_thinking.h) */
    const char *port_file;     /* non-NULL: the bound port is written there once listening (tests) */
    rope_override rope;        /* --rope-scaling ... over the file's RoPE */
    /* KV cache events (server/kv_events.h; docs/FLEET.md): NULL = off */
    const char *kv_events;        /* --kv-events tcp://HOST:PORT: the PUB socket */
    const char *kv_events_replay; /* --kv-events-replay tcp://HOST:PORT: the ROUTER socket (bound) */
    const char *kv_events_id;     /* --kv-events-id NAME: the topic's replica part (host:port by default) */
    bool kv_events_map;           /* --kv-events-encoding map: events as msgspec maps (server/kv_wire.h) */
} server_opts;

/* Loads the model, listens, serves until SIGINT/SIGTERM. 0 on a clean stop. */
int server_run(const char *model_path, const server_opts *so, const engine_opts *eo);
