/* The CPU reference forward pass: the oracle every GPU kernel and the whole GPU model are
 * tested against. It reads top to bottom like the model's equations; clarity over speed.
 * Activations are float32; dot products accumulate in double; weights are dequantized one
 * row at a time from the mapped file.
 *
 * One token per call, attending over a float32 KV cache of every earlier position. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/gguf/xq8.h"
#include "runtime/model/model.h"

typedef struct cpu_state {
    const model *m;
    uint32_t n_ctx;
    float *x;              /* (n_embd) residual stream */
    float *xb;             /* (n_embd) normed input of a sublayer */
    float *xb2;            /* (n_embd) sublayer output */
    float *q;              /* (n_head * head_dim) */
    float *k, *v;          /* (n_head_kv * head_dim) */
    float *att_out;        /* (n_head * head_dim) */
    float *att;            /* (n_ctx) scores of one head */
    float *hb, *hb2;       /* (n_ff) expert hidden */
    float *router;         /* (n_expert) */
    float *row;            /* (max row length) one dequantized weight row */
    float *key_cache;      /* (n_layer, n_ctx, n_head_kv * head_dim) */
    float *value_cache;    /* (n_layer, n_ctx, n_head_kv * head_dim) */
    float *logits;         /* (n_vocab) */
    double rope_freq[512]; /* (head_dim / 2) each pair's angle per position (rope_freqs) */
    double rope_mscale;    /* and the rotation's magnitude (YaRN's attention factor) */
    bool kv_fp16;          /* round cached K and V to fp16 as the GPU's pool stores them (default off:
                              the f32 reference); set after cpu_state_init */
    bool int_dot;          /* the integer family, as the GPU's plan with gpu_model_opts.int_dot: the
                              attention projections (q, k, v, o) of Q8_0, Q4_K and Q6_K weights as
                              cpu_matvec_xq8 (x quantized to int8 blocks); set after cpu_state_init */
    xq8_block *xq;         /* (max row length / 32) the quantized x of cpu_matvec_xq8 */
} cpu_state;

int cpu_state_init(cpu_state *s, const model *m, uint32_t n_ctx);
void cpu_state_free(cpu_state *s);

/* Runs token at position pos (0 <= pos < n_ctx; positions before it must have been run).
 * With want_logits, s->logits holds the next-token logits afterwards. */
int cpu_forward(cpu_state *s, int32_t token, uint32_t pos, int want_logits);

/* ---- building blocks, exposed so GPU kernel tests can use the same math ---- */
void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* out[r] = dot(row r of W, x) for rows [0, n_rows) of a (n_in, n_rows, ...) tensor slice. */
void cpu_matvec(float *out, const gguf_tensor *w, int64_t slice, const float *x, float *row_scratch);
/* The integer family's out[r] = xq8_dot_row(row r, xq8(x)) for w's rows (w of an xq8_type;
 * runtime/gguf/xq8.h), with xq scratch for n_in / 32 blocks: the GPU's matvec_xq8 bits. */
void cpu_matvec_xq8(float *out, const gguf_tensor *w, const float *x, xq8_block *xq);
/* Row r of tensor w (flattened over dims 1..3) as floats. */
void cpu_tensor_row(const gguf_tensor *w, int64_t r, float *out);
/* NeoX RoPE on one head: pairs (i, i + d/2) rotate by pos * freq[i] and scale by mscale
 * (rope_freqs: the base's frequencies, or YaRN's; runtime/model/rope.h). */
void cpu_rope_neox(float *head, uint32_t head_dim, uint32_t pos, const double *freq, double mscale);
float cpu_silu(float x);
/* Router: softmax over all experts, top-k by probability (ties to the lower index),
 * weights renormalized to sum to 1. ids/weights hold k entries. */
void cpu_moe_route(const float *logits, uint32_t n_expert, uint32_t k, int32_t *ids, float *weights);
