/* The GPU forward pass: state, pipelines, the KV pool, and the decode step recorded once and
 * replayed per token. Reads in the order of cpu_forward (cpu_ref.c); see gpu_model.h. */
#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/model/gpu_model.h"
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/op_get_rows.h"
#include "runtime/vk/op_kv_write.h"
#include "runtime/vk/op_matvec.h"
#include "runtime/vk/op_moe_combine.h"
#include "runtime/vk/op_moe_route.h"
#include "runtime/vk/op_rmsnorm.h"
#include "runtime/vk/op_sample.h"
#include "runtime/vk/vk_barrier.h"

#define TRY(x) do { if (x) return -1; } while (0)

/* ---- state ---- */

int gpu_model_buffer(gpu_model *g, cvk_buffer *b, uint64_t bytes, enum cvk_mem_kind kind) {
    TRY(cvk_buffer_create(&g->vk->mem, b, bytes ? bytes : 4, 4, kind));
    if (kind != CVK_MEM_DEVICE && !cvk_buffer_host_ptr(b, 0)) return cd_fail("gpu model: input buffer is not host-visible");
    return 0;
}

static int want_matvec(gpu_model *g, const gguf_tensor *t) {
    if (!t || g->matvec[t->type].pipe) return 0;
    return cvk_matvec_pipeline(&g->matvec[t->type], &g->vk->dev, g->vk->pcache.cache, t->type, NULL);
}

static int make_pipelines(gpu_model *g) {
    const model *m = g->m;
    cvk_device *d = &g->vk->dev;
    VkPipelineCache pc = g->vk->pcache.cache;
    /* the lm_head gets a configuration of its own: its shape (151,936 rows) is like no other */
    cvk_matvec_cfg hc = cvk_matvec_choose(d, m->output->type, (uint32_t)m->output->ne[0], (uint32_t)m->output->ne[1], 1);
    TRY(cvk_matvec_pipeline(&g->head, d, pc, m->output->type, &hc));
    for (uint32_t il = 0; il < m->cfg.n_layer; il++) {
        const gguf_tensor *ts[GPU_LAYER_MATS];
        gpu_layer_mats(&m->layers[il], ts);
        for (size_t i = 0; i < GPU_LAYER_MATS; i++) TRY(want_matvec(g, ts[i]));
    }
    TRY(cvk_get_rows_pipeline(&g->get_rows, d, pc, m->tok_embd->type, 0));
    TRY(cvk_rmsnorm_pipeline(&g->rmsnorm, d, pc, 0));
    TRY(cvk_rope_pipeline(&g->rope, d, pc, 0));
    TRY(cvk_add_pipeline(&g->add, d, pc, 0));
    TRY(cvk_swiglu_pipeline(&g->swiglu, d, pc, 0));
    TRY(cvk_moe_route_pipeline(&g->moe_route, d, pc, 0));
    TRY(cvk_moe_combine_pipeline(&g->moe_combine, d, pc, 0));
    TRY(cvk_kv_write_pipeline(&g->kv_write, d, pc, m->cfg.head_dim, 0));
    TRY(cvk_attn_decode_pipeline(&g->attn, d, pc, m->cfg.head_dim, 0));
    TRY(cvk_argmax_pipelines(&g->argmax, d, pc, 0));
    TRY(cvk_sample_pipelines(&g->sample, d, pc, 0));
    return 0;
}

