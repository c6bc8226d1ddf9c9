#include "runtime/vk/vk_cmd.h"

#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_fault.h"

#define WAIT_NS (600ull * 1000000000ull) /* a GPU that takes 10 minutes is hung */

int cvk_cmd_init(cvk_cmd *c, cvk_device *d, bool transfer_queue) {
    memset(c, 0, sizeof *c);
    c->dev = d;
    c->queue = transfer_queue ? d->transfer_queue : d->compute_queue;
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = transfer_queue ? d->transfer_family : d->compute_family};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (CVK_CHECK(vkCreateCommandPool(d->dev, &pci, NULL, &c->pool))) goto fail;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = c->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    if (CVK_CHECK(vkAllocateCommandBuffers(d->dev, &ai, &c->cb))) goto fail;
    if (CVK_CHECK(vkCreateFence(d->dev, &fci, NULL, &c->fence))) goto fail;
    return 0;
fail:
    cvk_cmd_free(c);
    return -1;
}

void cvk_cmd_free(cvk_cmd *c) {
    if (!c->dev) return;
    if (c->pending) vkWaitForFences(c->dev->dev, 1, &c->fence, VK_TRUE, WAIT_NS);
    if (c->fence) vkDestroyFence(c->dev->dev, c->fence, NULL);
    if (c->pool) vkDestroyCommandPool(c->dev->dev, c->pool, NULL); /* frees cb */
    memset(c, 0, sizeof *c);
}

static int begin(cvk_cmd *c, VkCommandBufferUsageFlags flags) {
    if (cvk_cmd_wait(c)) return -1;
    /* a recording a failure left unfinished: the reset discards it (valid in the recording state) */
    c->recording = false;
    if (CVK_CHECK(vkResetCommandBuffer(c->cb, 0))) return -1;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = flags};
    if (CVK_CHECK(vkBeginCommandBuffer(c->cb, &bi))) return -1;
    c->recording = true;
    c->bound = VK_NULL_HANDLE;
    c->failed = false;
    cvk_timer_reset(c->timer, c->cb);
    return 0;
}

#ifdef CINDER_FAULT_INJECTION
cvk_faults cvk_fault = {.alloc_at = -1, .submit_at = -1};
#endif

int cvk_cmd_begin(cvk_cmd *c) { return begin(c, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT); }
int cvk_cmd_begin_reusable(cvk_cmd *c) { return begin(c, 0); }

int cvk_cmd_end(cvk_cmd *c) {
    if (!c->recording) return c->failed ? cd_fail("%s", c->failure) : 0;
    c->recording = false;
    if (CVK_CHECK(vkEndCommandBuffer(c->cb))) return -1;
    return c->failed ? cd_fail("%s", c->failure) : 0;
}

int cvk_cmd_submit(cvk_cmd *c) {
    if (cvk_cmd_end(c)) return -1;
    if (c->pending) return cd_fail("command buffer submitted twice without a wait");
    if (CVK_CHECK(vkResetFences(c->dev->dev, 1, &c->fence))) return -1;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c->cb};
    /* the timeline waits and signals of vk_device.h */
    cvk_device *d = c->dev;
    bool on_compute = c->queue == d->compute_queue;
    uint64_t *saw = c->async ? &d->transfer_saw_compute : on_compute ? &d->compute_saw_copies : &d->transfer_saw_copies;
    cvk_timeline *wait = c->async ? &d->compute : &d->copies, *signal = c->async ? &d->copies : &d->compute;
    bool waits = d->copies.sem && wait->value > *saw, signals = d->copies.sem && (c->async || on_compute);
    uint64_t wait_v = wait->value, signal_v = signal->value + 1;
    VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = waits,
                                        .pWaitSemaphoreValues = &wait_v,
                                        .signalSemaphoreValueCount = signals,
                                        .pSignalSemaphoreValues = &signal_v};
    if (waits || signals) {
        si.pNext = &ti;
        si.waitSemaphoreCount = waits;
        si.pWaitSemaphores = &wait->sem;
        si.pWaitDstStageMask = &stage;
        si.signalSemaphoreCount = signals;
        si.pSignalSemaphores = &signal->sem;
    }
    if (CVK_CHECK(cvk_fault_submit() ? VK_ERROR_DEVICE_LOST : vkQueueSubmit(c->queue, 1, &si, c->fence))) return -1;
    c->pending = true;
    if (waits) *saw = wait_v;
    if (signals) signal->value = signal_v;
    if (c->async) c->signalled = signals ? signal_v : 0;
    else c->waited_copies = waits ? wait_v : 0, d->copy_waits += waits;
    return 0;
}

int cvk_cmd_wait(cvk_cmd *c) {
    if (!c->pending) return 0;
    VkResult r = vkWaitForFences(c->dev->dev, 1, &c->fence, VK_TRUE, WAIT_NS);
    if (r == VK_TIMEOUT) return cd_fail("the GPU did not finish within %llu s (hung?)", WAIT_NS / 1000000000ull);
    if (CVK_CHECK(r)) return -1;
    c->pending = false;
    return 0;
}

