/* Prefill matrix-matrix product (shaders/matmul.comp), host side:
 *
 *   Y[out(t)][r] = sum_i W[expert * n_rows + r][i] * X[in(t)][i]     t < n_tokens, r < n_rows
 *
 * W: rows of n_in elements of `type` (any type qtype_supported names), n_in a whole
 * number of blocks; the buffer holds one or more expert slices of n_rows rows each (a dense
 * projection is expert 0). It may be split into parts (vk_memory.h; create it with granule =
 * row bytes): one dispatch per part holding rows of the slice.
 * X, Y: f32 rows of x_stride / y_stride floats (0 = n_in / n_rows), x_rows / y_rows rows.
 * in(t) = t, or gather[ids_off + t] when `gather` is bound; out(t) = t, or
 * scatter[ids_off + t] when `scatter` is bound (int32 lists). A token whose in(t) or out(t)
 * lies outside [0, x_rows) / [0, y_rows) is skipped (nothing written), so -1 pads a list.
 *
 * Expert-grouped mode (`groups` bound; MoE prefill without the host seeing the routing):
 * one call covers experts [0, n_experts). groups is uint32 [n_experts][2] = {o_e, c_e}, as
 * cvk_moe_group writes it; expert e computes its slice for t < c_e with list entries
 * j = ids_off + o_e + t: in(t) = gather[j] (or j), out(t) = scatter[j] (or j). n_tokens
 * must bound every c_e (the batch's token count when a token routes to an expert at most
 * once, as cvk_moe_group's routing guarantees); the grid has ceil(n_tokens / bn) token tiles per
 * expert and those past c_e exit at once. Entries j past the bound lists are skipped.
 * `expert` must be 0. Each expert's weights are read once per token tile, each weight tile
 * dequantized once. For a MoE FFN over T tokens, k experts each (ids, groups, gather and
 * scatter from cvk_moe_group, routing the router logits):
 *   gate, up: W = *_exps, x = [T][n_embd], gather = gather, scatter = scatter -> [T*k][n_ff]
 *   down:     W = down_exps, x = [T*k][n_ff], gather = scatter, scatter = scatter
 *             -> [T*k][n_embd], row t*k + slot, for cvk_moe_combine with rows = T.
 *
 * Work items (`items` bound as well; the few-tokens-per-expert case): instead of a grid over
 * every expert and the largest count, workgroup row y takes item {e, t0} = items[item0 + y]
 * (uint32 pairs from cvk_moe_group's work lists, op_moe_group.h) and computes expert e's
 * tokens t0 .. t0 + bn - 1 (those below c_e); the grid is read from `dispatch` (a
 * VkDispatchIndirectCommand moe_group wrote: x = cvk_matmul_row_tiles(), y = the list's
 * items), so no workgroup exists for an empty expert and the count stays on the device.
 * item_tile must be the pipeline's bn (the list's tile). n_tokens still bounds every count.
 *
 * Plain MoE use (host knows the routing): per expert e with c_e pairs starting at o_e, call
 * with .expert = e, .n_tokens = c_e, .ids_off = o_e, gather and scatter as above.
 *
 * Tiles: each workgroup computes bm weight rows x bn tokens, stepping bk along i with the
 * weight tile dequantized into shared memory; each invocation holds a tm x tn register
 * block, so the workgroup has (bm/tm)*(bn/tn) invocations. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/matmul.comp (pinned by tests/test_vk_matmul.c) */
typedef struct cvk_matmul_push {
    uint32_t n_in, row_bytes, n_rows, part_row0, part_rows, expert0, n_tokens;
    uint32_t x_stride, x_rows, y_stride, y_rows, ids_off, n_ids, flags, item0, expert1;
    uint32_t x0; /* the texel rows kernel: x's first 16-byte texel in its buffer part */
} cvk_matmul_push;

#define CVK_MATMUL_GATHER 1u
#define CVK_MATMUL_SCATTER 2u
#define CVK_MATMUL_GROUPED 4u
#define CVK_MATMUL_ITEMS 16u /* grouped over moe_group's work items, dispatched indirectly */
#define CVK_MATMUL_X4 8u     /* x rows may be read as vec4s (the rows kernel uses it; the tiled one ignores it) */
#define CVK_MATMUL_ACCUMULATE                                                                                          \
    32u /* y += W x: one float add of the finished sum into y, the bits of
                                     a separate add (a residual without its own stage) */

/* Every kernel sums each output in one canonical order (shaders/matmul.comp: k in chunks of 32,
 * each chunk by fma from 0 in k order, the chunk sums added in k order), so any tile gives the
 * same bits: bk must divide 256 (a divisor or a multiple of the chunk). */
