/* The forward pass on the GPU (gpu_model.h) over up to n_batch tokens of several sequences:
 * prompt chunks and decode tokens alike, each at its own position over its own block-table row.
 *
 *   X = get_rows(tok_embd, ids)                                             (T, n_embd)
 *   per layer:
 *     XB = rmsnorm(X) (after a MoE layer: written by its combine); Q, K, V = XB Wq, XB Wk, XB Wv
 *     Q = rope(rmsnorm per head(Q)) in place; rope(rmsnorm per head(K)), V -> pages at
 *       loc[i] = {row, pos}                                                 one stage (head_norm_rope)
 *     ATT = attn_prefill(Q, pages, causal: token i sees its row's positions <= pos[i])
 *     X += ATT Wo                                                           (the matmul adds)
 *     XB = rmsnorm(X)
 *     MoE:   ids, w, groups, gather, scatter = moe_group(XB Wr): softmax top-k per token,
 *              then the (token, slot) pairs sorted by expert                one stage
 *            HG = silu(XB Wg) * (XB Wu), expert-grouped (row t*k + slot): one matmul over
 *              gate-up pairs (gate and up of one type), else two and swiglu (T*k, n_ff)
 *            EO = down matmul, expert-grouped                               (T*k, n_embd)
 *            X += sum_j w[t][j] EO[t*k + j]; XB = rmsnorm(X) with the next layer's
 *              attn_norm (the last layer's: output_norm)                   (moe_combine, one stage)
 *     dense: X += swiglu(XB Wg, XB Wu) Wd   (as MoE: swiglu in the pair matmul; the matmul adds)
 *   head over the wanted rows: rmsnorm, lm_head, argmax; rows drawn on the device: sample_topk
 *
 * The expert ids never leave the GPU: moe_group writes each expert's {offset, count} and two
 * work lists of (expert, token tile) with their indirect grids; the grouped matmuls dispatch
 * over those (matmul_experts below), so no workgroup exists for an empty expert and a recorded
 * pass stays valid whatever the routing. A pass of a shape seen lately is submitted as already
 * recorded (see "recordings" below): only its inputs are written on the host. */
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/model/gpu_model.h"
#include "runtime/model/step_cost.h"
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/op_get_rows.h"
#include "runtime/vk/op_head_norm_rope.h"
#include "runtime/vk/op_matmul.h"
#include "runtime/vk/op_matvec.h"
#include "runtime/vk/op_moe_combine.h"
#include "runtime/vk/op_moe_group.h"
#include "runtime/vk/op_rmsnorm.h"
#include "runtime/gguf/xq8.h"
#include "runtime/vk/op_xq8.h"
#include "runtime/vk/rope_table.h"
#include "runtime/vk/vk_barrier.h"

/* Tokens per chunk: enough for a prompt's worth of weight reuse, bounded by the context. */
#define GPU_PREFILL_BATCH 512u

static cvk_view W(const cvk_buffer *b) { return cvk_view_whole(b); }

/* ---- set-up ---- */

/* The kernels for few tokens (decode steps, experts with a handful of tokens): matmul_rows.comp,
 * a weight row decoded a scale group at a time in registers. On a GPU with k split over lanes
 * (tile.kl: each lane sums some of the row's 32-weight chunks, one lane adds the chunk sums in
 * order): one token 4 rows x 8 lanes per 32-invocation workgroup, 2-16 tokens (and the MoE's
 * list-0 items) in 4-token columns of 8 rows x 4 lanes (the down projection's k is 3 chunks at
 * the real shape): 4-token columns were faster than 8-token ones on a GPU. Without the split a
 * decode step's projection has one invocation per row walking all of k, and a GPU is bound by
 * that walk. (The measurements: docs/kernels/matmul.md, "The decode shapes' measurements".)
 * On a CPU device, for F32/F16/BF16 weights, 64 rows, and one token of 4 rows per
 * invocation (matmul_one); the block types: cpu_texel below. Every output is summed in the
 * same canonical order in all of them (op_matmul.h), so the choice never changes a bit. */
static const cvk_matmul_tile few_tile_gpu = {.bm = 8, .bn = 4, .kl = 4, .rows = true};
static const cvk_matmul_tile one_tile_gpu = {.bm = 4, .bn = 1, .kl = 8, .rows = true};
#define FEW_TOKENS 16u /* token columns up to which the few-token kernel runs */
/* A GPU's dense projection of fewer rows than this over 2-16 tokens runs the one-token kernel in
 * every token column instead: the few-token kernel's rows x 4 invocations per 4 tokens are too
 * few to hide the GPU's latencies, and decoding each weight once per token costs less than
 * that (measured from 128 to 2,048 rows; at 4,096 the few-token kernel is faster). */
#define FEW_ROWS_GPU 4096u
/* A GPU's lm_head (151,936 rows at the real shape): rows enough for any split, so fewer lanes
 * per row and more rows per workgroup (for one token 8 rows x 4 lanes beat the projections'
 * 4 x 8; for eight, 8-token columns beat 4-token ones). */
static const cvk_matmul_tile head_one_gpu = {.bm = 8, .bn = 1, .kl = 4, .rows = true};
static const cvk_matmul_tile head_few_gpu = {.bm = 8, .bn = 8, .kl = 4, .rows = true};

/* On a CPU device the block types (Q8_0, Q4_K, Q5_K, Q6_K) run the rows kernel reading weights
 * and x through texel buffers, 8 rows per invocation, with one token per workgroup column
 * (cvk_matmul_tile_one_texel) or 8 (cvk_matmul_tile_eight_texel: each row decoded once for
 * the 8). llvmpipe pays each storage-buffer or shared-memory load per lane and a texel fetch as
 * one gather, and a partly empty column as a full one, so 8 tokens a column serve 1-32 tokens
 * best (docs/kernels/matmul.md, "The decode shapes' measurements"). */
static bool cpu_texel(const gpu_model *g, enum qtype type) { return !g->few_gpu && cvk_matmul_texel_type(type); }

/* t with the fields s sets (gpu_model_opts.few_shape / one_shape / head_shape: measuring other shapes) */
static cvk_matmul_tile shaped(cvk_matmul_tile t, gpu_rows_shape s) {
    if (s.bn) t.bn = s.bn;
    if (s.bm) t.bm = s.bm;
    if (s.kl) t.kl = s.kl;
    if (s.tm) t.tm = s.tm;
    return t;
}

/* The pipelines for weights of t's type: plain, or for gate-up pairs (glu). */
static int want_matmul(gpu_model *g, const gguf_tensor *t, bool glu) {
    if (!t || g->matmul_one[glu][t->type].layout) return 0; /* made (built, or described for a plan) */
    VkPipelineCache pc = g->vk->pcache.cache;
    cvk_device *d = &g->vk->dev;
    if (cpu_texel(g, t->type)) { /* one token; 8-token columns (matmul_few) */
        cvk_matmul_tile one = cvk_matmul_tile_one_texel, eight = cvk_matmul_tile_eight_texel;
        one.glu = eight.glu = glu;
        return cvk_matmul_pipeline(&g->matmul_one[glu][t->type], d, pc, t->type, &one) ||
            cvk_matmul_pipeline(&g->matmul_few[glu][t->type], d, pc, t->type, &eight);
    }
    gpu_tile_shape b = g->big_tile;
    cvk_matmul_tile big = b.bm ? (cvk_matmul_tile){.bm = b.bm, .bn = b.bn, .bk = b.bk, .tm = b.tm, .tn = b.tn}
                               : cvk_matmul_tile_default,
                    few = g->few_gpu ? shaped(few_tile_gpu, g->few_shape) : cvk_matmul_tile_rows,
                    one = g->few_gpu ? shaped(one_tile_gpu, g->one_shape) : cvk_matmul_tile_one;
    big.glu = few.glu = one.glu = glu;
    return cvk_matmul_pipeline(&g->matmul[glu][t->type], d, pc, t->type, &big) ||
        cvk_matmul_pipeline(&g->matmul_few[glu][t->type], d, pc, t->type, &few) ||
        cvk_matmul_pipeline(&g->matmul_one[glu][t->type], d, pc, t->type, &one);
}

