#include "kv/kv_pages.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

int kv_pages_init(kv_pages *p, uint32_t n_pages, uint32_t page_tokens) {
    *p = (kv_pages){0};
    if (!page_tokens) page_tokens = KV_PAGE_TOKENS_DEFAULT;
    if (n_pages == 0) return cd_fail("kv pages: a pool needs at least one page");
    p->ref = calloc(n_pages, sizeof *p->ref);
    p->free_ids = malloc((size_t)n_pages * sizeof *p->free_ids);
    if (!p->ref || !p->free_ids) {
        kv_pages_free(p);
        return cd_fail("kv pages: out of memory for %u pages", n_pages);
    }
    p->n_pages = n_pages;
    p->page_tokens = page_tokens;
    /* pushed in reverse so the first allocations get pages 0, 1, 2, ... */
    for (uint32_t i = 0; i < n_pages; i++) p->free_ids[i] = n_pages - 1 - i;
    p->n_free = n_pages;
    return 0;
}

void kv_pages_free(kv_pages *p) {
    free(p->ref);
    free(p->free_ids);
    *p = (kv_pages){0};
}

int kv_page_alloc(kv_pages *p, uint32_t *id) {
    if (p->n_free == 0) return cd_fail("kv pages: all %u pages are in use", p->n_pages);
    uint32_t i = p->free_ids[--p->n_free];
    p->ref[i] = 1;
    *id = i;
    return 0;
}

int kv_page_retain(kv_pages *p, uint32_t id) {
    if (id >= p->n_pages) return cd_fail("kv pages: retain of page %u, pool has %u", id, p->n_pages);
    if (p->ref[id] == 0) return cd_fail("kv pages: retain of free page %u", id);
    if (p->ref[id] == UINT32_MAX) return cd_fail("kv pages: page %u has too many holders", id);
    p->ref[id]++;
    return 0;
}

int kv_page_release(kv_pages *p, uint32_t id) {
    if (id >= p->n_pages) return cd_fail("kv pages: release of page %u, pool has %u", id, p->n_pages);
    if (p->ref[id] == 0) return cd_fail("kv pages: release of free page %u", id);
    if (--p->ref[id] == 0) p->free_ids[p->n_free++] = id;
    return 0;
}

int kv_pages_check(const kv_pages *p) {
    if (p->n_free > p->n_pages) return cd_fail("kv check: %u free of %u pages", p->n_free, p->n_pages);
    uint8_t *seen = calloc(p->n_pages ? p->n_pages : 1, 1);
    if (!seen) return cd_fail("kv check: out of memory");
    int rc = 0;
    for (uint32_t i = 0; i < p->n_free && !rc; i++) {
        uint32_t id = p->free_ids[i];
        if (id >= p->n_pages) rc = cd_fail("kv check: free list entry %u is page %u (out of range)", i, id);
        else if (seen[id]) rc = cd_fail("kv check: page %u twice on the free list", id);
        else if (p->ref[id]) rc = cd_fail("kv check: page %u on the free list with %u holders", id, p->ref[id]);
        else seen[id] = 1;
    }
    for (uint32_t id = 0; id < p->n_pages && !rc; id++)
        if (p->ref[id] == 0 && !seen[id]) rc = cd_fail("kv check: page %u has no holders but is not free", id);
    free(seen);
    return rc;
}

static int seq_reserve(kv_seq *s, uint32_t n) {
    if (n <= s->cap) return 0;
    uint32_t cap = s->cap ? s->cap : 8;
    while (cap < n) cap = cap > UINT32_MAX / 2 ? n : cap * 2;
    uint32_t *pages = realloc(s->pages, (size_t)cap * sizeof *pages);
    if (!pages) return cd_fail("kv seq: out of memory for a block table of %u pages", n);
    s->pages = pages;
    s->cap = cap;
    return 0;
}

void kv_seq_free(kv_pages *p, kv_seq *s) {
    for (uint32_t i = 0; i < s->n_pages; i++) kv_page_release(p, s->pages[i]);
    free(s->pages);
    *s = (kv_seq){0};
}

