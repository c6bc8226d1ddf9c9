#include "runtime/vk/vk_probe.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"
#include "shaders/shaders.h"

enum {
    MAX_BYTES = 256u << 20, /* a few hundred MB: far past any GPU's last-level cache */
    ALU_GROUPS_MAX = 4096,  /* 1M threads: several full waves on the biggest GPUs */
    ALU_ITERS_MAX = 1u << 22,
};

/* What one probe run holds: its own command buffer, timer and descriptor pool, so the
 * context's are left as they were. */
typedef struct probe_rt {
    cvk_ctx *x;
    cvk_probe_opts o;
    cvk_cmd cmd;
    cvk_timer timer;
    cvk_descpool dp;
    uint32_t wg;
    bool gpu_timed;
} probe_rt;

uint64_t cvk_probe_default_bytes(const cvk_device *d) {
    uint64_t b = MAX_BYTES, range = d->info.caps.max_storage_range & ~((1ull << 20) - 1);
    if (range && range < b) b = range;
    const VkPhysicalDeviceMemoryProperties *m = &d->info.mem;
    for (uint32_t h = 0; h < m->memoryHeapCount; h++) /* never more than 1/8 of the device heap */
        if ((m->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && m->memoryHeaps[h].size / 8 < b)
            b = (m->memoryHeaps[h].size / 8) & ~((1ull << 20) - 1);
    return b ? b : 1u << 20;
}

static void rt_close(probe_rt *r) {
    cvk_cmd_free(&r->cmd);
    if (r->timer.dev) cvk_timer_free(&r->timer);
    if (r->dp.dev) cvk_descpool_free(&r->dp);
}

static int rt_open(probe_rt *r, cvk_ctx *x, const cvk_probe_opts *o) {
    memset(r, 0, sizeof *r);
    r->x = x;
    if (o) r->o = *o;
    if (!r->o.bytes) r->o.bytes = cvk_probe_default_bytes(&x->dev);
    if (!r->o.repeats) r->o.repeats = 5;
    if (!(r->o.min_ms > 0)) r->o.min_ms = 10;
    if (r->o.bytes < 4096 || r->o.bytes % 16)
        return cd_fail("probe: buffer size %llu is not a multiple of 16 of at least 4096",
                       (unsigned long long)r->o.bytes);
    const cvk_caps *c = &x->dev.info.caps;
    if (r->o.bytes > c->max_storage_range) /* one binding, one mapping: no split buffers to time */
        return cd_fail("probe: %llu bytes do not fit one storage binding (maxStorageBufferRange %llu)",
                       (unsigned long long)r->o.bytes, (unsigned long long)c->max_storage_range);
    r->wg = c->max_wg_invocations >= 256 && c->max_wg_size[0] >= 256 ? 256 : 128; /* 128: the Vulkan minimum */
    if (cvk_cmd_init(&r->cmd, &x->dev, false) || cvk_timer_init(&r->timer, &x->dev, 1) ||
        cvk_descpool_init(&r->dp, &x->dev, 0)) {
        rt_close(r);
        return -1;
    }
    r->gpu_timed = cvk_timer_enable(&r->timer, true) == 0;
    if (!r->gpu_timed) cd_errclear(); /* no timestamps: host time instead, not an error */
    r->cmd.timer = &r->timer;
    return 0;
}

static int make_pipeline(probe_rt *r, cvk_pipeline *p, const char *name, const uint32_t *spv, size_t size,
                         uint32_t n_bindings, uint32_t push_size) {
    uint32_t spec[1] = {r->wg};
    cvk_pipeline_desc d = {.name = name,
                           .spv = spv,
                           .spv_size = size,
                           .n_bindings = n_bindings,
                           .push_size = push_size,
                           .spec = spec,
                           .n_spec = 1};
    return cvk_pipeline_create(p, &r->x->dev, r->x->pcache.cache, &d);
}

/* Records and runs one dispatch; *ms is its GPU time (host time without timestamps). The
 * barrier first orders the previous run's writes to the same buffers before this one's. */
static int timed_dispatch(probe_rt *r, const cvk_pipeline *p, VkDescriptorSet set, const void *push, uint32_t groups,
                          double *ms) {
    if (cvk_cmd_begin(&r->cmd)) return -1;
    cvk_barrier_compute_to_compute(r->cmd.cb);
    cvk_cmd_label_begin(&r->cmd, p->name);
    cvk_cmd_dispatch(&r->cmd, p, set, push, groups, 1, 1);
    cvk_cmd_label_end(&r->cmd);
    double t0 = cd_now_ms();
    if (cvk_cmd_run(&r->cmd)) return -1;
    *ms = cd_now_ms() - t0;
    if (!r->gpu_timed) return 0;
    cvk_timing t;
    uint32_t n = 0;
    if (cvk_timer_read(&r->timer, &t, 1, &n)) return -1;
    if (n == 1 && t.end_ns > t.start_ns) *ms = (double)(t.end_ns - t.start_ns) / 1e6;
    return 0;
}

/* The shortest of one warm-up and `repeats` timed runs (the warm-up is not counted). */
static int best_dispatch(probe_rt *r, const cvk_pipeline *p, VkDescriptorSet set, const void *push, uint32_t groups,
                         double *best) {
    *best = 0;
    for (uint32_t i = 0; i <= r->o.repeats; i++) {
        double ms;
        if (timed_dispatch(r, p, set, push, groups, &ms)) return -1;
        if (i > 0 && (*best == 0 || ms < *best)) *best = ms;
    }
    if (!(*best > 0)) return cd_fail("probe %s: the run took no measurable time", p->name);
    return 0;
}

static double gbps(uint64_t bytes, double ms) { return ms > 0 ? (double)bytes / (ms * 1e6) : 0; }

/* Grid of the memory kernels: each thread handles about `per_thread` vec4s of n. */
static uint32_t mem_groups(const probe_rt *r, uint64_t n, uint32_t per_thread) {
    uint64_t g = (n + (uint64_t)r->wg * per_thread - 1) / ((uint64_t)r->wg * per_thread);
    uint64_t max = r->x->dev.info.caps.max_wg_count[0] < 65535 ? r->x->dev.info.caps.max_wg_count[0] : 65535;
    return (uint32_t)(g < 1 ? 1 : g > max ? max : g);
}

/* Fills b with a non-zero pattern so the read kernel sums real data (one submission). */
static int fill(probe_rt *r, cvk_buffer *b) {
    if (cvk_cmd_begin(&r->cmd) || cvk_cmd_fill(&r->cmd, cvk_view_whole(b), 0x3c003c00u)) return -1;
    cvk_barrier_transfer_to_compute(r->cmd.cb);
    return cvk_cmd_run(&r->cmd);
}

static int memory_probes(probe_rt *r, cvk_buffer *src, cvk_buffer *dst, cvk_buffer *part, cvk_probe *out) {
    cvk_pipeline copy = {0}, read = {0};
    uint64_t bytes = r->o.bytes, n = bytes / 16;
    uint32_t gc = mem_groups(r, n, 4), gr = mem_groups(r, n, 8);
    cvk_probe_mem_push pc = {(uint32_t)n};
    VkDescriptorSet s_copy, s_read;
    double ms;
    int rc = -1;
    if (make_pipeline(r, &copy, "probe_copy", cinder_spv_probe_copy, cinder_spv_probe_copy_size, 2, sizeof pc) ||
        make_pipeline(r, &read, "probe_read", cinder_spv_probe_read, cinder_spv_probe_read_size, 2, sizeof pc))
        goto done;
    cvk_view vc[2] = {cvk_view_whole(src), cvk_view_whole(dst)}, vr[2] = {cvk_view_whole(src), cvk_view_whole(part)};
    if (cvk_descset(&r->dp, &copy, vc, &s_copy) || cvk_descset(&r->dp, &read, vr, &s_read) || fill(r, src)) goto done;
    if (best_dispatch(r, &copy, s_copy, &pc, gc, &ms)) goto done;
    out->copy_gbps = gbps(2 * bytes, ms);
    if (best_dispatch(r, &read, s_read, &pc, gr, &ms)) goto done;
    out->read_gbps = gbps(bytes, ms);
    rc = 0;
done:
    cvk_pipeline_destroy(&r->x->dev, &copy);
    cvk_pipeline_destroy(&r->x->dev, &read);
    return rc;
}

int cvk_probe_memory(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out) {
    probe_rt r;
    if (rt_open(&r, x, o)) return -1;
    cvk_buffer src = {0}, dst = {0}, part = {0};
    uint64_t bytes = r.o.bytes;
    int rc = -1;
    /* granule 16: one part each whenever bytes fits one binding (the default size does) */
    if (cvk_buffer_create(&x->mem, &src, bytes, 16, CVK_MEM_DEVICE) ||
        cvk_buffer_create(&x->mem, &dst, bytes, 16, CVK_MEM_DEVICE) ||
        cvk_buffer_create(&x->mem, &part, 65536 * sizeof(float), 4, CVK_MEM_DEVICE))
        goto done;
    if (src.n_parts != 1) {
        cd_fail("probe: %llu bytes do not fit one storage binding", (unsigned long long)bytes);
        goto done;
    }
    rc = memory_probes(&r, &src, &dst, &part, out);
    out->bytes = bytes;
    out->gpu_timed = r.gpu_timed;
done:
    rt_close(&r); /* waits for the device before the buffers go */
    cvk_buffer_destroy(&x->mem, &src);
    cvk_buffer_destroy(&x->mem, &dst);
    cvk_buffer_destroy(&x->mem, &part);
    return rc ? cd_fail_ctx("device bandwidth probe: ") : 0;
}

/* ---- host <-> device ---- */

/* One copy on the transfer queue, timed on the host from submit to fence. The barrier first
 * orders the previous copy into the same buffer before this one; the last one makes a
 * download visible to the host. */
static int timed_copy(cvk_cmd *c, cvk_buffer *src, cvk_buffer *dst, bool to_host, double *ms) {
    if (cvk_cmd_begin(c)) return -1;
    cvk_barrier_transfer_to_transfer(c->cb);
    if (cvk_cmd_copy(c, cvk_view_whole(src), cvk_view_whole(dst))) return -1;
    if (to_host) cvk_barrier_transfer_to_host(c->cb);
    double t0 = cd_now_ms();
    if (cvk_cmd_run(c)) return -1;
    *ms = cd_now_ms() - t0;
    return 0;
}

static int best_copy(cvk_cmd *c, uint32_t repeats, cvk_buffer *src, cvk_buffer *dst, bool to_host, double *gb) {
    double best = 0, ms;
    for (uint32_t i = 0; i <= repeats; i++) {
        if (timed_copy(c, src, dst, to_host, &ms)) return -1;
        if (i > 0 && (best == 0 || ms < best)) best = ms;
    }
    *gb = gbps(src->size, best);
    return 0;
}

/* memcpy between host memory and a mapping: the first copy (page faults, first touch) is
 * not timed. */
static double best_memcpy(void *dst, const void *src, uint64_t bytes, uint32_t repeats) {
    double best = 0;
    for (uint32_t i = 0; i <= repeats; i++) {
        double t0 = cd_now_ms();
        memcpy(dst, src, bytes);
        double ms = cd_now_ms() - t0;
        if (i > 0 && (best == 0 || ms < best)) best = ms;
    }
    return gbps(bytes, best > 0 ? best : 1e-6);
}

static int transfer_probes(probe_rt *r, cvk_cmd *xfer, cvk_buffer *up, cvk_buffer *dev, cvk_buffer *down, uint8_t *host,
                           cvk_probe *out) {
    uint64_t bytes = r->o.bytes;
    if (best_copy(xfer, r->o.repeats, up, dev, false, &out->h2d_staged_gbps) ||
        best_copy(xfer, r->o.repeats, dev, down, true, &out->d2h_staged_gbps))
        return -1;
    uint8_t *w = cvk_buffer_host_ptr(up, 0), *rd = cvk_buffer_host_ptr(down, 0);
    if (!w || !rd) return cd_fail("probe: staging buffers are not mapped");
    out->h2d_mapped_gbps = best_memcpy(w, host, bytes, r->o.repeats);
    out->d2h_mapped_gbps = best_memcpy(host, rd, bytes, r->o.repeats);
    return 0;
}

int cvk_probe_transfer(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out) {
    probe_rt r;
    if (rt_open(&r, x, o)) return -1;
    uint64_t bytes = r.o.bytes;
    cvk_buffer up = {0}, dev = {0}, down = {0};
    cvk_cmd xfer = {0};
    uint8_t *host = malloc(bytes);
    int rc = -1;
    if (!host) {
        cd_fail("out of memory (%llu bytes)", (unsigned long long)bytes);
        goto done;
    }
    memset(host, 0x5a, bytes); /* touched: the host side of the copies is resident */
    if (cvk_buffer_create(&x->mem, &up, bytes, 16, CVK_MEM_UPLOAD) ||
        cvk_buffer_create(&x->mem, &dev, bytes, 16, CVK_MEM_DEVICE) ||
        cvk_buffer_create(&x->mem, &down, bytes, 16, CVK_MEM_READBACK) || cvk_cmd_init(&xfer, &x->dev, true))
        goto done;
    if (up.n_parts != 1 || down.n_parts != 1) {
        cd_fail("probe: %llu bytes do not fit one mapping", (unsigned long long)bytes);
        goto done;
    }
    memcpy(cvk_buffer_host_ptr(&up, 0), host, bytes); /* what the staged upload carries */
    rc = transfer_probes(&r, &xfer, &up, &dev, &down, host, out);
done:
    cvk_cmd_free(&xfer);
    rt_close(&r);
    cvk_buffer_destroy(&x->mem, &up);
    cvk_buffer_destroy(&x->mem, &dev);
    cvk_buffer_destroy(&x->mem, &down);
    free(host);
    return rc ? cd_fail_ctx("transfer probe: ") : 0;
}

/* ---- arithmetic ---- */

/* Grows the grid (groups first, up to ALU_GROUPS_MAX, then iterations) until one run takes
 * at least min_ms, then keeps the best of `repeats` runs at that size: ops per second / 1e9.
 * *iters is the iteration count field of the push block at push (its first uint32). */
static int alu_rate(probe_rt *r, const cvk_pipeline *p, VkDescriptorSet set, void *push, double ops_per_iter,
                    double *gops) {
    uint32_t groups = 64, *iters = push;
    *iters = 64;
    double ms = 0;
    for (;;) {
        if (timed_dispatch(r, p, set, push, groups, &ms)) return -1;
        if (ms >= r->o.min_ms || *iters >= ALU_ITERS_MAX) break;
        double f = ms > 0 ? 1.2 * r->o.min_ms / ms : 64;
        uint32_t k = f < 2 ? 2 : f > 64 ? 64 : (uint32_t)(f + 0.999);
        if (groups < ALU_GROUPS_MAX) groups = groups * k < ALU_GROUPS_MAX ? groups * k : ALU_GROUPS_MAX;
        else *iters = *iters * k < ALU_ITERS_MAX ? *iters * k : ALU_ITERS_MAX;
    }
    if (best_dispatch(r, p, set, push, groups, &ms)) return -1;
    double ops = ops_per_iter * (double)*iters * (double)groups * r->wg;
    *gops = ops / (ms * 1e6);
    return 0;
}

static int alu_probe(probe_rt *r, cvk_buffer *o, const char *name, const uint32_t *spv, size_t size, void *push,
                     uint32_t push_size, double ops_per_iter, double *gops) {
    cvk_pipeline p = {0};
    VkDescriptorSet set;
    cvk_view v = cvk_view_whole(o);
    int rc = make_pipeline(r, &p, name, spv, size, 1, push_size) || cvk_descset(&r->dp, &p, &v, &set) ||
            alu_rate(r, &p, set, push, ops_per_iter, gops)
        ? -1
        : 0;
    cvk_cmd_wait(&r->cmd);
    cvk_pipeline_destroy(&r->x->dev, &p);
    return rc ? cd_fail_ctx("%s: ", name) : 0;
}

static int compute_probes(probe_rt *r, cvk_buffer *o, cvk_probe *out) {
    const cvk_caps *c = &r->x->dev.info.caps;
    /* 8 chains x vec4 = 32 FMAs = 64 FLOP per iteration; m < 1 keeps the chains finite */
    cvk_probe_alu_push fp = {.m = 0.999f, .c = 1e-3f};
    if (alu_probe(r, o, "probe_fma32", cinder_spv_probe_fma32, cinder_spv_probe_fma32_size, &fp, sizeof fp, 64,
                  &out->fp32_gflops))
        return -1;
    fp = (cvk_probe_alu_push){.m = 0.999f, .c = 1e-3f};
    if (c->fp16 &&
        alu_probe(r, o, "probe_fma16", cinder_spv_probe_fma16, cinder_spv_probe_fma16_size, &fp, sizeof fp, 64,
                  &out->fp16_gflops))
        return -1;
    /* 8 chains x one dot4 (4 multiply-adds = 8 ops) per iteration */
    cvk_probe_dot_push dp = {.b = 0x01ff02feu};
    if (c->int_dot &&
        alu_probe(r, o, "probe_dot8", cinder_spv_probe_dot8, cinder_spv_probe_dot8_size, &dp, sizeof dp, 64,
                  &out->int8_gops))
        return -1;
    return 0;
}

int cvk_probe_compute(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out) {
    probe_rt r;
    if (rt_open(&r, x, o)) return -1;
    cvk_buffer buf = {0};
    out->fp16_gflops = out->int8_gops = 0;
    int rc = cvk_buffer_create(&x->mem, &buf, (uint64_t)ALU_GROUPS_MAX * r.wg * 4, 4, CVK_MEM_DEVICE)
        ? -1
        : compute_probes(&r, &buf, out);
    out->gpu_timed = r.gpu_timed;
    rt_close(&r);
    cvk_buffer_destroy(&x->mem, &buf);
    return rc ? cd_fail_ctx("arithmetic probe: ") : 0;
}

int cvk_probe_run(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out) {
    memset(out, 0, sizeof *out);
    if (cvk_probe_memory(x, o, out) || cvk_probe_transfer(x, o, out) || cvk_probe_compute(x, o, out)) return -1;
    return 0;
}
