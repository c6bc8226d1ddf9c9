/* The GPU forward pass (runtime/model/gpu_model.h) against the CPU reference on synthetic
 * models: last-position logits after prompts of 1, 5 and 40 tokens (relative L2 and top-1),
 * greedy generation of 12 tokens on 4 random prompts, the replayed step after rewinding, a dense
 * qwen3 model, and an all-f32 model whose embedding table is split into binding parts.
 * fp16 KV on the GPU against f32 KV on the CPU is the main source of difference. */
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
#include "runtime/model/gpu_model.h"
#include "runtime/model/sampler.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

static model *load(const char *file, const char *quant, uint64_t seed, void (*tweak)(synth_spec *)) {
    model *m;
    const char *path = tu_make_model(file, "tiny", quant, seed, tweak);
    if (model_load(&m, path, (model_load_opts){0})) fail_msg("%s", cd_errmsg());
    return m;
}

static void random_prompt(rng *r, int32_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)rng_below(r, 150000);
}

/* Runs the prompt on both and compares the last position's logits. */
static double compare_prompt(const model *m, const int32_t *ids, uint32_t n, bool *top1_equal) {
    uint32_t V = m->cfg.n_vocab;
    cpu_state s;
    gpu_model g;
    assert_int_equal(cpu_state_init(&s, m, n + 1), 0);
    if (gpu_model_init(&g, vk, m, n + 1)) fail_msg("%s", cd_errmsg());
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(cpu_forward(&s, ids[i], i, i + 1 == n), 0);
        if (gpu_forward(&g, ids[i], i, i + 1 == n)) fail_msg("%s", cd_errmsg());
    }
    float *lg = malloc(V * sizeof *lg);
    assert_int_equal(gpu_model_logits(&g, lg), 0);
    double err = tu_rel_l2(lg, s.logits, V);
    int32_t want = sampler_argmax(s.logits, (int32_t)V);
    assert_int_equal(gpu_model_argmax(&g), sampler_argmax(lg, (int32_t)V)); /* GPU argmax = its logits' */
    *top1_equal = gpu_model_argmax(&g) == want;
    free(lg);
    gpu_model_free(&g);
    cpu_state_free(&s);
    return err;
}

static void logits_vs_cpu(const model *m, const char *what, double bound) {
    rng r;
    rng_seed(&r, 7);
    const uint32_t lens[] = {1, 5, 40};
    for (int i = 0; i < 3; i++) {
        int32_t ids[40];
        random_prompt(&r, ids, lens[i]);
        bool top1;
        double err = compare_prompt(m, ids, lens[i], &top1);
        print_message("%s, prompt %u tokens: rel L2 %.2e, top-1 %s\n", what, lens[i], err, top1 ? "equal" : "DIFFERENT");
        assert_true(err < bound);
        assert_true(top1);
    }
}

static void test_logits_moe_mix(void **state) {
    (void)state;
    model *m = load("gpu_tiny_mix.gguf", NULL, 99, NULL);
    logits_vs_cpu(m, "tiny moe mix", 1e-2);
    model_free(m);
}

/* Every weight f32: the 151936 x 256 embedding (and an untied lm_head of the same shape) is
 * 155 MB, more than one 128 MiB binding on lavapipe, so get_rows (and the head matvec) run
 * once per part. */
static void test_logits_f32(void **state) {
    (void)state;
    model *m = load("gpu_tiny_f32.gguf", "f32", 3, NULL);
    logits_vs_cpu(m, "tiny moe f32", 1e-2);
    model_free(m);
}

static void make_dense(synth_spec *s) {
    s->cfg.arch = ARCH_QWEN3;
    s->cfg.n_expert = s->cfg.n_expert_used = s->cfg.n_ff_exp = 0;
    s->cfg.n_ff = 384;
}

static void test_logits_dense(void **state) {
    (void)state;
    model *m = load("gpu_tiny_dense.gguf", NULL, 11, make_dense);
    logits_vs_cpu(m, "tiny dense mix", 1e-2);
    model_free(m);
}

