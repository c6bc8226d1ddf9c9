/* MoE routing and expert grouping (shaders/moe_group.comp), host side. With `logits` bound it
 * first routes each token t < n_tokens (one subgroup per token: what a token gets does not
 * depend on the batch):
 *
 *   p = softmax(logits[t][0..n_expert))
 *   ids[t][0..k)     = the k experts of largest p, descending, ties to the lower index
 *   weights[t][0..k) = p[ids] / sum(p[ids])   (renorm; else p[ids])
 *
 * the choice of cpu_moe_route (weights within float rounding of it), writing ids and
 * weights; without logits, ids is the input. Then the routed (token, slot) pairs of the
 * batch, p = t*k + slot, sorted by expert and then by p (stable, deterministic), as the lists
 * the grouped matmuls read (op_matmul.h, docs/kernels/matmul.md):
 *
 *   groups[e]  = {offset, count}     uint32 [n_expert][2]; count = #{p : ids[p] == e},
 *                                    offset = count of experts < e (exclusive scan)
 *   gather[j]  = t                   int32 [n_tokens * k]: the token of the j-th pair
 *   scatter[j] = t*k + slot          int32 [n_tokens * k]: its row of per-pair outputs
 *
 * for j in [groups[e].offset, groups[e].offset + groups[e].count) the pairs of expert e in
 * increasing p. Ids outside [0, n_expert) are dropped (not counted); the list entries past
 * the kept pairs are -1 (only input ids can fall outside). One workgroup for the batch (a
 * counting sort in shared memory; see the shader).
 *
 * Routing runs inside that workgroup (fused: no extra stage) or, for more than
 * CVK_MOE_ROUTE_GRID_TOKENS tokens, first in a grid of workgroups of its own, with a barrier
 * before the sort: the one workgroup's subgroups would otherwise route a prefill chunk's tokens
 * in turn (512 tokens: 64 each at 8 subgroups). Both run the same routing code in the same
 * pipeline, so a token gets the same bits either way (test_vk_moe_route checks).
 *
 * Work lists (tile0 > 0), for the grouped matmul's indirect mode (op_matmul.h): the experts
 * with 0 < count <= split in list 0, cut into items of tile0 tokens; those with count > split
 * in list 1, items of tile1 tokens:
 *
 *   items[i]            = {expert, first token}  uint32 [2 * cap][2]; list 0 at 0, list 1 at cap
 *   dispatch[3d .. 3d+2] = {n_items(list d / 2), row_tiles[d], 1}   VkDispatchIndirectCommand, d < 4
 *
 * so a matmul over list l with row_tiles[2l + s] row tiles dispatches indirectly from
 * dispatch + 12 * (2l + s) bytes: no workgroup for an empty expert, and the count never
 * crosses to the host. Items are the x extent so that launch order walks an expert's items
 * on one row tile before the next tile (the slice is read once per tile, not once per item).
 * cap must hold every list (cvk_moe_group_cap()) and fit a dispatch's x extent (65,535). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

#define CVK_MOE_MAX_EXPERT 256
#define CVK_MOE_MAX_K 8
/* routing in a grid above this many tokens (CVK_MOE_ROUTE_AUTO): a fused round costs a subgroup
 * a few microseconds per token on a GPU, the grid one more stage; not yet timed on a GPU */
#define CVK_MOE_ROUTE_GRID_TOKENS 16

typedef enum cvk_moe_route_mode {
    CVK_MOE_ROUTE_AUTO,  /* the grid above CVK_MOE_ROUTE_GRID_TOKENS tokens, else fused */
    CVK_MOE_ROUTE_FUSED, /* in the sorting workgroup */
    CVK_MOE_ROUTE_GRID,  /* a grid of workgroups first, then the sort */
} cvk_moe_route_mode;

/* mirrors the push block in shaders/moe_group.comp (pinned by tests/test_vk_moe_group.c) */
typedef struct cvk_moe_group_push {
    uint32_t n_expert, n_tokens, k;
    uint32_t tile0, tile1, split, cap;
    uint32_t row_tiles[4];
    uint32_t route, renorm, stride;
} cvk_moe_group_push;

typedef struct cvk_moe_group_args {
    cvk_view logits;  /* f32 [n_tokens][stride]: .buf NULL = ids given, no routing */
    cvk_view weights; /* f32 [n_tokens][k] (routing) */
    uint32_t stride;  /* floats between tokens' logits; 0 means n_expert */
    bool no_renorm;   /* routing: the weights are the softmax probabilities themselves */
    cvk_moe_route_mode route_mode;
    cvk_view ids;      /* int32 [n_tokens][k]: written when routing, else read */
    cvk_view groups;   /* uint32 [n_expert][2] {offset, count} */
    cvk_view gather;   /* int32 [n_tokens * k] */
    cvk_view scatter;  /* int32 [n_tokens * k] */
    uint32_t n_expert; /* 1..CVK_MOE_MAX_EXPERT */
                       /* k: 1..CVK_MOE_MAX_K and <= n_expert when routing */
    uint32_t n_tokens, k;
    /* work lists (tile0 0: none written, items and dispatch unused) */
    cvk_view items;    /* uint32 [2 * cap][2] */
    cvk_view dispatch; /* uint32 [4][3] */
    uint32_t tile0, tile1, split, cap;
    uint32_t row_tiles[4]; /* the y extent of each dispatch command: its consumer's row tiles */
} cvk_moe_group_args;

/* Items one list can need: sum over experts of ceil(count / tile) <= pairs / tile + the
 * non-empty experts, for tile the smaller of the two. */
uint32_t cvk_moe_group_cap(uint32_t n_tokens, uint32_t k, uint32_t n_expert, uint32_t tile0, uint32_t tile1);

/* wg: invocations of the one workgroup (0 = 256; a multiple of 32 up to 512). */
int cvk_moe_group_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records the dispatch, or the routing grid, a barrier and the sort (no barrier before or after);
 * nothing when n_tokens is 0. */
int cvk_moe_group(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_group_args *a);
