/* GPU sampling, host side: rows of n logits -> one uint32 id per row, in two dispatches with a
 * barrier between them (recorded by the op), so a decode step samples without a download.
 *
 * Greedy (shaders/argmax.comp, cvk_argmax): ties to the lower id, exactly sampler_argmax.
 *   pass 0: ceil(n / chunk) workgroups per row reduce chunk = 8 * wg logits each into a
 *           (value, id) pair in the scratch buffer;
 *   pass 1: one workgroup per row reduces the pairs and writes the id.
 * For n_vocab = 151936 and wg = 256 that is 75 workgroups per row, then one. A CPU device's
 * pipelines read the logits through a texel buffer (argmax_texel.comp, 4 logits a fetch):
 * rows then start at whole 16-byte texels and the view holds each row's last whole texel. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/argmax.comp (pinned by tests/test_vk_sample.c) */
typedef struct cvk_argmax_push {
    uint32_t n, rows, stride, chunk, n_chunks;
    uint32_t l0; /* texel variant: the logits' first 16-byte texel in their buffer part */
} cvk_argmax_push;

typedef struct cvk_argmax_pipes {
    cvk_pipeline pass[2];
    bool texel; /* argmax_texel.comp */
} cvk_argmax_pipes;

typedef struct cvk_argmax_args {
    cvk_view logits;  /* f32 [rows][stride] */
    cvk_view scratch; /* cvk_argmax_scratch_bytes */
    cvk_view out;     /* uint32 [rows] */
    uint32_t n, rows;
    uint32_t stride; /* floats between rows; 0 means n */
} cvk_argmax_args;

/* wg: invocations per workgroup (power of two, 32..1024; 0 = 256); texel: the texel variant. */
int cvk_argmax_pipelines(cvk_argmax_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t wg, bool texel);
void cvk_argmax_pipelines_destroy(cvk_device *d, cvk_argmax_pipes *p);
/* Bytes of scratch cvk_argmax needs for these pipelines and sizes. */
uint64_t cvk_argmax_scratch_bytes(const cvk_argmax_pipes *p, uint32_t n, uint32_t rows);
/* Records pass 0, a compute-to-compute barrier, pass 1 (no barrier before or after). */
int cvk_argmax(cvk_cmd *c, cvk_descpool *dp, const cvk_argmax_pipes *p, const cvk_argmax_args *a);

/* Top-k / temperature / top-p (shaders/sample_topk.comp, cvk_sample): steps 2-5 of
 * sampler_sample for each row with its own parameters and the uniform u of step 5, read from a
 * GPU buffer of cvk_sample_row (so one dispatch samples rows of different requests, and a
 * replayed step takes new values without re-recording). A row is sampled when
 * cvk_sample_row_on_device says so (temperature > 0, 1 <= top_k <= k_max); any other row's out
 * is left untouched (record cvk_argmax before it for greedy rows; top_k <= 0, "all", samples on
 * the CPU). Sums are float where the CPU's are double, so the id differs from sampler_sample
 * only when u or top_p lies within ~1e-6 of the boundary between two tokens.
 * Limits: k_max <= CVK_SAMPLE_MAX_K, n <= 1024 chunks of 8 * wg logits.
 *   pass 0: each chunk of 8 * wg logits selects its sorted top-k into scratch;
 *   pass 1: one workgroup per row merges the chunk lists, then samples. */
#define CVK_SAMPLE_MAX_K 256

/* mirrors struct Row in shaders/sample_topk.comp (pinned by tests/test_vk_sample.c) */
typedef struct cvk_sample_row {
    float temperature;
    int32_t top_k;
    float top_p; /* >= 1: no limit */
    float u;     /* this step's draw, rng_f32 */
} cvk_sample_row;

static inline bool cvk_sample_row_on_device(float temperature, int32_t top_k, uint32_t k_max) {
    return temperature > 0 && top_k >= 1 && (uint32_t)top_k <= k_max;
}

/* mirrors the push block in shaders/sample_topk.comp (pinned by tests/test_vk_sample.c) */
typedef struct cvk_sample_push {
    uint32_t n, rows, stride, n_chunks, k_max;
} cvk_sample_push;

typedef struct cvk_sample_pipes {
    cvk_pipeline pass[2];
} cvk_sample_pipes;

typedef struct cvk_sample_args {
    cvk_view logits;  /* f32 [rows][stride] */
    cvk_view scratch; /* cvk_sample_scratch_bytes */
    cvk_view params;  /* cvk_sample_row [rows] */
    cvk_view out;     /* uint32 [rows] */
    uint32_t n, rows;
    uint32_t stride; /* floats between rows; 0 means n */
    uint32_t k_max;  /* 1..CVK_SAMPLE_MAX_K: the largest top_k sampled here */
} cvk_sample_args;

/* wg: as for cvk_argmax_pipelines. */
int cvk_sample_pipelines(cvk_sample_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
void cvk_sample_pipelines_destroy(cvk_device *d, cvk_sample_pipes *p);
uint64_t cvk_sample_scratch_bytes(const cvk_sample_pipes *p, uint32_t n, uint32_t rows, uint32_t k_max);
/* Records pass 0, a compute-to-compute barrier, pass 1 (no barrier before or after). */
int cvk_sample(cvk_cmd *c, cvk_descpool *dp, const cvk_sample_pipes *p, const cvk_sample_args *a);
