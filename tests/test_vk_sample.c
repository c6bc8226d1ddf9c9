/* shaders/argmax.comp and argmax_texel.comp against sampler_argmax: n_vocab = 151 936 and
 * awkward sizes around the chunk (8 or 64 * workgroup) boundaries, several rows with a stride,
 * workgroups 32..1024;
 * ties to the lower id inside a chunk, across chunks and across subgroups; the maximum at
 * the first and last id; every logit -inf; replayed with new logits without re-recording;
 * bad arguments.
 * shaders/sample_topk.comp against sampler_sample with the same uniform u: top_k 1..256,
 * top_k above n, top_p < 1 and = 1, several temperatures, many equal logits; every draw must
 * give sampler_sample's id, or (float sums against double) the id the CPU gives for u or
 * top_p moved by 1e-5, which must be rare. */
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
#include "runtime/model/sampler.h"
#include "runtime/vk/op_sample.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"

enum pattern { RANDOM, TIES, FIRST, LAST, ALL_NEG_INF, FEW_VALUES };

typedef struct tcase {
    uint32_t n, rows, stride, wg;
    enum pattern pat;
} tcase;

static void fill(rng *r, float *l, uint32_t n, enum pattern pat) {
    for (uint32_t i = 0; i < n; i++) l[i] = rng_normal(r) * 5.0f;
    float top = 100.0f;
    switch (pat) {
    case RANDOM: break;
    case TIES: /* the maximum at several random ids, across chunks and subgroups */
        for (int j = 0; j < 6; j++) l[rng_below(r, n)] = top;
        break;
    case FIRST: l[0] = top; break;
    case LAST:
        l[n - 1] = top;
        l[n / 2] = top;
        break;
    case ALL_NEG_INF:
        for (uint32_t i = 0; i < n; i++) l[i] = -INFINITY;
        break;
    case FEW_VALUES:
        for (uint32_t i = 0; i < n; i++) l[i] = (float)rng_below(r, 4);
        break;
    }
}

/* texel: argmax_texel.comp, its rows at whole texels (the stride rounded up to 4 floats) and the
 * logits 3 texels into their buffer, so the kernel's first-texel offset is not 0 */
static void run_variant(const tcase *t, uint64_t seed, bool texel) {
    rng r;
    rng_seed(&r, seed);
    uint32_t stride = t->stride ? t->stride : t->n, lead = texel ? 12 : 0;
    if (texel) stride = (stride + 3) / 4 * 4;
    size_t nl = (size_t)(t->rows - 1) * stride + (t->n + 3) / 4 * 4;
    float *l = calloc(nl, 4);
    uint32_t *got = malloc(t->rows * 4);
    for (uint32_t row = 0; row < t->rows; row++) fill(&r, l + (size_t)row * stride, t->n, t->pat);

    cvk_argmax_pipes p;
    if (cvk_argmax_pipelines(&p, &vk->dev, vk->pcache.cache, t->wg, texel)) fail_msg("%s", cd_errmsg());
    cvk_buffer bl, bs, bo;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, (lead + nl) * 4, 16, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bs, cvk_argmax_scratch_bytes(&p, t->n, t->rows), 8, CVK_MEM_DEVICE),
                     0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bo, t->rows * 4, 4, CVK_MEM_DEVICE), 0);
    cvk_view lv = {&bl, lead * 4, nl * 4};
    assert_int_equal(cvk_stager_upload(&vk->stager, lv, l), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_argmax_args a = {.logits = lv,
                         .scratch = cvk_view_whole(&bs),
                         .out = cvk_view_whole(&bo),
                         .n = t->n,
                         .rows = t->rows,
                         .stride = stride};
    assert_int_equal(cvk_cmd_begin_reusable(&vk->cmd), 0);
    if (cvk_argmax(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    for (int round = 0; round < 2; round++) {
        if (round) { /* replay on new logits */
            for (uint32_t row = 0; row < t->rows; row++) fill(&r, l + (size_t)row * stride, t->n, t->pat);
            assert_int_equal(cvk_stager_upload(&vk->stager, lv, l), 0);
            assert_int_equal(cvk_stager_flush(&vk->stager), 0);
        }
        assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
        assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bo), got), 0);
        for (uint32_t row = 0; row < t->rows; row++) {
            int32_t want = sampler_argmax(l + (size_t)row * stride, (int32_t)t->n);
            if (got[row] != (uint32_t)want)
                fail_msg("%s n=%u rows=%u wg=%u pattern %d round %d: row %u argmax %u, want %d",
                         texel ? "texel" : "storage", t->n, t->rows, t->wg, t->pat, round, row, got[row], want);
        }
    }
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_argmax_pipelines_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bl);
    cvk_buffer_destroy(&vk->mem, &bs);
    cvk_buffer_destroy(&vk->mem, &bo);
    free(l), free(got);
}

