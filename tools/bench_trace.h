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
    int (*start)(void *ctx, engine *e);                   /* engine ready, before the first request */
    int (*step)(void *ctx, engine *e);                    /* after every engine_step */
    /* a finished request: submitted at submit_ms (cd_now_ms) after prepare_ms of rendering and tokenizing */
    int (*reply)(void *ctx, size_t no, const engine_reply *r, double submit_ms, double prepare_ms);
    void (*finish)(void *ctx, engine *e);                 /* before the engine goes, whatever happened */
} bench_trace_hooks;

typedef struct bench_trace_opts {
    const char *model;
    const char *trace;         /* a file, or NULL with scenario set */
    const char *scenario;      /* a name in scripts/scenarios/ */
    uint32_t page_tokens;      /* 0 = default */
    uint32_t pool_tokens;      /* 0 = the trace header's kv_pool_tokens, else the engine default */
    uint32_t n_ctx;            /* 0 = what the trace needs (token traces) or 8192 (chat traces) */
    uint32_t host_cache_mb;    /* host tier in MiB; 0 = none */
    const char *cache_dir;     /* disk tier directory; NULL = none */
    uint32_t cache_dir_max_mb; /* its budget in MiB; 0 = the default (10% of the free space, >= 256 MiB) */
    const char *dump_prompts;  /* write each request's max_tokens and prompt ids here (peer replays) */
    const char *plot;          /* SVG of TTFT per request, prefix cache on and off (a second replay) */
    uint32_t concurrency;      /* requests in flight at once (0 = 1: one after the other) */
    const char *chat_template; /* chat traces render with it; NULL: the model file's */
    bool no_prefix_cache, json;
    bool quiet;                /* print nothing (a caller reports) */
    const bench_trace_hooks *hooks; /* NULL: none */
} bench_trace_opts;

int bench_trace(const bench_trace_opts *o, model *m);
