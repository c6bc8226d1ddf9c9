/* Decode matrix-vector product with dequantization in registers (shaders/matvec.comp):
 *
 *   y[v][r] = sum_i W[s(v)][r][i] * x[v][i]        r < n_rows, i < n_in, v < n_vec
 *
 * W: a (n_in, n_rows, n_slices) tensor of `type` (any type qtype_supported names),
 * rows of qtype_row_bytes(type, n_in) bytes, flattened row = slice * n_rows + r; it may be
 * split into parts (vk_memory.h; create it with granule = row bytes) and is dispatched once
 * per part. Each weight is read once per vector group: the NVEC vectors of a workgroup share
 * every decoded block.
 *
 * Slice selection:
 *   dense (use_ids false): every vector uses slice `slice` (0 for a plain matrix);
 *   MoE   (use_ids true):  vector v uses slice ids[ids_offset + v] (int32, read on the GPU,
 *                          so decode never brings expert ids to the host); an id outside
 *                          [0, n_slices) gives a row of zeros.
 * x: f32 vectors x_stride floats apart; x_shared makes every vector read the same x (the
 * gate/up projections of the k experts of one token). y: f32 vectors y_stride floats apart.
 *
 *   cvk_matvec_pipeline(&p, &vk->dev, vk->pcache.cache, QTYPE_Q4_K, NULL);      defaults
 *   cvk_matvec(&vk->cmd, &vk->dpool, &p, &(cvk_matvec_args){.w = &w, .type = QTYPE_Q4_K,
 *              .n_in = 2048, .n_rows = 768, .n_slices = 128, .x = xv, .x_shared = true,
 *              .y = yv, .n_vec = 8, .use_ids = true, .ids = topk, .ids_offset = 0});
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"

/* mirrors the push block in shaders/matvec.comp (pinned by tests/test_vk_matvec.c) */
typedef struct cvk_matvec_push {
    uint32_t n_in, row_bytes, n_rows, n_slices;
    uint32_t row0, rows, r_begin, n_vec;
    uint32_t x_stride, y_stride, slice;
    int32_t ids_offset; /* < 0: dense */
    uint32_t lpr;       /* lanes per row */
    uint32_t x0;        /* matvec_texel.comp: x's first 16-byte texel in its buffer part */
} cvk_matvec_push;

/* Specialization: 0 fields take the defaults. */
typedef struct cvk_matvec_cfg {
    uint32_t wg;            /* invocations per workgroup (0 = 64) */
    uint32_t rows;          /* output rows per workgroup (0 = 2) */
    uint32_t nvec;          /* vectors per workgroup in dense mode, 1..8 (0 = 4) */
    uint32_t subgroup_size; /* requiredSubgroupSize when supported (0 = the driver's) */
    uint32_t lanes_per_row; /* invocations sharing one row, a power of 2 <= wg (0 = per shape) */
    bool texel;             /* shaders/matvec_texel.comp (Q6_K, lanes_per_row 1, a16): the weights and x
                               read through uniform texel buffers (CPU devices: a texel fetch is a
                               gather where a storage-buffer load loops over the lanes); x must
                               start on a 16-byte texel, its stride whole texels */
    bool a16;               /* with texel, and only with it: the weights in the 16-byte-aligned Q6_K
                               row layout of cvk_matvec_pack_rows (one texel per ql/qh/scales load) */
} cvk_matvec_cfg;

typedef struct cvk_matvec_args {
    const cvk_buffer *w;
    enum qtype type;
    uint32_t n_in, n_rows, n_slices; /* n_slices 0 means 1 */
    cvk_view x;
    uint32_t x_stride; /* floats between vectors; 0 means n_in */
    bool x_shared;     /* all vectors read the first x */
    cvk_view y;
    uint32_t y_stride; /* floats between vectors; 0 means n_rows */
    uint32_t n_vec;
    bool use_ids;
    cvk_view ids;        /* int32 expert ids (use_ids) */
    uint32_t ids_offset; /* first id used, in int32 elements of ids */
    uint32_t slice;      /* dense mode */
} cvk_matvec_args;

/* One pipeline per weight type and configuration; cfg may be NULL. */
int cvk_matvec_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                        const cvk_matvec_cfg *cfg);
/* The configuration for a shape (n_vec: vectors per dense call; pass 1 for ids mode). Lanes
 * per row are left to each call, so today this equals the defaults at n_vec = 1. */
cvk_matvec_cfg cvk_matvec_choose(const cvk_device *d, enum qtype type, uint32_t n_in, uint32_t n_rows, uint32_t n_vec);
/* Bytes of one row of n_in weights in the layout cfg reads (NULL: the file's): a16's row holds
 * the 208-byte ql/qh/scales bodies of its super-blocks, then their 2-byte d's, padded to 16 bytes
 * (1,680 bytes at n_in 2,048, as in the file; 224 where the file has 210). */
uint64_t cvk_matvec_row_bytes(const cvk_matvec_cfg *cfg, enum qtype type, uint32_t n_in);
/* n_rows rows of the file's layout at src into cfg's layout at dst (cvk_matvec_row_bytes
 * each); a plain copy unless cfg->a16. */
void cvk_matvec_pack_rows(const cvk_matvec_cfg *cfg, enum qtype type, uint32_t n_in, const void *src, void *dst,
                          uint64_t n_rows);
/* Records one dispatch per weight part (no barrier before or after). */
int cvk_matvec(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_matvec_args *a);
