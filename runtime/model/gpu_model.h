/* The model on the GPU: weights in device buffers, pipelines, activations for a batch of tokens,
 * and ONE forward pass (gpu_forward.c: gpu_forward_batch) over tokens of several sequences. It
 * owns no pages and no sequences: the KV pool (kv/kv_pool.h) is the engine's, given at init,
 * and each pass reads and writes it through the block tables the engine writes before it (the
 * pages were reserved there, so a pass never allocates or evicts). The equations follow
 * cpu_ref.c step for step (tests/test_gpu_model.c compares the two):
 *
 *   X = get_rows(tok_embd, ids)                                           (T tokens)
 *   per layer:
 *     XB = rmsnorm(X, attn_norm) (after a MoE layer, its combine wrote it); Q, K, V = XB Wq, Wk, Wv
 *     Q, K = rope(rmsnorm per head (q_norm, k_norm), positions); K, V -> block table[row]
 *       [pos / page_tokens], slot pos % page_tokens, fp16: one stage (head_norm_rope)
 *     ATT = attention(Q, each token over its row's positions 0..pos)
 *     X += ATT Wo
 *     XB = rmsnorm(X, ffn_norm)
 *     MoE:   ids, w = top-k softmax (XB Wr), the pairs grouped by expert: one kernel (moe_group)
 *            H = silu(XB Wg[e]) * (XB Wu[e]) (one matmul where gate and up share a type)
 *            X += sum_j w[j] Wd[ids[j]] H[j]; XB = rmsnorm(X, the next layer's attn_norm or
 *              output_norm): one kernel (moe_combine)
 *     dense: X += ffn_down (silu(ffn_gate XB) * (ffn_up XB))
 *   for the wanted rows: logits = output(rmsnorm(X, output_norm)); next = argmax(logits)
 *
 *   kv_pool pool;  kv_pool_init(&pool, vk, &layout, pool_tokens);       (kv/, the engine's)
 *   gpu_model g;   gpu_model_init(&g, vk, m, &(gpu_model_opts){.n_ctx = .., .kv = &pool.buf,
 *                                                               .lay = &pool.lay, .max_seqs = ..});
 *   gpu_model_set_table(&g, row, seq.pages, seq.n_pages);               per sequence in the pass
 *   gpu_forward_batch(&g, &batch, next);  gpu_model_batch_logits(&g, j, logits);
 *   gpu_model_free(&g);
 *
 * Errors are values (-1 with cd_errmsg()); nothing exits. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "runtime/model/model.h"
#include "runtime/vk/op_attn_prefill.h"
#include "runtime/vk/op_head_norm_rope.h"
#include "runtime/vk/op_matvec.h"
#include "runtime/vk/rope_table.h"
#include "runtime/vk/op_sample.h" /* cvk_argmax, cvk_sample */
#include "runtime/vk/vk_ctx.h"

/* Device copies of one layer's tensors (unused ones stay zeroed). Norm vectors are f32. The
 * FFN's gate and up projections of one type and shape (real Q4_K_M files) may be stored as
 * gate-up pairs in gate_up instead (per expert slice its gate rows, then its up rows:
 * op_matmul.h's glu), so one matmul computes silu(gate) * up (gpu_model_opts.gate_up_pairs). */
typedef struct gpu_layer {
    cvk_buffer attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;
    cvk_buffer gate_inp, gate_exps, up_exps, down_exps; /* MoE */
    cvk_buffer ffn_gate, ffn_up, ffn_down;              /* dense */
    cvk_buffer gate_up;                                 /* gate-up pairs (MoE or dense) */
} gpu_layer;

/* The layer's FFN gate and up tensors, and whether they can be stored as gate-up pairs. */
static inline bool gpu_layer_ffn_pairable(const layer_weights *l, const gguf_tensor **gate, const gguf_tensor **up) {
    *gate = l->gate_exps ? l->gate_exps : l->ffn_gate;
    *up = l->gate_exps ? l->up_exps : l->ffn_up;
    return *gate && *up && (*gate)->type == (*up)->type && (*gate)->ne[0] == (*up)->ne[0] &&
        (*gate)->ne[1] == (*up)->ne[1] && (*gate)->ne[2] == (*up)->ne[2] && (*gate)->ne[3] == 1 && (*up)->ne[3] == 1;
}