/* Greedy generation: the GPU's own argmax feeds the next step. */
static void test_greedy_generation(void **state) {
    (void)state;
    model *m = load("gpu_tiny_gen.gguf", NULL, 42, NULL);
    uint32_t V = m->cfg.n_vocab, n_prompt = 8, n_gen = 12;
    rng r;
    rng_seed(&r, 2024);
    int same = 0;
    for (int p = 0; p < 4; p++) {
        int32_t ids[8], cpu_out[12], gpu_out[12];
        random_prompt(&r, ids, n_prompt);
        cpu_state s;
        gpu_model g;
        assert_int_equal(cpu_state_init(&s, m, n_prompt + n_gen), 0);
        if (gpu_model_init(&g, vk, m, n_prompt + n_gen)) fail_msg("%s", cd_errmsg());
        for (uint32_t i = 0; i < n_prompt; i++) {
            assert_int_equal(cpu_forward(&s, ids[i], i, i + 1 == n_prompt), 0);
            assert_int_equal(gpu_forward(&g, ids[i], i, i + 1 == n_prompt), 0);
        }
        for (uint32_t i = 0; i < n_gen; i++) {
            cpu_out[i] = sampler_argmax(s.logits, (int32_t)V);
            gpu_out[i] = gpu_model_argmax(&g);
            if (i + 1 < n_gen) {
                assert_int_equal(cpu_forward(&s, cpu_out[i], n_prompt + i, 1), 0);
                assert_int_equal(gpu_forward(&g, gpu_out[i], n_prompt + i, 1), 0);
            }
        }
        int first_diff = -1;
        for (uint32_t i = 0; i < n_gen && first_diff < 0; i++)
            if (cpu_out[i] != gpu_out[i]) first_diff = (int)i;
        print_message("prompt %d: %s (first difference at %d)\n", p, first_diff < 0 ? "12/12 equal" : "differs",
                      first_diff);
        same += first_diff < 0;
        gpu_model_free(&g);
        cpu_state_free(&s);
    }
    assert_true(same >= 3);
    model_free(m);
}

/* The recorded step replays: rewinding to an earlier position and running the same tokens
 * gives bit-identical logits; errors are values. */
static void test_rewind_and_errors(void **state) {
    (void)state;
    model *m = load("gpu_tiny_rw.gguf", NULL, 5, NULL);
    uint32_t V = m->cfg.n_vocab;
    gpu_model g;
    if (gpu_model_init(&g, vk, m, 24)) fail_msg("%s", cd_errmsg());
    int32_t ids[20];
    rng r;
    rng_seed(&r, 9);
    random_prompt(&r, ids, 20);
    float *a = malloc(V * 4), *b = malloc(V * 4);
    for (uint32_t i = 0; i < 20; i++) assert_int_equal(gpu_forward(&g, ids[i], i, i == 19), 0);
    assert_int_equal(gpu_model_logits(&g, a), 0);
    for (uint32_t i = 13; i < 20; i++) assert_int_equal(gpu_forward(&g, ids[i], i, i == 19), 0);
    assert_int_equal(gpu_model_logits(&g, b), 0);
    assert_memory_equal(a, b, V * 4);
    assert_int_equal(gpu_forward(&g, 1, 24, 1), -1);
    assert_non_null(strstr(cd_errmsg(), "context"));
    assert_int_equal(gpu_forward(&g, (int32_t)V, 0, 1), -1);
    assert_int_equal(gpu_forward(&g, 1, 22, 1), -1); /* skips position 20, 21 */
    free(a);
    free(b);
    gpu_model_free(&g);
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_moe_mix),
        cmocka_unit_test(test_rewind_and_errors),
        cmocka_unit_test(test_greedy_generation),
        cmocka_unit_test(test_logits_dense),
        cmocka_unit_test(test_logits_f32),
    };
    return cmocka_run_group_tests(tests, vk_setup, vk_teardown);
}
