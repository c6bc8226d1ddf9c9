/* Page events: what the prefix cache tells an outside index (a router's, through cinder serve's
 * KV cache event stream, docs/FLEET.md) about the whole pages it holds, per tier, in the terms of
 * vLLM's KV events: a page is named by a hash of its tokens and of the pages before it, and each
 * event says that pages were stored in, or removed from, a medium (GPU pool or host tier), or that
 * everything is gone.
 *
 *   commit adopts whole pages            stored GPU (hashes, parent hash, tokens)
 *   demotion to the host tier            removed GPU, then stored CPU (self-describing: the same
 *                                        hashes, parent and tokens, so an index that never saw the
 *                                        GPU event can still use it)
 *   restore from the host tier           removed CPU, then stored GPU
 *   drop, host eviction, clear           removed (the medium the page was in)
 *   events switched on                   cleared (an index drops what it knew of this server)
 *
 * A removal always comes before the store of the same pages elsewhere: an index that ignores the
 * medium (llm-d's older pool marks everything "gpu") then ends with the pages present, which is
 * true. Partly filled tail pages, copy-on-write copies and pages of any namespace but the cache's
 * own (a cache_salt: announcing them would publish the salt's prefixes) are never announced.
 *
 * The hash of a page: XXH3-64 over a domain tag, the namespace key, the parent page's hash (0 for
 * a prefix's first page) and the page's tokens, cut to 63 bits and never 0 (vLLM's consumers read
 * it as a signed or an unsigned 64-bit integer alike). Routers that index by the tokens the event
 * carries (llm-d's engine-key to request-key map) need not know the function.
 *
 * The cache keeps who each page and each host slot is (kv_page_ids, one table per tier) from the
 * moment it is announced until it leaves that tier, so an eviction, which knows only page ids, can
 * name what went. Not thread-safe: the engine thread's, like the cache. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "radix/radix.h"

#define KV_EVENT_MAX_PAGE_TOKENS 256 /* cinder serve's --page-size at most */

typedef enum kv_medium { KV_MEDIUM_GPU, KV_MEDIUM_CPU } kv_medium;
typedef enum kv_event_kind { KV_EVENT_STORED, KV_EVENT_REMOVED, KV_EVENT_CLEARED } kv_event_kind;

typedef struct kv_event {
    kv_event_kind kind;
    kv_medium medium;
    uint32_t n;             /* pages (0 for cleared) */
    const uint64_t *hashes; /* [n], in prefix order for a store */
    uint64_t parent;        /* stored: the hash of the page before hashes[0]; 0 = none (a prefix's first page) */
    const int32_t *tokens;  /* stored: [n * page_tokens] */
    uint32_t page_tokens;
} kv_event;
/* Told of each event (valid during the call only); it must not call back into the cache. */
typedef void (*kv_event_fn)(void *ctx, const kv_event *ev);

uint64_t kv_page_hash(const uint8_t ns[RADIX_NS_BYTES], uint64_t parent, const int32_t *tokens, uint32_t page_tokens);

/* Who each id of one tier (GPU page or host slot) is while it is announced. */
typedef struct kv_page_ids {
    uint32_t n;
    uint64_t *hash;   /* [n]; 0: not announced */
    uint64_t *parent; /* [n] */
    int32_t *tokens;  /* [n * page_tokens] */
} kv_page_ids;

typedef struct kv_events {
    kv_event_fn fn;
    void *ctx;
    uint32_t page_tokens;
    kv_page_ids gpu, host; /* host.n == 0 without a host tier */
    uint64_t *run_hash;    /* [max(gpu.n, host.n)] scratch: the hashes of one event */
    int32_t *run_tokens;   /* [max * page_tokens] */
} kv_events;

int kv_events_init(kv_events *e, kv_event_fn fn, void *ctx, uint32_t page_tokens, uint32_t n_pages, uint32_t n_slots);
void kv_events_free(kv_events *e);
void kv_events_cleared(kv_events *e);
/* Sets the identity of id in table t (hash 0: forgets it). */
void kv_events_set(kv_events *e, kv_page_ids *t, uint32_t id, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Copies the identity of from[i] in table a to to[i] in table b. */
void kv_events_move(kv_events *e, const kv_page_ids *a, const uint32_t *from, kv_page_ids *b, const uint32_t *to,
                    uint32_t n);
/* Stored m: the announced ones of ids[0..n) (identities in t), one event per run of pages that
 * chain (each the parent of the next). */
void kv_events_stored(kv_events *e, kv_medium m, const kv_page_ids *t, const uint32_t *ids, uint32_t n);
/* Removed from m: the announced ones of ids[0..n), which t forgets. */
void kv_events_removed(kv_events *e, kv_medium m, kv_page_ids *t, const uint32_t *ids, uint32_t n);

/* Every whole page of namespace ns in the tree, by hash and tier, computed from the tree's tokens
 * alone (not from the tables above): what an index built from the events must equal. */
int kv_pages_list(const radix_tree *t, const uint8_t ns[RADIX_NS_BYTES],
                  void (*fn)(void *ctx, uint64_t hash, kv_medium m), void *ctx);