/* The kernel for a dense projection of t over n_tokens. */
static const cvk_pipeline *matmul_pipe(const gpu_model *g, const gguf_tensor *t, uint32_t n_tokens, bool glu) {
    enum qtype type = t->type;
    bool few_rows = g->few_gpu && t->ne[1] < FEW_ROWS_GPU; /* outputs (a gate-up pair: one per pair) */
    if (n_tokens == 1 || cpu_texel(g, type) || (few_rows && n_tokens <= FEW_TOKENS)) return &g->matmul_one[glu][type];
    return n_tokens <= FEW_TOKENS ? &g->matmul_few[glu][type] : &g->matmul[glu][type];
}

/* The lm_head's kernel for n_out rows (a GPU's own shapes; else as a dense projection's). */
static const cvk_pipeline *head_pipe(const gpu_model *g, uint32_t n_out) {
    if (g->few_gpu && n_out <= FEW_TOKENS) return n_out == 1 ? &g->matmul_head_one : &g->matmul_head_few;
    return matmul_pipe(g, g->m->output, n_out, false);
}

/* The grouped matmuls run over moe_group's two work lists, each an indirect dispatch over
 * (item, row tile). On a GPU list 0 holds the experts with at most MOE_SPLIT tokens, cut into
 * the rows kernel's 4-token items (a row decoded once per 4 tokens); list 1 the busier experts,
 * in items of the big tile (matmul). On a CPU device, where the block types run the texel rows
 * kernel (cpu_texel), list 0 holds the experts with at most MOE_SPLIT_CPU tokens, one per item
 * (matmul_one), and list 1 the others in 8-token items (matmul_few: each row decoded once per 8
 * tokens; lavapipe pays a partly empty item as a full one, about what 2-3 one-token items cost):
 * a 512-token prefill of the 1-layer 30B 13% faster than whole 4-token items with the rest one
 * per item, 8-agent decode as fast (docs/kernels/matmul.md, "Eight tokens per column"). A CPU
 * layer whose expert types are not all block types keeps one token per item in both lists,
 * or for float types alone the big tile in list 1: the lists' tiles must be every consumer's.
 * An empty list is an empty grid. Every output is the same ordered sum over k in every kernel,
 * so which list a token lands in (it depends on the other tokens of the batch) never changes
 * a bit. Shape s of a list: 0 for gate/up (n_ff_exp rows), 1 for down (n_embd). */
#define MOE_SPLIT 32u
#define MOE_SPLIT_CPU 3u

typedef enum { MOE_GPU, MOE_CPU_EIGHT, MOE_CPU_ONE, MOE_CPU_FLOAT } moe_lists;

static moe_lists moe_lists_of(const gpu_model *g, const layer_weights *l) {
    if (g->few_gpu) return MOE_GPU;
    int texel = cvk_matmul_texel_type(l->gate_exps->type) + cvk_matmul_texel_type(l->up_exps->type) +
        cvk_matmul_texel_type(l->down_exps->type);
    return texel == 3 ? MOE_CPU_EIGHT : texel ? MOE_CPU_ONE : MOE_CPU_FLOAT;
}

static const cvk_pipeline *moe_pipe(const gpu_model *g, moe_lists ls, enum qtype type, uint32_t list, bool glu) {
    switch (ls) {
    case MOE_GPU: return list ? &g->matmul[glu][type] : &g->matmul_few[glu][type];
    case MOE_CPU_EIGHT: return list ? &g->matmul_few[glu][type] : &g->matmul_one[glu][type];
    case MOE_CPU_FLOAT: return list ? &g->matmul[glu][type] : &g->matmul_one[glu][type];
    default: return &g->matmul_one[glu][type];
    }
}

/* The head_many pipeline for n > 1 wanted rows: widths 2, 4, 8 (8 per workgroup above 8). */
static uint32_t head_width(uint32_t n) { return n <= 2 ? 0 : n <= 4 ? 1 : 2; }

/* A CPU device's lm_head: the matvec over the wanted rows (gpu_model_init's plan). */
static int head_matvec_pipelines(gpu_model *g) {
    const gguf_tensor *t = g->m->output;
    uint32_t O = g->max_out;
    CD_TRY(cvk_matvec_pipeline(&g->head, &g->vk->dev, g->vk->pcache.cache, t->type, &g->head_cfg));
    for (uint32_t b = 0; O > 1 && b <= head_width(O); b++) { /* the widths max_out can need */
        cvk_matvec_cfg hc = cvk_matvec_choose(&g->vk->dev, t->type, (uint32_t)t->ne[0], (uint32_t)t->ne[1], 2u << b);
        hc.a16 = g->head_cfg.a16, hc.texel = g->head_cfg.texel; /* the layout the weights are in */
        CD_TRY(cvk_matvec_pipeline(&g->head_many[b], &g->vk->dev, g->vk->pcache.cache, t->type, &hc));
    }
    return 0;
}

/* The integer family's kernels (int_dot) for weights of t's type where it has them: one token
 * per workgroup, and 8 (a row's chunk unpacked once for them). The decode shapes on RDNA
 * (docs/PERF.md, session 43's ACO table): 32 invocations, 8 lanes per row. */
static int want_xq8(gpu_model *g, const gguf_tensor *t) {
    if (!t || !xq8_type(t->type) || g->xq8_one[t->type].layout) return 0; /* made */
    VkPipelineCache pc = g->vk->pcache.cache;
    return cvk_xq8_matvec_pipeline(&g->xq8_one[t->type], &g->vk->dev, pc, t->type, &(cvk_xq8_cfg){.nt = 1}) ||
        cvk_xq8_matvec_pipeline(&g->xq8_many[t->type], &g->vk->dev, pc, t->type, &(cvk_xq8_cfg){.nt = 8});
}

static int xq8_pipelines(gpu_model *g) {
    CD_TRY(cvk_xq8_quantize_pipeline(&g->xq8_quantize, &g->vk->dev, g->vk->pcache.cache));
    for (uint32_t il = 0; il < g->m->cfg.n_layer; il++) {
        const layer_weights *l = &g->m->layers[il];
        CD_TRY(want_xq8(g, l->wq) || want_xq8(g, l->wk) || want_xq8(g, l->wv) || want_xq8(g, l->wo));
    }
    return 0;
}

int gpu_forward_pipelines(gpu_model *g) {
    const model *m = g->m;
    if (g->int_dot) CD_TRY(xq8_pipelines(g));
    for (uint32_t il = 0; il < m->cfg.n_layer; il++) {
        const gguf_tensor *ts[GPU_LAYER_MATS];
        gpu_layer_mats(&m->layers[il], ts);
        for (size_t i = 0; i < GPU_LAYER_MATS; i++) CD_TRY(want_matmul(g, ts[i], false));
        const layer_weights *l = &m->layers[il];
        if (gpu_model_layer_pairs(g, il)) CD_TRY(want_matmul(g, l->gate_exps ? l->gate_exps : l->ffn_gate, true));
    }
    if (!g->head_matvec) CD_TRY(want_matmul(g, m->output, false)); /* the batch forward's head */
    if (g->few_gpu && !g->head_matvec) {
        cvk_matmul_tile one = head_one_gpu, few = shaped(head_few_gpu, g->head_shape);
        enum qtype t = m->output->type;
        CD_TRY(cvk_matmul_pipeline(&g->matmul_head_one, &g->vk->dev, g->vk->pcache.cache, t, &one) ||
               cvk_matmul_pipeline(&g->matmul_head_few, &g->vk->dev, g->vk->pcache.cache, t, &few));
    }
    VkPipelineCache pc = g->vk->pcache.cache;
    CD_TRY(cvk_attn_prefill_pipeline(&g->attn_prefill, &g->vk->dev, pc, m->cfg.head_dim, 0));
    if (m->cfg.arch == ARCH_QWEN3MOE) CD_TRY(cvk_moe_group_pipeline(&g->moe_group, &g->vk->dev, pc, 0));
    return g->head_matvec ? head_matvec_pipelines(g) : 0;
}

