/* Decode paged attention (shaders/attn_decode.comp + attn_decode_combine.comp), host side.
 * One query token per sequence, over the sequence's block table in the KV pool (layout:
 * runtime/base/kv_layout.h), GQA (query head h reads kv head h / (n_head / n_head_kv)):
 *
 *   out[q][h][:] = sum_t softmax_t(scale * dot(Q[q][h], K[t])) V[t],   t < seq_lens[q]
 *
 * with K/V the fp16 values in the pool and scale 1/sqrt(head_dim) by default. Split-K
 * (flash-decoding): each (sequence, head) is cut into n_split ranges of whole pages, and the
 * pool into its parts; every (part, split) writes a partial softmax state {m, l, acc[head_dim]}
 * to `partials`, and a combine pass merges them into out. seq_lens and the block table are
 * read on the device, so a step recorded once replays as sequences grow; n_split is fixed at
 * recording (cvk_attn_decode_splits picks one from the longest length expected).
 * See docs/kernels/attention.md. */
#pragma once
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/attn_decode.comp (pinned by tests/test_vk_attn_decode.c) */
typedef struct cvk_attn_decode_push {
    uint32_t n_head, n_head_kv, page_tokens, layer, table_stride, q_stride;
    uint32_t page0, pages, page_words, n_split, part, n_parts;
    float scale;
} cvk_attn_decode_push;

/* mirrors the push block in shaders/attn_decode_combine.comp */
typedef struct cvk_attn_combine_push {
    uint32_t n_head, n_partials, out_stride;
} cvk_attn_combine_push;

typedef struct cvk_attn_decode_pipes {
    cvk_pipeline split, combine;
    uint32_t head_dim;
} cvk_attn_decode_pipes;

typedef struct cvk_attn_decode_args {
    const cvk_buffer *pool;  /* created with granule = lay->page_bytes */
    const kv_layout *lay;
    cvk_view q;              /* f32 [n_seq][n_head][head_dim], q_stride floats per sequence */
    cvk_view table;          /* uint32 page ids, table_stride per sequence */
    cvk_view seq_lens;       /* uint32 per sequence: tokens to attend over (0 gives zeros) */
    cvk_view partials;       /* f32 scratch, cvk_attn_decode_partials_bytes */
    cvk_view out;            /* f32 [n_seq][n_head][head_dim], out_stride floats per sequence */
    uint32_t n_seq, n_head, layer, table_stride;
    uint32_t q_stride, out_stride; /* 0 = n_head * head_dim */
    uint32_t n_split;        /* 0 = 1 */
    float scale;             /* 0 = 1/sqrt(head_dim) */
} cvk_attn_decode_args;

/* head_dim: the layout's (a specialization constant, even); wg: tokens per tile and
 * invocations per workgroup of the split pass, a power of two 32..1024 (0 = 64). */
int cvk_attn_decode_pipeline(cvk_attn_decode_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                             uint32_t wg);
void cvk_attn_decode_pipeline_destroy(cvk_device *d, cvk_attn_decode_pipes *p);
/* Bytes of scratch for partial states. */
uint64_t cvk_attn_decode_partials_bytes(uint32_t n_seq, uint32_t n_head, uint32_t n_split, uint32_t n_parts,
                                        uint32_t head_dim);
/* A split count for sequences up to max_len tokens: about 512 tokens per split, 1..64. */
uint32_t cvk_attn_decode_splits(uint32_t max_len, uint32_t page_tokens);
/* Records the split pass (one dispatch per pool part), a compute-to-compute barrier and the
 * combine pass. No barrier before (the caller orders the KV write and q) or after. */
int cvk_attn_decode(cvk_cmd *c, cvk_descpool *dp, const cvk_attn_decode_pipes *p, const cvk_attn_decode_args *a);
