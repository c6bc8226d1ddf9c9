/* Prefill matrix-matrix product (shaders/matmul.comp), host side:
 *
 *   Y[out(t)][r] = sum_i W[expert * n_rows + r][i] * X[in(t)][i]     t < n_tokens, r < n_rows
 *
 * W: rows of n_in elements of `type` (F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K), n_in a whole
 * number of blocks; the buffer holds one or more expert slices of n_rows rows each (a dense
 * projection is expert 0). It may be split into parts (vk_memory.h; create it with granule =
 * row bytes): one dispatch per part holding rows of the slice.
 * X, Y: f32 rows of x_stride / y_stride floats (0 = n_in / n_rows), x_rows / y_rows rows.
 * in(t) = t, or gather[ids_off + t] when `gather` is bound; out(t) = t, or
 * scatter[ids_off + t] when `scatter` is bound (int32 lists). A token whose in(t) or out(t)
 * lies outside [0, x_rows) / [0, y_rows) is skipped (nothing written), so -1 pads a list.
 *
 * MoE use: sort the routed (token, slot) pairs by expert; per expert e with c_e pairs
 * starting at o_e, call with .expert = e, .n_tokens = c_e, .ids_off = o_e, gather = the
 * token list and scatter = the destination rows (e.g. token * n_used + slot). Each call reads
 * the expert's weights once per token tile, dequantizing each weight tile once.
 *
 * Tiles: each workgroup computes bm weight rows x bn tokens, stepping bk along i with the
 * weight tile dequantized into shared memory; each invocation holds a tm x tn register
 * block, so the workgroup has (bm/tm)*(bn/tn) invocations. */
#pragma once
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/matmul.comp (pinned by tests/test_vk_matmul.c) */
typedef struct cvk_matmul_push {
    uint32_t n_in, row_bytes, w_row0, r0, nr, n_tokens;
    uint32_t x_stride, x_rows, y_stride, y_rows, ids_off, flags;
} cvk_matmul_push;

#define CVK_MATMUL_GATHER 1u
#define CVK_MATMUL_SCATTER 2u

typedef struct cvk_matmul_tile {
    uint32_t bm, bn, bk; /* weight rows, tokens, k per shared-memory tile */
    uint32_t tm, tn;     /* register block per invocation: multiples of 4 (vec4 shared loads),
                            bm % tm == 0, bn % tn == 0, tm * tn <= 64 */
} cvk_matmul_tile;

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
    uint32_t n_tokens;
    cvk_view gather, scatter; /* .buf NULL: plain in(t) = t / out(t) = t */
    uint32_t ids_off;         /* first entry of gather / scatter used */
} cvk_matmul_args;

/* One pipeline per weight type and tile shape (tile NULL = cvk_matmul_tile_default). */
int cvk_matmul_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                        const cvk_matmul_tile *tile);
/* Records one dispatch per weight part holding rows of the slice (no barrier before or after). */
int cvk_matmul(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_matmul_args *a);
