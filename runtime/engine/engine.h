/* The engine: one model on the GPU, the prefix cache over its KV pool, and the request loop
 * every front end uses (cinder chat, cinder bench --trace; the server later):
 *
 *   ids ─► match the cached prefix (pinned) ─► attach its pages ─► prefill the rest
 *       ─► decode (next token chosen on the GPU, streamed to a callback)
 *       ─► insert prompt + generated tokens into the cache ─► unpin
 *
 * The KV page pool holds pool_tokens tokens: the running request's pages and everything the
 * cache keeps. When a request needs pages and none are free, the cache evicts its least
 * recently used unpinned leaves; a request that still does not fit fails with a message and
 * leaves the cache as it was apart from those evictions. With the cache off every request
 * prefills its whole prompt, the comparison point for the cache's benefit.
 *
 * With a host tier (host_cache_mb > 0) evicted entries are demoted to host memory instead of
 * dropped (kv/prefix_cache.h), and a match that reaches demoted pages restores them into fresh
 * GPU pages before the suffix is prefilled. With timeline semaphores the host does not wait
 * for the copies: demotions and restores run on the transfer queue and the prefill waits for
 * them on the GPU (overlapping compute on devices with a transfer-only queue family; on one
 * queue, as on lavapipe, they simply run first); without, the copy completes first. When the
 * restore cannot be had (no room even after eviction), the request uses the GPU part of the match.
 *
 * With a disk tier (cache_dir; kv/disk_tier.h) the prompt's whole chunks past the match (and the
 * host restore) that are on disk are read, validated and uploaded into fresh GPU pages, attached
 * after the matched pages and inserted into the tree; consecutive chunks, stopping at the first
 * missing or rejected one, and never the last prompt token (its logits start the decode). After
 * the insert at the end of a request every whole chunk of prompt + generated tokens not yet on
 * disk is written (write-through, synchronous).
 *
 * Greedy by default; engine_set_sampler changes it (on the GPU when the kernel can, on the
 * host from the logits otherwise). Errors are values: -1 with cd_errmsg(). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kv/disk_tier.h"
#include "kv/prefix_cache.h"
#include "runtime/model/gpu_model.h"
#include "runtime/model/model.h"
#include "runtime/model/sampler.h"
#include "runtime/vk/vk_ctx.h"

typedef struct engine_opts {
    uint32_t n_ctx;        /* tokens of one request (prompt + generated) at most; 0 = min(8192, trained) */
    uint32_t pool_tokens;  /* KV pool in tokens (the running request included); 0 = 4 * n_ctx */
    uint32_t page_tokens;  /* 0 = KV_PAGE_TOKENS_DEFAULT */
    bool no_prefix_cache;
    const char *tenant;    /* optional salt: tenants never share cache entries */
    uint32_t host_cache_mb; /* host tier of the prefix cache in MiB of host-visible memory; 0 = none */
    const char *cache_dir;  /* disk tier of the prefix cache (created if missing); NULL = none */
    uint32_t disk_chunk_pages; /* pages per disk chunk; 0 = KV_DISK_CHUNK_TOKENS_DEFAULT tokens' worth */
} engine_opts;

typedef struct engine_stats { /* since engine_init (engine_warm_up resets them) */
    uint64_t requests, prompt_tokens, cached_tokens, prefilled_tokens, generated_tokens;
    uint64_t evicted_pages;   /* pages the cache gave back to the pool (demoted ones included) */
    /* the host tier */
    uint64_t restored_tokens; /* cached tokens that were served from host slots */
    uint64_t restored_pages;  /* GPU pages filled from host slots */
    uint64_t demoted_pages;   /* GPU pages saved to host slots */
    double restore_ms;        /* allocate + copy (submission only when async) + radix_restore, summed */
    /* the disk tier */
    uint64_t disk_tokens;     /* cached tokens that were served from disk files */
    uint64_t disk_chunks_read, disk_chunks_written, disk_bytes_read, disk_bytes_written;
    uint64_t disk_rejected;   /* files rejected (other model, corrupt, truncated, bad header) and removed */
    double disk_read_ms, disk_write_ms;
} engine_stats;

typedef struct engine {
    model *m;
    cvk_ctx *vk;
    gpu_model g;
    sampler smp;         /* host sampling when the GPU kernel cannot */
    float *logits;       /* host copy for host sampling */
    bool cache_on;
    kv_prefix_cache cache;
    kv_host_tier host;   /* used when cache.host != NULL */
    bool disk_on;
    kv_disk_tier disk;   /* used when disk_on */
    uint8_t (*chain)[KV_DISK_HASH_BYTES]; /* chain hashes of the request's chunks (scratch) */
    uint32_t cap_chain;
    uint32_t *disk_pages; /* [disk.chunk_pages] fresh pages of a chunk being loaded (scratch) */
    engine_stats stats;
} engine;

/* One request's outcome. ids is owned by the reply (engine_reply_free). */
typedef struct engine_reply {
    int32_t *ids;              /* generated tokens, the end-of-generation token included */
    uint32_t n;
    uint32_t prompt_tokens, cached_tokens, prefilled_tokens;
    uint64_t evicted_pages;    /* by this request */
    uint32_t restored_tokens;  /* of cached_tokens, those that came back from the host tier */
    uint32_t restored_pages;   /* GPU pages filled from host slots for this request */
    uint64_t demoted_pages;    /* GPU pages this request's reclaims saved to the host */
    double restore_ms;         /* host time spent restoring (part of the TTFT; an async copy's
                                * GPU time shows up in the prefill instead) */
    uint32_t disk_tokens;      /* of cached_tokens, those read from disk files */
    uint32_t disk_chunks_read, disk_chunks_written, disk_rejected;
    uint64_t disk_bytes_read, disk_bytes_written;
    double disk_read_ms;       /* read + validate + upload (part of the TTFT) */
    double disk_write_ms;      /* write-through after the reply */
    double ttft_ms;            /* request start to the first token chosen */
    double decode_ms;          /* first token to the last */
    bool eog;                  /* stopped at an end-of-generation token */
} engine_reply;

/* Called per generated token; return false to stop early. */
typedef bool (*engine_token_fn)(void *ctx, int32_t id);

typedef struct engine_request {
    const int32_t *ids;
    uint32_t n;
    uint32_t max_tokens;
    bool ignore_eos;
    engine_token_fn on_token;  /* may be NULL */
    void *ctx;
} engine_request;

/* Opens the Vulkan device (CINDER_DEVICE picks one), uploads the weights (completing m's
 * fingerprint from the digest made on the way) and sets the cache's namespace from it. */
int engine_init(engine *e, model *m, const engine_opts *o);
void engine_free(engine *e); /* zeroed is fine */
int engine_set_sampler(engine *e, const sampler_params *p);

int engine_generate(engine *e, const engine_request *rq, engine_reply *r);
/* A short request with the cache off, so first-dispatch costs (lavapipe compiles shaders on
 * first use) stay out of the first real request's TTFT; the statistics start after it. */
int engine_warm_up(engine *e);
void engine_reply_free(engine_reply *r);
