/* Per-head RMS norm + NeoX RoPE (shaders/head_norm_rope.comp), host side: Qwen3's QK-norm and
 * RoPE in one dispatch, and for K the KV write too. For each token t and head h of x
 * ([tokens][heads][head_dim], tok_stride floats apart), with pos = loc[t].y:
 *     y = rope_neox(rmsnorm(x[t][h], w, eps), pos)        rmsnorm.comp's math, rope_table.h's rotation
 * Q (pool NULL): x[t][h] = y, in place.
 * K (pool set): x is left as it was; y and v[t][h] go to the page of block-table row loc[t].x
 *   at position pos as fp16 (kv_layout.h: page, layer, K/V, head, slot); one dispatch per pool
 *   part, each writing only its part's pages.
 * The sum of squares is reduced in a fixed order per row, so a row's result does not depend on
 * the batch. Workgroups of head_dim / 2 invocations. */
#pragma once
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "runtime/vk/rope_table.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/head_norm_rope.comp (pinned by tests/test_vk_head_norm_rope.c) */
typedef struct cvk_head_norm_rope_push {
    uint32_t tokens, heads, tok_stride;
    float eps;
    uint32_t shift, n_hi, layer, page_tokens, table_stride, page0, pages, page_words;
} cvk_head_norm_rope_push;

typedef struct cvk_head_norm_rope_pipes {
    cvk_pipeline q, kv; /* in place; into the pages */
} cvk_head_norm_rope_pipes;

typedef struct cvk_head_norm_rope_args {
    cvk_view x;                  /* f32 [tokens][heads][head_dim] */
    cvk_view w;                  /* f32 [head_dim] */
    cvk_view loc;                /* uint32 {row, position} per token; positions < table->n_pos */
    const cvk_rope_table *table; /* its head_dim is the head size */
    uint32_t tokens, heads;
    uint32_t tok_stride; /* floats between tokens of x and v; 0 means heads * head_dim */
    float eps;
    /* K: */
    const cvk_buffer *pool; /* NULL for Q; else created with granule = lay->page_bytes */
    const kv_layout *lay;   /* heads = lay->n_head_kv, head_dim = lay->head_dim */
    cvk_view v;             /* f32, laid out as x */
    cvk_view pages;         /* uint32 page ids, rows of table_stride */
    uint32_t layer, table_stride;
} cvk_head_norm_rope_args;

int cvk_head_norm_rope_pipelines(cvk_head_norm_rope_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim);
void cvk_head_norm_rope_pipelines_destroy(cvk_device *d, cvk_head_norm_rope_pipes *p);
/* Records the dispatch(es) (no barrier before or after). */
int cvk_head_norm_rope(cvk_cmd *c, cvk_descpool *dp, const cvk_head_norm_rope_pipes *p,
                       const cvk_head_norm_rope_args *a);
