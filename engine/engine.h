/* The engine: one model on the GPU, the prefix cache over its KV pool, and a continuous-batching
 * scheduler that every front end drives from one thread (cinder chat, cinder bench, the server):
 *
 *   engine_submit(e, request) -> handle          at any time; the ids are copied
 *   engine_step(e)                                one round: admit, one forward pass, retire
 *   engine_poll(e, handle, &reply)                1 once finished (the reply is handed over)
 *   engine_cancel(e, handle)                      a client gone: pins and pages released at once
 *   engine_generate(e, request, &reply)           one request, start to end (submit + steps)
 *
 * A request's life:
 *   waiting ─► admitted: kv_cache_acquire (GPU match + host restore + disk chunks, pinned), the
 *              pages of the rest of its prompt reserved, a block-table row ─► prefill, in chunks
 *              ─► prompt committed to the cache (requests waiting on the same prefix now hit it)
 *              ─► decode, one token per step ─► finished: prompt + generated committed, released
 *
 * One step is ONE forward pass (gpu_forward_batch) over every running sequence: a decode token
 * of each decoding sequence (and its guessed next tokens, with speculative decoding: spec_tokens)
 * plus up to chunk_tokens prompt tokens of prefilling ones (mixed, so running streams keep
 * producing tokens while a long prompt arrives), each token at its own position over its own
 * block-table row; every weight is read once per step. The forward pass
 * is batch invariant (gpu_model.h): a request's tokens are the same alone, among others,
 * admitted at any step, preempted and resumed, and with or without the cache.
 *
 * Admission orders waiting requests by longest cached prefix (SGLang's LPM), except that one
 * waiting more than max_wait_steps goes first. A request whose prompt shares more than a page
 * beyond its cached prefix with a request still prefilling waits for that prefill's commit and
 * then matches it: a prefix sent by several requests at once is prefilled once
 * (stats.dedup_tokens counts what that saved); only requests of one cache namespace are paired
 * so. A request is admitted only when the pages of its prompt can be had (evicting or demoting
 * unpinned cache entries); when decoding sequences outgrow the pool the youngest running
 * request is preempted: its KV so far is committed to the cache, its pages released, and it
 * waits again, to resume as a cache hit. A prompt that could not fit the whole pool fails at
 * submit, naming both sizes.
 *
 * Per request: sampling parameters (greedy when temperature is 0; sampled on the host from its
 * logits row, with the request's own seeded generator), max tokens, stop token ids, ignore-eos,
 * and a cache salt (vLLM's cache_salt): a salted request reads and writes the prefix cache in a
 * namespace of its own, kv_cache_namespace_salt(engine namespace, salt), computed once at
 * submit. The engine namespace already holds the tenant (engine_opts.tenant), so the same salt
 * under two tenants names two namespaces. Requests share cached KV only within one namespace:
 * same salt, or both unsalted. Salted requests skip the disk tier (kv/prefix_cache.h); the host
 * tier serves them within their namespace.
 * Errors are values: -1 with cd_errmsg(). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kv/disk_tier.h"
#include "kv/kv_pool.h"
#include "kv/prefix_cache.h"
#include "engine/host_workers.h"
#include "runtime/model/gpu_model.h"
#include "runtime/model/logit_adjust.h"
#include "runtime/model/model.h"
#include "runtime/model/sampler.h"
#include "runtime/text/json_mask.h"
#include "runtime/vk/vk_ctx.h"

enum { ENGINE_DRAW_AUTO = 0, ENGINE_DRAW_DEVICE = 1, ENGINE_DRAW_HOST = 2 };
#define ENGINE_SPEC_MAX 8     /* engine_opts.spec_tokens at most */
#define ENGINE_CTX_FLOOR 4096 /* a default context shrinks to fit the device, not below this (llama.cpp's -c default) */
#define ENGINE_SPEC_ROWS 256  /* guessed tokens one pass may hold, all sequences' */
#define ENGINE_PROMPT_ROWS 64 /* prompt positions one pass may give log-probabilities of, all requests' */

