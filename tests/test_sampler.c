/* Sampling: greedy is argmax; seeded sampling is reproducible; top-k/top-p cut where they
 * should; with no limits the empirical distribution matches the softmax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "runtime/model/sampler.h"

static void fill(float *l, int n, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) l[i] = rng_normal(&r) * 2;
}

static void test_greedy(void **state) {
    (void)state;
    float l[1001];
    fill(l, 1001, 1);
    l[617] = 50;
    sampler s;
    assert_int_equal(sampler_init(&s, (sampler_params){0}, 1001), 0);
    assert_int_equal(sampler_sample(&s, l), 617);
    l[3] = 50; /* ties go to the lower id */
    assert_int_equal(sampler_sample(&s, l), 3);
    sampler_free(&s);
}

static void test_top_k_order(void **state) {
    (void)state;
    float l[997];
    fill(l, 997, 2);
    int32_t ids[10];
    float v[10];
    assert_int_equal(sampler_top_k(l, 997, 10, ids, v), 10);
    for (int i = 1; i < 10; i++) assert_true(v[i - 1] >= v[i]);
    int above = 0;
    for (int i = 0; i < 997; i++) above += l[i] > v[9];
    assert_int_equal(above, 9);
}

static void test_seeded_reproducible(void **state) {
    (void)state;
    float l[500];
    fill(l, 500, 3);
    sampler_params p = {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .seed = 1234};
    sampler a, b, c;
    sampler_init(&a, p, 500);
    sampler_init(&b, p, 500);
    p.seed = 999;
    sampler_init(&c, p, 500);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = sampler_sample(&a, l), y = sampler_sample(&b, l), z = sampler_sample(&c, l);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 0);
    sampler_free(&a);
    sampler_free(&b);
    sampler_free(&c);
}

static void test_cutoffs(void **state) {
    (void)state;
    float l[300];
    fill(l, 300, 4);
    sampler s;
    int32_t ids[5];
    float v[5];
    sampler_top_k(l, 300, 5, ids, v);
    /* top-k 1 and a tiny top-p are greedy */
    sampler_init(&s, (sampler_params){.temperature = 1.5f, .top_k = 1, .top_p = 1, .seed = 5}, 300);
    for (int i = 0; i < 50; i++) assert_int_equal(sampler_sample(&s, l), ids[0]);
    sampler_free(&s);
    sampler_init(&s, (sampler_params){.temperature = 1.5f, .top_k = 0, .top_p = 1e-6f, .seed = 5}, 300);
    for (int i = 0; i < 50; i++) assert_int_equal(sampler_sample(&s, l), ids[0]);
    sampler_free(&s);
    /* top-k 5: only those five ever come out */
    sampler_init(&s, (sampler_params){.temperature = 3, .top_k = 5, .top_p = 1, .seed = 6}, 300);
    for (int i = 0; i < 500; i++) {
        int32_t t = sampler_sample(&s, l);
        assert_true(t == ids[0] || t == ids[1] || t == ids[2] || t == ids[3] || t == ids[4]);
    }
    sampler_free(&s);
}

/* With no limits, frequencies over 200k draws match softmax(l / T) within 5 sigma. */
static void test_distribution(void **state) {
    (void)state;
    enum { N = 8, DRAWS = 200000 };
    float l[N] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, 0.2f, -0.3f};
    float T = 0.7f;
    double p[N], sum = 0;
    for (int i = 0; i < N; i++) sum += p[i] = exp(l[i] / T);
    sampler s;
    sampler_init(&s, (sampler_params){.temperature = T, .top_k = 0, .top_p = 1, .seed = 7}, N);
    int count[N] = {0};
    for (int i = 0; i < DRAWS; i++) count[sampler_sample(&s, l)]++;
    for (int i = 0; i < N; i++) {
        double pi = p[i] / sum, sigma = sqrt(DRAWS * pi * (1 - pi));
        assert_true(fabs(count[i] - DRAWS * pi) < 5 * sigma + 1);
    }
    sampler_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_k_order),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_cutoffs),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