/* Whether the layer's gate and up went to the device as gate-up pairs (gpu_weights_upload). */
static inline bool gpu_layer_has_pairs(const gpu_layer *d) { return d->gate_up.n_parts != 0; }

/* A load's progress report (gpu_model_opts.progress): done of total weight bytes uploaded. */
typedef struct gpu_load_progress {
    void (*fn)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
} gpu_load_progress;

typedef struct gpu_weights {
    cvk_buffer tok_embd, output_norm, output; /* output empty when tied */
    const cvk_buffer *head;                   /* &output, or &tok_embd when tied */
    gpu_layer *layers;                        /* n_layer */
    uint8_t digest[16];                       /* weights digest made during the upload (fingerprint.h) */
    struct fp_weights *hashing;               /* non-NULL only while uploading */
    uint64_t bytes;                           /* uploaded */
    uint64_t total;                           /* bytes of tensors in the file (progress display) */
    bool show_progress;                       /* stderr is a terminal and the upload is big */
    unsigned shown_pct;
    double started_ms;        /* cd_now_ms() at the upload's start: its rate */
    enum cvk_mem_kind kind;   /* where the tensor being uploaded goes (host memory: experts) */
    gpu_load_progress report; /* the caller's (gpu_model_opts.progress) */
} gpu_weights;

/* Where a batch forward's host time goes (cinder profile shows a host bottleneck with it):
 * recording the command buffer, submitting it, waiting for the GPU, reading the ids back. */
typedef struct gpu_host_times {
    uint32_t tokens, n_out; /* the pass: tokens in it, logits rows wanted */
    double record_ms, submit_ms, wait_ms, read_ms;
    double submit_at_ms; /* cd_now_ms() when the submit began */
} gpu_host_times;

/* An input of each pass: the host writes `host` (upload memory), the pass's command buffer
 * first copies what it uses into `dev` (device-local), and the kernels read `dev`: on a
 * discrete GPU no dependent read crosses the bus, and the copy is recorded, so recordings
 * stay reusable (gpu_forward.c). */
typedef struct gpu_input {
    cvk_buffer host, dev;
} gpu_input;

/* A pass's command buffer kept for passes of the same shape (gpu_forward.c, "recordings"). */
#define GPU_RECORDINGS 4
typedef struct gpu_recording {
    bool valid;
    uint32_t n, n_out, limit; /* the shape: tokens, wanted rows, attention positions (whole splits) */
    bool sampled;             /* and whether rows are sampled after the argmax */
    bool distinct_rows;       /* and whether every token is of another row (attention's hint) */
    uint32_t *out;            /* [max_out] the wanted rows (the CPU head copies each) */
    uint64_t last_use;
    cvk_cmd cmd;     /* recorded reusable */
    cvk_descpool dp; /* its descriptor sets */
} gpu_recording;

/* A shape of the rows kernel (shaders/matmul_rows.comp) on a GPU: tokens per workgroup column,
 * weight rows per workgroup, invocations per row splitting k, rows per invocation (cvk_matmul_tile's
 * bn, bm, kl, tm). */
typedef struct gpu_rows_shape {
    uint32_t bn, bm, kl, tm;
} gpu_rows_shape;

/* A shape of the tiled kernel (shaders/matmul.comp, prefill and the busy experts): weight rows,
 * tokens and k per shared-memory tile, and the register block per invocation (cvk_matmul_tile's
 * bm, bn, bk, tm, tn). */
typedef struct gpu_tile_shape {
    uint32_t bm, bn, bk, tm, tn;
} gpu_tile_shape;

/* The memory plan's sizes: the weights on the device (less the experts kept in host memory),
 * those experts, the KV pool and the work buffers, against what the device has for cinder. */
typedef struct gpu_memory_plan {
    uint64_t weights;      /* bytes of weights on the device */
    uint64_t host_experts; /* bytes of expert tensors in host memory */
    uint64_t kv;           /* the KV pool's bytes */
    uint64_t work;         /* everything else allocated before the weights (work buffers, tables) */
    uint64_t device;       /* the device memory the plan is made against */
    uint32_t n_ctx;        /* the context it is made for */
    bool fits;
} gpu_memory_plan;

