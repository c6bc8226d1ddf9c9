/* The model on the GPU, set up: weights, the pipelines every pass uses, the RoPE table; the
 * pass itself and its buffers are in gpu_forward.c. See gpu_model.h. */
#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/size_text.h"
#include "runtime/model/gpu_model.h"
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/op_get_rows.h"
#include "runtime/vk/op_head_norm_rope.h"
#include "runtime/vk/op_moe_combine.h"
#include "runtime/vk/op_moe_group.h"
#include "runtime/vk/op_rmsnorm.h"

int gpu_model_buffer(gpu_model *g, cvk_buffer *b, uint64_t bytes, enum cvk_mem_kind kind) {
    CD_TRY(cvk_buffer_create(&g->vk->mem, b, bytes ? bytes : 4, 4, kind));
    if (kind != CVK_MEM_DEVICE && !cvk_buffer_host_ptr(b, 0))
        return cd_fail("gpu model: input buffer is not host-visible");
    return 0;
}

static int make_pipelines(gpu_model *g) {
    const model *m = g->m;
    cvk_device *d = &g->vk->dev;
    VkPipelineCache pc = g->vk->pcache.cache;
    CD_TRY(cvk_get_rows_pipeline(&g->get_rows, d, pc, m->tok_embd->type, 0));
    CD_TRY(cvk_rmsnorm_pipeline(&g->rmsnorm, d, pc, 0));
    CD_TRY(cvk_swiglu_pipeline(&g->swiglu, d, pc, 0));
    CD_TRY(cvk_moe_combine_pipeline(&g->moe_combine, d, pc, 0));
    CD_TRY(cvk_head_norm_rope_pipelines(&g->head_norm_rope, d, pc, m->cfg.head_dim));
    /* a CPU device's argmax reads 4 logits a texel fetch: rows of whole texels (n_vocab % 4 == 0)
     * and the logits of max_out rows within one texel view (gpu_forward.c's blogits) */
    bool texel_argmax = d->info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && m->cfg.n_vocab % 4 == 0 &&
        (uint64_t)g->max_out * m->cfg.n_vocab / 4 <= d->info.caps.max_texels;
    return cvk_argmax_pipelines(&g->argmax, d, pc, 0, texel_argmax) || cvk_sample_pipelines(&g->sample, d, pc, 0);
}

static int check_opts(const model *m, const gpu_model_opts *o, bool compile_only) {
    const model_config *c = &m->cfg;
    if (!o->n_ctx) return cd_fail("n_ctx is 0");
    if (!compile_only && (!o->kv || !o->lay)) return cd_fail("no KV pool given");
    const kv_layout *l = o->lay;
    if (l && (l->n_layer != c->n_layer || l->n_head_kv != c->n_head_kv || l->head_dim != c->head_dim))
        return cd_fail("the KV pool's layout (%u layers, %u kv heads x %u) is not the model's (%u, %u x %u)",
                       l->n_layer, l->n_head_kv, l->head_dim, c->n_layer, c->n_head_kv, c->head_dim);
    if (c->arch == ARCH_QWEN3MOE && (c->n_expert > CVK_MOE_MAX_EXPERT || c->n_expert_used > CVK_MOE_MAX_K))
        return cd_fail("%u experts, %u used: the router kernel takes at most %u and %u", c->n_expert, c->n_expert_used,
                       CVK_MOE_MAX_EXPERT, CVK_MOE_MAX_K);
    if (o->one_shape.bn > 1) return cd_fail("the one-token kernel's shape has %u tokens per column", o->one_shape.bn);
    return 0;
}

/* Whether the plan takes the integer family (gpu_model_opts.int_dot); -1 when it was asked for
 * on a device that cannot run it. */
static int int_family(const cvk_ctx *vk, const gpu_model_opts *o) {
    const cvk_caps *k = &vk->dev.info.caps;
    if (o->int_dot <= 0) return 0; /* auto: off until a GPU's numbers choose it (docs/kernels/xq8.md) */
    if (!k->int_dot || !k->storage8 || !k->storage16)
        return cd_fail("the integer family (int_dot) needs shaderIntegerDotProduct and 8- and 16-bit storage buffers, "
                       "which %s lacks",
                       vk->dev.info.props.deviceName);
    return 1;
}

