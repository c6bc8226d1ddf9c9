#include "runtime/model/cpu_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/fp16.h"

/* ---- building blocks ---- */

void cpu_tensor_row(const gguf_tensor *w, int64_t r, float *out) {
    size_t row_bytes = qtype_row_bytes(w->type, w->ne[0]);
    quant_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * row_bytes, out, w->ne[0]);
}

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Rows are independent, so large matrices (the lm_head above all) are split across cores;
 * each row's result does not depend on the split. */
void cpu_matvec(float *out, const gguf_tensor *w, int64_t slice, const float *x, float *row) {
    int64_t n_rows = w->ne[1], n_in = w->ne[0];
    if (n_rows * n_in < (1 << 20)) {
        for (int64_t r = 0; r < n_rows; r++) {
            cpu_tensor_row(w, slice * n_rows + r, row);
            out[r] = (float)dot(row, x, n_in);
        }
        return;
    }
#pragma omp parallel
    {
        float *mine = malloc((size_t)n_in * sizeof *mine);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_rows; r++) {
            cpu_tensor_row(w, slice * n_rows + r, mine ? mine : row);
            out[r] = (float)dot(mine ? mine : row, x, n_in);
        }
        free(mine);
    }
}

void cpu_matvec_xq8(float *out, const gguf_tensor *w, const float *x, xq8_block *xq) {
    int64_t n_in = w->ne[0];
    size_t row_bytes = qtype_row_bytes(w->type, n_in);
    xq8_quantize(x, n_in, xq);
    for (int64_t r = 0; r < w->ne[1]; r++)
        out[r] = xq8_dot_row(w->type, (const uint8_t *)w->data + r * row_bytes, xq, n_in);
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = dot(x, x, n) / (double)n;
    float scale = (float)(1.0 / sqrt(ss + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void cpu_rope_neox(float *head, uint32_t d, uint32_t pos, const double *freq, double mscale) {
    uint32_t half = d / 2;
    for (uint32_t i = 0; i < half; i++) {
        double angle = (double)pos * freq[i];
        float c = (float)(cos(angle) * mscale), s = (float)(sin(angle) * mscale);
        float a = head[i], b = head[i + half];
        head[i] = a * c - b * s;
        head[i + half] = a * s + b * c;
    }
}

float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

static void softmax(float *x, uint32_t n) {
    float max = x[0];
    for (uint32_t i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (uint32_t i = 0; i < n; i++) x[i] = (float)(x[i] / sum);
}

void cpu_moe_route(const float *logits, uint32_t n_expert, uint32_t k, int32_t *ids, float *weights) {
    float probs[1024];
    memcpy(probs, logits, n_expert * sizeof *probs);
    softmax(probs, n_expert);
    double total = 0;
    for (uint32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (uint32_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (uint32_t t = 0; t < j; t++) taken |= ids[t] == (int32_t)e;
            if (!taken && (best < 0 || probs[e] > probs[best])) best = (int32_t)e;
        }
        ids[j] = best;
        weights[j] = probs[best];
        total += probs[best];
    }
    for (uint32_t j = 0; j < k; j++) weights[j] = (float)(weights[j] / total);
}

/* ---- state ---- */

static float *alloc_f32(size_t n, int *failed) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) *failed = 1;
    return p;
}

int cpu_state_init(cpu_state *s, const model *m, uint32_t n_ctx) {
    memset(s, 0, sizeof *s);
    const model_config *c = &m->cfg;
    s->m = m;
    s->n_ctx = n_ctx;
    size_t q_dim = (size_t)c->n_head * c->head_dim, kv_dim = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = c->arch == ARCH_QWEN3MOE ? c->n_ff_exp : c->n_ff;
    size_t max_row = c->n_embd;
    if (q_dim > max_row) max_row = q_dim;
    if (ff > max_row) max_row = ff;
    int failed = 0;
    s->x = alloc_f32(c->n_embd, &failed);
    s->xb = alloc_f32(c->n_embd, &failed);
    s->xb2 = alloc_f32(c->n_embd, &failed);
    s->q = alloc_f32(q_dim, &failed);
    s->k = alloc_f32(kv_dim, &failed);
    s->v = alloc_f32(kv_dim, &failed);
    s->att_out = alloc_f32(q_dim, &failed);
    s->att = alloc_f32(n_ctx, &failed);
    s->hb = alloc_f32(ff, &failed);
    s->hb2 = alloc_f32(ff, &failed);
    s->router = alloc_f32(c->n_expert, &failed);
    s->row = alloc_f32(max_row, &failed);
    s->key_cache = alloc_f32((size_t)c->n_layer * n_ctx * kv_dim, &failed);
    s->value_cache = alloc_f32((size_t)c->n_layer * n_ctx * kv_dim, &failed);
    s->logits = alloc_f32(c->n_vocab, &failed);
    if (!(s->xq = calloc(max_row / XQ8_BLOCK + 1, sizeof *s->xq))) failed = 1;
    rope_freqs(&c->rope, c->head_dim, s->rope_freq, &s->rope_mscale);
    if (failed) {
        cpu_state_free(s);
        return cd_fail("out of memory for the CPU reference state (n_ctx %u)", n_ctx);
    }
    return 0;
}

void cpu_state_free(cpu_state *s) {
    float *bufs[] = {s->x,  s->xb,  s->xb2,    s->q,   s->k,         s->v,           s->att_out, s->att,
                     s->hb, s->hb2, s->router, s->row, s->key_cache, s->value_cache, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(s->xq);
    memset(s, 0, sizeof *s);
}

/* ---- the forward pass ---- */

/* A small F32 vector tensor (norm weights) as floats, dequantized into out. */
static const float *vec(const gguf_tensor *t, float *out) {
    cpu_tensor_row(t, 0, out);
    return out;
}

/* An attention projection: in the integer family where the state asks for it and the type has it. */
static void attn_matvec(cpu_state *s, float *out, const gguf_tensor *w, const float *x) {
    if (s->int_dot && xq8_type(w->type)) cpu_matvec_xq8(out, w, x, s->xq);
    else cpu_matvec(out, w, 0, x, s->row);
}

static void attention(cpu_state *s, const layer_weights *l, uint32_t il, uint32_t pos) {
    const model_config *c = &s->m->cfg;
    uint32_t hd = c->head_dim, kv_dim = c->n_head_kv * hd, group = c->n_head / c->n_head_kv;
    float norm_w[1024];

    /* q, k, v projections, then per-head RMSNorm (QK-norm), then RoPE */
    attn_matvec(s, s->q, l->wq, s->xb);
    attn_matvec(s, s->k, l->wk, s->xb);
    attn_matvec(s, s->v, l->wv, s->xb);
    vec(l->q_norm, norm_w);
    for (uint32_t h = 0; h < c->n_head; h++) {
        cpu_rmsnorm(s->q + h * hd, s->q + h * hd, norm_w, hd, c->rms_eps);
        cpu_rope_neox(s->q + h * hd, hd, pos, s->rope_freq, s->rope_mscale);
    }
    vec(l->k_norm, norm_w);
    for (uint32_t h = 0; h < c->n_head_kv; h++) {
        cpu_rmsnorm(s->k + h * hd, s->k + h * hd, norm_w, hd, c->rms_eps);
        cpu_rope_neox(s->k + h * hd, hd, pos, s->rope_freq, s->rope_mscale);
    }

    /* append this position's k, v to the cache */
    float *kc = s->key_cache + (size_t)il * s->n_ctx * kv_dim, *vc = s->value_cache + (size_t)il * s->n_ctx * kv_dim;
    memcpy(kc + (size_t)pos * kv_dim, s->k, kv_dim * sizeof(float));
    memcpy(vc + (size_t)pos * kv_dim, s->v, kv_dim * sizeof(float));
    if (s->kv_fp16) /* stored as the GPU stores them: rounded to fp16, nearest even */
        for (uint32_t i = 0; i < kv_dim; i++) {
            kc[(size_t)pos * kv_dim + i] = fp16_to_f32(f32_to_fp16(kc[(size_t)pos * kv_dim + i]));
            vc[(size_t)pos * kv_dim + i] = fp16_to_f32(f32_to_fp16(vc[(size_t)pos * kv_dim + i]));
        }

    /* causal GQA attention: query head h reads kv head h / group */
    double scale = 1.0 / sqrt((double)hd);
    for (uint32_t h = 0; h < c->n_head; h++) {
        const float *qh = s->q + h * hd;
        uint32_t kvh = h / group;
        float max = -INFINITY;
        for (uint32_t t = 0; t <= pos; t++) {
            s->att[t] = (float)(dot(qh, kc + (size_t)t * kv_dim + kvh * hd, hd) * scale);
            max = s->att[t] > max ? s->att[t] : max;
        }
        double sum = 0;
        for (uint32_t t = 0; t <= pos; t++) {
            s->att[t] = expf(s->att[t] - max);
            sum += s->att[t];
        }
        float *out = s->att_out + h * hd;
        for (uint32_t i = 0; i < hd; i++) {
            double acc = 0;
            for (uint32_t t = 0; t <= pos; t++) acc += (double)s->att[t] * vc[(size_t)t * kv_dim + kvh * hd + i];
            out[i] = (float)(acc / sum);
        }
    }
    attn_matvec(s, s->xb2, l->wo, s->att_out);
}

/* SwiGLU FFN of one expert (slice e of the stacked tensors) or of the dense FFN (e = 0). */
static void swiglu(cpu_state *s, const gguf_tensor *gate, const gguf_tensor *up, const gguf_tensor *down, int64_t e,
                   float *out) {
    cpu_matvec(s->hb, gate, e, s->xb, s->row);
    cpu_matvec(s->hb2, up, e, s->xb, s->row);
    for (int64_t i = 0; i < gate->ne[1]; i++) s->hb[i] = cpu_silu(s->hb[i]) * s->hb2[i];
    cpu_matvec(out, down, e, s->hb, s->row);
}

static void moe(cpu_state *s, const layer_weights *l) {
    const model_config *c = &s->m->cfg;
    int32_t ids[1024];
    float weights[1024], y[65536];
    cpu_matvec(s->router, l->gate_inp, 0, s->xb, s->row);
    cpu_moe_route(s->router, c->n_expert, c->n_expert_used, ids, weights);
    memset(s->xb2, 0, c->n_embd * sizeof(float));
    for (uint32_t j = 0; j < c->n_expert_used; j++) {
        swiglu(s, l->gate_exps, l->up_exps, l->down_exps, ids[j], y);
        for (uint32_t i = 0; i < c->n_embd; i++) s->xb2[i] += weights[j] * y[i];
    }
}

int cpu_forward(cpu_state *s, int32_t token, uint32_t pos, int want_logits) {
    const model *m = s->m;
    const model_config *c = &m->cfg;
    if (pos >= s->n_ctx) return cd_fail("position %u is past the context size %u", pos, s->n_ctx);
    if (token < 0 || (uint32_t)token >= c->n_vocab)
        return cd_fail("token id %d out of range (vocab %u)", token, c->n_vocab);
    float norm_w[65536];

    cpu_tensor_row(m->tok_embd, token, s->x);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        cpu_rmsnorm(s->xb, s->x, vec(l->attn_norm, norm_w), c->n_embd, c->rms_eps);
        attention(s, l, il, pos);
        for (uint32_t i = 0; i < c->n_embd; i++) s->x[i] += s->xb2[i];

        cpu_rmsnorm(s->xb, s->x, vec(l->ffn_norm, norm_w), c->n_embd, c->rms_eps);
        if (c->arch == ARCH_QWEN3MOE) moe(s, l);
        else swiglu(s, l->ffn_gate, l->ffn_up, l->ffn_down, 0, s->xb2);
        for (uint32_t i = 0; i < c->n_embd; i++) s->x[i] += s->xb2[i];
    }
    if (!want_logits) return 0;
    cpu_rmsnorm(s->x, s->x, vec(m->output_norm, norm_w), c->n_embd, c->rms_eps);
    cpu_matvec(s->logits, m->output, 0, s->x, s->row);
    return 0;
}