typedef struct gpu_model {
    const model *m;
    cvk_ctx *vk;
    uint32_t n_ctx; /* positions of one sequence at most */
    gpu_weights w;

    /* the KV pool the passes read and write (not owned: kv/kv_pool.h) */
    const cvk_buffer *kv;
    kv_layout lay;
    uint32_t max_pages; /* block-table entries per row: pages of n_ctx tokens */

    /* pipelines */
    cvk_pipeline get_rows, rmsnorm, swiglu, moe_combine;
    cvk_head_norm_rope_pipes head_norm_rope; /* QK-norm + RoPE (+ the KV write for K) */
    /* per [plain, gate-up pairs] and weight type in use */
    cvk_pipeline matmul[2][QTYPE_COUNT];
    cvk_pipeline matmul_few[2][QTYPE_COUNT];       /* few tokens (same sums, same order per output) */
    cvk_pipeline matmul_one[2][QTYPE_COUNT];       /* one token (a dense decode step) */
    cvk_pipeline matmul_head_one, matmul_head_few; /* a GPU's lm_head: 1 and 2-16 tokens (few_gpu) */
    bool few_gpu;                                  /* those chosen for a GPU (gpu_model_opts.few_kernels) */
    bool pairs;                                    /* gate and up as gate-up pairs where they pair (gate_up_pairs) */
    uint32_t host_expert_layers;                   /* the plan's: layers whose experts are in host memory */
    gpu_rows_shape few_shape, one_shape;           /* their shapes asked for (gpu_model_opts) */
    gpu_tile_shape big_tile;                       /* the tiled kernel's, asked for (bm 0: the default) */
    gpu_rows_shape head_shape;                     /* a GPU's 2-16-token lm_head's, asked for */
    cvk_pipeline moe_group;
    /* the integer family (gpu_model_opts.int_dot): x quantized to int8 blocks once per input,
     * then the attention projections of Q8_0, Q4_K and Q6_K weights by exact dot4 block sums
     * (op_xq8.h), for one token and for up to 8 per workgroup; the same bits either way */
    bool int_dot;
    cvk_pipeline xq8_quantize;
    cvk_pipeline xq8_one[QTYPE_COUNT], xq8_many[QTYPE_COUNT];
    cvk_attn_prefill_pipes attn_prefill;
    cvk_argmax_pipes argmax;
    cvk_sample_pipes sample;
    cvk_rope_table rope_tab;

    /* activations for up to n_batch tokens (MoE rows are token * n_expert_used + slot) */
    uint32_t n_batch;
    cvk_buffer bx, bxb;                /* (n_batch, n_embd) */
    cvk_buffer bq, batt, bk, bv;       /* (n_batch, n_head | n_head_kv, head_dim) */
    cvk_buffer brouter;                /* (n_batch, n_expert) */
    cvk_buffer bids, bwts;             /* (n_batch, n_expert_used) */
    cvk_buffer bgroups;                /* (n_expert, 2) {offset, count} */
    cvk_buffer bitems;                 /* moe_group's work lists: (2 * moe_cap, 2) {expert, first token} */
    cvk_buffer bdispatch;              /* their indirect grids: (4, 3) VkDispatchIndirectCommand */
    uint32_t moe_cap;                  /* items per list */
    cvk_buffer bgather, bscatter;      /* (n_batch * n_expert_used) */
    cvk_buffer bhg, bhu;               /* (n_batch * n_expert_used | n_batch, n_ff) */
    cvk_buffer beo;                    /* (n_batch * n_expert_used, n_embd) */
    cvk_buffer bpartials;              /* attention split scratch */
    cvk_buffer bxq, bxqd;              /* the integer family's quantized x: (n_batch, max(n_embd, q_dim))
                                        int8 and 8 bytes a 32-block (int_dot) */
    gpu_input in_tok, in_loc;          /* ids, {row, position} (RoPE and attention read it) */
    cvk_descpool pdpool;               /* a profiled pass's sets (reset per pass) */
    cvk_cmd pcmd;                      /* a profiled pass (recorded per pass, with the timer's spans) */
    gpu_recording rec[GPU_RECORDINGS]; /* unprofiled passes, by shape, least recently used replaced */
    uint64_t rec_clock, rec_hits;      /* passes submitted as already recorded */

    /* several sequences, one block-table row each */
    uint32_t max_seqs;             /* block-table rows */
    uint32_t max_out;              /* tokens whose logits one pass may want (>= max_seqs: a
                                        sequence may want several, speculative decoding) */
    uint32_t split_len, split_max; /* attention splits: a token's fixed by its own position (at least
                                        split_len positions, at most split_max splits): batch invariance */
    gpu_input in_table;            /* uint32 [max_seqs][max_pages] */
    gpu_input in_out;              /* int32 [max_out]: batch rows whose logits are wanted */
    cvk_buffer bhead_x;            /* (max_out, n_embd): those rows, normed (the matvec head) */
    bool head_matvec;              /* the head is a matvec over the wanted rows (CPU devices: the lm_head
                                        configuration, up to 8 rows per weight read), else the matmul
                                        gathering them (weights read once per step) */
    cvk_matvec_cfg head_cfg;       /* that matvec's configuration for one row (its layout: the
                                        head's weights went to the device in it) */
    cvk_pipeline head;             /* that matvec for one row (one vector per workgroup) */
    cvk_pipeline head_many[3];     /* and for up to 2, 4 and 8 rows per workgroup (more: 8 per
                                        workgroup); the same layout, the same sums per row */
    cvk_buffer blogits;            /* (max_out, n_vocab) */
    cvk_buffer bam_scratch;        /* argmax over max_out rows */
    gpu_input in_sample;           /* cvk_sample_row [max_out] (gpu_batch.sample) */
    cvk_buffer bsample_scratch;    /* top-k lists of max_out rows, k up to CVK_SAMPLE_MAX_K */
    cvk_buffer bout_id;            /* readback uint32 [max_out] */
    gpu_host_times host;           /* the last gpu_forward_batch's host side (profiles) */
} gpu_model;