static void run_case(const tcase *t, uint64_t seed) {
    run_variant(t, seed, false);
    run_variant(t, seed, true);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_argmax, cinder_spv_argmax_size, &si), 0);
    const uint32_t want[] = {offsetof(cvk_argmax_push, n), offsetof(cvk_argmax_push, rows),
                             offsetof(cvk_argmax_push, stride), offsetof(cvk_argmax_push, chunk),
                             offsetof(cvk_argmax_push, n_chunks)};
    assert_int_equal(si.n_push, 6);
    for (int i = 0; i < 5; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_argmax_push));
    assert_int_equal(si.n_bindings, 3);
    cvk_spirv_info st;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_argmax_texel, cinder_spv_argmax_texel_size, &st), 0);
    assert_int_equal(st.n_push, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(st.push_offset[i], si.push_offset[i]);
    assert_int_equal(st.push_offset[5], offsetof(cvk_argmax_push, l0));
    assert_int_equal(st.push_size, sizeof(cvk_argmax_push));
}

static void test_vocab(void **state) {
    (void)state;
    const enum pattern pats[] = {RANDOM, TIES, FIRST, LAST, ALL_NEG_INF, FEW_VALUES};
    for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
        tcase t = {.n = 151936, .rows = 1, .wg = 256, .pat = pats[i]};
        run_case(&t, 800 + i);
    }
    tcase rows = {.n = 151936, .rows = 3, .stride = 151936 + 64, .wg = 256, .pat = TIES};
    run_case(&rows, 810);
}

