/* Paged attention (shaders/attn_prefill.comp, + attn_combine.comp when the pool
 * has several parts), host side. A batch of new tokens whose K/V head_norm_rope has already put in the
 * pool (layout: runtime/base/kv_layout.h); token i sits at loc[i] = {row, pos} (uint32 pairs, the loc
 * format head_norm_rope writes) and attends causally to positions 0..pos of block-table row `row`:
 *
 *   out[i][h][:] = sum_{t <= pos} softmax_t(scale * dot(Q[i][h], K[row][t])) V[row][t]
 *
 * K/V of position t: page table[row * table_stride + t / page_tokens], slot t % page_tokens.
 * GQA: query head h reads kv head h / (n_head / n_head_kv). A cached prefix is simply the
 * positions before the first new token. Flash-attention style (online softmax, no score
 * matrix in memory): a workgroup owns a tile of consecutive query tokens and the query heads of
 * one kv head, and one split of the K/V walk (split-K: a few new tokens after a long cached
 * prefix still make enough workgroups). Two kernels do this (cvk_attn_prefill_kernel): "tiled"
 * (GPU default) walks K/V a tile at a time through shared memory; "lanes" (CPU default,
 * llvmpipe) has every invocation read its own K/V rows and keep private softmax states. Tokens
 * of different rows may be mixed in any order (a workgroup walks once per distinct row in it;
 * sorted batches are fastest). One dispatch per pool part; with several parts or splits each
 * (token, head, part, split) writes a partial softmax state and attn_combine.comp merges
 * them.
 * loc, table and q are read on the device, so a recorded step replays with new contents;
 * n_tokens and max_len are fixed at recording. See docs/kernels/attention.md. */
#pragma once
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/attn_prefill.comp (pinned by tests/test_vk_attn_prefill.c) */
typedef struct cvk_attn_prefill_push {
    uint32_t n_tokens, n_head, n_head_kv, page_tokens, layer, table_stride, table_rows, limit;
    uint32_t q_stride, out_stride, page0, pages, page_words, part, n_parts, hpw, tpw;
    float scale;
    uint32_t n_split, split_len, split_max;
} cvk_attn_prefill_push;

/* mirrors the push block in shaders/attn_combine.comp */
typedef struct cvk_attn_combine_push {
    uint32_t n_head, n_partials, out_stride;
} cvk_attn_combine_push;

typedef enum cvk_attn_prefill_kernel {
    CVK_ATTN_PREFILL_DEFAULT = 0, /* lanes on a CPU device, tiled on a GPU */
    CVK_ATTN_PREFILL_TILED,       /* attn_prefill.comp: K/V tiles in shared memory, rows spread over lanes */
    CVK_ATTN_PREFILL_LANES,       /* attn_prefill_lanes*.comp: each invocation its own K/V rows, all rows */
} cvk_attn_prefill_kernel;

typedef struct cvk_attn_prefill_pipes {
    cvk_pipeline tile;    /* the attention kernel (either) */
    cvk_pipeline combine; /* attn_combine.comp (several parts or splits) */
    uint32_t head_dim;
    cvk_attn_prefill_kernel kernel;      /* the kernel in force (never DEFAULT) */
    uint32_t wg, lanes_per_row, kv_tile; /* the configuration in force (lanes: lanes_per_row 1) */
    uint32_t rows;                       /* query rows per workgroup: wg / lanes_per_row (tiled) or cfg rows */
    uint32_t step;                       /* positions a workgroup walks per loop iteration: split lengths are
                                            multiples of it (tiled: kv_tile; lanes: wg * kv_tile) */
    bool cpu;                            /* built for a CPU device (split defaults) */
    bool texel;                          /* lanes: the pool read through texel views */
} cvk_attn_prefill_pipes;

/* Kernel configuration; 0 fields take the defaults below. */
typedef struct cvk_attn_prefill_cfg {
    uint32_t wg;            /* invocations per workgroup, a power of two 1..1024 (default: tiled 64 on a
                                CPU device, 256 on a GPU; lanes 8) */
    uint32_t lanes_per_row; /* tiled: invocations per query row, a power of two dividing head_dim, at most
                                the subgroup size and wg (default: 1 on a CPU device, 4 on a GPU) */
    uint32_t kv_tile;       /* tiled: K/V positions per shared-memory tile, 1..wg (default 8 on a CPU device,
                                16 on a GPU, less when 2 * kv_tile * head_dim floats would exceed 16 KiB).
                                lanes: consecutive positions per invocation per step, 1..32 (default 8) */
    cvk_attn_prefill_kernel kernel;
    uint32_t rows;      /* lanes: query rows per workgroup, 1..64 (default: the largest power of two
                                <= 8 with rows * head_dim <= 256, so 4 at head_dim 64, 2 at 72..128: every
                                invocation holds q and the accumulator of all rows, and the
                                pipeline's build time grows with rows x head_dim) */
    bool storage_loads; /* lanes: read the pool as a storage buffer even where the texel variant could
                                (by default it reads 16-byte texels when head_dim is a multiple of 8 and
                                every buffer part fits one texel view: gathers, where a storage-buffer load
                                is a loop over the lanes on llvmpipe) */
} cvk_attn_prefill_cfg;