typedef struct gpu_model_opts {
    uint32_t n_ctx;       /* tokens of one sequence at most */
    uint32_t n_batch;     /* tokens per pass at most; 0 = 512 (at most n_ctx) */
    uint32_t max_seqs;    /* sequences (block-table rows) one pass may hold; 0 = 1 */
    uint32_t max_out;     /* logits rows one pass may want; 0 (or fewer) = max_seqs */
    const cvk_buffer *kv; /* the KV pool's buffer (kv_pool.buf), kept by the caller while g lives */
    const kv_layout *lay; /* its layout (page size, heads) */
    /* FFN gate and up of one type as gate-up pairs (one matmul with the SwiGLU, one stage
     * fewer per layer): 0 auto = on a GPU, not on a CPU device (on llvmpipe a pair product over
     * several tokens reads twice the weights per pass over the tokens and falls out of cache:
     * 1.3-1.5x slower than two products, docs/PERF.md); 1 wherever gate and up share a type
     * (tests), -1 never. */
    int gate_up_pairs;
    /* The lm_head's kernel: 0 auto = the matvec over the wanted rows on a CPU device, the matmul
     * gathering them on a GPU (the few-token tile for up to 16 rows); 1 the matvec, -1 the
     * matmul (tests run a GPU's head on lavapipe this way). */
    int head_matvec;
    /* The few-token matmul kernels (gpu_forward.c): 0 auto = the device's kind, 1 a GPU's
     * (32-row workgroups, 8-token MoE items), -1 a CPU device's (tests run a GPU's on lavapipe). */
    int few_kernels;
    /* A GPU's few-token kernel shapes (few_kernels), to measure others on a device: the 2-16
     * token kernel's (also the MoE's list-0 items) and the one-token kernel's (bn 1). A zero
     * field keeps gpu_forward.c's default. Any shape gives the same bits (op_matmul.h). */
    gpu_rows_shape few_shape, one_shape;
    /* The same for a GPU's lm_head over 2-16 tokens (its own pipeline, the matmul head). */
    gpu_rows_shape head_shape;
    /* The tiled kernel's shape (matmul[]: more tokens than the few-token kernels take, on any
     * device), to measure others: bm 0 keeps the default (cvk_matmul_tile_default, 64 x 64 x 32 /
     * 4 x 4). Any tile gives the same bits. */
    gpu_tile_shape big_tile;
    /* The integer family (runtime/gguf/xq8.h, op_xq8.h): the attention projections (q, k, v,
     * o) of Q8_0, Q4_K and Q6_K weights as exact int8 dot products with x quantized per token
     * per 32-block, every token count alike (the CPU reference's cpu_state.int_dot computes the
     * same). Other bits than the float family's, so part of the cache namespace
     * (gpu_model_family). 0 auto = off (until a GPU's numbers choose it per device), 1 on (an
     * error on a device without shaderIntegerDotProduct), -1 off. */
    int int_dot;
    /* The device memory the plan is made against: 0 the device's (cvk_mem_heap_room); else
     * this many bytes, as if the card had no more (a smaller card simulated). */
    uint64_t device_memory;
    /* Called on the loading thread after each tensor reaches the device (and once before the
     * first, done 0): bytes uploaded so far of the file's tensor bytes; NULL = none. */
    gpu_load_progress progress;
    /* Experts in host memory (llama.cpp's --n-cpu-moe): the expert tensors of layers 0 .. N - 1
     * live in host-visible memory that the device's own kernels read (on a discrete GPU, across
     * PCIe; nothing is computed on the CPU), the same bytes, so the same tokens. With
     * host_experts_fixed, exactly that many layers (0 none, n_layer or more every one); without,
     * the plan's choice: none unless the weights do not fit the device, then the fewest layers
     * that make them fit. */
    uint32_t host_expert_layers;
    bool host_experts_fixed;
    /* When the plan refuses (the weights do not fit beside the KV pool, the work buffers and the
     * rest): set to the bytes of the pool that would leave room for them, 0 when none would;
     * untouched on any other failure. NULL = not asked. The engine's own pool size
     * (engine_opts.pool_tokens 0) asks. */
    uint64_t *kv_room;
    /* Set to the memory plan's sizes once it is made (before a weight is read), whether the
     * weights fit or not; NULL = not asked. */
    gpu_memory_plan *plan;
    /* The plan only: gpu_model_init stops before reading a weight (when the weights do not fit,
     * with the same refusal): what `cinder info` shows. Nothing runs on such a g; gpu_model_free
     * frees it. */
    bool plan_only;
    /* Every pipeline compiled before gpu_model_init returns, not on first use (vk_pipeline.h):
     * where a compile inside a pass would be measured or felt (bench, profile, serve). */
    bool build_pipelines;
} gpu_model_opts;

