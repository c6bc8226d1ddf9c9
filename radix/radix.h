/* radix: a radix tree (compressed trie) from token runs to KV page ids. Plain C, no Vulkan,
 * no knowledge of what a page holds: token runs in, page ids out, eviction victims reported
 * to the caller (kv/prefix_cache.c), which owns page lifetime.
 *
 * Page-aligned: every edge holds a whole number of pages, n_tokens = n_pages * page_tokens,
 * and edges split only at page boundaries, except a tail (below). radix_insert stores the
 * first floor(n / page_tokens) pages of a sequence of n tokens; radix_insert_tail stores its
 * partly filled last page too.
 *
 *   page_tokens = 4, inserted "abcdefgh" (pages P0 P1) then "abcdwxyz" (pages P0 Q1):
 *
 *     (root) ─ [abcd|P0] ─┬─ [efgh|P1]          a split at the page boundary after "abcd"
 *                         └─ [wxyz|Q1]
 *
 *   then "abcdwxAB" (pages P0 R1 ...): it diverges inside the first page of [wxyz]; the new
 *   leaf [wxAB|R1] becomes a sibling of [wxyz|Q1] with the same first token 'w':
 *
 *     (root) ─ [abcd|P0] ─┬─ [efgh|P1]
 *                         ├─ [wxyz|Q1]          siblings with the same first token form a
 *                         └─ [wxAB|R1]          chain; their first pages always differ
 *
 * Children are found by first token in O(1): one hash table keyed by (parent, first token)
 * holds the head of that chain. A chain is longer than one only when sequences diverge inside
 * a child's first page; siblings in a chain differ somewhere in their first page.
 *
 * Token-granular reuse: match returns the longest cached prefix in tokens, which may end
 * inside a page. Then pages[0 .. n_tokens / page_tokens) are whole-page hits (share them) and,
 * when n_tokens % page_tokens != 0, pages[n_pages - 1] holds the matching tokens of the last,
 * partial page: the caller copies its first n_tokens % page_tokens token slots into a fresh
 * page of its own (copy on write) and never writes into the cached page.
 *
 *   cached [abcd|P0] [efgh|P1], query "abcdefXY": 6 tokens, pages {P0, P1}: share P0, copy
 *   slots 0..1 of P1 into a fresh page.     query "abcd": 4 tokens, pages {P0}.
 *   query "abcdefgX": 7 tokens, {P0, P1}.   query "abcX": 3 tokens, {P0} (a partial page).
 *
 * Tails: a sequence that will not grow (a finished request) ends with a partly filled page;
 * radix_insert_tail keeps it as the last page of a leaf, a tail, holding n % page_tokens
 * tokens. A tail is always a leaf: nothing hangs below a partly filled page. A match reads it
 * like any page (it may end inside it: the caller copies the slots it needs). A whole page
 * never matches a tail's page, so a longer sequence through a tail (the next turn of that
 * chat) splits the tail node before its last page and hangs beside it; the tail-only node left
 * holds a prefix of its sibling's first page, and the insert gives it back (its page to the
 * `dropped` callback) when nothing pins it:
 *
 *   page_tokens = 4, cached [abcd|P0] [ef|T1] (a tail of 2 tokens), insert "abcdefgh" (Q0 Q1):
 *
 *     (root) ─ [abcd|P0] ─┬─ [ef|T1]            the split cuts the tail off, Q1 hangs beside it
 *                         └─ [efgh|Q1]          then [ef|T1] goes: T1 to `dropped`
 *
 * Pinning: a match pins the path from its deepest node (the node holding its last token, cut
 * after the matched pages: Rule 5) to the root: lock += 1 on every node of the path.
 * radix_release unpins. A node with lock > 0 is never evicted. When an edge splits, the new upper node inherits the lower node's lock (every
 * path through the lower node runs through it) and its last-use time; handles keep pointing to
 * the lower node, which keeps its identity (children, pins, place in the LRU heap).
 *
 * Eviction is leaf-first LRU: the evictable nodes are kept in a binary min-heap by last-use
 * time, so each victim is found in O(log n). Evicting a node may make its parent evictable.
 * Victims are reported to the caller as page lists before their nodes are freed. With one
 * tier (no host memory; radix_evict) the evictable nodes are exactly the unpinned leaves and
 * a victim leaves the tree. The host tier below refines "leaf" per tier.
 *
 * Two tiers: GPU pages and host slots. Each node keeps two separate residency fields: gpu[]
 * (KV page ids in the GPU pool, valid when on_gpu) and host[] (slot ids in a pinned host-memory
 * pool of page-sized slots, valid when on_host), one entry per page of its edge. In this
 * version a node is resident in exactly one tier (on_gpu XOR on_host): a demotion moves it to
 * the host, a restore moves it back and gives its host slots up. The tree knows nothing about
 * memory: it tracks ids, and reports what to copy or free through callbacks.
 *
 *   Rule 1, GPU residency is prefix-closed: the parent of a GPU-resident node is GPU-resident
 *   or a root. So a host-resident node has only host-resident children, and every root path
 *   is a run of GPU nodes followed by a run of host nodes ("G" GPU pages, "H" host slots):
 *
 *     (root) ─ [abcd|G P0] ─┬─ [efgh|G P1] ─ [ijkl|H s7]
 *                           └─ [wxyz|H s3] ─ [mnop|H s4]
 *
 *   Rule 2, two heaps by last use, each exact:
 *     GPU-evictable:  GPU-resident, unpinned, no GPU-resident child (host children are fine:
 *                     [efgh] above is GPU-evictable when unpinned)
 *     host-evictable: host-resident, unpinned, no children at all ([ijkl] and [mnop] above)
 *   Roots are in neither. A node is in at most one heap, the heap of its tier.
 *
 *   Rule 3, GPU eviction is pulled: radix_gpu_victim names the least recently used GPU-
 *   evictable node v and its pages, and the caller decides (the tree is unchanged until then):
 *
 *     radix_demote(t, &v, slots): saved     v becomes host-resident in the caller's n slots;
 *       (p) ─ [efgh|G P1] ─ [ijkl|H s7]     v enters the host heap if it has no children; p
 *       (p) ─ [efgh|H s9] ─ [ijkl|H s7]     loses a GPU child and may become GPU-evictable
 *                                           (even with host children).
 *     radix_drop(t, &v, host_free, ctx): dropped   v and its whole subtree leave the tree. The
 *       subtree is all host-resident (Rule 1, v had no GPU child) and all unpinned (a lock is at
 *       least the sum of its children's): each of its nodes' slots goes to host_free, one call
 *       per node, children before parents. A root left without children is dropped.
 *
 *   Either way v's GPU pages (v.pages, valid until the call: read them first) are no longer
 *   the tree's: the caller may reuse them once its copy to the host slots (saved case) has read
 *   them. Making sure of that is the caller's contract: copy synchronously, fence before the
 *   pages are written again, or order every later writer after the copy on the GPU (the host
 *   tier, kv/host_tier.h: each later submission waits on the copies' timeline semaphore).

 *   Rule 4, host eviction (radix_evict_host) removes least recently used host-evictable
 *   leaves, reporting their slots; a host parent left without children becomes host-evictable,
 *   a root left without children is dropped. The host tier's owner calls it when it needs
 *   slots for a GPU victim it wants to demote (it never changes which node that victim is).
 *
 *   Rule 5, match walks GPU and host nodes alike and pins the whole path; a pinned host node is
 *   never host-evicted, so its slots stay valid while a host->GPU copy reads them (the pin
 *   covers the DMA). A match that ends before its deepest node's last page first cuts that
 *   node after the matched pages (an edge split, as an insert makes), so the pin holds the
 *   matched pages and no more: the rest of the node stays evictable (a long branch that merely
 *   shares a prefix with the request never blocks the pool) and is not restored. When the
 *   memory for the cut cannot be had, the whole node is pinned instead (and restored whole).
 *   By Rule 1 the matched pages are n_gpu_pages GPU pages followed by host slots, the partial
 *   last page included (it lies in the deepest node, the last on the path):
 *
 *     cached (root) ─ [abcd|G P0] ─ [efghijkl|H s7 s8], query "abcdefX":
 *       the match cuts [efgh|H s7] ─ [ijkl|H s8] and pins [efgh]:
 *       n_tokens 6, n_pages 2, pages {P0, s7}, n_gpu_pages 1, n_restore 1
 *
 *   n_restore counts the slots of every host node on the pinned path (after an uncut match, the
 *   deepest node's pages past the match too, listed after pages[n_pages]):
 *   pages[n_gpu_pages .. n_gpu_pages + n_restore) are the slots to copy back, in path order.

 *   Rule 6, radix_restore(t, m, gpu_pages, host_free, ctx) turns the path's host nodes GPU-
 *   resident with the caller's freshly filled pages (gpu_pages[i] holds the copy of slot
 *   pages[n_gpu_pages + i]); the tree takes them, reports each restored node's slots to
 *   host_free, and rewrites m so it reads as an all-GPU match (pages[0..n_pages) GPU ids,
 *   n_gpu_pages = n_pages, n_restore = 0). It allocates nothing and is all or nothing. The
 *   path is pinned, so nothing on it was evicted since the match; but another match's restore
 *   may have restored the upper part of its host run. Then the tree takes only the suffix of
 *   gpu_pages still needed (the return value says how many) and the rest stay the caller's.
 *   The slots go back to the caller at the call: restore after the copies completed, keep
 *   the slots from reuse until they have, or order every reuse after them (the host tier's
 *   batches run in submission order on one queue, each behind a transfer->transfer barrier,
 *   so a demotion into a freed slot writes it after the restore read it).
 *
 *   Rule 7, insert never changes residency and never hangs GPU pages below a host node. It
 *   walks host nodes like GPU ones (a cached page is cached: the tree's copy wins and the
 *   caller's duplicate page stays the caller's, as for GPU nodes) and touches them. When its
 *   new pages would go below a host-resident node (a new leaf under it, or a split of a host
 *   edge) it stores nothing: *first_new = n / page_tokens, the path is touched, and
 *   stats.blocked_inserts counts it. To cache past a host node, match and restore it first:
 *
 *       (root) ─ [abcd|G P0] ─ [efgh|H s7]     insert "abcdefghijkl" (Q0 Q1 Q2): blocked,
 *                                              Q0..Q2 stay the caller's
 *       match "abcdefghijkl" (pages {P0, s7}), copy s7 into a fresh R1, restore, insert again:
 *       (root) ─ [abcd|G P0] ─ [efgh|G R1] ─ [ijkl|G Q2]     *first_new 2: the tree takes Q2
 *
 *     A new leaf under a GPU node is fine even when its siblings are host-resident.
 *
 *   Pinned-page counts stay per tier (stats.pinned_pages: GPU pages in pinned nodes;
 *   stats.pinned_host_slots: host slots in pinned nodes).
 *
 * Namespaces: each root is keyed by a namespace key (RADIX_NS_BYTES bytes, made by the caller
 * from the model fingerprint, KV dtype, page size and an optional tenant salt). Lookups and
 * inserts never cross namespaces. All namespaces share the LRUs and the page and slot budgets.
 *
 * Time: a logical clock incremented on every match and insert (deterministic, testable);
 * match and insert touch every node they walk through, on either tier. Demotion, restore and
 * eviction neither move the clock nor touch: a demoted node keeps its place in LRU order.
 *
 * Errors: -1 with cd_errmsg() set; an allocation failure leaves the tree exactly as it was
 * (every allocation an operation needs is made before the tree is changed). Match and insert
 * allocate; release, both evictions and restore never do, and a restore fails (changing
 * nothing) only on a handle that does not describe its pinned path. Not thread-safe.
 *
 *   radix_tree t; radix_init(&t, 16);
 *   radix_match m; radix_match_prefix(&t, ns, ids, n, &m);     pin; m.n_tokens, m.pages
 *   ... prefill ids[m.n_tokens..n), decode ...
 *   uint32_t first_new; radix_insert(&t, ns, ids2, n2, pages2, &first_new);
 *                                      the tree now refers to pages2[first_new .. n2 / 16)
 *   radix_release(&t, &m);
 *   radix_victim v;                                             under memory pressure:
 *   while (short of pages && radix_gpu_victim(&t, &v)) {
 *       take v.pages[0 .. v.n_pages);
 *       radix_drop(&t, &v, free_slots, ctx);                    or, with a host tier:
 *       radix_evict_host(&t, v.n_pages - free, free_slots, ctx); make room in the host pool
 *       radix_demote(&t, &v, slots);                            then copy v.pages -> slots }
 *   radix_match_prefix(...); if (m.n_restore) {                 pages[m.n_gpu_pages ..] are slots
 *       allocate m.n_restore GPU pages g, copy the slots into them, wait;
 *       radix_restore(&t, &m, g, free_slots, ctx); }            now an all-GPU match */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RADIX_NS_BYTES 32

