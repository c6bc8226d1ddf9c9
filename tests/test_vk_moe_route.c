/* The router in shaders/moe_group.comp (routing mode: logits bound) against cpu_moe_route on
 * random router logits (distinct values), routed in the sorting workgroup and in a grid of its
 * own (the same bits): ids equal exactly, weights within 1e-6; n_expert
 * 1..256 (awkward and Qwen3's 128), k 1..8, workgroups of 32..512 (more and fewer subgroups
 * than tokens), strided logits, many tokens; ties (equal logits) go to the lower index; the
 * plain softmax weights without renormalization; a token's routing the same bits alone and in
 * a batch; bad arguments. (The grouping of the routed ids is test_vk_moe_group's.) */
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
#include "runtime/vk/op_moe_group.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"

typedef struct tcase {
    uint32_t n_expert, k, tokens, stride, wg;
    float scale; /* logits ~ N(0, scale) */
    bool ties;   /* logits drawn from a few values: many exact ties */
    bool no_renorm;
} tcase;

/* softmax probabilities of the chosen ids, as cpu_moe_route computes them before renorm */
static void plain_weights(const float *logits, uint32_t n, uint32_t k, const int32_t *ids, float *w) {
    float max = logits[0];
    for (uint32_t i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += expf(logits[i] - max);
    for (uint32_t j = 0; j < k; j++) w[j] = (float)(expf(logits[ids[j]] - max) / sum);
}

/* Routes t->tokens rows of logits with moe_group (routing, then grouping into scratch lists). */
static void route_on_device(const tcase *t, cvk_moe_route_mode mode, const float *logits, uint32_t *ids, float *w) {
    uint32_t stride = t->stride ? t->stride : t->n_expert;
    size_t nl = (size_t)(t->tokens - 1) * stride + t->n_expert, no = (size_t)t->tokens * t->k;
    cvk_buffer bl, bi, bw, bg, ba, bs;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, nl * 4, 4, CVK_MEM_DEVICE), 0);
    cvk_buffer *outs[] = {&bi, &bw, &ba, &bs};
    for (int i = 0; i < 4; i++) assert_int_equal(cvk_buffer_create(&vk->mem, outs[i], no * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bg, 8ull * t->n_expert, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bl), logits), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_pipeline p;
    if (cvk_moe_group_pipeline(&p, &vk->dev, vk->pcache.cache, t->wg)) fail_msg("%s", cd_errmsg());
    cvk_moe_group_args a = {.logits = cvk_view_whole(&bl),
                            .weights = cvk_view_whole(&bw),
                            .stride = t->stride,
                            .no_renorm = t->no_renorm,
                            .route_mode = mode,
                            .ids = cvk_view_whole(&bi),
                            .groups = cvk_view_whole(&bg),
                            .gather = cvk_view_whole(&ba),
                            .scatter = cvk_view_whole(&bs),
                            .n_expert = t->n_expert,
                            .n_tokens = t->tokens,
                            .k = t->k};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bi), ids), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bw), w), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer *all[] = {&bl, &bi, &bw, &bg, &ba, &bs};
    for (int i = 0; i < 6; i++) cvk_buffer_destroy(&vk->mem, all[i]);
}

