/* cinder bench --agents N: agent tool-call loops through the continuous-batching scheduler.
 *
 * N agents share a system prompt of S tokens; each runs R rounds: append a tool result of T
 * tokens to its conversation, send the whole conversation as a request, generate G tokens, append
 * them (the reply) and go on. At most C requests are in flight (the engine runs C sequences at
 * once); an agent's next round starts when its reply is complete. Token ids are seeded random
 * (the workload's shape, not its text, is what is measured). Reports aggregate generated
 * tokens per second over the run's wall time, TTFT and inter-token latency percentiles, the
 * cache hit rate and the prefill tokens the dedup of shared prefixes saved. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "runtime/model/model.h"

typedef struct bench_agents_opts {
    uint32_t agents, rounds, system_tokens, tool_tokens, gen, concurrency;
    /* The engine's flags (tools/cli_engine.h) and --chunk-tokens; the run sets max_seqs
     * (concurrency), and n_ctx and pool_tokens where they are 0 (every conversation at its
     * longest, all running at once, and room for the cache). */
    engine_opts eo;
    uint64_t seed;
    bool json;
    bool json_object; /* every reply held to one JSON object (engine_request.json_object) */
    const char *model;
} bench_agents_opts;

int bench_agents(const bench_agents_opts *o, model *m);
