#include "runtime/model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/model/fingerprint.h"

const char *model_arch_name(enum model_arch a) { return a == ARCH_QWEN3MOE ? "qwen3moe" : "qwen3"; }

/* Reads "<arch>.<suffix>" as u32. */
static int arch_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_u32(f, key, out);
}

static int arch_f32(const gguf_file *f, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(f, key, out);
}

static bool arch_has(const gguf_file *f, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_find_kv(f, key) != NULL;
}

/* cinder rotates every dimension of a head: a file that rotates fewer (partial RoPE) is refused
 * rather than run with wrong attention. */
static int check_rope_dims(const gguf_file *f, const char *arch, uint32_t head_dim) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    uint32_t n_rot = head_dim;
    if (gguf_find_kv(f, key) && gguf_get_u32(f, key, &n_rot)) return -1;
    if (n_rot != head_dim)
        return cd_fail("rope.dimension_count %u differs from key_length %u: partial RoPE is not supported", n_rot,
                       head_dim);
    return 0;
}

int model_config_check(const model_config *c) {
    if (c->n_layer == 0 || c->n_layer > 1024) return cd_fail("block_count %u out of range", c->n_layer);
    if (c->n_embd == 0 || c->n_embd > 65536) return cd_fail("embedding_length %u out of range", c->n_embd);
    if (c->n_head == 0 || c->n_head > 1024) return cd_fail("head_count %u out of range", c->n_head);
    if (c->n_head_kv == 0 || c->n_head % c->n_head_kv)
        return cd_fail("head_count %u is not a multiple of head_count_kv %u", c->n_head, c->n_head_kv);
    if (c->head_dim == 0 || c->head_dim > 1024 || c->head_dim % 2)
        return cd_fail("key_length %u must be even and at most 1024", c->head_dim);
    if (c->n_ctx_train == 0) return cd_fail("context_length is 0");
    if (!(c->rms_eps > 0 && c->rms_eps < 1)) return cd_fail("layer_norm_rms_epsilon %g out of range", c->rms_eps);
    if (rope_config_check(&c->rope)) return -1;
    if (c->arch == ARCH_QWEN3MOE) {
        if (c->n_expert == 0 || c->n_expert > 1024) return cd_fail("expert_count %u out of range", c->n_expert);
        if (c->n_expert_used == 0 || c->n_expert_used > c->n_expert)
            return cd_fail("expert_used_count %u must be in 1..expert_count (%u)", c->n_expert_used, c->n_expert);
        if (c->n_ff_exp == 0 || c->n_ff_exp > 1u << 20)
            return cd_fail("expert_feed_forward_length %u out of range", c->n_ff_exp);
    } else if (c->n_ff == 0 || c->n_ff > 1u << 20) {
        return cd_fail("feed_forward_length %u out of range", c->n_ff);
    }
    return 0;
}

int model_config_read(const gguf_file *f, model_config *c) {
    memset(c, 0, sizeof *c);
    gguf_str arch_s;
    if (gguf_get_str(f, "general.architecture", &arch_s)) return -1;
    if (gguf_str_eq(arch_s, "qwen3moe")) c->arch = ARCH_QWEN3MOE;
    else if (gguf_str_eq(arch_s, "qwen3")) c->arch = ARCH_QWEN3;
    else return cd_fail("architecture '%.*s' is not supported (qwen3moe, qwen3)", (int)arch_s.len, arch_s.ptr);
    const char *a = model_arch_name(c->arch);

    if (arch_u32(f, a, "block_count", &c->n_layer) || arch_u32(f, a, "embedding_length", &c->n_embd) ||
        arch_u32(f, a, "attention.head_count", &c->n_head) || arch_u32(f, a, "context_length", &c->n_ctx_train) ||
        arch_f32(f, a, "attention.layer_norm_rms_epsilon", &c->rms_eps))
        return -1;
    c->n_head_kv = c->n_head;
    if (arch_has(f, a, "attention.head_count_kv") && arch_u32(f, a, "attention.head_count_kv", &c->n_head_kv))
        return -1;
    c->head_dim = c->n_head ? c->n_embd / c->n_head : 0;
    if (arch_has(f, a, "attention.key_length") && arch_u32(f, a, "attention.key_length", &c->head_dim)) return -1;
    uint32_t v_len = c->head_dim;
    if (arch_has(f, a, "attention.value_length") && arch_u32(f, a, "attention.value_length", &v_len)) return -1;
    if (v_len != c->head_dim) return cd_fail("value_length %u differs from key_length %u", v_len, c->head_dim);
    if (rope_config_read(f, a, c->n_ctx_train, &c->rope) || check_rope_dims(f, a, c->head_dim)) return -1;
    if (c->arch == ARCH_QWEN3MOE) {
        if (arch_u32(f, a, "expert_count", &c->n_expert) || arch_u32(f, a, "expert_used_count", &c->n_expert_used) ||
            arch_u32(f, a, "expert_feed_forward_length", &c->n_ff_exp))
            return -1;
    } else if (arch_u32(f, a, "feed_forward_length", &c->n_ff)) {
        return -1;
    }
    const gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
    if (!embd) return cd_fail("missing tensor 'token_embd.weight'");
    if (embd->ne[1] <= 0 || embd->ne[1] > (1 << 24))
        return cd_fail("token_embd.weight has %lld rows", (long long)embd->ne[1]);
    c->n_vocab = (uint32_t)embd->ne[1];
    return model_config_check(c);
}

