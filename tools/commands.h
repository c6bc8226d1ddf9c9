/* The subcommand table: name and one-line help. Add a line here and a tools/cmd_<name>.c. */
#pragma once

#define CINDER_COMMANDS(X)                                                                                             \
    X(info, "describe a GGUF model: hyperparameters, tensors, fingerprint")                                            \
    X(tokenize, "print the token ids of a text")                                                                       \
    X(detokenize, "print the text of comma-separated token ids")                                                       \
    X(mkmodel, "write a synthetic qwen3moe GGUF model (presets: tiny, small, qwen3-30b-a3b)")                          \
    X(run, "generate from a prompt and print text and timings")                                                        \
    X(chat, "multi-turn chat REPL with the prefix cache; per-turn cache hits and timings")                             \
    X(serve, "OpenAI-compatible HTTP server (chat, completions, streaming) with continuous batching")                  \
    X(bench, "prefill and decode throughput on the GPU (pp512 / tg128 by default)")                                    \
    X(profile, "where a step's GPU time goes: per op time, bytes, FLOPs, roofline, trace")

#define X(name, help) int cmd_##name(int argc, char **argv);
CINDER_COMMANDS(X)
#undef X
