#include "runtime/model/step_cost.h"

#include <math.h>

double step_cost_experts_read(uint32_t E, uint32_t k, uint32_t T) {
    if (!E || !k || !T) return 0;
    if (T == 1 || k >= E) return k < E ? k : E;
    return E * (1.0 - pow(1.0 - (double)k / E, T));
}

cvk_work step_cost_matmul(const char *role, enum qtype type, uint32_t n_in, uint32_t n_rows, uint32_t T, double slices,
                          uint32_t x_rows) {
    double w = (double)qtype_row_bytes(type, n_in) * n_rows * slices;
    uint64_t io = 4ull * ((uint64_t)x_rows * n_in + (uint64_t)T * n_rows);
    return (cvk_work){.role = role,
                      .bytes = (uint64_t)llround(w) + io,
                      .flops = 2ull * n_in * n_rows * T,
                      .m = n_rows,
                      .n = T,
                      .k = n_in};
}

cvk_work step_cost_matmul_glu(const char *role, enum qtype type, uint32_t n_in, uint32_t n_rows, uint32_t T,
                              double slices, uint32_t x_rows) {
    cvk_work w = step_cost_matmul(role, type, n_in, 2 * n_rows, T, slices, x_rows);
    w.bytes -= 4ull * T * n_rows; /* one output per pair */
    w.m = n_rows;
    return w;
}

cvk_work step_cost_attention(const char *role, const model_config *c, uint32_t n_tokens, uint64_t attended,
                             uint64_t kv_positions) {
    uint64_t q = 4ull * n_tokens * c->n_head * c->head_dim;             /* q in, out written: f32 */
    uint64_t kv = 2ull * 2 * kv_positions * c->n_head_kv * c->head_dim; /* K and V, fp16 */
    return (cvk_work){.role = role,
                      .bytes = 2 * q + kv,
                      .flops = 4ull * c->head_dim * c->n_head * attended,
                      .m = c->n_head,
                      .n = n_tokens,
                      .k = c->head_dim};
}

cvk_work step_cost_kv_write(const model_config *c, uint32_t n_tokens) {
    uint64_t elems = 2ull * n_tokens * c->n_head_kv * c->head_dim; /* K and V */
    return (cvk_work){.role = "k_norm_rope_kv",
                      .bytes = elems * (4 + 2),
                      .flops = elems / 2 * 10,
                      .m = c->n_head_kv,
                      .n = n_tokens,
                      .k = c->head_dim};
}

cvk_work step_cost_rows(const char *role, uint32_t n, uint32_t rows, uint32_t reads, uint32_t writes,
                        uint32_t flops_per, bool weight) {
    uint64_t elems = (uint64_t)n * rows;
    return (cvk_work){.role = role,
                      .bytes = 4 * (elems * (reads + writes) + (weight ? n : 0)),
                      .flops = elems * flops_per,
                      .m = n,
                      .n = rows,
                      .k = 0};
}
