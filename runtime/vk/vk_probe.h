/* Probes of what a device really achieves: memory bandwidth, host<->device transfers, and
 * the fp32 / fp16 / int8-dot arithmetic rates. The device card (tools/device_card.h,
 * `cinder profile --device`) caches the results; profiles relate kernel times to them.
 *
 *   cvk_probe r;
 *   if (cvk_probe_run(vk, NULL, &r)) fail(cd_errmsg());   (NULL: the default sizes below)
 *
 * What each figure is (docs/PROFILE.md, "The device card"):
 *   copy_gbps        shaders/probe_copy.comp: dst = src over `bytes` of device-local memory,
 *                    coalesced vec4 loads and stores; (read + write bytes) / GPU time.
 *   read_gbps        shaders/probe_read.comp: the same buffer read once, summed, one float per
 *                    workgroup written; read bytes / GPU time. The roofline's bandwidth.
 *   h2d_staged_gbps  vkCmdCopyBuffer host-visible staging -> device-local on the transfer
 *   d2h_staged_gbps  queue (the DMA engine where the device has one), and back; bytes / time
 *                    from submit to fence (the stager's path for weights and downloads).
 *   h2d_mapped_gbps  memcpy from host memory into a mapped upload buffer (write-combined on
 *   d2h_mapped_gbps  discrete GPUs), and from a mapped readback buffer into host memory.
 *   fp32_gflops      shaders/probe_fma32.comp: 32 independent FMA chains per thread; 2 FLOP per FMA.
 *   fp16_gflops      shaders/probe_fma16.comp, the same in f16vec4; 0 without caps.fp16.
 *   int8_gops        shaders/probe_dot8.comp, OpSDot on 4 x int8, 8 ops per dot; 0 without caps.int_dot.
 * Every figure is the best of `repeats` timed runs after one untimed warm-up (peaks, as a
 * roofline wants). Kernels are timed by GPU timestamps around the one dispatch when the
 * compute queue has them, else by host time around submit and fence wait. Arithmetic probes
 * grow their grid until one run takes at least min_ms, so a fast GPU is timed over enough
 * work and lavapipe stays quick. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_ctx.h"

/* mirror the push blocks of shaders/probe_*.comp (pinned by tests/test_vk_probe.c) */
typedef struct cvk_probe_mem_push { /* probe_copy, probe_read */
    uint32_t n;                     /* vec4s */
} cvk_probe_mem_push;

typedef struct cvk_probe_alu_push { /* probe_fma32, probe_fma16: x = fma(x, m, c) */
    uint32_t iters;
    float m, c;
} cvk_probe_alu_push;

typedef struct cvk_probe_dot_push { /* probe_dot8 */
    uint32_t iters, b;              /* b: the second operand, 4 packed int8 */
} cvk_probe_dot_push;

typedef struct cvk_probe_opts {
    uint64_t bytes;   /* bandwidth buffer size; 0 = min(256 MiB, maxStorageBufferRange, heap / 8) */
    uint32_t repeats; /* timed runs per figure, best kept; 0 = 5 */
    double min_ms;    /* arithmetic probes: smallest timed run; 0 = 10 ms */
} cvk_probe_opts;

typedef struct cvk_probe {
    double copy_gbps, read_gbps;                /* device-local, GB/s (1e9 bytes/s) */
    double h2d_staged_gbps, d2h_staged_gbps;    /* GB/s */
    double h2d_mapped_gbps, d2h_mapped_gbps;    /* GB/s */
    double fp32_gflops, fp16_gflops, int8_gops; /* 1e9 per second; 0 = not supported */
    uint64_t bytes;                             /* buffer size the bandwidth figures used */
    bool gpu_timed;                             /* kernels timed by GPU timestamps */
} cvk_probe;

/* All of the above, on x's device. Creates and frees its own buffers, pipelines (through the
 * context's pipeline cache), command buffers and descriptor pool; leaves x as it was. */
int cvk_probe_run(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out);

/* The parts, for tests: each fills its fields of out (o as above, NULL for defaults). */
int cvk_probe_memory(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out);   /* copy, read */
int cvk_probe_transfer(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out); /* staged, mapped */
int cvk_probe_compute(cvk_ctx *x, const cvk_probe_opts *o, cvk_probe *out);  /* fp32, fp16, int8 */
/* The buffer size the defaults give on this device. */
uint64_t cvk_probe_default_bytes(const cvk_device *d);