typedef struct cvk_attn_prefill_args {
    const cvk_buffer *pool; /* created with granule = lay->page_bytes */
    const kv_layout *lay;
    cvk_view q;        /* f32 [n_tokens][n_head][head_dim], q_stride floats per token (0 = n_head*head_dim) */
    cvk_view table;    /* uint32 page ids, rows of table_stride */
    cvk_view loc;      /* uint32 {row, position} per token */
    cvk_view partials; /* f32 scratch for n_parts * n_split > 1 (unused, may be empty, otherwise):
                                cvk_attn_prefill_partials_bytes of the split count used */
    cvk_view out;      /* f32 [n_tokens][n_head][head_dim], out_stride floats per token (0 = n_head*head_dim) */
    uint32_t n_tokens, n_head, layer, table_stride, q_stride, out_stride;
    uint32_t max_len;   /* upper bound on pos + 1 over the batch, host-known; 0 = table_stride * page_tokens.
                                A token at pos >= max_len (or with row beyond the table) gets zeros */
    float scale;        /* 0 = 1/sqrt(head_dim) */
    uint32_t n_split;   /* splits of the K/V walk: 0 = cvk_attn_prefill_splits, lowered to what
                                `partials` holds (never below the loop-limit minimum, which only walks of
                                millions of positions have); n > 0 = exactly that many (partials must hold
                                them; an error below the loop-limit minimum). With split_len: the most
                                splits a token uses (0 = no limit) */
    uint32_t split_len; /* > 0: batch-invariant splits. Split s of a token at pos covers
                                [s * len, (s + 1) * len) from position 0, len = split_len rounded up to the
                                kernel's step and, with n_split > 0, doubled until ceil((pos + 1) / len)
                                <= n_split: a token's boundaries depend on its own position only, so it
                                reduces over the same splits alone or among others, and a long context
                                takes wider splits, not more. The dispatch has min(n_split,
                                ceil(max_len / split_len)) splits: partials must hold that many (at most
                                n_split whatever max_len). An error when the longest len would run into
                                llvmpipe's loop limit */
    bool distinct_rows; /* a hint: every token is of another table row (a decode step). The tiled
                                kernel then gives each token a workgroup of its own, so the rows' walks
                                run in parallel instead of one after another; results are the same bits */
} cvk_attn_prefill_args;

/* head_dim: the layout's (even, <= 512); wg_or_0: invocations per workgroup (0 = default).
 * Same as cvk_attn_prefill_pipeline_cfg with cfg {.wg = wg_or_0}. */
int cvk_attn_prefill_pipeline(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                              uint32_t wg_or_0);
int cvk_attn_prefill_pipeline_cfg(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                                  const cvk_attn_prefill_cfg *cfg);
void cvk_attn_prefill_pipeline_destroy(cvk_device *d, cvk_attn_prefill_pipes *p);
/* Bytes of scratch for the partial states: n_tokens * n_head * n_parts * n_split * (head_dim + 2)
 * floats when n_parts * n_split > 1, else 0. */
uint64_t cvk_attn_prefill_partials_bytes(uint32_t n_tokens, uint32_t n_head, uint32_t n_parts, uint32_t n_split,
                                         uint32_t head_dim);
/* The split count n_split = 0 asks for: enough workgroups for the device (CPU: one per core of
 * this machine, LP_NUM_THREADS if set; GPU: 512), at least 256 positions (CPU: 512) per split,
 * at most 64, and always enough that no invocation's walk runs into llvmpipe's loop limit
 * (millions of positions). max_len: positions walked (the op passes min(max_len, table_stride *
 * page_tokens)). */
uint32_t cvk_attn_prefill_splits(const cvk_attn_prefill_pipes *p, const kv_layout *lay, uint32_t n_tokens,
                                 uint32_t n_head, uint32_t max_len);
/* Scratch that covers every batch of 1..max_tokens tokens up to max_len positions with the
 * default split count (n_split = 0 never lowers it then). */
uint64_t cvk_attn_prefill_partials_max(const cvk_attn_prefill_pipes *p, const kv_layout *lay, uint32_t n_head,
                                       uint32_t n_parts, uint32_t max_tokens, uint32_t max_len);
/* Records one dispatch per pool part and, for several parts or splits, a compute-to-compute
 * barrier and the combine pass. No barrier before (the caller orders the K/V write and q) or after. */
int cvk_attn_prefill(cvk_cmd *c, cvk_descpool *dp, const cvk_attn_prefill_pipes *p, const cvk_attn_prefill_args *a);
