/* The model on the GPU: weights in device buffers, a KV pool for one sequence, and a decode
 * step recorded once as a command buffer and replayed per token. Follows cpu_ref.c step for
 * step, so the two compare layer by layer (tests/test_gpu_model.c):
 *
 *   x = get_rows(tok_embd, token)
 *   per layer:
 *     xb = rmsnorm(x, attn_norm)
 *     q, k, v = wq xb, wk xb, wv xb
 *     q, k = rmsnorm per head (q_norm, k_norm); rope(q, k, pos)
 *     kv_write(k, v -> page table[pos / page_tokens], slot pos % page_tokens)    fp16
 *     att = attn_decode(q, pages, len = pos + 1)
 *     x += wo att
 *     xb = rmsnorm(x, ffn_norm)
 *     MoE:   ids, w = moe_route(gate_inp xb); h[j] = silu(gate[ids[j]] xb) * (up[ids[j]] xb)
 *            x += sum_j w[j] * down[ids[j]] h[j]                         (moe_combine)
 *     dense: x += ffn_down (silu(ffn_gate xb) * (ffn_up xb))
 *   logits = output rmsnorm(x, output_norm); next = argmax(logits)
 *
 * One compute-to-compute barrier between dependent steps. The token id, the position, the KV
 * location, the length and the block table live in small host-visible buffers that the host
 * rewrites before each submission: nothing is re-recorded per token. Two recordings exist:
 * the body alone and the body plus the head (logits, then the next token chosen on the GPU:
 * argmax, or top-k/temperature/top-p sampling with the uniform draw written by the host).
 *
 * Prefill (gpu_prefill.c) runs the same equations over a batch of tokens at once: matmuls
 * instead of matvecs, tokens grouped by expert so each expert's weights are read once per
 * token tile, flash-style causal attention over the whole block table (cached prefix pages +
 * the new tokens). It is recorded per chunk of up to n_batch tokens (batch sizes vary, so
 * there is nothing to replay) and runs the head on the last token only.
 *
 *   gpu_model g;
 *   if (gpu_model_init(&g, vk, m, n_ctx)) fail(cd_errmsg());
 *   gpu_model_set_sampler(&g, &params);                 optional: greedy by default
 *   gpu_prefill(&g, ids, n, 0, true);                    prompt
 *   next = gpu_model_next(&g);
 *   gpu_forward(&g, next, n, true); next = gpu_model_next(&g); ...   decode
 *   gpu_model_logits(&g, logits);                        when the logits themselves are wanted
 *   gpu_model_free(&g);
 *
 * Errors are values (-1 with cd_errmsg()); nothing exits. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "kv/kv_pages.h"
#include "runtime/model/model.h"
#include "runtime/model/sampler.h"
#include "runtime/vk/op_attn_decode.h"
#include "runtime/vk/op_attn_prefill.h"
#include "runtime/vk/op_rope.h"
#include "runtime/vk/op_sample.h"
#include "runtime/vk/vk_ctx.h"

/* Device copies of one layer's tensors (unused ones stay zeroed). Norm vectors are f32. */
typedef struct gpu_layer {
    cvk_buffer attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;
    cvk_buffer gate_inp, gate_exps, up_exps, down_exps; /* MoE */
    cvk_buffer ffn_gate, ffn_up, ffn_down;              /* dense */
} gpu_layer;

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
} gpu_weights;

/* Where a batch forward's host time goes (cinder profile shows a host bottleneck with it):
 * recording the command buffer, submitting it, waiting for the GPU, reading the ids back. */
typedef struct gpu_host_times {
    uint32_t tokens, n_out;          /* the pass: tokens in it, logits rows wanted */
    double record_ms, submit_ms, wait_ms, read_ms;
    double submit_at_ms;             /* cd_now_ms() when the submit began */
} gpu_host_times;