/* Attention splits for the batch forward, fixed per token by its own position (batch invariance):
 * at least 512 positions a split on a CPU device (64 on a GPU), doubled until a token needs at
 * most 8 (GPU: 32) splits. Decode work then depends on the context's length, not on n_ctx: a
 * token at 4,000 walks 8 splits of 512 on a CPU device and 32 of 128 on a GPU; one at 40,000
 * 5 of 8,192 (20 of 2,048). A decode token's workgroups are its kv heads times its splits, so a
 * GPU's splits are short: long ones left most of a GPU idle at decode (docs/kernels/attention.md,
 * "Decode splits"). The partials buffer holds n_batch tokens x 32 splits (272 MB at 512 tokens of Qwen3-30B-A3B). */
static void batch_splits(gpu_model *g) {
    g->split_len = g->attn_prefill.cpu ? 512 : 64;
    g->split_max = g->attn_prefill.cpu ? 8 : 32;
}

static int input_buffers(gpu_model *g, gpu_input *in, uint64_t bytes) {
    return gpu_model_buffer(g, &in->host, bytes, CVK_MEM_UPLOAD) ||
        gpu_model_buffer(g, &in->dev, bytes, CVK_MEM_DEVICE);
}

static int make_buffers(gpu_model *g) {
    const model_config *c = &g->m->cfg;
    bool moe = c->arch == ARCH_QWEN3MOE;
    uint64_t T = g->n_batch, q_dim = (uint64_t)c->n_head * c->head_dim, kv_dim = (uint64_t)c->n_head_kv * c->head_dim;
    uint64_t k = moe ? c->n_expert_used : 1, ff = moe ? c->n_ff_exp : c->n_ff;
    enum cvk_mem_kind D = CVK_MEM_DEVICE;
    batch_splits(g); /* after gpu_forward_pipelines: the attention kernel says cpu or not */
    CD_TRY(gpu_model_buffer(g, &g->bx, T * c->n_embd * 4, D) || gpu_model_buffer(g, &g->bxb, T * c->n_embd * 4, D));
    CD_TRY(gpu_model_buffer(g, &g->bq, T * q_dim * 4, D) || gpu_model_buffer(g, &g->batt, T * q_dim * 4, D) ||
           gpu_model_buffer(g, &g->bk, T * kv_dim * 4, D) || gpu_model_buffer(g, &g->bv, T * kv_dim * 4, D));
    CD_TRY(gpu_model_buffer(g, &g->bhg, T * k * ff * 4, D));
    uint32_t xq_in = (uint32_t)(q_dim > c->n_embd ? q_dim : c->n_embd); /* the attention projections' inputs */
    if (g->int_dot)
        CD_TRY(gpu_model_buffer(g, &g->bxq, cvk_xq8_q_bytes(xq_in, (uint32_t)T), D) ||
               gpu_model_buffer(g, &g->bxqd, cvk_xq8_d_bytes(xq_in, (uint32_t)T), D));
    bool apart = false; /* a layer whose gate and up are not gate-up pairs: HU and a swiglu stage */
    for (uint32_t il = 0; il < c->n_layer; il++) apart |= !gpu_model_layer_pairs(g, il); /* before the upload */
    if (apart) CD_TRY(gpu_model_buffer(g, &g->bhu, T * k * ff * 4, D));
    /* partial softmax states of the attention splits, per part of the pool's buffer */
    CD_TRY(gpu_model_buffer(
        g, &g->bpartials,
        cvk_attn_prefill_partials_bytes(g->n_batch, c->n_head, g->kv->n_parts, g->split_max, c->head_dim), D));
    if (moe) {
        CD_TRY(gpu_model_buffer(g, &g->brouter, T * c->n_expert * 4, D) ||
               gpu_model_buffer(g, &g->bids, T * k * 4, D) || gpu_model_buffer(g, &g->bwts, T * k * 4, D) ||
               gpu_model_buffer(g, &g->bgroups, c->n_expert * 8ull, D) ||
               gpu_model_buffer(g, &g->bgather, T * k * 4, D) || gpu_model_buffer(g, &g->bscatter, T * k * 4, D) ||
               gpu_model_buffer(g, &g->beo, T * k * c->n_embd * 4, D));
        /* work lists sized for the smaller of the lists' token tiles (a big tile asked for may
         * be narrower than list 0's) */
        const layer_weights *l0 = &g->m->layers[0]; /* the lists' tiles are the same in every layer */
        moe_lists ls = moe_lists_of(g, l0);
        uint32_t t0 = cvk_matmul_token_tile(moe_pipe(g, ls, l0->gate_exps->type, 0, false)),
                 t1 = cvk_matmul_token_tile(moe_pipe(g, ls, l0->gate_exps->type, 1, false));
        g->moe_cap = cvk_moe_group_cap((uint32_t)T, (uint32_t)k, c->n_expert, t0, t1);
        CD_TRY(gpu_model_buffer(g, &g->bitems, 16ull * g->moe_cap, D) || gpu_model_buffer(g, &g->bdispatch, 48, D));
    }
    return input_buffers(g, &g->in_tok, T * 4) || input_buffers(g, &g->in_loc, T * 8);
}

static int make_batch_buffers(gpu_model *g) {
    const model_config *c = &g->m->cfg;
    uint64_t S = g->max_seqs, O = g->max_out;
    CD_TRY(input_buffers(g, &g->in_table, S * g->max_pages * 4) ||
           gpu_model_buffer(g, &g->bhead_x, O * c->n_embd * 4, CVK_MEM_DEVICE) || input_buffers(g, &g->in_out, O * 4) ||
           gpu_model_buffer(g, &g->blogits, O * c->n_vocab * 4, CVK_MEM_DEVICE) ||
           gpu_model_buffer(g, &g->bam_scratch, cvk_argmax_scratch_bytes(&g->argmax, c->n_vocab, (uint32_t)O),
                            CVK_MEM_DEVICE) ||
           input_buffers(g, &g->in_sample, O * sizeof(cvk_sample_row)) ||
           gpu_model_buffer(g, &g->bsample_scratch,
                            cvk_sample_scratch_bytes(&g->sample, c->n_vocab, (uint32_t)O, CVK_SAMPLE_MAX_K),
                            CVK_MEM_DEVICE) ||
           gpu_model_buffer(g, &g->bout_id, O * 4, CVK_MEM_READBACK));
    memset(cvk_buffer_host_ptr(&g->in_table.host, 0), 0, S * g->max_pages * 4);
    return 0;
}

int gpu_forward_init(gpu_model *g) {
    if (!g->n_batch) g->n_batch = GPU_PREFILL_BATCH;
    if (g->n_batch > g->n_ctx) g->n_batch = g->n_ctx;
    CD_TRY(gpu_forward_pipelines(g) || make_buffers(g) || make_batch_buffers(g) ||
           cvk_descpool_init(&g->pdpool, &g->vk->dev, 256) || cvk_cmd_init(&g->pcmd, &g->vk->dev, false));
    for (uint32_t i = 0; i < GPU_RECORDINGS; i++) {
        gpu_recording *r = &g->rec[i];
        if (!(r->out = malloc(g->max_out * sizeof *r->out))) return cd_fail("out of memory");
        CD_TRY(cvk_descpool_init(&r->dp, &g->vk->dev, 256) || cvk_cmd_init(&r->cmd, &g->vk->dev, false));
    }
    return 0;
}

