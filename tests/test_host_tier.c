/* The host tier's asynchronous copies (kv/host_tier.h, the timeline rules of vk_device.h), at
 * the kv/vk level, without the engine:
 *   - a demotion, then at once (no host wait) a compute-queue fill of the same pages: the slots
 *     hold the old bytes, the pages the new ones;
 *   - a restore, then at once a compute-queue copy out of the restored pages: it reads the
 *     restored bytes; a restore, then at once a stager download of the pages;
 *   - a slot read by a restore and written by the next demotion, a page read by a demotion and
 *     written by the next restore, back to back: each write comes after the read;
 *   - the semaphore bookkeeping itself: values increase by one per batch, a copy waits for the
 *     compute submitted before it, the next compute (or stager) submit waits for the copies and
 *     the one after it does not, kv_host_sync waits for the last value;
 *   - the synchronous fallback (no timeline semaphores): the same copies, the host waits.
 * With one queue (lavapipe) the data tests pass by submission order alone; the bookkeeping test
 * is what fails there when a wait is missing. The pages are 256 KiB so that on a GPU with a
 * transfer queue a missing wait has time to show. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/host_tier.h"
#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#define N_PAGES 16
#define PB (256u << 10)
#define WORDS (PB / 4)

typedef struct tier {
    cvk_buffer pool;
    kv_host_tier h;
} tier;

static void tier_init(tier *t, uint32_t n_slots) {
    if (cvk_buffer_create(&vk->mem, &t->pool, (uint64_t)N_PAGES * PB, PB, CVK_MEM_DEVICE) ||
        kv_host_init(&t->h, vk, &t->pool, PB, (uint64_t)n_slots * PB))
        fail_msg("%s", cd_errmsg());
    assert_int_equal(t->h.async, vk->dev.info.caps.timeline);
}

static void tier_free(tier *t) {
    kv_host_free(&t->h);
    cvk_buffer_destroy(&vk->mem, &t->pool);
}

static uint32_t pattern(uint32_t base, uint32_t page) { return base ^ (page * 0x01010101u); }

/* Fills pages[0..n) with pattern(base, page) on the compute queue; returns the copies value
 * that submit waited for (0: none). */
static uint64_t fill_pages(tier *t, const uint32_t *pages, uint32_t n, uint32_t base) {
    cvk_cmd *c = &vk->cmd;
    if (cvk_cmd_begin(c)) fail_msg("%s", cd_errmsg());
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(
            cvk_cmd_fill(c, cvk_view_range(&t->pool, (uint64_t)pages[i] * PB, PB), pattern(base, pages[i])), 0);
    cvk_barrier_device_to_host(c->cb);
    if (cvk_cmd_run(c)) fail_msg("%s", cd_errmsg());
    return c->waited_copies;
}

/* Copies page src[i] to page dst[i] on the compute queue; the same return. */
static uint64_t copy_pages(tier *t, const uint32_t *src, const uint32_t *dst, uint32_t n) {
    cvk_cmd *c = &vk->cmd;
    if (cvk_cmd_begin(c)) fail_msg("%s", cd_errmsg());
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(cvk_cmd_copy(c, cvk_view_range(&t->pool, (uint64_t)src[i] * PB, PB),
                                      cvk_view_range(&t->pool, (uint64_t)dst[i] * PB, PB)),
                         0);
    cvk_barrier_device_to_host(c->cb);
    if (cvk_cmd_run(c)) fail_msg("%s", cd_errmsg());
    return c->waited_copies;
}

static void expect_words(const uint32_t *w, uint32_t value, const char *what, uint32_t id) {
    for (uint32_t i = 0; i < WORDS; i++)
        if (w[i] != value) fail_msg("%s %u: word %u is %08x, expected %08x", what, id, i, w[i], value);
}

static void expect_slot(tier *t, uint32_t slot, uint32_t value) {
    expect_words(kv_host_slot_ptr(&t->h, slot), value, "slot", slot);
}