/* Finds a tensor and checks its shape and type; dims beyond those given must be 1. */
static const gguf_tensor *want(const gguf_file *f, const char *name, int64_t d0, int64_t d1, int64_t d2) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        cd_fail("missing tensor '%s'", name);
        return NULL;
    }
    int64_t d[4] = {d0, d1, d2, 1};
    for (int i = 0; i < 4; i++) {
        if (t->ne[i] != d[i]) {
            cd_fail("tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)d0,
                    (long long)d1, (long long)d2);
            return NULL;
        }
    }
    if (!qtype_supported(t->type)) {
        char names[256];
        cd_fail("tensor '%s' has type %s, which cinder does not compute with (it does: %s)", name, qtype_name(t->type),
                qtype_supported_names(names, sizeof names));
        return NULL;
    }
    return t;
}

static const gguf_tensor *want_layer(const gguf_file *f, uint32_t il, const char *what, int64_t d0, int64_t d1,
                                     int64_t d2) {
    char name[96];
    snprintf(name, sizeof name, "blk.%u.%s.weight", il, what);
    return want(f, name, d0, d1, d2);
}

static int map_layer(const gguf_file *f, const model_config *c, uint32_t il, layer_weights *l) {
    int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    if (!(l->attn_norm = want_layer(f, il, "attn_norm", E, 1, 1)) || !(l->wq = want_layer(f, il, "attn_q", E, Q, 1)) ||
        !(l->wk = want_layer(f, il, "attn_k", E, KV, 1)) || !(l->wv = want_layer(f, il, "attn_v", E, KV, 1)) ||
        !(l->wo = want_layer(f, il, "attn_output", Q, E, 1)) ||
        !(l->q_norm = want_layer(f, il, "attn_q_norm", c->head_dim, 1, 1)) ||
        !(l->k_norm = want_layer(f, il, "attn_k_norm", c->head_dim, 1, 1)) ||
        !(l->ffn_norm = want_layer(f, il, "ffn_norm", E, 1, 1)))
        return -1;
    if (c->arch == ARCH_QWEN3MOE) {
        int64_t X = c->n_expert, F = c->n_ff_exp;
        if (!(l->gate_inp = want_layer(f, il, "ffn_gate_inp", E, X, 1)) ||
            !(l->gate_exps = want_layer(f, il, "ffn_gate_exps", E, F, X)) ||
            !(l->up_exps = want_layer(f, il, "ffn_up_exps", E, F, X)) ||
            !(l->down_exps = want_layer(f, il, "ffn_down_exps", F, E, X)))
            return -1;
    } else {
        int64_t F = c->n_ff;
        if (!(l->ffn_gate = want_layer(f, il, "ffn_gate", E, F, 1)) ||
            !(l->ffn_up = want_layer(f, il, "ffn_up", E, F, 1)) ||
            !(l->ffn_down = want_layer(f, il, "ffn_down", F, E, 1)))
            return -1;
    }
    return 0;
}

static int map_tensors(model *m) {
    const gguf_file *f = m->file;
    const model_config *c = &m->cfg;
    if (!(m->tok_embd = want(f, "token_embd.weight", c->n_embd, c->n_vocab, 1)) ||
        !(m->output_norm = want(f, "output_norm.weight", c->n_embd, 1, 1)))
        return -1;
    m->output = gguf_find_tensor(f, "output.weight") ? want(f, "output.weight", c->n_embd, c->n_vocab, 1) : m->tok_embd;
    if (!m->output) return -1;
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    if (!m->layers) return cd_fail("out of memory");
    for (uint32_t il = 0; il < c->n_layer; il++)
        if (map_layer(f, c, il, &m->layers[il])) return -1;
    return 0;
}

/* Hashes every tensor: the one read of the weights at load when no GPU upload reads them. */
static int hash_weights(const gguf_file *f, uint8_t digest[16]) {
    fp_weights *w = fp_weights_begin(f);
    if (!w) return cd_fail("out of memory");
    return fp_weights_end(w, digest); /* end hashes every tensor not added */
}

int model_load(model **out, const char *path, model_load_opts opts) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return cd_fail("out of memory");
    uint8_t wdigest[16] = {0};
    if (gguf_open(&m->file, path) || model_config_read(m->file, &m->cfg) ||
        rope_config_override(&m->cfg.rope, &opts.rope, &m->cfg.n_ctx_train) || map_tensors(m) ||
        tok_load_gguf(&m->tok, m->file))
        goto fail;
    if ((uint32_t)tok_n_vocab(m->tok) > m->cfg.n_vocab) {
        cd_fail("tokenizer has %d tokens but token_embd has %u rows", tok_n_vocab(m->tok), m->cfg.n_vocab);
        goto fail;
    }
    if (gguf_find_kv(m->file, "tokenizer.chat_template") &&
        gguf_get_str(m->file, "tokenizer.chat_template", &m->chat_template))
        goto fail;
    if (!opts.skip_weight_hash && hash_weights(m->file, wdigest)) goto fail;
    if (fp_model(m->file, &m->cfg, wdigest, m->fingerprint)) goto fail;
    *out = m;
    return 0;
fail:
    cd_fail_ctx("%s: ", path);
    model_free(m);
    return -1;
}

int model_set_weights_digest(model *m, const uint8_t digest[16]) {
    return fp_model(m->file, &m->cfg, digest, m->fingerprint);
}

void model_free(model *m) {
    if (!m) return;
    tok_free(m->tok);
    free(m->layers);
    gguf_close(m->file);
    free(m);
}

uint64_t model_weight_bytes(const model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) n += m->file->tensors[i].nbytes;
    return n;
}

uint64_t model_param_count(const model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) {
        const gguf_tensor *t = &m->file->tensors[i];
        n += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return n;
}