static int make_state(gpu_model *g) {
    const model_config *c = &g->m->cfg;
    bool moe = c->arch == ARCH_QWEN3MOE;
    uint64_t q_dim = (uint64_t)c->n_head * c->head_dim, kv_dim = (uint64_t)c->n_head_kv * c->head_dim;
    uint32_t k = moe ? c->n_expert_used : 1, ff = moe ? c->n_ff_exp : c->n_ff;

    uint32_t pt = g->page_tokens;
    TRY(kv_layout_init(&g->lay, c->n_layer, c->n_head_kv, c->head_dim, pt));
    TRY(kv_pages_init(&g->pages, (g->pool_tokens + pt - 1) / pt, pt));
    g->max_pages = (g->n_ctx + pt - 1) / pt;
    TRY(cvk_buffer_create(&g->vk->mem, &g->pool, (uint64_t)g->pages.n_pages * g->lay.page_bytes, g->lay.page_bytes,
                          CVK_MEM_DEVICE));
    g->n_split = cvk_attn_decode_splits(g->n_ctx, g->lay.page_tokens);
    TRY(cvk_rope_table_create(&g->rope_tab, &g->vk->mem, &g->vk->stager, c->head_dim, c->rope_theta, g->n_ctx));

    TRY(gpu_model_buffer(g, &g->x, c->n_embd * 4ull, CVK_MEM_DEVICE) || gpu_model_buffer(g, &g->xb, c->n_embd * 4ull, CVK_MEM_DEVICE) ||
        gpu_model_buffer(g, &g->xb2, c->n_embd * 4ull, CVK_MEM_DEVICE));
    TRY(gpu_model_buffer(g, &g->q, q_dim * 4, CVK_MEM_DEVICE) || gpu_model_buffer(g, &g->att, q_dim * 4, CVK_MEM_DEVICE) ||
        gpu_model_buffer(g, &g->k, kv_dim * 4, CVK_MEM_DEVICE) || gpu_model_buffer(g, &g->v, kv_dim * 4, CVK_MEM_DEVICE));
    TRY(gpu_model_buffer(g, &g->partials,
                 cvk_attn_decode_partials_bytes(1, c->n_head, g->n_split, g->pool.n_parts, c->head_dim), CVK_MEM_DEVICE));
    TRY(gpu_model_buffer(g, &g->router, c->n_expert * 4ull, CVK_MEM_DEVICE) || gpu_model_buffer(g, &g->ids, k * 4ull, CVK_MEM_DEVICE) ||
        gpu_model_buffer(g, &g->wts, k * 4ull, CVK_MEM_DEVICE));
    TRY(gpu_model_buffer(g, &g->hg, (uint64_t)k * ff * 4, CVK_MEM_DEVICE) || gpu_model_buffer(g, &g->hu, (uint64_t)k * ff * 4, CVK_MEM_DEVICE) ||
        gpu_model_buffer(g, &g->eo, (uint64_t)k * c->n_embd * 4, CVK_MEM_DEVICE));
    TRY(gpu_model_buffer(g, &g->logits, c->n_vocab * 4ull, CVK_MEM_DEVICE) ||
        gpu_model_buffer(g, &g->am_scratch, cvk_argmax_scratch_bytes(&g->argmax, c->n_vocab, 1), CVK_MEM_DEVICE) ||
        gpu_model_buffer(g, &g->smp_scratch, cvk_sample_scratch_bytes(&g->sample, c->n_vocab, 1, CVK_SAMPLE_MAX_K),
                         CVK_MEM_DEVICE));
    TRY(gpu_model_buffer(g, &g->in_tok, 4, CVK_MEM_UPLOAD) || gpu_model_buffer(g, &g->in_pos, 4, CVK_MEM_UPLOAD) ||
        gpu_model_buffer(g, &g->in_loc, 8, CVK_MEM_UPLOAD) || gpu_model_buffer(g, &g->in_len, 4, CVK_MEM_UPLOAD) ||
        gpu_model_buffer(g, &g->in_table, g->max_pages * 4ull, CVK_MEM_UPLOAD) ||
        gpu_model_buffer(g, &g->in_u, 4, CVK_MEM_UPLOAD) || gpu_model_buffer(g, &g->out_id, 4, CVK_MEM_READBACK));
    memset(cvk_buffer_host_ptr(&g->in_table, 0), 0, g->max_pages * 4ull);
    return 0;
}

/* ---- the step ---- */

static cvk_view W(const cvk_buffer *b) { return cvk_view_whole(b); }