void gpu_forward_free(gpu_model *g) {
    cvk_ctx *vk = g->vk;
    for (uint32_t i = 0; i < GPU_RECORDINGS; i++) {
        cvk_cmd_free(&g->rec[i].cmd);
        cvk_descpool_free(&g->rec[i].dp);
        free(g->rec[i].out);
    }
    cvk_cmd_free(&g->pcmd);
    cvk_descpool_free(&g->pdpool);
    cvk_buffer *bufs[] = {&g->bx,
                          &g->bxb,
                          &g->bq,
                          &g->batt,
                          &g->bk,
                          &g->bv,
                          &g->brouter,
                          &g->bids,
                          &g->bwts,
                          &g->bgroups,
                          &g->bitems,
                          &g->bdispatch,
                          &g->bgather,
                          &g->bscatter,
                          &g->bhg,
                          &g->bhu,
                          &g->beo,
                          &g->bpartials,
                          &g->bxq,
                          &g->bxqd,
                          &g->blogits,
                          &g->bam_scratch,
                          &g->bsample_scratch,
                          &g->bout_id,
                          &g->bhead_x};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
    gpu_input *ins[] = {&g->in_tok, &g->in_loc, &g->in_table, &g->in_out, &g->in_sample};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        cvk_buffer_destroy(&vk->mem, &ins[i]->host);
        cvk_buffer_destroy(&vk->mem, &ins[i]->dev);
    }
    for (int glu = 0; glu < 2; glu++)
        for (int t = 0; t < QTYPE_COUNT; t++) {
            cvk_pipeline_destroy(&vk->dev, &g->matmul[glu][t]);
            cvk_pipeline_destroy(&vk->dev, &g->matmul_few[glu][t]);
            cvk_pipeline_destroy(&vk->dev, &g->matmul_one[glu][t]);
        }
    for (int t = 0; t < QTYPE_COUNT; t++) {
        cvk_pipeline_destroy(&vk->dev, &g->xq8_one[t]);
        cvk_pipeline_destroy(&vk->dev, &g->xq8_many[t]);
    }
    cvk_pipeline_destroy(&vk->dev, &g->xq8_quantize);
    cvk_pipeline_destroy(&vk->dev, &g->moe_group);
    cvk_pipeline_destroy(&vk->dev, &g->matmul_head_one);
    cvk_pipeline_destroy(&vk->dev, &g->matmul_head_few);
    for (int b = 0; b < 3; b++) cvk_pipeline_destroy(&vk->dev, &g->head_many[b]);
    cvk_pipeline_destroy(&vk->dev, &g->head);
    cvk_attn_prefill_pipeline_destroy(&vk->dev, &g->attn_prefill);
}

/* ---- one chunk ---- */

typedef struct chunk {
    gpu_model *g;
    cvk_cmd *c;
    cvk_descpool *dp;
    uint32_t T;            /* tokens in the chunk */
    uint32_t max_len;      /* positions attention may read: the last + 1, or more (batch invariance) */
    bool distinct_rows;    /* every token of another table row (a decode step): attention's hint */
    bool reusable;         /* recorded to be submitted again (gpu_recording) */
    uint64_t attended;     /* for profiles: sum over tokens of the positions each attends to */
    uint64_t kv_positions; /* for profiles: distinct (row, position) pairs attention reads */
} chunk;

static void barrier(const chunk *ch) { cvk_barrier_compute_to_compute(ch->c->cb); }

/* Profiles: whether a timer records this chunk, and the next op's work (step_cost.h). */
static bool profiling(const chunk *ch) { return cvk_timer_on(ch->c->timer); }
static void work(const chunk *ch, cvk_work w) { cvk_timer_work(ch->c->timer, &w); }

static void work_rows(const chunk *ch, const char *role, uint32_t n, uint32_t rows, uint32_t reads, uint32_t writes,
                      uint32_t flops_per, bool weight) {
    if (profiling(ch)) work(ch, step_cost_rows(role, n, rows, reads, writes, flops_per, weight));
}

/* glu: a gate-up pair product (gate t and its up twin). */
static void work_matmul(const chunk *ch, const char *role, const gguf_tensor *t, uint32_t T, double slices,
                        uint32_t x_rows, bool glu) {
    if (!profiling(ch)) return;
    uint32_t n_in = (uint32_t)t->ne[0], n_rows = (uint32_t)t->ne[1];
    work(ch,
         glu ? step_cost_matmul_glu(role, t->type, n_in, n_rows, T, slices, x_rows)
             : step_cost_matmul(role, t->type, n_in, n_rows, T, slices, x_rows));
}

/* What a dense projection's matmul writes: Y = X W^T, Y += X W^T (a residual), or over gate-up
 * pairs Y = silu(X G^T) * (X U^T). */
enum matmul_out { OUT_SET, OUT_ADD, OUT_SWIGLU };

/* Y (T rows) from X for a dense projection; t: its tensor (the gate for gate-up pairs). */
static int matmul_to(const chunk *ch, const char *role, const gguf_tensor *t, const cvk_buffer *w, const cvk_buffer *x,
                     const cvk_buffer *y, enum matmul_out out) {
    bool glu = out == OUT_SWIGLU;
    work_matmul(ch, role, t, ch->T, 1, ch->T, glu);
    cvk_matmul_args a = {.w = w,
                         .type = t->type,
                         .n_in = (uint32_t)t->ne[0],
                         .n_rows = (uint32_t)t->ne[1],
                         .x = W(x),
                         .x_rows = ch->T,
                         .y = W(y),
                         .y_rows = ch->T,
                         .n_tokens = ch->T,
                         .accumulate = out == OUT_ADD,
                         .glu = glu};
    uint32_t four = ch->T / 4 * 4;
    if (!cpu_texel(ch->g, t->type) || !four) return cvk_matmul(ch->c, ch->dp, matmul_pipe(ch->g, t, ch->T, glu), &a);
    /* CPU device: tokens [0, four) in 8-token columns, the last one half full when four is not
     * a multiple of 8 (each row decoded once per column; a partly empty column costs as much as
     * a full one), the last T % 4 one per column */
    const cvk_pipeline *p[2] = {&ch->g->matmul_few[glu][t->type], &ch->g->matmul_one[glu][t->type]};
    cvk_matmul_args b[2] = {a, a};
    b[0].x_rows = b[0].y_rows = b[0].n_tokens = four;
    uint64_t xo = (uint64_t)four * a.n_in * 4, yo = (uint64_t)four * a.n_rows * 4;
    b[1].x = cvk_view_range(x, xo, x->size - xo), b[1].y = cvk_view_range(y, yo, y->size - yo);
    b[1].x_rows = b[1].y_rows = b[1].n_tokens = ch->T - four;
    return ch->T == four ? cvk_matmul(ch->c, ch->dp, p[0], &b[0]) : cvk_matmul_lists(ch->c, ch->dp, p, b);
}

static int matmul(const chunk *ch, const char *role, const gguf_tensor *t, const cvk_buffer *w, const cvk_buffer *x,
                  const cvk_buffer *y) {
    return matmul_to(ch, role, t, w, x, y, OUT_SET);
}

/* X += x W: the residual added by the projection itself (the same bits as a separate add, one
 * stage fewer). */
static int matmul_residual(const chunk *ch, const char *role, const gguf_tensor *t, const cvk_buffer *w,
                           const cvk_buffer *x) {
    return matmul_to(ch, role, t, w, x, &ch->g->bx, OUT_ADD);
}

