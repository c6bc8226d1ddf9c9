#include "kv/prefix_cache.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* One field of the key: tag, length, bytes, each length-prefixed, so no two different field
 * lists encode to the same byte string. */
static void put_field(EVP_MD_CTX *h, const char *tag, const void *p, size_t n) {
    uint64_t lens[2] = {strlen(tag), n};
    EVP_DigestUpdate(h, &lens[0], sizeof lens[0]);
    EVP_DigestUpdate(h, tag, lens[0]);
    EVP_DigestUpdate(h, &lens[1], sizeof lens[1]);
    if (n) EVP_DigestUpdate(h, p, n);
}

int kv_cache_namespace(const uint8_t model_fp[32], const char *kv_dtype, uint32_t page_tokens, const void *salt,
                       size_t salt_len, uint8_t out[RADIX_NS_BYTES]) {
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    if (!h || !EVP_DigestInit_ex(h, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(h);
        return cd_fail("prefix cache: SHA-256 is not available");
    }
    put_field(h, "domain", "cinder.prefix-cache.namespace.v1", 32);
    put_field(h, "model", model_fp, 32);
    put_field(h, "kv_dtype", kv_dtype, strlen(kv_dtype));
    put_field(h, "page_tokens", &page_tokens, sizeof page_tokens);
    put_field(h, "tenant", salt, salt ? salt_len : 0);
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex(h, out, &len);
    EVP_MD_CTX_free(h);
    return ok && len == RADIX_NS_BYTES ? 0 : cd_fail("prefix cache: SHA-256 failed");
}

int kv_cache_init(kv_prefix_cache *c, kv_pages *pages, const uint8_t ns[RADIX_NS_BYTES]) {
    *c = (kv_prefix_cache){.pages = pages};
    memcpy(c->ns, ns, RADIX_NS_BYTES);
    return radix_init(&c->tree, pages->page_tokens);
}

static void release_pages(void *ctx, const uint32_t *pages, uint32_t n) {
    kv_prefix_cache *c = ctx;
    for (uint32_t i = 0; i < n; i++) {
        kv_page_release(c->pages, pages[i]);
        if (kv_page_refs(c->pages, pages[i]) == 0) c->freed_pages++;
    }
}

/* ---- the host tier's callbacks (radix_evict_tiered, radix_evict_host, radix_restore) ---- */

/* A GPU victim's pages: a demoted victim's wait in the batch for their copy; others go now. */
static void on_victim(void *ctx, const uint32_t *pages, uint32_t n) {
    kv_prefix_cache *c = ctx;
    if (c->last_saved) {
        c->last_saved = false;
        return;
    }
    release_pages(c, pages, n);
}

/* Rule 3: slots for a victim, or 0 (dropped) when the tier has none (room was made beforehand). */
static int on_demote(void *ctx, const uint32_t *pages, uint32_t n, uint32_t *slots) {
    kv_prefix_cache *c = ctx;
    if (c->host_broken || kv_host_free_count(c->host) < n || c->n_dem + n > c->cap_dem) return 0;
    for (uint32_t i = 0; i < n; i++) {
        kv_host_slot_alloc(c->host, &slots[i]); /* cannot fail: counted above */
        c->dem_pages[c->n_dem] = pages[i];
        c->dem_slots[c->n_dem++] = slots[i];
    }
    c->last_saved = true;
    return 1;
}

/* Slots leaving the tree. A slot still waiting for its copy in the batch (its node was demoted
 * and then dropped or host-evicted in the same reclaim) loses the copy, and the page it was to
 * receive goes back at once: no two copies of a batch ever target one slot. */
static void on_host_free(void *ctx, const uint32_t *slots, uint32_t n) {
    kv_prefix_cache *c = ctx;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < c->n_dem; k++)
            if (c->dem_slots[k] == slots[i]) {
                release_pages(c, &c->dem_pages[k], 1);
                c->n_dem--;
                c->dem_pages[k] = c->dem_pages[c->n_dem];
                c->dem_slots[k] = c->dem_slots[c->n_dem];
                break;
            }
        kv_host_slot_free(c->host, slots[i]);
    }
}

/* Copies the batch to the host, then releases its pages (an asynchronous copy is only
 * submitted: whatever writes those pages next is submitted later and waits for it on the GPU,
 * kv/host_tier.h). A failed copy (submission) leaves host nodes whose
 * slots hold no valid KV: the tier is marked broken (nothing is restored or demoted again) and
 * every unpinned host node is dropped. */
static int flush_demotions(kv_prefix_cache *c) {
    if (!c->n_dem) return 0;
    int rc = kv_host_copy(c->host, c->dem_pages, c->dem_slots, c->n_dem, KV_HOST_DEMOTE);
    uint32_t n = c->n_dem;
    c->n_dem = 0;
    release_pages(c, c->dem_pages, n);
    if (rc) {
        c->host_broken = true;
        radix_evict_host(&c->tree, UINT64_MAX, on_host_free, c);
    }
    return rc;
}