static int matvec(gpu_model *g, cvk_cmd *c, const gguf_tensor *t, const cvk_buffer *w, const cvk_buffer *x,
                  const cvk_buffer *y) {
    cvk_matvec_args a = {.w = w, .type = t->type, .n_in = (uint32_t)t->ne[0], .n_rows = (uint32_t)t->ne[1],
                         .x = W(x), .y = W(y), .n_vec = 1};
    return cvk_matvec(c, &g->dpool, &g->matvec[t->type], &a);
}

/* The k experts of one token: y[j] = W[ids[j]] x[j] (x shared, or k vectors x_stride apart). */
static int matvec_ids(gpu_model *g, cvk_cmd *c, const gguf_tensor *t, const cvk_buffer *w, const cvk_buffer *x,
                      bool x_shared, const cvk_buffer *y) {
    uint32_t k = g->m->cfg.n_expert_used;
    cvk_matvec_args a = {.w = w, .type = t->type, .n_in = (uint32_t)t->ne[0], .n_rows = (uint32_t)t->ne[1],
                         .n_slices = (uint32_t)t->ne[2], .x = W(x), .x_shared = x_shared, .y = W(y), .n_vec = k,
                         .use_ids = true, .ids = W(&g->ids)};
    return cvk_matvec(c, &g->dpool, &g->matvec[t->type], &a);
}

static int rmsnorm(gpu_model *g, cvk_cmd *c, const cvk_buffer *x, const cvk_buffer *w, const cvk_buffer *y, uint32_t n,
                   uint32_t rows) {
    cvk_rmsnorm_args a = {.x = W(x), .w = W(w), .y = W(y), .n = n, .rows = rows, .eps = g->m->cfg.rms_eps};
    return cvk_rmsnorm(c, &g->dpool, &g->rmsnorm, &a);
}

static int add(gpu_model *g, cvk_cmd *c, const cvk_buffer *y, const cvk_buffer *x) {
    cvk_add_args a = {.a = W(y), .b = W(x), .y = W(y), .n = g->m->cfg.n_embd};
    return cvk_add(c, &g->dpool, &g->add, &a);
}

static int attention(gpu_model *g, cvk_cmd *c, uint32_t il) {
    const model_config *cf = &g->m->cfg;
    const layer_weights *l = &g->m->layers[il];
    const gpu_layer *d = &g->w.layers[il];
    VkCommandBuffer cb = c->cb;
    TRY(matvec(g, c, l->wq, &d->wq, &g->xb, &g->q) || matvec(g, c, l->wk, &d->wk, &g->xb, &g->k) ||
        matvec(g, c, l->wv, &d->wv, &g->xb, &g->v));
    cvk_barrier_compute_to_compute(cb);
    TRY(rmsnorm(g, c, &g->q, &d->q_norm, &g->q, cf->head_dim, cf->n_head) ||
        rmsnorm(g, c, &g->k, &d->k_norm, &g->k, cf->head_dim, cf->n_head_kv));
    cvk_barrier_compute_to_compute(cb);
    cvk_rope_args rq = {.x = W(&g->q), .pos = W(&g->in_pos), .table = &g->rope_tab, .tokens = 1, .heads = cf->n_head};
    cvk_rope_args rk = {.x = W(&g->k), .pos = W(&g->in_pos), .table = &g->rope_tab, .tokens = 1, .heads = cf->n_head_kv};
    TRY(cvk_rope(c, &g->dpool, &g->rope, &rq) || cvk_rope(c, &g->dpool, &g->rope, &rk));
    cvk_barrier_compute_to_compute(cb);
    cvk_kv_write_args kw = {.pool = &g->pool, .lay = &g->lay, .k = W(&g->k), .v = W(&g->v), .table = W(&g->in_table),
                            .loc = W(&g->in_loc), .n_tokens = 1, .layer = il, .table_stride = g->max_pages};
    TRY(cvk_kv_write(c, &g->dpool, &g->kv_write, &kw));
    cvk_barrier_compute_to_compute(cb);
    cvk_attn_decode_args at = {.pool = &g->pool, .lay = &g->lay, .q = W(&g->q), .table = W(&g->in_table),
                               .seq_lens = W(&g->in_len), .partials = W(&g->partials), .out = W(&g->att),
                               .n_seq = 1, .n_head = cf->n_head, .layer = il, .table_stride = g->max_pages,
                               .n_split = g->n_split};
    TRY(cvk_attn_decode(c, &g->dpool, &g->attn, &at));
    cvk_barrier_compute_to_compute(cb);
    TRY(matvec(g, c, l->wo, &d->wo, &g->att, &g->xb2));
    cvk_barrier_compute_to_compute(cb);
    TRY(add(g, c, &g->x, &g->xb2));
    return 0;
}