typedef struct engine_opts {
    uint32_t max_seqs;       /* requests running at once (block-table rows); 0 = 1 */
    uint32_t chunk_tokens;   /* prompt tokens per step at most; 0 = 512 */
    uint32_t max_wait_steps; /* a waiting request older than this is admitted first; 0 = 64 */
    uint32_t n_ctx;          /* tokens of one request (prompt + generated) at most; 0 = the file's
                            * context length, or what fits beside the weights where one context's
                            * KV would not (not below ENGINE_CTX_FLOOR; engine.c) */
    uint32_t pool_tokens;    /* KV pool in tokens (the running request included); 0 = 4 * n_ctx, or
                            * what leaves room for the weights where that does not (engine.c) */
    uint32_t page_tokens;    /* 0 = KV_PAGE_TOKENS_DEFAULT */
    bool no_prefix_cache;
    /* where a sampled token (temperature > 0, 1 <= top_k <= CVK_SAMPLE_MAX_K) is drawn:
     * ENGINE_DRAW_AUTO (0) on the device when it is a GPU (only the id comes back), on the host
     * when the device is a CPU (lavapipe: the download is a memcpy, while the device's top-k is
     * barrier-bound there: 11.4 vs 26.5 tok/s sampled decode on tiny, docs/PERF.md);
     * ENGINE_DRAW_DEVICE / ENGINE_DRAW_HOST force one. top_k "all" is always drawn on the host.
     * Either way the same tokens but within float rounding of a boundary between two tokens. */
    int draw;
    int gate_up_pairs;               /* gpu_model_opts.gate_up_pairs: 0 auto (a GPU), 1 on, -1 off */
    int int_dot;                     /* gpu_model_opts.int_dot: 0 auto (off for now), 1 on, -1 off */
    uint32_t device_memory_mb;       /* gpu_model_opts.device_memory in MiB: 0 the device's; else plan as if
                                  it had this much (--device-memory-mb) */
    gpu_load_progress load_progress; /* gpu_model_opts.progress: the weights' upload, tensor by tensor */
    uint32_t host_expert_layers;     /* gpu_model_opts: experts of this many layers in host memory (--n-cpu-moe), */
    bool host_experts_fixed;         /* when fixed; else the memory plan's choice */
    bool build_pipelines;            /* gpu_model_opts.build_pipelines: every pipeline compiled at start */
    /* Speculative decoding by prompt lookup (engine/lookup_draft.h): each decoding
     * sequence's pass feeds, after its last token, up to this many tokens guessed from its own
     * history, with a logits row each; its tokens are chosen row by row as ever, and the guessed
     * ones are kept up to the first its choice disagrees with (their K/V is then already
     * written). Rows are bit-identical whatever else is in the pass (gpu_model.h), so the tokens
     * are the same with it on or off; only how many come per pass changes. 0 = off; at most
     * ENGINE_SPEC_MAX, and ENGINE_SPEC_ROWS guessed tokens a pass in all. A guess takes only
     * free KV pages (it never evicts or preempts). */
    uint32_t spec_tokens;
    /* Who guesses: NULL = lookup_draft (prompt lookup); else guess(guess_ctx, ...) with
     * lookup_draft's contract (tests guess right and wrong on purpose through it). */
    uint32_t (*guess)(void *ctx, const int32_t *toks, uint32_t n, uint32_t k_max, int32_t *out);
    void *guess_ctx;
    const char *tenant;           /* optional salt: tenants never share cache entries */
    uint32_t host_cache_mb;       /* host tier of the prefix cache in MiB of host-visible memory; 0 = none */
    const char *cache_dir;        /* disk tier of the prefix cache (created if missing); NULL = none */
    uint32_t disk_chunk_pages;    /* pages per disk chunk; 0 = KV_DISK_CHUNK_TOKENS_DEFAULT tokens' worth */
    uint64_t cache_dir_max_bytes; /* the disk tier's budget (kv/disk_tier.h): least recently used chunk
                                     files under cache_dir are removed to stay within it; 0 = 10% of
                                     the file system's free space at init, at least 256 MiB */
    /* Page events of the prefix cache (kv/page_events.h), called on the engine thread inside
     * engine_init (a cleared event first), engine_step and engine_cancel; NULL = off. A front end
     * gathers them per step (cinder serve: server/kv_events.h). */
    kv_event_fn page_events;
    void *page_events_ctx;
    /* The Vulkan device to run on, borrowed: it outlives the engine, which frees only what it
     * made on it. NULL = the engine opens its own (CINDER_DEVICE, then the automatic choice).
     * Engines made one after another on one device compile each pipeline once (the device
     * keeps them: vk_pipeline.h); engines alive together on one must be stepped from one
     * thread. */
    cvk_ctx *device;
} engine_opts;

