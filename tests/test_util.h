/* Helpers shared by the cmocka tests. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "tests/test_status.h" /* tu_skip, tu_status */

/* Source tree root and a scratch directory (from ctest's environment; defaults for manual runs). */
const char *tu_source_dir(void);
const char *tu_tmp_dir(void);
/* Path under the source tree / scratch dir, in a static rotating buffer. */
const char *tu_src_path(const char *rel);
const char *tu_tmp_path(const char *rel);
/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *len);
/* Writes len bytes to path (created or truncated); 0, or -1 on any error. */
int tu_write_file(const char *path, const void *bytes, size_t len);
/* Writes a copy of the GGUF model at src into the scratch dir as file, with one byte of one
 * weight (the middle of the last tensor) flipped in its lowest bit: another model fingerprint,
 * the same shapes. Returns its path, NULL on error. */
const char *tu_one_weight_changed(const char *src, const char *file);
/* Relative L2 error ||a-b|| / ||b||. */
double tu_rel_l2(const float *a, const float *b, size_t n);

#include "runtime/model/synth.h"
/* Writes a synthetic model into the scratch dir (fresh each call) and returns its path.
 * quant NULL keeps the preset's mix. tweak, if given, edits the spec before writing. */
const char *tu_make_model(const char *file, const char *preset, const char *quant, uint64_t seed,
                          void (*tweak)(synth_spec *));

#include "runtime/base/kv_layout.h"
/* cpu_ref.c attention() for one query token over len positions, K/V read from an fp16 pool
 * (kv_layout) through one block-table row; out = 0 for len 0. The oracle of the attention
 * kernel tests. */
void tu_attn_reference(const kv_layout *l, const uint16_t *pool, const float *q, const uint32_t *table,
                       uint32_t len, uint32_t n_head, uint32_t layer, float *out);