static int ffn(gpu_model *g, cvk_cmd *c, uint32_t il) {
    const model_config *cf = &g->m->cfg;
    const layer_weights *l = &g->m->layers[il];
    const gpu_layer *d = &g->w.layers[il];
    VkCommandBuffer cb = c->cb;
    if (cf->arch != ARCH_QWEN3MOE) {
        TRY(matvec(g, c, l->ffn_gate, &d->ffn_gate, &g->xb, &g->hg) || matvec(g, c, l->ffn_up, &d->ffn_up, &g->xb, &g->hu));
        cvk_barrier_compute_to_compute(cb);
        cvk_swiglu_args s = {.g = W(&g->hg), .u = W(&g->hu), .h = W(&g->hg), .n = cf->n_ff, .rows = 1};
        TRY(cvk_swiglu(c, &g->dpool, &g->swiglu, &s));
        cvk_barrier_compute_to_compute(cb);
        TRY(matvec(g, c, l->ffn_down, &d->ffn_down, &g->hg, &g->xb2));
        cvk_barrier_compute_to_compute(cb);
        return add(g, c, &g->x, &g->xb2);
    }
    uint32_t k = cf->n_expert_used;
    TRY(matvec(g, c, l->gate_inp, &d->gate_inp, &g->xb, &g->router));
    cvk_barrier_compute_to_compute(cb);
    cvk_moe_route_args r = {.logits = W(&g->router), .ids = W(&g->ids), .weights = W(&g->wts),
                            .n_expert = cf->n_expert, .k = k, .tokens = 1};
    TRY(cvk_moe_route(c, &g->dpool, &g->moe_route, &r));
    cvk_barrier_compute_to_compute(cb);
    TRY(matvec_ids(g, c, l->gate_exps, &d->gate_exps, &g->xb, true, &g->hg) ||
        matvec_ids(g, c, l->up_exps, &d->up_exps, &g->xb, true, &g->hu));
    cvk_barrier_compute_to_compute(cb);
    cvk_swiglu_args s = {.g = W(&g->hg), .u = W(&g->hu), .h = W(&g->hg), .n = cf->n_ff_exp, .rows = k};
    TRY(cvk_swiglu(c, &g->dpool, &g->swiglu, &s));
    cvk_barrier_compute_to_compute(cb);
    TRY(matvec_ids(g, c, l->down_exps, &d->down_exps, &g->hg, false, &g->eo));
    cvk_barrier_compute_to_compute(cb);
    cvk_moe_combine_args mc = {.x = W(&g->x), .e = W(&g->eo), .w = W(&g->wts), .n = cf->n_embd, .k = k, .rows = 1};
    return cvk_moe_combine(c, &g->dpool, &g->moe_combine, &mc);
}