typedef struct engine_stats { /* since engine_init (engine_warm_up resets them) */
    uint64_t requests, prompt_tokens, cached_tokens, prefilled_tokens, recomputed_tokens, generated_tokens;
    uint64_t steps, preempted, cancelled;
    uint64_t dedup_tokens;                  /* cached tokens of requests that waited for another's prefill of them */
    uint64_t draft_tokens, accepted_tokens; /* speculative decoding: guessed tokens fed, and those kept */
    uint64_t scored_tokens; /* prompt positions whose log-probabilities were given (on_prompt_logprob) */
    uint64_t evicted_pages; /* pages the cache gave back to the pool (demoted ones included) */
    uint64_t cache_errors;  /* commits to the cache that failed (each on stderr): the replies stood,
                               * that KV was not cached */
    /* the host tier */
    uint64_t restored_tokens; /* cached tokens that were served from host slots */
    uint64_t restored_pages;  /* GPU pages filled from host slots */
    uint64_t demoted_pages;   /* GPU pages saved to host slots */
    double restore_ms;        /* allocate + copy (submission only when async) + radix_restore, summed */
    /* the disk tier */
    uint64_t disk_tokens; /* cached tokens that were served from disk files */
    uint64_t disk_chunks_read, disk_chunks_written, disk_bytes_read, disk_bytes_written;
    uint64_t disk_rejected; /* files rejected (other model, corrupt, truncated, bad header) and removed */
    uint64_t disk_evicted_chunks, disk_evicted_bytes; /* files the write-through removed for the budget */
    uint64_t disk_over_budget;                        /* chunks not written: the budget could not hold them */
    double disk_read_ms, disk_write_ms;
} engine_stats;

/* The KV pages and the cache's index now, for a front end's gauges (/metrics, /v1/cache). */
typedef struct engine_cache_info {
    uint32_t gpu_pages;                                       /* the pool */
    uint32_t gpu_free;                                        /* on the free list */
    uint32_t gpu_cached;                                      /* held by the cache's index, not pinned (evictable) */
    uint32_t gpu_pinned;                                      /* held by the index and pinned by a running request */
    uint32_t gpu_private;                                     /* held only by running requests (not yet committed) */
    uint32_t host_slots, host_free, host_cached, host_pinned; /* the host tier (0 without one) */
    uint64_t host_bytes_to_host, host_bytes_to_gpu;           /* its copies so far */
    uint64_t nodes;                                           /* the index's nodes, both tiers */
    uint64_t index_bytes;                                     /* heap bytes of the index */
    uint32_t page_tokens;
    uint32_t n_ctx;       /* tokens of one request at most (prompt + generated) */
    bool prefix_cache;    /* the prefix cache is on (not engine_opts.no_prefix_cache) */
    bool disk;            /* a disk tier (--cache-dir): */
    const char *disk_dir; /* its directory (the engine's memory) */
    uint64_t disk_files, disk_bytes,
        disk_budget_bytes; /* chunk files under DIR as last seen, their bytes; the budget */
} engine_cache_info;

struct engine_req; /* a submitted request (engine.c) */