int cvk_cmd_run(cvk_cmd *c) { return cvk_cmd_submit(c) ? -1 : cvk_cmd_wait(c); }

/* Binds p (when not already bound; compiled first if it is not yet), the set and the push
 * constants of a dispatch. A failed compile fails the recording (c->failed): the dispatch is
 * dropped and cvk_cmd_end says why. */
static bool bind(cvk_cmd *c, const cvk_pipeline *p, VkDescriptorSet set, const void *push) {
    VkPipeline pipe = p->pipe;
    if (!pipe && (c->failed || cvk_pipeline_handle(c->dev, p, &pipe))) {
        if (!c->failed) snprintf(c->failure, sizeof c->failure, "%s", cd_errmsg());
        c->failed = true;
        return false;
    }
    if (c->bound != pipe) {
        vkCmdBindPipeline(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
        c->bound = pipe;
    }
    vkCmdBindDescriptorSets(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    if (p->push_size)
        vkCmdPushConstants(c->cb, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (p->push_size + 3) & ~3u, push);
    return true;
}

void cvk_cmd_dispatch(cvk_cmd *c, const cvk_pipeline *p, VkDescriptorSet set, const void *push, uint32_t gx,
                      uint32_t gy, uint32_t gz) {
    if (!bind(c, p, set, push)) return;
    cvk_timer_begin_kind(c->timer, c->cb, p->name, CVK_SPAN_DISPATCH);
    vkCmdDispatch(c->cb, gx, gy, gz);
    cvk_timer_end(c->timer, c->cb);
}

int cvk_cmd_dispatch_indirect(cvk_cmd *c, const cvk_pipeline *p, VkDescriptorSet set, const void *push, cvk_view args) {
    uint32_t part;
    uint64_t off;
    if (args.size < 12 || cvk_view_locate(&(cvk_view){args.buf, args.off, 12}, &part, &off) || off % 4)
        return cd_fail("indirect dispatch: arguments not 12 aligned bytes in one part");
    if (!bind(c, p, set, push)) return cd_fail("%s", c->failure);
    cvk_timer_begin_kind(c->timer, c->cb, p->name, CVK_SPAN_DISPATCH);
    vkCmdDispatchIndirect(c->cb, args.buf->parts[part].buf, off);
    cvk_timer_end(c->timer, c->cb);
    return 0;
}

/* The largest piece of a view starting at byte `at` that stays inside one part. */
static uint64_t piece(const cvk_view *v, uint64_t at, uint32_t *part, uint64_t *off) {
    uint64_t abs = v->off + at;
    *part = (uint32_t)(abs / v->buf->part_bytes);
    *off = abs - (uint64_t)*part * v->buf->part_bytes;
    uint64_t in_part = v->buf->parts[*part].size - *off, left = v->size - at;
    return in_part < left ? in_part : left;
}

static int view_ok(const cvk_view *v) {
    if (!v->buf || v->off > v->buf->size || v->buf->size - v->off < v->size)
        return cd_fail("view [%llu, +%llu) outside its buffer", (unsigned long long)v->off,
                       (unsigned long long)v->size);
    return 0;
}

int cvk_cmd_copy(cvk_cmd *c, cvk_view src, cvk_view dst) {
    if (src.size != dst.size)
        return cd_fail("copy of %llu bytes into %llu", (unsigned long long)src.size, (unsigned long long)dst.size);
    if (view_ok(&src) || view_ok(&dst)) return -1;
    cvk_timer_begin_kind(c->timer, c->cb, "copy", CVK_SPAN_COPY);
    for (uint64_t at = 0; at < src.size;) {
        uint32_t sp, dp;
        uint64_t so, dof, n = piece(&src, at, &sp, &so), nd = piece(&dst, at, &dp, &dof);
        if (nd < n) n = nd;
        VkBufferCopy region = {so, dof, n};
        vkCmdCopyBuffer(c->cb, src.buf->parts[sp].buf, dst.buf->parts[dp].buf, 1, &region);
        at += n;
    }
    cvk_timer_end(c->timer, c->cb);
    return 0;
}

int cvk_cmd_fill(cvk_cmd *c, cvk_view dst, uint32_t value) {
    if (view_ok(&dst)) return -1;
    if ((dst.off | dst.size) & 3)
        return cd_fail("fill of [%llu, +%llu): not multiples of 4", (unsigned long long)dst.off,
                       (unsigned long long)dst.size);
    for (uint64_t at = 0; at < dst.size;) {
        uint32_t k;
        uint64_t off, n = piece(&dst, at, &k, &off);
        vkCmdFillBuffer(c->cb, dst.buf->parts[k].buf, off, n & ~3ull, value);
        at += n;
    }
    return 0;
}

int cvk_grid_split(const char *op, uint64_t n, uint32_t *lo, uint32_t *hi) {
    uint64_t h = (n + CVK_GRID_MAX - 1) / CVK_GRID_MAX;
    if (h > CVK_GRID_MAX) return cd_fail("%s: %llu workgroups exceed the grid", op, (unsigned long long)n);
    *lo = n < CVK_GRID_MAX ? (uint32_t)n : CVK_GRID_MAX, *hi = (uint32_t)h;
    return 0;
}
