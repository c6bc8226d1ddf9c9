/* Sampling: greedy is argmax; seeded sampling is reproducible; top-k/top-p cut where they
 * should; with no limits the empirical distribution matches the softmax. Logit adjustments
 * (logit_bias, presence and frequency penalties) match OpenAI's formula written out naively. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/model/logit_adjust.h"
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

/* The documented order of operations written the plain way: sort everything (value desc, id
 * asc), numerators exp((l - max) / T), their sum in id order for top_k "all" (else over the
 * top_k in sorted order), the top-p prefix, one draw walked in sorted order. */
static const float *ref_logits;
static int ref_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float vx = ref_logits[x], vy = ref_logits[y];
    if (vx != vy) return vx > vy ? -1 : 1;
    return (x > y) - (x < y);
}
static void ref_sort(const float *l, int32_t n_vocab, int32_t *ids) {
    for (int32_t i = 0; i < n_vocab; i++) ids[i] = i;
    ref_logits = l;
    qsort(ids, (size_t)n_vocab, sizeof *ids, ref_cmp);
}
/* ids: l's ids sorted (ref_sort) */
static int32_t ref_sample(const float *l, int32_t n_vocab, sampler_params p, rng *r, const int32_t *ids, float *num) {
    bool all = p.top_k <= 0 || p.top_k >= n_vocab;
    int32_t n = all ? n_vocab : p.top_k;
    float max = l[ids[0]];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) num[i] = expf((l[ids[i]] - max) / p.temperature);
    if (all)
        for (int32_t i = 0; i < n_vocab; i++) sum += expf((l[i] - max) / p.temperature);
    else
        for (int32_t i = 0; i < n; i++) sum += num[i];
    int32_t keep = n;
    double mass = 0;
    for (int32_t i = 0; p.top_p < 1.0f && i < n; i++)
        if ((mass += num[i] / sum) >= p.top_p) {
            keep = i + 1;
            break;
        }
    double kept = 0;
    if (keep == n) kept = sum;
    else
        for (int32_t i = 0; i < keep; i++) kept += num[i];
    double u = (double)rng_f32(r) * kept, acc = 0;
    for (int32_t i = 0; i < keep; i++)
        if (u < (acc += num[i])) return ids[i];
    return ids[keep - 1];
}

/* top_k "all" (and a top_k past the insertion window) on a real vocabulary's size: every draw
 * is the reference's, whether the walk stays in the best few tokens (peaked logits, a cold
 * temperature, a small top-p) or goes deep (flat logits, hot, top-p 1 or 0.99), and for "all"
 * the binned prefix is enough (no draw sorts the whole vocabulary). */
static void test_all_matches_reference(void **state) {
    (void)state;
    enum { V = 151936, DRAWS = 40 };
    float *l = malloc(V * sizeof *l), *num = malloc(V * sizeof *num);
    int32_t *ids = malloc(V * sizeof *ids);
    assert_non_null(l), assert_non_null(num), assert_non_null(ids);
    const struct {
        float scale, T, top_p;
        int32_t top_k;
    } cases[] = {{8, 0.7f, 0.95f, 0},   {8, 1.0f, 1.0f, 0}, {0.5f, 1.5f, 1.0f, 0},  {0.5f, 1.0f, 0.99f, 0},
                 {0.5f, 1.0f, 0.3f, 0}, {2, 1.0f, 0.9f, V}, {1, 1.2f, 0.97f, 5000}, {1, 1.0f, 1.0f, 5000}};
    int past = 0; /* draws outside the best 64 (the full-sort path ran) */
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rng r;
        rng_seed(&r, 100 + c);
        for (int32_t i = 0; i < V; i++) l[i] = rng_normal(&r) * cases[c].scale;
        sampler_params p = {.temperature = cases[c].T, .top_k = cases[c].top_k, .top_p = cases[c].top_p, .seed = 9 + c};
        sampler s;
        assert_int_equal(sampler_init(&s, p, V), 0);
        rng ref;
        rng_seed(&ref, p.seed);
        int32_t top[64];
        float tv[64];
        sampler_top_k(l, V, 64, top, tv);
        ref_sort(l, V, ids);
        for (int d = 0; d < DRAWS; d++) {
            int32_t want = ref_sample(l, V, p, &ref, ids, num), got = sampler_sample(&s, l);
            assert_int_equal(got, want);
            bool in = false;
            for (int i = 0; i < 64; i++) in |= top[i] == got;
            past += !in;
        }
        if (p.top_k <= 0 || p.top_k >= V) assert_int_equal(s.full_sorts, 0); /* the binned prefix sufficed */
        sampler_free(&s);
    }
    assert_true(past > 0); /* the fallback was exercised, not only the window */
    free(l), free(num), free(ids);
}