/* The device's choices of kernels and layouts, from the options and the device's kind. */
static void plan(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o) {
    g->n_ctx = o->n_ctx;
    g->n_batch = o->n_batch;
    g->max_seqs = o->max_seqs ? o->max_seqs : 1;
    g->max_out = o->max_out > g->max_seqs ? o->max_out : g->max_seqs;
    g->kv = o->kv;
    if (o->lay) g->lay = *o->lay;
    g->max_pages = g->lay.page_tokens ? (g->n_ctx + g->lay.page_tokens - 1) / g->lay.page_tokens : 0;
    bool cpu = vk->dev.info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    g->pairs = o->gate_up_pairs > 0 || (o->gate_up_pairs == 0 && !cpu);
    /* a CPU device's head is a matvec over rows in the aligned layout (cvk_matvec_choose),
     * unless the head is tied to the embedding, which get_rows reads in the file's layout */
    g->head_matvec = o->head_matvec > 0 || (o->head_matvec == 0 && cpu && m->output != m->tok_embd);
    g->few_gpu = o->few_kernels > 0 || (o->few_kernels == 0 && !cpu);
    g->few_shape = o->few_shape, g->one_shape = o->one_shape, g->big_tile = o->big_tile;
    g->head_shape = o->head_shape;
    const gguf_tensor *h = m->output;
    if (g->head_matvec) {
        g->head_cfg = cvk_matvec_choose(&vk->dev, h->type, (uint32_t)h->ne[0], (uint32_t)h->ne[1], 1);
        if (m->output == m->tok_embd) g->head_cfg.a16 = g->head_cfg.texel = false; /* asked for anyway */
    }
}

static int fail_init(gpu_model *g, cvk_ctx *vk) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", cd_errmsg());
    if (!vk->dev.compile_only) cvk_stager_flush(&vk->stager); /* no copy may still target a buffer about to be freed */
    gpu_model_free(g);
    return cd_fail("gpu model: %s", msg);
}

/* g zeroed, given its model and device, the options checked and the plan made: how init and
 * compile both begin. */
static int begin(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o, bool compile_only) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->vk = vk;
    if (check_opts(m, o, compile_only)) return -1;
    plan(g, vk, m, o);
    int fam = int_family(vk, o);
    if (fam < 0) return -1;
    g->int_dot = fam;
    return 0;
}

/* The rotations of every position the context holds, with the model's RoPE (YaRN's too). */
static int make_rope_table(gpu_model *g, cvk_ctx *vk, const model *m) {
    double freq[512], mscale; /* head_dim <= 1024: model_config_check */
    rope_freqs(&m->cfg.rope, m->cfg.head_dim, freq, &mscale);
    return cvk_rope_table_create(&g->rope_tab, &vk->mem, &vk->stager, m->cfg.head_dim, freq, mscale, g->n_ctx);
}

/* Bytes of layer il's expert tensors (none in a dense model). */
static uint64_t expert_bytes(const model *m, uint32_t il) {
    const layer_weights *l = &m->layers[il];
    return l->gate_exps ? l->gate_exps->nbytes + l->up_exps->nbytes + l->down_exps->nbytes : 0;
}

/* The weights' bytes on the device with the experts of layers 0 .. n - 1 in host memory. */
static uint64_t device_weight_bytes(const model *m, uint32_t n) {
    uint64_t b = model_weight_bytes(m);
    for (uint32_t il = 0; il < n && il < m->cfg.n_layer; il++) b -= expert_bytes(m, il);
    return b;
}

/* The memory plan, before a weight is read: everything else is allocated by now (the caller's
 * KV pool, the work buffers, the RoPE table), so the weights must fit in what the device has
 * left. They are the file's tensor bytes (the upload's layouts keep the bytes), less the experts
 * kept in host memory: o's count, or the fewest first layers' that make the rest fit. */