typedef struct radix_node radix_node;

typedef struct radix_stats {
    uint64_t lookups;         /* radix_match_prefix calls */
    uint64_t full_hits;       /* lookups that matched every token asked for (n > 0) */
    uint64_t partial_hits;    /* lookups that matched some but not all */
    uint64_t misses;          /* lookups that matched nothing */
    uint64_t hit_tokens;      /* sum of matched tokens (GPU and host nodes alike) */
    uint64_t inserted_tokens; /* tokens newly stored by radix_insert */
    uint64_t evictions;       /* GPU evictions: nodes whose GPU pages radix_demote / radix_drop gave up */
    uint64_t evicted_pages;   /* GPU pages reported to victim callbacks */
    uint64_t nodes;           /* nodes now (roots excluded), both tiers */
    uint64_t pages;           /* GPU pages the tree refers to now */
    uint64_t pinned_pages;    /* of those, pages in pinned nodes (radix_evictable_pages = pages - this) */
    uint64_t bytes;           /* heap bytes of the tree now: nodes, token runs, page lists, tables */
    /* the host tier */
    uint64_t host_slots;         /* host slots the tree refers to now */
    uint64_t pinned_host_slots;  /* of those, slots in pinned nodes */
    uint64_t demotions;          /* GPU evictions that the demote callback saved to the host */
    uint64_t demoted_pages;      /* their pages */
    uint64_t restores;           /* nodes radix_restore moved back to the GPU */
    uint64_t restored_pages;     /* their pages */
    uint64_t host_evictions;     /* host-resident nodes removed (radix_evict_host, or below a dropped victim) */
    uint64_t host_evicted_slots; /* their slots, reported to host_free callbacks */
    uint64_t blocked_inserts;    /* inserts that stored nothing because a host node was in the way (Rule 7) */
    uint64_t match_splits;       /* matches that cut their deepest node after the matched pages (Rule 5) */
    uint64_t dropped_tails;      /* tails given back by radix_insert_tail because a longer page held their tokens */
} radix_stats;

