/* cinder bench --restore-bench: time to restore an N-token prefix from the host tier and from
 * disk files vs recomputing it, N = 512, 4800, 16000 (bounded by the model's context); see
 * bench_restore.c. From the engine's flags (tools/cli_engine.h) it takes the disk tier's
 * directory (NULL: a fresh temporary one, removed after) and budget (0: room for the largest
 * prefix), and the memory plan's; the context, pool and host tier are its own. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "runtime/model/model.h"

int bench_restore(const char *model_path, model *m, uint32_t repeat, uint64_t seed, bool json,
                  const engine_opts *flags);