static void set_slot(tier *t, uint32_t slot, uint32_t value) {
    uint32_t *w = kv_host_slot_ptr(&t->h, slot);
    for (uint32_t i = 0; i < WORDS; i++) w[i] = value;
}

static void expect_page(tier *t, uint32_t page, uint32_t value) {
    uint32_t *w = malloc(PB);
    if (cvk_stager_download(&vk->stager, cvk_view_range(&t->pool, (uint64_t)page * PB, PB), w))
        fail_msg("%s", cd_errmsg());
    expect_words(w, value, "page", page);
    free(w);
}

/* A demotion not waited for, then a compute-queue fill of the same pages. */
static void test_demote_then_overwrite(void **st) {
    (void)st;
    tier t;
    tier_init(&t, 8);
    uint32_t all[N_PAGES], pages[4] = {3, 5, 7, 9}, slots[4];
    for (uint32_t i = 0; i < N_PAGES; i++) all[i] = i;
    fill_pages(&t, all, N_PAGES, 0xA0000000u);
    for (uint32_t i = 0; i < 4; i++) assert_int_equal(kv_host_slot_alloc(&t.h, &slots[i]), 0);
    assert_int_equal(kv_host_copy(&t.h, pages, slots, 4, KV_HOST_DEMOTE), 0);
    uint64_t waited = fill_pages(&t, pages, 4, 0xB0000000u); /* the pages are the pool's again */
    if (t.h.async) assert_int_equal(waited, t.h.last);       /* ... after the copy read them */
    assert_int_equal(kv_host_sync(&t.h), 0);
    for (uint32_t i = 0; i < 4; i++) {
        expect_slot(&t, slots[i], pattern(0xA0000000u, pages[i]));
        expect_page(&t, pages[i], pattern(0xB0000000u, pages[i]));
    }
    assert_int_equal(t.h.bytes_to_host, 4ull * PB);
    assert_int_equal(t.h.batches_to_host, 1);
    tier_free(&t);
}

/* A restore not waited for, then a compute-queue copy out of the restored pages. */
static void test_restore_then_read(void **st) {
    (void)st;
    tier t;
    tier_init(&t, 8);
    uint32_t all[N_PAGES], pages[4] = {2, 4, 6, 8}, out[4] = {10, 11, 12, 13}, slots[4];
    for (uint32_t i = 0; i < N_PAGES; i++) all[i] = i;
    fill_pages(&t, all, N_PAGES, 0xC0000000u);
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(kv_host_slot_alloc(&t.h, &slots[i]), 0);
        set_slot(&t, slots[i], 0xD0000000u + i);
    }
    assert_int_equal(kv_host_copy(&t.h, pages, slots, 4, KV_HOST_RESTORE), 0);
    uint64_t waited = copy_pages(&t, pages, out, 4); /* a prefill reading the restored pages */
    if (t.h.async) assert_int_equal(waited, t.h.last);
    for (uint32_t i = 0; i < 4; i++) {
        expect_page(&t, out[i], 0xD0000000u + i);
        expect_page(&t, pages[i], 0xD0000000u + i);
    }
    /* again, read at once by the stager: a direct read of a host-visible pool (lavapipe, UMA)
     * waits on the host for the copies, a staged one on the GPU */
    assert_int_equal(kv_host_sync(&t.h), 0);
    for (uint32_t i = 0; i < 4; i++) set_slot(&t, slots[i], 0xF0000000u + i);
    assert_int_equal(kv_host_copy(&t.h, pages, slots, 4, KV_HOST_RESTORE), 0);
    for (uint32_t i = 0; i < 4; i++) expect_page(&t, pages[i], 0xF0000000u + i);
    assert_int_equal(t.h.bytes_to_gpu, 8ull * PB);
    tier_free(&t);
}

