/* cinder bench --trace FILE / --scenario NAME: replays a request trace (the format of
 * scripts/scenarios/README.md) through the engine and its prefix cache, and reports per
 * request and in total: prompt, cached and prefilled tokens, hit rate, evictions, TTFT and
 * decode speed. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "runtime/model/model.h"

/* Observers of a replay (cinder profile --scenario): called with ctx; non-zero stops it. */
typedef struct bench_trace_hooks {
    void *ctx;
    int (*start)(void *ctx, engine *e); /* engine ready, before the first request */
    int (*step)(void *ctx, engine *e);  /* after every engine_step */
    /* a finished request: submitted at submit_ms (cd_now_ms) after prepare_ms of rendering and tokenizing */
    int (*reply)(void *ctx, size_t no, const engine_reply *r, double submit_ms, double prepare_ms);
    void (*finish)(void *ctx, engine *e); /* before the engine goes, whatever happened */
} bench_trace_hooks;

typedef struct bench_trace_opts {
    const char *model;
    const char *trace;    /* a file, or NULL with scenario set */
    const char *scenario; /* a name in scripts/scenarios/ */
    /* The engine's flags (tools/cli_engine.h) as given; the replay sets max_seqs (concurrency),
     * and n_ctx and pool_tokens where they are 0: n_ctx what the trace needs (token traces) or
     * 8192 (chat traces), pool_tokens the trace header's kv_pool_tokens, else room for it all. */
    engine_opts eo;
    const char *dump_prompts;  /* write each request's max_tokens and prompt ids here (peer replays) */
    const char *plot;          /* SVG of TTFT per request, prefix cache on and off (a second replay) */
    uint32_t concurrency;      /* requests in flight at once (0 = 1: one after the other) */
    const char *chat_template; /* chat traces render with it; NULL: the model file's */
    bool json;
    bool quiet;                     /* print nothing (a caller reports) */
    const bench_trace_hooks *hooks; /* NULL: none */
} bench_trace_opts;

int bench_trace(const bench_trace_opts *o, model *m);
