/* KV write kernel (shaders/kv_write.comp), host side: K and V rows of new tokens, f32 from the
 * projections, into their pages of the KV pool as fp16 (layout: runtime/base/kv_layout.h).
 *
 *   token i < n_tokens: block-table row r = loc[i].x, position t = loc[i].y
 *     page = table[r * table_stride + t / page_tokens], slot = t % page_tokens
 *     pool[page][layer][K][h][slot][:] = fp16(k[i * k_stride + h * head_dim + :])   h < n_head_kv
 *     pool[page][layer][V][h][slot][:] = fp16(v[i * v_stride + h * head_dim + :])
 *
 * loc lives on the device (uint pairs), so a recorded decode step replays with new positions.
 * Prefill of one sequence: loc[i] = {row, pos0 + i}; a decode batch: loc[i] = {i, len_i}.
 * Rounding is the device's packHalf2x16 (round to nearest even on lavapipe and RDNA).
 * Pages named in the table must be < the pool's page count (the kernel skips others). */
#pragma once
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/kv_write.comp (pinned by tests/test_vk_kv_write.c) */
typedef struct cvk_kv_write_push {
    uint32_t n_tokens, layer, n_head_kv, page_tokens, table_stride;
    uint32_t page0, pages, page_words, k_stride, v_stride;
} cvk_kv_write_push;

typedef struct cvk_kv_write_args {
    const cvk_buffer *pool;  /* created with granule = lay->page_bytes */
    const kv_layout *lay;
    cvk_view k, v;           /* f32 rows of k_stride / v_stride floats */
    cvk_view table;          /* uint32 page ids, rows of table_stride */
    cvk_view loc;            /* uint32 {row, position} per token */
    uint32_t n_tokens, layer, table_stride;
    uint32_t k_stride, v_stride; /* 0 = n_head_kv * head_dim */
} cvk_kv_write_args;

/* head_dim: the layout's (a specialization constant); wg 0 = 64. */
int cvk_kv_write_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim, uint32_t wg);
/* Records one dispatch per pool part (no barrier before or after). */
int cvk_kv_write(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_kv_write_args *a);