static int record(gpu_model *g, cvk_cmd *c, bool head) {
    const model_config *cf = &g->m->cfg;
    VkCommandBuffer cb = c->cb;
    TRY(cvk_cmd_begin_reusable(c));
    cvk_get_rows_args e = {.table = &g->w.tok_embd, .type = g->m->tok_embd->type, .n = cf->n_embd,
                           .n_rows = cf->n_vocab, .ids = W(&g->in_tok), .n_ids = 1, .dst = W(&g->x)};
    TRY(cvk_get_rows(c, &g->dpool, &g->get_rows, &e));
    cvk_barrier_compute_to_compute(cb);
    for (uint32_t il = 0; il < cf->n_layer; il++) {
        const gpu_layer *d = &g->w.layers[il];
        cvk_cmd_label_begin(c, "layer.attention");
        TRY(rmsnorm(g, c, &g->x, &d->attn_norm, &g->xb, cf->n_embd, 1));
        cvk_barrier_compute_to_compute(cb);
        TRY(attention(g, c, il));
        cvk_barrier_compute_to_compute(cb);
        cvk_cmd_label_end(c);
        cvk_cmd_label_begin(c, "layer.ffn");
        TRY(rmsnorm(g, c, &g->x, &d->ffn_norm, &g->xb, cf->n_embd, 1));
        cvk_barrier_compute_to_compute(cb);
        TRY(ffn(g, c, il));
        cvk_barrier_compute_to_compute(cb);
        cvk_cmd_label_end(c);
    }
    if (head) TRY(gpu_record_head(g, c, &g->dpool));
    cvk_barrier_device_to_host(cb);
    return cvk_cmd_end(c);
}

/* logits = head(rmsnorm(x)); out_id = argmax or a sample. Used by the decode step and by
 * prefill (after it copies the last token's row into x). */
static int record_head_ops(gpu_model *g, cvk_cmd *c, cvk_descpool *dp) {
    const model_config *cf = &g->m->cfg;
    VkCommandBuffer cb = c->cb;
    cvk_rmsnorm_args rn = {.x = W(&g->x), .w = W(&g->w.output_norm), .y = W(&g->xb), .n = cf->n_embd, .rows = 1,
                           .eps = cf->rms_eps};
    TRY(cvk_rmsnorm(c, dp, &g->rmsnorm, &rn));
    cvk_barrier_compute_to_compute(cb);
    const gguf_tensor *t = g->m->output;
    cvk_matvec_args mv = {.w = g->w.head, .type = t->type, .n_in = (uint32_t)t->ne[0], .n_rows = (uint32_t)t->ne[1],
                          .x = W(&g->xb), .y = W(&g->logits), .n_vec = 1};
    TRY(cvk_matvec(c, dp, &g->head, &mv));
    cvk_barrier_compute_to_compute(cb);
    if (g->sample_on_device) {
        cvk_sample_args sa = {.logits = W(&g->logits), .scratch = W(&g->smp_scratch), .u = W(&g->in_u),
                              .out = W(&g->out_id), .n = cf->n_vocab, .rows = 1, .top_k = g->sp.top_k,
                              .temperature = g->sp.temperature, .top_p = g->sp.top_p};
        return cvk_sample(c, dp, &g->sample, &sa);
    }
    cvk_argmax_args am = {.logits = W(&g->logits), .scratch = W(&g->am_scratch), .out = W(&g->out_id),
                          .n = cf->n_vocab, .rows = 1};
    return cvk_argmax(c, dp, &g->argmax, &am);
}

int gpu_record_head(gpu_model *g, cvk_cmd *c, cvk_descpool *dp) {
    cvk_cmd_label_begin(c, "head");
    int rc = record_head_ops(g, c, dp);
    cvk_cmd_label_end(c);
    return rc;
}

/* Both steps from scratch (after a sampler change): the old sets go with the pool reset. */
static int record_steps(gpu_model *g) {
    return cvk_descpool_reset(&g->dpool) || record(g, &g->step[0], false) || record(g, &g->step[1], true);
}

/* ---- public ---- */

int gpu_model_init(gpu_model *g, cvk_ctx *vk, const model *m, uint32_t n_ctx) {
    return gpu_model_init_opts(g, vk, m, &(gpu_model_opts){.n_ctx = n_ctx});
}

