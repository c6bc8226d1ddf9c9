#include "radix/radix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* Layout. A node is the edge into it plus bookkeeping. The edge's tokens and page ids live
 * in one allocation (the run), tokens first:
 *
 *     run: [ t0 t1 ... t(n_pages*pt - 1) | p0 p1 ... p(n_pages - 1) ]
 *
 * A node has no child array. Its children are found through the tree-wide slot table keyed by
 * (parent, first token), whose value is the head of the chain of siblings sharing that first
 * token (linked by `next`):
 *
 *     slots: (A,'e') -> [efgh]            (A,'w') -> [wxAB] -> [wxyz] -> NULL
 *
 * Roots are nodes with an empty edge, parent NULL, and a namespace key behind them
 * (radix_root). A root exists while it has children: evicting its last child frees it.
 *
 * Time only moves forward and every operation touches whole root paths, so a node's last use
 * is never later than its parent's; the heap of evictable leaves is therefore also the LRU
 * order of everything that could become evictable. */

#define RADIX_NO_HEAP UINT32_MAX
#define RADIX_MIN_SLOTS 16u
#define RADIX_MIN_HEAP 16u
#define RADIX_MIN_ROOTS 4u

struct radix_node {
    radix_node *parent;  /* NULL for a root */
    radix_node *next;    /* next sibling with the same first token */
    int32_t *run;        /* n_pages * page_tokens tokens, then n_pages page ids; NULL for a root */
    uint64_t last_use;   /* clock value of the last match/insert that walked through it */
    uint32_t n_pages;    /* edge length in pages; >= 1 except for roots */
    uint32_t n_children;
    uint32_t lock;       /* pins on paths through this node */
    uint32_t heap_idx;   /* place in t->heap, RADIX_NO_HEAP when not evictable */
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

static inline int32_t *node_tokens(const radix_node *x) { return x->run; }

static inline uint32_t *node_pages(const radix_tree *t, const radix_node *x) {
    return (uint32_t *)(x->run + (size_t)x->n_pages * t->page_tokens);
}

static inline size_t run_bytes(const radix_tree *t, uint32_t n_pages) {
    return (size_t)n_pages * (t->page_tokens + 1) * sizeof(int32_t);
}

static inline bool is_root(const radix_node *x) { return x->parent == NULL; }

static uint32_t lcp(const int32_t *a, const int32_t *b, uint32_t n) {
    uint32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static bool same_tokens(const int32_t *a, const int32_t *b, uint32_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Every allocation goes through here, so fail_every can make any one of them fail. */
static void *radix_alloc(radix_tree *t, size_t size) {
    t->n_allocs++;
    if (t->fail_every && t->n_allocs % t->fail_every == 0) return NULL;
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
static uint32_t slot_index(const struct radix_slot *slots, uint32_t cap, const radix_node *parent,
                           int32_t token) {
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
    struct radix_slot *s = &t->slots[slot_index(t->slots, t->cap_slots, parent, x->run[0])];
    if (!s->head) {
        *s = (struct radix_slot){.parent = parent, .token = x->run[0]};
        t->n_slots++;
    }
    x->next = s->head;
    s->head = x;
}

/* Puts `with` where x is in its parent's chain (both have the same parent and first token). */
static void chain_replace(radix_tree *t, radix_node *x, radix_node *with) {
    struct radix_slot *s = &t->slots[slot_index(t->slots, t->cap_slots, x->parent, x->run[0])];
    radix_node **link = &s->head;
    while (*link != x) link = &(*link)->next;
    with->next = x->next;
    *link = with;
    x->next = NULL;
}

static void chain_remove(radix_tree *t, radix_node *x) {
    uint32_t i = slot_index(t->slots, t->cap_slots, x->parent, x->run[0]);
    if (t->slots[i].head == x && !x->next) {
        slot_delete(t, i); /* x was the whole chain */
    } else {
        radix_node **link = &t->slots[i].head;
        while (*link != x) link = &(*link)->next;
        *link = x->next;
    }
    x->next = NULL;
}

/* ---- the heap of evictable nodes (unpinned non-root leaves), min last_use on top ---------- */

static void heap_set(radix_tree *t, uint32_t i, radix_node *x) {
    t->heap[i] = x;
    x->heap_idx = i;
}

static void heap_up(radix_tree *t, uint32_t i) {
    radix_node *x = t->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (t->heap[p]->last_use <= x->last_use) break;
        heap_set(t, i, t->heap[p]);
        i = p;
    }
    heap_set(t, i, x);
}

static void heap_down(radix_tree *t, uint32_t i) {
    radix_node *x = t->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= t->n_heap) break;
        if (c + 1 < t->n_heap && t->heap[c + 1]->last_use < t->heap[c]->last_use) c++;
        if (x->last_use <= t->heap[c]->last_use) break;
        heap_set(t, i, t->heap[c]);
        i = c;
    }
    heap_set(t, i, x);
}

/* Never grows the array: cap_heap >= nodes is kept by insert, so release and evict (which
 * cannot fail) never need memory. */
static void heap_push(radix_tree *t, radix_node *x) {
    heap_set(t, t->n_heap++, x);
    heap_up(t, x->heap_idx);
}

static void heap_remove(radix_tree *t, radix_node *x) {
    uint32_t i = x->heap_idx;
    radix_node *last = t->heap[--t->n_heap];
    x->heap_idx = RADIX_NO_HEAP;
    if (last == x) return;
    heap_set(t, i, last);
    heap_up(t, i);
    heap_down(t, last->heap_idx);
}

/* ---- pins and touches --------------------------------------------------------------------- */

static void pin(radix_tree *t, radix_node *x) {
    if (x->lock++ > 0) return;
    t->stats.pinned_pages += x->n_pages;
    if (x->heap_idx != RADIX_NO_HEAP) heap_remove(t, x); /* a pinned leaf is not evictable */
}

static void unpin(radix_tree *t, radix_node *x) {
    if (x->lock == 0) return; /* a released-twice handle; radix_check would not have passed */
    if (--x->lock > 0) return;
    t->stats.pinned_pages -= x->n_pages;
    if (!is_root(x) && x->n_children == 0) heap_push(t, x);
}

/* Marks x and its ancestors used now. Only x can be in the heap (the others have children);
 * its key grew, so it sinks. */
static void touch_path(radix_tree *t, radix_node *x, uint64_t now) {
    for (; x; x = x->parent) {
        x->last_use = now;
        if (x->heap_idx != RADIX_NO_HEAP) heap_down(t, x->heap_idx);
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

static radix_node *node_new(radix_tree *t, uint32_t n_pages) {
    radix_node *x = radix_alloc(t, sizeof *x);
    int32_t *run = x ? radix_alloc(t, run_bytes(t, n_pages)) : NULL;
    if (!run) {
        free(x);
        return NULL;
    }
    *x = (radix_node){.run = run, .n_pages = n_pages, .heap_idx = RADIX_NO_HEAP};
    return x;
}

static void node_free(radix_node *x) {
    free(x->run);
    free(x);
}

/* Fills x's run from a token run and its page ids. */
static void node_fill(radix_tree *t, radix_node *x, const int32_t *tokens, const uint32_t *pages) {
    memcpy(node_tokens(x), tokens, (size_t)x->n_pages * t->page_tokens * sizeof(int32_t));
    memcpy(node_pages(t, x), pages, (size_t)x->n_pages * sizeof(uint32_t));
}

/* ---- reserving table space before a change ------------------------------------------------ */

/* Grown tables are allocated up front and installed only once every allocation of the
 * operation succeeded, so a failure leaves the tree as it was, table sizes included. */
typedef struct radix_reserve {
    struct radix_slot *slots;
    uint32_t cap_slots;
    radix_node **heap;
    uint32_t cap_heap;
    radix_node **roots;
    uint32_t cap_roots;
} radix_reserve;

static uint32_t grown_cap(uint32_t cap, uint32_t min_cap, uint64_t need) {
    uint64_t c = cap ? cap : min_cap;
    while (c < need) c *= 2;
    return c > UINT32_MAX ? 0 : (uint32_t)c;
}

static int reserve_tables(radix_tree *t, radix_reserve *r, uint32_t new_slots, uint32_t new_nodes,
                          uint32_t new_roots) {
    *r = (radix_reserve){0};
    uint64_t slots_need = 2 * ((uint64_t)t->n_slots + new_slots); /* load stays <= 1/2 */
    if (slots_need > t->cap_slots) {
        r->cap_slots = grown_cap(t->cap_slots, RADIX_MIN_SLOTS, slots_need);
        r->slots = r->cap_slots ? radix_alloc(t, (size_t)r->cap_slots * sizeof *r->slots) : NULL;
        if (!r->slots) return -1;
    }
    uint64_t heap_need = t->stats.nodes + new_nodes; /* every node could become a leaf */
    if (heap_need > t->cap_heap) {
        r->cap_heap = grown_cap(t->cap_heap, RADIX_MIN_HEAP, heap_need);
        r->heap = r->cap_heap ? radix_alloc(t, (size_t)r->cap_heap * sizeof *r->heap) : NULL;
        if (!r->heap) return -1;
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
    free(r->heap);
    free(r->roots);
    *r = (radix_reserve){0};
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
    if (r->heap) {
        if (t->n_heap) memcpy(r->heap, t->heap, (size_t)t->n_heap * sizeof *r->heap);
        free(t->heap);
        t->stats.bytes += ((size_t)r->cap_heap - t->cap_heap) * sizeof *r->heap;
        t->heap = r->heap;
        t->cap_heap = r->cap_heap;
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
    free(t->heap);
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
 * the longest run of the first page (*len < page_tokens: the match ends there). */
static radix_node *chain_pick(const radix_tree *t, radix_node *c, const int32_t *ids, uint32_t left,
                              uint32_t *len) {
    uint32_t pt = t->page_tokens, want = left < pt ? left : pt;
    radix_node *best = NULL;
    *len = 0;
    for (; c; c = c->next) {
        uint32_t l = lcp(node_tokens(c), ids, want);
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
        uint32_t edge = c->n_pages * pt, cmp = (n - pos < edge ? n - pos : edge) - pt;
        uint32_t l = pt + lcp(node_tokens(c) + pt, ids + pos + pt, cmp);
        pos += l;
        if (l < edge) break; /* ends inside c's edge (maybe on a page boundary) */
        x = c;
    }
    e.n_tokens = pos;
    return e;
}

/* The pages of the matched prefix, gathered bottom-up: the deepest node's first pages (as
 * many as the match reaches into it), then every ancestor's edge whole. */
static void match_pages(const radix_tree *t, const match_end *e, uint32_t *out, uint32_t n_pages) {
    uint32_t i = n_pages, own = n_pages - e->deep_start / t->page_tokens;
    i -= own;
    memcpy(out + i, node_pages(t, e->deep), (size_t)own * sizeof *out);
    for (radix_node *x = e->deep->parent; !is_root(x); x = x->parent) {
        i -= x->n_pages;
        memcpy(out + i, node_pages(t, x), (size_t)x->n_pages * sizeof *out);
    }
}

int radix_match_prefix(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                       radix_match *m) {
    *m = (radix_match){0};
    if (!t->page_tokens) return cd_fail("radix: match in an uninitialized tree");
    if (n && !ids) return cd_fail("radix: match of %u tokens without ids", n);
    radix_node *root = root_find(t, ns);
    match_end e = match_walk(t, root, ids, n);
    uint32_t n_pages = (uint32_t)(((uint64_t)e.n_tokens + t->page_tokens - 1) / t->page_tokens);
    uint32_t *pages = NULL;
    if (e.n_tokens) {
        if (root->lock == UINT32_MAX) return cd_fail("radix: too many pins");
        pages = radix_alloc(t, (size_t)n_pages * sizeof *pages);
        if (!pages) return cd_fail("radix: out of memory for a match of %u pages", n_pages);
        match_pages(t, &e, pages, n_pages);
    }
    /* nothing can fail from here on */
    uint64_t now = ++t->clock;
    t->stats.lookups++;
    t->stats.hit_tokens += e.n_tokens;
    if (e.n_tokens == 0) t->stats.misses++;
    else if (e.n_tokens == n) t->stats.full_hits++;
    else t->stats.partial_hits++;
    /* Pin and touch the path; pinning takes a leaf out of the heap, so no touched node is
     * left in the heap with a stale key. The match does not split: the pin covers the whole
     * deepest node even when the match ends inside its edge. */
    for (radix_node *x = e.deep; x; x = x->parent) {
        pin(t, x);
        x->last_use = now;
    }
    *m = (radix_match){.n_tokens = e.n_tokens, .n_pages = n_pages, .pages = pages, .node = e.deep};
    return 0;
}

void radix_release(radix_tree *t, radix_match *m) {
    if (!m) return;
    for (radix_node *x = m->node; x; x = x->parent) unpin(t, x);
    free(m->pages);
    *m = (radix_match){0};
}

/* ---- insert ------------------------------------------------------------------------------- */

/* What an insert will do, found without changing anything. An insert diverges from the tree
 * in at most one place:
 *
 *   1. nothing new: every whole page is cached (the walk ends at a node or inside an edge,
 *      on a page boundary). deep is the last node walked into.
 *   2. a new leaf under `at` (at == deep): no child of `at` starts with the next token (a new
 *      chain), or some do but none has the whole next page (the leaf joins their chain).
 *   3. a split: the next page differs inside the edge into `split`, after its first k pages.
 *      `split` is cut there and the new leaf hangs from the upper part. */
typedef struct insert_plan {
    radix_node *deep;   /* deepest node holding pages of the sequence before the change */
    radix_node *at;     /* the new leaf's parent (for a split: the parent of `split`) */
    radix_node *split;  /* the edge to split, or NULL */
    uint32_t split_k;   /* pages kept by the upper part */
    uint32_t leaf_from; /* first page of the new leaf; == np when nothing is new */
} insert_plan;

static insert_plan insert_walk(const radix_tree *t, radix_node *root, const int32_t *ids, uint32_t np) {
    uint32_t pt = t->page_tokens, end = np * pt, pos = 0;
    insert_plan p = {.deep = root, .at = root, .leaf_from = root ? np : 0};
    for (radix_node *x = root; x && pos < end;) {
        radix_node *c = chain_head(t, x, ids[pos]);
        while (c && !same_tokens(node_tokens(c), ids + pos, pt)) c = c->next;
        if (!c) { /* case 2 */
            p.at = x;
            p.leaf_from = pos / pt;
            return p;
        }
        uint32_t k = 1;
        while (k < c->n_pages && pos + k * pt < end && same_tokens(node_tokens(c) + k * pt, ids + pos + k * pt, pt))
            k++;
        pos += k * pt;
        p.deep = c;
        if (k == c->n_pages) {
            x = c;
            continue;
        }
        if (pos == end) return p; /* case 1, ending inside c's edge */
        p.at = x;                 /* case 3 */
        p.split = c;
        p.split_k = k;
        p.leaf_from = pos / pt;
        return p;
    }
    return p; /* case 1 (or, without a root, a new namespace: case 2 under a new root) */
}

/* The allocations an insert needs, all made before the tree changes. */
typedef struct insert_mem {
    radix_root *root;     /* a new namespace */
    radix_node *leaf;     /* the new leaf, run allocated */
    radix_node *upper;    /* the split's upper node, run allocated */
    int32_t *lower_run;   /* the split's lower part's new run */
    radix_reserve tables;
} insert_mem;

static void insert_mem_drop(insert_mem *mem) {
    free(mem->root);
    if (mem->leaf) free(mem->leaf->run);
    free(mem->leaf);
    if (mem->upper) free(mem->upper->run);
    free(mem->upper);
    free(mem->lower_run);
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
        mem->upper = node_new(t, p->split_k);
        mem->lower_run = mem->upper ? radix_alloc(t, run_bytes(t, c->n_pages - p->split_k)) : NULL;
        if (!mem->lower_run) return -1;
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

/* Splits the edge into c after k pages (0 < k < c->n_pages):
 *
 *     before:  (p) ── [P0 .. Pk-1 Pk .. Pn-1] = c ── c's children
 *     after:   (p) ── [P0 .. Pk-1] = u ── [Pk .. Pn-1] = c ── c's children
 *
 *   1. u takes c's place in p's chain: same parent, same first token, so the same slot.
 *   2. u inherits c's lock: every pinned path through c now also runs through u, and
 *      releasing a handle on c (or below) walks through u. It inherits c's last use too.
 *   3. c keeps its identity: the handles pointing at it, its children (keyed by (c, token),
 *      untouched), its lock, its place in the heap. u has a child, so it is not in the heap.
 *   4. c's edge becomes the rest, in a fresh run, and c is filed under (u, first token of the
 *      rest). Pages only move between c and u, so pages and pinned_pages do not change. */
static radix_node *split_edge(radix_tree *t, radix_node *c, uint32_t k, radix_node *u, int32_t *lower_run) {
    uint32_t pt = t->page_tokens, rest = c->n_pages - k;
    node_fill(t, u, node_tokens(c), node_pages(t, c));
    u->parent = c->parent;
    u->lock = c->lock;
    u->last_use = c->last_use;
    u->n_children = 1;
    chain_replace(t, c, u); /* 1 */
    memcpy(lower_run, node_tokens(c) + (size_t)k * pt, (size_t)rest * pt * sizeof(int32_t));
    memcpy(lower_run + (size_t)rest * pt, node_pages(t, c) + k, (size_t)rest * sizeof(uint32_t));
    t->stats.bytes += sizeof *u + run_bytes(t, k) + run_bytes(t, rest) - run_bytes(t, c->n_pages);
    free(c->run);
    c->run = lower_run; /* 4 */
    c->n_pages = rest;
    c->parent = u;
    chain_add(t, u, c);
    t->stats.nodes++;
    return u;
}

int radix_insert(radix_tree *t, const uint8_t ns[RADIX_NS_BYTES], const int32_t *ids, uint32_t n,
                 const uint32_t *pages, uint32_t *first_new) {
    if (!t->page_tokens) return cd_fail("radix: insert into an uninitialized tree");
    uint32_t pt = t->page_tokens, np = n / pt;
    if (np && (!ids || !pages)) return cd_fail("radix: insert of %u tokens without ids or pages", n);
    radix_node *root = root_find(t, ns);
    insert_plan p = insert_walk(t, root, ids, np);
    if (p.leaf_from == np) { /* case 1: nothing new, just a touch */
        if (p.deep) touch_path(t, p.deep, t->clock + 1);
        t->clock++;
        if (first_new) *first_new = np;
        return 0;
    }
    insert_mem mem;
    if (insert_alloc(t, &p, np, ids[p.leaf_from * pt], &mem)) {
        insert_mem_drop(&mem);
        return cd_fail("radix: out of memory inserting %u pages", np - p.leaf_from);
    }
    /* nothing can fail from here on */
    uint64_t now = ++t->clock;
    reserve_commit(t, &mem.tables);
    radix_node *at = p.at ? p.at : root_add(t, mem.root, ns);
    if (p.split) at = split_edge(t, p.split, p.split_k, mem.upper, mem.lower_run);
    radix_node *leaf = mem.leaf;
    node_fill(t, leaf, ids + (size_t)p.leaf_from * pt, pages + p.leaf_from);
    leaf->parent = at;
    chain_add(t, at, leaf);
    if (at->n_children++ == 0 && at->heap_idx != RADIX_NO_HEAP) heap_remove(t, at); /* no longer a leaf */
    touch_path(t, at, now);
    leaf->last_use = now;
    heap_push(t, leaf); /* a new leaf is unpinned: evictable */
    t->stats.nodes++;
    t->stats.pages += leaf->n_pages;
    t->stats.inserted_tokens += (uint64_t)leaf->n_pages * pt;
    t->stats.bytes += sizeof *leaf + run_bytes(t, leaf->n_pages);
    if (first_new) *first_new = p.leaf_from;
    return 0;
}

/* ---- eviction ----------------------------------------------------------------------------- */

/* Takes the least recently used evictable leaf out of the tree (unlinked, accounted, its
 * parent made evictable if it became an unpinned leaf) and returns it, still allocated. */
static radix_node *evict_one(radix_tree *t) {
    radix_node *v = t->heap[0];
    radix_node *p = v->parent;
    heap_remove(t, v);
    chain_remove(t, v);
    t->stats.nodes--;
    t->stats.pages -= v->n_pages;
    t->stats.evictions++;
    t->stats.evicted_pages += v->n_pages;
    t->stats.bytes -= sizeof *v + run_bytes(t, v->n_pages);
    /* Evicting a leaf can make its parent a leaf. An unpinned one becomes evictable in turn
     * (its last use is at least v's, so it sorts after v's siblings of the same age or
     * older); a root without children is dropped. A pinned parent waits for its release. */
    if (--p->n_children == 0 && p->lock == 0) {
        if (is_root(p)) root_remove(t, p);
        else heap_push(t, p);
    }
    return v;
}

uint64_t radix_evict(radix_tree *t, uint64_t want_pages, radix_victim_fn fn, void *ctx) {
    uint64_t got = 0;
    while (got < want_pages && t->n_heap) {
        radix_node *v = evict_one(t);
        /* the tree is consistent here; v is out of it but its pages are still readable */
        if (fn) fn(ctx, node_pages(t, v), v->n_pages);
        got += v->n_pages;
        node_free(v);
    }
    return got;
}

uint64_t radix_evictable_pages(const radix_tree *t) { return t->stats.pages - t->stats.pinned_pages; }

/* ---- invariant checker -------------------------------------------------------------------- */

/* Scratch for radix_check: every node (roots first) with an index, a pointer -> index map and
 * per-node counters, so each invariant is checked in one pass. */
typedef struct check_ctx {
    const radix_tree *t;
    radix_node **all;   /* roots, then nodes */
    uint32_t n_all;
    radix_node **map;   /* open addressing, pointer keys */
    uint32_t *map_idx;
    uint32_t map_cap;
    uint32_t *children; /* counted children per node */
    uint64_t *lock_sum; /* sum of the children's locks */
    uint8_t *state;     /* path-to-root walk: 0 unseen, 1 on the walk, 2 reaches a root */
    uint32_t *walk;
    uint64_t *page_set; /* page + 1, 0 empty */
    uint64_t page_cap;
} check_ctx;

static void check_free(check_ctx *c) {
    free(c->all);
    free(c->map);
    free(c->map_idx);
    free(c->children);
    free(c->lock_sum);
    free(c->state);
    free(c->walk);
    free(c->page_set);
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

static int check_page(check_ctx *c, uint32_t page) {
    uint64_t key = (uint64_t)page + 1, mask = c->page_cap - 1, i = mix64(key) & mask;
    while (c->page_set[i] && c->page_set[i] != key) i = (i + 1) & mask;
    if (c->page_set[i]) return cd_fail("radix check: page %u is in the tree twice", page);
    c->page_set[i] = key;
    return 0;
}

static int check_alloc(check_ctx *c) {
    const radix_tree *t = c->t;
    uint64_t n = (uint64_t)t->n_roots + t->stats.nodes;
    if (n >= UINT32_MAX / 4) return cd_fail("radix check: %llu nodes", (unsigned long long)n);
    c->map_cap = 16;
    while (c->map_cap < 2 * n) c->map_cap *= 2;
    c->page_cap = 16;
    while (c->page_cap < 2 * t->stats.pages) c->page_cap *= 2;
    c->all = malloc((n + 1) * sizeof *c->all);
    c->map = calloc(c->map_cap, sizeof *c->map);
    c->map_idx = malloc(c->map_cap * sizeof *c->map_idx);
    c->children = calloc(n + 1, sizeof *c->children);
    c->lock_sum = calloc(n + 1, sizeof *c->lock_sum);
    c->state = calloc(n + 1, 1);
    c->walk = malloc((n + 1) * sizeof *c->walk);
    c->page_set = calloc(c->page_cap, sizeof *c->page_set);
    if (!c->all || !c->map || !c->map_idx || !c->children || !c->lock_sum || !c->state || !c->walk || !c->page_set)
        return cd_fail("radix check: out of memory");
    return 0;
}

static int check_tables(const radix_tree *t) {
    if (t->page_tokens == 0) return cd_fail("radix check: page_tokens is 0");
    if (t->n_roots > t->cap_roots) return cd_fail("radix check: %u roots, capacity %u", t->n_roots, t->cap_roots);
    if (t->n_heap > t->cap_heap) return cd_fail("radix check: heap of %u, capacity %u", t->n_heap, t->cap_heap);
    if (t->cap_heap < t->stats.nodes)
        return cd_fail("radix check: heap capacity %u below %llu nodes (release could not push)", t->cap_heap,
                       (unsigned long long)t->stats.nodes);
    if (t->cap_slots & (t->cap_slots - 1)) return cd_fail("radix check: slot capacity %u is not a power of two", t->cap_slots);
    if (2ull * t->n_slots > t->cap_slots && t->n_slots)
        return cd_fail("radix check: %u slots used of %u (load above 1/2)", t->n_slots, t->cap_slots);
    if (t->stats.pinned_pages > t->stats.pages)
        return cd_fail("radix check: %llu pinned pages of %llu", (unsigned long long)t->stats.pinned_pages,
                       (unsigned long long)t->stats.pages);
    return 0;
}

static int check_roots(check_ctx *c) {
    const radix_tree *t = c->t;
    for (uint32_t i = 0; i < t->n_roots; i++) {
        radix_node *r = t->roots[i];
        if (!r || r->parent || r->run || r->n_pages || r->next)
            return cd_fail("radix check: root %u is not an empty parentless node", i);
        if (r->heap_idx != RADIX_NO_HEAP) return cd_fail("radix check: root %u is in the heap", i);
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
            if (x->n_pages == 0 || !x->run) return cd_fail("radix check: a non-root node has an empty edge");
            if (x->run[0] != s->token)
                return cd_fail("radix check: a node starting with %d is in the chain of %d", x->run[0], s->token);
            for (radix_node *y = s->head; y != x; y = y->next)
                if (same_tokens(node_tokens(x), node_tokens(y), pt))
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

/* Parents, child counts, locks, times, pages, and that every node leads up to a root. */
static int check_nodes(check_ctx *c) {
    const radix_tree *t = c->t;
    uint64_t pages = 0, pinned = 0, bytes = 0;
    for (uint32_t i = t->n_roots; i < c->n_all; i++) {
        radix_node *x = c->all[i];
        uint32_t p = check_find(c, x->parent);
        if (p == UINT32_MAX) return cd_fail("radix check: a node's parent is not in the tree");
        c->children[p]++;
        c->lock_sum[p] += x->lock;
        if (x->last_use > x->parent->last_use)
            return cd_fail("radix check: a node was used (%llu) after its parent (%llu)",
                           (unsigned long long)x->last_use, (unsigned long long)x->parent->last_use);
        for (uint32_t k = 0; k < x->n_pages; k++)
            if (check_page(c, node_pages(t, x)[k])) return -1;
        pages += x->n_pages;
        pinned += x->lock ? x->n_pages : 0;
        bytes += sizeof *x + run_bytes(t, x->n_pages);
    }
    for (uint32_t i = 0; i < c->n_all; i++) {
        radix_node *x = c->all[i];
        if (c->children[i] != x->n_children)
            return cd_fail("radix check: a node has %u children, n_children says %u", c->children[i], x->n_children);
        if (x->lock < c->lock_sum[i])
            return cd_fail("radix check: lock %u below its children's sum %llu", x->lock,
                           (unsigned long long)c->lock_sum[i]);
        if (x->last_use > t->clock) return cd_fail("radix check: a node used after the clock");
    }
    if (pages != t->stats.pages)
        return cd_fail("radix check: %llu pages in nodes, stats say %llu", (unsigned long long)pages,
                       (unsigned long long)t->stats.pages);
    if (pinned != t->stats.pinned_pages)
        return cd_fail("radix check: %llu pages in pinned nodes, stats say %llu", (unsigned long long)pinned,
                       (unsigned long long)t->stats.pinned_pages);
    bytes += (uint64_t)t->n_roots * sizeof(radix_root) + (uint64_t)t->cap_roots * sizeof *t->roots +
             (uint64_t)t->cap_slots * sizeof *t->slots + (uint64_t)t->cap_heap * sizeof *t->heap;
    if (bytes != t->stats.bytes)
        return cd_fail("radix check: %llu bytes owned, stats say %llu", (unsigned long long)bytes,
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

/* The heap holds exactly the unpinned non-root leaves, in heap order, with back indices. */
static int check_heap(check_ctx *c) {
    const radix_tree *t = c->t;
    for (uint32_t i = 0; i < t->n_heap; i++) {
        radix_node *x = t->heap[i];
        uint32_t k = check_find(c, x);
        if (k == UINT32_MAX || k < t->n_roots) return cd_fail("radix check: heap entry %u is not a node", i);
        if (x->heap_idx != i) return cd_fail("radix check: heap entry %u has back index %u", i, x->heap_idx);
        if (x->lock || x->n_children)
            return cd_fail("radix check: heap entry %u is not an unpinned leaf (lock %u, %u children)", i, x->lock,
                           x->n_children);
        if (i && t->heap[(i - 1) / 2]->last_use > x->last_use)
            return cd_fail("radix check: heap order broken at %u (%llu above %llu)", i,
                           (unsigned long long)t->heap[(i - 1) / 2]->last_use, (unsigned long long)x->last_use);
    }
    uint32_t evictable = 0;
    for (uint32_t i = t->n_roots; i < c->n_all; i++) {
        radix_node *x = c->all[i];
        bool leaf = x->lock == 0 && x->n_children == 0;
        evictable += leaf;
        if (leaf && x->heap_idx == RADIX_NO_HEAP) return cd_fail("radix check: an unpinned leaf is not in the heap");
        if (!leaf && x->heap_idx != RADIX_NO_HEAP) return cd_fail("radix check: a pinned or inner node is in the heap");
    }
    if (evictable != t->n_heap)
        return cd_fail("radix check: %u unpinned leaves, heap holds %u", evictable, t->n_heap);
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

static int dump_cmp_parent(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)(*(radix_node *const *)a)->parent, y = (uintptr_t)(*(radix_node *const *)b)->parent;
    return x < y ? -1 : x > y;
}

static void dump_node(const radix_tree *t, FILE *f, const radix_node *x, uint32_t depth) {
    fprintf(f, "%*s", (int)(2 * depth), "");
    if (is_root(x)) {
        fprintf(f, "ns ");
        for (int i = 0; i < 8; i++) fprintf(f, "%02x", root_ns(x)[i]);
        fprintf(f, "..");
    } else {
        uint32_t n_tok = x->n_pages * t->page_tokens;
        fprintf(f, "[");
        for (uint32_t i = 0; i < n_tok && i < 8; i++) fprintf(f, i ? " %d" : "%d", x->run[i]);
        fprintf(f, "%s | ", n_tok > 8 ? " ..." : "");
        for (uint32_t i = 0; i < x->n_pages && i < 4; i++) fprintf(f, i ? " %u" : "%u", node_pages(t, x)[i]);
        fprintf(f, "%s] %u pages", x->n_pages > 4 ? " ..." : "", x->n_pages);
    }
    fprintf(f, " lock %u use %llu", x->lock, (unsigned long long)x->last_use);
    if (x->heap_idx != RADIX_NO_HEAP) fprintf(f, " heap %u", x->heap_idx);
    fprintf(f, "\n");
}

/* Depth first from each root; children found in the node list sorted by parent. */
void radix_dump(const radix_tree *t, void *file) {
    FILE *f = file;
    fprintf(f, "radix: page_tokens %u, %u namespaces, %llu nodes, %llu pages (%llu pinned), %llu bytes, clock %llu\n",
            t->page_tokens, t->n_roots, (unsigned long long)t->stats.nodes, (unsigned long long)t->stats.pages,
            (unsigned long long)t->stats.pinned_pages, (unsigned long long)t->stats.bytes,
            (unsigned long long)t->clock);
    size_t n = t->stats.nodes;
    radix_node **by_parent = malloc((n + 1) * sizeof *by_parent);
    const radix_node **stack = malloc((n + 1) * sizeof *stack);
    uint32_t *depth = malloc((n + 1) * sizeof *depth);
    if (!by_parent || !stack || !depth) {
        fprintf(f, "(out of memory for the dump)\n");
        goto done;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < t->cap_slots; i++)
        for (radix_node *x = t->slots[i].head; x && k < n; x = x->next) by_parent[k++] = x;
    n = k;
    qsort(by_parent, n, sizeof *by_parent, dump_cmp_parent);
    for (uint32_t r = 0; r < t->n_roots; r++) {
        size_t top = 0;
        stack[top] = t->roots[r];
        depth[top++] = 0;
        while (top) {
            const radix_node *x = stack[--top];
            uint32_t d = depth[top];
            dump_node(t, f, x, d);
            size_t lo = 0, hi = n; /* first node whose parent is >= x */
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if ((uintptr_t)by_parent[mid]->parent < (uintptr_t)x) lo = mid + 1;
                else hi = mid;
            }
            for (; lo < n && by_parent[lo]->parent == x && top <= n; lo++) {
                stack[top] = by_parent[lo];
                depth[top++] = d + 1;
            }
        }
    }
done:
    free(by_parent);
    free(stack);
    free(depth);
}
