/* cinder bench --restore-bench: time to restore an N-token prefix from the host tier and from
 * disk files vs recomputing it, N = 512, 4800, 16000 (bounded by the model's context); see
 * bench_restore.c. cache_dir NULL: a fresh temporary directory, removed after. cache_dir_max_mb:
 * its budget (0: room for the largest prefix). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/model/model.h"

int bench_restore(const char *model_path, model *m, uint32_t repeat, uint64_t seed, bool json, const char *cache_dir,
                  uint32_t cache_dir_max_mb);