int gpu_model_init_opts(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->vk = vk;
    g->n_ctx = o->n_ctx;
    g->pool_tokens = o->pool_tokens ? o->pool_tokens : o->n_ctx;
    g->page_tokens = o->page_tokens ? o->page_tokens : KV_PAGE_TOKENS_DEFAULT;
    g->n_batch = o->n_batch;
    g->max_seqs = o->max_seqs ? o->max_seqs : 1;
    const model_config *c = &m->cfg;
    if (!g->n_ctx) return cd_fail("gpu model: n_ctx is 0");
    if (c->arch == ARCH_QWEN3MOE && (c->n_expert > CVK_MOE_MAX_EXPERT || c->n_expert_used > CVK_MOE_MAX_K))
        return cd_fail("gpu model: %u experts, %u used: the router kernel takes at most %u and %u", c->n_expert,
                       c->n_expert_used, CVK_MOE_MAX_EXPERT, CVK_MOE_MAX_K);
    rng_seed(&g->rng, 0);
    int rc = gpu_weights_upload(&g->w, vk, m) || make_pipelines(g) || make_state(g) ||
             cvk_descpool_init(&g->dpool, &vk->dev, 256) || cvk_cmd_init(&g->step[0], &vk->dev, false) ||
             cvk_cmd_init(&g->step[1], &vk->dev, false) || cvk_cmd_init(&g->copy, &vk->dev, false) || record_steps(g) || gpu_prefill_init(g);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cd_errmsg());
        cvk_stager_flush(&vk->stager); /* no copy may still target a buffer about to be freed */
        gpu_model_free(g);
        return cd_fail("gpu model: %s", msg);
    }
    cvk_pcache_save(&vk->pcache); /* failure is not fatal */
    return 0;
}

void gpu_model_free(gpu_model *g) {
    if (!g->vk) return;
    cvk_ctx *vk = g->vk;
    cvk_device *d = &vk->dev;
    gpu_prefill_free(g);
    cvk_cmd_free(&g->step[0]);
    cvk_cmd_free(&g->step[1]);
    cvk_cmd_free(&g->copy);
    cvk_descpool_free(&g->dpool);
    cvk_buffer *bufs[] = {&g->pool, &g->x, &g->xb, &g->xb2, &g->q, &g->att, &g->k, &g->v, &g->partials, &g->router,
                          &g->ids, &g->wts, &g->hg, &g->hu, &g->eo, &g->logits, &g->am_scratch, &g->smp_scratch,
                          &g->in_tok, &g->in_pos, &g->in_loc, &g->in_len, &g->in_table, &g->in_u, &g->out_id};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
    cvk_rope_table_destroy(&vk->mem, &g->rope_tab);
    for (int t = 0; t < QTYPE_COUNT; t++) cvk_pipeline_destroy(d, &g->matvec[t]);
    cvk_pipeline_destroy(d, &g->head);
    cvk_pipeline *ps[] = {&g->get_rows, &g->rmsnorm, &g->rope, &g->add, &g->swiglu, &g->moe_route, &g->moe_combine,
                          &g->kv_write};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cvk_pipeline_destroy(d, ps[i]);
    cvk_attn_decode_pipeline_destroy(d, &g->attn);
    cvk_argmax_pipelines_destroy(d, &g->argmax);
    cvk_sample_pipelines_destroy(d, &g->sample);
    kv_seq_free(&g->pages, &g->seq);
    kv_pages_free(&g->pages);
    if (g->m) gpu_weights_free(&g->w, vk, g->m);
    memset(g, 0, sizeof *g);
}

int gpu_model_set_sampler(gpu_model *g, const sampler_params *p) {
    g->sp = *p;
    g->sample_on_device = p->temperature > 0 && p->top_k >= 1 && p->top_k <= CVK_SAMPLE_MAX_K;
    rng_seed(&g->rng, p->seed);
    return record_steps(g);
}