/* One forward pass over tokens of several sequences (gpu_forward_batch): sequence s's pages are
 * block-table row s (gpu_model_set_table, written before the pass); token i of the batch is
 * ids[i] at position pos[i] of row row[i], and attends causally over that row's positions
 * 0..pos[i] (its own K/V is written first). Prefill chunks of new prompts and one decode token
 * of each running sequence may share a pass. Tokens of one row should be consecutive and in
 * position order (attention walks a row once per workgroup).
 *
 * Batch invariance: every token's arithmetic is the same whatever else is in the batch: the
 * matmuls sum each output over k in one canonical order (32-k chunks, op_matmul.h; any tile
 * shape, k split over lanes or not), attention splits each
 * token's K/V walk at boundaries fixed by its own position (split_len, split_max), and norms,
 * RoPE, routing and the MoE combine are per token. So a sequence's tokens and logits are
 * bit-identical alone or among others, and a prompt token's K/V is the same whether it was
 * computed in a prefill chunk or as a decode token (the cache is invisible to the math). */
typedef struct gpu_batch {
    uint32_t n;          /* tokens, 1..n_batch */
    const int32_t *ids;  /* [n] */
    const uint32_t *row; /* [n] block-table row (< max_seqs) */
    const uint32_t *pos; /* [n] position in that row's sequence */
    uint32_t n_out;      /* tokens whose logits and next token are wanted, 0..max_out */
    const uint32_t *out; /* [n_out] indices into the batch */
    /* [n_out] or NULL: how out[j]'s next token is drawn when cvk_sample_row_on_device(...,
     * CVK_SAMPLE_MAX_K) (its own temperature, top-k, top-p and this step's u); any other row
     * takes the argmax. Per row, so a row's draw does not depend on the others. */
    const cvk_sample_row *sample;
} gpu_batch;