typedef struct engine {
    model *m;
    cvk_ctx *vk;
    bool vk_borrowed;  /* engine_opts.device: vk is not the engine's to free */
    kv_pool pool;      /* the KV pages on the GPU: running sequences and the cache */
    gpu_model g;       /* reads and writes pool's pages through the block tables the scheduler writes */
    sampler_params sp; /* requests without their own sampling parameters use these */
    /* the host's say in a pass's tokens (scheduler.c, choose_on_host) */
    float *host_rows; /* [cap_host_rows][n_vocab] the pass's rows the host reads, downloaded together */
    uint32_t cap_host_rows;
    token_logprob *b_lp;  /* [max_out] each output row's log-probabilities */
    uint32_t *host_list;  /* [max_out] the host's items of a pass: prompt positions' rows, and each
                          * request's first choosing row */
    uint32_t n_workers;   /* the host's workers on those rows (cores, at most 16 and the items a pass can have), */
    host_workers workers; /* started at the first pass with two rows to work on */
    uint32_t
        *adj_count;    /* [n_workers][n_vocab] zeros, logit_adjust_apply's scratch (from the first request with one) */
    float *adj_logits; /* [n_workers][n_vocab] the adjusted copy of a row (made with adj_count) */
    json_vocab json_vocab;   /* the JSON mask's table of the tokenizer (from the first JSON request) */
    json_schema *any_object; /* json_object's schema (from the first json_object request) */
    bool draw_on_device;     /* engine_opts.draw resolved */
    bool cache_on;
    kv_prefix_cache cache;
    kv_host_tier host; /* used when cache.host != NULL */
    bool disk_on;
    kv_disk_tier disk; /* used when disk_on */
    engine_stats stats;

    /* the scheduler */
    uint32_t max_seqs, chunk_tokens, max_wait_steps;
    uint32_t spec_tokens; /* engine_opts.spec_tokens, guess and guess_ctx */
    uint32_t (*guess)(void *ctx, const int32_t *toks, uint32_t n, uint32_t k_max, int32_t *out);
    void *guess_ctx;
    uint32_t max_out;         /* output rows a pass may have: max_seqs + guesses' (ENGINE_SPEC_ROWS at most)
                               * + ENGINE_PROMPT_ROWS (prompt log-probabilities) */
    struct engine_req **reqs; /* every request not yet handed back: waiting, running or finished */
    uint32_t n_reqs, cap_reqs;
    uint32_t next_handle;
    uint64_t n_steps;    /* steps since engine_init (request ages) */
    uint64_t n_admitted; /* admission counter: the youngest running request has the largest */
    uint32_t *row_free;  /* [max_seqs] 1 where the block-table row is free */
    /* one forward pass (scratch, n_batch tokens / max_out outputs) */
    int32_t *b_ids, *b_next;
    uint32_t *b_row, *b_pos, *b_out;
    uint32_t *b_owner;        /* [max_out] the pass entry of each output row */
    cvk_sample_row *b_sample; /* [max_out] how each output row's token is drawn */
    struct pass_entry *pass;  /* [cap_reqs] the requests the pass feeds, in its order (engine/pass.h) */
    uint32_t n_pass;
} engine;

/* One request's outcome. ids is owned by the reply (engine_reply_free). */
typedef struct engine_reply {
    int32_t *ids; /* generated tokens, the end-of-generation token included */
    uint32_t n;
    uint32_t prompt_tokens, cached_tokens, prefilled_tokens; /* cached + prefilled = prompt */
    uint32_t recomputed_tokens; /* K/V computed again after preemptions (what the cache no longer held) */
    uint64_t evicted_pages;     /* by this request */
    uint32_t restored_tokens;   /* of cached_tokens, those that came back from the host tier */
    uint32_t restored_pages;    /* GPU pages filled from host slots for this request */
    uint64_t demoted_pages;     /* GPU pages this request's reclaims saved to the host */
    double restore_ms;          /* host time spent restoring (part of the TTFT; an async copy's
                                * GPU time shows up in the prefill instead) */
    uint32_t disk_tokens;       /* of cached_tokens, those read from disk files */
    uint32_t disk_chunks_read, disk_chunks_written, disk_rejected;
    uint64_t disk_bytes_read, disk_bytes_written;
    uint32_t disk_evicted_chunks, disk_over_budget; /* the write-through's removals for the budget; chunks
                                                       it could not hold */
    uint64_t disk_evicted_bytes;
    double disk_read_ms;  /* read + validate + upload (part of the TTFT) */
    double disk_write_ms; /* write-through after the reply */
    double queued_ms;     /* submit to the first admission (waiting for a row, pages or a prefill) */
    double acquire_ms;    /* the first admission's kv_cache_acquire: match + host restore + disk
                                * chunks + attach (profiles; restore_ms and disk_read_ms are inside) */
    double ttft_ms;       /* submit to the first token chosen */
    double decode_ms;     /* first token to the last */
    double itl_ms_max;    /* the longest gap between two tokens */
    bool eog;             /* stopped at an end-of-generation token */
    enum engine_finish { ENGINE_STOP, ENGINE_LENGTH, ENGINE_CANCELLED, ENGINE_ERROR } finish;
    uint32_t preempted;                     /* times it was preempted and resumed */
    uint32_t draft_tokens, accepted_tokens; /* speculative decoding: its guessed tokens fed, those kept */
} engine_reply;

