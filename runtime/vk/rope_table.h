/* NeoX RoPE's rotations, tabulated on the host in double precision for the kernels that rotate
 * (shaders/head_norm_rope.comp: (x[i], x[i + d/2]) <- rotate by pos * theta^(-2i/d), as
 * cpu_rope_neox). A float angle pos * inv_freq is never formed on the device (at pos 40000 it is
 * ~1e-3 rad off, and device sin/cos are only specified to 2^-11): the kernel splits
 * pos = (q << shift) + p and combines two tabulated rotations with the angle-addition formula,
 * ~1e-7 of the double reference at any position the table covers (tests/test_vk_head_norm_rope.c).
 * The table is small: (2^shift + n_hi) * d/2 * 8 bytes, 208 KiB for d = 128 and 40960 positions. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_memory.h"
#include "runtime/vk/vk_stager.h"

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
