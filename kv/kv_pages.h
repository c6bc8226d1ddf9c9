/* KV pages: reference-counted page ids and per-sequence block tables. Plain C, no Vulkan:
 * this decides which page holds which tokens; kv_layout.h says where a page's bytes live.
 *
 *   pool of n_pages pages, each holding page_tokens tokens of K and V for every layer
 *
 *   ref[p]     number of holders of page p (sequences, the prefix cache, ...); 0 = free
 *   free list  a stack of exactly the pages with ref 0, each once
 *
 *   kv_page_alloc    take a free page, ref = 1          (-1 with cd_fail when none is free)
 *   kv_page_retain   ref += 1 (page must be held)
 *   kv_page_release  ref -= 1; at 0 the page goes back on the free list
 *
 * A page has no owner: whoever holds a reference keeps it alive. A sequence holds one
 * reference per entry of its block table; a radix prefix cache holds its own reference to each
 * page it indexes, so a page outlives the request that wrote it for as long as the tree keeps
 * it, and returns to the free list when the last of them lets go.
 *
 * Block table of a sequence (kv_seq), n_tokens tokens, page_tokens = 4:
 *
 *   tokens   0 1 2 3 | 4 5 6 7 | 8 9
 *   pages    [  17   ] [   3   ] [ 42 . . ]      pages = {17, 3, 42}, n_tokens = 10
 *
 *   token t lives in page pages[t / page_tokens], slot t % page_tokens.
 *
 * Fork shares every page (ref += 1 each). The shared pages are read-only from then on: full
 * pages are never written again, and the partly filled last page is copied on the first
 * append (copy on write): kv_seq_append swaps in a fresh page and reports {src, dst, n_tokens}
 * in a kv_cow so the caller copies those tokens' K/V on the device before writing new ones.
 *
 * Errors: allocation failure, exhaustion and misuse (retaining a free page, releasing an
 * unheld one) return -1 with cd_errmsg() set, and leave the pool and the sequence as they
 * were (an append that runs out of pages part way gives back what it took). Never aborts.
 * Not thread-safe. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define KV_PAGE_TOKENS_DEFAULT 16

typedef struct kv_pages {
    uint32_t n_pages;     /* pages in the pool */
    uint32_t page_tokens; /* tokens per page */
    uint32_t *ref;        /* [n_pages] holders of each page; 0 = free */
    uint32_t *free_ids;   /* [n_pages] stack: free_ids[0..n_free) are the free pages */
    uint32_t n_free;
} kv_pages;

/* page_tokens 0 = KV_PAGE_TOKENS_DEFAULT. All pages start free. */
int kv_pages_init(kv_pages *p, uint32_t n_pages, uint32_t page_tokens);
void kv_pages_free(kv_pages *p); /* zeroed pools are fine */

int kv_page_alloc(kv_pages *p, uint32_t *id);
int kv_page_retain(kv_pages *p, uint32_t id);
int kv_page_release(kv_pages *p, uint32_t id);
static inline uint32_t kv_page_refs(const kv_pages *p, uint32_t id) { return id < p->n_pages ? p->ref[id] : 0; }
static inline uint32_t kv_pages_free_count(const kv_pages *p) { return p->n_free; }
/* Pages needed to hold n tokens. */
static inline uint32_t kv_pages_for(const kv_pages *p, uint32_t n) {
    return (uint32_t)(((uint64_t)n + p->page_tokens - 1) / p->page_tokens);
}

/* The pool's own invariants: free list = exactly the pages with ref 0, no duplicates, ids in
 * range. -1 with a message naming the first violation. O(n_pages). */
int kv_pages_check(const kv_pages *p);

typedef struct kv_seq {
    uint32_t *pages;  /* block table: pages[i] holds tokens [i*page_tokens, (i+1)*page_tokens) */
    uint32_t n_pages; /* == kv_pages_for(pool, n_tokens) */
    uint32_t cap;
    uint32_t n_tokens;
} kv_seq;

/* A copy the caller must make on the device before writing into dst: tokens [0, n_tokens)
 * of page src to the same slots of page dst. n_tokens == 0: nothing to copy. */
typedef struct kv_cow {
    uint32_t src, dst, n_tokens;
} kv_cow;

static inline void kv_seq_init(kv_seq *s) { *s = (kv_seq){0}; }
/* Releases every page of the table and empties it (the struct may be reused). */
void kv_seq_free(kv_pages *p, kv_seq *s);
/* Grows the sequence by n tokens, allocating pages as needed; all or nothing. cow may be NULL
 * only when the caller knows the last page is not shared; *cow is always written. */
int kv_seq_append(kv_pages *p, kv_seq *s, uint32_t n, kv_cow *cow);
/* dst (empty or freed) becomes a copy of src's table, sharing every page by reference. */
int kv_seq_fork(kv_pages *p, const kv_seq *src, kv_seq *dst);
/* Appends n already-written pages (e.g. a prefix-cache match) to a sequence whose token count
 * is a whole number of pages, taking a reference to each; n_tokens grows by n_tokens (at most
 * n * page_tokens, more than (n - 1) * page_tokens). */
int kv_seq_attach(kv_pages *p, kv_seq *s, const uint32_t *pages, uint32_t n, uint32_t n_tokens);
/* Shrinks to n_tokens (<= current), releasing pages no longer needed. */
int kv_seq_truncate(kv_pages *p, kv_seq *s, uint32_t n_tokens);
