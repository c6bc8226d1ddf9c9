#include "kv/prefix_cache.h"

#include <openssl/evp.h>
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

void kv_cache_free(kv_prefix_cache *c) {
    if (!c->pages) return;
    radix_evict(&c->tree, UINT64_MAX, release_pages, c); /* pinned nodes: none may be left */
    radix_free(&c->tree);
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

uint32_t kv_cache_reclaim(kv_prefix_cache *c, uint32_t want) {
    uint64_t before = c->freed_pages;
    while (kv_pages_free_count(c->pages) < want)
        if (radix_evict(&c->tree, 1, release_pages, c) == 0) break; /* nothing evictable left */
    return (uint32_t)(c->freed_pages - before);
}

void kv_cache_reclaim_hook(void *c, uint32_t want) {
    kv_prefix_cache *pc = c;
    kv_cache_reclaim(pc, kv_pages_free_count(pc->pages) + want);
}
