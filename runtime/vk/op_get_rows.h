/* Embedding gather with dequantization (shaders/get_rows.comp), host side:
 *   dst[r][0..n) = dequantize(table row ids[r])      for r < n_ids
 * table: n_rows rows of n elements of `type` (any type qtype_supported names); it
 * may be split into parts (vk_memory.h) and is dispatched once per part. ids: int32; an id
 * outside [0, n_rows) yields a row of zeros. dst: f32 rows of dst_stride floats. */
#pragma once
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/get_rows.comp (pinned by tests/test_vk_get_rows.c) */
typedef struct cvk_get_rows_push {
    uint32_t n, row_bytes, row0, rows, n_rows, n_ids, dst_stride;
} cvk_get_rows_push;

typedef struct cvk_get_rows_args {
    const cvk_buffer *table;
    enum qtype type;
    uint32_t n, n_rows;
    cvk_view ids;
    uint32_t n_ids;
    cvk_view dst;
    uint32_t dst_stride; /* 0 means n */
} cvk_get_rows_args;

/* One pipeline per table type; wg invocations per workgroup (0 = 256). */
int cvk_get_rows_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type, uint32_t wg);
/* Records one dispatch per table part (no barrier before or after). */
int cvk_get_rows(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_get_rows_args *a);
