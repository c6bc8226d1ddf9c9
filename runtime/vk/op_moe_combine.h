/* MoE combine (shaders/moe_combine.comp), host side: the k expert outputs of each token,
 * weighted by the router, summed and added into the residual stream:
 *
 *   x[r][i] += sum_j w[r][j] * e[r*k + j][i]         r < rows (tokens), i < n, j < k
 *
 * in float, j from 0 up, then one add into x: the order of cpu_ref.c moe(). e holds the
 * down-projection outputs of the (token, slot) pairs, e_stride floats apart; w is the
 * weights output of cvk_moe_route ([rows][k]). One invocation per element of x. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/moe_combine.comp (pinned by tests/test_vk_moe_combine.c) */
typedef struct cvk_moe_combine_push {
    uint32_t n, k, rows, e_stride;
} cvk_moe_combine_push;

typedef struct cvk_moe_combine_args {
    cvk_view x;       /* f32 [rows][n], updated in place */
    cvk_view e;       /* f32 [rows * k][e_stride] */
    cvk_view w;       /* f32 [rows][k] */
    uint32_t n, k, rows;
    uint32_t e_stride; /* floats between expert outputs; 0 means n */
} cvk_moe_combine_args;

/* wg: invocations per workgroup (0 = 256). */
int cvk_moe_combine_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records the dispatch (no barrier before or after). */
int cvk_moe_combine(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_combine_args *a);