typedef struct cvk_matmul_tile {
    uint32_t bm, bn, bk; /* weight rows, tokens, k per shared-memory tile */
    uint32_t tm, tn;     /* register block per invocation: multiples of 4 (vec4 shared loads),
                            bm % tm == 0, bn % tn == 0, tm * tn <= 64 */
    bool rows;           /* shaders/matmul_rows.comp instead: an invocation per tm weight rows (0:
                            one; each x load feeds them all) with bn tokens in registers, bm rows
                            (bm / tm invocations) per workgroup, no shared memory (bk, tn
                            unused);
                            the same bits as the tiled kernel */
    uint32_t kl;         /* rows kernel: invocations sharing a row, splitting k into its 32-weight
                            chunks (0/1: none), each for its tm rows: bm / tm * kl invocations; a
                            power of 2 within the device's smallest subgroup (the chunk sums meet
                            by subgroupShuffle); not with texel */
    bool glu;            /* the variant for gate-up pairs (cvk_matmul_args.glu): a pipeline of its
                            own, so the plain kernel carries none of it */
    bool texel;          /* rows kernel, block types (Q8_0, Q4_K, Q5_K, Q6_K): weights and x read
                            through uniform texel buffers (shaders/matmul_rows_texel.comp; CPU
                            devices: a gather instead of a loop over the lanes per load); x rows
                            must lie at whole texels (x 16-byte aligned, x_stride a multiple of
                            4); the same bits */
} cvk_matmul_tile;

/* bm 64, bn 8, rows: the few-token kernel */
extern const cvk_matmul_tile cvk_matmul_tile_rows;

/* bm 256, bn 1, tm 4, rows: one token, 4 rows per invocation (a CPU device's decode kernel: each
 * x load feeds 4 rows; lavapipe pays every load per lane) */
extern const cvk_matmul_tile cvk_matmul_tile_one;

/* bm 256, bn 1, tm 8, rows, texel: one token, 8 rows per invocation, weights and x through
 * texel buffers (a CPU device's kernel for the block types at every token count) */
extern const cvk_matmul_tile cvk_matmul_tile_one_texel;

/* bm 256, bn 8, tm 8, rows, texel: the same with 8 tokens per workgroup column, each row's
 * weights decoded once for them (a CPU device's kernel for the items of experts with 4+ tokens
 * and the 4-token groups of dense projections, two per column: docs/kernels/matmul.md) */
extern const cvk_matmul_tile cvk_matmul_tile_eight_texel;

/* The types the texel rows kernel takes: the block types Q8_0, Q4_K, Q5_K, Q6_K. */
bool cvk_matmul_texel_type(enum qtype type);

/* bm 64, bn 64, bk 32, tm 4, tn 4: 256 invocations, 16 KiB of shared memory */
extern const cvk_matmul_tile cvk_matmul_tile_default;

typedef struct cvk_matmul_args {
    const cvk_buffer *w;
    enum qtype type;
    uint32_t n_in, n_rows, expert;
    cvk_view x;
    uint32_t x_rows, x_stride;
    cvk_view y;
    uint32_t y_rows, y_stride;
    uint32_t n_tokens;        /* grouped: the most tokens any expert gets */
    bool accumulate;          /* y += W x instead of y = W x (CVK_MATMUL_ACCUMULATE) */
    bool glu;                 /* gate-up pairs (a pipeline made with tile->glu): each slice of W
                                 is 2 * n_rows rows, n_rows gate rows G then n_rows up rows U, and
                                 y = silu(G x) * (U x), the bits of two products and cvk_swiglu
                                 (a SwiGLU without its own stage); a slice must lie whole in one
                                 part (granule = the slice's bytes); not with accumulate */
    cvk_view gather, scatter; /* .buf NULL: plain in(t) = t / out(t) = t */
    uint32_t ids_off;         /* first entry of gather / scatter used */
    cvk_view groups;          /* .buf non-NULL: expert-grouped mode, uint32 [n_experts][2] */
    uint32_t n_experts;       /* grouped: experts (slices of W) */
    cvk_view items;           /* .buf non-NULL (with groups): work items, uint32 [][2] {expert, t0} */
    uint32_t item0;           /* the list's first item */
    uint32_t item_tile;       /* tokens per item: the pipeline's bn */
    cvk_view dispatch;        /* with items: the VkDispatchIndirectCommand (12 bytes) */
} cvk_matmul_args;

/* One pipeline per weight type and tile shape (tile NULL = cvk_matmul_tile_default), plain or
 * for gate-up pairs (tile->glu). */
int cvk_matmul_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                        const cvk_matmul_tile *tile);
/* Row tiles of a grid over n_rows output rows with pipeline p (the y extent for work items; a
 * gate-up pair pipeline's tiled kernel has both rows of each pair in its tiles: twice as many). */
uint32_t cvk_matmul_row_tiles(const cvk_pipeline *p, uint32_t n_rows);
/* Tokens per workgroup of pipeline p (its bn). */
uint32_t cvk_matmul_token_tile(const cvk_pipeline *p);
/* Records one dispatch per weight part holding rows of the slice (grouped: of any slice, with
 * grid z over the experts whose slices meet the part); no barrier before or after. */
int cvk_matmul(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_matmul_args *a);
/* Two calls as one labelled op (one span in profiles): the two work lists of one projection,
 * or its tokens split between two kernels. */
int cvk_matmul_lists(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *const p[2], const cvk_matmul_args a[2]);