/* Back-to-back batches reusing what the one before read: a slot freed by a restore and taken
 * by the next demotion, a page freed by a demotion and restored into. */
static void test_reuse_back_to_back(void **st) {
    (void)st;
    tier t;
    tier_init(&t, 4);
    uint32_t all[N_PAGES];
    for (uint32_t i = 0; i < N_PAGES; i++) all[i] = i;
    fill_pages(&t, all, N_PAGES, 0xE0000000u);
    for (int round = 0; round < 3; round++) {
        uint32_t s0 = 0, s1 = 1, s2 = 2, p1 = 1, p2 = 2, p4 = 4;
        assert_int_equal(kv_host_sync(&t.h), 0);
        set_slot(&t, s0, 0x11111111u + round);
        set_slot(&t, s2, 0x22222222u + round);
        /* slot 0: restored into page 1, then at once written by a demotion of page 2 */
        assert_int_equal(kv_host_copy(&t.h, &p1, &s0, 1, KV_HOST_RESTORE), 0);
        assert_int_equal(kv_host_copy(&t.h, &p2, &s0, 1, KV_HOST_DEMOTE), 0);
        /* page 4: demoted to slot 1, then at once restored into from slot 2 */
        assert_int_equal(kv_host_copy(&t.h, &p4, &s1, 1, KV_HOST_DEMOTE), 0);
        uint32_t page4_before = round == 0 ? pattern(0xE0000000u, 4) : 0x22222222u + round - 1;
        assert_int_equal(kv_host_copy(&t.h, &p4, &s2, 1, KV_HOST_RESTORE), 0);
        assert_int_equal(kv_host_sync(&t.h), 0);
        expect_page(&t, 1, 0x11111111u + round);
        expect_slot(&t, 0, pattern(0xE0000000u, 2));
        expect_slot(&t, 1, page4_before);
        expect_page(&t, 4, 0x22222222u + round);
    }
    tier_free(&t);
}

/* The timeline bookkeeping of cvk_cmd_submit (vk_device.h). */
static void test_semaphore_bookkeeping(void **st) {
    (void)st;
    if (!vk->dev.info.caps.timeline)
        tu_skip("no timeline semaphores: the copies are synchronous, the asynchronous path is not tested");
    tier t;
    tier_init(&t, 8);
    cvk_device *d = &vk->dev;
    uint32_t page = 0, slot = 0;
    uint64_t v0 = d->copies.value;
    fill_pages(&t, &page, 1, 1);
    uint64_t c0 = d->compute.value;
    assert_true(c0 > 0);                              /* every compute submit signals */
    assert_int_equal(fill_pages(&t, &page, 1, 2), 0); /* no copy pending: no wait */
    assert_int_equal(d->compute.value, c0 + 1);
    uint64_t waits0 = d->copy_waits;

    assert_int_equal(kv_host_copy(&t.h, &page, &slot, 1, KV_HOST_DEMOTE), 0);
    assert_int_equal(t.h.last, v0 + 1);
    assert_int_equal(d->copies.value, v0 + 1);
    assert_int_equal(d->transfer_saw_compute, c0 + 1); /* the copy waited for the fill before it */
    assert_int_equal(kv_host_copy(&t.h, &page, &slot, 1, KV_HOST_DEMOTE), 0);
    assert_int_equal(t.h.last, v0 + 2);
    assert_int_equal(d->transfer_saw_compute, c0 + 1); /* no compute since: nothing new to wait for */
    assert_int_equal(d->compute.value, c0 + 1);        /* copies signal only their own timeline */

    assert_int_equal(fill_pages(&t, &page, 1, 3), v0 + 2); /* waits for the newest copy */
    assert_int_equal(d->copy_waits, waits0 + 1);
    assert_int_equal(d->compute_saw_copies, v0 + 2);
    assert_int_equal(fill_pages(&t, &page, 1, 4), 0); /* already waited for: no wait */
    assert_int_equal(d->copy_waits, waits0 + 1);

    /* more batches than the ring holds, back to back: consecutive values */
    for (uint32_t k = 0; k < 2 * KV_HOST_RING + 1; k++) {
        uint32_t dir = k & 1 ? KV_HOST_RESTORE : KV_HOST_DEMOTE;
        assert_int_equal(kv_host_copy(&t.h, &page, &slot, 1, dir), 0);
        assert_int_equal(t.h.last, v0 + 3 + k);
        assert_int_equal(t.h.next, (3 + k) % KV_HOST_RING); /* the ring turns */
    }
    uint64_t last = t.h.last;
    assert_int_equal(t.h.batches_to_host + t.h.batches_to_gpu, last - v0);

    /* a stager submit (the transfer queue's other user) waits too */
    cvk_buffer small;
    uint32_t bytes[64] = {0};
    assert_int_equal(cvk_buffer_create(&vk->mem, &small, sizeof bytes, 4, CVK_MEM_DEVICE), 0);
    vk->stager.force_staging = true;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&small), bytes), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    vk->stager.force_staging = false;
    uint64_t sw = vk->stager.slot[0].cmd.waited_copies > vk->stager.slot[1].cmd.waited_copies
        ? vk->stager.slot[0].cmd.waited_copies
        : vk->stager.slot[1].cmd.waited_copies;
    assert_int_equal(sw, last);
    cvk_buffer_destroy(&vk->mem, &small);

    /* the host: kv_host_sync waits for the last value, once */
    assert_int_equal(kv_host_sync(&t.h), 0);
    assert_int_equal(d->host_saw_copies, last);
    uint64_t done = 0;
    assert_int_equal(vkGetSemaphoreCounterValue(d->dev, d->copies.sem, &done), VK_SUCCESS);
    assert_true(done >= last);
    tier_free(&t);
}

