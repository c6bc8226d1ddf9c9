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
 * Copies are asynchronous where the device has timeline semaphores (caps.timeline): a batch is
 * recorded into one of a ring of KV_HOST_RING command buffers on the transfer queue, submitted
 * with a signal of the device's copies timeline (vk_device.h), and kv_host_copy returns without
 * waiting. The ordering the caller relies on is kept on the GPU instead:
 *   - the copy starts after all compute submitted before it (it waits for the compute
 *     timeline), so a demotion reads the pages as the prefill/decode left them, and a restore
 *     overwrites fresh pages only after earlier readers of them are done;
 *   - every later submit on the compute queue (prefill, decode, the COW page copy, the disk
 *     tier's copies) and on the transfer queue (the stager) waits for the copies timeline
 *     first, so a demoted page handed back to the pool at once is overwritten only after the
 *     copy read it, and a restored page is read only after the copy wrote it;
 *   - batches follow one another on one queue, each opening with a transfer->transfer barrier:
 *     a slot freed by a restore (radix_restore's host_free) and reused by a later demotion is
 *     written after the restore read it, and a page freed by a demotion and restored into is
 *     written after the demotion read it.
 * The CPU is not ordered by any of that: kv_host_sync (waits for every batch submitted) comes
 * before the host reads or writes slot bytes (kv_host_slot_ptr). kv_host_free syncs first.
 * A command buffer of the ring is reused only after its fence, so back-to-back batches do not
 * wait for one another on the host unless the ring is full.
 * On a device with a transfer-only queue family (NVIDIA copy engines, AMD SDMA) the copies
 * overlap compute; with one queue (lavapipe) transfer_queue == compute_queue and they run
 * in submission order between compute submissions: nothing overlaps, the host still does not
 * wait. Without timeline semaphores the copies are synchronous, as before: recorded on the
 * compute queue, the host waits for the fence.
 *
 * Memory: CVK_MEM_READBACK is host-visible, coherent and preferably cached system memory; the
 * budget is a byte count (--host-cache-mb). When the device cannot give that much host-visible
 * memory, kv_host_init fails with a message naming the size (never a silent smaller tier).
 *
 *   kv_host_tier h;
 *   kv_host_init(&h, vk, &pool.buf, pool.lay.page_bytes, 256ull << 20);   (kv_pool.h)
 *   uint32_t s; kv_host_slot_alloc(&h, &s);
 *   kv_host_copy(&h, pages, slots, n, KV_HOST_DEMOTE);       pages[i] -> slots[i]
 *   kv_host_copy(&h, pages, slots, n, KV_HOST_RESTORE);      slots[i] -> pages[i]
 *   kv_host_sync(&h);                                        before the CPU touches slot bytes
 *   kv_host_slot_free(&h, s); kv_host_free(&h);
 *
 * Errors: -1 with cd_errmsg(). Not thread-safe. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_ctx.h"

enum kv_host_dir { KV_HOST_DEMOTE, KV_HOST_RESTORE };
#define KV_HOST_RING 3 /* command buffers in flight */

typedef struct kv_host_tier {
    cvk_ctx *vk;
    const cvk_buffer *pool; /* the GPU page pool (not owned) */
    uint64_t page_bytes;
    cvk_buffer slots; /* n_slots * page_bytes, host-visible, granule page_bytes */
    uint32_t n_slots;
    uint32_t *free_ids; /* stack of free slot ids: free_ids[0 .. n_free) */
    uint32_t n_free;
    bool async;                 /* caps.timeline: transfer queue, no host wait (see above) */
    cvk_cmd ring[KV_HOST_RING]; /* the copy batches: async, or ring[0] alone on the compute queue */
    uint32_t next;              /* the ring's next command buffer */
    uint64_t last;              /* async: the copies value of the last batch submitted */
    /* statistics since init */
    uint64_t bytes_to_host, bytes_to_gpu;
    uint64_t batches_to_host, batches_to_gpu;
    /* host wall time of kv_host_copy: async, record + submit (the GPU copies later, not
     * timed); synchronous, record + submit + fence wait */
    double ms_to_host, ms_to_gpu;
    double ms_sync;           /* host wall time spent in kv_host_sync */
#ifdef CINDER_FAULT_INJECTION /* a test build's hook (CMakeLists.txt, CINDER_TESTS) */
    /* the next fail_copies calls of kv_host_copy fail before touching anything, as a lost
     * device or a failed submission would */
    uint32_t fail_copies;
#endif
} kv_host_tier;

/* A tier of floor(budget_bytes / page_bytes) slots (at least one) copying to and from pool. */
int kv_host_init(kv_host_tier *h, cvk_ctx *vk, const cvk_buffer *pool, uint64_t page_bytes, uint64_t budget_bytes);
void kv_host_free(kv_host_tier *h); /* zeroed is fine */

int kv_host_slot_alloc(kv_host_tier *h, uint32_t *id); /* -1 when none is free */
void kv_host_slot_free(kv_host_tier *h, uint32_t id);
static inline uint32_t kv_host_free_count(const kv_host_tier *h) { return h->n_free; }
static inline uint32_t kv_host_used(const kv_host_tier *h) { return h->n_slots - h->n_free; }

/* Copies n pages between the GPU pool and the slots, pages[i] <-> slots[i], in one command
 * buffer. Async: returns once submitted; later GPU work is ordered after it (see above), the
 * host is not. Synchronous: returns after the copy completed. */
int kv_host_copy(kv_host_tier *h, const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir);
/* Waits on the host for every copy submitted so far (no-op when synchronous or none pending). */
int kv_host_sync(kv_host_tier *h);
/* Host pointer to a slot's bytes (tests); kv_host_sync before touching them. */
void *kv_host_slot_ptr(const kv_host_tier *h, uint32_t id);

/* The synchronous copy machinery under kv_host_copy, for any host-visible buffer of page-sized
 * slots (made with granule page_bytes): the host tier's slots (without timeline semaphores) and
 * the disk tier's staging buffer use it. pages[i] of pool <-> slot slots[i] of buf, one command
 * buffer on cmd (the compute queue), waits. KV_HOST_DEMOTE
 * copies pool -> buf, KV_HOST_RESTORE buf -> pool. Ids are checked against both sizes. */
int kv_copy_pages(cvk_cmd *cmd, const cvk_buffer *pool, const cvk_buffer *buf, uint64_t page_bytes,
                  const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir);
/* Host pointer to slot id of such a buffer; NULL when out of range or not mapped. */
void *kv_slot_ptr(const cvk_buffer *buf, uint64_t page_bytes, uint32_t id);
