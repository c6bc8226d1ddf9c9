#include "kv/prefix_cache.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/key_encode.h"

/* One field of the key, in the one key encoding (runtime/base/key_encode.h). */
static void sha_put(void *h, const void *p, size_t n) { EVP_DigestUpdate(h, p, n); }
static void put_field(EVP_MD_CTX *h, const char *tag, const void *p, size_t n) { cd_key_field(sha_put, h, tag, p, n); }

/* SHA-256 with its first field, the domain; 0 or -1 (h freed). */
static int key_begin(EVP_MD_CTX **h, const char *domain) {
    *h = EVP_MD_CTX_new();
    if (!*h || !EVP_DigestInit_ex(*h, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(*h);
        *h = NULL;
        return cd_fail("prefix cache: SHA-256 is not available");
    }
    put_field(*h, "domain", domain, strlen(domain));
    return 0;
}

static int key_end(EVP_MD_CTX *h, uint8_t out[RADIX_NS_BYTES]) {
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex(h, out, &len);
    EVP_MD_CTX_free(h);
    return ok && len == RADIX_NS_BYTES ? 0 : cd_fail("prefix cache: SHA-256 failed");
}

int kv_cache_namespace(const uint8_t model_fp[32], const uint8_t code_id[CVK_CODE_ID_BYTES], const char *kv_dtype,
                       uint32_t page_tokens, const void *salt, size_t salt_len, uint8_t out[RADIX_NS_BYTES]) {
    EVP_MD_CTX *h;
    if (key_begin(&h, "cinder.prefix-cache.namespace.v2")) return -1;
    put_field(h, "model", model_fp, 32);
    put_field(h, "code", code_id, CVK_CODE_ID_BYTES);
    put_field(h, "kv_dtype", kv_dtype, strlen(kv_dtype));
    cd_key_u32(sha_put, h, "page_tokens", page_tokens);
    put_field(h, "tenant", salt, salt ? salt_len : 0);
    return key_end(h, out);
}

int kv_cache_namespace_salt(const uint8_t base[RADIX_NS_BYTES], const void *salt, size_t salt_len,
                            uint8_t out[RADIX_NS_BYTES]) {
    EVP_MD_CTX *h;
    if (key_begin(&h, "cinder.prefix-cache.salted-namespace.v1")) return -1;
    put_field(h, "base", base, RADIX_NS_BYTES);
    put_field(h, "salt", salt, salt_len);
    return key_end(h, out);
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

/* ---- eviction (radix.h Rule 3, pulled) and the host tier ---- */

/* Slots leaving the tree. A slot still waiting for its copy in the batch (its node was demoted
 * and then dropped or host-evicted in the same reclaim) loses the copy, and the page it was to
 * receive goes back at once: no two copies of a batch ever target one slot. */
static void on_host_free(void *ctx, const uint32_t *slots, uint32_t n) {
    kv_prefix_cache *c = ctx;
    if (c->ev) kv_events_removed(c->ev, KV_MEDIUM_CPU, &c->ev->host, slots, n);
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

/* The GPU victim v leaves the tree, its pages go back to the pool (host slots below it too). */
static void drop_victim(kv_prefix_cache *c, const radix_victim *v) {
    if (c->ev) kv_events_removed(c->ev, KV_MEDIUM_GPU, &c->ev->gpu, v->pages, v->n_pages);
    release_pages(c, v->pages, v->n_pages); /* the tree's references; its node still lists them */
    radix_drop(&c->tree, v, c->host ? on_host_free : NULL, c);
}

void kv_cache_clear(kv_prefix_cache *c) {
    radix_victim v;
    while (radix_gpu_victim(&c->tree, &v)) drop_victim(c, &v);
    if (c->host) radix_evict_host(&c->tree, UINT64_MAX, on_host_free, c); /* slots back to the tier */
}

void kv_cache_free(kv_prefix_cache *c) {
    if (!c->pages) return;
    kv_cache_clear(c); /* pinned nodes: none may be left */
    radix_free(&c->tree);
    free(c->dem_pages);
    free(c->dem_slots);
    free(c->restore_pages);
    free(c->chain);
    free(c->disk_pages);
    if (c->ev) kv_events_free(c->ev);
    free(c->ev);
    *c = (kv_prefix_cache){0};
}

int kv_cache_match(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, radix_match *m) {
    return radix_match_prefix(&c->tree, ns ? ns : c->ns, ids, n, m);
}

/* Page events: the whole pages s->pages[first .. whole) the tree just adopted are stored on the
 * GPU, each named by the hash chain over ids from the prefix's first page. */
static void announce_adopted(kv_prefix_cache *c, const int32_t *ids, const kv_seq *s, uint32_t first, uint32_t whole) {
    kv_events *e = c->ev;
    uint32_t pt = c->pages->page_tokens;
    uint64_t h = 0;
    for (uint32_t i = 0; i < whole; i++) {
        uint64_t parent = h;
        h = kv_page_hash(c->ns, parent, ids + (size_t)i * pt, pt);
        if (i >= first) kv_events_set(e, &e->gpu, s->pages[i], h, parent, ids + (size_t)i * pt);
    }
    if (whole > first) kv_events_stored(e, KV_MEDIUM_GPU, &e->gpu, s->pages + first, whole - first);
}

int kv_cache_insert(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, const kv_seq *s, bool tail) {
    uint32_t first_new = 0, n = tail ? s->n_tokens : s->n_tokens - s->n_tokens % c->pages->page_tokens;
    if (!ns) ns = c->ns;
    /* tails made redundant by these pages give their page back (release_pages: the tree's reference) */
    if (radix_insert_tail(&c->tree, ns, ids, n, s->pages, &first_new, release_pages, c)) return -1;
    for (uint32_t i = first_new; i < kv_pages_for(c->pages, n); i++)
        if (kv_page_retain(c->pages, s->pages[i])) return -1; /* cannot fail: the sequence holds it */
    /* a partly filled tail page is not announced; nor is any other namespace (a salt's) */
    if (c->ev && memcmp(ns, c->ns, RADIX_NS_BYTES) == 0)
        announce_adopted(c, ids, s, first_new, n / c->pages->page_tokens);
    return 0;
}

/* Demotes the GPU victim v when the host tier can take it (least recently used host leaves make
 * room first): its pages join the batch flush_demotions copies and then releases. 0: not. */
static int demote_victim(kv_prefix_cache *c, radix_victim *v) {
    if (!c->host || c->host_broken || c->n_dem + v->n_pages > c->cap_dem) return 0;
    uint32_t room = kv_host_free_count(c->host);
    if (room < v->n_pages) {
        radix_evict_host(&c->tree, v->n_pages - room, on_host_free, c);
        radix_gpu_victim(&c->tree, v); /* a host eviction leaves the GPU victim as it was; re-read all the same */
        if (kv_host_free_count(c->host) < v->n_pages) return 0;
    }
    uint32_t n = v->n_pages, *pages = c->dem_pages + c->n_dem, *slots = c->dem_slots + c->n_dem;
    for (uint32_t i = 0; i < n; i++) kv_host_slot_alloc(c->host, &slots[i]); /* cannot fail: counted above */
    memcpy(pages, v->pages, n * sizeof *pages);
    if (radix_demote(&c->tree, v, slots)) { /* cannot happen: v is the victim */
        for (uint32_t i = 0; i < n; i++) kv_host_slot_free(c->host, slots[i]);
        return 0;
    }
    c->n_dem += n;
    if (c->ev) { /* the same pages, now in the host slots: removed from the GPU first (page_events.h) */
        kv_events_move(c->ev, &c->ev->gpu, pages, &c->ev->host, slots, n);
        kv_events_removed(c->ev, KV_MEDIUM_GPU, &c->ev->gpu, pages, n);
        kv_events_stored(c->ev, KV_MEDIUM_CPU, &c->ev->host, slots, n);
    }
    return 1;
}

kv_cache_moves kv_cache_moves_get(const kv_prefix_cache *c) {
    return (kv_cache_moves){.freed_pages = c->freed_pages, .demoted_pages = c->tree.stats.demoted_pages};
}

const radix_stats *kv_cache_stats(const kv_prefix_cache *c) { return &c->tree.stats; }

uint32_t kv_cache_reclaim(kv_prefix_cache *c, uint32_t want) {
    uint64_t before = c->freed_pages;
    for (;;) {
        /* victims one node at a time, demoted or dropped, until the pages queued for release
         * would cover want */
        bool any = false;
        radix_victim v;
        while (kv_pages_free_count(c->pages) + c->n_dem < want && radix_gpu_victim(&c->tree, &v)) {
            if (!demote_victim(c, &v)) drop_victim(c, &v);
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
    bool copied =
        left == 0 || kv_host_copy(c->host, pg + skip, m->pages + m->n_gpu_pages + skip, left, KV_HOST_RESTORE) == 0;
    if (!copied) { /* the slots may be fine, the copy path is not: recompute, and use the tier no more */
        fprintf(stderr, "cinder: %s; the host tier is off from now on (its prefixes are recomputed)\n", cd_errmsg());
        c->host_broken = true;
    }
    /* page events: the fresh pages take the slots' identities now, since radix_restore frees the
     * slots (on_host_free: removed CPU) before it returns */
    if (copied && c->ev)
        kv_events_move(c->ev, &c->ev->host, m->pages + m->n_gpu_pages + skip, &c->ev->gpu, pg + skip, left);
    int took = copied ? radix_restore(&c->tree, m, pg, on_host_free, c) : -1;
    /* the tree keeps the reference kv_page_alloc gave each page it took (the last ones); the
     * rest go back */
    uint32_t keep = took < 0 ? 0 : (uint32_t)took;
    if (copied && c->ev) {
        for (uint32_t i = skip; i < n - keep; i++) c->ev->gpu.hash[pg[i]] = 0; /* not the tree's: forgotten */
        kv_events_stored(c->ev, KV_MEDIUM_GPU, &c->ev->gpu, pg + n - keep, keep);
    }
    for (uint32_t i = skip; i < n - keep; i++) kv_page_release(c->pages, pg[i]);
    if (!copied) return 1; /* not restored: the caller uses the GPU pages of the match alone */
    if (took < 0) return -1;
    *taken = keep;
    return 0;
}

int kv_cache_set_events(kv_prefix_cache *c, kv_event_fn fn, void *ctx) {
    if (c->tree.stats.nodes) return cd_fail("prefix cache: page events switched on over a cache that holds pages");
    kv_events *e = calloc(1, sizeof *e);
    if (!e) return cd_fail("out of memory (page events)");
    if (kv_events_init(e, fn, ctx, c->pages->page_tokens, c->pages->n_pages, c->host ? c->host->n_slots : 0)) {
        free(e);
        return -1;
    }
    c->ev = e;
    kv_events_cleared(e);
    return 0;
}

int kv_cache_list_pages(const kv_prefix_cache *c, void (*fn)(void *ctx, uint64_t hash, kv_medium m), void *ctx) {
    return kv_pages_list(&c->tree, c->ns, fn, ctx);
}

/* ---- acquire / commit / release: the one door to the tiers ---- */

_Static_assert(KV_DISK_HASH_BYTES == RADIX_NS_BYTES, "the disk tier's namespace is the cache's");

/* Whether the disk tier serves and stores requests of namespace ns. Its files are keyed by the
 * tier's own namespace (kv_disk_init: it is in every chain hash and every header, and names the
 * directory), so a request of any other namespace (a cache_salt, engine/engine.h) skips
 * the tier entirely: no read, no write-through. Reading would serve it the default namespace's
 * KV, and writing would serve its KV to the default namespace: a salted request's KV must never
 * reach another namespace. A disk key per namespace is later work (docs/PREFIX_CACHE.md). The
 * host tier needs no such rule: its slots hang in the tree's nodes, under their namespace's
 * root, so a match restores only slots of its own namespace. */
static bool disk_serves(const kv_prefix_cache *c, const uint8_t ns[RADIX_NS_BYTES]) {
    return c->disk && memcmp(ns, c->disk->ns, RADIX_NS_BYTES) == 0;
}

int kv_cache_attach_disk(kv_prefix_cache *c, kv_disk_tier *d) {
    if (!(c->disk_pages = malloc((size_t)d->chunk_pages * sizeof *c->disk_pages)))
        return cd_fail("out of memory (disk tier chunk of %u pages)", d->chunk_pages);
    c->disk = d;
    return 0;
}

/* The chain hashes of the first n_chunks chunks of ids into c->chain. */
static int chain_hashes(kv_prefix_cache *c, const int32_t *ids, uint32_t n_chunks) {
    if (n_chunks > c->cap_chain) {
        void *p = realloc(c->chain, (size_t)n_chunks * sizeof *c->chain);
        if (!p) return cd_fail("out of memory for %u chunk hashes", n_chunks);
        c->chain = p;
        c->cap_chain = n_chunks;
    }
    return kv_disk_chain(c->disk, ids, n_chunks, c->chain);
}

/* Whole chunks of ids[0..n-1) past an all-GPU match of n_tokens tokens, from the disk tier:
 * consecutive chunks from the one holding the first unmatched page, until one is missing or
 * rejected (or the pool has no room). The sequence gets the match's whole pages, then each
 * chunk's pages past them (a partly matched last page is replaced by the chunk's full one),
 * and the tree adopts them. *loaded = 0: nothing read, the sequence is untouched. */
static int attach_disk(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, const radix_match *m,
                       uint32_t n_tokens, kv_seq *s, kv_cache_hit *hit, bool *loaded) {
    *loaded = false;
    kv_disk_tier *d = c->disk;
    uint32_t pt = c->pages->page_tokens, C = d->chunk_pages, ct = d->chunk_tokens;
    uint32_t mw = n_tokens / pt, c0 = mw / C, c_end = (n - 1) / ct;
    if (c0 >= c_end) return 0;
    double t0 = cd_now_ms();
    uint64_t rej0 = d->rejected, bytes0 = d->bytes_read;
    if (chain_hashes(c, ids, c_end)) return -1;
    static const uint8_t zero[KV_DISK_HASH_BYTES];
    uint32_t *pg = c->disk_pages;
    int rc = 0;
    for (uint32_t k = c0; k < c_end; k++) {
        int got = kv_disk_read(d, ids + (size_t)k * ct, k, k ? c->chain[k - 1] : zero, c->chain[k]);
        if (got <= 0) {
            rc = got;
            break;
        }
        uint32_t first = k == c0 ? mw - c0 * C : 0, need = C - first;
        if (kv_pages_free_count(c->pages) < need) kv_cache_reclaim(c, need); /* the match is pinned */
        if (kv_pages_free_count(c->pages) < need) break;
        if (!*loaded && (rc = kv_seq_attach(c->pages, s, m->pages, mw, mw * pt))) break;
        *loaded = true;
        for (uint32_t i = 0; i < need; i++) kv_page_alloc(c->pages, &pg[i]); /* cannot fail: counted above */
        rc = kv_disk_upload(d, first, pg, need);
        if (!rc) rc = kv_seq_attach(c->pages, s, pg, need, need * pt);
        for (uint32_t i = 0; i < need; i++) kv_page_release(c->pages, pg[i]); /* the sequence holds them now */
        if (rc) break;
        hit->disk_chunks_read++;
    }
    if (*loaded && !rc) rc = kv_cache_insert(c, ns, ids, s, false); /* later requests see them cached */
    hit->disk_rejected = (uint32_t)(d->rejected - rej0);
    hit->disk_bytes_read = d->bytes_read - bytes0;
    hit->disk_read_ms = cd_now_ms() - t0;
    if (*loaded) hit->disk_tokens = s->n_tokens - n_tokens;
    return rc;
}

int kv_cache_acquire(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, kv_seq *s, radix_match *m,
                     kv_cache_hit *hit) {
    *hit = (kv_cache_hit){0};
    *m = (radix_match){0};
    if (s->n_tokens) return cd_fail("prefix cache: acquire into a sequence that already holds %u tokens", s->n_tokens);
    if (n < 2) return 0;
    if (!ns) ns = c->ns;
    if (kv_cache_match(c, ns, ids, n - 1, m)) return -1;
    uint32_t pt = c->pages->page_tokens, n_pages = m->n_pages, n_tokens = m->n_tokens;
    bool all_gpu = true;
    if (m->n_restore) {
        uint32_t gpu_tokens = m->n_gpu_pages * pt < n_tokens ? m->n_gpu_pages * pt : n_tokens, taken = 0;
        double t0 = cd_now_ms();
        int rc = kv_cache_restore(c, m, &taken);
        if (rc < 0) return -1;
        hit->restore_ms = cd_now_ms() - t0;
        if (rc == 0) {
            hit->restored_tokens = n_tokens - gpu_tokens;
            hit->restored_pages = taken;
        } else { /* not restored: the GPU pages only */
            n_pages = m->n_gpu_pages;
            n_tokens = gpu_tokens;
            all_gpu = false; /* host nodes below: the tree could not adopt disk pages (radix.h Rule 7) */
        }
    }
    if (all_gpu && disk_serves(c, ns)) {
        bool loaded;
        if (attach_disk(c, ns, ids, n, m, n_tokens, s, hit, &loaded)) return -1;
        if (loaded) {
            hit->cached_tokens = s->n_tokens;
            return 0;
        }
    }
    hit->cached_tokens = n_tokens;
    return kv_seq_attach(c->pages, s, m->pages, n_pages, n_tokens);
}

/* Write-through: every whole chunk of ids[0 .. n) not yet on disk; stops at the first failed
 * write (one message per request, the request goes on). */
static int store_disk(kv_prefix_cache *c, const int32_t *ids, uint32_t n, const kv_seq *s, kv_cache_written *w) {
    kv_disk_tier *d = c->disk;
    uint32_t n_chunks = n / d->chunk_tokens;
    if (!n_chunks) return 0;
    double t0 = cd_now_ms();
    uint64_t bytes0 = d->bytes_written, n0 = d->chunks_written;
    uint64_t ev0 = d->evicted_chunks, evb0 = d->evicted_bytes, over0 = d->over_budget;
    if (chain_hashes(c, ids, n_chunks) || kv_disk_store_chunks(d, ids, n_chunks, c->chain, s->pages)) return -1;
    w->disk_chunks_written = (uint32_t)(d->chunks_written - n0);
    w->disk_bytes_written = d->bytes_written - bytes0;
    w->disk_evicted_chunks = (uint32_t)(d->evicted_chunks - ev0);
    w->disk_evicted_bytes = d->evicted_bytes - evb0;
    w->disk_over_budget = (uint32_t)(d->over_budget - over0);
    w->disk_write_ms = cd_now_ms() - t0;
    return 0;
}

int kv_cache_commit(kv_prefix_cache *c, const uint8_t *ns, const int32_t *ids, uint32_t n, const kv_seq *s,
                    enum kv_commit what, kv_cache_written *w) {
    if (w) *w = (kv_cache_written){0};
    if (n > s->n_tokens) return cd_fail("prefix cache: commit of %u tokens from a sequence of %u", n, s->n_tokens);
#ifdef CINDER_FAULT_INJECTION
    if (c->fail_commits) {
        c->fail_commits--;
        return cd_fail("prefix cache: commit failed (injected)");
    }
#endif
    kv_seq head = *s; /* the first n tokens' pages: a view, not a copy */
    head.n_tokens = n;
    head.n_pages = kv_pages_for(c->pages, n);
    if (!ns) ns = c->ns;
    if (kv_cache_insert(c, ns, ids, &head, what == KV_COMMIT_FINAL)) return -1;
    return w && disk_serves(c, ns) ? store_disk(c, ids, n, &head, w) : 0;
}

void kv_cache_release(kv_prefix_cache *c, radix_match *m) { radix_release(&c->tree, m); }
