#include "radix/radix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* Layout. A node is the edge into it plus bookkeeping. The edge's tokens, GPU page ids and
 * host slot ids live in one allocation (the run), so demoting and restoring a node write ids
 * in place and never allocate:
 *
 *     run: [ t0 t1 ... t(n_pages*pt - 1) | gpu: p0 ... p(n_pages - 1) | host: s0 ... s(n_pages - 1) ]
 *
 * tok, gpu and host point into the run. A split copies only its smaller part into a fresh run
 * and leaves the larger part where it is, so those pointers may start past the run's beginning
 * and a run may hold more pages than its node (mem_pages): a match that cuts a 9,000-token edge
 * after one page copies one page, not 8,999 (fresh memory costs page faults, docs/PERF.md).
 *
 * gpu[] is meaningful while on_gpu, host[] while on_host (separate fields for the two tiers;
 * this version sets exactly one of the flags on every non-root node).
 *
 * A node has no child array. Its children are found through the tree-wide slot table keyed by
 * (parent, first token), whose value is the head of the chain of siblings sharing that first
 * token (linked by `next`):
 *
 *     slots: (A,'e') -> [efgh]            (A,'w') -> [wxAB] -> [wxyz] -> NULL
 *
 * Every node also sits in its parent's child list (kids, prev_sib/next_sib), which lets a
 * dropped GPU victim's host subtree be walked without allocating (Rule 3) and the dump walk
 * the tree in order.
 *
 * Roots are nodes with an empty edge, parent NULL, neither residency flag, and a namespace key
 * behind them (radix_root). A root exists while it has children: removing its last child frees
 * it.
 *
 * Time only moves forward and every operation touches whole root paths, so a node's last use
 * is never later than its parent's; each heap of evictable nodes is therefore also the LRU
 * order of everything that could become evictable on its tier. */

#define RADIX_NO_HEAP UINT32_MAX
#define RADIX_MIN_SLOTS 16u
#define RADIX_MIN_HEAP 16u
#define RADIX_MIN_ROOTS 4u

struct radix_node {
    radix_node *parent;              /* NULL for a root */
    radix_node *next;                /* next sibling with the same first token (the slot's chain) */
    radix_node *kids;                /* first child */
    radix_node *prev_sib, *next_sib; /* the parent's child list */
    int32_t *mem;                    /* the run (tokens, gpu[], host[] of mem_pages pages); NULL for a root */
    int32_t *tok;                    /* the edge's tokens, n_pages * page_tokens slots, in mem */
    uint32_t *gpu, *host;            /* one id per page each, in mem */
    uint32_t mem_pages;              /* pages mem was allocated for (>= n_pages) */
    uint64_t last_use;               /* clock value of the last match/insert that walked through it */
    uint32_t n_pages;                /* edge length in pages; >= 1 except for roots */
    uint32_t tail;                   /* tokens in the last page when it is partly filled (a tail:
                                     * leaves only); 0 = the edge is whole pages */
    uint32_t n_children;
    uint32_t n_gpu_children; /* children that are GPU-resident */
    uint32_t lock;           /* pins on paths through this node */
    uint32_t heap_idx;       /* place in its tier's heap, RADIX_NO_HEAP when not evictable */
    bool on_gpu;             /* gpu[] holds its pages */
    bool on_host;            /* host[] holds its pages */
};

typedef struct radix_root {
    radix_node node; /* first, so a radix_root * is a radix_node * */
    uint8_t ns[RADIX_NS_BYTES];
} radix_root;