/* A binary min-heap of nodes by last use. */
typedef struct radix_heap {
    radix_node **v;
    uint32_t n, cap;
} radix_heap;

typedef struct radix_tree {
    uint32_t page_tokens;
    uint64_t clock;
    radix_stats stats;
    /* roots, one per namespace */
    radix_node **roots;
    uint32_t n_roots, cap_roots;
    /* (parent, first token) -> head of the sibling chain; open addressing */
    struct radix_slot *slots;
    uint32_t n_slots, cap_slots; /* cap is a power of two */
    /* Rule 2: the GPU-evictable and the host-evictable nodes; each cap >= nodes */
    radix_heap gpu_lru, host_lru;
#ifdef CINDER_FAULT_INJECTION /* a test build's hook (CMakeLists.txt, CINDER_TESTS) */
    /* when > 0, every fail_every-th allocation fails (out-of-memory injection) */
    uint32_t fail_every, n_allocs;
#endif
} radix_tree;

/* The result of a match; a pin on the path while node != NULL. */
typedef struct radix_match {
    uint32_t n_tokens;    /* matched tokens */
    uint32_t n_pages;     /* ceil(n_tokens / page_tokens) */
    uint32_t *pages;      /* [n_gpu_pages + n_restore] (at least n_pages), owned by the match; freed by
                           * radix_release. pages[0 .. n_gpu_pages): GPU page ids; then host slot ids */
    radix_node *node;     /* the pinned deepest node; NULL when nothing matched */
    uint32_t n_gpu_pages; /* leading matched pages that are GPU pages (== n_pages: an all-GPU match) */
    uint32_t n_restore;   /* host slots radix_restore needs (whole host nodes, Rule 5); 0 when all-GPU
                           * (after a restore: 0, and pages past n_pages are not part of the match) */
} radix_match;

