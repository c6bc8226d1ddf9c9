/* Command buffers: record, submit, wait; dispatch, copy and fill helpers.
 *
 *   cvk_cmd c;  cvk_cmd_init(&c, dev, false);       compute queue (true: transfer queue)
 *   cvk_cmd_begin(&c);                              waits for the previous submission first
 *   cvk_cmd_dispatch(&c, &pipe, set, &push, gx, gy, 1);
 *   cvk_barrier_compute_to_compute(c.cb);           (vk_barrier.h) between dependent steps
 *   cvk_cmd_submit(&c); ... cvk_cmd_wait(&c);       or cvk_cmd_run(&c) for both
 *
 * A command buffer recorded with cvk_cmd_begin_reusable can be submitted again and again
 * (record a decode step once, replay it per token). The fence lets the host wait without
 * vkQueueWaitIdle. Attach a cvk_timer (c.timer) to time labelled spans; cvk_cmd_begin resets
 * it. A recording that a failure left unfinished (an error returned between begin and submit)
 * is discarded by the next begin, so no error path has to end it. One thread per cvk_cmd;
 * queues are shared, so submit from one thread.
 *
 * With timeline semaphores, cvk_cmd_submit orders asynchronous copies on the GPU (the rules are
 * in vk_device.h): a command buffer with `async` set (after init) waits for earlier compute and
 * signals the device's copies timeline (its value in `signalled`); every other submit waits
 * for copies newer than what its queue already waited for (`waited_copies` says which value,
 * 0 for none). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_device.h"
#include "runtime/vk/vk_memory.h"
#include "runtime/vk/vk_pipeline.h"
#include "runtime/vk/vk_timer.h"

typedef struct cvk_cmd {
    cvk_device *dev;
    VkQueue queue;
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    bool recording;         /* between begin and end */
    bool pending;           /* submitted, not yet waited for */
    cvk_timer *timer;       /* optional */
    VkPipeline bound;       /* last pipeline bound in this recording */
    bool failed;            /* a pipeline of this recording failed to compile (vk_pipeline.h) */
    char failure[256];      /* why: cvk_cmd_end and cvk_cmd_submit fail with it */
    bool async;             /* a copy the host need not wait for: signals dev->copies (caps.timeline) */
    uint64_t signalled;     /* async: the copies value the last submit signals */
    uint64_t waited_copies; /* not async: the copies value the last submit waited for, 0 none */
} cvk_cmd;

int cvk_cmd_init(cvk_cmd *c, cvk_device *d, bool transfer_queue);
void cvk_cmd_free(cvk_cmd *c);          /* waits for a pending submission */
int cvk_cmd_begin(cvk_cmd *c);          /* one-time submit */
int cvk_cmd_begin_reusable(cvk_cmd *c); /* may be submitted many times */
int cvk_cmd_end(cvk_cmd *c);
int cvk_cmd_submit(cvk_cmd *c); /* ends the recording if still open */
int cvk_cmd_wait(cvk_cmd *c);   /* no-op when nothing is pending */
int cvk_cmd_run(cvk_cmd *c);    /* submit + wait */

/* Workgroups in one grid dimension that every device takes (the required minimum of
 * maxComputeWorkGroupCount). */
#define CVK_GRID_MAX 65535u
/* A line of n >= 1 workgroups as lo = min(n, CVK_GRID_MAX) by hi = ceil(n / CVK_GRID_MAX): the
 * shader numbers a group hi_id * 65535 + lo_id and skips those from n on. -1 (cd_fail, naming
 * op) where even hi would pass CVK_GRID_MAX. */
int cvk_grid_split(const char *op, uint64_t n, uint32_t *lo, uint32_t *hi);

/* Binds p (when not already bound), the set, pushes p->push_size bytes of push, dispatches. */
void cvk_cmd_dispatch(cvk_cmd *c, const cvk_pipeline *p, VkDescriptorSet set, const void *push, uint32_t gx,
                      uint32_t gy, uint32_t gz);
/* The same with the grid read from a VkDispatchIndirectCommand at args (12 bytes in one part,
 * 4-byte aligned) when the device runs it: written by an earlier kernel (order it with
 * cvk_barrier_compute_to_indirect). */
int cvk_cmd_dispatch_indirect(cvk_cmd *c, const cvk_pipeline *p, VkDescriptorSet set, const void *push, cvk_view args);
/* Copies src to dst (same size), crossing parts on either side as needed. */
int cvk_cmd_copy(cvk_cmd *c, cvk_view src, cvk_view dst);
/* Fills dst with a 32-bit pattern; offset and size must be multiples of 4. */
int cvk_cmd_fill(cvk_cmd *c, cvk_view dst, uint32_t value);
/* Timer spans around what follows (no-ops without an enabled timer). */
static inline void cvk_cmd_label_begin(cvk_cmd *c, const char *label) { cvk_timer_begin(c->timer, c->cb, label); }
static inline void cvk_cmd_label_end(cvk_cmd *c) { cvk_timer_end(c->timer, c->cb); }