typedef struct gpu_model {
    const model *m;
    cvk_ctx *vk;
    uint32_t n_ctx, pool_tokens, page_tokens;
    gpu_weights w;

    /* pipelines */
    cvk_pipeline matvec[QTYPE_COUNT]; /* per weight type in use */
    cvk_pipeline head;                /* lm_head: cvk_matvec_choose's configuration for its shape */
    cvk_pipeline get_rows, rmsnorm, rope, add, swiglu, moe_route, moe_combine, kv_write;
    cvk_pipeline matmul[QTYPE_COUNT]; /* per weight type in use (prefill) */
    cvk_pipeline moe_group;
    cvk_attn_decode_pipes attn;
    cvk_attn_prefill_pipes attn_prefill;
    cvk_argmax_pipes argmax;
    cvk_sample_pipes sample;
    cvk_rope_table rope_tab;

    /* the next-token choice recorded in the head: greedy, or sampled on the device */
    sampler_params sp;
    bool sample_on_device; /* false: greedy, or a sampler the kernel cannot do (host samples) */
    rng rng;               /* the per-step uniform draws, as sampler_sample makes them */

    /* KV: one sequence, block table rewritten on the host as pages are added. The pool may
     * hold more pages than one sequence uses: the rest belong to the prefix cache. */
    kv_layout lay;
    kv_pages pages;
    kv_seq seq;
    cvk_buffer pool;        /* pages.n_pages * page_bytes, fp16 */
    uint32_t max_pages;     /* block table entries: pages of n_ctx tokens */
    uint32_t n_split;
    cvk_cmd copy;           /* page copies (copy on write of a shared partial page) */

    /* activations (f32), shapes as in cpu_state */
    cvk_buffer x, xb, xb2;  /* (n_embd) */
    cvk_buffer q, att;      /* (n_head * head_dim) */
    cvk_buffer k, v;        /* (n_head_kv * head_dim) */
    cvk_buffer partials;    /* attention split-K scratch */
    cvk_buffer router;      /* (n_expert) */
    cvk_buffer ids, wts;    /* (n_expert_used) int32 / f32 */
    cvk_buffer hg, hu;      /* (n_expert_used or 1, n_ff) */
    cvk_buffer eo;          /* (n_expert_used, n_embd) expert outputs */
    cvk_buffer logits;      /* (n_vocab) */
    cvk_buffer am_scratch;  /* argmax scratch */
    cvk_buffer smp_scratch; /* top-k sampling scratch */

    /* host-written inputs (host-visible) and the greedy output (readback) */
    cvk_buffer in_tok;      /* int32 token */
    cvk_buffer in_pos;      /* uint32 position (rope) */
    cvk_buffer in_loc;      /* uint32 {0, position} (kv_write) */
    cvk_buffer in_len;      /* uint32 position + 1 (attention) */
    cvk_buffer in_table;    /* uint32 [max_pages] block table */
    cvk_buffer in_u;        /* f32 uniform draw for the sampler */
    cvk_buffer out_id;      /* uint32 next token */

    cvk_descpool dpool;     /* the recorded steps' descriptor sets */
    cvk_cmd step[2];        /* [0] body only, [1] body + head */

    /* batched prefill: activations for up to n_batch tokens (shapes as the decode ones with a
     * leading token dimension; MoE rows are token * n_expert_used + slot) */
    uint32_t n_batch;
    cvk_buffer bx, bxb, bxb2;        /* (n_batch, n_embd) */
    cvk_buffer bq, batt, bk, bv;     /* (n_batch, n_head | n_head_kv, head_dim) */
    cvk_buffer brouter;              /* (n_batch, n_expert) */
    cvk_buffer bids, bwts;           /* (n_batch, n_expert_used) */
    cvk_buffer bgroups;              /* (n_expert, 2) {offset, count} */
    cvk_buffer bgather, bscatter;    /* (n_batch * n_expert_used) */
    cvk_buffer bhg, bhu;             /* (n_batch * n_expert_used | n_batch, n_ff) */
    cvk_buffer beo;                  /* (n_batch * n_expert_used, n_embd) */
    cvk_buffer bpartials;            /* prefill attention scratch */
    cvk_buffer bin_tok, bin_pos, bin_loc; /* host-written: ids, positions, {row, position} */
    cvk_descpool pdpool;             /* reset per chunk */
    cvk_cmd pcmd;                    /* recorded per chunk */

    /* the batch forward (gpu_forward_batch): several sequences, one block-table row each */
    uint32_t max_seqs;               /* block-table rows = tokens whose logits one batch may want */
    uint32_t split_len;              /* attention split boundaries, fixed: batch invariance */
    cvk_pipeline matmul_few[QTYPE_COUNT]; /* few tokens (same sums, same order per output) */
    cvk_pipeline matmul_one[QTYPE_COUNT]; /* one token */
    cvk_buffer btable;               /* host-written uint32 [max_seqs][max_pages] */
    cvk_buffer bin_out;              /* host-written int32 [max_seqs]: batch rows whose logits are wanted */
    cvk_buffer bhead_x;              /* (max_seqs, n_embd): those rows, normed (the matvec head) */
    bool head_matvec;                /* the head is a matvec over the wanted rows (CPU devices: the lm_head
                                        configuration, up to 8 rows per weight read), else the matmul
                                        gathering them (weights read once per step) */
    cvk_pipeline head_batch;         /* that matvec */
    cvk_buffer blogits;              /* (max_seqs, n_vocab) */
    cvk_buffer bam_scratch;          /* argmax over max_seqs rows */
    cvk_buffer bout_id;              /* readback uint32 [max_seqs] */
    gpu_host_times host;             /* the last gpu_forward_batch's host side (profiles) */
} gpu_model;

