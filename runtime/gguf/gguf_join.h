/* Private to runtime/gguf: gguf_split.c finds, opens and checks a split model's shards;
 * gguf_read.c, which owns the file's indexes, joins them. */
#pragma once
#include <stdint.h>

#include "runtime/gguf/gguf.h"

/* Makes first the whole model: its tensors become every shard's (first's, then rest[0]'s, ...;
 * each tensor's shard set), looked up by name across all; first owns and closes rest. Fails
 * on a name in two shards, naming both (paths[s]: shard s's path, for messages); rest is then
 * closed and first is unchanged. */
int gguf_join_shards(gguf_file *first, gguf_file **rest, uint32_t n_rest, const char *const *paths);