/* Called per generated token; return false to stop early. */
typedef bool (*engine_token_fn)(void *ctx, int32_t id);

/* Called per generated token, just before engine_token_fn, with its log-probability and the
 * top_logprobs most likely tokens' under the model's raw logits (sampler_logprob: before
 * logit_bias, penalties, temperature, top-k and top-p; vLLM's default, what the model says). */
typedef void (*engine_logprob_fn)(void *ctx, const token_logprob *lp);

/* Called per prompt token at positions pos = 1 .. n - 1, in order, each once: the
 * log-probability of ids[pos] after ids[0..pos) and the most likely tokens there, under the raw
 * logits (as engine_logprob_fn). */
typedef void (*engine_prompt_logprob_fn)(void *ctx, uint32_t pos, const token_logprob *lp);

typedef struct engine_request {
    const int32_t *ids;
    uint32_t n;
    uint32_t max_tokens; /* 0: none; the prompt is computed (cached, its log-probabilities given)
                                  and the request ends (finish: length) */
    bool ignore_eos;
    engine_token_fn on_token; /* may be NULL; false stops the request (finish: stop) */
    void *ctx;
    const sampler_params *sp; /* NULL: the engine's (engine_set_sampler; greedy by default) */
    const int32_t *stop_ids;  /* more tokens that end the generation (kept in the reply) */
    uint32_t n_stop;
    float *logits_out;            /* non-NULL: n_vocab floats, the logits of each token chosen are written
                                  here (the last token's remain); NULL: never read back */
    const char *cache_salt;       /* NULL or "": the engine's cache namespace; else a namespace of its
                                  own (read at submit, not kept) */
    const logit_adjust *adjust;   /* NULL: none; else logit_bias and penalties on each row before its
                                  token is chosen, on the host (copied at submit; logits_out stays raw) */
    engine_logprob_fn on_logprob; /* NULL: none; else each token's log-probabilities (its row comes
                                  down; where the token is drawn does not change) */
    uint32_t top_logprobs;        /* 0..TOP_LOGPROBS_MAX alternatives for on_logprob */
    /* NULL: none; else each prompt token's log-probabilities (vLLM's prompt_logprobs, OpenAI's
     * echo): the prompt is computed from its first token, whatever the cache holds (the cache
     * keeps K/V, not the logits; with the cache or not its tokens are the same), with a logits row
     * per position, ENGINE_PROMPT_ROWS a pass; its K/V is cached as ever */
    engine_prompt_logprob_fn on_prompt_logprob;
    uint32_t prompt_top_logprobs; /* 0..TOP_LOGPROBS_MAX alternatives for on_prompt_logprob */
    bool json_object;             /* the reply is one JSON object and ends with it (runtime/text/json_mask.h):
                                  tokens that cannot continue it are masked, on the host */
    json_schema *json_schema;     /* NULL: none; else the reply is one instance of it and ends with it,
                                  masked likewise (a reference is taken at submit; not with json_object) */
    const char *json_forced;      /* with json_schema, NULL or text of the instance the prompt already
                                  ends with (a forced tool call's start); the reply goes on from it */
    const char *json_tail;        /* with json_schema, NULL or text that follows the instance before the
                                  end ("\n</tool_call>"; json_mask_set_tail); both read at submit */
    bool json_lazy;               /* with json_schema: free text until token json_trigger, which opens
                                  each instance (+ tail); json_mask_set_trigger */
    int32_t json_trigger;
    bool json_once;          /* with json_lazy: after the first instance (+ tail), only the end */
    coder_tools *json_coder; /* with json_schema, NULL or the tools of Qwen3-Coder XML calls: each
                                  instance is written as one (json_mask_set_coder; a reference is
                                  taken at submit) */
} engine_request;

