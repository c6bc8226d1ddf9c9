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
#include "runtime/model/rope.h"
#include "runtime/model/sampler.h"
#include "tests/test_util.h"

static void test_rope_neox(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 1);
    float h[128], orig[128];
    double freq[64], mscale;
    rope_config plain = rope_config_plain(1e6f, 40960);
    rope_freqs(&plain, 128, freq, &mscale);
    assert_true(mscale == 1.0);
    for (int i = 0; i < 128; i++) orig[i] = h[i] = rng_normal(&r);
    cpu_rope_neox(h, 128, 0, freq, mscale); /* position 0 is the identity */
    assert_memory_equal(h, orig, sizeof h);
    cpu_rope_neox(h, 128, 777, freq, mscale);
    /* NeoX pairs (i, i+64) rotate by 777 * theta^(-2i/128): check pair 5 directly */
    double ang = 777.0 * pow(1e6, -10.0 / 128);
    assert_float_equal(h[5], orig[5] * cos(ang) - orig[69] * sin(ang), 1e-4);
    assert_float_equal(h[69], orig[5] * sin(ang) + orig[69] * cos(ang), 1e-4);
    /* rotation keeps each pair's norm */
    for (int i = 0; i < 64; i++) assert_float_equal(hypot(h[i], h[i + 64]), hypot(orig[i], orig[i + 64]), 1e-4);
}

/* HF transformers' YaRN (_compute_yarn_parameters, find_correction_range, linear_ramp_factor)
 * written out from its definition, in double, per array as HF builds it: the independent
 * oracle for rope_freqs, which follows ggml's per-pair loop. */
static void hf_yarn(double base, double factor, double orig, uint32_t d, double *inv_freq, double *attn) {
    double corr_fast = d * log(orig / (32 * 2 * M_PI)) / (2 * log(base));
    double corr_slow = d * log(orig / (1 * 2 * M_PI)) / (2 * log(base));
    /* the test means something only where float and double floor/ceil alike */
    assert_true(fabs(corr_fast - round(corr_fast)) > 1e-3 && fabs(corr_slow - round(corr_slow)) > 1e-3);
    double low = fmax(floor(corr_fast), 0), high = fmin(ceil(corr_slow), d - 1);
    if (low == high) high += 0.001;
    for (uint32_t i = 0; i < d / 2; i++) {
        double pos_freq = pow(base, (2.0 * i) / d);
        double extrapolation = 1 / pos_freq, interpolation = 1 / (factor * pos_freq);
        double ramp = fmin(fmax((i - low) / (high - low), 0), 1);
        double extrapolation_factor = 1 - ramp;
        inv_freq[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    *attn = 0.1 * log(factor) + 1;
}

static void test_rope_yarn_math(void **state) {
    (void)state;
    const struct {
        float base, factor;
        uint32_t orig, d;
    } cases[] = {
        {1e6f, 4, 32768, 128}, /* unsloth's Qwen3-30B-A3B -128K */
        {1e4f, 4, 64, 64},     /* the conformance test's tiny model */
        {5e6f, 8, 4096, 128},
        {1e6f, 2.5f, 40960, 128},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        rope_config y = rope_config_yarn(cases[k].base, cases[k].factor, cases[k].orig);
        uint32_t d = cases[k].d;
        double freq[64], want[64], mscale, attn;
        rope_freqs(&y, d, freq, &mscale);
        hf_yarn(cases[k].base, cases[k].factor, cases[k].orig, d, want, &attn);
        int kept = 0, divided = 0;
        for (uint32_t i = 0; i < d / 2; i++) {
            assert_float_equal(freq[i] / want[i], 1.0, 1e-12);
            /* the paper's rule: pairs that turn beta_fast (32) times or more over the original
             * context keep their frequency, those that turn once or less are divided by the factor */
            double f0 = pow(cases[k].base, -2.0 * i / d), turns = cases[k].orig * f0 / (2 * M_PI);
            if (turns >= 32) kept++, assert_float_equal(freq[i] / f0, 1.0, 1e-12);
            if (turns <= 1) divided++, assert_float_equal(freq[i] * cases[k].factor / f0, 1.0, 1e-12);
        }
        assert_true(divided > 0);
        if (cases[k].orig / (2 * M_PI) >= 32) assert_true(kept > 0); /* pair 0 turns orig / 2pi times */
        assert_float_equal(mscale, attn, 1e-12);
        /* llama.cpp's chain in float: the context's attn factor (get_mscale, then its PR 17945
         * cancellation), times ggml rope_yarn's magnitude correction */
        float fs = 1.0f / cases[k].factor, ln = logf(1.0f / fs);
        float ctx_attn = (0.1f * ln + 1.0f) * (1.0f / (1.0f + 0.1f * ln));
        assert_float_equal(mscale, ctx_attn * (1.0f + 0.1f * logf(1.0f / fs)), 1e-6);

        /* cpu_rope_neox: pair i turns by pos * freq[i] and grows by mscale, past the original context */
        rng r;
        rng_seed(&r, 9 + k);
        float h[128], orig[128];
        for (uint32_t i = 0; i < d; i++) orig[i] = h[i] = rng_normal(&r);
        uint32_t pos = cases[k].orig * 3 + 11;
        cpu_rope_neox(h, d, pos, freq, mscale);
        for (uint32_t i = 0; i < d / 2; i++) {
            double a = pos * want[i];
            assert_float_equal(h[i], attn * (orig[i] * cos(a) - orig[i + d / 2] * sin(a)), 1e-4);
            assert_float_equal(hypot(h[i], h[i + d / 2]), attn * hypot(orig[i], orig[i + d / 2]), 1e-4);
        }
    }
    /* linear: every frequency divided by the factor, no magnitude change */
    rope_config lin = rope_config_plain(1e4f, 4096);
    lin.scaling = ROPE_SCALING_LINEAR, lin.factor = 4;
    double freq[32], mscale;
    rope_freqs(&lin, 64, freq, &mscale);
    assert_true(mscale == 1.0);
    for (uint32_t i = 0; i < 32; i++) assert_float_equal(freq[i] * 4 / pow(1e4, -2.0 * i / 64), 1.0, 1e-12);
}

static void test_rmsnorm(void **state) {
    (void)state;
    float x[37], w[37], out[37];
    double ss = 0;
    for (int i = 0; i < 37; i++) {
        x[i] = (float)(i - 18) * 0.3f;
        w[i] = 1.0f + i * 0.01f;
        ss += x[i] * x[i];
    }
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

typedef struct fixture {
    char *path;
    model *m;
} fixture;

static int setup_model(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->path = strdup(tu_make_model("cpu_ref_tiny.gguf", "tiny", NULL, 99, NULL));
    if (model_load(&f->m, f->path, (model_load_opts){0})) {
        fprintf(stderr, "%s\n", cd_errmsg());
        return -1;
    }
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
        for (uint32_t i = 0; i < V; i++) {
            assert_true(isfinite(a[i]));
            max = a[i] > max ? a[i] : max;
        }
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
        cmocka_unit_test(test_rope_yarn_math),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_moe_route),
        cmocka_unit_test_setup_teardown(test_forward_properties, setup_model, teardown_model),
        cmocka_unit_test_setup_teardown(test_forward_errors, setup_model, teardown_model),
        cmocka_unit_test_setup_teardown(test_kv_fp16, setup_model, teardown_model),
        cmocka_unit_test(test_quantized_close_to_f32),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
