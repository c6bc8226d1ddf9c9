/* NeoX RoPE kernel (shaders/rope_neox.comp), host side. In place on q or k laid out
 * [tokens][heads][head_dim] (tokens tok_stride floats apart), for each head and i < d/2:
 *     (x[i], x[i + d/2]) <- rotate by pos[t] * theta^(-2i/d)          exactly cpu_rope_neox
 * Positions come from a GPU buffer of uint32, one per token, so a recorded decode step is
 * replayed with new positions by rewriting that buffer (no re-recording).
 *
 * theta and head_dim live in a cos/sin table built once on the host in double precision
 * (cvk_rope_table_create): the kernel splits pos = (q << shift) + p and combines the two
 * tabulated rotations, which keeps it within ~1e-7 of the double reference at any position
 * the table covers (float pow/cos in the kernel would be ~1e-3 off at pos 40000). The table
 * is small: (2^shift + n_hi) * d/2 * 8 bytes, 208 KiB for d = 128 and 40960 positions. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_pipeline.h"
#include "runtime/vk/vk_stager.h"

/* mirrors the push block in shaders/rope_neox.comp (pinned by tests/test_vk_rope.c) */
typedef struct cvk_rope_push {
    uint32_t tokens, heads, head_dim, tok_stride, shift, n_hi;
} cvk_rope_push;

typedef struct cvk_rope_table {
    cvk_buffer buf;     /* (2^shift + n_hi) rows of head_dim/2 (cos, sin) float pairs */
    uint32_t head_dim, n_pos, shift, n_hi;
    float theta;
} cvk_rope_table;

/* Table sizes for positions [0, n_pos): shift = ceil(log2(n_pos) / 2), at least 4. */
void cvk_rope_table_dims(uint32_t n_pos, uint32_t *shift, uint32_t *n_hi);
/* Fills out[(2^shift + n_hi) * head_dim] on the host: the lo rows then the hi rows. */
void cvk_rope_table_fill(float *out, uint32_t head_dim, float theta, uint32_t shift, uint32_t n_hi);
/* Builds, uploads and flushes the table for positions [0, n_pos). head_dim even, >= 2. */
int cvk_rope_table_create(cvk_rope_table *t, cvk_mem *m, cvk_stager *s, uint32_t head_dim, float theta,
                          uint32_t n_pos);
void cvk_rope_table_destroy(cvk_mem *m, cvk_rope_table *t);

typedef struct cvk_rope_args {
    cvk_view x;                  /* f32 [tokens][heads][head_dim], rotated in place */
    cvk_view pos;                /* uint32 [tokens]; each must be < table->n_pos */
    const cvk_rope_table *table; /* its head_dim is the head size */
    uint32_t tokens, heads;
    uint32_t tok_stride;         /* floats between tokens; 0 means heads * head_dim */
} cvk_rope_args;

/* wg: invocations per workgroup (0 = 64). */
int cvk_rope_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg);
/* Records the dispatch (no barrier before or after). */
int cvk_rope(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_rope_args *a);
