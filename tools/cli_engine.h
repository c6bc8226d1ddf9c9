/* The engine's flags, parsed once for every command that runs the engine (chat, serve, bench):
 * the prefix cache and its tiers, the context and KV pool, speculative decoding and the memory
 * plan, each written as llama.cpp's tools or vLLM spell them where they have one. */
#pragma once
#include "engine/engine.h"

/* One engine flag at argv[*i] into *eo: 1 when it was one (advanced past its value), 0 when it is
 * not an engine flag, -1 after "cinder <cmd>: ..." on stderr (a bad or missing value). */
int cli_engine_flag(const char *cmd, int argc, char **argv, int *i, engine_opts *eo);
/* The flags together, once all are read: --page-size at most 256, --spec-tokens at most
 * ENGINE_SPEC_MAX, the tiers not without the cache, --cache-dir-max-mb only with --cache-dir.
 * 0, or -1 after the message. */
int cli_engine_check(const char *cmd, const engine_opts *eo);
