/* The host tier: a pool of page-sized slots in host-visible Vulkan memory, where the prefix
 * cache keeps KV pages that GPU eviction would otherwise drop (radix/radix.h, Rules 1-7).
 *
 *   GPU page pool (kv_layout.h)                 host slots (CVK_MEM_READBACK, mapped)
 *   page 0 | page 1 | ... | page n-1             slot 0 | slot 1 | ... | slot n_slots-1
 *            │   ▲                                 ▲  │
 *            │   └──── restore: slot -> page ──────┼──┘    one vkCmdCopyBuffer region per page,
 *            └──────── demote:  page -> slot ──────┘       a batch per command buffer
 *
 * A slot has the pool's page size, so a page moves with one copy of page_bytes (pages are
 * contiguous in the pool, see kv_layout.h). Slot ids come from a free list; the radix tree
 * records which node owns which slot, this file only moves bytes and counts them.
 *
 * Copies are synchronous in this version: kv_host_copy records the batch into one command
 * buffer on the compute queue, submits it and waits for its fence. The caller may therefore
 * reuse a demoted page, or read a restored one, as soon as it returns. Next step: record on the
 * transfer queue and fence per batch, so demotions overlap compute and a restore overlaps the
 * prefill of the suffix.
 *
 * Memory: CVK_MEM_READBACK is host-visible, coherent and preferably cached system memory; the
 * budget is a byte count (--host-cache-mb). When the device cannot give that much host-visible
 * memory, kv_host_init fails with a message naming the size (never a silent smaller tier).
 *
 *   kv_host_tier h;
 *   kv_host_init(&h, vk, &g->pool, g->lay.page_bytes, 256ull << 20);
 *   uint32_t s; kv_host_slot_alloc(&h, &s);
 *   kv_host_copy(&h, pages, slots, n, KV_HOST_DEMOTE);       pages[i] -> slots[i], waits
 *   kv_host_copy(&h, pages, slots, n, KV_HOST_RESTORE);      slots[i] -> pages[i], waits
 *   kv_host_slot_free(&h, s); kv_host_free(&h);
 *
 * Errors: -1 with cd_errmsg(). Not thread-safe. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_ctx.h"

enum kv_host_dir { KV_HOST_DEMOTE, KV_HOST_RESTORE };

typedef struct kv_host_tier {
    cvk_ctx *vk;
    const cvk_buffer *pool;  /* the GPU page pool (not owned) */
    uint64_t page_bytes;
    uint32_t n_pool_pages;   /* pages in the pool (id checks) */
    cvk_buffer slots;        /* n_slots * page_bytes, host-visible, granule page_bytes */
    uint32_t n_slots;
    uint32_t *free_ids;      /* stack of free slot ids: free_ids[0 .. n_free) */
    uint32_t n_free;
    cvk_cmd cmd;             /* the copy batches (compute queue, synchronous) */
    /* statistics since init */
    uint64_t bytes_to_host, bytes_to_gpu;
    uint64_t batches_to_host, batches_to_gpu;
    double ms_to_host, ms_to_gpu; /* host wall time of the copy batches, record to fence */
} kv_host_tier;

/* A tier of floor(budget_bytes / page_bytes) slots (at least one) copying to and from pool. */
int kv_host_init(kv_host_tier *h, cvk_ctx *vk, const cvk_buffer *pool, uint64_t page_bytes, uint64_t budget_bytes);
void kv_host_free(kv_host_tier *h); /* zeroed is fine */

int kv_host_slot_alloc(kv_host_tier *h, uint32_t *id); /* -1 when none is free */
void kv_host_slot_free(kv_host_tier *h, uint32_t id);
static inline uint32_t kv_host_free_count(const kv_host_tier *h) { return h->n_free; }
static inline uint32_t kv_host_used(const kv_host_tier *h) { return h->n_slots - h->n_free; }

/* Copies n pages between the GPU pool and the slots, pages[i] <-> slots[i], in one command
 * buffer; returns after the copy completed. */
int kv_host_copy(kv_host_tier *h, const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir);
/* Host pointer to a slot's bytes (tests). */
void *kv_host_slot_ptr(const kv_host_tier *h, uint32_t id);

/* The copy machinery under kv_host_copy, for any host-visible buffer of page-sized slots (made
 * with granule page_bytes): the host tier's slots and the disk tier's staging buffer both use
 * it. pages[i] of pool <-> slot slots[i] of buf, one command buffer on cmd, waits. KV_HOST_DEMOTE
 * copies pool -> buf, KV_HOST_RESTORE buf -> pool. Ids are checked against both sizes. */
int kv_copy_pages(cvk_cmd *cmd, const cvk_buffer *pool, const cvk_buffer *buf, uint64_t page_bytes,
                  const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir);
/* Host pointer to slot id of such a buffer; NULL when out of range or not mapped. */
void *kv_slot_ptr(const cvk_buffer *buf, uint64_t page_bytes, uint32_t id);
