/* The integer family's decode kernels (runtime/gguf/xq8.h: the arithmetic): x quantized to int8
 * blocks (shaders/xq8_quantize.comp), then a Q8_0, Q4_K or Q6_K matrix times it by exact dot4
 * block sums (shaders/matvec_xq8.comp), the same bits as xq8_quantize and xq8_dot_row:
 *
 *   y[t][r] = xq8_dot_row(type, W[r], xq8(x[t]), n_in)          r < n_rows, t < n_tokens
 *   (or y[t][r] + that, accumulate)
 *
 * Needs shaderIntegerDotProduct (caps.int_dot: RDNA2+, NVIDIA, lavapipe unaccelerated).
 *
 *   cvk_xq8_quantize_pipeline(&q, &vk->dev, cache);
 *   cvk_xq8_matvec_pipeline(&m, &vk->dev, cache, QTYPE_Q4_K, NULL);
 *   cvk_xq8_quantize(cmd, dp, &q, &(cvk_xq8_quantize_args){.x = xv, .n_in = 2048, .n_tokens = 1,
 *                    .xq = qv, .xd = dv});
 *   (barrier)
 *   cvk_xq8_matvec(cmd, dp, &m, &(cvk_xq8_matvec_args){.w = &w, .type = QTYPE_Q4_K, .n_in = 2048,
 *                  .n_rows = 512, .xq = qv, .xd = dv, .n_tokens = 1, .y = yv});
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push blocks of shaders/xq8_quantize.comp and matvec_xq8.comp (tests/test_vk_xq8.c) */
typedef struct cvk_xq8_quantize_push {
    uint32_t n_in, n_tokens, x_stride;
} cvk_xq8_quantize_push;
typedef struct cvk_xq8_matvec_push {
    uint32_t n_in, row_bytes, row0, rows, n_tokens, y_stride, accumulate;
} cvk_xq8_matvec_push;

/* The matvec's shape; 0 fields take the defaults. */
typedef struct cvk_xq8_cfg {
    uint32_t wg; /* invocations per workgroup (0 = 32) */
    uint32_t kl; /* lanes per row, a power of 2 within the device's smallest subgroup (0 = 8, or
                    that subgroup when smaller) */
    uint32_t nt; /* tokens per workgroup, 1..8 (0 = 1) */
} cvk_xq8_cfg;

/* Bytes of the quantized x of n_tokens tokens of n_in floats: q (32 per block) and d (8). */
uint64_t cvk_xq8_q_bytes(uint32_t n_in, uint32_t n_tokens);
uint64_t cvk_xq8_d_bytes(uint32_t n_in, uint32_t n_tokens); /* {d, mult << 16 | sum} per block */

typedef struct cvk_xq8_quantize_args {
    cvk_view x;
    uint32_t n_in, n_tokens;
    uint32_t x_stride; /* floats between tokens; 0 = n_in */
    cvk_view xq, xd;
} cvk_xq8_quantize_args;

typedef struct cvk_xq8_matvec_args {
    const cvk_buffer *w; /* n_rows rows of qtype_row_bytes(type, n_in), created with granule = a row */
    enum qtype type;
    uint32_t n_in, n_rows;
    cvk_view xq, xd; /* cvk_xq8_quantize's output for n_tokens tokens */
    uint32_t n_tokens;
    cvk_view y;
    uint32_t y_stride; /* floats between tokens; 0 = n_rows */
    bool accumulate;   /* y += the product (a residual: the same bits as a separate add) */
} cvk_xq8_matvec_args;

int cvk_xq8_quantize_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache);
/* type: Q8_0, Q4_K or Q6_K (xq8_type); cfg may be NULL. */
int cvk_xq8_matvec_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                            const cvk_xq8_cfg *cfg);
/* Record the dispatches (no barrier before or after). */
int cvk_xq8_quantize(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_xq8_quantize_args *a);
int cvk_xq8_matvec(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_xq8_matvec_args *a);
