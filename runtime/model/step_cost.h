/* What each op of a forward pass moves and computes, from the shapes and weight types alone:
 * the accounting `cinder profile` sets beside each kernel's GPU time (GB/s, GFLOP/s, the
 * fraction of the device's peak, the decode roofline).
 *
 * Bytes are the least traffic the op needs: every weight it uses read once, activations read
 * once and written once (a kernel that re-reads more shows as a lower achieved GB/s, which is
 * the point). FLOPs count a multiply-add as two; dequantization, exp and rsqrt are not counted.
 *
 * MoE weights: only the experts the tokens select are read. One token selects exactly k; T
 * tokens select, in expectation under uniform routing, E * (1 - (1 - k/E)^T) distinct experts
 * (the host does not see the routing: it stays on the GPU). A trained router is not uniform,
 * so for T > 1 the figure is an estimate (an upper one when experts cluster).
 *
 * Attention reads the K and V of every attended position once per kv head (fp16, the pool's
 * type) and does 4 * head_dim FLOPs per (query head, attended position): QK^T and PV. */
#pragma once
#include <stdint.h>

#include "runtime/gguf/quant.h"
#include "runtime/model/model.h"
#include "runtime/vk/vk_timer.h"

/* Expected distinct experts read by T tokens choosing k of E each (exactly k for T = 1). */
double step_cost_experts_read(uint32_t E, uint32_t k, uint32_t T);

/* y[T][n_rows] = x[T][n_in] W^T, W of `type`, `slices` weight slices read (1 for dense; MoE:
 * the experts read, each n_rows x n_in); T rows of x read (x_rows: fewer when shared). */
cvk_work step_cost_matmul(const char *role, enum qtype type, uint32_t n_in, uint32_t n_rows, uint32_t T, double slices,
                          uint32_t x_rows);
/* The same over gate-up pairs: 2 * n_rows weight rows per slice and products, n_rows outputs. */
cvk_work step_cost_matmul_glu(const char *role, enum qtype type, uint32_t n_in, uint32_t n_rows, uint32_t T,
                              double slices, uint32_t x_rows);

/* Attention over the pool: n_tokens queries; `attended` = sum over queries of the positions
 * each attends to; `kv_positions` = distinct (sequence, position) pairs whose K and V are read. */
cvk_work step_cost_attention(const char *role, const model_config *c, uint32_t n_tokens, uint64_t attended,
                             uint64_t kv_positions);

/* K's norm and rotation with the write of n_tokens tokens' K and V (f32 in, fp16 into the pool;
 * role "k_norm_rope_kv", the head_norm_rope dispatch for K; ~10 flops per K element). */
cvk_work step_cost_kv_write(const model_config *c, uint32_t n_tokens);

/* Element-wise ops over rows x n floats: `reads` arrays read, `writes` written (plus a weight
 * vector of n for a norm), `flops_per` per element. */
cvk_work step_cost_rows(const char *role, uint32_t n, uint32_t rows, uint32_t reads, uint32_t writes,
                        uint32_t flops_per, bool weight);
