/* The CPU reference: its building blocks against direct formulas, and the forward pass's
 * properties (peaked, finite, deterministic, quantized close to float, errors handled). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/model/sampler.h"
#include "tests/test_util.h"

static void test_rope_neox(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 1);
    float h[128], orig[128];
    for (int i = 0; i < 128; i++) orig[i] = h[i] = rng_normal(&r);
    cpu_rope_neox(h, 128, 0, 1e6f); /* position 0 is the identity */
    assert_memory_equal(h, orig, sizeof h);
    cpu_rope_neox(h, 128, 777, 1e6f);
    /* NeoX pairs (i, i+64) rotate by 777 * theta^(-2i/128): check pair 5 directly */
    double ang = 777.0 * pow(1e6, -10.0 / 128);
    assert_float_equal(h[5], orig[5] * cos(ang) - orig[69] * sin(ang), 1e-4);
    assert_float_equal(h[69], orig[5] * sin(ang) + orig[69] * cos(ang), 1e-4);
    /* rotation keeps each pair's norm */
    for (int i = 0; i < 64; i++)
        assert_float_equal(hypot(h[i], h[i + 64]), hypot(orig[i], orig[i + 64]), 1e-4);
}

static void test_rmsnorm(void **state) {
    (void)state;
    float x[37], w[37], out[37];
    double ss = 0;
    for (int i = 0; i < 37; i++) { x[i] = (float)(i - 18) * 0.3f; w[i] = 1.0f + i * 0.01f; ss += x[i] * x[i]; }
    cpu_rmsnorm(out, x, w, 37, 1e-6f);
    double scale = 1.0 / sqrt(ss / 37 + 1e-6);
    for (int i = 0; i < 37; i++) assert_float_equal(out[i], x[i] * scale * w[i], 1e-5);
}

static void test_moe_route(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 2);
    for (int trial = 0; trial < 200; trial++) {
        float logits[128];
        for (int i = 0; i < 128; i++) logits[i] = rng_normal(&r) * 3;
        int32_t ids[8];
        float w[8];
        cpu_moe_route(logits, 128, 8, ids, w);
        double sum = 0;
        for (int j = 0; j < 8; j++) {
            sum += w[j];
            if (j) assert_true(logits[ids[j - 1]] >= logits[ids[j]]);
            /* no unchosen expert beats a chosen one */
            for (int e = 0; e < 128; e++) {
                bool chosen = false;
                for (int t = 0; t < 8; t++) chosen |= ids[t] == e;
                if (!chosen) assert_true(logits[e] <= logits[ids[7]]);
            }
        }
        assert_float_equal(sum, 1.0, 1e-5);
        /* renormalized softmax: weight ratios equal exp of logit differences */
        assert_float_equal(w[1] / w[0], exp(logits[ids[1]] - logits[ids[0]]), 1e-4);
    }
}

typedef struct fixture { char *path; model *m; } fixture;

static int setup_model(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->path = strdup(tu_make_model("cpu_ref_tiny.gguf", "tiny", NULL, 99, NULL));
    if (model_load(&f->m, f->path, (model_load_opts){0})) { fprintf(stderr, "%s\n", cd_errmsg()); return -1; }
    *state = f;
    return 0;
}

static int teardown_model(void **state) {
    fixture *f = *state;
    model_free(f->m);
    free(f->path);
    free(f);
    return 0;
}

static void run_prompt_kv(const model *m, const int32_t *ids, uint32_t n, float *logits, bool kv_fp16) {
    cpu_state s;
    assert_int_equal(cpu_state_init(&s, m, n + 4), 0);
    s.kv_fp16 = kv_fp16;
    for (uint32_t i = 0; i < n; i++) assert_int_equal(cpu_forward(&s, ids[i], i, i + 1 == n), 0);
    memcpy(logits, s.logits, m->cfg.n_vocab * sizeof(float));
    cpu_state_free(&s);
}

static void run_prompt(const model *m, const int32_t *ids, uint32_t n, float *logits) {
    run_prompt_kv(m, ids, n, logits, false);
}

/* kv_fp16 (K/V rounded to fp16 as the GPU pool stores them) moves the logits measurably but
 * little: about as much as the whole GPU forward pass differs from the f32 reference. */
