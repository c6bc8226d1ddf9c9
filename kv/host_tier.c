#include "kv/host_tier.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"

#define MIB (1024.0 * 1024.0)

int kv_host_init(kv_host_tier *h, cvk_ctx *vk, const cvk_buffer *pool, uint64_t page_bytes, uint64_t budget_bytes) {
    *h = (kv_host_tier){.vk = vk, .pool = pool, .page_bytes = page_bytes};
    if (!page_bytes || pool->size % page_bytes)
        return cd_fail("host tier: the pool is not whole pages of %llu bytes", (unsigned long long)page_bytes);
    uint64_t n = budget_bytes / page_bytes;
    if (n == 0)
        return cd_fail("host tier: %.1f MiB holds no KV page of %.2f MiB (raise --host-cache-mb)", budget_bytes / MIB,
                       page_bytes / MIB);
    if (n > UINT32_MAX) n = UINT32_MAX;
    h->n_slots = (uint32_t)n;
    uint64_t bytes = n * page_bytes;
    if (cvk_buffer_create(&vk->mem, &h->slots, bytes, page_bytes, CVK_MEM_READBACK)) {
        cd_fail_ctx("host tier: cannot allocate %.1f MiB of host-visible memory for %u KV pages (--host-cache-mb): ",
                    bytes / MIB, h->n_slots);
        kv_host_free(h);
        return -1;
    }
    if (!h->slots.host_visible) {
        kv_host_free(h);
        return cd_fail("host tier: the device gave no host-visible memory for %.1f MiB of KV slots", bytes / MIB);
    }
    h->free_ids = malloc((size_t)h->n_slots * sizeof *h->free_ids);
    if (!h->free_ids) {
        kv_host_free(h);
        return cd_fail("host tier: out of memory for %u slot ids", (unsigned)n);
    }
    for (uint32_t i = 0; i < h->n_slots; i++) h->free_ids[i] = h->n_slots - 1 - i; /* slot 0 on top */
    h->n_free = h->n_slots;
    h->async = vk->dev.copies.sem != VK_NULL_HANDLE;
    for (uint32_t i = 0; i < (h->async ? KV_HOST_RING : 1); i++) {
        if (cvk_cmd_init(&h->ring[i], &vk->dev, h->async)) {
            kv_host_free(h);
            return -1;
        }
        h->ring[i].async = h->async;
    }
    return 0;
}

void kv_host_free(kv_host_tier *h) {
    if (!h->vk) return;
    kv_host_sync(h); /* nothing is destroyed under a copy (cvk_cmd_free waits for its fence too) */
    for (uint32_t i = 0; i < KV_HOST_RING; i++)
        if (h->ring[i].dev) cvk_cmd_free(&h->ring[i]);
    cvk_buffer_destroy(&h->vk->mem, &h->slots);
    free(h->free_ids);
    memset(h, 0, sizeof *h);
}

int kv_host_slot_alloc(kv_host_tier *h, uint32_t *id) {
    if (!h->n_free) return cd_fail("host tier: all %u slots are in use", h->n_slots);
    *id = h->free_ids[--h->n_free];
    return 0;
}

void kv_host_slot_free(kv_host_tier *h, uint32_t id) {
    if (id < h->n_slots && h->n_free < h->n_slots) h->free_ids[h->n_free++] = id;
}

void *kv_slot_ptr(const cvk_buffer *buf, uint64_t page_bytes, uint32_t id) {
    if (!page_bytes || (uint64_t)id >= buf->size / page_bytes) return NULL;
    uint64_t per_part = buf->part_bytes / page_bytes;
    uint8_t *p = cvk_buffer_host_ptr(buf, (uint32_t)(id / per_part));
    return p ? p + (id % per_part) * page_bytes : NULL;
}

void *kv_host_slot_ptr(const kv_host_tier *h, uint32_t id) {
    return id < h->n_slots ? kv_slot_ptr(&h->slots, h->page_bytes, id) : NULL;
}

static int check_ids(const cvk_buffer *pool, const cvk_buffer *buf, uint64_t pb, const uint32_t *pages,
                     const uint32_t *slots, uint32_t n) {
    uint64_t n_pages = pool->size / pb, n_slots = buf->size / pb;
    for (uint32_t i = 0; i < n; i++)
        if (pages[i] >= n_pages || slots[i] >= n_slots)
            return cd_fail("KV page copy: page %u (of %llu) <-> slot %u (of %llu) out of range", pages[i],
                           (unsigned long long)n_pages, slots[i], (unsigned long long)n_slots);
    return 0;
}