/* Told of ids leaving the tree (valid during the call only): host slots of dropped or restored
 * nodes, or the page of a stale tail an insert gave back. It only reports, it decides nothing:
 * the tree is consistent during the call (stats updated, radix_check passes), and the callback
 * must not call back into the tree. */
typedef void (*radix_victim_fn)(void *ctx, const uint32_t *ids, uint32_t n);
/* The GPU victim (Rule 3): the least recently used GPU-evictable node and its page ids (valid
 * until the tree changes). */
typedef struct radix_victim {
    const radix_node *node;
    const uint32_t *pages;
    uint32_t n_pages;
} radix_victim;

int radix_init(radix_tree *t, uint32_t page_tokens); /* page_tokens >= 1 */
void radix_free(radix_tree *t);                      /* zeroed is fine; reports no victims, no slots */

/* Longest cached prefix of ids[0..n) in namespace ns, through GPU and host nodes alike; pins it
 * (m->node) when n_tokens > 0. Always release the match, hit or not. On failure *m is zeroed
 * (releasing it is a no-op). A caller that does not restore uses pages[0 .. n_gpu_pages) only
 * (a prefix of min(n_tokens, n_gpu_pages * page_tokens) tokens). */
int radix_match_prefix(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n, radix_match *m);
void radix_release(radix_tree *t, radix_match *m); /* unpins and frees; zeroed matches are fine */

