/* RMS norm kernel (shaders/rmsnorm.comp), host side:
 *   y[r][i] = x[r][i] / sqrt(mean_i x[r][i]^2 + eps) * w[i]     for r < rows, i < n
 * x and y hold rows of x_stride / y_stride floats; y may be x (in place). One workgroup per
 * row: use it for the per-token norms (n = n_embd) and the per-head q/k norms (n = head_dim,
 * rows = tokens * heads, stride = head_dim). */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/rmsnorm.comp (pinned by tests/test_vk_rmsnorm.c) */
typedef struct cvk_rmsnorm_push {
    uint32_t n, rows, x_stride, y_stride;
    float eps;
} cvk_rmsnorm_push;

typedef struct cvk_rmsnorm_args {
    cvk_view x, w, y; /* f32; w holds n floats */
    uint32_t n, rows;
    uint32_t x_stride, y_stride; /* floats between rows; 0 means n */
    float eps;
} cvk_rmsnorm_args;

/* wg: invocations per row (a power of two, 32..1024; 0 = 256). */
int cvk_rmsnorm_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records the dispatch (no barrier before or after). */
int cvk_rmsnorm(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_rmsnorm_args *a);
