/* NeoX RoPE's rotations, tabulated on the host in double precision for the kernels that rotate
 * (shaders/head_norm_rope.comp: (x[i], x[i + d/2]) <- rotate by pos * freq[i] and scale by
 * mscale, as cpu_rope_neox; freq and mscale are the model's, runtime/model/rope.h: the base's
 * frequencies, or YaRN's with its attention factor). A float angle pos * inv_freq is never formed on the device (at pos 40000 it is
 * ~1e-3 rad off, and device sin/cos are only specified to 2^-11): the kernel splits
 * pos = (q << shift) + p and combines two tabulated rotations with the angle-addition formula,
 * ~1e-7 of the double reference at any position the table covers (tests/test_vk_head_norm_rope.c).
 * mscale rides in the lo rows alone: the
 * combined (cos, sin) is linear in them, so the kernel's rotation comes out scaled once, with
 * no change to the kernel. The table is small: (2^shift + n_hi) * d/2 * 8 bytes, 208 KiB for d = 128 and 40960 positions. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_memory.h"
#include "runtime/vk/vk_stager.h"

typedef struct cvk_rope_table {
    cvk_buffer buf; /* (2^shift + n_hi) rows of head_dim/2 (cos, sin) float pairs */
    uint32_t head_dim, n_pos, shift, n_hi;
} cvk_rope_table;

/* Table sizes for positions [0, n_pos): shift = ceil(log2(n_pos) / 2), at least 4. */
void cvk_rope_table_dims(uint32_t n_pos, uint32_t *shift, uint32_t *n_hi);
/* Fills out[(2^shift + n_hi) * head_dim] on the host: the lo rows (times mscale) then the hi
 * rows. freq[head_dim / 2]: each pair's angle per position. */
void cvk_rope_table_fill(float *out, uint32_t head_dim, const double *freq, double mscale, uint32_t shift,
                         uint32_t n_hi);
/* Builds, uploads and flushes the table for positions [0, n_pos). head_dim even, >= 2. */
int cvk_rope_table_create(cvk_rope_table *t, cvk_mem *m, cvk_stager *s, uint32_t head_dim, const double *freq,
                          double mscale, uint32_t n_pos);
void cvk_rope_table_destroy(cvk_mem *m, cvk_rope_table *t);