/* Rule 6. gpu_pages[0 .. m->n_restore) hold the contents of host slots m->pages[m->n_gpu_pages ..
 * + n_restore). Returns how many of them the tree took: always the last ones,
 * gpu_pages[n_restore - taken .. n_restore) (fewer than n_restore only when another match's
 * restore got to part of the path first); the caller keeps the others. Each restored node's
 * slots go to host_free (may be NULL), one call per node, deepest first, after the tree is
 * consistent. Then m reads as an all-GPU match. Never allocates; a no-op returning 0 when
 * n_restore == 0; -1 (tree and m unchanged) when m does not describe its pinned path. */
int radix_restore(radix_tree *t, radix_match *m, const uint32_t *gpu_pages, radix_victim_fn host_free, void *ctx);

/* Host slots of m's path still to restore: the bottom n_restore - radix_match_host_left of
 * m->pages[n_gpu_pages ..) were restored by another match on the same path since m was made
 * (Rule 6). A restorer copies only the slots still left, so a prefix comes back once however
 * many requests matched it while it was on the host. Read-only. */
uint32_t radix_match_host_left(const radix_tree *t, const radix_match *m);

/* Stores the whole pages of ids[0..n) (pages[i] holds tokens [i*pt, (i+1)*pt)) as GPU pages.
 * Pages of a prefix already cached, on either tier, are kept as they are (the tree's copy wins;
 * the caller's duplicate stays the caller's); the tree takes pages[*first_new .. n / pt), and
 * the caller must take one reference to each of those on the tree's behalf. *first_new ==
 * n / pt: nothing taken, also when a host node blocks the insert (Rule 7). Touches the nodes
 * holding pages of ids (a split's lower part holds none and keeps its last use). On failure
 * *first_new is left as it was. */