/* logit_adjust_apply against OpenAI's formula written out per token (counts by a full scan):
 * the same floats, bit for bit, for generated runs with repeats, ids at both ends of the
 * vocabulary, and each term alone; the count scratch comes back zero. */
static void test_logit_adjust_formula(void **state) {
    (void)state;
    enum { V = 1009, N = 300 };
    float l[V], ref[V];
    uint32_t count[V] = {0};
    int32_t gen[N];
    logit_bias bias[] = {{0, 5.5f}, {17, -100}, {500, 0.25f}, {V - 1, 100}};
    const logit_adjust cases[] = {{.presence = 0.6f, .frequency = 0.35f, .bias = bias, .n_bias = 4},
                                  {.presence = -1.5f},
                                  {.frequency = 2},
                                  {.bias = bias + 1, .n_bias = 2},
                                  {.presence = 2, .frequency = -2}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const logit_adjust *a = &cases[c];
        rng r;
        rng_seed(&r, 40 + c);
        for (int i = 0; i < N; i++) /* repeats: a few tokens often, the ends of the vocabulary too */
            gen[i] = i % 7 == 0 ? 0 : i % 11 == 0 ? V - 1 : (int32_t)(rng_u64(&r) % (i % 3 ? 40 : V));
        fill(l, V, 50 + c);
        memcpy(ref, l, sizeof l);
        for (uint32_t b = 0; b < a->n_bias; b++) ref[a->bias[b].id] += a->bias[b].bias;
        for (int32_t j = 0; j < V; j++) {
            uint32_t cj = 0;
            for (int i = 0; i < N; i++) cj += gen[i] == j;
            if (cj) ref[j] -= (float)cj * a->frequency + a->presence;
        }
        assert_true(logit_adjust_active(a));
        assert_int_equal(logit_adjust_check(a, V), 0);
        logit_adjust_apply(a, gen, N, l, V, count);
        assert_memory_equal(l, ref, sizeof l);
        int changed = 0;
        fill(ref, V, 50 + c);
        for (int32_t j = 0; j < V; j++) changed += l[j] != ref[j];
        assert_true(changed > 0);
        for (int32_t j = 0; j < V; j++) assert_int_equal(count[j], 0);
    }
    /* nothing to do: inactive, and the row is untouched */
    logit_adjust none = {0};
    assert_false(logit_adjust_active(&none));
    assert_false(logit_adjust_active(NULL));
    fill(l, V, 7);
    memcpy(ref, l, sizeof l);
    logit_adjust_apply(&none, gen, N, l, V, count);
    assert_memory_equal(l, ref, sizeof l);
}

