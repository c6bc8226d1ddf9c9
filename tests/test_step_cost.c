/* The byte and FLOP accounting of cinder profile (runtime/model/step_cost.h) against counts
 * worked out by hand at Qwen3-30B-A3B's shapes: hidden 2048, expert FFN 768, 128 experts / 8
 * used, 32 query heads / 4 kv heads of 128, and the block sizes of docs/QUANTS.md (Q4_K: 144
 * bytes per 256 weights, Q6_K: 210, Q8_0: 34 per 32). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>

#include "runtime/model/step_cost.h"

static const model_config qwen3 = {.arch = ARCH_QWEN3MOE,
                                   .n_layer = 48,
                                   .n_embd = 2048,
                                   .n_head = 32,
                                   .n_head_kv = 4,
                                   .head_dim = 128,
                                   .n_vocab = 151936,
                                   .n_expert = 128,
                                   .n_expert_used = 8,
                                   .n_ff_exp = 768};

/* One decode token through ffn_gate_exps (Q4_K, 2048 -> 768 per expert): its 8 experts. */
static void test_q4k_expert_matvec(void **state) {
    (void)state;
    assert_true(step_cost_experts_read(128, 8, 1) == 8.0);
    cvk_work w = step_cost_matmul("ffn_gate_exps", QTYPE_Q4_K, 2048, 768, 8, step_cost_experts_read(128, 8, 1), 1);
    /* weights: 8 experts x 768 rows x (2048 / 256 blocks x 144 bytes = 1152) = 7,077,888
     * x: one shared row of 2048 floats = 8,192;  y: 8 rows of 768 floats = 24,576 */
    assert_int_equal(w.bytes, 7077888 + 8192 + 24576);
    assert_int_equal(w.flops, 2ull * 2048 * 768 * 8); /* 25,165,824 */
    assert_int_equal(w.m, 768);
    assert_int_equal(w.n, 8);
    assert_int_equal(w.k, 2048);
    assert_string_equal(w.role, "ffn_gate_exps");
}

/* Expected distinct experts: 2 tokens choose 8 + 8 * 120/128 = 15.5 (the second token's
 * expert is new with probability 120/128 each); many tokens approach all 128, never more. */
static void test_experts_read(void **state) {
    (void)state;
    assert_true(fabs(step_cost_experts_read(128, 8, 2) - 15.5) < 1e-12);
    double prev = 0;
    for (uint32_t T = 1; T <= 4096; T *= 2) {
        double e = step_cost_experts_read(128, 8, T);
        assert_true(e >= prev && e <= 128.0); /* saturates at 128 in doubles */
        prev = e;
    }
    assert_true(prev > 127.99);
    assert_true(step_cost_experts_read(8, 8, 5) == 8.0); /* every expert used */
    assert_true(step_cost_experts_read(128, 8, 0) == 0.0);
}

/* The lm_head (Q6_K, 2048 -> 151,936) for one token, and a dense Q8_0 projection over a
 * 64-token prefill chunk (weights read once for the chunk). */
static void test_dense(void **state) {
    (void)state;
    cvk_work h = step_cost_matmul("output", QTYPE_Q6_K, 2048, 151936, 1, 1, 1);
    /* 151,936 rows x (8 blocks x 210 bytes = 1680) = 255,252,480; x 8,192; y 607,744 */
    assert_int_equal(h.bytes, 255252480ull + 8192 + 607744);
    assert_int_equal(h.flops, 2ull * 2048 * 151936);
    cvk_work q = step_cost_matmul("attn_q", QTYPE_Q8_0, 2048, 4096, 64, 1, 64);
    /* 4096 rows x (64 blocks x 34 = 2176) = 8,912,896; x 64 x 2048 x 4 = 524,288; y 64 x 4096 x 4 */
    assert_int_equal(q.bytes, 8912896ull + 524288 + 1048576);
    assert_int_equal(q.flops, 2ull * 2048 * 4096 * 64);
}

/* A decode token attending to 1000 positions; then a 3-token chunk at positions 10, 11, 12. */
static void test_attention(void **state) {
    (void)state;
    cvk_work a = step_cost_attention("attention", &qwen3, 1, 1000, 1000);
    /* q in and out: 2 x 32 x 128 x 4 = 32,768; K and V: 2 x 1000 x 4 x 128 x 2 bytes = 2,048,000 */
    assert_int_equal(a.bytes, 32768 + 2048000);
    assert_int_equal(a.flops, 4ull * 128 * 32 * 1000); /* QK^T and PV: 16,384,000 */
    cvk_work c = step_cost_attention("attention", &qwen3, 3, 11 + 12 + 13, 13);
    assert_int_equal(c.bytes, 3 * 32768 + 2ull * 13 * 4 * 128 * 2);
    assert_int_equal(c.flops, 4ull * 128 * 32 * 36);
}

/* Writing one token's K and V: 2 x 4 x 128 floats read, as many halves written. */
static void test_small_ops(void **state) {
    (void)state;
    assert_int_equal(step_cost_kv_write(&qwen3, 1).bytes, 1024 * 4 + 1024 * 2);
    /* rmsnorm over 2 rows of 2048: read + write 2 x 2048 floats, the weight once; 4 FLOPs each */
    cvk_work n = step_cost_rows("attn_norm", 2048, 2, 1, 1, 4, true);
    assert_int_equal(n.bytes, 4 * (2 * 2048 * 2 + 2048));
    assert_int_equal(n.flops, 4 * 2 * 2048);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4k_expert_matvec), cmocka_unit_test(test_experts_read), cmocka_unit_test(test_dense),
        cmocka_unit_test(test_attention),         cmocka_unit_test(test_small_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