static void test_kv_fp16(void **state) {
    fixture *f = *state;
    uint32_t V = f->m->cfg.n_vocab;
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    int32_t prompt[] = {9707, 11, 1879, 0, 151644, 872, 198, 42, 1000, 151645, 77, 5000};
    run_prompt_kv(f->m, prompt, 12, a, false);
    run_prompt_kv(f->m, prompt, 12, b, true);
    double err = tu_rel_l2(b, a, V);
    print_message("kv_fp16 vs f32 K/V, 12 tokens: rel L2 %.2e\n", err);
    assert_true(err > 0 && err < 1e-2);
    free(a);
    free(b);
}

/* Logits are finite, peaked (top-1 clearly ahead), and the same on a second run. */
static void test_forward_properties(void **state) {
    fixture *f = *state;
    uint32_t V = f->m->cfg.n_vocab;
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    int32_t prompt[] = {9707, 11, 1879, 0, 151644, 872, 198, 42, 1000, 151645};
    int peaked = 0;
    for (uint32_t n = 1; n <= 10; n += 3) {
        run_prompt(f->m, prompt, n, a);
        double max = -INFINITY, sum = 0;
        for (uint32_t i = 0; i < V; i++) { assert_true(isfinite(a[i])); max = a[i] > max ? a[i] : max; }
        for (uint32_t i = 0; i < V; i++) sum += exp(a[i] - max);
        peaked += 1.0 / sum > 0.2; /* top-1 probability */
        run_prompt(f->m, prompt, n, b);
        assert_memory_equal(a, b, V * sizeof *a);
    }
    assert_true(peaked >= 2);
    free(a);
    free(b);
}

/* Errors, not crashes: a position past the context, a token outside the vocabulary. */
static void test_forward_errors(void **state) {
    fixture *f = *state;
    cpu_state s;
    assert_int_equal(cpu_state_init(&s, f->m, 4), 0);
    assert_int_equal(cpu_forward(&s, 1, 4, 1), -1);
    assert_non_null(strstr(cd_errmsg(), "context"));
    assert_int_equal(cpu_forward(&s, (int32_t)f->m->cfg.n_vocab, 0, 1), -1);
    assert_non_null(strstr(cd_errmsg(), "out of range"));
    assert_int_equal(cpu_forward(&s, -3, 0, 1), -1);
    cpu_state_free(&s);
}

/* The same seed in f32 and in Q8_0: quantization moves logits a little, not the argmax
 * on most prompts. This exercises every dequantizer through the whole model. */
static void test_quantized_close_to_f32(void **state) {
    (void)state;
    char *pf = strdup(tu_make_model("close_f32.gguf", "tiny", "f32", 5, NULL));
    char *pq = strdup(tu_make_model("close_q8.gguf", "tiny", "q8_0", 5, NULL));
    model *mf, *mq;
    assert_int_equal(model_load(&mf, pf, (model_load_opts){0}), 0);
    assert_int_equal(model_load(&mq, pq, (model_load_opts){0}), 0);
    uint32_t V = mf->cfg.n_vocab;
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    rng r;
    rng_seed(&r, 77);
    int agree = 0;
    for (int p = 0; p < 6; p++) {
        int32_t ids[12];
        for (int i = 0; i < 12; i++) ids[i] = (int32_t)rng_below(&r, 150000);
        run_prompt(mf, ids, 12, a);
        run_prompt(mq, ids, 12, b);
        double err = tu_rel_l2(b, a, V);
        print_message("prompt %d: q8_0 vs f32 rel L2 %.4f\n", p, err);
        assert_true(err < 0.05);
        agree += sampler_argmax(a, (int32_t)V) == sampler_argmax(b, (int32_t)V);
    }
    assert_true(agree >= 5);
    free(a);
    free(b);
    model_free(mf);
    model_free(mq);
    free(pf);
    free(pq);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_neox),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_moe_route),
        cmocka_unit_test_setup_teardown(test_forward_properties, setup_model, teardown_model),
        cmocka_unit_test_setup_teardown(test_forward_errors, setup_model, teardown_model),
        cmocka_unit_test_setup_teardown(test_kv_fp16, setup_model, teardown_model),
        cmocka_unit_test(test_quantized_close_to_f32),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