static void test_awkward_sizes(void **state) {
    (void)state;
    const tcase cases[] = {
        {.n = 1, .rows = 1, .wg = 256},
        {.n = 7, .rows = 2, .wg = 32, .pat = FEW_VALUES},
        {.n = 255, .rows = 5, .wg = 32, .pat = LAST},
        {.n = 256, .rows = 1, .wg = 32, .pat = LAST},
        {.n = 257, .rows = 1, .wg = 32, .pat = LAST},
        {.n = 2047, .rows = 4, .stride = 2050, .wg = 256, .pat = TIES},
        {.n = 2048, .rows = 1, .wg = 256, .pat = LAST},
        {.n = 2049, .rows = 2, .wg = 256, .pat = LAST},
        {.n = 100003, .rows = 1, .wg = 1024, .pat = TIES},
        {.n = 151937, .rows = 1, .wg = 64, .pat = FEW_VALUES},
        {.n = 99991, .rows = 2, .wg = 128, .pat = ALL_NEG_INF},
        /* the texel variant's chunks: 64 logits an invocation */
        {.n = 16385, .rows = 3, .stride = 16390, .wg = 256, .pat = TIES},
        {.n = 4097, .rows = 2, .wg = 64, .pat = LAST},
        {.n = 4095, .rows = 2, .wg = 64, .pat = FEW_VALUES},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 900 + i);
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_argmax_pipes p;
    assert_int_equal(cvk_argmax_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 100, false), -1);
    assert_int_equal(cvk_argmax_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 0, false), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4096, 4, CVK_MEM_DEVICE), 0);
    cvk_view v = cvk_view_whole(&b);
    cvk_argmax_args a = {.logits = v, .scratch = v, .out = v, .n = 1025, .rows = 1};
    assert_int_equal(cvk_argmax(&vk->cmd, &vk->dpool, &p, &a), -1); /* 1025 floats in 1024 */
    a.n = 1000, a.stride = 999;
    assert_int_equal(cvk_argmax(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n = 0, a.stride = 0;
    assert_int_equal(cvk_argmax(&vk->cmd, &vk->dpool, &p, &a), -1);
    cvk_argmax_pipelines_destroy(&vk->dev, &p);
    /* the texel variant: rows at whole texels, the view at a whole texel, the last texel inside */
    assert_int_equal(cvk_argmax_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 0, true), 0);
    a = (cvk_argmax_args){.logits = v, .scratch = v, .out = v, .n = 10, .rows = 2, .stride = 10};
    assert_int_equal(cvk_argmax(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "texels"));
    a.stride = 12, a.logits = (cvk_view){&b, 8, 4000};
    assert_int_equal(cvk_argmax(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.logits = (cvk_view){&b, 0, 4 * 23}; /* 22 floats hold both rows; row 1's last texel needs 24 */
    assert_int_equal(cvk_argmax(&vk->cmd, &vk->dpool, &p, &a), -1);
    cvk_argmax_pipelines_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

/* sampler_sample's steps 2-5 with a given u (the test's mirror, for boundary checks) */
static int32_t ref_sample(const float *logits, int32_t n, int32_t top_k, float temp, float top_p, double u) {
    int32_t *ids = malloc((size_t)top_k * sizeof *ids);
    float *probs = malloc((size_t)top_k * sizeof *probs);
    int32_t m = sampler_top_k(logits, n, top_k, ids, probs);
    double sum = 0;
    float max = probs[0];
    for (int32_t i = 0; i < m; i++) {
        probs[i] = expf((probs[i] - max) / temp);
        sum += probs[i];
    }
    int32_t keep = m;
    if (top_p < 1.0f) {
        double mass = 0;
        for (int32_t i = 0; i < m; i++) {
            mass += probs[i] / sum;
            if (mass >= top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double kept = 0, acc = 0;
    for (int32_t i = 0; i < keep; i++) kept += probs[i];
    int32_t id = ids[keep - 1];
    for (int32_t i = 0; i < keep; i++) {
        acc += probs[i];
        if (u * kept < acc) {
            id = ids[i];
            break;
        }
    }
    free(ids), free(probs);
    return id;
}

typedef struct scase {
    uint32_t n, rows, stride, wg;
    int32_t top_k;
    float temperature, top_p, scale;
    enum pattern pat;
    bool mixed; /* rows of different requests: own parameters, some left to argmax or the CPU */
} scase;

#define UNTOUCHED 0xdeadbeefu

/* Row r's parameters: the case's, or with mixed one of five kinds in turn, two of them not
 * sampled on the device (greedy; top_k "all"), one with a top_k above k_max. */
static cvk_sample_row row_params(const scase *t, uint32_t r) {
    cvk_sample_row p = {t->temperature, t->top_k, t->top_p, 0};
    if (!t->mixed) return p;
    switch (r % 5) {
    case 0: p.temperature = 0; break; /* greedy: argmax's */
    case 1: break;                    /* the case's */
    case 2: p.top_k = t->top_k / 3 + 1, p.temperature *= 0.5f, p.top_p = 1.0f; break;
    case 3: p.top_k = 0; break;                                   /* "all": the CPU's */
    default: p.top_k = t->top_k + 1, p.temperature = 1.3f; break; /* above k_max */
    }
    return p;
}

static int boundary_draws, draws, not_argmax, skipped_rows;

static void run_sample_case(const scase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    uint32_t stride = t->stride ? t->stride : t->n, k_max = (uint32_t)t->top_k;
    size_t nl = (size_t)(t->rows - 1) * stride + t->n;
    float *l = malloc(nl * 4);
    cvk_sample_row *prm = malloc(t->rows * sizeof *prm);
    uint32_t *got = malloc(t->rows * 4);
    int32_t *want = malloc(t->rows * 4);

    cvk_sample_pipes p;
    if (cvk_sample_pipelines(&p, &vk->dev, vk->pcache.cache, t->wg)) fail_msg("%s", cd_errmsg());
    cvk_buffer bl, bs, bp, bo;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, nl * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(
        cvk_buffer_create(&vk->mem, &bs, cvk_sample_scratch_bytes(&p, t->n, t->rows, k_max), 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bp, t->rows * sizeof *prm, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bo, t->rows * 4, 4, CVK_MEM_DEVICE), 0);
    cvk_sample_args a = {.logits = cvk_view_whole(&bl),
                         .scratch = cvk_view_whole(&bs),
                         .params = cvk_view_whole(&bp),
                         .out = cvk_view_whole(&bo),
                         .n = t->n,
                         .rows = t->rows,
                         .stride = t->stride,
                         .k_max = k_max};
    assert_int_equal(cvk_cmd_begin_reusable(&vk->cmd), 0);
    if (cvk_sample(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);

    sampler s; /* the uniform case: sampler_sample itself is the reference */
    sampler_params sp = {.temperature = t->temperature, .top_k = t->top_k, .top_p = t->top_p, .seed = seed};
    assert_int_equal(sampler_init(&s, sp, (int32_t)t->n), 0);
    for (int round = 0; round < 3; round++) { /* replays: new logits, parameters and u, same recording */
        for (uint32_t row = 0; row < t->rows; row++) {
            float *lr = l + (size_t)row * stride;
            fill(&r, lr, row + 1 < t->rows ? stride : t->n, t->pat);
            for (uint32_t i = 0; i < t->n; i++) lr[i] *= t->scale;
            prm[row] = row_params(t, (uint32_t)round + row);
            got[row] = UNTOUCHED;
            if (!t->mixed) {
                rng next = s.rng; /* the u sampler_sample is about to draw */
                prm[row].u = rng_f32(&next);
                want[row] = sampler_sample(&s, lr);
                assert_int_equal(ref_sample(lr, (int32_t)t->n, t->top_k, t->temperature, t->top_p, prm[row].u),
                                 want[row]);
            } else if (cvk_sample_row_on_device(prm[row].temperature, prm[row].top_k, k_max)) {
                prm[row].u = rng_f32(&r);
                want[row] =
                    ref_sample(lr, (int32_t)t->n, prm[row].top_k, prm[row].temperature, prm[row].top_p, prm[row].u);
            } else {
                want[row] = (int32_t)UNTOUCHED;
            }
        }
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bl), l), 0);
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bp), prm), 0);
        assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bo), got), 0);
        assert_int_equal(cvk_stager_flush(&vk->stager), 0);
        assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
        assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bo), got), 0);
        for (uint32_t row = 0; row < t->rows; row++) {
            const float *lr = l + (size_t)row * stride;
            const cvk_sample_row *q = &prm[row];
            if (want[row] == (int32_t)UNTOUCHED) {
                if (got[row] != UNTOUCHED)
                    fail_msg("row %u (T=%g top_k=%d) not for the device was written", row, q->temperature, q->top_k);
                skipped_rows++;
                continue;
            }
            draws++;
            not_argmax += want[row] != sampler_argmax(lr, (int32_t)t->n);
            if (got[row] == (uint32_t)want[row]) continue;
            const double d = 1e-5;
            int32_t near[4] = {ref_sample(lr, (int32_t)t->n, q->top_k, q->temperature, q->top_p, q->u - d),
                               ref_sample(lr, (int32_t)t->n, q->top_k, q->temperature, q->top_p, q->u + d),
                               ref_sample(lr, (int32_t)t->n, q->top_k, q->temperature, q->top_p - d, q->u),
                               ref_sample(lr, (int32_t)t->n, q->top_k, q->temperature, q->top_p + d, q->u)};
            bool ok = false;
            for (int j = 0; j < 4; j++) ok |= got[row] == (uint32_t)near[j];
            if (!ok)
                fail_msg("n=%u top_k=%d T=%g top_p=%g wg=%u round %d row %u (u=%.9g): sampled %u, want %d", t->n,
                         q->top_k, q->temperature, q->top_p, t->wg, round, row, q->u, got[row], want[row]);
            boundary_draws++;
        }
    }
    sampler_free(&s);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_sample_pipelines_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bl);
    cvk_buffer_destroy(&vk->mem, &bs);
    cvk_buffer_destroy(&vk->mem, &bp);
    cvk_buffer_destroy(&vk->mem, &bo);
    free(l), free(prm), free(got), free(want);
}

