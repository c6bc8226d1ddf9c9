/* radix: a radix tree (compressed trie) from token runs to KV page ids. Plain C, no Vulkan,
 * no knowledge of what a page holds: token runs in, page ids out, eviction victims reported
 * to the caller (kv/prefix_cache.c), which owns page lifetime.
 *
 * Page-aligned: the tree stores whole pages only. Every edge holds a whole number of pages,
 * n_tokens = n_pages * page_tokens, and edges split only at page boundaries. Inserting a
 * sequence of n tokens stores its first floor(n / page_tokens) pages; a partly filled last
 * page is not cached.
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
 * Pinning: a match pins the path from its deepest node (the node holding its last token) to
 * the root: lock += 1 on every node of the path. radix_release unpins. A node with lock > 0 is
 * never evicted. When an edge splits, the new upper node inherits the lower node's lock (every
 * path through the lower node runs through it) and its last-use time; handles keep pointing to
 * the lower node, which keeps its identity (children, pins, place in the LRU heap).
 *
 * Eviction is leaf-first LRU: the evictable nodes are exactly the unpinned leaves (not roots),
 * kept in a binary min-heap by last-use time, so each victim is found in O(log n). Evicting a
 * leaf may make its parent an evictable leaf. Victims are reported to the caller as page
 * lists before their nodes are freed; the caller frees or demotes those pages.
 *
 * Namespaces: each root is keyed by a namespace key (RADIX_NS_BYTES bytes, made by the caller
 * from the model fingerprint, KV dtype, page size and an optional tenant salt). Lookups and
 * inserts never cross namespaces. All namespaces share one LRU and one page budget.
 *
 * Time: a logical clock incremented on every match and insert (deterministic, testable);
 * match and insert touch every node they walk through.
 *
 * Errors: -1 with cd_errmsg() set; an allocation failure leaves the tree exactly as it was
 * (every allocation an operation needs is made before the tree is changed). Not thread-safe.
 *
 *   radix_tree t; radix_init(&t, 16);
 *   radix_match m; radix_match_prefix(&t, ns, ids, n, &m);     pin; m.n_tokens, m.pages
 *   ... prefill ids[m.n_tokens..n), decode ...
 *   uint32_t first_new; radix_insert(&t, ns, ids2, n2, pages2, &first_new);
 *                                      the tree now refers to pages2[first_new .. n2 / 16)
 *   radix_release(&t, &m);
 *   radix_evict(&t, want_pages, on_victim, ctx);               under memory pressure */
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
    uint64_t hit_tokens;      /* sum of matched tokens */
    uint64_t inserted_tokens; /* tokens newly stored by radix_insert */
    uint64_t evictions;       /* nodes evicted */
    uint64_t evicted_pages;   /* pages reported to eviction callbacks */
    uint64_t nodes;           /* nodes now (roots excluded) */
    uint64_t pages;           /* pages the tree refers to now */
    uint64_t pinned_pages;    /* of those, pages in pinned nodes (radix_evictable_pages = pages - this) */
    uint64_t bytes;           /* heap bytes of the tree now: nodes, token runs, page lists, tables */
} radix_stats;

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
    /* min-heap of evictable nodes (unpinned non-root leaves) by last use */
    radix_node **heap;
    uint32_t n_heap, cap_heap;
    /* testing: when > 0, every fail_every-th allocation fails (out-of-memory injection) */
    uint32_t fail_every, n_allocs;
} radix_tree;

/* The result of a match; a pin on the path while node != NULL. */
typedef struct radix_match {
    uint32_t n_tokens;  /* matched tokens */
    uint32_t n_pages;   /* ceil(n_tokens / page_tokens) */
    uint32_t *pages;    /* [n_pages], owned by the match; freed by radix_release */
    radix_node *node;   /* the pinned deepest node; NULL when nothing matched */
} radix_match;

/* Called once per evicted node with its pages (valid during the call only). The node is
 * already out of the tree (stats updated, radix_check passes) but the callback must not call
 * back into the tree. */
typedef void (*radix_victim_fn)(void *ctx, const uint32_t *pages, uint32_t n_pages);

int radix_init(radix_tree *t, uint32_t page_tokens); /* page_tokens >= 1 */
void radix_free(radix_tree *t);                       /* zeroed is fine; reports no victims */

/* Longest cached prefix of ids[0..n) in namespace ns; pins it (m->node) when n_tokens > 0.
 * Always release the match, hit or not. On failure *m is zeroed (releasing it is a no-op). */
int radix_match_prefix(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                       radix_match *m);
void radix_release(radix_tree *t, radix_match *m); /* unpins and frees; zeroed matches are fine */

/* Stores the whole pages of ids[0..n) (pages[i] holds tokens [i*pt, (i+1)*pt)). Pages of a
 * prefix already cached are kept as they are (the tree's page wins; the caller's duplicate
 * stays the caller's); the tree takes pages[*first_new .. n / pt), and the caller must take
 * one reference to each of those on the tree's behalf. *first_new == n / pt: nothing taken.
 * Touches the nodes holding pages of ids (a split's lower part holds none and keeps its last
 * use). On failure *first_new is left as it was. */
int radix_insert(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                 const uint32_t *pages, uint32_t *first_new);

/* Evicts least recently used unpinned leaves, reporting each to fn (may be NULL), until at
 * least want_pages pages have been reported or nothing evictable is left. Returns the pages
 * reported. Never allocates. A namespace whose last node goes is dropped (its root freed). */
uint64_t radix_evict(radix_tree *t, uint64_t want_pages, radix_victim_fn fn, void *ctx);
/* Pages that radix_evict could report now if asked for everything (in unpinned subtrees). */
uint64_t radix_evictable_pages(const radix_tree *t);

/* Every invariant: structure (parents, child counts, edge lengths, sibling chains and the
 * child table), page ids (each page at most once), lock counts (a node's lock is at least the
 * sum of its children's), the heap (exactly the unpinned non-root leaves, heap order, back
 * indices) and the stats (nodes, pages). -1 with a message naming the first violation. */
int radix_check(const radix_tree *t);
/* Writes the tree, one node per line, indented by depth (debugging). */
void radix_dump(const radix_tree *t, void *file);