int kv_seq_append(kv_pages *p, kv_seq *s, uint32_t n, kv_cow *cow) {
    kv_cow c = {0};
    if (cow) *cow = c;
    if (n == 0) return 0;
    if ((uint64_t)s->n_tokens + n > UINT32_MAX) return cd_fail("kv seq: more than 2^32 tokens");
    uint32_t pt = p->page_tokens, used = s->n_tokens % pt;
    uint32_t have = s->n_pages, need = kv_pages_for(p, s->n_tokens + n);
    bool shared_tail = used && p->ref[s->pages[have - 1]] > 1;
    uint32_t fresh = need - have + (shared_tail ? 1 : 0);
    if (fresh > p->n_free)
        return cd_fail("kv pages: need %u free pages, %u of %u are free", fresh, p->n_free, p->n_pages);
    if (shared_tail && !cow) return cd_fail("kv seq: last page is shared and no kv_cow was given");
    if (seq_reserve(s, need)) return -1;
    if (shared_tail) { /* copy on write: a fresh page replaces the shared one */
        c.src = s->pages[have - 1];
        if (kv_page_alloc(p, &c.dst)) return -1; /* cannot fail: checked above */
        c.n_tokens = used;
        s->pages[have - 1] = c.dst;
        kv_page_release(p, c.src);
        *cow = c;
    }
    for (uint32_t i = have; i < need; i++)
        if (kv_page_alloc(p, &s->pages[i])) return -1; /* cannot fail: checked above */
    s->n_pages = need;
    s->n_tokens += n;
    return 0;
}

int kv_seq_fork(kv_pages *p, const kv_seq *src, kv_seq *dst) {
    if (dst == src || dst->n_pages) return cd_fail("kv seq: fork into a sequence that is not empty");
    if (seq_reserve(dst, src->n_pages)) return -1;
    for (uint32_t i = 0; i < src->n_pages; i++)
        if (kv_page_retain(p, src->pages[i])) {
            while (i--) kv_page_release(p, src->pages[i]);
            return -1;
        }
    if (src->n_pages) memcpy(dst->pages, src->pages, (size_t)src->n_pages * sizeof *dst->pages);
    dst->n_pages = src->n_pages;
    dst->n_tokens = src->n_tokens;
    return 0;
}

int kv_seq_attach(kv_pages *p, kv_seq *s, const uint32_t *pages, uint32_t n, uint32_t n_tokens) {
    uint32_t pt = p->page_tokens;
    if (n == 0 && n_tokens == 0) return 0;
    if (s->n_tokens % pt) return cd_fail("kv seq: attach after a partly filled page");
    if (n == 0 || n_tokens > (uint64_t)n * pt || n_tokens <= (uint64_t)(n - 1) * pt)
        return cd_fail("kv seq: %u tokens do not fill %u pages of %u", n_tokens, n, pt);
    if ((uint64_t)s->n_tokens + n_tokens > UINT32_MAX) return cd_fail("kv seq: more than 2^32 tokens");
    if (seq_reserve(s, s->n_pages + n)) return -1;
    for (uint32_t i = 0; i < n; i++)
        if (kv_page_retain(p, pages[i])) {
            while (i--) kv_page_release(p, pages[i]);
            return -1;
        }
    memcpy(s->pages + s->n_pages, pages, (size_t)n * sizeof *pages);
    s->n_pages += n;
    s->n_tokens += n_tokens;
    return 0;
}

int kv_seq_truncate(kv_pages *p, kv_seq *s, uint32_t n_tokens) {
    if (n_tokens > s->n_tokens) return cd_fail("kv seq: truncate to %u of %u tokens", n_tokens, s->n_tokens);
    uint32_t keep = kv_pages_for(p, n_tokens);
    for (uint32_t i = keep; i < s->n_pages; i++) kv_page_release(p, s->pages[i]);
    s->n_pages = keep;
    s->n_tokens = n_tokens;
    return 0;
}