/* logit_adjust_check names each problem; logit_adjust_copy owns its list. */
static void test_logit_adjust_check(void **state) {
    (void)state;
    logit_bias ok[] = {{1, 1}, {9, -1}}, dup[] = {{4, 1}, {4, 2}}, desc[] = {{5, 1}, {2, 1}};
    logit_bias far[] = {{10, 1}}, neg[] = {{-1, 1}}, big[] = {{3, 100.5f}};
    const struct {
        logit_adjust a;
        const char *msg;
    } bad[] = {{{.presence = 2.5f}, "presence_penalty"},
               {{.frequency = -2.01f}, "frequency_penalty"},
               {{.presence = 0.0f / 0.0f}, "presence_penalty"},
               {{.bias = dup, .n_bias = 2}, "twice"},
               {{.bias = desc, .n_bias = 2}, "out of order"},
               {{.bias = far, .n_bias = 1}, "vocabulary is 0 to 9"},
               {{.bias = neg, .n_bias = 1}, "token -1"},
               {{.bias = big, .n_bias = 1}, "outside -100 to 100"},
               {{.bias = ok, .n_bias = LOGIT_BIAS_MAX + 1}, "at most"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(logit_adjust_check(&bad[i].a, 10), -1);
        assert_non_null(strstr(cd_errmsg(), bad[i].msg));
    }
    logit_adjust a = {.presence = 1, .bias = ok, .n_bias = 2}, c;
    assert_int_equal(logit_adjust_check(&a, 10), 0);
    assert_int_equal(logit_adjust_copy(&c, &a), 0);
    assert_ptr_not_equal(c.bias, ok);
    assert_memory_equal(c.bias, ok, sizeof ok);
    assert_true(c.presence == 1 && c.n_bias == 2);
    logit_adjust_free(&c);
    assert_null(c.bias);
    assert_int_equal(logit_adjust_copy(&c, NULL), 0);
    assert_false(logit_adjust_active(&c));
}

/* sampler_logprob: logits minus a log-sum-exp written out in long double, the alternatives by a
 * full scan, the rank by a count; -inf logits (a banned token) count for nothing; a row of only
 * -inf gives -inf. */
static void test_logprob(void **state) {
    (void)state;
    enum { V = 5003 };
    float l[V];
    fill(l, V, 77);
    l[10] = -INFINITY;
    l[4000] = 9;          /* the best */
    l[17] = l[18] = 8.5f; /* a tie: the lower id first */
    long double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) m = isfinite(l[i]) && l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) sum += isfinite(l[i]) ? expl((long double)l[i] - m) : 0;
    double lse = (double)(m + logl(sum));
    assert_true(fabs(sampler_log_sum_exp(l, V) - lse) < 1e-9);
    token_logprob lp;
    sampler_logprob(l, V, 123, 3, &lp);
    assert_int_equal(lp.id, 123);
    assert_true(fabs(lp.logprob - (l[123] - lse)) < 1e-6);
    assert_int_equal(lp.n_top, 3);
    const int32_t want[] = {4000, 17, 18};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(lp.top_id[k], want[k]);
        assert_true(fabs(lp.top_logprob[k] - (l[want[k]] - lse)) < 1e-6);
    }
    uint32_t above = 0; /* its rank: 1 + the logits above it, counted here */
    for (int i = 0; i < V; i++) above += l[i] > l[123];
    assert_int_equal(lp.rank, above + 1);
    sampler_logprob(l, V, 18, 1, &lp);
    assert_int_equal(lp.rank, 2); /* tied with 17: both second */
    sampler_logprob(l, V, 4000, 1, &lp);
    assert_int_equal(lp.rank, 1);
    sampler_logprob(l, V, 10, 0, &lp);
    assert_true(isinf(lp.logprob) && lp.logprob < 0);
    assert_int_equal(lp.rank, V); /* -inf: below every finite one */
    assert_int_equal(lp.n_top, 0);
    sampler_logprob(l, V, 0, 99, &lp); /* at most TOP_LOGPROBS_MAX */
    assert_int_equal(lp.n_top, TOP_LOGPROBS_MAX);
    float dead[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    assert_true(isinf(sampler_log_sum_exp(dead, 4)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_k_order),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_cutoffs),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_all_matches_reference),
        cmocka_unit_test(test_logit_adjust_formula),
        cmocka_unit_test(test_logit_adjust_check),
        cmocka_unit_test(test_logprob),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