int gpu_model_set_timer(gpu_model *g, cvk_timer *t) {
    g->step[0].timer = g->step[1].timer = g->pcmd.timer = t;
    return record_steps(g);
}

void gpu_model_draw(gpu_model *g) {
    if (g->sample_on_device) *(float *)cvk_buffer_host_ptr(&g->in_u, 0) = rng_f32(&g->rng);
}

int gpu_seq_extend(gpu_model *g, uint32_t pos, uint32_t n) {
    if (pos > g->seq.n_tokens) return cd_fail("position %u skips ahead of the %u tokens run", pos, g->seq.n_tokens);
    if ((uint64_t)pos + n > g->n_ctx)
        return cd_fail("position %u is past the context size %u", (uint32_t)((uint64_t)pos + n - 1), g->n_ctx);
    if (pos < g->seq.n_tokens) TRY(kv_seq_truncate(&g->pages, &g->seq, pos));
    kv_seq *s = &g->seq;
    uint32_t pt = g->page_tokens, need = kv_pages_for(&g->pages, pos + n) - s->n_pages;
    if (pos % pt && g->pages.ref[s->pages[s->n_pages - 1]] > 1) need++; /* the shared tail is copied */
    if (need > kv_pages_free_count(&g->pages))
        return cd_fail("KV pool exhausted: %u more pages needed, %u of %u free (%u tokens per page)", need,
                       kv_pages_free_count(&g->pages), g->pages.n_pages, pt);
    kv_cow cow;
    TRY(kv_seq_append(&g->pages, s, n, &cow));
    if (cow.n_tokens && gpu_kv_copy_page(g, cow.src, cow.dst)) {
        kv_seq_truncate(&g->pages, s, pos - pos % pt); /* the copy failed: drop the page it was for */
        return -1;
    }
    memcpy(cvk_buffer_host_ptr(&g->in_table, 0), g->seq.pages, g->seq.n_pages * sizeof(uint32_t));
    return 0;
}

int gpu_forward(gpu_model *g, int32_t token, uint32_t pos, bool want_logits) {
    const model_config *c = &g->m->cfg;
    if (pos >= g->n_ctx) return cd_fail("position %u is past the context size %u", pos, g->n_ctx);
    if (token < 0 || (uint32_t)token >= c->n_vocab) return cd_fail("token id %d out of range (vocab %u)", token, c->n_vocab);
    TRY(gpu_seq_extend(g, pos, 1));
    *(int32_t *)cvk_buffer_host_ptr(&g->in_tok, 0) = token;
    *(uint32_t *)cvk_buffer_host_ptr(&g->in_pos, 0) = pos;
    uint32_t *loc = cvk_buffer_host_ptr(&g->in_loc, 0);
    loc[0] = 0;
    loc[1] = pos;
    *(uint32_t *)cvk_buffer_host_ptr(&g->in_len, 0) = pos + 1;
    if (want_logits) gpu_model_draw(g);
    return cvk_cmd_run(&g->step[want_logits ? 1 : 0]);
}

int gpu_model_logits(gpu_model *g, float *out) {
    return cvk_stager_download(&g->vk->stager, cvk_view_whole(&g->logits), out);
}

int gpu_kv_copy_page(gpu_model *g, uint32_t src, uint32_t dst) {
    uint64_t pb = g->lay.page_bytes;
    if (src >= g->pages.n_pages || dst >= g->pages.n_pages || src == dst)
        return cd_fail("kv page copy %u -> %u: not two pages of the %u in the pool", src, dst, g->pages.n_pages);
    TRY(cvk_cmd_begin(&g->copy));
    TRY(cvk_cmd_copy(&g->copy, cvk_view_range(&g->pool, src * pb, pb), cvk_view_range(&g->pool, dst * pb, pb)));
    return cvk_cmd_run(&g->copy);
}

int32_t gpu_model_next(const gpu_model *g) { return *(const int32_t *)cvk_buffer_host_ptr(&g->out_id, 0); }