typedef struct gpu_model_opts {
    uint32_t n_ctx;       /* tokens of one sequence at most */
    uint32_t pool_tokens; /* tokens of KV in the page pool; 0 = n_ctx (nothing to spare for a cache) */
    uint32_t page_tokens; /* tokens per KV page; 0 = KV_PAGE_TOKENS_DEFAULT */
    uint32_t n_batch;     /* prefill tokens per pass; 0 = 512 (at most n_ctx) */
    uint32_t max_seqs;    /* sequences one gpu_forward_batch may hold; 0 = 1 */
} gpu_model_opts;

/* One forward pass over tokens of several sequences (gpu_forward_batch): sequence s's pages are
 * block-table row s (gpu_model_set_table, written before the pass); token i of the batch is
 * ids[i] at position pos[i] of row row[i], and attends causally over that row's positions
 * 0..pos[i] (its own K/V is written first). Prefill chunks of new prompts and one decode token
 * of each running sequence may share a pass. Tokens of one row should be consecutive and in
 * position order (attention walks a row once per workgroup).
 *
 * Batch invariance: every token's arithmetic is the same whatever else is in the batch: the
 * matmuls sum each output over k in one fixed order (any tile shape), attention splits the K/V
 * walk at fixed positions (split_len), and norms, RoPE, routing and the MoE combine are per
 * token. So a sequence's tokens and logits are bit-identical alone or among others, and a
 * prompt token's K/V is the same whether it was computed in a prefill chunk or as a decode
 * token (the cache is invisible to the math). */
typedef struct gpu_batch {
    uint32_t n;           /* tokens, 1..n_batch */
    const int32_t *ids;   /* [n] */
    const uint32_t *row;  /* [n] block-table row (< max_seqs) */
    const uint32_t *pos;  /* [n] position in that row's sequence */
    uint32_t n_out;       /* tokens whose logits and next token are wanted, 0..max_seqs */
    const uint32_t *out;  /* [n_out] indices into the batch */
} gpu_batch;

/* Uploads the weights, creates pipelines, the KV pool for n_ctx tokens, the prefill batch
 * buffers and both decode steps. */
int gpu_model_init_opts(gpu_model *g, cvk_ctx *vk, const model *m, const gpu_model_opts *o);
int gpu_model_init(gpu_model *g, cvk_ctx *vk, const model *m, uint32_t n_ctx); /* defaults otherwise */
void gpu_model_free(gpu_model *g); /* zeroed or partly initialized is fine */

/* How the head picks the next token (re-records the head; greedy until called). Sampling runs
 * on the device when the kernel supports the parameters (temperature > 0, 1 <= top_k <= 256);
 * otherwise gpu_model_samples_on_device is false and the caller samples the downloaded
 * logits. The uniform draws come from an rng seeded with p->seed, one per head run, the
 * same stream sampler_sample draws from. */