/* Expert-grouped: pair p of expert e reads X row gather[p] and writes Y row scatter[p]. */
static int matmul_experts(const chunk *ch, moe_lists ls, const char *role, const gguf_tensor *t, const cvk_buffer *w,
                          const cvk_buffer *x, uint32_t x_rows, const cvk_buffer *gather, const cvk_buffer *y,
                          uint32_t shape, bool glu) {
    const gpu_model *g = ch->g;
    uint32_t rows = ch->T * g->m->cfg.n_expert_used;
    double slices = step_cost_experts_read(g->m->cfg.n_expert, g->m->cfg.n_expert_used, ch->T);
    work_matmul(ch, role, t, rows, slices, x_rows, glu);
    const cvk_pipeline *p[2];
    cvk_matmul_args a[2];
    for (uint32_t list = 0; list < 2; list++) {
        p[list] = moe_pipe(g, ls, t->type, list, glu);
        a[list] = (cvk_matmul_args){.w = w,
                                    .type = t->type,
                                    .n_in = (uint32_t)t->ne[0],
                                    .n_rows = (uint32_t)t->ne[1],
                                    .x = W(x),
                                    .x_rows = x_rows,
                                    .y = W(y),
                                    .y_rows = rows,
                                    .n_tokens = ch->T,
                                    .gather = W(gather),
                                    .scatter = W(&g->bscatter),
                                    .groups = W(&g->bgroups),
                                    .n_experts = (uint32_t)t->ne[2],
                                    .items = W(&g->bitems),
                                    .item0 = list * g->moe_cap,
                                    .item_tile = cvk_matmul_token_tile(p[list]),
                                    .dispatch = cvk_view_range(&g->bdispatch, 12ull * (2 * list + shape), 12),
                                    .glu = glu};
    }
    return cvk_matmul_lists(ch->c, ch->dp, p, a); /* one op: the profile's work covers both lists */
}

/* HG = silu(HG) * HU over rows of n (the stage gate-up pairs fold into the matmul). */
static int swiglu(const chunk *ch, uint32_t n, uint32_t rows) {
    cvk_swiglu_args s = {.g = W(&ch->g->bhg), .u = W(&ch->g->bhu), .h = W(&ch->g->bhg), .n = n, .rows = rows};
    work_rows(ch, "swiglu", n, rows, 2, 1, 4, false);
    return cvk_swiglu(ch->c, ch->dp, &ch->g->swiglu, &s);
}

static int rmsnorm(const chunk *ch, const char *role, const cvk_buffer *x, const cvk_buffer *w, const cvk_buffer *y,
                   uint32_t n, uint32_t rows) {
    work_rows(ch, role, n, rows, 1, 1, 4, true);
    cvk_rmsnorm_args a = {.x = W(x), .w = W(w), .y = W(y), .n = n, .rows = rows, .eps = ch->g->m->cfg.rms_eps};
    return cvk_rmsnorm(ch->c, ch->dp, &ch->g->rmsnorm, &a);
}

/* The integer family's quantized x (bxq, bxqd) from x's T rows of n floats. */
static int quantize_x(const chunk *ch, const cvk_buffer *x, uint32_t n) {
    gpu_model *g = ch->g;
    work_rows(ch, "xq8_quantize", n, ch->T, 1, 1, 3, false);
    cvk_xq8_quantize_args a = {.x = W(x), .n_in = n, .n_tokens = ch->T, .xq = W(&g->bxq), .xd = W(&g->bxqd)};
    return cvk_xq8_quantize(ch->c, ch->dp, &g->xq8_quantize, &a);
}

/* Whether the attention projection t runs in the integer family: int_dot on and a type it has. */
static bool runs_xq8(const gpu_model *g, const gguf_tensor *t) { return g->int_dot && t && xq8_type(t->type); }

/* An attention projection: in the integer family (from quantize_x's blocks of x) where
 * runs_xq8, else the float family's matmul_to; OUT_SET or OUT_ADD. */
static int attn_matmul(const chunk *ch, const char *role, const gguf_tensor *t, const cvk_buffer *w,
                       const cvk_buffer *x, const cvk_buffer *y, enum matmul_out out) {
    const gpu_model *g = ch->g;
    if (!runs_xq8(g, t)) return matmul_to(ch, role, t, w, x, y, out);
    work_matmul(ch, role, t, ch->T, 1, ch->T, false);
    cvk_xq8_matvec_args a = {.w = w,
                             .type = t->type,
                             .n_in = (uint32_t)t->ne[0],
                             .n_rows = (uint32_t)t->ne[1],
                             .xq = W(&g->bxq),
                             .xd = W(&g->bxqd),
                             .n_tokens = ch->T,
                             .y = W(y),
                             .accumulate = out == OUT_ADD};
    return cvk_xq8_matvec(ch->c, ch->dp, ch->T == 1 ? &g->xq8_one[t->type] : &g->xq8_many[t->type], &a);
}

static int attention(const chunk *ch, uint32_t il) {
    gpu_model *g = ch->g;
    const model_config *cf = &g->m->cfg;
    const layer_weights *l = &g->m->layers[il];
    const gpu_layer *d = &g->w.layers[il];
    if (runs_xq8(g, l->wq) || runs_xq8(g, l->wk) || runs_xq8(g, l->wv)) { /* x quantized once, for those that read it */
        CD_TRY(quantize_x(ch, &g->bxb, cf->n_embd));
        barrier(ch);
    }
    CD_TRY(attn_matmul(ch, "attn_q", l->wq, &d->wq, &g->bxb, &g->bq, OUT_SET) ||
           attn_matmul(ch, "attn_k", l->wk, &d->wk, &g->bxb, &g->bk, OUT_SET) ||
           attn_matmul(ch, "attn_v", l->wv, &d->wv, &g->bxb, &g->bv, OUT_SET));
    barrier(ch);
    /* QK-norm and RoPE in one stage: Q in place, K straight into its pages with V */
    cvk_head_norm_rope_args hq = {.x = W(&g->bq),
                                  .w = W(&d->q_norm),
                                  .loc = W(&g->in_loc.dev),
                                  .table = &g->rope_tab,
                                  .tokens = ch->T,
                                  .heads = cf->n_head,
                                  .eps = cf->rms_eps};
    cvk_head_norm_rope_args hk = {.x = W(&g->bk),
                                  .w = W(&d->k_norm),
                                  .loc = W(&g->in_loc.dev),
                                  .table = &g->rope_tab,
                                  .tokens = ch->T,
                                  .heads = cf->n_head_kv,
                                  .eps = cf->rms_eps,
                                  .pool = g->kv,
                                  .lay = &g->lay,
                                  .v = W(&g->bv),
                                  .pages = W(&g->in_table.dev),
                                  .layer = il,
                                  .table_stride = g->max_pages};
    work_rows(ch, "q_norm_rope", cf->head_dim, ch->T * cf->n_head, 1, 1, 10, false);
    CD_TRY(cvk_head_norm_rope(ch->c, ch->dp, &g->head_norm_rope, &hq));
    if (profiling(ch)) work(ch, step_cost_kv_write(cf, ch->T)); /* K's norm and rotation ride along */
    CD_TRY(cvk_head_norm_rope(ch->c, ch->dp, &g->head_norm_rope, &hk));
    barrier(ch);
    cvk_attn_prefill_args at = {.pool = g->kv,
                                .lay = &g->lay,
                                .q = W(&g->bq),
                                .table = W(&g->in_table.dev),
                                .loc = W(&g->in_loc.dev),
                                .partials = W(&g->bpartials),
                                .out = W(&g->batt),
                                .n_tokens = ch->T,
                                .n_head = cf->n_head,
                                .layer = il,
                                .table_stride = g->max_pages,
                                .max_len = ch->max_len,
                                .split_len = g->split_len,
                                .n_split = g->split_max,
                                .distinct_rows = ch->distinct_rows};
    if (profiling(ch)) work(ch, step_cost_attention("attention", cf, ch->T, ch->attended, ch->kv_positions));
    CD_TRY(cvk_attn_prefill(ch->c, ch->dp, &g->attn_prefill, &at));
    barrier(ch);
    if (runs_xq8(g, l->wo)) {
        CD_TRY(quantize_x(ch, &g->batt, cf->n_head * cf->head_dim));
        barrier(ch);
    }
    return attn_matmul(ch, "attn_output", l->wo, &d->wo, &g->batt, &g->bx, OUT_ADD);
}

