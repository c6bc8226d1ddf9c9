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
 * the body alone (prefill positions whose logits nobody reads) and the body plus the head
 * (logits and the greedy id). Prefill is, for now, the decode step once per prompt token.
 *
 *   gpu_model g;
 *   if (gpu_model_init(&g, vk, m, n_ctx)) fail(cd_errmsg());
 *   for (i = 0; i < n; i++) gpu_forward(&g, ids[i], i, i + 1 == n);
 *   gpu_model_logits(&g, logits);  or  gpu_model_argmax(&g)
 *   gpu_model_free(&g);
 *
 * Errors are values (-1 with cd_errmsg()); nothing exits. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_layout.h"
#include "kv/kv_pages.h"
#include "runtime/model/model.h"
#include "runtime/vk/op_attn_decode.h"
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
} gpu_weights;

typedef struct gpu_model {
    const model *m;
    cvk_ctx *vk;
    uint32_t n_ctx;
    gpu_weights w;

    /* pipelines */
    cvk_pipeline matvec[QTYPE_COUNT]; /* per weight type in use */
    cvk_pipeline get_rows, rmsnorm, rope, add, swiglu, moe_route, moe_combine, kv_write;
    cvk_attn_decode_pipes attn;
    cvk_argmax_pipes argmax;
    cvk_rope_table rope_tab;

    /* KV: one sequence, block table rewritten on the host as pages are added */
    kv_layout lay;
    kv_pages pages;
    kv_seq seq;
    cvk_buffer pool;        /* n_pages * page_bytes, fp16 */
    uint32_t max_pages, n_split;

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

    /* host-written inputs (host-visible) and the greedy output (readback) */
    cvk_buffer in_tok;      /* int32 token */
    cvk_buffer in_pos;      /* uint32 position (rope) */
    cvk_buffer in_loc;      /* uint32 {0, position} (kv_write) */
    cvk_buffer in_len;      /* uint32 position + 1 (attention) */
    cvk_buffer in_table;    /* uint32 [max_pages] block table */
    cvk_buffer out_id;      /* uint32 argmax */

    cvk_descpool dpool;     /* the recorded steps' descriptor sets */
    cvk_cmd step[2];        /* [0] body only, [1] body + head */
} gpu_model;

/* Uploads the weights, creates pipelines, the KV pool for n_ctx tokens and both steps. */
int gpu_model_init(gpu_model *g, cvk_ctx *vk, const model *m, uint32_t n_ctx);
void gpu_model_free(gpu_model *g); /* zeroed or partly initialized is fine */

/* Runs token at position pos (0 <= pos <= tokens so far; a smaller pos forgets the tail).
 * With want_logits the head runs too: gpu_model_logits and gpu_model_argmax read it. */
int gpu_forward(gpu_model *g, int32_t token, uint32_t pos, bool want_logits);
int gpu_model_logits(gpu_model *g, float *out); /* n_vocab floats */
int32_t gpu_model_argmax(const gpu_model *g);

/* gpu_weights.c: every tensor of m to device buffers (granule = row bytes), norms as f32. */
int gpu_weights_upload(gpu_weights *w, cvk_ctx *vk, const model *m);
void gpu_weights_free(gpu_weights *w, cvk_ctx *vk, const model *m);
