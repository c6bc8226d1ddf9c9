/* The prefix cache: the radix index (radix/) over a KV page pool (kv_pages.h), under a default
 * namespace (c->ns) and any other its callers name. The tree holds one reference to every page
 * it indexes, so a page it caches outlives the request that wrote it; eviction drops those
 * references (the page returns to the free list when no sequence holds it either).
 *
 *   one request (engine/scheduler.c):
 *     kv_cache_acquire(c, ns, ids, n, seq, &m, &hit)
 *                                            the longest cached prefix from every tier (GPU
 *                                            match pinned, host pages restored, disk chunks
 *                                            read), its pages attached to seq by reference; at
 *                                            least one token is left to compute
 *     reserve the rest: kv_seq_append        a shared partial last page is copied first
 *                                            (kv_cow); kv_cache_reclaim when pages are short
 *     prefill, kv_cache_commit(.., KV_COMMIT_PROMPT, NULL)
 *                                            the prompt's whole pages: requests arriving now
 *                                            can match it
 *     decode, kv_cache_release(c, &m), kv_cache_commit(.., KV_COMMIT_FINAL, &w)
 *                                            everything computed, the partly filled last page
 *                                            too (a tail: the next turn of the chat continues
 *                                            it), written through to disk
 *
 * Nothing else reaches into the tiers: the engine and the tools go through these functions (the
 * restore bench and the tests also call the lower ones below to time and probe each step).
 * The namespace key (kv_cache_namespace) is a SHA-256 over a length-prefixed, domain-separated
 * encoding of the model fingerprint (weights, RoPE config, tokenizer), the code id (device,
 * driver and kernels: runtime/vk/vk_code_id.h), the KV dtype, the page size and an optional
 * tenant salt: a change in any of them misses instead of serving KV whose bits differ from
 * what this process would compute. One tree may hold several namespaces (tenants) over the same pool.
 *
 * Namespaces per request. match, insert, acquire and commit take the namespace to work in
 * (RADIX_NS_BYTES bytes), or NULL for the cache's own (c->ns, set at init). A request with a
 * cache salt (vLLM's cache_salt) works in kv_cache_namespace_salt(c->ns, salt): it shares entries
 * only with requests of the same salt, never with unsalted ones or other salts. The host tier
 * follows the namespace by itself (its slots hang in the tree's nodes, under their root); the
 * disk tier is keyed by one namespace (kv_disk_init) and is skipped entirely, read and write,
 * by requests of any other. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "kv/disk_tier.h"
#include "kv/host_tier.h"
#include "kv/kv_pages.h"
#include "kv/page_events.h"
#include "radix/radix.h"
#include "runtime/vk/vk_code_id.h"

typedef struct kv_prefix_cache {
    radix_tree tree;
    kv_pages *pages; /* the pool the tree's pages come from (not owned) */
    uint8_t ns[RADIX_NS_BYTES];
    uint64_t freed_pages; /* evicted pages that went back to the free list */

    /* the host tier (kv_cache_attach_host; NULL: evicted pages are dropped) */
    kv_host_tier *host; /* not owned */
    bool host_broken;   /* a copy failed: no more demotions, host nodes are never restored */
    /* the demotions of the reclaim under way: pages[i] is copied to slots[i], then released */
    uint32_t *dem_pages, *dem_slots, n_dem, cap_dem;
    uint32_t *restore_pages; /* [pool pages] scratch of kv_cache_restore */

    /* the disk tier (kv_cache_attach_disk; NULL: none) */
    kv_disk_tier *disk;                   /* not owned */
    uint8_t (*chain)[KV_DISK_HASH_BYTES]; /* chain hashes of a request's chunks (scratch) */
    uint32_t cap_chain;
    uint32_t *disk_pages; /* [disk->chunk_pages] fresh pages of a chunk being loaded (scratch) */

    /* page events (kv_cache_set_events; NULL: off, nothing is hashed or kept) */
    kv_events *ev;