/* H = silu(XB Wg) * (XB Wu) for the dense FFN: one matmul over gate-up pairs, else two and a
 * swiglu stage (the same bits). */
static int dense_gate_up(const chunk *ch, const layer_weights *l, const gpu_layer *d) {
    gpu_model *g = ch->g;
    if (gpu_layer_has_pairs(d))
        return matmul_to(ch, "ffn_gate_up", l->ffn_gate, &d->gate_up, &g->bxb, &g->bhg, OUT_SWIGLU);
    CD_TRY(matmul(ch, "ffn_gate", l->ffn_gate, &d->ffn_gate, &g->bxb, &g->bhg) ||
           matmul(ch, "ffn_up", l->ffn_up, &d->ffn_up, &g->bxb, &g->bhu));
    barrier(ch);
    return swiglu(ch, g->m->cfg.n_ff, ch->T);
}

static int ffn_dense(const chunk *ch, const layer_weights *l, const gpu_layer *d) {
    gpu_model *g = ch->g;
    CD_TRY(dense_gate_up(ch, l, d));
    barrier(ch);
    return matmul_residual(ch, "ffn_down", l->ffn_down, &d->ffn_down, &g->bhg);
}

/* HG = the experts' silu(XB Wg[e]) * (XB Wu[e]) for every (token, slot) pair: one grouped
 * matmul over gate-up pairs, else two and a swiglu stage (the same bits). */
static int moe_gate_up(const chunk *ch, moe_lists ls, const layer_weights *l, const gpu_layer *d) {
    gpu_model *g = ch->g;
    const gguf_tensor *gate = l->gate_exps, *up = l->up_exps;
    if (gpu_layer_has_pairs(d))
        return matmul_experts(ch, ls, "ffn_gate_up_exps", gate, &d->gate_up, &g->bxb, ch->T, &g->bgather, &g->bhg, 0,
                              true);
    CD_TRY(
        matmul_experts(ch, ls, "ffn_gate_exps", gate, &d->gate_exps, &g->bxb, ch->T, &g->bgather, &g->bhg, 0, false) ||
        matmul_experts(ch, ls, "ffn_up_exps", up, &d->up_exps, &g->bxb, ch->T, &g->bgather, &g->bhu, 0, false));
    barrier(ch);
    return swiglu(ch, g->m->cfg.n_ff_exp, ch->T * g->m->cfg.n_expert_used);
}

/* The MoE FFN; its combine also writes XB = rmsnorm(X, next_norm), the next stage's input. */
static int ffn_moe(const chunk *ch, const layer_weights *l, const gpu_layer *d, const cvk_buffer *next_norm) {
    gpu_model *g = ch->g;
    const model_config *cf = &g->m->cfg;
    uint32_t k = cf->n_expert_used, pairs = ch->T * k;
    CD_TRY(matmul(ch, "ffn_gate_inp", l->gate_inp, &d->gate_inp, &g->bxb, &g->brouter));
    barrier(ch);
    /* the lists' token tiles are the same for gate/up and down (moe_lists_of decides them per
     * layer: GPU 8 and 64, CPU 1 and 8, or 1 and 64 for float experts); row tiles per
     * projection: gate/up (p, over gate-up pairs twice the tiled kernel's) and down (q) */
    bool glu = gpu_layer_has_pairs(d);
    moe_lists ls = moe_lists_of(g, l);
    const cvk_pipeline *p0 = moe_pipe(g, ls, l->gate_exps->type, 0, glu),
                       *p1 = moe_pipe(g, ls, l->gate_exps->type, 1, glu);
    const cvk_pipeline *q0 = moe_pipe(g, ls, l->down_exps->type, 0, false);
    const cvk_pipeline *q1 = moe_pipe(g, ls, l->down_exps->type, 1, false);
    /* routing and grouping: softmax top-k per token (in the sorting workgroup for a decode step,
     * in a grid first for a prefill chunk), then the pairs sorted by expert */
    cvk_moe_group_args mg = {.logits = W(&g->brouter),
                             .weights = W(&g->bwts),
                             .ids = W(&g->bids),
                             .groups = W(&g->bgroups),
                             .gather = W(&g->bgather),
                             .scatter = W(&g->bscatter),
                             .n_tokens = ch->T,
                             .k = k,
                             .n_expert = cf->n_expert,
                             .items = W(&g->bitems),
                             .dispatch = W(&g->bdispatch),
                             .tile0 = cvk_matmul_token_tile(p0),
                             .tile1 = cvk_matmul_token_tile(p1),
                             .split = ls == MOE_CPU_EIGHT ? MOE_SPLIT_CPU : MOE_SPLIT,
                             .cap = g->moe_cap,
                             .row_tiles = {cvk_matmul_row_tiles(p0, cf->n_ff_exp), cvk_matmul_row_tiles(q0, cf->n_embd),
                                           cvk_matmul_row_tiles(p1, cf->n_ff_exp),
                                           cvk_matmul_row_tiles(q1, cf->n_embd)}};
    work_rows(ch, "moe_route_group", cf->n_expert, ch->T, 1, 0, 3 * k, false);
    CD_TRY(cvk_moe_group(ch->c, ch->dp, &g->moe_group, &mg));
    barrier(ch);
    cvk_barrier_compute_to_indirect(ch->c->cb);
    CD_TRY(moe_gate_up(ch, ls, l, d));
    barrier(ch);
    /* down: the hidden rows are t*k + slot, which is exactly the scatter list */
    CD_TRY(matmul_experts(ch, ls, "ffn_down_exps", l->down_exps, &d->down_exps, &g->bhg, pairs, &g->bscatter, &g->beo,
                          1, false));
    barrier(ch);
    work_rows(ch, "moe_combine_norm", cf->n_embd, ch->T, 2 + k, 2, 2 * k + 4, true);
    cvk_moe_combine_args mc = {.x = W(&g->bx),
                               .e = W(&g->beo),
                               .w = W(&g->bwts),
                               .n = cf->n_embd,
                               .k = k,
                               .rows = ch->T,
                               .norm_w = W(next_norm),
                               .y = W(&g->bxb),
                               .eps = cf->rms_eps};
    return cvk_moe_combine(ch->c, ch->dp, &g->moe_combine, &mc);
}

/* The lm_head as a matvec (the lm_head configuration, up to 8 vectors per workgroup), one vector
 * per wanted row: the rows are copied together first. Each vector's sums are its own, computed
 * the same way whatever n_out. The pipeline is the narrowest of widths 1, 2, 4, 8 that holds
 * n_out (a CPU device pays for a workgroup's unused vectors as for used ones). */
static int head_matvec(const chunk *ch, const uint32_t *out, uint32_t n_out) {
    gpu_model *g = ch->g;
    const gguf_tensor *t = g->m->output;
    uint64_t row = (uint64_t)g->m->cfg.n_embd * 4;
    cvk_barrier_compute_to_transfer(ch->c->cb);
    for (uint32_t j = 0; j < n_out; j++)
        CD_TRY(cvk_cmd_copy(ch->c, (cvk_view){&g->bxb, out[j] * row, row}, (cvk_view){&g->bhead_x, j * row, row}));
    cvk_barrier_transfer_to_compute(ch->c->cb);
    work_matmul(ch, "output", t, n_out, 1, n_out, false);
    cvk_matvec_args mv = {.w = g->w.head,
                          .type = t->type,
                          .n_in = (uint32_t)t->ne[0],
                          .n_rows = (uint32_t)t->ne[1],
                          .x = W(&g->bhead_x),
                          .y = W(&g->blogits),
                          .n_vec = n_out};
    const cvk_pipeline *p = n_out == 1 ? &g->head : &g->head_many[head_width(n_out)];
    return cvk_matvec(ch->c, ch->dp, p, &mv);
}