/* Opens the Vulkan device (CINDER_DEVICE picks one), uploads the weights (completing m's
 * fingerprint from the digest made on the way) and sets the cache's namespace from it. */
int engine_init(engine *e, model *m, const engine_opts *o);
void engine_free(engine *e); /* zeroed is fine */

/* The memory plan engine_init would make with o on this device, without reading a weight: the
 * context and KV pool it would take (its own, fitted to the device, where o leaves them 0), the
 * layers whose experts would stay in host memory, the sizes; when the weights do not fit,
 * `refusal` holds what engine_init would say. -1 only when no plan could be made (no device,
 * out of memory, ...): `cinder info`. */
typedef struct engine_plan {
    char device[256];
    uint32_t n_ctx, pool_tokens, host_expert_layers;
    gpu_memory_plan mem;
    char refusal[640]; /* "" when the weights fit */
} engine_plan;
int engine_plan_memory(model *m, const engine_opts *o, engine_plan *out);
int engine_set_sampler(engine *e, const sampler_params *p);

/* Queues a request; *handle names it. Fails (nothing queued) for an empty prompt, one that
 * leaves no room to generate in the context, or one larger than the whole KV pool. */
int engine_submit(engine *e, const engine_request *rq, uint32_t *handle);
/* One scheduling round; *busy (may be NULL) = requests waiting or running after it. A failed
 * forward pass fails the requests in it (finish: error) and returns -1. */
int engine_step(engine *e, uint32_t *busy);
/* 1 and the reply (handed over: engine_reply_free) when the request has finished, else 0. */
int engine_poll(engine *e, uint32_t handle, engine_reply *r);
/* Stops a request now: its computed KV stays in the cache, its pins and pages are released;
 * the reply (finish: cancelled) is still polled. -1 for an unknown handle. */
int engine_cancel(engine *e, uint32_t handle);
uint32_t engine_running(const engine *e);
/* Tokens one request may hold (prompt + generated). */
static inline uint32_t engine_n_ctx(const engine *e) { return e->g.n_ctx; }
/* Profiles: a timer on every forward pass (NULL: off), and the last pass's host side. */
static inline void engine_set_timer(engine *e, cvk_timer *t) { gpu_model_set_timer(&e->g, t); }
static inline const gpu_host_times *engine_last_pass(const engine *e) { return &e->g.host; }
void engine_cache_info_get(const engine *e, engine_cache_info *out);
/* The counters since engine_init (a copy: front ends read them through this, not e->stats). */
static inline engine_stats engine_stats_get(const engine *e) { return e->stats; }
/* Whether the prefix cache is on, and whether it has a disk tier. */
static inline bool engine_cache_on(const engine *e) { return e->cache_on; }
static inline bool engine_disk_on(const engine *e) { return e->disk_on; }
/* The model it runs, and the device it runs on. */
static inline const model *engine_model(const engine *e) { return e->m; }
static inline cvk_ctx *engine_device(const engine *e) { return e->vk; }
/* The tokenizer requests are tokenized with (the model's). */
static inline const tokenizer *engine_tokenizer(const engine *e) { return e->m->tok; }
/* Every whole page of the engine's own namespace in the prefix cache, by page-event hash and tier
 * (kv_cache_list_pages; nothing without the cache): what an index built from the page events
 * must hold. Engine thread. */
int engine_cache_pages(const engine *e, void (*fn)(void *ctx, uint64_t hash, kv_medium m), void *ctx);
uint32_t engine_waiting(const engine *e);

/* One request start to end (submit, step until it finishes, poll); -1 if it failed. */
int engine_generate(engine *e, const engine_request *rq, engine_reply *r);
/* A short request with the cache off, so first-dispatch costs (lavapipe compiles shaders on
 * first use) stay out of the first real request's TTFT; the statistics start after it. */
int engine_warm_up(engine *e);
void engine_reply_free(engine_reply *r);
