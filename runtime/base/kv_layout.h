/* Where KV pages live on the device: one pool of fp16 K and V for every layer, page-major.
 *
 *   pool     = page 0 | page 1 | ... | page n_pages-1              (page_bytes each)
 *   page     = [layer][K, V][kv_head][page_tokens][head_dim]       fp16 (IEEE half)
 *
 *   element (page p, layer l, kv = 0 for K / 1 for V, kv head h, slot t, dim d) at half index
 *     p * page_halves + (((l * 2 + kv) * n_head_kv + h) * page_tokens + t) * head_dim + d
 *   page_halves = n_layer * 2 * n_head_kv * page_tokens * head_dim,  page_bytes = 2 * page_halves
 *
 * Why this order:
 *   - Page-major: all of a page's bytes are one contiguous range, so the host tier saves or
 *     restores a page with one copy, and a copy on write (kv_cow) is one copy per layer
 *     range (or of the whole page).
 *   - Inside a page, one (layer, K|V, kv head) is a contiguous [page_tokens][head_dim] tile
 *     (16 x 128 x 2 = 4 KiB for Qwen3-MoE): decode attention reads a page's K rows for its kv
 *     head as one contiguous run, and V rows likewise, so reads are long and coalesced
 *     (neighbouring invocations read neighbouring dims of one V row).
 *   - Writing one token touches 2 * n_head_kv rows of head_dim halves per layer: small and
 *     strided, which is fine for a write of one token per step.
 *
 * Parts. A pool can be larger than one binding sees (maxStorageBufferRange: 128 MiB on
 * lavapipe, 4 GiB on RDNA), so it is a cvk_buffer of parts created with granule = page_bytes
 * (runtime/vk/vk_memory.h): a page never straddles two parts and
 *
 *   pages_per_part = part_bytes / page_bytes
 *   page p lives in part p / pages_per_part at byte (p % pages_per_part) * page_bytes.
 *
 * Kernels bind one part per dispatch and handle only the pages that part holds (push
 * constants page0 = first page of the part, pages = pages in it). Attention therefore treats
 * each part as one more split of its split-K (see docs/kernels/attention.md); on RDNA a pool
 * under 4 GiB is one part. Qwen3-30B-A3B (48 layers, 4 kv heads, head_dim 128): a 16-token
 * page is 1.5 MiB, 85 pages (1360 tokens) per 128 MiB part.
 *
 * Plain C (no Vulkan), shared by the host ops and the tests. */
#pragma once
#include <stdint.h>

#include "runtime/base/error.h"

typedef struct kv_layout {
    uint32_t n_layer, n_head_kv, head_dim, page_tokens;
    uint64_t page_halves; /* fp16 elements per page */
    uint64_t page_bytes;
} kv_layout;

static inline int kv_layout_init(kv_layout *l, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim,
                                 uint32_t page_tokens) {
    if (!n_layer || !n_head_kv || !head_dim || !page_tokens)
        return cd_fail("kv layout: zero dimension (layers %u, kv heads %u, head_dim %u, page tokens %u)", n_layer,
                       n_head_kv, head_dim, page_tokens);
    if (head_dim % 2) return cd_fail("kv layout: head_dim %u is odd (kernels read halves in pairs)", head_dim);
    *l = (kv_layout){n_layer, n_head_kv, head_dim, page_tokens, 0, 0};
    l->page_halves = (uint64_t)n_layer * 2 * n_head_kv * page_tokens * head_dim;
    l->page_bytes = 2 * l->page_halves;
    return 0;
}

/* Half index of (page, layer, kv, head, slot, dim) in the whole pool, per the formula above. */
static inline uint64_t kv_layout_index(const kv_layout *l, uint32_t page, uint32_t layer, uint32_t kv, uint32_t head,
                                       uint32_t slot, uint32_t dim) {
    return (uint64_t)page * l->page_halves +
        ((((uint64_t)layer * 2 + kv) * l->n_head_kv + head) * l->page_tokens + slot) * l->head_dim + dim;
}