/* The batch forward's head over the n_out wanted tokens (rows out[] of X): final norm of every
 * row, the lm_head (per device one kernel, whatever n_out, so a row's logits do not depend on
 * the others), argmax per row, then (sampled) the rows in_sample says to draw overwrite theirs.
 * normed: XB already holds the final norm of every row (the last layer's MoE combine). */
static int record_rows_head(const chunk *ch, const uint32_t *out, uint32_t n_out, bool sampled, bool normed) {
    gpu_model *g = ch->g;
    const model_config *cf = &g->m->cfg;
    const gguf_tensor *t = g->m->output;
    cvk_cmd_label_begin(ch->c, "head");
    int rc = 0;
    if (!normed) { /* else the last MoE combine wrote XB = rmsnorm(X, output_norm) */
        rc = rmsnorm(ch, "output_norm", &g->bx, &g->w.output_norm, &g->bxb, cf->n_embd, ch->T);
        barrier(ch);
    }
    cvk_matmul_args a = {.w = g->w.head,
                         .type = t->type,
                         .n_in = (uint32_t)t->ne[0],
                         .n_rows = (uint32_t)t->ne[1],
                         .x = W(&g->bxb),
                         .x_rows = ch->T,
                         .y = W(&g->blogits),
                         .y_rows = n_out,
                         .n_tokens = n_out,
                         .gather = W(&g->in_out.dev)};
    if (!rc && !g->head_matvec) work_matmul(ch, "output", t, n_out, 1, n_out, false);
    /* the matmul head: for a decode step's rows the few-token kernels (the same bits as any other) */
    const cvk_pipeline *hp = head_pipe(g, n_out);
    if (!rc) rc = g->head_matvec ? head_matvec(ch, out, n_out) : cvk_matmul(ch->c, ch->dp, hp, &a);
    barrier(ch);
    cvk_argmax_args am = {.logits = W(&g->blogits),
                          .scratch = W(&g->bam_scratch),
                          .out = W(&g->bout_id),
                          .n = cf->n_vocab,
                          .rows = n_out};
    work_rows(ch, "argmax", cf->n_vocab, n_out, 1, 0, 1, false);
    if (!rc) rc = cvk_argmax(ch->c, ch->dp, &g->argmax, &am);
    if (!rc && sampled) {
        barrier(ch); /* both write bout_id */
        cvk_sample_args sa = {.logits = W(&g->blogits),
                              .scratch = W(&g->bsample_scratch),
                              .params = W(&g->in_sample.dev),
                              .out = W(&g->bout_id),
                              .n = cf->n_vocab,
                              .rows = n_out,
                              .k_max = CVK_SAMPLE_MAX_K};
        work_rows(ch, "sample", cf->n_vocab, n_out, 1, 0, 1, false);
        rc = cvk_sample(ch->c, ch->dp, &g->sample, &sa);
    }
    cvk_cmd_label_end(ch->c);
    return rc;
}

/* The pass's inputs into device-local memory: the bytes this shape reads (gpu_input). The
 * previous pass's reads of them finished before this submission (its fence), but the copy
 * still waits on compute: the ordering the device sees, not only the host. */
static int record_inputs(const chunk *ch, uint32_t n_out, bool sampled) {
    gpu_model *g = ch->g;
    struct {
        gpu_input *in;
        uint64_t bytes;
    } use[] = {{&g->in_tok, 4ull * ch->T},
               {&g->in_loc, 8ull * ch->T},
               {&g->in_table, g->in_table.dev.size},
               {&g->in_out, 4ull * n_out},
               {&g->in_sample, sampled ? n_out * sizeof(cvk_sample_row) : 0}};
    cvk_barrier_compute_to_transfer(ch->c->cb);
    for (size_t i = 0; i < sizeof use / sizeof use[0]; i++)
        if (use[i].bytes)
            CD_TRY(cvk_cmd_copy(ch->c, cvk_view_range(&use[i].in->host, 0, use[i].bytes),
                                cvk_view_range(&use[i].in->dev, 0, use[i].bytes)));
    cvk_barrier_transfer_to_compute(ch->c->cb);
    return 0;
}

/* The pass, and the head over the n_out rows of in_out (out[]) when n_out > 0. */
static int record_chunk(const chunk *ch, const uint32_t *out, uint32_t n_out, bool sampled) {
    gpu_model *g = ch->g;
    const model_config *cf = &g->m->cfg;
    CD_TRY(ch->reusable ? cvk_cmd_begin_reusable(ch->c) : cvk_cmd_begin(ch->c));
    CD_TRY(record_inputs(ch, n_out, sampled));
    cvk_get_rows_args e = {.table = &g->w.tok_embd,
                           .type = g->m->tok_embd->type,
                           .n = cf->n_embd,
                           .n_rows = cf->n_vocab,
                           .ids = W(&g->in_tok.dev),
                           .n_ids = ch->T,
                           .dst = W(&g->bx)};
    if (profiling(ch))
        work(ch,
             (cvk_work){.role = "token_embd",
                        .bytes = ch->T * (qtype_row_bytes(e.type, cf->n_embd) + 4ull * cf->n_embd),
                        .m = cf->n_embd,
                        .n = ch->T});
    CD_TRY(cvk_get_rows(ch->c, ch->dp, &g->get_rows, &e));
    barrier(ch);
    bool normed = false; /* XB = rmsnorm(X) for the next norm already (a MoE combine wrote it) */
    for (uint32_t il = 0; il < cf->n_layer; il++) {
        const gpu_layer *d = &g->w.layers[il];
        cvk_cmd_label_begin(ch->c, "layer.attention");
        cvk_timer_layer(ch->c->timer, (int32_t)il);
        if (!normed) {
            CD_TRY(rmsnorm(ch, "attn_norm", &g->bx, &d->attn_norm, &g->bxb, cf->n_embd, ch->T));
            barrier(ch);
        }
        CD_TRY(attention(ch, il));
        barrier(ch);
        cvk_cmd_label_end(ch->c);
        cvk_cmd_label_begin(ch->c, "layer.ffn");
        CD_TRY(rmsnorm(ch, "ffn_norm", &g->bx, &d->ffn_norm, &g->bxb, cf->n_embd, ch->T));
        barrier(ch);
        normed = cf->arch == ARCH_QWEN3MOE;
        const cvk_buffer *next_norm = il + 1 < cf->n_layer ? &g->w.layers[il + 1].attn_norm : &g->w.output_norm;
        if (normed) CD_TRY(ffn_moe(ch, &g->m->layers[il], d, next_norm));
        else CD_TRY(ffn_dense(ch, &g->m->layers[il], d));
        barrier(ch);
        cvk_cmd_label_end(ch->c);
    }
    cvk_timer_layer(ch->c->timer, -1);
    if (n_out) CD_TRY(record_rows_head(ch, out, n_out, sampled, normed));
    cvk_barrier_device_to_host(ch->c->cb);
    return cvk_cmd_end(ch->c);
}

/* ---- the batch forward ---- */

int gpu_model_set_table(gpu_model *g, uint32_t row, const uint32_t *pages, uint32_t n) {
    if (row >= g->max_seqs) return cd_fail("block-table row %u: the model holds %u", row, g->max_seqs);
    if (n > g->max_pages) return cd_fail("a block table of %u pages: the context holds %u", n, g->max_pages);
    uint32_t *t = (uint32_t *)cvk_buffer_host_ptr(&g->in_table.host, 0) + (size_t)row * g->max_pages;
    if (n) memcpy(t, pages, n * sizeof *t);
    return 0;
}

