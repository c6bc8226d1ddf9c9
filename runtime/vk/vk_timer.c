#include "runtime/vk/vk_timer.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"

int cvk_timer_init(cvk_timer *t, cvk_device *d, uint32_t max_spans) {
    memset(t, 0, sizeof *t);
    t->dev = d;
    t->cap = max_spans ? max_spans : 1;
    t->spans = calloc(t->cap, sizeof *t->spans);
    if (!t->spans) return cd_fail("out of memory (timer)");
    if (!d->info.caps.timestamps) return 0; /* stays disabled */
    VkQueryPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = 2 * t->cap};
    if (CVK_CHECK(vkCreateQueryPool(d->dev, &ci, NULL, &t->pool))) {
        cvk_timer_free(t);
        return -1;
    }
    return 0;
}

void cvk_timer_free(cvk_timer *t) {
    if (t->pool) vkDestroyQueryPool(t->dev->dev, t->pool, NULL);
    free(t->spans);
    memset(t, 0, sizeof *t);
}

int cvk_timer_enable(cvk_timer *t, bool on) {
    if (on && !t->pool) {
        t->enabled = false;
        return cd_fail("%s cannot write timestamps on its compute queue", t->dev->info.props.deviceName);
    }
    t->enabled = on;
    return 0;
}

void cvk_timer_reset(cvk_timer *t, VkCommandBuffer cb) {
    if (!t) return;
    t->used = t->dropped = t->depth = t->dispatches = t->copies = 0;
    t->layer = -1;
    t->next_work = (cvk_work){0};
    t->recording = t->enabled;
    if (t->recording) vkCmdResetQueryPool(cb, t->pool, 0, 2 * t->cap);
}

void cvk_timer_begin(cvk_timer *t, VkCommandBuffer cb, const char *label) {
    cvk_timer_begin_kind(t, cb, label, CVK_SPAN_GROUP);
}

void cvk_timer_begin_kind(cvk_timer *t, VkCommandBuffer cb, const char *label, enum cvk_span_kind kind) {
    if (!t || !t->recording) return;
    if (kind == CVK_SPAN_DISPATCH) t->dispatches++;
    if (kind == CVK_SPAN_COPY) t->copies++;
    uint32_t span = UINT32_MAX; /* too many spans or too deep: counted, not timed */
    if (t->used < t->cap && t->depth < 8) {
        span = t->used++;
        cvk_timing *s = &t->spans[span];
        *s = (cvk_timing){.label = label,
                          .kind = (uint8_t)kind,
                          .depth = (uint8_t)t->depth,
                          .layer = t->layer,
                          .parent = t->depth ? t->stack[t->depth - 1] : UINT32_MAX};
        if (kind == CVK_SPAN_GROUP) {
            s->work = t->next_work;
            t->next_work = (cvk_work){0};
        }
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->pool, 2 * span);
    } else {
        t->dropped++;
    }
    if (t->depth < 8) t->stack[t->depth] = span;
    t->depth++;
}

void cvk_timer_end(cvk_timer *t, VkCommandBuffer cb) {
    if (!t || !t->recording || t->depth == 0) return;
    t->depth--;
    uint32_t span = t->depth < 8 ? t->stack[t->depth] : UINT32_MAX;
    /* a described op that opened no span (nothing to do) leaves no description behind */
    if (span != UINT32_MAX && t->spans[span].kind == CVK_SPAN_GROUP) t->next_work = (cvk_work){0};
    if (span != UINT32_MAX) vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, t->pool, 2 * span + 1);
}

int cvk_timer_read(cvk_timer *t, cvk_timing *out, uint32_t max, uint32_t *n) {
    *n = 0;
    if (!t->recording || t->used == 0) return 0;
    if (t->depth) return cd_fail("timer: %u span(s) still open", t->depth);
    uint32_t m = t->used < max ? t->used : max;
    uint64_t *ticks = malloc(2 * (size_t)m * sizeof *ticks);
    if (!ticks) return cd_fail("out of memory (timer)");
    VkResult r = vkGetQueryPoolResults(t->dev->dev, t->pool, 0, 2 * m, 2 * m * sizeof *ticks, ticks, sizeof *ticks,
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (CVK_CHECK(r)) {
        free(ticks);
        return -1;
    }
    uint32_t bits = t->dev->info.caps.timestamp_bits;
    uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    double period = t->dev->info.caps.timestamp_period;
    for (uint32_t i = 0; i < m; i++) {
        out[i] = t->spans[i];
        out[i].start_ns = (uint64_t)((double)(ticks[2 * i] & mask) * period);
        out[i].end_ns = (uint64_t)((double)(ticks[2 * i + 1] & mask) * period);
    }
    free(ticks);
    *n = m;
    return 0;
}