int kv_cache_attach_host(kv_prefix_cache *c, kv_host_tier *h) {
    uint32_t n = c->pages->n_pages;
    c->dem_pages = malloc((size_t)n * sizeof *c->dem_pages);
    c->dem_slots = malloc((size_t)n * sizeof *c->dem_slots);
    c->restore_pages = malloc((size_t)n * sizeof *c->restore_pages);
    if (!c->dem_pages || !c->dem_slots || !c->restore_pages) {
        free(c->dem_pages);
        free(c->dem_slots);
        free(c->restore_pages);
        c->dem_pages = c->dem_slots = c->restore_pages = NULL;
        return cd_fail("out of memory (host tier batch of %u pages)", n);
    }
    c->cap_dem = n;
    c->host = h;
    return 0;
}

void kv_cache_clear(kv_prefix_cache *c) {
    /* host slots go back to the tier (c->host may be NULL) */
    radix_evict_ops ops = {.victim = release_pages, .host_free = c->host ? on_host_free : NULL, .ctx = c};
    radix_evict_tiered(&c->tree, UINT64_MAX, &ops);
    if (c->host) radix_evict_host(&c->tree, UINT64_MAX, on_host_free, c);
}

void kv_cache_free(kv_prefix_cache *c) {
    if (!c->pages) return;
    kv_cache_clear(c); /* pinned nodes: none may be left */
    radix_free(&c->tree);
    free(c->dem_pages);
    free(c->dem_slots);
    free(c->restore_pages);
    *c = (kv_prefix_cache){0};
}

int kv_cache_match(kv_prefix_cache *c, const int32_t *ids, uint32_t n, radix_match *m) {
    return radix_match_prefix(&c->tree, c->ns, ids, n, m);
}

int kv_cache_insert(kv_prefix_cache *c, const int32_t *ids, const kv_seq *s) {
    uint32_t first_new = 0, whole = s->n_tokens / c->pages->page_tokens;
    if (radix_insert(&c->tree, c->ns, ids, s->n_tokens, s->pages, &first_new)) return -1;
    for (uint32_t i = first_new; i < whole; i++)
        if (kv_page_retain(c->pages, s->pages[i])) return -1; /* cannot fail: the sequence holds it */
    return 0;
}

/* Before a GPU victim is chosen with a host tier: room for exactly its pages in the tier (LRU
 * host leaves go), since the demote callback may not call into the tree. */
static void host_room_for_next_victim(kv_prefix_cache *c) {
    uint32_t n = radix_next_gpu_victim_pages(&c->tree), room = kv_host_free_count(c->host);
    if (n && !c->host_broken && room < n) radix_evict_host(&c->tree, n - room, on_host_free, c);
}

uint32_t kv_cache_reclaim(kv_prefix_cache *c, uint32_t want) {
    uint64_t before = c->freed_pages;
    /* without a host tier no demote callback: every victim is dropped (radix.h Rule 3) */
    radix_evict_ops ops = c->host ? (radix_evict_ops){.victim = on_victim, .demote = on_demote,
                                                      .host_free = on_host_free, .ctx = c}
                                  : (radix_evict_ops){.victim = release_pages, .ctx = c};
    for (;;) {
        /* victims one node at a time, until the pages queued for release would cover want */
        bool any = false;
        while (kv_pages_free_count(c->pages) + c->n_dem < want) {
            if (c->host) host_room_for_next_victim(c);
            if (radix_evict_tiered(&c->tree, 1, &ops) == 0) break; /* nothing evictable left */
            any = true;
        }
        flush_demotions(c); /* a failure is remembered in host_broken; the pages are free anyway */
        if (!any || kv_pages_free_count(c->pages) >= want) break;
    }
    return (uint32_t)(c->freed_pages - before);
}

int kv_cache_restore(kv_prefix_cache *c, radix_match *m, uint32_t *taken) {
    *taken = 0;
    uint32_t n = m->n_restore;
    if (n == 0) return 0;
    if (!c->host || c->host_broken || n > c->pages->n_pages) return 1;
    /* another match's restore may have brought back the upper part of this path's host run, or
     * all of it: fill only what is still on the host (pg[skip .. n)), so a prefix matched by
     * several requests while demoted is copied back once */
    uint32_t left = radix_match_host_left(&c->tree, m), skip = n - left;
    if (kv_pages_free_count(c->pages) < left) kv_cache_reclaim(c, left); /* the matched path is pinned */
    if (kv_pages_free_count(c->pages) < left) return 1;
    uint32_t *pg = c->restore_pages;
    for (uint32_t i = skip; i < n; i++) kv_page_alloc(c->pages, &pg[i]); /* cannot fail: counted above */
    int took = -1;
    if (left == 0 || kv_host_copy(c->host, pg + skip, m->pages + m->n_gpu_pages + skip, left, KV_HOST_RESTORE) == 0)
        took = radix_restore(&c->tree, m, pg, on_host_free, c);
    /* the tree keeps the reference kv_page_alloc gave each page it took (the last ones); the
     * rest go back */
    uint32_t keep = took < 0 ? 0 : (uint32_t)took;
    for (uint32_t i = skip; i < n - keep; i++) kv_page_release(c->pages, pg[i]);
    if (took < 0) return -1;
    *taken = keep;
    return 0;
}

void kv_cache_reclaim_hook(void *c, uint32_t want) {
    kv_prefix_cache *pc = c;
    kv_cache_reclaim(pc, kv_pages_free_count(pc->pages) + want);
}
