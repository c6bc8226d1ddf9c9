#include "kv/page_events.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/base/error.h"

#define HASH_63 ((UINT64_C(1) << 63) - 1)

uint64_t kv_page_hash(const uint8_t ns[RADIX_NS_BYTES], uint64_t parent, const int32_t *tokens, uint32_t page_tokens) {
    static const char domain[] = "cinder.kv-event.page.v1"; /* with its NUL: a fixed-length field */
    uint8_t buf[sizeof domain + RADIX_NS_BYTES + 8 + 4 * KV_EVENT_MAX_PAGE_TOKENS], *p = buf;
    if (page_tokens > KV_EVENT_MAX_PAGE_TOKENS)
        page_tokens = KV_EVENT_MAX_PAGE_TOKENS; /* cannot happen: checked at init */
    memcpy(p, domain, sizeof domain), p += sizeof domain;
    memcpy(p, ns, RADIX_NS_BYTES), p += RADIX_NS_BYTES;
    for (int i = 0; i < 8; i++) *p++ = (uint8_t)(parent >> (8 * i)); /* little endian on every host */
    for (uint32_t i = 0; i < page_tokens; i++)
        for (int b = 0; b < 4; b++) *p++ = (uint8_t)((uint32_t)tokens[i] >> (8 * b));
    uint64_t h = XXH3_64bits(buf, (size_t)(p - buf)) & HASH_63;
    return h ? h : 1; /* 0 means "none" (no parent, not announced) */
}

static int ids_init(kv_page_ids *t, uint32_t n, uint32_t pt) {
    *t = (kv_page_ids){.n = n};
    if (!n) return 0;
    t->hash = calloc(n, sizeof *t->hash);
    t->parent = calloc(n, sizeof *t->parent);
    t->tokens = calloc((size_t)n * pt, sizeof *t->tokens);
    return t->hash && t->parent && t->tokens ? 0 : -1;
}

static void ids_free(kv_page_ids *t) {
    free(t->hash);
    free(t->parent);
    free(t->tokens);
    *t = (kv_page_ids){0};
}

int kv_events_init(kv_events *e, kv_event_fn fn, void *ctx, uint32_t page_tokens, uint32_t n_pages, uint32_t n_slots) {
    *e = (kv_events){.fn = fn, .ctx = ctx, .page_tokens = page_tokens};
    if (page_tokens > KV_EVENT_MAX_PAGE_TOKENS)
        return cd_fail("page events: pages of %u tokens (at most %d)", page_tokens, KV_EVENT_MAX_PAGE_TOKENS);
    uint32_t most = n_pages > n_slots ? n_pages : n_slots;
    e->run_hash = malloc((size_t)(most ? most : 1) * sizeof *e->run_hash);
    e->run_tokens = malloc((size_t)(most ? most : 1) * page_tokens * sizeof *e->run_tokens);
    if (!e->run_hash || !e->run_tokens || ids_init(&e->gpu, n_pages, page_tokens) ||
        ids_init(&e->host, n_slots, page_tokens)) {
        kv_events_free(e);
        return cd_fail("out of memory (page event tables for %u pages, %u slots)", n_pages, n_slots);
    }
    return 0;
}

void kv_events_free(kv_events *e) {
    ids_free(&e->gpu);
    ids_free(&e->host);
    free(e->run_hash);
    free(e->run_tokens);
    *e = (kv_events){0};
}

void kv_events_cleared(kv_events *e) {
    e->fn(e->ctx, &(kv_event){.kind = KV_EVENT_CLEARED, .page_tokens = e->page_tokens});
}

void kv_events_set(kv_events *e, kv_page_ids *t, uint32_t id, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    t->hash[id] = hash;
    t->parent[id] = parent;
    if (tokens) memcpy(t->tokens + (size_t)id * e->page_tokens, tokens, e->page_tokens * sizeof *tokens);
}

void kv_events_move(kv_events *e, const kv_page_ids *a, const uint32_t *from, kv_page_ids *b, const uint32_t *to,
                    uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        kv_events_set(e, b, to[i], a->hash[from[i]], a->parent[from[i]], a->tokens + (size_t)from[i] * e->page_tokens);
}

/* One stored event of the gathered run (run_hash[0..n), run_tokens), its first page's parent. */
static void emit_stored(kv_events *e, kv_medium m, uint32_t n, uint64_t parent) {
    if (n)
        e->fn(e->ctx,
              &(kv_event){.kind = KV_EVENT_STORED,
                          .medium = m,
                          .n = n,
                          .hashes = e->run_hash,
                          .parent = parent,
                          .tokens = e->run_tokens,
                          .page_tokens = e->page_tokens});
}

void kv_events_stored(kv_events *e, kv_medium m, const kv_page_ids *t, const uint32_t *ids, uint32_t n) {
    uint32_t pt = e->page_tokens, k = 0;
    uint64_t parent = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (!t->hash[id]) continue;
        if (k && t->parent[id] != e->run_hash[k - 1]) { /* not the next page of the run: a new event */
            emit_stored(e, m, k, parent);
            k = 0;
        }
        if (!k) parent = t->parent[id];
        e->run_hash[k] = t->hash[id];
        memcpy(e->run_tokens + (size_t)k * pt, t->tokens + (size_t)id * pt, pt * sizeof *e->run_tokens);
        k++;
    }
    emit_stored(e, m, k, parent);
}

void kv_events_removed(kv_events *e, kv_medium m, kv_page_ids *t, const uint32_t *ids, uint32_t n) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (t->hash[ids[i]]) {
            e->run_hash[k++] = t->hash[ids[i]];
            t->hash[ids[i]] = 0;
        }
    if (k)
        e->fn(e->ctx,
              &(kv_event){
                  .kind = KV_EVENT_REMOVED, .medium = m, .n = k, .hashes = e->run_hash, .page_tokens = e->page_tokens});
}

/* ---- the listing ---- */

typedef struct lister {
    const uint8_t *ns;
    uint32_t page_tokens;
    uint64_t *last; /* [depth]: the hash of the last whole page of the node last seen at that depth */
    uint32_t cap;
    bool oom;
    void (*fn)(void *ctx, uint64_t hash, kv_medium m);
    void *ctx;
} lister;

static void list_node(void *ctx, const radix_walk_node *w) {
    lister *l = ctx;
    if (l->oom || memcmp(w->ns, l->ns, RADIX_NS_BYTES) != 0) return;
    if (w->depth >= l->cap) {
        uint32_t cap = 2 * w->depth + 8;
        uint64_t *p = realloc(l->last, cap * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->last = p;
        l->cap = cap;
    }
    uint64_t h = w->depth > 1 ? l->last[w->depth - 1] : 0;
    uint32_t whole = w->n_pages - (w->tail ? 1 : 0);
    for (uint32_t i = 0; i < whole; i++) {
        h = kv_page_hash(l->ns, h, w->tokens + (size_t)i * l->page_tokens, l->page_tokens);
        l->fn(l->ctx, h, w->on_gpu ? KV_MEDIUM_GPU : KV_MEDIUM_CPU);
    }
    l->last[w->depth] = h;
}

int kv_pages_list(const radix_tree *t, const uint8_t ns[RADIX_NS_BYTES],
                  void (*fn)(void *ctx, uint64_t hash, kv_medium m), void *ctx) {
    lister l = {.ns = ns, .page_tokens = t->page_tokens, .fn = fn, .ctx = ctx};
    radix_walk(t, list_node, &l);
    free(l.last);
    return l.oom ? cd_fail("out of memory listing the cache's pages") : 0;
}