int radix_insert(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n, const uint32_t *pages,
                 uint32_t *first_new);

/* radix_insert, and also the partly filled last page of ids[0..n), pages[n / pt] holding its
 * n % pt tokens, as a tail (see Tails above; only for a sequence that is written no more: the
 * tree's page must not change). The tree takes pages[*first_new .. ceil(n / pt)). A tail made
 * redundant by the sequence's pages, unpinned and GPU-resident, leaves the tree, its page
 * reported to dropped (the tree's reference, for the caller to release; NULL: none leave).
 * Called with n a multiple of page_tokens it is radix_insert that also drops stale tails. */
int radix_insert_tail(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                      const uint32_t *pages, uint32_t *first_new, radix_victim_fn dropped, void *ctx);

/* Rule 3: names the GPU victim in *v; false (v zeroed) when nothing is GPU-evictable. */
bool radix_gpu_victim(const radix_tree *t, radix_victim *v);
/* Rule 3, saved: v (still the GPU victim) becomes host-resident in host_slots[0 .. v->n_pages).
 * Never allocates; -1 (nothing changed) when v is not the GPU victim now. */
int radix_demote(radix_tree *t, const radix_victim *v, const uint32_t *host_slots);
/* Rule 3, dropped: v (still the GPU victim) and its host subtree leave the tree, the subtree's
 * slots reported to host_free (may be NULL). A namespace whose last node goes is dropped.
 * Never allocates; -1 (nothing changed) when v is not the GPU victim now. */
int radix_drop(radix_tree *t, const radix_victim *v, radix_victim_fn host_free, void *ctx);
/* Rule 4: removes least recently used host-evictable nodes, reporting each one's slots to
 * host_free (may be NULL), until at least want_slots slots have been reported or nothing
 * host-evictable is left. Returns the slots reported. Never allocates. */
uint64_t radix_evict_host(radix_tree *t, uint64_t want_slots, radix_victim_fn host_free, void *ctx);
/* GPU pages that eviction could give up now (unpinned ones). */
uint64_t radix_evictable_pages(const radix_tree *t);
/* Host slots radix_evict_host could report now if asked for everything (unpinned ones). */
uint64_t radix_evictable_host_slots(const radix_tree *t);
/* Every invariant: structure (parents, child counts and child lists, edge lengths, sibling
 * chains and the child table), residency (each node on exactly one tier, GPU residency
 * prefix-closed, GPU-child counts), ids (each GPU page and each host slot at most once), lock
 * counts (a node's lock is at least the sum of its children's), both heaps (exactly the nodes of
 * Rule 2, heap order, back indices) and the stats (nodes, pages, slots, pinned, bytes). -1 with
 * a message naming the first violation. */
int radix_check(const radix_tree *t);
/* Writes the tree, one node per line, indented by depth (debugging). */
void radix_dump(const radix_tree *t, void *file);

/* One node as radix_walk reports it (valid during the call only). */
typedef struct radix_walk_node {
    const uint8_t *ns;      /* its namespace (RADIX_NS_BYTES) */
    uint32_t depth;         /* 1 for a root's child; a node's parent is the last node reported at depth - 1 */
    const int32_t *tokens;  /* the edge: n_pages * page_tokens slots (a tail's last page holds `tail`) */
    uint32_t n_pages, tail; /* tail: tokens in a partly filled last page, 0 = whole pages */
    bool on_gpu;            /* else on the host */
} radix_walk_node;
/* Every node of every namespace, parents before children (depth first), roots left out. Read-only:
 * what the tree indexes, for a listing or a check that rebuilds something from the tokens alone
 * (kv/page_events.c lists the cached pages by hash that way). */
void radix_walk(const radix_tree *t, void (*fn)(void *ctx, const radix_walk_node *w), void *ctx);
