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
 * what they were recorded with).
 *
 * For profiles (cinder profile) a span carries more than its label: its kind (a group of
 * work, or the one dispatch or copy that cvk_cmd wraps in a span of its own when a timer
 * records), its depth and enclosing span, the layer set by cvk_timer_layer, and the work it
 * does (cvk_work: a role such as "ffn_up_exps", bytes moved, FLOPs, shape), described by
 * cvk_timer_work just before the op that opens the group span. Timestamps at BOTTOM_OF_PIPE
 * do not order work: two dispatches with no barrier between them may overlap, and the later
 * one's span then starts when the earlier one ends. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_device.h"

enum cvk_span_kind { CVK_SPAN_GROUP, CVK_SPAN_DISPATCH, CVK_SPAN_COPY };

/* What a span's work moves and computes (the model's accounting, runtime/model/step_cost.h);
 * zeros when not described. */
typedef struct cvk_work {
    const char *role;      /* e.g. "attn_q", "ffn_down_exps" (a literal); NULL: the label */
    uint64_t bytes, flops; /* bytes read + written at least once, floating-point operations */
    uint32_t m, n, k;      /* shape: output rows, tokens (or vectors), inner size */
} cvk_work;

typedef struct cvk_timing {
    const char *label;
    uint64_t start_ns, end_ns; /* device clock, ns; only differences are meaningful */
    uint8_t kind;              /* enum cvk_span_kind */
    uint8_t depth;             /* 0: top level */
    uint32_t parent;           /* index of the enclosing span, UINT32_MAX at the top */
    int32_t layer;             /* cvk_timer_layer when it began; -1 outside the layers */
    cvk_work work;
} cvk_timing;

typedef struct cvk_timer {
    cvk_device *dev;
    VkQueryPool pool;
    uint32_t cap;      /* spans per recording */
    uint32_t used;     /* spans begun in the current recording */
    uint32_t dropped;  /* spans beyond cap (not timed) */
    cvk_timing *spans; /* per span: everything but the timestamps until read */
    uint32_t stack[8], depth;
    bool enabled, recording;
    int32_t layer;               /* stamped on spans begun from now on */
    cvk_work next_work;          /* for the next group span begun */
    uint32_t dispatches, copies; /* recorded in this recording (timed or dropped) */
} cvk_timer;

int cvk_timer_init(cvk_timer *t, cvk_device *d, uint32_t max_spans);
void cvk_timer_free(cvk_timer *t);
/* -1 (and stays off) when the compute queue cannot write timestamps. */
int cvk_timer_enable(cvk_timer *t, bool on);
void cvk_timer_reset(cvk_timer *t, VkCommandBuffer cb);
void cvk_timer_begin(cvk_timer *t, VkCommandBuffer cb, const char *label);
void cvk_timer_end(cvk_timer *t, VkCommandBuffer cb);
void cvk_timer_begin_kind(cvk_timer *t, VkCommandBuffer cb, const char *label, enum cvk_span_kind kind);
/* Whether spans are being recorded now (describing work costs nothing otherwise). */
static inline bool cvk_timer_on(const cvk_timer *t) { return t && t->recording; }
/* The layer stamped on the spans begun next (-1: none). */
static inline void cvk_timer_layer(cvk_timer *t, int32_t layer) {
    if (t) t->layer = layer;
}
/* Describes the work of the next group span begun (the op's own span). */
static inline void cvk_timer_work(cvk_timer *t, const cvk_work *w) {
    if (cvk_timer_on(t)) t->next_work = *w;
}
/* Results of the last recording, once its submission has completed; *n spans. */
int cvk_timer_read(cvk_timer *t, cvk_timing *out, uint32_t max, uint32_t *n);