#ifdef CINDER_FAULT_INJECTION /* a test build's hook (CMakeLists.txt, CINDER_TESTS) */
    uint32_t fail_commits;    /* the next n kv_cache_commit calls fail */
#endif
} kv_prefix_cache;

/* What kv_cache_acquire served a request from, per tier. */
typedef struct kv_cache_hit {
    uint32_t cached_tokens;   /* tokens attached to the sequence (all tiers) */
    uint32_t restored_tokens; /* of them, those that came back from the host tier */
    uint32_t restored_pages;  /* GPU pages filled from host slots */
    double restore_ms;        /* allocate + copy (submission only when async) + radix_restore */
    uint32_t disk_tokens;     /* of cached_tokens, those read from disk files */
    uint32_t disk_chunks_read, disk_rejected;
    uint64_t disk_bytes_read;
    double disk_read_ms; /* read + validate + upload */
} kv_cache_hit;

/* What kv_cache_commit wrote through to disk. */
typedef struct kv_cache_written {
    uint32_t disk_chunks_written;
    uint64_t disk_bytes_written;
    uint32_t disk_evicted_chunks; /* files removed for the budget (least recently used first) */
    uint64_t disk_evicted_bytes;
    uint32_t disk_over_budget; /* chunks not written: the budget could not hold them */
    double disk_write_ms;
} kv_cache_written;

int kv_cache_namespace(const uint8_t model_fp[32], const uint8_t code_id[CVK_CODE_ID_BYTES], const char *kv_dtype,
                       uint32_t page_tokens, const void *salt, size_t salt_len, uint8_t out[RADIX_NS_BYTES]);

/* The namespace of requests salted with salt[0 .. salt_len): SHA-256 over a length-prefixed,
 * domain-separated encoding of base (a kv_cache_namespace: model, KV dtype, page size, tenant) and
 * the salt, in a domain of its own, so it differs from every unsalted namespace and from base
 * salted otherwise (a tenant's salted requests stay the tenant's). */
int kv_cache_namespace_salt(const uint8_t base[RADIX_NS_BYTES], const void *salt, size_t salt_len,
                            uint8_t out[RADIX_NS_BYTES]);

int kv_cache_init(kv_prefix_cache *c, kv_pages *pages, const uint8_t ns[RADIX_NS_BYTES]);
void kv_cache_free(kv_prefix_cache *c); /* gives every page reference of the tree back */
/* Drops every unpinned entry from both tiers (nothing is demoted). */
void kv_cache_clear(kv_prefix_cache *c);

/* Longest cached prefix of ids[0..n) in namespace ns (NULL: c->ns); always radix_release the match. */
int kv_cache_match(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, radix_match *m);
/* Caches the whole pages of a sequence holding ids[0..s->n_tokens) in namespace ns (NULL: c->ns;
 * the tree takes a reference to each page it adopts) and, with tail, its partly filled last
 * page too (only for a sequence that writes no more: radix.h, Tails). Tails these pages make
 * redundant leave the tree (their pages go back to the pool when nothing else holds them). */
int kv_cache_insert(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, const kv_seq *s, bool tail);
/* Evicts LRU leaves until at least want pages are free or nothing evictable is left; returns
 * the pages that went back to the free list (the engine calls it while reserving pages).
 *
 * Eviction is pulled (radix.h Rule 3): the cache asks the tree for its LRU GPU victim and
 * decides. With a host tier the victim is demoted instead of dropped when the tier has slots for
 * it (LRU host leaves make room for exactly its pages: radix_evict_host): its slots are taken
 * and (page, slot) pairs queued, radix_demote, and once the victims
 * for `want` are chosen the batch is copied device->host in one command buffer; then the demoted
 * pages go back to the pool. With an asynchronous tier the copy is only submitted: it waits on
 * the GPU for the compute submitted before it, and every later submission waits for it, so the
 * next prefill may be handed those pages at once (kv/host_tier.h). Dropped victims' pages are
 * released at once. */
uint32_t kv_cache_reclaim(kv_prefix_cache *c, uint32_t want);

