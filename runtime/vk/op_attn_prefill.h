/* Prefill paged attention (shaders/attn_prefill.comp, + attn_decode_combine.comp when the pool
 * has several parts), host side. A batch of new tokens whose K/V kv_write has already put in the
 * pool (layout: kv/kv_layout.h); token i sits at loc[i] = {row, pos} (uint32 pairs, the loc
 * format of kv_write) and attends causally to positions 0..pos of block-table row `row`:
 *
 *   out[i][h][:] = sum_{t <= pos} softmax_t(scale * dot(Q[i][h], K[row][t])) V[row][t]
 *
 * K/V of position t: page table[row * table_stride + t / page_tokens], slot t % page_tokens.
 * GQA: query head h reads kv head h / (n_head / n_head_kv). A cached prefix is simply the
 * positions before the first new token. Flash-attention style (online softmax, no score
 * matrix in memory): a workgroup owns a tile of consecutive query tokens and the query heads of
 * one kv head, and walks that row's K/V a tile at a time through shared memory. Tokens of
 * different rows may be mixed in any order (a tile walks once per distinct row in it; sorted
 * batches are fastest). One dispatch per pool part; with several parts each writes a partial
 * softmax state per (token, head, part) and attn_decode_combine.comp merges them.
 * loc, table and q are read on the device, so a recorded step replays with new contents;
 * n_tokens and max_len are fixed at recording. See docs/kernels/attention.md. */
#pragma once
#include <stdint.h>

#include "kv/kv_layout.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/attn_prefill.comp (pinned by tests/test_vk_attn_prefill.c) */
typedef struct cvk_attn_prefill_push {
    uint32_t n_tokens, n_head, n_head_kv, page_tokens, layer, table_stride, table_rows, limit;
    uint32_t q_stride, out_stride, page0, pages, page_words, part, n_parts, hpw, tpw;
    float scale;
} cvk_attn_prefill_push;

typedef struct cvk_attn_prefill_pipes {
    cvk_pipeline tile;       /* attn_prefill.comp */
    cvk_pipeline combine;    /* attn_decode_combine.comp (multi-part pools) */
    uint32_t head_dim;
    uint32_t wg, lanes_per_row, kv_tile; /* the configuration in force */
} cvk_attn_prefill_pipes;

/* Kernel configuration; 0 fields take the defaults below. */
typedef struct cvk_attn_prefill_cfg {
    uint32_t wg;             /* invocations per workgroup, a power of two 1..1024 (default: 64 on a
                                CPU device, 256 on a GPU) */
    uint32_t lanes_per_row;  /* invocations per query row, a power of two dividing head_dim, at most
                                the subgroup size and wg (default: 1 on a CPU device, 4 on a GPU) */
    uint32_t kv_tile;        /* K/V positions per shared-memory tile, 1..wg (default 8 on a CPU device,
                                16 on a GPU, less when 2 * kv_tile * head_dim floats would exceed 16 KiB) */
} cvk_attn_prefill_cfg;

typedef struct cvk_attn_prefill_args {
    const cvk_buffer *pool;  /* created with granule = lay->page_bytes */
    const kv_layout *lay;
    cvk_view q;              /* f32 [n_tokens][n_head][head_dim], q_stride floats per token (0 = n_head*head_dim) */
    cvk_view table;          /* uint32 page ids, rows of table_stride */
    cvk_view loc;            /* uint32 {row, position} per token */
    cvk_view partials;       /* f32 scratch, cvk_attn_prefill_partials_bytes (unused, may be empty, when
                                the pool is one part) */
    cvk_view out;            /* f32 [n_tokens][n_head][head_dim], out_stride floats per token (0 = n_head*head_dim) */
    uint32_t n_tokens, n_head, layer, table_stride, q_stride, out_stride;
    uint32_t max_len;        /* upper bound on pos + 1 over the batch, host-known; 0 = table_stride * page_tokens.
                                A token at pos >= max_len (or with row beyond the table) gets zeros */
    float scale;             /* 0 = 1/sqrt(head_dim) */
} cvk_attn_prefill_args;

/* head_dim: the layout's (even, <= 512); wg_or_0: invocations per workgroup (0 = default).
 * Same as cvk_attn_prefill_pipeline_cfg with cfg {.wg = wg_or_0}. */
int cvk_attn_prefill_pipeline(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                              uint32_t wg_or_0);
int cvk_attn_prefill_pipeline_cfg(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache,
                                  uint32_t head_dim, const cvk_attn_prefill_cfg *cfg);
void cvk_attn_prefill_pipeline_destroy(cvk_device *d, cvk_attn_prefill_pipes *p);
/* Bytes of scratch for the partial states: n_tokens * n_head * n_parts * (head_dim + 2) floats
 * when n_parts > 1, 0 for a one-part pool. */
uint64_t cvk_attn_prefill_partials_bytes(uint32_t n_tokens, uint32_t n_head, uint32_t n_parts, uint32_t head_dim);
/* Records one dispatch per pool part and, for several parts, a compute-to-compute barrier and
 * the combine pass. No barrier before (the caller orders kv_write and q) or after. */
int cvk_attn_prefill(cvk_cmd *c, cvk_descpool *dp, const cvk_attn_prefill_pipes *p, const cvk_attn_prefill_args *a);