static int check_batch(const gpu_model *g, const gpu_batch *b) {
    const model_config *c = &g->m->cfg;
    if (!b->n || b->n > g->n_batch) return cd_fail("a batch of %u tokens (1..%u)", b->n, g->n_batch);
    if (b->n_out > g->max_out) return cd_fail("%u logits rows wanted, the model holds %u", b->n_out, g->max_out);
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->ids[i] < 0 || (uint32_t)b->ids[i] >= c->n_vocab)
            return cd_fail("token id %d out of range (vocab %u)", b->ids[i], c->n_vocab);
        if (b->row[i] >= g->max_seqs) return cd_fail("block-table row %u: the model holds %u", b->row[i], g->max_seqs);
        if (b->pos[i] >= g->n_ctx) return cd_fail("position %u is past the context size %u", b->pos[i], g->n_ctx);
    }
    for (uint32_t j = 0; j < b->n_out; j++)
        if (b->out[j] >= b->n) return cd_fail("logits wanted for token %u of a batch of %u", b->out[j], b->n);
    return 0;
}

/* ---- recordings kept for reuse ----
 *
 * A pass's command buffer depends only on its shape: the tokens, the wanted rows (the CPU
 * head copies each one) and the attention splits, the positions that cover the longest row
 * rounded up to whole splits; ids, positions, rows and tables are host-written and copied to
 * device-local memory by the pass itself (record_inputs). So a pass of a shape seen lately is
 * submitted again as recorded (decode steps in steady state are all one shape), and host
 * recording drops out of the step.
 * With a timer attached every pass is recorded afresh (spans describe the latest). */

static uint32_t split_limit(const gpu_model *g, uint32_t max_len) {
    uint64_t sl = g->split_len, lim = (max_len + sl - 1) / sl * sl, cap = (uint64_t)g->max_pages * g->lay.page_tokens;
    return (uint32_t)(lim < cap ? lim : cap);
}

static gpu_recording *find_recording(gpu_model *g, const gpu_batch *b, uint32_t limit, bool distinct_rows) {
    for (uint32_t i = 0; i < GPU_RECORDINGS; i++) {
        gpu_recording *r = &g->rec[i];
        if (r->valid && r->n == b->n && r->n_out == b->n_out && r->limit == limit &&
            r->sampled == (b->sample != NULL) && r->distinct_rows == distinct_rows &&
            (!g->head_matvec || !b->n_out || !memcmp(r->out, b->out, b->n_out * sizeof *b->out)))
            return r;
    }
    return NULL;
}

/* The least recently used recording, emptied and recorded for b's shape. */
static gpu_recording *new_recording(gpu_model *g, chunk *ch, const gpu_batch *b, uint32_t limit) {
    gpu_recording *r = &g->rec[0];
    for (uint32_t i = 1; i < GPU_RECORDINGS; i++)
        if (g->rec[i].last_use < r->last_use) r = &g->rec[i];
    r->valid = false;
    ch->c = &r->cmd;
    ch->dp = &r->dp;
    ch->reusable = true;
    if (cvk_descpool_reset(&r->dp) || record_chunk(ch, b->out, b->n_out, b->sample != NULL)) return NULL;
    r->n = b->n;
    r->sampled = b->sample != NULL;
    r->n_out = b->n_out;
    r->limit = limit;
    r->distinct_rows = ch->distinct_rows;
    if (b->n_out) memcpy(r->out, b->out, b->n_out * sizeof *b->out); /* out may be NULL without rows */
    r->valid = true;
    return r;
}

/* The pass's command buffer: a recording of its shape, or recorded now. */
static cvk_cmd *pass_cmd(gpu_model *g, chunk *ch, const gpu_batch *b) {
    const cvk_timer *t = g->pcmd.timer;
    if (t && t->enabled) { /* profiled: every pass recorded with its spans */
        if (cvk_descpool_reset(&g->pdpool) || record_chunk(ch, b->out, b->n_out, b->sample != NULL)) return NULL;
        return &g->pcmd;
    }
    gpu_recording *r = find_recording(g, b, ch->max_len, ch->distinct_rows);
    if (r) g->rec_hits++;
    else if (!(r = new_recording(g, ch, b, ch->max_len))) return NULL;
    r->last_use = ++g->rec_clock;
    return &r->cmd;
}

int gpu_forward_batch(gpu_model *g, const gpu_batch *b, int32_t *next) {
    CD_TRY(check_batch(g, b));
    int32_t *tok = cvk_buffer_host_ptr(&g->in_tok.host, 0), *out = cvk_buffer_host_ptr(&g->in_out.host, 0);
    uint32_t *loc = cvk_buffer_host_ptr(&g->in_loc.host, 0), max_len = 0;
    uint64_t attended = 0, kv_positions = 0;
    bool distinct_rows = true;
    for (uint32_t i = 0; i < b->n; i++) {
        if (i && b->row[i] == b->row[i - 1]) distinct_rows = false; /* a row's tokens are consecutive */
        tok[i] = b->ids[i];
        loc[2 * i] = b->row[i];
        loc[2 * i + 1] = b->pos[i];
        if (b->pos[i] + 1 > max_len) max_len = b->pos[i] + 1;
        attended += b->pos[i] + 1;
        /* a row's tokens are consecutive: its last one attends to every position the row reads */
        if (i + 1 == b->n || b->row[i + 1] != b->row[i]) kv_positions += b->pos[i] + 1;
    }
    for (uint32_t j = 0; j < b->n_out; j++) out[j] = (int32_t)b->out[j];
    if (b->sample) memcpy(cvk_buffer_host_ptr(&g->in_sample.host, 0), b->sample, b->n_out * sizeof *b->sample);
    chunk ch = {.g = g,
                .c = &g->pcmd,
                .dp = &g->pdpool,
                .T = b->n,
                .max_len = split_limit(g, max_len),
                .attended = attended,
                .kv_positions = kv_positions,
                .distinct_rows = distinct_rows};
    gpu_host_times *h = &g->host;
    double t0 = cd_now_ms();
    cvk_cmd *c = pass_cmd(g, &ch, b);
    if (!c) return -1;
    double t1 = cd_now_ms();
    CD_TRY(cvk_cmd_submit(c));
    double t2 = cd_now_ms();
    CD_TRY(cvk_cmd_wait(c));
    double t3 = cd_now_ms();
    const int32_t *ids = cvk_buffer_host_ptr(&g->bout_id, 0);
    for (uint32_t j = 0; j < b->n_out; j++) next[j] = ids[j];
    *h = (gpu_host_times){.tokens = b->n,
                          .n_out = b->n_out,
                          .record_ms = t1 - t0,
                          .submit_ms = t2 - t1,
                          .wait_ms = t3 - t2,
                          .read_ms = cd_now_ms() - t3,
                          .submit_at_ms = t1};
    return 0;
}

int gpu_model_batch_logits_rows(gpu_model *g, uint32_t j, uint32_t n, float *out) {
    uint64_t row = (uint64_t)g->m->cfg.n_vocab * 4;
    if (j >= g->max_out || n > g->max_out - j)
        return cd_fail("logits rows %u..%u: the model holds %u", j, j + n, g->max_out);
    return cvk_stager_download(&g->vk->stager, cvk_view_range(&g->blogits, j * row, n * row), out);
}

/* "xq8" only where some product runs integer (runs_xq8): an f32 file's do not, int_dot on or not */
const char *gpu_model_family(const gpu_model *g) {
    for (uint32_t il = 0; il < g->m->cfg.n_layer; il++) {
        const layer_weights *l = &g->m->layers[il];
        if (runs_xq8(g, l->wq) || runs_xq8(g, l->wk) || runs_xq8(g, l->wv) || runs_xq8(g, l->wo)) return "xq8";
    }
    return "float";
}

int gpu_model_batch_logits(gpu_model *g, uint32_t j, float *out) { return gpu_model_batch_logits_rows(g, j, 1, out); }
