/* MoE combine (shaders/moe_combine.comp), host side: the k expert outputs of each token,
 * weighted by the router, summed and added into the residual stream:
 *
 *   x[r][i] += sum_j w[r][j] * e[r*k + j][i]         r < rows (tokens), i < n, j < k
 *
 * in float, j from 0 up, then one add into x: the order of cpu_ref.c moe(). e holds the
 * down-projection outputs of the (token, slot) pairs, e_stride floats apart; w is the
 * weights output of cvk_moe_group's routing ([rows][k]). With norm_w bound, also
 *
 *   y[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * norm_w[i]
 *
 * over the updated rows: the bits cvk_rmsnorm gives (both default to 256 invocations per
 * workgroup), without its stage. One workgroup per row. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/moe_combine.comp (pinned by tests/test_vk_moe_combine.c) */
typedef struct cvk_moe_combine_push {
    uint32_t n, k, rows, e_stride;
    uint32_t norm;
    float eps;
} cvk_moe_combine_push;

typedef struct cvk_moe_combine_args {
    cvk_view x; /* f32 [rows][n], updated in place */
    cvk_view e; /* f32 [rows * k][e_stride] */
    cvk_view w; /* f32 [rows][k] */
    uint32_t n, k, rows;
    uint32_t e_stride; /* floats between expert outputs; 0 means n */
    cvk_view norm_w;   /* f32 [n]: .buf NULL = no norm */
    cvk_view y;        /* f32 [rows][n]: the normed rows (with norm_w) */
    float eps;
} cvk_moe_combine_args;

/* wg: invocations per workgroup (0 = 256; a power of two). */
int cvk_moe_combine_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records the dispatch (no barrier before or after). */
int cvk_moe_combine(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_combine_args *a);
