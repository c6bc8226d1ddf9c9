/* GPU timestamps around labelled spans of a command buffer, switchable at run time.
 *
 *   cvk_timer_enable(&t, true);
 *   record:  cvk_timer_reset(&t, cb);                       (once, before the first label)
 *            cvk_timer_begin(&t, cb, "rmsnorm"); ...dispatches...; cvk_timer_end(&t, cb);
 *   submit, wait, then cvk_timer_read(&t, out, max, &n)  -> {label, start_ns, end_ns} each
 *
 * Both timestamps are written at BOTTOM_OF_PIPE: `begin` when all earlier work has finished,
 * `end` when the span's work has, so spans measure the serial time of what they enclose.
 * Spans nest (up to 8 deep). Labels are not copied: pass string literals. A disabled timer,
 * or a NULL one, makes every call a no-op, so ops label their dispatches unconditionally.
 * Enabling or disabling takes effect at the next recording (replayed command buffers keep
 * what they were recorded with). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_device.h"

typedef struct cvk_timing {
    const char *label;
    uint64_t start_ns, end_ns; /* device clock, ns; only differences are meaningful */
} cvk_timing;

typedef struct cvk_timer {
    cvk_device *dev;
    VkQueryPool pool;
    uint32_t cap;            /* spans per recording */
    uint32_t used;           /* spans begun in the current recording */
    uint32_t dropped;        /* spans beyond cap (not timed) */
    const char **labels;     /* per span */
    uint32_t stack[8], depth;
    bool enabled, recording;
} cvk_timer;

int cvk_timer_init(cvk_timer *t, cvk_device *d, uint32_t max_spans);
void cvk_timer_free(cvk_timer *t);
/* -1 (and stays off) when the compute queue cannot write timestamps. */
int cvk_timer_enable(cvk_timer *t, bool on);
void cvk_timer_reset(cvk_timer *t, VkCommandBuffer cb);
void cvk_timer_begin(cvk_timer *t, VkCommandBuffer cb, const char *label);
void cvk_timer_end(cvk_timer *t, VkCommandBuffer cb);
/* Results of the last recording, once its submission has completed; *n spans. */
int cvk_timer_read(cvk_timer *t, cvk_timing *out, uint32_t max, uint32_t *n);