/* Uploads the weights, creates the pipelines and the activations of a pass. */
int gpu_model_init(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o);
/* Creates only the pipelines that gpu_model_init would for this model, device and options (no
 * weights, buffers or KV pool: o->kv may be NULL), for a compile-only device whose compiler's
 * statistics are read (cvk_ctx_opts.compile_only, cinder profile --shaders). Free with
 * gpu_model_free; such a g runs nothing. */
int gpu_model_compile(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o);
void gpu_model_free(gpu_model *g); /* zeroed or partly initialized is fine */

/* Attaches a timer (NULL detaches) to the passes: its spans describe the latest pass (while it
 * is attached every pass is recorded afresh, not reused). For profiling, not for serving. */
void gpu_model_set_timer(gpu_model *g, cvk_timer *t);

/* Writes block-table row `row`: n page ids (at most n_ctx tokens' worth). */
int gpu_model_set_table(gpu_model *g, uint32_t row, const uint32_t *pages, uint32_t n);
/* Runs the batch (pages for every position already in the rows' tables); next[j] = the token
 * after batch token out[j]: sampled on the device where sample[j] says so, else the greedy one
 * (argmax, ties to the lower id). Only these ids come back to the host; gpu_model_batch_logits
 * reads out[j]'s logits when a caller wants them (logprobs, sampling with top_k "all"). */
int gpu_forward_batch(gpu_model *g, const gpu_batch *b, int32_t *next);
int gpu_model_batch_logits(gpu_model *g, uint32_t j, float *out); /* n_vocab floats */
/* The arithmetic family of g's plan, a name for the cache namespace: "xq8" where int_dot is on and
 * some product runs integer (a weight of a type matvec_xq8 reads), else "float". */
const char *gpu_model_family(const gpu_model *g);
/* Rows [j, j + n) in one download: n * n_vocab floats. */
int gpu_model_batch_logits_rows(gpu_model *g, uint32_t j, uint32_t n, float *out);

/* Shared by set-up (gpu_model.c) and the pass (gpu_forward.c). */
#define GPU_LAYER_MATS 11
/* A layer's projection matrices (NULL where the architecture has none): one matvec / matmul
 * pipeline per weight type among them. */
static inline void gpu_layer_mats(const layer_weights *l, const gguf_tensor *out[GPU_LAYER_MATS]) {
    const gguf_tensor *ts[GPU_LAYER_MATS] = {l->wq,       l->wk,        l->wv,      l->wo,
                                             l->gate_inp, l->gate_exps, l->up_exps, l->down_exps,
                                             l->ffn_gate, l->ffn_up,    l->ffn_down};
    for (int i = 0; i < GPU_LAYER_MATS; i++) out[i] = ts[i];
}
int gpu_model_buffer(gpu_model *g, cvk_buffer *b, uint64_t bytes, enum cvk_mem_kind kind);
/* Whether layer il's gate and up are gate-up pairs: as uploaded, or (compiled only) as they would be. */
static inline bool gpu_model_layer_pairs(const gpu_model *g, uint32_t il) {
    const gguf_tensor *gate, *up;
    if (g->w.layers) return gpu_layer_has_pairs(&g->w.layers[il]);
    return g->pairs && gpu_layer_ffn_pairable(&g->m->layers[il], &gate, &up);
}
int gpu_forward_init(gpu_model *g);      /* buffers, pipelines and recordings of gpu_forward.c */
int gpu_forward_pipelines(gpu_model *g); /* the pipelines alone (gpu_model_compile) */
void gpu_forward_free(gpu_model *g);

/* gpu_weights.c: every tensor of m to device buffers (granule = row bytes; with `pairs`, gate
 * and up of one type as gate-up pairs, granule = a pair slice), norms as f32; an untied lm_head
 * in the layout of the matvec configuration `head` (NULL: the file's). */
int gpu_weights_upload(gpu_weights *w, cvk_ctx *vk, const model *m, bool pairs, const cvk_matvec_cfg *head,
                       gpu_load_progress report, uint32_t host_expert_layers);
void gpu_weights_free(gpu_weights *w, cvk_ctx *vk, const model *m);