static int record_copies(cvk_cmd *cmd, const cvk_buffer *pool, const cvk_buffer *buf, uint64_t pb,
                         const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir) {
    for (uint32_t i = 0; i < n; i++) {
        cvk_view page = cvk_view_range(pool, pages[i] * pb, pb), slot = cvk_view_range(buf, slots[i] * pb, pb);
        if (cvk_cmd_copy(cmd, dir == KV_HOST_DEMOTE ? page : slot, dir == KV_HOST_DEMOTE ? slot : page)) {
            cvk_cmd_end(cmd);
            return -1;
        }
    }
    return 0;
}

/* One batch on cmd (compute queue), waited for; ids checked by the caller. */
static int copy_sync(cvk_cmd *cmd, const cvk_buffer *pool, const cvk_buffer *buf, uint64_t pb, const uint32_t *pages,
                     const uint32_t *slots, uint32_t n, enum kv_host_dir dir) {
    if (cvk_cmd_begin(cmd)) return -1;
    /* earlier compute (prefill, decode) wrote the pages a demotion reads, or reads the pages a
     * restore overwrites: order the copies after it (earlier async copies: cvk_cmd_submit waits
     * for them) */
    cvk_barrier_compute_to_transfer(cmd->cb);
    if (record_copies(cmd, pool, buf, pb, pages, slots, n, dir)) return -1;
    if (dir == KV_HOST_DEMOTE) cvk_barrier_device_to_host(cmd->cb); /* the slots are host memory */
    else cvk_barrier_transfer_to_compute(cmd->cb);
    if (cvk_cmd_run(cmd))
        return cd_fail_ctx("copying %u KV pages %s: ", n, dir == KV_HOST_DEMOTE ? "to the host" : "to the GPU");
    return 0;
}

int kv_copy_pages(cvk_cmd *cmd, const cvk_buffer *pool, const cvk_buffer *buf, uint64_t pb, const uint32_t *pages,
                  const uint32_t *slots, uint32_t n, enum kv_host_dir dir) {
    if (n == 0) return 0;
    if (check_ids(pool, buf, pb, pages, slots, n)) return -1;
    return copy_sync(cmd, pool, buf, pb, pages, slots, n, dir);
}

/* One batch on the transfer queue, not waited for; the ordering is the header's. */
static int copy_async(kv_host_tier *h, const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir) {
    cvk_cmd *cmd = &h->ring[h->next];
    h->next = (h->next + 1) % KV_HOST_RING;
    if (cvk_cmd_begin(cmd)) return -1; /* waits for this command buffer's previous batch */
    /* earlier batches on this queue: a slot a restore read may be written now (it was freed by
     * radix_restore and taken by this demotion), a page a demotion read may be restored into.
     * Compute is ordered by the semaphore wait cvk_cmd_submit adds. */
    cvk_barrier_transfer_to_transfer(cmd->cb);
    if (record_copies(cmd, h->pool, &h->slots, h->page_bytes, pages, slots, n, dir)) return -1;
    /* the host reads the slots (demotion), or a host-visible pool (restore; lavapipe, UMA), after
     * kv_host_sync */
    cvk_barrier_transfer_to_host(cmd->cb);
    if (cvk_cmd_submit(cmd)) return -1;
    h->last = cmd->signalled;
    return 0;
}

int kv_host_copy(kv_host_tier *h, const uint32_t *pages, const uint32_t *slots, uint32_t n, enum kv_host_dir dir) {
    if (n == 0) return 0;
    if (check_ids(h->pool, &h->slots, h->page_bytes, pages, slots, n)) return cd_fail_ctx("host tier: ");
#ifdef CINDER_FAULT_INJECTION
    if (h->fail_copies) {
        h->fail_copies--;
        return cd_fail("host tier: copy failed (injected)");
    }
#endif
    double t0 = cd_now_ms();
    int rc = h->async ? copy_async(h, pages, slots, n, dir)
                      : copy_sync(&h->ring[0], h->pool, &h->slots, h->page_bytes, pages, slots, n, dir);
    if (rc) return cd_fail_ctx("host tier: ");
    double ms = cd_now_ms() - t0;
    uint64_t pb = h->page_bytes;
    if (dir == KV_HOST_DEMOTE) h->bytes_to_host += n * pb, h->batches_to_host++, h->ms_to_host += ms;
    else h->bytes_to_gpu += n * pb, h->batches_to_gpu++, h->ms_to_gpu += ms;
    return 0;
}

int kv_host_sync(kv_host_tier *h) {
    if (!h->async || !h->last) return 0;
    double t0 = cd_now_ms();
    int rc = cvk_device_wait_copies(&h->vk->dev, h->last);
    h->ms_sync += cd_now_ms() - t0;
    return rc ? cd_fail_ctx("host tier: waiting for the copies: ") : 0;
}
