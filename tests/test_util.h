/* Helpers shared by the cmocka tests. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Source tree root and a scratch directory (from ctest's environment; defaults for manual runs). */
const char *tu_source_dir(void);
const char *tu_tmp_dir(void);
/* Path under the source tree / scratch dir, in a static rotating buffer. */
const char *tu_src_path(const char *rel);
const char *tu_tmp_path(const char *rel);
/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *len);
/* Relative L2 error ||a-b|| / ||b||. */
double tu_rel_l2(const float *a, const float *b, size_t n);

#include "runtime/model/synth.h"
/* Writes a synthetic model into the scratch dir (fresh each call) and returns its path.
 * quant NULL keeps the preset's mix. tweak, if given, edits the spec before writing. */
const char *tu_make_model(const char *file, const char *preset, const char *quant, uint64_t seed,
                          void (*tweak)(synth_spec *));
