/* MoE router kernel (shaders/moe_route.comp), host side. For each token t < tokens:
 *   p = softmax(logits[t][0..n_expert))
 *   ids[t][0..k)     = the k experts of largest p, descending, ties to the lower index
 *   weights[t][0..k) = p[ids] / sum(p[ids])   (renorm; else p[ids])
 * exactly the order of cpu_moe_route. One workgroup per token; n_expert <= 256, k <= 8. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

#define CVK_MOE_MAX_EXPERT 256
#define CVK_MOE_MAX_K 8

/* mirrors the push block in shaders/moe_route.comp (pinned by tests/test_vk_moe_route.c) */
typedef struct cvk_moe_route_push {
    uint32_t n_expert, k, tokens, stride, renorm;
} cvk_moe_route_push;

typedef struct cvk_moe_route_args {
    cvk_view logits;   /* f32 [tokens][stride] */
    cvk_view ids;      /* uint32 [tokens][k] */
    cvk_view weights;  /* f32 [tokens][k] */
    uint32_t n_expert, k, tokens;
    uint32_t stride;   /* floats between tokens' logits; 0 means n_expert */
    bool no_renorm;    /* weights are the softmax probabilities themselves */
} cvk_moe_route_args;

/* wg: invocations per token (0 = 128; up to 256 is useful). */
int cvk_moe_route_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records the dispatch (no barrier before or after). */
int cvk_moe_route(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_route_args *a);
