/* Elementwise kernels, host side (docs/kernels/eltwise.md):
 *   shaders/swiglu.comp  h[r][i] = silu(g[r][i]) * u[r][i], r < rows, i < n
 * (The residual add has no kernel: the projection before it adds into X, CVK_MATMUL_ACCUMULATE.)
 * silu(x) = x / (1 + exp(-x)) in float, as cpu_silu. Outputs may alias inputs element for
 * element (same view), never shifted. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block of the shader (pinned by tests/test_vk_eltwise.c) */
typedef struct cvk_swiglu_push {
    uint32_t n, rows, g_stride, u_stride, h_stride;
} cvk_swiglu_push;

typedef struct cvk_swiglu_args {
    cvk_view g, u, h; /* f32 rows */
    uint32_t n, rows;
    uint32_t g_stride, u_stride, h_stride; /* floats between rows; 0 means n */
} cvk_swiglu_args;

/* wg: invocations per workgroup (0 = 256). */
int cvk_swiglu_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records one dispatch (no barrier before or after). */
int cvk_swiglu(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_swiglu_args *a);
