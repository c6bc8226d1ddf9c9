/* Small helpers shared by the subcommands: option parsing, number parsing, medians, errors.
 * (The clock is runtime/base/clock.h's cd_now_ms.) */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/model/rope.h"

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i]; advances *i past the value.
 * A matching option without a value sets *missing. */
bool cli_value(int argc, char **argv, int *i, const char *name, const char **value);
bool cli_flag(char **argv, int i, const char *name);

/* Strict parsers: whole string, range-checked; print "cinder: --opt: ..." and return -1. */
int cli_u32(const char *opt, const char *s, uint32_t *out);
int cli_u64(const char *opt, const char *s, uint64_t *out);
int cli_i32(const char *opt, const char *s, int32_t *out);
int cli_f32(const char *opt, const char *s, float *out);
/* --cache-dir-max-mb N (cinder chat, serve, bench): N MiB, at least 1; 0 is refused with a message
 * (there is no unlimited budget: leave the flag out for the default, or --cache-dir out for no
 * disk tier). -1 after the message. */
int cli_cache_dir_max_mb(const char *cmd, const char *s, uint32_t *mb);
/* FLAG auto|on|off -> 0, 1, -1 (cinder bench and profile: --gate-up-pairs, --int-dot: gpu_model_opts's
 * fields of those names). */
int cli_auto_on_off(const char *cmd, const char *flag, const char *s, int *out);
/* "A,B,C" -> exactly n numbers (cinder profile --few-shape / --one-shape). */
int cli_u32s(const char *cmd, const char *opt, const char *s, uint32_t *out, size_t n);
/* "1,2,3" -> malloc'd ids. */
int cli_ids(const char *opt, const char *s, int32_t **ids, size_t *n);

/* The RoPE flags every command that loads a model takes, as llama.cpp spells them:
 * --rope-scaling none|linear|yarn, --rope-scale N, --yarn-orig-ctx N, --rope-freq-base F.
 * Returns 1 when argv[*i] was one (advanced past its value), 0 when not, -1 after a message. */
int cli_rope(int argc, char **argv, int *i, rope_override *o);
/* The memory plan's flag, as run, chat and serve describe it. */
#define CLI_DEVICE_MEMORY_USAGE                                                                                        \
    "The weights must fit what the device has left\n"                                                                  \
    "  after the KV pool and work buffers, or nothing is read (docs/VULKAN.md); --device-memory-mb N\n"                \
    "  plans as if the device had N MiB (a smaller card). Where they do not fit, the experts of the\n"                 \
    "  first layers stay in host memory that the device reads (as few as make the rest fit);\n"                        \
    "  --n-cpu-moe N puts exactly N layers' there, --cpu-moe every layer's, --n-cpu-moe 0 none."
#define CLI_MEMORY_FLAGS "[--device-memory-mb N] [--n-cpu-moe N | --cpu-moe]"
/* --device-memory-mb N, --n-cpu-moe N, --cpu-moe into the engine's options: 1 when argv[*i] was
 * one of them (its value consumed), 0 when not, -1 on a bad value (said on stderr). */
struct engine_opts;
int cli_memory(int argc, char **argv, int *i, struct engine_opts *eo);
#define CLI_ROPE_USAGE "[--rope-scaling none|linear|yarn] [--rope-scale N] [--yarn-orig-ctx N] [--rope-freq-base F]"

/* The median of v[0..n) (n >= 1); sorts v in place. */
double cli_median(double *v, uint32_t n);
/* Prints "cinder <cmd>: <message>" to stderr and returns 1 (the exit status). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_unknown(const char *cmd, const char *arg);

/* The default model: <repo>/models/small-q4_k_m.gguf, written by mkmodel on first use. */
const char *cli_default_model(void);
int cli_ensure_default_model(void);