static void run_case(const tcase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    uint32_t stride = t->stride ? t->stride : t->n_expert;
    size_t nl = (size_t)t->tokens * stride, no = (size_t)t->tokens * t->k;
    float *logits = malloc(nl * 4), *w = malloc(no * 4);
    uint32_t *ids = malloc(no * 4);
    for (size_t i = 0; i < nl; i++) logits[i] = t->ties ? (float)rng_below(&r, 3) : rng_normal(&r) * t->scale;
    if (!t->ties) /* distinct values within each token: nudge exact repeats apart */
        for (uint32_t tok = 0; tok < t->tokens; tok++) {
            float *l = logits + (size_t)tok * stride;
            for (uint32_t a = 0; a < t->n_expert; a++)
                for (uint32_t b = 0; b < a; b++)
                    if (l[a] == l[b]) l[a] = nextafterf(l[a], INFINITY), b = (uint32_t)-1;
        }

    /* the batch routed in the sorting workgroup, then in a grid of its own: the same bits */
    uint32_t *grid_ids = malloc(no * 4);
    float *grid_w = malloc(no * 4);
    route_on_device(t, CVK_MOE_ROUTE_FUSED, logits, ids, w);
    route_on_device(t, CVK_MOE_ROUTE_GRID, logits, grid_ids, grid_w);
    assert_memory_equal(grid_ids, ids, no * 4);
    assert_memory_equal(grid_w, w, no * 4);
    free(grid_ids), free(grid_w);

    int32_t want_ids[CVK_MOE_MAX_K];
    float want_w[CVK_MOE_MAX_K];
    double worst = 0;
    for (uint32_t tok = 0; tok < t->tokens; tok++) {
        const float *l = logits + (size_t)tok * stride;
        cpu_moe_route(l, t->n_expert, t->k, want_ids, want_w);
        if (t->no_renorm) plain_weights(l, t->n_expert, t->k, want_ids, want_w);
        for (uint32_t j = 0; j < t->k; j++) {
            size_t o = (size_t)tok * t->k + j;
            if (ids[o] != (uint32_t)want_ids[j])
                fail_msg("n_expert=%u k=%u wg=%u: token %u choice %u is expert %u, want %d", t->n_expert, t->k, t->wg,
                         tok, j, ids[o], want_ids[j]);
            double e = fabs((double)w[o] - want_w[j]);
            worst = e > worst ? e : worst;
            if (e > 1e-6)
                fail_msg("n_expert=%u k=%u: token %u weight %u = %.9g, want %.9g", t->n_expert, t->k, tok, j, w[o],
                         want_w[j]);
        }
    }
    printf("  n_expert=%u k=%u tokens=%u wg=%u%s%s: worst weight error %.2g\n", t->n_expert, t->k, t->tokens, t->wg,
           t->ties ? " ties" : "", t->no_renorm ? " no-renorm" : "", worst);
    /* a token alone gets the bits it got in the batch (its subgroup's routing is its own) */
    uint32_t last = t->tokens - 1, one_id[CVK_MOE_MAX_K];
    float one_w[CVK_MOE_MAX_K];
    tcase alone = *t;
    alone.tokens = 1;
    route_on_device(&alone, CVK_MOE_ROUTE_AUTO, logits + (size_t)last * stride, one_id, one_w);
    assert_memory_equal(one_id, ids + (size_t)last * t->k, t->k * 4);
    assert_memory_equal(one_w, w + (size_t)last * t->k, t->k * 4);
    free(logits), free(w), free(ids);
}

static void test_random_logits(void **state) {
    (void)state;
    const tcase cases[] = {
        {.n_expert = 128, .k = 8, .tokens = 97, .wg = 256, .scale = 2.0f}, /* Qwen3-30B-A3B */
        {.n_expert = 128, .k = 8, .tokens = 33, .wg = 64, .scale = 8.0f},
        {.n_expert = 256, .k = 8, .tokens = 19, .wg = 256, .scale = 1.0f},
        {.n_expert = 256, .k = 8, .tokens = 5, .wg = 32, .scale = 30.0f},
        {.n_expert = 60, .k = 4, .tokens = 13, .stride = 67, .wg = 128, .scale = 1.0f},
        {.n_expert = 1, .k = 1, .tokens = 3, .wg = 64, .scale = 1.0f},
        {.n_expert = 8, .k = 8, .tokens = 11, .wg = 32, .scale = 0.01f},
        {.n_expert = 201, .k = 3, .tokens = 7, .wg = 512, .scale = 3.0f},
        {.n_expert = 128, .k = 8, .tokens = 29, .wg = 128, .scale = 2.0f, .no_renorm = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 500 + i);
}

static void test_ties_to_lower_index(void **state) {
    (void)state;
    tcase a = {.n_expert = 128, .k = 8, .tokens = 41, .wg = 64, .ties = true};
    run_case(&a, 600);
    tcase b = {.n_expert = 37, .k = 5, .tokens = 9, .wg = 32, .ties = true};
    run_case(&b, 601);
}

static void test_many_tokens(void **state) {
    (void)state;
    tcase t = {.n_expert = 9, .k = 2, .tokens = 20000, .wg = 256, .scale = 1.0f};
    run_case(&t, 700);
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4096, 4, CVK_MEM_DEVICE), 0);
    cvk_pipeline p;
    assert_int_equal(cvk_moe_group_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 0), 0);
    cvk_view v = cvk_view_whole(&b);
    cvk_moe_group_args a = {.logits = v,
                            .weights = v,
                            .ids = v,
                            .groups = v,
                            .gather = v,
                            .scatter = v,
                            .n_expert = 257,
                            .k = 8,
                            .n_tokens = 1};
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n_expert = 128, a.k = 9;
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n_expert = 4, a.k = 5;
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n_expert = 128, a.k = 8, a.n_tokens = 9; /* 1152 floats of logits in 1024 */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "needs"));
    a.n_tokens = 1, a.stride = 100; /* below n_expert */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.stride = 0, a.route_mode = (cvk_moe_route_mode)7;
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "route mode"));
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_logits),
        cmocka_unit_test(test_ties_to_lower_index),
        cmocka_unit_test(test_many_tokens),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