int gpu_model_set_sampler(gpu_model *g, const sampler_params *p);
static inline bool gpu_model_samples_on_device(const gpu_model *g) {
    return g->sp.temperature <= 0 || g->sample_on_device;
}

/* Attaches a timer (NULL detaches) to the decode steps and prefill, re-recording the steps.
 * One timer serves every command buffer, so its spans describe the latest recording: read it
 * after a gpu_prefill (recorded per chunk), or call this again right before a gpu_forward to
 * read that step's spans. For profiling (cinder bench --profile), not for serving. */
int gpu_model_set_timer(gpu_model *g, cvk_timer *t);

/* Runs token at position pos (0 <= pos <= tokens so far; a smaller pos forgets the tail).
 * With want_logits the head runs too: gpu_model_logits and gpu_model_next read it. */
int gpu_forward(gpu_model *g, int32_t token, uint32_t pos, bool want_logits);
/* Runs ids[0..n) at positions pos0.. in batches of up to n_batch tokens (pos0 <= tokens so
 * far; a smaller pos0 forgets the tail). With want_logits the head runs on the last token. */
int gpu_prefill(gpu_model *g, const int32_t *ids, uint32_t n, uint32_t pos0, bool want_logits);
/* Writes block-table row `row`: n page ids (at most n_ctx tokens' worth). */
int gpu_model_set_table(gpu_model *g, uint32_t row, const uint32_t *pages, uint32_t n);
/* Runs the batch (pages for every position already in the rows' tables); next[j] = the greedy
 * token (argmax, ties to the lower id) after batch token out[j]. gpu_model_batch_logits reads
 * out[j]'s logits (for sampling on the host). Does not touch gpu_forward's sequence. */
int gpu_forward_batch(gpu_model *g, const gpu_batch *b, int32_t *next);
int gpu_model_batch_logits(gpu_model *g, uint32_t j, float *out); /* n_vocab floats */
int gpu_model_logits(gpu_model *g, float *out); /* n_vocab floats */
int32_t gpu_model_next(const gpu_model *g);    /* the token the last head run chose */
/* Copies page src's K/V (every layer, every slot) into page dst on the device; waits. */
int gpu_kv_copy_page(gpu_model *g, uint32_t src, uint32_t dst);

/* Shared by the decode step (gpu_forward.c) and prefill (gpu_prefill.c). */
#define GPU_LAYER_MATS 11
/* A layer's projection matrices (NULL where the architecture has none): one matvec / matmul
 * pipeline per weight type among them. */
static inline void gpu_layer_mats(const layer_weights *l, const gguf_tensor *out[GPU_LAYER_MATS]) {
    const gguf_tensor *ts[GPU_LAYER_MATS] = {l->wq,        l->wk,       l->wv,       l->wo,
                                             l->gate_inp,  l->gate_exps, l->up_exps, l->down_exps,
                                             l->ffn_gate,  l->ffn_up,   l->ffn_down};
    for (int i = 0; i < GPU_LAYER_MATS; i++) out[i] = ts[i];
}
int gpu_model_buffer(gpu_model *g, cvk_buffer *b, uint64_t bytes, enum cvk_mem_kind kind);
int gpu_record_head(gpu_model *g, cvk_cmd *c, cvk_descpool *dp); /* rmsnorm(x) -> logits -> out_id */
/* Sets the sequence to pos tokens then appends n, and writes the block table; copies a shared
 * partly filled last page before it is written. Pages short: an error (nothing is evicted here:
 * the engine reserves pages before a pass, gpu_forward_batch). */
int gpu_seq_extend(gpu_model *g, uint32_t pos, uint32_t n);
void gpu_model_draw(gpu_model *g); /* writes the sampler's uniform for the next head run */
int gpu_prefill_init(gpu_model *g); /* buffers and pipelines of gpu_prefill.c */
void gpu_prefill_free(gpu_model *g);

/* gpu_weights.c: every tensor of m to device buffers (granule = row bytes), norms as f32. */
int gpu_weights_upload(gpu_weights *w, cvk_ctx *vk, const model *m);
void gpu_weights_free(gpu_weights *w, cvk_ctx *vk, const model *m);