struct radix_slot {
    radix_node *parent;
    radix_node *head; /* NULL: an empty slot */
    int32_t token;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static inline int32_t *node_tokens(const radix_node *x) { return x->tok; }

static inline uint32_t *node_gpu(const radix_tree *t, const radix_node *x) {
    (void)t;
    return x->gpu;
}

static inline uint32_t *node_host(const radix_tree *t, const radix_node *x) {
    (void)t;
    return x->host;
}

/* The ids of x's pages on the tier it is resident on. */
static inline uint32_t *node_ids(const radix_tree *t, const radix_node *x) {
    return x->on_gpu ? node_gpu(t, x) : node_host(t, x);
}

static inline size_t run_bytes(const radix_tree *t, uint32_t n_pages) {
    return (size_t)n_pages * (t->page_tokens + 2) * sizeof(int32_t);
}

static inline bool is_root(const radix_node *x) { return x->parent == NULL; }
/* Pages of x's edge that are full; a tail's last page is not. */
static inline uint32_t whole_pages(const radix_node *x) { return x->n_pages - (x->tail != 0); }
/* Tokens of x's edge. */
static inline uint32_t edge_tokens(const radix_tree *t, const radix_node *x) {
    return whole_pages(x) * t->page_tokens + x->tail;
}
/* Tokens held by page k of x's edge. */
static inline uint32_t page_fill(const radix_tree *t, const radix_node *x, uint32_t k) {
    return k < whole_pages(x) ? t->page_tokens : x->tail;
}

static uint32_t lcp(const int32_t *a, const int32_t *b, uint32_t n) {
    uint32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static bool same_tokens(const int32_t *a, const int32_t *b, uint32_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Every allocation goes through here, so a test build's fail_every can make any one of them fail. */
static void *radix_alloc(radix_tree *t, size_t size) {
#ifdef CINDER_FAULT_INJECTION
    t->n_allocs++;
    if (t->fail_every && t->n_allocs % t->fail_every == 0) return NULL;
#endif
    return malloc(size ? size : 1);
}

/* ---- the slot table: (parent, first token) -> chain head ---------------------------------- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t slot_hash(const radix_node *parent, int32_t token) {
    return mix64((uint64_t)(uintptr_t)parent * 0x9e3779b97f4a7c15ull ^ (uint32_t)token);
}

/* Index of the slot holding (parent, token), or of the empty slot where it would go.
 * Needs cap_slots > 0; the table is never full (load <= 1/2). */
static uint32_t slot_index(const struct radix_slot *slots, uint32_t cap, const radix_node *parent, int32_t token) {
    uint32_t mask = cap - 1, i = (uint32_t)slot_hash(parent, token) & mask;
    while (slots[i].head && (slots[i].parent != parent || slots[i].token != token)) i = (i + 1) & mask;
    return i;
}

static radix_node *chain_head(const radix_tree *t, const radix_node *parent, int32_t token) {
    if (!t->cap_slots) return NULL;
    return t->slots[slot_index(t->slots, t->cap_slots, parent, token)].head;
}

/* Removes slot i by shifting later entries of its probe run back (no tombstones): an entry at
 * j whose home h does not lie cyclically in (i, j] can fill the hole at i. */
static void slot_delete(radix_tree *t, uint32_t i) {
    uint32_t mask = t->cap_slots - 1;
    for (uint32_t j = (i + 1) & mask; t->slots[j].head; j = (j + 1) & mask) {
        uint32_t h = (uint32_t)slot_hash(t->slots[j].parent, t->slots[j].token) & mask;
        if (((j - h) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = (struct radix_slot){0};
    t->n_slots--;
}

/* Makes x a child of parent in the table: it joins (heads) the chain of its first token, or
 * starts one. Capacity was reserved by the caller. */
static void chain_add(radix_tree *t, radix_node *parent, radix_node *x) {
    struct radix_slot *s = &t->slots[slot_index(t->slots, t->cap_slots, parent, x->tok[0])];
    if (!s->head) {
        *s = (struct radix_slot){.parent = parent, .token = x->tok[0]};
        t->n_slots++;
    }
    x->next = s->head;
    s->head = x;
}

/* Puts `with` where x is in its parent's chain (both have the same parent and first token). */
static void chain_replace(radix_tree *t, radix_node *x, radix_node *with) {
    struct radix_slot *s = &t->slots[slot_index(t->slots, t->cap_slots, x->parent, x->tok[0])];
    radix_node **link = &s->head;
    while (*link != x) link = &(*link)->next;
    with->next = x->next;
    *link = with;
    x->next = NULL;
}

static void chain_remove(radix_tree *t, radix_node *x) {
    uint32_t i = slot_index(t->slots, t->cap_slots, x->parent, x->tok[0]);
    if (t->slots[i].head == x && !x->next) {
        slot_delete(t, i); /* x was the whole chain */
    } else {
        radix_node **link = &t->slots[i].head;
        while (*link != x) link = &(*link)->next;
        *link = x->next;
    }
    x->next = NULL;
}

/* ---- child lists -------------------------------------------------------------------------- */

static void kid_add(radix_node *p, radix_node *x) {
    x->prev_sib = NULL;
    x->next_sib = p->kids;
    if (p->kids) p->kids->prev_sib = x;
    p->kids = x;
}

static void kid_remove(radix_node *p, radix_node *x) {
    if (x->prev_sib) x->prev_sib->next_sib = x->next_sib;
    else p->kids = x->next_sib;
    if (x->next_sib) x->next_sib->prev_sib = x->prev_sib;
    x->prev_sib = x->next_sib = NULL;
}

/* Puts `with` where x is in p's child list. */
static void kid_replace(radix_node *p, radix_node *x, radix_node *with) {
    with->prev_sib = x->prev_sib;
    with->next_sib = x->next_sib;
    if (x->prev_sib) x->prev_sib->next_sib = with;
    else p->kids = with;
    if (x->next_sib) x->next_sib->prev_sib = with;
    x->prev_sib = x->next_sib = NULL;
}

/* Post-order over the subtree of v (children before parents, v last) without allocating:
 * post_first(v) is the first node, post_next(v, x) the one after x (NULL after v). Reads only
 * x and nodes still to come, so x may be freed once its successor is known. */
static radix_node *post_first(radix_node *x) {
    while (x->kids) x = x->kids;
    return x;
}

static radix_node *post_next(const radix_node *v, const radix_node *x) {
    if (x == v) return NULL;
    return x->next_sib ? post_first(x->next_sib) : x->parent;
}

/* ---- the heaps of evictable nodes (Rule 2), min last_use on top --------------------------- */

static void heap_set(radix_heap *h, uint32_t i, radix_node *x) {
    h->v[i] = x;
    x->heap_idx = i;
}

static void heap_up(radix_heap *h, uint32_t i) {
    radix_node *x = h->v[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (h->v[p]->last_use <= x->last_use) break;
        heap_set(h, i, h->v[p]);
        i = p;
    }
    heap_set(h, i, x);
}

static void heap_down(radix_heap *h, uint32_t i) {
    radix_node *x = h->v[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1]->last_use < h->v[c]->last_use) c++;
        if (x->last_use <= h->v[c]->last_use) break;
        heap_set(h, i, h->v[c]);
        i = c;
    }
    heap_set(h, i, x);
}

/* Never grows the array: cap >= nodes is kept by insert for both heaps, so release, evict and
 * restore (which cannot fail) never need memory. */
static void heap_push(radix_heap *h, radix_node *x) {
    heap_set(h, h->n++, x);
    heap_up(h, x->heap_idx);
}

static void heap_remove(radix_heap *h, radix_node *x) {
    uint32_t i = x->heap_idx;
    radix_node *last = h->v[--h->n];
    x->heap_idx = RADIX_NO_HEAP;
    if (last == x) return;
    heap_set(h, i, last);
    heap_up(h, i);
    heap_down(h, last->heap_idx);
}

/* The heap of x's tier: where x is when x->heap_idx is set. A node leaves its heap before its
 * residency changes (heap_leave), so this always names the heap it is in. */
static radix_heap *tier_heap(radix_tree *t, const radix_node *x) { return x->on_gpu ? &t->gpu_lru : &t->host_lru; }

/* Rule 2: the heap x belongs in now, or NULL. */
static radix_heap *evictable_heap(radix_tree *t, const radix_node *x) {
    if (is_root(x) || x->lock) return NULL;
    if (x->on_gpu) return x->n_gpu_children == 0 ? &t->gpu_lru : NULL;
    return x->n_children == 0 ? &t->host_lru : NULL;
}

static void heap_leave(radix_tree *t, radix_node *x) {
    if (x->heap_idx != RADIX_NO_HEAP) heap_remove(tier_heap(t, x), x);
}

/* Puts x where Rule 2 says after a change of its lock, children or residency. A node that
 * stays in its heap keeps its place. */
static void heap_sync(radix_tree *t, radix_node *x) {
    radix_heap *want = evictable_heap(t, x);
    if (x->heap_idx != RADIX_NO_HEAP) {
        if (tier_heap(t, x) == want) return;
        heap_remove(tier_heap(t, x), x);
    }
    if (want) heap_push(want, x);
}

/* ---- pins and touches --------------------------------------------------------------------- */

static void pin(radix_tree *t, radix_node *x) {
    if (x->lock++ > 0) return;
    if (x->on_gpu) t->stats.pinned_pages += x->n_pages;
    else t->stats.pinned_host_slots += x->n_pages; /* (0 for a root) */
    heap_leave(t, x);                              /* a pinned node is not evictable */
}

static void unpin(radix_tree *t, radix_node *x) {
    if (x->lock == 0) return; /* a released-twice handle; radix_check would not have passed */
    if (--x->lock > 0) return;
    if (x->on_gpu) t->stats.pinned_pages -= x->n_pages;
    else t->stats.pinned_host_slots -= x->n_pages;
    heap_sync(t, x);
}

/* Marks x and its ancestors used now. Any of them may be in a heap (a GPU node whose only
 * children are host nodes is GPU-evictable); each key grew, so each sinks. */
static void touch_path(radix_tree *t, radix_node *x, uint64_t now) {
    for (; x; x = x->parent) {
        x->last_use = now;
        if (x->heap_idx != RADIX_NO_HEAP) heap_down(tier_heap(t, x), x->heap_idx);
    }
}

/* ---- namespaces --------------------------------------------------------------------------- */

static const uint8_t *root_ns(const radix_node *root) { return ((const radix_root *)root)->ns; }

static radix_node *root_find(const radix_tree *t, const uint8_t ns[RADIX_NS_BYTES]) {
    for (uint32_t i = 0; i < t->n_roots; i++)
        if (memcmp(root_ns(t->roots[i]), ns, RADIX_NS_BYTES) == 0) return t->roots[i];
    return NULL;
}

/* A root whose last child went away goes too (namespaces come and go with tenants). */
static void root_remove(radix_tree *t, radix_node *root) {
    uint32_t i = 0;
    while (t->roots[i] != root) i++;
    t->roots[i] = t->roots[--t->n_roots];
    t->stats.bytes -= sizeof(radix_root);
    free(root);
}

/* ---- nodes -------------------------------------------------------------------------------- */

/* x's run becomes mem, laid out for n pages from its start. */
static void node_set_run(const radix_tree *t, radix_node *x, int32_t *mem, uint32_t n) {
    x->mem = x->tok = mem;
    x->gpu = (uint32_t *)(mem + (size_t)n * t->page_tokens);
    x->host = x->gpu + n;
    x->mem_pages = n;
}

/* A node with a run of n_pages pages (its edge is set by the caller). */
static radix_node *node_new(radix_tree *t, uint32_t n_pages) {
    radix_node *x = radix_alloc(t, sizeof *x);
    int32_t *run = x ? radix_alloc(t, run_bytes(t, n_pages)) : NULL;
    if (!run) {
        free(x);
        return NULL;
    }
    *x = (radix_node){.n_pages = n_pages, .heap_idx = RADIX_NO_HEAP};
    node_set_run(t, x, run, n_pages);
    return x;
}

/* Frees a node_new that never entered the tree (NULL is fine). */
static void node_drop_new(radix_node *x) {
    if (x) free(x->mem);
    free(x);
}

static void node_free(radix_node *x) {
    free(x->mem);
    free(x);
}

/* Takes x (not a root) out of its parent: slot chain, child list, child counts. The parent
 * then follows Rule 2; a root left without children (and unpinned) is dropped. x's own
 * subtree stays hanging below it, and x's heap place, stats and memory are the caller's. */
static void node_detach(radix_tree *t, radix_node *x) {
    radix_node *p = x->parent;
    chain_remove(t, x);
    kid_remove(p, x);
    p->n_children--;
    if (x->on_gpu) p->n_gpu_children--;
    if (!is_root(p)) heap_sync(t, p);
    else if (p->n_children == 0 && p->lock == 0) root_remove(t, p);
}

/* Stats for a node that leaves the tree. */
static void node_account_out(radix_tree *t, const radix_node *x) {
    t->stats.nodes--;
    t->stats.bytes -= sizeof *x + run_bytes(t, x->mem_pages);
    if (x->on_gpu) t->stats.pages -= x->n_pages;
    else t->stats.host_slots -= x->n_pages;
}

/* ---- reserving table space before a change ------------------------------------------------ */

/* Grown tables are allocated up front and installed only once every allocation of the
 * operation succeeded, so a failure leaves the tree as it was, table sizes included. */
typedef struct radix_reserve {
    struct radix_slot *slots;
    uint32_t cap_slots;
    radix_node **heaps[2]; /* gpu_lru, host_lru */
    uint32_t cap_heap;
    radix_node **roots;
    uint32_t cap_roots;
} radix_reserve;

static uint32_t grown_cap(uint32_t cap, uint32_t min_cap, uint64_t need) {
    uint64_t c = cap ? cap : min_cap;
    while (c < need) c *= 2;
    return c > UINT32_MAX ? 0 : (uint32_t)c;
}

static int reserve_tables(radix_tree *t, radix_reserve *r, uint32_t new_slots, uint32_t new_nodes, uint32_t new_roots) {
    *r = (radix_reserve){0};
    uint64_t slots_need = 2 * ((uint64_t)t->n_slots + new_slots); /* load stays <= 1/2 */
    if (slots_need > t->cap_slots) {
        r->cap_slots = grown_cap(t->cap_slots, RADIX_MIN_SLOTS, slots_need);
        r->slots = r->cap_slots ? radix_alloc(t, (size_t)r->cap_slots * sizeof *r->slots) : NULL;
        if (!r->slots) return -1;
    }
    /* both heaps have the same capacity: every node could become evictable on either tier */
    uint64_t heap_need = t->stats.nodes + new_nodes;
    if (heap_need > t->gpu_lru.cap) {
        r->cap_heap = grown_cap(t->gpu_lru.cap, RADIX_MIN_HEAP, heap_need);
        for (int k = 0; k < 2; k++) {
            r->heaps[k] = r->cap_heap ? radix_alloc(t, (size_t)r->cap_heap * sizeof *r->heaps[k]) : NULL;
            if (!r->heaps[k]) return -1;
        }
    }
    uint64_t roots_need = (uint64_t)t->n_roots + new_roots;
    if (roots_need > t->cap_roots) {
        r->cap_roots = grown_cap(t->cap_roots, RADIX_MIN_ROOTS, roots_need);
        r->roots = r->cap_roots ? radix_alloc(t, (size_t)r->cap_roots * sizeof *r->roots) : NULL;
        if (!r->roots) return -1;
    }
    return 0;
}

static void reserve_drop(radix_reserve *r) {
    free(r->slots);
    free(r->heaps[0]);
    free(r->heaps[1]);
    free(r->roots);
    *r = (radix_reserve){0};
}

static void heap_commit(radix_tree *t, radix_heap *h, radix_node **v, uint32_t cap) {
    if (h->n) memcpy(v, h->v, (size_t)h->n * sizeof *v);
    free(h->v);
    t->stats.bytes += ((size_t)cap - h->cap) * sizeof *v;
    h->v = v;
    h->cap = cap;
}

static void reserve_commit(radix_tree *t, radix_reserve *r) {
    if (r->slots) {
        memset(r->slots, 0, (size_t)r->cap_slots * sizeof *r->slots);
        for (uint32_t i = 0; i < t->cap_slots; i++) {
            struct radix_slot s = t->slots[i];
            if (s.head) r->slots[slot_index(r->slots, r->cap_slots, s.parent, s.token)] = s;
        }
        free(t->slots);
        t->stats.bytes += ((size_t)r->cap_slots - t->cap_slots) * sizeof *r->slots;
        t->slots = r->slots;
        t->cap_slots = r->cap_slots;
    }
    if (r->heaps[0]) {
        heap_commit(t, &t->gpu_lru, r->heaps[0], r->cap_heap);
        heap_commit(t, &t->host_lru, r->heaps[1], r->cap_heap);
    }
    if (r->roots) {
        if (t->n_roots) memcpy(r->roots, t->roots, (size_t)t->n_roots * sizeof *r->roots);
        free(t->roots);
        t->stats.bytes += ((size_t)r->cap_roots - t->cap_roots) * sizeof *r->roots;
        t->roots = r->roots;
        t->cap_roots = r->cap_roots;
    }
    *r = (radix_reserve){0};
}

/* ---- init / free -------------------------------------------------------------------------- */

int radix_init(radix_tree *t, uint32_t page_tokens) {
    *t = (radix_tree){0};
    if (page_tokens == 0) return cd_fail("radix: page_tokens must be at least 1");
    if (page_tokens > (1u << 20)) return cd_fail("radix: page_tokens %u is too large", page_tokens);
    t->page_tokens = page_tokens;
    return 0;
}

void radix_free(radix_tree *t) {
    for (uint32_t i = 0; i < t->cap_slots; i++) {
        for (radix_node *x = t->slots[i].head, *next; x; x = next) {
            next = x->next;
            node_free(x);
        }
    }
    for (uint32_t i = 0; i < t->n_roots; i++) free(t->roots[i]);
    free(t->slots);
    free(t->gpu_lru.v);
    free(t->host_lru.v);
    free(t->roots);
    *t = (radix_tree){0};
}

/* ---- match -------------------------------------------------------------------------------- */

/* Where a match ends: the node holding its last token, the token offset where that node's
 * edge starts, and the number of tokens matched. Read-only. */
typedef struct match_end {
    radix_node *deep;
    uint32_t deep_start;
    uint32_t n_tokens;
} match_end;

/* Among the chain of children starting with ids[0], the one whose whole first page matches
 * (there is at most one: siblings differ in their first page); failing that, the one sharing
 * the longest run of the first page (*len < page_tokens: the match ends there). A tail's
 * partly filled page takes part with the tokens it holds. */
static radix_node *chain_pick(const radix_tree *t, radix_node *c, const int32_t *ids, uint32_t left, uint32_t *len) {
    uint32_t pt = t->page_tokens, want = left < pt ? left : pt;
    radix_node *best = NULL;
    *len = 0;
    for (; c; c = c->next) {
        uint32_t fill = page_fill(t, c, 0), l = lcp(node_tokens(c), ids, want < fill ? want : fill);
        if (l == pt) {
            *len = l;
            return c;
        }
        if (l > *len) {
            best = c;
            *len = l;
        }
    }
    return best;
}

static match_end match_walk(const radix_tree *t, radix_node *root, const int32_t *ids, uint32_t n) {
    uint32_t pt = t->page_tokens, pos = 0;
    match_end e = {0};
    for (radix_node *x = root; x && pos < n;) {
        uint32_t len;
        radix_node *c = chain_pick(t, chain_head(t, x, ids[pos]), ids + pos, n - pos, &len);
        if (!c) break;
        e.deep = c;
        e.deep_start = pos;
        if (len < pt) { /* ends inside c's first page */
            pos += len;
            break;
        }
        uint32_t edge = edge_tokens(t, c), cmp = (n - pos < edge ? n - pos : edge) - pt;
        uint32_t l = pt + lcp(node_tokens(c) + pt, ids + pos + pt, cmp);
        pos += l;
        if (l < edge) break; /* ends inside c's edge (maybe on a page boundary) */
        x = c;
    }
    e.n_tokens = pos;
    return e;
}

/* The path from a root down to deep holds path pages 0 .. end, end = the page where deep's
 * edge ends; splits move node boundaries but never change this sequence. Writes the ids of
 * path pages [lo, hi) (GPU pages or host slots, per node) to out[lo .. hi), bottom-up. */
static void path_ids(const radix_tree *t, const radix_node *deep, uint32_t end, uint32_t *out, uint32_t lo,
                     uint32_t hi) {
    for (const radix_node *x = deep; !is_root(x) && end > lo; x = x->parent) {
        uint32_t start = end - x->n_pages, a = start > lo ? start : lo, b = end < hi ? end : hi;
        if (a < b) memcpy(out + a, node_ids(t, x) + (a - start), (size_t)(b - a) * sizeof *out);
        end = start;
    }
}

/* Slots of the host run at the bottom of deep's path (Rule 1: host nodes are a suffix). */
static uint32_t path_host_slots(const radix_node *deep) {
    uint32_t n = 0;
    for (const radix_node *x = deep; !is_root(x) && x->on_host; x = x->parent) n += x->n_pages;
    return n;
}

uint32_t radix_match_host_left(const radix_tree *t, const radix_match *m) {
    (void)t;
    if (!m || !m->node || m->n_restore == 0) return 0;
    uint32_t left = path_host_slots(m->node);
    return left < m->n_restore ? left : m->n_restore;
}

static radix_node *split_edge(radix_tree *t, radix_node *c, uint32_t k, radix_node *u);
static radix_node *split_node_new(radix_tree *t, const radix_node *c, uint32_t k);

/* What the match's split of its deepest node needs (Rule 5): the upper node (with a run for the
 * smaller part), one more chain slot. All or nothing; a match that cannot have it pins the
 * whole node. */
typedef struct match_split {
    radix_node *upper;
    radix_reserve tables;
} match_split;

static int match_split_alloc(radix_tree *t, const radix_node *c, uint32_t k, match_split *s) {
    *s = (match_split){0};
    s->upper = split_node_new(t, c, k);
    if (s->upper && reserve_tables(t, &s->tables, 1, 1, 0) == 0) return 0;
    node_drop_new(s->upper);
    *s = (match_split){0};
    return -1;
}

int radix_match_prefix(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                       radix_match *m) {
    *m = (radix_match){0};
    if (!t->page_tokens) return cd_fail("radix: match in an uninitialized tree");
    if (n && !ids) return cd_fail("radix: match of %u tokens without ids", n);
    radix_node *root = root_find(t, ns);
    match_end e = match_walk(t, root, ids, n);
    uint32_t pt = t->page_tokens, n_pages = (uint32_t)(((uint64_t)e.n_tokens + pt - 1) / pt);
    uint32_t *pages = NULL, n_gpu = n_pages, n_restore = 0, k = 0;
    bool split = false;
    match_split sm = {0};
    if (e.n_tokens) {
        if (root->lock == UINT32_MAX) return cd_fail("radix: too many pins");
        /* Rule 5: the deepest node is cut after the matched pages (k of its own), so the pin
         * holds the match and no more; without the memory for the cut, the whole node */
        uint32_t end = e.deep_start / pt + e.deep->n_pages; /* the deepest node's end, in pages */
        k = n_pages - e.deep_start / pt;
        split = k < e.deep->n_pages && match_split_alloc(t, e.deep, k, &sm) == 0;
        uint32_t path_end = split ? n_pages : end; /* the pinned path's end */
        n_restore = path_host_slots(e.deep) - (split && e.deep->on_host ? end - n_pages : 0);
        if (n_restore) n_gpu = path_end - n_restore;
        uint32_t len = n_restore ? path_end : n_pages;
        pages = radix_alloc(t, (size_t)len * sizeof *pages);
        if (!pages) {
            if (split) node_drop_new(sm.upper), reserve_drop(&sm.tables);
            return cd_fail("radix: out of memory for a match of %u pages", len);
        }
        path_ids(t, e.deep, end, pages, 0, len);
    }
    /* nothing can fail from here on */
    if (split) {
        reserve_commit(t, &sm.tables);
        e.deep = split_edge(t, e.deep, k, sm.upper);
        t->stats.match_splits++;
    }
    uint64_t now = ++t->clock;
    t->stats.lookups++;
    t->stats.hit_tokens += e.n_tokens;
    if (e.n_tokens == 0) t->stats.misses++;
    else if (e.n_tokens == n) t->stats.full_hits++;
    else t->stats.partial_hits++;
    /* Pin and touch the path; pinning takes a node out of its heap, so no touched node is
     * left in a heap with a stale key. The lower part of a split keeps its lock, last use and
     * heap place: it is not part of the match. */
    for (radix_node *x = e.deep; x; x = x->parent) {
        pin(t, x);
        x->last_use = now;
    }
    *m = (radix_match){.n_tokens = e.n_tokens,
                       .n_pages = n_pages,
                       .pages = pages,
                       .node = e.deep,
                       .n_gpu_pages = n_gpu,
                       .n_restore = n_restore};
    return 0;
}

void radix_release(radix_tree *t, radix_match *m) {
    if (!m) return;
    for (radix_node *x = m->node; x; x = x->parent) unpin(t, x);
    free(m->pages);
    *m = (radix_match){0};
}

/* ---- restore ------------------------------------------------------------------------------ */

/* Rule 6. The match listed path pages [0, end) with end = n_gpu_pages + n_restore, host slots
 * from n_gpu_pages on. Its path is pinned, so no node on it was evicted or demoted since; an
 * insert may have split a node on it (path pages unchanged) and another restore may have
 * turned the upper part of its host run GPU-resident. So the host nodes now on the path hold a
 * suffix [h, end) of the listed slots, h >= n_gpu_pages: that is checked first, read-only, then
 * those nodes take gpu_pages[h - n_gpu_pages ..). */
int radix_restore(radix_tree *t, radix_match *m, const uint32_t *gpu_pages, radix_victim_fn host_free, void *ctx) {
    if (!m || !m->node || m->n_restore == 0) return 0;
    if (!gpu_pages) return cd_fail("radix: restore of %u slots without GPU pages", m->n_restore);
    uint32_t n_gpu = m->n_gpu_pages, end = n_gpu + m->n_restore, at = end, h = end;
    for (const radix_node *x = m->node; !is_root(x); x = x->parent) {
        if (x->n_pages > at) return cd_fail("radix: restore: the match's path is longer than it says");
        at -= x->n_pages;
        if (!x->on_host) continue;
        if (at < n_gpu || h != at + x->n_pages)
            return cd_fail("radix: restore: a host node outside the match's host run (is the match stale?)");
        if (memcmp(node_host(t, x), m->pages + at, (size_t)x->n_pages * sizeof *gpu_pages))
            return cd_fail("radix: restore: the path's host slots are not the match's");
        h = at;
    }
    if (at != 0) return cd_fail("radix: restore: the match's path is shorter than it says");
    /* nothing can fail from here on; every node below is pinned (by m), so in no heap */
    uint32_t taken = end - h;
    at = end;
    for (radix_node *x = m->node; !is_root(x) && x->on_host; x = x->parent) {
        at -= x->n_pages;
        memcpy(node_gpu(t, x), gpu_pages + (at - n_gpu), (size_t)x->n_pages * sizeof *gpu_pages);
        x->on_host = false;
        x->on_gpu = true;
        x->parent->n_gpu_children++; /* the parent is pinned too: no heap to update */
        t->stats.host_slots -= x->n_pages;
        t->stats.pinned_host_slots -= x->n_pages;
        t->stats.pages += x->n_pages;
        t->stats.pinned_pages += x->n_pages;
        t->stats.restores++;
        t->stats.restored_pages += x->n_pages;
    }
    /* the slots are still in the nodes' host[] fields: report them, then rewrite the match */
    if (host_free) {
        uint32_t left = taken;
        for (radix_node *x = m->node; left; x = x->parent) {
            host_free(ctx, node_host(t, x), x->n_pages);
            left -= x->n_pages;
        }
    }
    path_ids(t, m->node, end, m->pages, n_gpu, end);
    m->n_gpu_pages = m->n_pages;
    m->n_restore = 0;
    return (int)taken;
}

/* ---- insert ------------------------------------------------------------------------------- */

/* What an insert will do, found without changing anything. The sequence is np whole pages
 * and, for a tail insert with tail > 0, a last page holding tail tokens. An insert diverges
 * from the tree in at most one place:
 *
 *   1. nothing new: every page is cached (the walk ends at a node or inside an edge, on a page
 *      boundary, and a tail lies in a cached page that starts with its tokens). deep is the
 *      last node walked into (for a tail, the node whose page holds it).
 *   2. a new leaf under `at` (at == deep): no child of `at` starts with the next token (a new
 *      chain), or some do but none has the whole next page (the leaf joins their chain).
 *   3. a split: the next page differs inside the edge into `split`, after its first k pages.
 *      `split` is cut there and the new leaf hangs from the upper part.
 *
 * A whole page never matches a tail's partly filled page (its tokens run out), so a longer
 * sequence through a tail splits the tail before that page (case 3), or joins the chain of a
 * tail-only node (case 2), and the tail then holds nothing the tree does not hold twice:
 * `stale` is the first such tail the walk meets, given back after the insert (radix.h, Tails).
 *
 * Cases 2 and 3 are blocked (Rule 7) when the node the new leaf would hang from (`at`, or the
 * upper part of `split`, which has split's residency) is host-resident. */
typedef struct insert_plan {
    radix_node *deep;   /* deepest node holding pages of the sequence before the change */
    radix_node *at;     /* the new leaf's parent (for a split: the parent of `split`) */
    radix_node *split;  /* the edge to split, or NULL */
    uint32_t split_k;   /* pages kept by the upper part */
    uint32_t leaf_from; /* first page of the new leaf; == the sequence's pages when nothing is new */
    radix_node *stale;  /* a tail whose tokens start one of the sequence's longer pages, or NULL */
} insert_plan;

/* Whether page k of x's edge starts with ids[0..n). */
static bool page_holds(const radix_tree *t, const radix_node *x, uint32_t k, const int32_t *ids, uint32_t n) {
    return page_fill(t, x, k) >= n && same_tokens(node_tokens(x) + (size_t)k * t->page_tokens, ids, n);
}

/* A tail-only node in the chain from c whose tokens start ids[0..fill) and are fewer. */
static radix_node *stale_in_chain(radix_node *c, const int32_t *ids, uint32_t fill) {
    for (; c; c = c->next)
        if (c->n_pages == 1 && c->tail && c->tail < fill && same_tokens(node_tokens(c), ids, c->tail)) return c;
    return NULL;
}

static insert_plan insert_walk(const radix_tree *t, radix_node *root, const int32_t *ids, uint32_t np, uint32_t tail) {
    uint32_t pt = t->page_tokens, end = np * pt, pos = 0;
    insert_plan p = {.deep = root, .at = root, .leaf_from = root ? np + (tail != 0) : 0};
    radix_node *x = root;
    while (x && pos < end) {
        radix_node *head = chain_head(t, x, ids[pos]), *c = head;
        if (!p.stale) p.stale = stale_in_chain(head, ids + pos, pt);
        while (c && !(whole_pages(c) && same_tokens(node_tokens(c), ids + pos, pt))) c = c->next;
        if (!c) { /* case 2 */
            p.at = x;
            p.leaf_from = pos / pt;
            return p;
        }
        uint32_t k = 1;
        while (k < whole_pages(c) && pos + k * pt < end && same_tokens(node_tokens(c) + k * pt, ids + pos + k * pt, pt))
            k++;
        pos += k * pt;
        p.deep = c;
        if (k == c->n_pages) {
            x = c;
            continue;
        }
        if (pos == end && (!tail || page_holds(t, c, k, ids + end, tail))) return p; /* case 1, inside c's edge */
        /* case 3: the next page (whole, or the tail) is not c's page k */
        uint32_t fill = pos < end ? pt : tail;
        if (!p.stale && k == whole_pages(c) && c->tail < fill &&
            same_tokens(node_tokens(c) + k * pt, ids + pos, c->tail))
            p.stale = c; /* c's tail, a tail-only node once the split cuts it off */
        p.at = x;
        p.split = c;
        p.split_k = k;
        p.leaf_from = pos / pt;
        return p;
    }
    if (!x || !tail) return p; /* case 1 (or, without a root, a new namespace: case 2 under a new root) */
    /* every whole page is cached, the walk ended at x's end: is the tail in a child's first page? */
    radix_node *head = chain_head(t, x, ids[end]);
    for (radix_node *c = head; c; c = c->next)
        if (page_holds(t, c, 0, ids + end, tail)) {
            p.deep = c; /* case 1 */
            return p;
        }
    if (!p.stale) p.stale = stale_in_chain(head, ids + end, tail);
    p.at = x; /* case 2: a tail-only leaf */
    p.leaf_from = np;
    return p;
}

/* Rule 7: the new leaf's parent would be host-resident. */
static bool insert_blocked(const insert_plan *p) {
    const radix_node *up = p->split ? p->split : p->at;
    return up && !is_root(up) && up->on_host;
}

/* The allocations an insert needs, all made before the tree changes. */
typedef struct insert_mem {
    radix_root *root;  /* a new namespace */
    radix_node *leaf;  /* the new leaf, run allocated */
    radix_node *upper; /* the split's upper node, run allocated */
    radix_reserve tables;
} insert_mem;

static void insert_mem_drop(insert_mem *mem) {
    free(mem->root);
    node_drop_new(mem->leaf);
    node_drop_new(mem->upper);
    reserve_drop(&mem->tables);
}

static int insert_alloc(radix_tree *t, const insert_plan *p, uint32_t np, int32_t leaf_first, insert_mem *mem) {
    *mem = (insert_mem){0};
    uint32_t new_slots = 1, new_nodes = 1;
    if (!p->at) {
        mem->root = radix_alloc(t, sizeof *mem->root);
        if (!mem->root) return -1;
    }
    mem->leaf = node_new(t, np - p->leaf_from);
    if (!mem->leaf) return -1;
    if (p->split) {
        radix_node *c = p->split;
        mem->upper = split_node_new(t, c, p->split_k);
        if (!mem->upper) return -1;
        new_nodes++;
        /* the lower part gets a slot under the upper; the leaf shares it when it starts with
         * the same token, else it needs one more */
        new_slots = node_tokens(c)[p->split_k * t->page_tokens] == leaf_first ? 1 : 2;
    } else if (p->at && chain_head(t, p->at, leaf_first)) {
        new_slots = 0; /* the leaf joins an existing chain */
    }
    return reserve_tables(t, &mem->tables, new_slots, new_nodes, mem->root ? 1 : 0);
}

static radix_node *root_add(radix_tree *t, radix_root *r, const uint8_t ns[RADIX_NS_BYTES]) {
    *r = (radix_root){.node = {.heap_idx = RADIX_NO_HEAP}};
    memcpy(r->ns, ns, RADIX_NS_BYTES);
    t->roots[t->n_roots++] = &r->node;
    t->stats.bytes += sizeof *r;
    return &r->node;
}

/* Copies pages [from, from + n) of src's edge (tokens and both id fields) to the start of dst's. */
static void node_copy_pages(const radix_tree *t, radix_node *dst, const radix_node *src, uint32_t from, uint32_t n) {
    uint32_t pt = t->page_tokens;
    memcpy(dst->tok, src->tok + (size_t)from * pt, (size_t)n * pt * sizeof *dst->tok);
    memcpy(dst->gpu, src->gpu + from, (size_t)n * sizeof *dst->gpu);
    memcpy(dst->host, src->host + from, (size_t)n * sizeof *dst->host);
}

/* The upper node of a split of c after k pages, with a run for the smaller part. */
static radix_node *split_node_new(radix_tree *t, const radix_node *c, uint32_t k) {
    uint32_t rest = c->n_pages - k;
    return node_new(t, k <= rest ? k : rest);
}

/* Splits the edge into c after k pages (0 < k < c->n_pages), u from split_node_new:
 *
 *     before:  (p) ── [P0 .. Pk-1 Pk .. Pn-1] = c ── c's children
 *     after:   (p) ── [P0 .. Pk-1] = u ── [Pk .. Pn-1] = c ── c's children
 *
 *   1. u takes c's place in p's chain (same parent, same first token, so the same slot) and
 *      in p's child list.
 *   2. u inherits c's lock: every pinned path through c now also runs through u, and
 *      releasing a handle on c (or below) walks through u. It inherits c's last use and
 *      residency too (both id fields are split alike), so p's GPU-child count holds.
 *   3. c keeps its identity: the handles pointing at it, its children (keyed by (c, token),
 *      untouched), its lock, its place in a heap, its tail. u has a child of its own tier, so
 *      it is in no heap (Rule 2).
 *   4. The smaller part is copied into u's fresh run; the larger stays in c's old run: when
 *      the upper part is the smaller, c's pointers move past it; else u takes c's old run (its
 *      upper pages lead it) and c gets the fresh one. c is filed under (u, first token of the
 *      rest). Pages only move between c and u, so no page or slot count changes. */
static radix_node *split_edge(radix_tree *t, radix_node *c, uint32_t k, radix_node *u) {
    uint32_t rest = c->n_pages - k, pt = t->page_tokens;
    int32_t *fresh = u->mem; /* u's fresh run, of the smaller part's pages */
    uint32_t fresh_pages = u->mem_pages;
    if (k <= rest) { /* 4, first u's edge: c is untouched until it is out of p's chain */
        node_copy_pages(t, u, c, 0, k);
    } else {
        u->mem = c->mem, u->tok = c->tok, u->gpu = c->gpu, u->host = c->host, u->mem_pages = c->mem_pages;
    }
    u->n_pages = k;
    u->parent = c->parent;
    u->lock = c->lock;
    u->last_use = c->last_use;
    u->on_gpu = c->on_gpu;
    u->on_host = c->on_host;
    u->n_children = 1;
    u->n_gpu_children = c->on_gpu;
    chain_replace(t, c, u); /* 1 */
    kid_replace(c->parent, c, u);
    u->kids = c;
    t->stats.bytes += sizeof *u + run_bytes(t, fresh_pages);
    if (k <= rest) { /* 4, then c's edge: the rest, in place */
        c->tok += (size_t)k * pt;
        c->gpu += k;
        c->host += k;
    } else { /* or copied into the fresh run */
        node_set_run(t, c, fresh, fresh_pages);
        node_copy_pages(t, c, u, k, rest);
    }
    c->n_pages = rest;
    c->parent = u;
    chain_add(t, u, c);
    t->stats.nodes++;
    return u;
}

static void drop_node(radix_tree *t, radix_node *v, radix_victim_fn victim, radix_victim_fn host_free, void *ctx);

/* Gives back a tail the insert made redundant, when nothing holds it: unpinned, on the GPU
 * (a host-resident one leaves by host LRU), and a leaf (tails always are). */
static void drop_stale(radix_tree *t, radix_node *s, radix_victim_fn dropped, void *ctx) {
    if (!s || !dropped || s->lock || !s->on_gpu || s->n_children) return;
    drop_node(t, s, dropped, NULL, ctx);
    t->stats.dropped_tails++;
}

int radix_insert_tail(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                      const uint32_t *pages, uint32_t *first_new, radix_victim_fn dropped, void *ctx) {
    if (!t->page_tokens) return cd_fail("radix: insert into an uninitialized tree");
    uint32_t pt = t->page_tokens, np = n / pt, tail = n % pt, n_all = np + (tail != 0);
    if (n_all && (!ids || !pages)) return cd_fail("radix: insert of %u tokens without ids or pages", n);
    radix_node *root = root_find(t, ns);
    insert_plan p = insert_walk(t, root, ids, np, tail);
    bool blocked = p.leaf_from < n_all && insert_blocked(&p);
    if (p.leaf_from == n_all || blocked) { /* case 1, or Rule 7: nothing new, just a touch */
        if (p.deep) touch_path(t, p.deep, t->clock + 1);
        t->clock++;
        t->stats.blocked_inserts += blocked;
        if (first_new) *first_new = n_all;
        if (!blocked) drop_stale(t, p.stale, dropped, ctx);
        return 0;
    }
    insert_mem mem;
    if (insert_alloc(t, &p, n_all, ids[p.leaf_from * pt], &mem)) {
        insert_mem_drop(&mem);
        return cd_fail("radix: out of memory inserting %u pages", n_all - p.leaf_from);
    }
    /* nothing can fail from here on */
    uint64_t now = ++t->clock;
    reserve_commit(t, &mem.tables);
    radix_node *at = p.at ? p.at : root_add(t, mem.root, ns);
    if (p.split) at = split_edge(t, p.split, p.split_k, mem.upper);
    /* at is a root or GPU-resident (not blocked) */
    radix_node *leaf = mem.leaf;
    uint32_t leaf_tokens = n - p.leaf_from * pt;
    memcpy(node_tokens(leaf), ids + (size_t)p.leaf_from * pt, (size_t)leaf_tokens * sizeof *ids);
    for (uint32_t i = leaf_tokens; i < leaf->n_pages * pt; i++) node_tokens(leaf)[i] = -1; /* a tail's unused slots */
    memcpy(node_gpu(t, leaf), pages + p.leaf_from, (size_t)leaf->n_pages * sizeof *pages);
    leaf->tail = tail;
    leaf->on_gpu = true;
    leaf->parent = at;
    chain_add(t, at, leaf);
    kid_add(at, leaf);
    at->n_children++;
    at->n_gpu_children++;
    if (!is_root(at)) heap_sync(t, at); /* no longer GPU-evictable */
    touch_path(t, at, now);
    leaf->last_use = now;
    heap_sync(t, leaf); /* a new leaf is unpinned: GPU-evictable */
    t->stats.nodes++;
    t->stats.pages += leaf->n_pages;
    t->stats.inserted_tokens += leaf_tokens;
    t->stats.bytes += sizeof *leaf + run_bytes(t, leaf->mem_pages);
    if (first_new) *first_new = p.leaf_from;
    drop_stale(t, p.stale, dropped, ctx);
    return 0;
}

int radix_insert(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n, const uint32_t *pages,
                 uint32_t *first_new) {
    uint32_t pt = t->page_tokens ? t->page_tokens : 1;
    return radix_insert_tail(t, ns, ids, n - n % pt, pages, first_new, NULL, NULL);
}

/* ---- eviction ----------------------------------------------------------------------------- */

/* Rule 3, saved: v (the GPU heap's top) becomes host-resident with the slots in its host[]
 * field. Its gpu[] field keeps the old page ids (no longer the tree's). */
static void demote_node(radix_tree *t, radix_node *v) {
    heap_leave(t, v);
    v->on_gpu = false;
    v->on_host = true;
    radix_node *p = v->parent;
    p->n_gpu_children--;
    if (!is_root(p)) heap_sync(t, p); /* maybe GPU-evictable now, host children or not */
    heap_sync(t, v);                  /* host-evictable when it has no children */
    t->stats.pages -= v->n_pages;
    t->stats.host_slots += v->n_pages;
    t->stats.demotions++;
    t->stats.demoted_pages += v->n_pages;
}

/* Rule 3, dropped: v (a GPU-evictable node) and its host subtree leave the tree; once the tree
 * is consistent the subtree's slots go to host_free and v's pages to victim (either may be
 * NULL), post-order, and everything is freed. */
static void drop_node(radix_tree *t, radix_node *v, radix_victim_fn victim, radix_victim_fn host_free, void *ctx) {
    heap_leave(t, v);
    node_detach(t, v); /* may free v's root: v->parent is not used below */
    node_account_out(t, v);
    for (radix_node *x = post_first(v); x != v; x = post_next(v, x)) {
        heap_leave(t, x);
        chain_remove(t, x); /* keyed by x's parent, still allocated */
        node_account_out(t, x);
        t->stats.host_evictions++;
        t->stats.host_evicted_slots += x->n_pages;
    }
    for (radix_node *x = post_first(v), *next; x; x = next) {
        next = post_next(v, x);
        if (x == v && victim) victim(ctx, node_gpu(t, x), x->n_pages);
        if (x != v && host_free) host_free(ctx, node_host(t, x), x->n_pages);
        node_free(x);
    }
}

bool radix_gpu_victim(const radix_tree *t, radix_victim *v) {
    if (!t->gpu_lru.n) {
        *v = (radix_victim){0};
        return false;
    }
    const radix_node *x = t->gpu_lru.v[0];
    *v = (radix_victim){.node = x, .pages = node_gpu(t, x), .n_pages = x->n_pages};
    return true;
}

/* The node v names, if it is still the GPU victim. */
static radix_node *victim_node(radix_tree *t, const radix_victim *v, const char *what) {
    if (!v->node || !t->gpu_lru.n || t->gpu_lru.v[0] != v->node) {
        cd_fail("radix: %s of a node that is not the GPU victim now", what);
        return NULL;
    }
    radix_node *x = t->gpu_lru.v[0];
    t->stats.evictions++;
    t->stats.evicted_pages += x->n_pages;
    return x;
}

int radix_demote(radix_tree *t, const radix_victim *v, const uint32_t *host_slots) {
    radix_node *x = victim_node(t, v, "demotion");
    if (!x) return -1;
    memcpy(node_host(t, x), host_slots, (size_t)x->n_pages * sizeof *host_slots);
    demote_node(t, x);
    return 0;
}

int radix_drop(radix_tree *t, const radix_victim *v, radix_victim_fn host_free, void *ctx) {
    radix_node *x = victim_node(t, v, "drop");
    if (!x) return -1;
    drop_node(t, x, NULL, host_free, ctx);
    return 0;
}

uint64_t radix_evict_host(radix_tree *t, uint64_t want_slots, radix_victim_fn host_free, void *ctx) {
    uint64_t got = 0;
    while (got < want_slots && t->host_lru.n) {
        radix_node *v = t->host_lru.v[0];
        heap_leave(t, v);
        node_detach(t, v); /* a host parent left childless becomes host-evictable */
        node_account_out(t, v);
        t->stats.host_evictions++;
        t->stats.host_evicted_slots += v->n_pages;
        if (host_free) host_free(ctx, node_host(t, v), v->n_pages);
        got += v->n_pages;
        node_free(v);
    }
    return got;
}

uint64_t radix_evictable_pages(const radix_tree *t) { return t->stats.pages - t->stats.pinned_pages; }

uint64_t radix_evictable_host_slots(const radix_tree *t) { return t->stats.host_slots - t->stats.pinned_host_slots; }

/* ---- invariant checker -------------------------------------------------------------------- */

/* Scratch for radix_check: every node (roots first) with an index, a pointer -> index map and
 * per-node counters, so each invariant is checked in one pass. */
typedef struct check_ctx {
    const radix_tree *t;
    radix_node **all; /* roots, then nodes */
    uint32_t n_all;
    radix_node **map; /* open addressing, pointer keys */
    uint32_t *map_idx;
    uint32_t map_cap;
    uint32_t *children;     /* counted children per node */
    uint32_t *gpu_children; /* counted GPU-resident children per node */
    uint64_t *lock_sum;     /* sum of the children's locks */
    uint8_t *state;         /* path-to-root walk: 0 unseen, 1 on the walk, 2 reaches a root */
    uint8_t *listed;        /* found in its parent's child list */
    uint32_t *walk;
    uint64_t *id_set[2]; /* GPU pages, host slots: id + 1, 0 empty */
    uint64_t id_cap[2];
} check_ctx;

static void check_free(check_ctx *c) {
    free(c->all);
    free(c->map);
    free(c->map_idx);
    free(c->children);
    free(c->gpu_children);
    free(c->lock_sum);
    free(c->state);
    free(c->listed);
    free(c->walk);
    free(c->id_set[0]);
    free(c->id_set[1]);
}

static uint32_t check_slot(const check_ctx *c, const radix_node *x) {
    uint32_t mask = c->map_cap - 1, i = (uint32_t)mix64((uint64_t)(uintptr_t)x) & mask;
    while (c->map[i] && c->map[i] != x) i = (i + 1) & mask;
    return i;
}

/* Index of x among the tree's nodes, or UINT32_MAX when x is not in the tree. */
static uint32_t check_find(const check_ctx *c, const radix_node *x) {
    if (!x) return UINT32_MAX;
    uint32_t i = check_slot(c, x);
    return c->map[i] ? c->map_idx[i] : UINT32_MAX;
}

static int check_add(check_ctx *c, radix_node *x) {
    uint32_t i = check_slot(c, x);
    if (c->map[i]) return cd_fail("radix check: node %p is in the tree twice", (void *)x);
    c->map[i] = x;
    c->map_idx[i] = c->n_all;
    c->all[c->n_all++] = x;
    return 0;
}

/* tier 0: a GPU page, 1: a host slot; each at most once in the tree */
static int check_id(check_ctx *c, int tier, uint32_t id) {
    uint64_t key = (uint64_t)id + 1, mask = c->id_cap[tier] - 1, i = mix64(key) & mask;
    uint64_t *set = c->id_set[tier];
    while (set[i] && set[i] != key) i = (i + 1) & mask;
    if (set[i]) return cd_fail("radix check: %s %u is in the tree twice", tier ? "host slot" : "page", id);
    set[i] = key;
    return 0;
}

static int check_alloc(check_ctx *c) {
    const radix_tree *t = c->t;
    uint64_t n = (uint64_t)t->n_roots + t->stats.nodes;
    if (n >= UINT32_MAX / 4) return cd_fail("radix check: %llu nodes", (unsigned long long)n);
    c->map_cap = 16;
    while (c->map_cap < 2 * n) c->map_cap *= 2;
    uint64_t ids[2] = {t->stats.pages, t->stats.host_slots};
    for (int k = 0; k < 2; k++) {
        c->id_cap[k] = 16;
        while (c->id_cap[k] < 2 * ids[k]) c->id_cap[k] *= 2;
        c->id_set[k] = calloc(c->id_cap[k], sizeof *c->id_set[k]);
    }
    c->all = malloc((n + 1) * sizeof *c->all);
    c->map = calloc(c->map_cap, sizeof *c->map);
    c->map_idx = malloc(c->map_cap * sizeof *c->map_idx);
    c->children = calloc(n + 1, sizeof *c->children);
    c->gpu_children = calloc(n + 1, sizeof *c->gpu_children);
    c->lock_sum = calloc(n + 1, sizeof *c->lock_sum);
    c->state = calloc(n + 1, 1);
    c->listed = calloc(n + 1, 1);
    c->walk = malloc((n + 1) * sizeof *c->walk);
    if (!c->all || !c->map || !c->map_idx || !c->children || !c->gpu_children || !c->lock_sum || !c->state ||
        !c->listed || !c->walk || !c->id_set[0] || !c->id_set[1])
        return cd_fail("radix check: out of memory");
    return 0;
}

static int check_tables(const radix_tree *t) {
    if (t->page_tokens == 0) return cd_fail("radix check: page_tokens is 0");
    if (t->n_roots > t->cap_roots) return cd_fail("radix check: %u roots, capacity %u", t->n_roots, t->cap_roots);
    const radix_heap *hs[2] = {&t->gpu_lru, &t->host_lru};
    for (int k = 0; k < 2; k++) {
        if (hs[k]->n > hs[k]->cap)
            return cd_fail("radix check: %s heap of %u, capacity %u", k ? "host" : "GPU", hs[k]->n, hs[k]->cap);
        if (hs[k]->cap < t->stats.nodes)
            return cd_fail("radix check: %s heap capacity %u below %llu nodes (release could not push)",
                           k ? "host" : "GPU", hs[k]->cap, (unsigned long long)t->stats.nodes);
    }
    if (t->cap_slots & (t->cap_slots - 1))
        return cd_fail("radix check: slot capacity %u is not a power of two", t->cap_slots);
    if (2ull * t->n_slots > t->cap_slots && t->n_slots)
        return cd_fail("radix check: %u slots used of %u (load above 1/2)", t->n_slots, t->cap_slots);
    if (t->stats.pinned_pages > t->stats.pages)
        return cd_fail("radix check: %llu pinned pages of %llu", (unsigned long long)t->stats.pinned_pages,
                       (unsigned long long)t->stats.pages);
    if (t->stats.pinned_host_slots > t->stats.host_slots)
        return cd_fail("radix check: %llu pinned host slots of %llu", (unsigned long long)t->stats.pinned_host_slots,
                       (unsigned long long)t->stats.host_slots);
    return 0;
}

static int check_roots(check_ctx *c) {
    const radix_tree *t = c->t;
    for (uint32_t i = 0; i < t->n_roots; i++) {
        radix_node *r = t->roots[i];
        if (!r || r->parent || r->mem || r->n_pages || r->next || r->prev_sib || r->next_sib)
            return cd_fail("radix check: root %u is not an empty parentless node", i);
        if (r->on_gpu || r->on_host) return cd_fail("radix check: root %u is resident on a tier", i);
        if (r->heap_idx != RADIX_NO_HEAP) return cd_fail("radix check: root %u is in a heap", i);
        if (r->n_children == 0) return cd_fail("radix check: root %u has no children", i);
        for (uint32_t j = 0; j < i; j++)
            if (memcmp(root_ns(t->roots[j]), root_ns(r), RADIX_NS_BYTES) == 0)
                return cd_fail("radix check: roots %u and %u have the same namespace", j, i);
        if (check_add(c, r)) return -1;
    }
    return 0;
}

/* Every slot: a live key found from its home without gaps, its chain's members filed under it,
 * siblings' first pages pairwise different. Collects the nodes. */
static int check_slots(check_ctx *c) {
    const radix_tree *t = c->t;
    uint32_t pt = t->page_tokens, used = 0, mask = t->cap_slots - 1;
    for (uint32_t i = 0; i < t->cap_slots; i++) {
        const struct radix_slot *s = &t->slots[i];
        if (!s->head) {
            if (s->parent) return cd_fail("radix check: empty slot %u has a parent", i);
            continue;
        }
        used++;
        if (slot_index(t->slots, t->cap_slots, s->parent, s->token) != i)
            return cd_fail("radix check: slot %u is not where a lookup of its key lands (home %u)", i,
                           (uint32_t)slot_hash(s->parent, s->token) & mask);
        for (radix_node *x = s->head; x; x = x->next) {
            if (c->n_all >= t->n_roots + t->stats.nodes)
                return cd_fail("radix check: more nodes in the slot table than the %llu counted",
                               (unsigned long long)t->stats.nodes);
            if (x->parent != s->parent) return cd_fail("radix check: a node in slot %u has another parent", i);
            if (x->n_pages == 0 || !x->mem) return cd_fail("radix check: a non-root node has an empty edge");
            if (x->tok[0] != s->token)
                return cd_fail("radix check: a node starting with %d is in the chain of %d", x->tok[0], s->token);
            if (x->tail >= pt) return cd_fail("radix check: a tail of %u tokens in pages of %u", x->tail, pt);
            if (x->tail && x->kids) return cd_fail("radix check: a node with a partly filled last page has children");
            for (radix_node *y = s->head; y != x; y = y->next)
                if (page_fill(t, x, 0) == page_fill(t, y, 0) &&
                    same_tokens(node_tokens(x), node_tokens(y), page_fill(t, x, 0)))
                    return cd_fail("radix check: two siblings share their first page (token %d)", s->token);
            if (check_add(c, x)) return -1;
        }
    }
    if (used != t->n_slots) return cd_fail("radix check: %u slots used, n_slots says %u", used, t->n_slots);
    if (c->n_all != t->n_roots + t->stats.nodes)
        return cd_fail("radix check: %u nodes in the slot table, stats say %llu", c->n_all - t->n_roots,
                       (unsigned long long)t->stats.nodes);
    return 0;
}

/* Parents, child counts and lists, residency, locks, times, ids, and that every node leads
 * up to a root. */
static int check_nodes(check_ctx *c) {
    const radix_tree *t = c->t;
    uint64_t pages = 0, slots = 0, pinned = 0, pinned_slots = 0, bytes = 0;
    for (uint32_t i = t->n_roots; i < c->n_all; i++) {
        radix_node *x = c->all[i];
        uint32_t p = check_find(c, x->parent);
        if (p == UINT32_MAX) return cd_fail("radix check: a node's parent is not in the tree");
        if (x->on_gpu == x->on_host)
            return cd_fail("radix check: a node is resident on %s tier", x->on_gpu ? "more than one" : "no");
        if (x->on_gpu && !is_root(x->parent) && !x->parent->on_gpu)
            return cd_fail(
                "radix check: a GPU-resident node below a host-resident one (GPU residency is prefix-closed)");
        c->children[p]++;
        c->gpu_children[p] += x->on_gpu;
        c->lock_sum[p] += x->lock;
        if (x->last_use > x->parent->last_use)
            return cd_fail("radix check: a node was used (%llu) after its parent (%llu)",
                           (unsigned long long)x->last_use, (unsigned long long)x->parent->last_use);
        const uint32_t *ids = node_ids(t, x);
        for (uint32_t k = 0; k < x->n_pages; k++)
            if (check_id(c, x->on_host, ids[k])) return -1;
        if (x->on_gpu) {
            pages += x->n_pages;
            pinned += x->lock ? x->n_pages : 0;
        } else {
            slots += x->n_pages;
            pinned_slots += x->lock ? x->n_pages : 0;
        }
        if (x->mem_pages < x->n_pages || x->tok < x->mem ||
            x->host + x->n_pages > (uint32_t *)(x->mem + run_bytes(t, x->mem_pages) / sizeof *x->mem))
            return cd_fail("radix check: a node's edge does not lie in its run");
        bytes += sizeof *x + run_bytes(t, x->mem_pages);
    }
    for (uint32_t i = 0; i < c->n_all; i++) {
        radix_node *x = c->all[i];
        if (c->children[i] != x->n_children)
            return cd_fail("radix check: a node has %u children, n_children says %u", c->children[i], x->n_children);
        if (c->gpu_children[i] != x->n_gpu_children)
            return cd_fail("radix check: a node has %u GPU-resident children, n_gpu_children says %u",
                           c->gpu_children[i], x->n_gpu_children);
        if (x->lock < c->lock_sum[i])
            return cd_fail("radix check: lock %u below its children's sum %llu", x->lock,
                           (unsigned long long)c->lock_sum[i]);
        if (x->last_use > t->clock) return cd_fail("radix check: a node used after the clock");
        uint32_t listed = 0;
        for (radix_node *k = x->kids, *prev = NULL; k; prev = k, k = k->next_sib) {
            uint32_t j = check_find(c, k);
            if (j == UINT32_MAX || j < t->n_roots || k->parent != x || c->listed[j] || k->prev_sib != prev)
                return cd_fail("radix check: a node's child list holds a node that is not its child once");
            c->listed[j] = 1;
            listed++;
        }
        if (listed != x->n_children)
            return cd_fail("radix check: a node's child list holds %u children, n_children says %u", listed,
                           x->n_children);
    }
    if (pages != t->stats.pages)
        return cd_fail("radix check: %llu GPU pages in nodes, stats say %llu pages", (unsigned long long)pages,
                       (unsigned long long)t->stats.pages);
    if (slots != t->stats.host_slots)
        return cd_fail("radix check: %llu host slots in nodes, stats say %llu host_slots", (unsigned long long)slots,
                       (unsigned long long)t->stats.host_slots);
    if (pinned != t->stats.pinned_pages)
        return cd_fail("radix check: %llu pages in pinned nodes, stats say %llu pinned", (unsigned long long)pinned,
                       (unsigned long long)t->stats.pinned_pages);
    if (pinned_slots != t->stats.pinned_host_slots)
        return cd_fail("radix check: %llu host slots in pinned nodes, stats say %llu pinned_host_slots",
                       (unsigned long long)pinned_slots, (unsigned long long)t->stats.pinned_host_slots);
    bytes += (uint64_t)t->n_roots * sizeof(radix_root) + (uint64_t)t->cap_roots * sizeof *t->roots +
        (uint64_t)t->cap_slots * sizeof *t->slots + ((uint64_t)t->gpu_lru.cap + t->host_lru.cap) * sizeof(radix_node *);
    if (bytes != t->stats.bytes)
        return cd_fail("radix check: %llu bytes owned, stats say %llu bytes", (unsigned long long)bytes,
                       (unsigned long long)t->stats.bytes);
    /* no cycles: each walk up ends at a root or at a node already known to reach one */
    for (uint32_t i = 0; i < t->n_roots; i++) c->state[i] = 2;
    for (uint32_t i = t->n_roots; i < c->n_all; i++) {
        uint32_t n_walk = 0, j = i;
        while (c->state[j] == 0) {
            c->state[j] = 1;
            c->walk[n_walk++] = j;
            j = check_find(c, c->all[j]->parent);
        }
        if (c->state[j] == 1) return cd_fail("radix check: a cycle of parent pointers");
        while (n_walk) c->state[c->walk[--n_walk]] = 2;
    }
    return 0;
}

/* Rule 2 by hand: 0 in no heap, 1 GPU-evictable, 2 host-evictable. */
static int check_tier(const radix_node *x) {
    if (is_root(x) || x->lock) return 0;
    if (x->on_gpu) return x->n_gpu_children == 0 ? 1 : 0;
    return x->n_children == 0 ? 2 : 0;
}

/* Each heap holds exactly the nodes Rule 2 puts there, in heap order, with back indices. */
static int check_heap(check_ctx *c) {
    const radix_tree *t = c->t;
    const radix_heap *hs[3] = {NULL, &t->gpu_lru, &t->host_lru};
    const char *names[3] = {"", "GPU", "host"};
    for (int k = 1; k <= 2; k++) {
        const radix_heap *h = hs[k];
        for (uint32_t i = 0; i < h->n; i++) {
            radix_node *x = h->v[i];
            uint32_t j = check_find(c, x);
            if (j == UINT32_MAX || j < t->n_roots)
                return cd_fail("radix check: %s heap entry %u is not a node", names[k], i);
            if (x->heap_idx != i)
                return cd_fail("radix check: %s heap entry %u has back index %u", names[k], i, x->heap_idx);
            if (check_tier(x) != k)
                return cd_fail(
                    "radix check: %s heap entry %u is not %s-evictable (lock %u, %u children, %u on the GPU, %s)",
                    names[k], i, names[k], x->lock, x->n_children, x->n_gpu_children,
                    x->on_gpu ? "GPU-resident" : "host-resident");
            if (i && h->v[(i - 1) / 2]->last_use > x->last_use)
                return cd_fail("radix check: %s heap order broken at %u (%llu above %llu)", names[k], i,
                               (unsigned long long)h->v[(i - 1) / 2]->last_use, (unsigned long long)x->last_use);
        }
    }
    uint32_t count[3] = {0};
    for (uint32_t i = t->n_roots; i < c->n_all; i++) {
        radix_node *x = c->all[i];
        int k = check_tier(x);
        count[k]++;
        if (k == 0 && x->heap_idx != RADIX_NO_HEAP)
            return cd_fail("radix check: a node that is not evictable is in a heap");
        if (k && (x->heap_idx >= hs[k]->n || hs[k]->v[x->heap_idx] != x))
            return cd_fail("radix check: a %s-evictable node is not in the %s heap", names[k], names[k]);
    }
    for (int k = 1; k <= 2; k++)
        if (count[k] != hs[k]->n)
            return cd_fail("radix check: %u %s-evictable nodes, the %s heap holds %u", count[k], names[k], names[k],
                           hs[k]->n);
    return 0;
}

int radix_check(const radix_tree *t) {
    if (check_tables(t)) return -1;
    check_ctx c = {.t = t};
    int rc = check_alloc(&c);
    if (!rc) rc = check_roots(&c);
    if (!rc) rc = check_slots(&c);
    if (!rc) rc = check_nodes(&c);
    if (!rc) rc = check_heap(&c);
    check_free(&c);
    return rc;
}

/* ---- dump --------------------------------------------------------------------------------- */

static void dump_node(const radix_tree *t, FILE *f, const radix_node *x, uint32_t depth) {
    fprintf(f, "%*s", (int)(2 * depth), "");
    if (is_root(x)) {
        fprintf(f, "ns ");
        for (int i = 0; i < 8; i++) fprintf(f, "%02x", root_ns(x)[i]);
        fprintf(f, "..");
    } else {
        uint32_t n_tok = edge_tokens(t, x);
        const uint32_t *ids = node_ids(t, x);
        fprintf(f, "[");
        for (uint32_t i = 0; i < n_tok && i < 8; i++) fprintf(f, i ? " %d" : "%d", x->tok[i]);
        fprintf(f, "%s | %s", n_tok > 8 ? " ..." : "", x->on_gpu ? "G" : "H");
        for (uint32_t i = 0; i < x->n_pages && i < 4; i++) fprintf(f, " %u", ids[i]);
        fprintf(f, "%s] %u pages", x->n_pages > 4 ? " ..." : "", x->n_pages);
    }
    fprintf(f, " lock %u use %llu", x->lock, (unsigned long long)x->last_use);
    if (x->heap_idx != RADIX_NO_HEAP) fprintf(f, " %s heap %u", x->on_gpu ? "gpu" : "host", x->heap_idx);
    fprintf(f, "\n");
}

/* Depth first from each root along the child lists; allocates nothing. */
/* The node after x in a pre-order walk of root's subtree (parents first, then the kids, then
 * the next sibling of the nearest ancestor that has one), NULL at the end; *depth follows. */
static const radix_node *next_preorder(const radix_node *root, const radix_node *x, uint32_t *depth) {
    if (x->kids) {
        ++*depth;
        return x->kids;
    }
    while (x != root && !x->next_sib) {
        x = x->parent;
        --*depth;
    }
    return x == root ? NULL : x->next_sib;
}

void radix_dump(const radix_tree *t, void *file) {
    FILE *f = file;
    fprintf(f,
            "radix: page_tokens %u, %u namespaces, %llu nodes, %llu GPU pages (%llu pinned), %llu host slots (%llu "
            "pinned), %llu bytes, clock %llu\n",
            t->page_tokens, t->n_roots, (unsigned long long)t->stats.nodes, (unsigned long long)t->stats.pages,
            (unsigned long long)t->stats.pinned_pages, (unsigned long long)t->stats.host_slots,
            (unsigned long long)t->stats.pinned_host_slots, (unsigned long long)t->stats.bytes,
            (unsigned long long)t->clock);
    for (uint32_t r = 0; r < t->n_roots; r++) {
        const radix_node *root = t->roots[r];
        uint32_t depth = 0;
        for (const radix_node *x = root; x; x = next_preorder(root, x, &depth)) dump_node(t, f, x, depth);
    }
}

void radix_walk(const radix_tree *t, void (*fn)(void *ctx, const radix_walk_node *w), void *ctx) {
    for (uint32_t r = 0; r < t->n_roots; r++) {
        const radix_node *root = t->roots[r], *x = root;
        const uint8_t *ns = ((const radix_root *)root)->ns;
        uint32_t depth = 0;
        for (x = next_preorder(root, x, &depth); x; x = next_preorder(root, x, &depth))
            fn(ctx,
               &(radix_walk_node){.ns = ns,
                                  .depth = depth,
                                  .tokens = x->tok,
                                  .n_pages = x->n_pages,
                                  .tail = x->tail,
                                  .on_gpu = x->on_gpu});
    }
}