static int weights_fit(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o, bool say) {
    uint32_t n_layer = m->cfg.n_layer, hosted = o->host_expert_layers < n_layer ? o->host_expert_layers : n_layer;
    uint64_t used;
    uint32_t heap;
    uint64_t room = cvk_mem_heap_room(&vk->mem, CVK_MEM_DEVICE, o->device_memory, &heap, &used);
    if (!o->host_experts_fixed) /* the plan's: the fewest layers' experts in host memory that let the rest fit */
        for (hosted = 0; hosted < n_layer && device_weight_bytes(m, hosted) > room && expert_bytes(m, hosted);
             hosted++) {}
    uint64_t need = device_weight_bytes(m, hosted);
    g->host_expert_layers = hosted;
    uint64_t kv = o->kv && o->kv->size <= used ? o->kv->size : 0, work = used - kv;
    uint64_t whole = o->device_memory ? o->device_memory : room + used;
    if (o->plan)
        *o->plan = (gpu_memory_plan){.weights = need,
                                     .host_experts = model_weight_bytes(m) - need,
                                     .kv = kv,
                                     .work = work,
                                     .device = whole,
                                     .n_ctx = g->n_ctx,
                                     .fits = need <= room};
    if (need <= room) {
        char a[32], b[32];
        if (say && hosted && !o->host_experts_fixed)
            fprintf(stderr,
                    "cinder: the experts of %u of %u layers (%s) stay in host memory, read by the device, so the "
                    "other weights (%s) fit it (--n-cpu-moe N sets how many)\n",
                    hosted, n_layer, cd_size_text(model_weight_bytes(m) - need, a), cd_size_text(need, b));
        return 0;
    }
    if (o->kv_room) *o->kv_room = need + work < whole ? whole - need - work : 0;
    char a[32], b[32], c[32], d[32], what[64], where[96] = "";
    snprintf(what, sizeof what, o->device_memory ? "%s (as asked)" : "%s free to cinder", cd_size_text(whole, b));
    if (hosted)
        snprintf(where, sizeof where, " with the experts of %s%u layers in host memory",
                 hosted == n_layer ? "all " : "", hosted);
    if (need + work > whole)
        return cd_fail("the weights need %s of device memory%s and the work buffers %s, more than the device's %s: "
                       "this file does not fit it (a smaller quantization of the model would%s)",
                       cd_size_text(need, a), where, cd_size_text(work, d), what,
                       hosted < n_layer && expert_bytes(m, 0) ? ", or more experts in host memory: --n-cpu-moe" : "");
    uint64_t pb = g->lay.page_bytes ? g->lay.page_bytes : 1;
    return cd_fail("the weights need %s of device memory%s, but of the device's %s the KV pool (%llu tokens) holds %s "
                   "and the work buffers %s: a KV pool of %llu tokens would leave room for them (--kv-pool-tokens, "
                   "or a smaller --ctx)",
                   cd_size_text(need, a), where, what, (unsigned long long)(kv / pb * g->lay.page_tokens),
                   cd_size_text(kv, c), cd_size_text(work, d),
                   (unsigned long long)((whole - need - work) / pb * g->lay.page_tokens));
}

/* Everything but the weights (the pipelines built or, on a describing device, described); then
 * whether the weights fit beside it (said on stderr where say). */
static int make_all_but_weights(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o, bool say) {
    return begin(g, vk, m, o, false) || make_pipelines(g) || make_rope_table(g, vk, m) || gpu_forward_init(g) ||
        weights_fit(g, vk, m, o, say);
}

/* The plan first, on pipelines described and not built (building them is most of a process's
 * start on lavapipe, and seconds on a GPU's cold cache): a refusal, or `cinder info`'s plan,
 * builds none. Where the weights fit, the model is made again with its pipelines built (the
 * same options make the same plan) and the weights go last. */
int gpu_model_init(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o) {
    bool was = vk->dev.describe_pipelines;
    vk->dev.describe_pipelines = true;
    int planned = make_all_but_weights(g, vk, m, o, o->plan_only);
    vk->dev.describe_pipelines = was;
    if (planned) return fail_init(g, vk);
    if (o->plan_only) return 0;
    if (cvk_stager_flush(&vk->stager)) return fail_init(g, vk); /* the RoPE table's copy, before its buffer goes */
    gpu_model_free(g);
    if (make_all_but_weights(g, vk, m, o, true) || (o->build_pipelines && cvk_pipeline_build_all(&vk->dev)) ||
        gpu_weights_upload(&g->w, vk, m, g->pairs, g->head_matvec ? &g->head_cfg : NULL, o->progress,
                           g->host_expert_layers))
        return fail_init(g, vk);
    cvk_pcache_save(&vk->pcache); /* failure is not fatal */
    return 0;
}

int gpu_model_compile(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o) {
    if (begin(g, vk, m, o, true) || make_pipelines(g) || gpu_forward_pipelines(g)) return fail_init(g, vk);
    return 0;
}

void gpu_model_free(gpu_model *g) {
    if (!g->vk) return;
    cvk_ctx *vk = g->vk;
    cvk_device *d = &vk->dev;
    gpu_forward_free(g);
    cvk_rope_table_destroy(&vk->mem, &g->rope_tab);
    cvk_pipeline *ps[] = {&g->get_rows, &g->rmsnorm, &g->swiglu, &g->moe_combine};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cvk_pipeline_destroy(d, ps[i]);
    cvk_head_norm_rope_pipelines_destroy(d, &g->head_norm_rope);
    cvk_argmax_pipelines_destroy(d, &g->argmax);
    cvk_sample_pipelines_destroy(d, &g->sample);
    if (g->m) gpu_weights_free(&g->w, vk, g->m);
    memset(g, 0, sizeof *g);
}

void gpu_model_set_timer(gpu_model *g, cvk_timer *t) { g->pcmd.timer = t; }