/* Without timeline semaphores: synchronous copies on the compute queue, no semaphore touched. */
static void test_sync_fallback(void **st) {
    (void)st;
    cvk_device *d = &vk->dev;
    VkSemaphore saved = d->copies.sem;
    uint64_t copies = d->copies.value, compute = d->compute.value;
    d->copies.sem = VK_NULL_HANDLE; /* what a device without caps.timeline has */
    tier t;
    if (cvk_buffer_create(&vk->mem, &t.pool, (uint64_t)N_PAGES * PB, PB, CVK_MEM_DEVICE) ||
        kv_host_init(&t.h, vk, &t.pool, PB, 4ull * PB))
        fail_msg("%s", cd_errmsg());
    assert_false(t.h.async);
    assert_true(t.h.ring[0].queue == d->compute_queue);
    uint32_t pages[2] = {5, 6}, slots[2] = {0, 1}, out[2] = {7, 8};
    fill_pages(&t, pages, 2, 0x33000000u);
    assert_int_equal(kv_host_copy(&t.h, pages, slots, 2, KV_HOST_DEMOTE), 0);
    for (uint32_t i = 0; i < 2; i++) expect_slot(&t, slots[i], pattern(0x33000000u, pages[i])); /* no sync needed */
    set_slot(&t, 0, 0x44444444u);
    set_slot(&t, 1, 0x55555555u);
    assert_int_equal(kv_host_copy(&t.h, out, slots, 2, KV_HOST_RESTORE), 0);
    expect_page(&t, 7, 0x44444444u);
    expect_page(&t, 8, 0x55555555u);
    assert_int_equal(kv_host_sync(&t.h), 0);
    assert_int_equal(d->copies.value, copies);
    assert_int_equal(d->compute.value, compute);
    tier_free(&t);
    d->copies.sem = saved;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demote_then_overwrite), cmocka_unit_test(test_restore_then_read),
        cmocka_unit_test(test_reuse_back_to_back),    cmocka_unit_test(test_semaphore_bookkeeping),
        cmocka_unit_test(test_sync_fallback),
    };
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER"));
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
