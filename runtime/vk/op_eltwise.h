/* Elementwise kernels, host side (docs/kernels/eltwise.md):
 *   shaders/add.comp     y[i] = a[i] + b[i], i < n        (residual: a = y, b = x, y += x)
 *   shaders/swiglu.comp  h[r][i] = silu(g[r][i]) * u[r][i], r < rows, i < n
 * silu(x) = x / (1 + exp(-x)) in float, as cpu_silu. Outputs may alias inputs element for
 * element (same view), never shifted. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirror the push blocks of the shaders (pinned by tests/test_vk_eltwise.c) */
typedef struct cvk_add_push {
    uint32_t n;
} cvk_add_push;

typedef struct cvk_swiglu_push {
    uint32_t n, rows, g_stride, u_stride, h_stride;
} cvk_swiglu_push;

typedef struct cvk_add_args {
    cvk_view a, b, y; /* f32, n each */
    uint32_t n;
} cvk_add_args;

typedef struct cvk_swiglu_args {
    cvk_view g, u, h;                     /* f32 rows */
    uint32_t n, rows;
    uint32_t g_stride, u_stride, h_stride; /* floats between rows; 0 means n */
} cvk_swiglu_args;

/* wg: invocations per workgroup (0 = 256). */
int cvk_add_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
int cvk_swiglu_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Record one dispatch each (no barrier before or after). */
int cvk_add(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_add_args *a);
int cvk_swiglu(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_swiglu_args *a);
