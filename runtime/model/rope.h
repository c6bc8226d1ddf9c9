/* RoPE as the model runs it: NeoX rotation of the pairs (i, i + d/2) of each head by the angle
 * pos * freq[i], both rotated values scaled by mscale, with the frequencies and the scale
 * that the file's rope.scaling.* keys (or the command line's overrides) ask for.
 *
 *   base      freq0[i] = base^(-2i/d)
 *   none      freq[i] = freq0[i], mscale = attn_factor
 *   linear    freq[i] = freq0[i] / factor, mscale = attn_factor
 *   yarn      (YaRN, Peng et al. 2023, as ggml's rope_yarn and HF's _compute_yarn_parameters)
 *             the pairs that turn more than beta_fast times over the original context keep
 *             freq0 (extrapolated), those that turn less than beta_slow times take
 *             freq0 / factor (interpolated), a linear ramp in i between the two:
 *               lo = max(0, floor(corr(beta_fast))), hi = min(d - 1, ceil(corr(beta_slow)))
 *               corr(b) = d * ln(orig_ctx / (2 pi b)) / (2 ln base)
 *               mix[i] = (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)) * ext_factor
 *               freq[i] = freq0[i] * ((1 - mix[i]) / factor + mix[i])
 *             mscale = attn_factor * (1 + 0.1 ln factor)  (the "attention temperature":
 *             llama.cpp's result for qwen3moe, its context's attn factor 1 times ggml's
 *             magnitude correction; the two cancellations of llama.cpp's PR 17945 net out)
 *
 * What llama.cpp reads for qwen3/qwen3moe, and so what cinder reads: rope.freq_base,
 * rope.scaling.type (absent: linear, which with no factor is none), rope.scaling.factor (or the
 * older rope.scale_linear), rope.scaling.original_context_length (absent: context_length),
 * rope.scaling.attn_factor. It does not read rope.scaling.yarn_* for these architectures:
 * ext_factor is 1 with YaRN, beta_fast 32, beta_slow 1, as here. */
#pragma once
#include <stdint.h>

#include "runtime/gguf/gguf.h"

enum rope_scaling { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN };

typedef struct rope_config {
    enum rope_scaling scaling;
    float freq_base;            /* theta */
    float factor;               /* context extension factor; 1 with no scaling */
    uint32_t orig_ctx;          /* YaRN's original context (n_ctx_orig); the training context otherwise */
    float attn_factor;          /* rope.scaling.attn_factor: every rotation's magnitude, 1 when absent */
    float ext_factor;           /* YaRN's extrapolation mix: 1 with YaRN, 0 otherwise */
    float beta_fast, beta_slow; /* YaRN's ramp ends in rotations over orig_ctx: 32, 1 */
} rope_config;

/* The command line's say (cinder run/chat/bench/serve/info --rope-scaling ...): zero and NULL
 * fields leave the file's value. */
typedef struct rope_override {
    const char *scaling; /* none, linear, yarn */
    float factor;        /* --rope-scale */
    uint32_t orig_ctx;   /* --yarn-orig-ctx */
    float freq_base;     /* --rope-freq-base */
} rope_override;

/* No scaling, base freq_base (tests, and what a file without rope.scaling.* reads as). */
rope_config rope_config_plain(float freq_base, uint32_t n_ctx_train);
/* YaRN with llama.cpp's defaults (ext_factor 1, betas 32 and 1, attn_factor 1). */
rope_config rope_config_yarn(float freq_base, float factor, uint32_t orig_ctx);

const char *rope_scaling_name(enum rope_scaling s);
/* "none", "linear", "yarn"; anything else (longrope, ...) fails naming what cinder runs. */
int rope_scaling_parse(const char *name, size_t len, enum rope_scaling *out);

/* Reads the file's RoPE (keys ARCH.rope.*) as llama.cpp does; n_ctx_train is the file's
 * context_length (the default original context). Fails on a type cinder does not run. */
int rope_config_read(const gguf_file *f, const char *arch, uint32_t n_ctx_train, rope_config *r);
/* Applies the command line's overrides. A scaling the command line changes to YaRN or linear
 * with another factor than the file's moves *n_ctx_train to orig_ctx * factor (llama.cpp:
 * "custom YaRN scaling detected, re-adjusting n_ctx_train"). */
int rope_config_override(rope_config *r, const rope_override *o, uint32_t *n_ctx_train);
/* Range checks: a positive base, a finite factor > 0 (at least 1 for YaRN, which extends
 * the context), an original context > 0 for YaRN, a finite attn_factor > 0. */
int rope_config_check(const rope_config *r);

/* freq[0 .. head_dim/2): the angle of pair i at position pos is pos * freq[i] (rad);
 * *mscale multiplies both rotated values. Double precision; the CPU reference and the GPU's
 * table both take these. head_dim even, at most 1024. */
void rope_freqs(const rope_config *r, uint32_t head_dim, double *freq, double *mscale);
/* One line for `cinder info` and logs: "yarn, factor 4, original context 32768, ...". */
void rope_describe(const rope_config *r, char *out, size_t cap);