/* What the cache has moved so far, for a caller to difference around a call (the engine charges
 * each request what its admission evicted): GPU pages given back to the free list, and GPU pages
 * demoted to the host tier. */
typedef struct kv_cache_moves {
    uint64_t freed_pages, demoted_pages;
} kv_cache_moves;
kv_cache_moves kv_cache_moves_get(const kv_prefix_cache *c);
/* The index's counters and sizes now. */
const radix_stats *kv_cache_stats(const kv_prefix_cache *c);

/* ---- the door the engine uses (one request: acquire, ..., commit, release) ---- */

/* The longest cached prefix of ids[0..n) in namespace ns (NULL: c->ns) into the empty sequence
 * s, from every tier, always
 * leaving at least the last token to compute (its logits choose the next token): the GPU match
 * (pinned in *m until kv_cache_release), host-resident pages of it restored first (when they
 * cannot be, only the GPU part is used), then whole disk chunks past it (consecutive, stopping at
 * the first missing or rejected one; the tree adopts them; only when ns is the disk tier's). s
 * holds the pages by reference; *hit says what came from where. */
int kv_cache_acquire(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, kv_seq *s, radix_match *m,
                     kv_cache_hit *hit);
/* What a commit caches. A request commits its prompt when the prefill ends (others may match
 * it while it decodes: whole pages only, since the sequence goes on writing its last page) and
 * everything it computed when it leaves the GPU (the last page too, partly filled or not: the
 * sequence writes no more). */
enum kv_commit { KV_COMMIT_PROMPT, KV_COMMIT_FINAL };

/* Caches ids[0..n) held by s in namespace ns (NULL: c->ns; n <= s->n_tokens; the tree takes a
 * reference to each page it adopts; `what` says whether a partly filled last page goes too) and,
 * with a disk tier of namespace ns and w != NULL, writes every whole chunk not yet on disk
 * (write-through; a failed write ends it with one message, the request goes on). Commit after
 * kv_cache_release of the request's match: a pin of its own would keep the tail it extends. */
int kv_cache_commit(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, const kv_seq *s,
                    enum kv_commit what, kv_cache_written *w);
/* Unpins an acquire's match (zeroed matches are fine). */
void kv_cache_release(kv_prefix_cache *c, radix_match *m);
/* Gives the cache a disk tier (d reads and writes the same pool). */
int kv_cache_attach_disk(kv_prefix_cache *c, kv_disk_tier *d);

/* Page events (kv/page_events.h) to fn from now on, starting with a cleared event; only for pages
 * of the cache's own namespace (c->ns). Call after the tiers are attached, on an empty cache. */
int kv_cache_set_events(kv_prefix_cache *c, kv_event_fn fn, void *ctx);
/* Every whole page of c->ns the tree holds, by hash and tier (kv_pages_list). */
int kv_cache_list_pages(const kv_prefix_cache *c, void (*fn)(void *ctx, uint64_t hash, kv_medium m), void *ctx);

/* Gives the cache a host tier (h copies between the same pool's buffer and its slots). */
int kv_cache_attach_host(kv_prefix_cache *c, kv_host_tier *h);
/* Makes a match all-GPU (radix.h Rule 6): allocates m->n_restore pages (reclaiming if short;
 * the matched path is pinned, so never from under it), copies the host slots into them (an
 * asynchronous tier only submits the copy: the prefill that reads the pages waits for it on the
 * GPU), radix_restore, and gives back the pages the tree did not take (a later writer of those
 * waits for the copy too; the freed slots are written again only by later batches of the same
 * queue, kv/host_tier.h). Returns 0 (restored, or nothing
 * to restore; *taken = pages the tree took: only the slots still on the host are copied, so
 * when several matches of one demoted prefix are restored, the first copies it and the others
 * take its pages), 1 (not restored: no host tier usable, no room, or the copy failed, which
 * marks the tier broken as a failed demotion does, with a line on stderr; the caller uses
 * m->pages[0 .. m->n_gpu_pages) only and the rest is recomputed) or -1 (error). */
int kv_cache_restore(kv_prefix_cache *c, radix_match *m, uint32_t *taken);