static void test_sample_push_layout_matches_glsl(void **state) {
    (void)state;
    /* struct Row in the shader: four 4-byte scalars, std430 */
    _Static_assert(sizeof(cvk_sample_row) == 16 && offsetof(cvk_sample_row, top_k) == 4 &&
                       offsetof(cvk_sample_row, top_p) == 8 && offsetof(cvk_sample_row, u) == 12,
                   "cvk_sample_row mirrors the shader's Row");
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_sample_topk, cinder_spv_sample_topk_size, &si), 0);
    const uint32_t want[] = {offsetof(cvk_sample_push, n), offsetof(cvk_sample_push, rows),
                             offsetof(cvk_sample_push, stride), offsetof(cvk_sample_push, n_chunks),
                             offsetof(cvk_sample_push, k_max)};
    assert_int_equal(si.n_push, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_sample_push));
    assert_int_equal(si.n_bindings, 4);
}

static void test_sample(void **state) {
    (void)state;
    const scase cases[] = {
        /* Qwen3's recommended settings over its vocabulary */
        {.n = 151936, .rows = 8, .wg = 256, .top_k = 20, .temperature = 0.6f, .top_p = 0.95f, .scale = 1.0f},
        {.n = 151936, .rows = 8, .wg = 256, .top_k = 20, .temperature = 0.7f, .top_p = 0.8f, .scale = 0.3f},
        {.n = 151936,
         .rows = 2,
         .stride = 151936 + 16,
         .wg = 128,
         .top_k = 256,
         .temperature = 1.0f,
         .top_p = 1.0f,
         .scale = 0.2f},
        {.n = 151936,
         .rows = 4,
         .wg = 256,
         .top_k = 40,
         .temperature = 2.0f,
         .top_p = 0.5f,
         .scale = 0.1f,
         .pat = TIES},
        {.n = 100003, .rows = 5, .wg = 1024, .top_k = 1, .temperature = 1.0f, .top_p = 1.0f, .scale = 1.0f},
        {.n = 7, .rows = 6, .wg = 32, .top_k = 20, .temperature = 1.0f, .top_p = 1.0f, .scale = 1.0f},
        {.n = 1, .rows = 2, .wg = 32, .top_k = 5, .temperature = 0.5f, .top_p = 0.9f, .scale = 1.0f},
        {.n = 2049,
         .rows = 9,
         .wg = 256,
         .top_k = 64,
         .temperature = 0.8f,
         .top_p = 0.9f,
         .scale = 0.1f,
         .pat = FEW_VALUES},
        {.n = 5000, .rows = 7, .wg = 32, .top_k = 256, .temperature = 1.5f, .top_p = 0.99f, .scale = 0.05f},
        /* a batch of requests with their own settings (the engine's decode step) */
        {.n = 151936,
         .rows = 11,
         .wg = 256,
         .top_k = 40,
         .temperature = 0.8f,
         .top_p = 0.95f,
         .scale = 0.5f,
         .mixed = true},
        {.n = 3001,
         .rows = 13,
         .wg = 64,
         .top_k = 256,
         .temperature = 0.6f,
         .top_p = 0.9f,
         .scale = 0.1f,
         .pat = TIES,
         .mixed = true},
    };
    boundary_draws = draws = not_argmax = skipped_rows = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_sample_case(&cases[i], 1100 + i);
    printf("  %d draws (%d not the argmax), %d at a float-rounding boundary, %d rows left alone\n", draws, not_argmax,
           boundary_draws, skipped_rows);
    assert_true(skipped_rows >= 3 * 2 * (11 + 13) / 5); /* the mixed cases' greedy, "all" and over-k_max rows */
    assert_true(boundary_draws * 50 <= draws);
    assert_true(not_argmax * 3 >= draws); /* the draws do exercise sampling */
}

static void test_sample_bad_args(void **state) {
    (void)state;
    cvk_sample_pipes p;
    assert_int_equal(cvk_sample_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 48), -1);
    assert_int_equal(cvk_sample_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 32), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 1 << 20, 4, CVK_MEM_DEVICE), 0);
    cvk_view v = cvk_view_whole(&b);
    cvk_sample_args a = {.logits = v, .scratch = v, .params = v, .out = v, .n = 1000, .rows = 1, .k_max = 0};
    assert_int_equal(cvk_sample(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.k_max = CVK_SAMPLE_MAX_K + 1;
    assert_int_equal(cvk_sample(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.k_max = 20, a.n = 32 * 8 * 1024 + 1; /* 1025 chunks of 256 */
    assert_int_equal(cvk_sample(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.n = 300000; /* fits the chunks, not the buffer */
    assert_int_equal(cvk_sample(&vk->cmd, &vk->dpool, &p, &a), -1);
    cvk_sample_pipelines_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_vocab),
        cmocka_unit_test(test_awkward_sizes),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_sample_push_layout_matches_glsl),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_sample_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
