/* A qwen3moe (or dense qwen3) model: hyperparameters from GGUF metadata, validated against
 * the tensor shapes, weights left in the mapped file, the tokenizer, and the fingerprint.
 *
 * Tensor shapes use ggml order, ne[0] = row length (the input dimension):
 *   token_embd       (n_embd, n_vocab)            output (n_embd, n_vocab), absent = tied
 *   attn_q           (n_embd, n_head*head_dim)    attn_k/attn_v (n_embd, n_head_kv*head_dim)
 *   attn_output      (n_head*head_dim, n_embd)    attn_q_norm/attn_k_norm (head_dim)
 *   ffn_gate_inp     (n_embd, n_expert)           router
 *   ffn_gate_exps/ffn_up_exps (n_embd, n_ff_exp, n_expert)   ffn_down_exps (n_ff_exp, n_embd, n_expert)
 *   dense qwen3: ffn_gate/ffn_up (n_embd, n_ff), ffn_down (n_ff, n_embd) */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/gguf/gguf.h"
#include "runtime/model/rope.h"
#include "runtime/text/tokenizer.h"

enum model_arch { ARCH_QWEN3MOE, ARCH_QWEN3 };

typedef struct model_config {
    enum model_arch arch;
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_head, n_head_kv, head_dim; /* head_dim = attention.key_length = value_length */
    uint32_t n_vocab;
    uint32_t n_ctx_train;                       /* with a command-line YaRN, orig_ctx * factor */
    uint32_t n_expert, n_expert_used, n_ff_exp; /* MoE; 0 for dense */
    uint32_t n_ff;                              /* dense FFN width; 0 for MoE */
    rope_config rope;                           /* base, scaling (runtime/model/rope.h) */
    float rms_eps;
} model_config;

typedef struct layer_weights {
    const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm, *ffn_norm;
    const gguf_tensor *gate_inp, *gate_exps, *up_exps, *down_exps; /* MoE */
    const gguf_tensor *ffn_gate, *ffn_up, *ffn_down;               /* dense */
} layer_weights;

typedef struct model {
    gguf_file *file;
    model_config cfg;
    const gguf_tensor *tok_embd, *output_norm, *output; /* output == tok_embd when tied */
    layer_weights *layers;                              /* n_layer */
    tokenizer *tok;
    gguf_str chat_template; /* tokenizer.chat_template, empty when absent */
    uint8_t fingerprint[32];
} model;

typedef struct model_load_opts {
    /* The caller reads every weight itself (the GPU upload) and hashes as it goes, then calls
     * model_set_weights_digest: the fingerprint costs no second pass over the file. */
    bool skip_weight_hash;
    rope_override rope; /* the command line's RoPE (--rope-scaling ...) over the file's; zero: the file's */
} model_load_opts;

/* Maps the file, reads and validates the config against every tensor's type and shape,
 * loads the tokenizer, and computes the fingerprint. On error returns -1 with cd_errmsg(). */
int model_load(model **out, const char *path, model_load_opts opts);
void model_free(model *m);
/* Completes the fingerprint from a weights digest made while reading the weights
 * (fp_weights_*, runtime/model/fingerprint.h). */
int model_set_weights_digest(model *m, const uint8_t digest[16]);

/* Reads and validates the hyperparameters alone (used by model_load and `cinder info`). */
int model_config_read(const gguf_file *f, model_config *cfg);
/* Range and consistency checks on a config (also applied before mkmodel writes one). */
int model_config_check(const model_config *cfg);
const char *model_arch_name(enum model_arch a);
/* Sum of the sizes of all tensors; count of parameters. */
uint64_t model_weight_bytes(const model *m);
uint64_t model_param_count(const model *m);
