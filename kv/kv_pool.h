/* The device KV page pool: the pages' bytes on the GPU (layout: runtime/base/kv_layout.h), their
 * reference counts and free list (kv_pages.h), and copy on write. kv/ owns it; the engine
 * reserves a sequence's pages here before a forward pass, and the model's pass only reads and
 * writes the buffer through the block tables it is given: it never allocates or evicts.
 *
 *   kv_pool p;
 *   kv_pool_init(&p, vk, &layout, pool_tokens);      every page free
 *   kv_seq s; kv_seq_init(&s);
 *   if (kv_pool_pages_needed(&p, &s, n) > kv_pages_free_count(&p.pages)) ... reclaim first
 *   kv_pool_extend(&p, &s, n);                        pages for n more tokens; a shared partly
 *                                                     filled last page is copied first (COW)
 *   ... forward passes write tokens [s.n_tokens - n, s.n_tokens) into s.pages ...
 *   kv_seq_free(&p.pages, &s); kv_pool_free(&p);
 *
 * The prefix cache (prefix_cache.h) and its host and disk tiers take p.pages and p.buf.
 * Errors: -1 with cd_errmsg(). Not thread-safe. */
#pragma once
#include <stdint.h>

#include "kv/kv_pages.h"
#include "runtime/base/kv_layout.h"
#include "runtime/vk/vk_ctx.h"

typedef struct kv_pool {
    cvk_ctx *vk;
    kv_layout lay;
    kv_pages pages; /* which page holds what, and who holds it */
    cvk_buffer buf; /* pages.n_pages * lay.page_bytes of fp16 K/V, device-local */
    cvk_cmd copy;   /* page copies (copy on write) */
} kv_pool;

/* Pages for n_tokens tokens (rounded up to whole pages), all free. */
int kv_pool_init(kv_pool *p, cvk_ctx *vk, const kv_layout *lay, uint32_t n_tokens);
void kv_pool_free(kv_pool *p); /* zeroed or partly initialized is fine */

/* Free pages kv_pool_extend(p, s, n) takes: the new pages, plus one when s's partly filled
 * last page is shared (it is copied). */
uint32_t kv_pool_pages_needed(const kv_pool *p, const kv_seq *s, uint32_t n);
/* Grows s by n tokens, all or nothing; a shared partly filled last page is copied on the device
 * (waits) before anything writes into it. Too few free pages: -1, s unchanged. */
int kv_pool_extend(kv_pool *p, kv_seq *s, uint32_t n);
/* Copies page src's K/V (every layer, every slot) into page dst on the device; waits. */
int kv_pool_copy_page(kv_pool *p, uint32_t src, uint32_t dst);
