/* shaders/head_norm_rope.comp: per-head RMS norm + NeoX RoPE, Q in place and K (with V) into
 * fp16 pages, against the CPU reference (cpu_rmsnorm, cpu_rope_neox, f32_to_fp16) on random
 * rows at awkward sizes: token counts that are not a multiple of anything, positions across
 * the rope table's lo/hi split up to 262,143 (theta 1e6 and 1e4, YaRN factor 4 up to 131,071 and
 * past a 64-token original context; the rotated pairs within 2e-6 of their norm), strided rows, odd page sizes, the pool in one part and in many.
 * Pages not written must be untouched; V must be exact; a row's result must be bit-identical
 * alone and in a batch (the reduction order does not depend on the batch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/fp16.h"
#include "runtime/base/kv_layout.h"
#include "runtime/base/rng.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/model/rope.h"
#include "runtime/vk/op_head_norm_rope.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"

#define THETA 1e6f /* the bad-args test's */
#define EPS 1e-6f

typedef struct hcase {
    uint32_t head_dim, heads, tokens, extra; /* extra: floats of padding after each token's row */
    uint32_t page_tokens, n_pages;
    uint64_t max_part;       /* > 0: split the pool into parts of this size */
    uint32_t q_pos;          /* > 0: Q only, positions up to q_pos - 1 (no pages) */
    const rope_config *rope; /* NULL: Qwen3's, theta 1e6 without scaling */
} hcase;

static cvk_buffer upload(const void *data, uint64_t bytes) {
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, bytes, 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&b), data), 0);
    return b;
}

/* One dispatch (Q when pool is NULL) and back. */
static void run(const cvk_head_norm_rope_pipes *p, const cvk_head_norm_rope_args *a) {
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_head_norm_rope(&vk->cmd, &vk->dpool, p, a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
}

static void run_case(const hcase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    const uint32_t d = t->head_dim, H = t->heads, T = t->tokens, stride = H * d + t->extra;
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 2, H, d, t->page_tokens), 0);
    size_t nx = (size_t)T * stride, n_halves = (size_t)t->n_pages * lay.page_halves;
    float *x = malloc(nx * 4), *v = malloc(nx * 4), *w = malloc(d * 4), *q = malloc(nx * 4), *ref = malloc(d * 4);
    uint32_t *loc = malloc((size_t)T * 8), *table = malloc((size_t)t->n_pages * 4);
    uint16_t *want = malloc(n_halves * 2), *got = malloc(n_halves * 2);
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&r) * 2, v[i] = rng_normal(&r) * 3;
    for (uint32_t i = 0; i < d; i++) w[i] = 0.5f + rng_f32(&r);
    for (uint32_t i = 0; i < t->n_pages; i++) table[i] = t->n_pages - 1 - i; /* row 0, reversed */
    const rope_config plain = rope_config_plain(1e6f, 40960), *rope = t->rope ? t->rope : &plain;
    double freq[512], mscale;
    rope_freqs(rope, d, freq, &mscale);
    uint32_t n_pos = t->q_pos ? t->q_pos : t->n_pages * t->page_tokens;
    for (uint32_t i = 0; i < T; i++) loc[2 * i] = 0, loc[2 * i + 1] = (i * 7919u + 13u) % n_pos; /* distinct */
    if (t->q_pos) loc[1] = n_pos - 1; /* the last position the rope table holds (K's stay distinct) */
    for (size_t i = 0; i < n_halves; i++) want[i] = (uint16_t)(0x7c01 + i % 7); /* NaN patterns: untouched */

    cvk_rope_table tab;
    if (cvk_rope_table_create(&tab, &vk->mem, &vk->stager, d, freq, mscale, n_pos)) fail_msg("%s", cd_errmsg());
    uint64_t saved = vk->mem.max_part;
    if (t->max_part) vk->mem.max_part = t->max_part;
    cvk_buffer bpool;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpool, n_halves * 2, lay.page_bytes, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    if (t->max_part) assert_true(bpool.n_parts > 2);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bpool), want), 0);
    cvk_buffer bx = upload(x, nx * 4), bv = upload(v, nx * 4), bw = upload(w, d * 4), bl = upload(loc, (uint64_t)T * 8),
               bt = upload(table, (uint64_t)t->n_pages * 4);
    cvk_head_norm_rope_pipes p;
    if (cvk_head_norm_rope_pipelines(&p, &vk->dev, vk->pcache.cache, d)) fail_msg("%s", cd_errmsg());
    cvk_head_norm_rope_args a = {.x = cvk_view_whole(&bx),
                                 .w = cvk_view_whole(&bw),
                                 .loc = cvk_view_whole(&bl),
                                 .table = &tab,
                                 .tokens = T,
                                 .heads = H,
                                 .tok_stride = stride,
                                 .eps = EPS,
                                 .pool = &bpool,
                                 .lay = &lay,
                                 .v = cvk_view_whole(&bv),
                                 .pages = cvk_view_whole(&bt),
                                 .layer = 1,
                                 .table_stride = t->n_pages};
    if (!t->q_pos) run(&p, &a); /* K and V into the pages (x unchanged) */
    else
        for (size_t i = 0; i < n_halves; i++) got[i] = want[i];
    a.pool = NULL;
    run(&p, &a); /* Q in place */
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx), q), 0);
    if (!t->q_pos) assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bpool), got), 0);

    double worst = 0; /* |gpu - cpu| of each rotated pair, relative to the pair's norm */
    uint32_t k_off_by_one = 0;
    for (uint32_t i = 0; i < T; i++) {
        uint32_t pos = loc[2 * i + 1], page = table[pos / t->page_tokens], slot = pos % t->page_tokens;
        for (uint32_t h = 0; h < H; h++) {
            const float *xr = x + (size_t)i * stride + h * d;
            cpu_rmsnorm(ref, xr, w, d, EPS);
            cpu_rope_neox(ref, d, pos, freq, mscale);
            const float *qr = q + (size_t)i * stride + h * d;
            for (uint32_t e = 0; e < d / 2; e++) {
                double err = fmax(fabs((double)qr[e] - ref[e]), fabs((double)qr[e + d / 2] - ref[e + d / 2]));
                double norm = hypot(ref[e], ref[e + d / 2]) + 1e-30;
                if (err / norm > worst) worst = err / norm;
            }
            if (t->q_pos) continue;
            for (uint32_t e = 0; e < d; e++) {
                size_t ki = kv_layout_index(&lay, page, 1, 0, h, slot, e),
                       vi = kv_layout_index(&lay, page, 1, 1, h, slot, e);
                uint16_t kw = f32_to_fp16(ref[e]);
                if (got[ki] != kw) { /* the f32 results differ by ~1e-6: a rounding step, or ~1e-6 near 0 */
                    double kerr = fabs((double)fp16_to_f32(got[ki]) - ref[e]);
                    if (kerr > 1e-3 * fabs(ref[e]) + 2e-5)
                        fail_msg("token %u head %u dim %u: K %04x, want %04x", i, h, e, got[ki], kw);
                    k_off_by_one++;
                }
                got[ki] = want[ki] = kw;
                want[vi] = f32_to_fp16(v[(size_t)i * stride + h * d + e]);
            }
        }
        for (uint32_t e = H * d; e < stride; e++) /* the padding is not touched */
            assert_true(q[(size_t)i * stride + e] == x[(size_t)i * stride + e]);
    }
    char what[160];
    rope_describe(rope, what, sizeof what);
    printf("  d=%u heads=%u tokens=%u theta=%g (%s) n_pos=%u: Q error %.2g of the pair norm, %u K halves a step off\n",
           d, H, T, rope->freq_base, what, n_pos, worst, k_off_by_one);
    if (worst > 2e-6) fail_msg("Q differs from the CPU by %.3g of the pair norm", worst);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n_halves; i++)
        if (got[i] != want[i] && !bad++) first = i;
    if (bad)
        fail_msg("%zu halves differ (V, or a page not ours); first at %zu: %04x, want %04x", bad, first, got[first],
                 want[first]);
    assert_true(k_off_by_one * 100 <= (uint64_t)T * H * d);

    /* batch invariance: token T/2 alone gives the same bits as in the batch */
    uint32_t m = T / 2;
    cvk_buffer b1 = upload(x + (size_t)m * stride, (uint64_t)stride * 4), l1 = upload(loc + 2 * m, 8);
    a.x = cvk_view_whole(&b1), a.loc = cvk_view_whole(&l1), a.tokens = 1;
    run(&p, &a);
    float *one = malloc((size_t)stride * 4);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&b1), one), 0);
    assert_memory_equal(one, q + (size_t)m * stride, (size_t)H * d * 4);

    free(one);
    cvk_buffer *bufs[] = {&bpool, &bx, &bv, &bw, &bl, &bt, &b1, &l1};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
    cvk_rope_table_destroy(&vk->mem, &tab);
    cvk_head_norm_rope_pipelines_destroy(&vk->dev, &p);
    free(x), free(v), free(w), free(q), free(ref), free(loc), free(table), free(want), free(got);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_head_norm_rope, cinder_spv_head_norm_rope_size, &si), 0);
    assert_int_equal(si.n_push, 12);
    assert_int_equal(si.push_size, sizeof(cvk_head_norm_rope_push));
    for (uint32_t i = 0; i < 12; i++) assert_int_equal(si.push_offset[i], 4 * i);
    assert_int_equal(offsetof(cvk_head_norm_rope_push, page_words), 44);
    assert_int_equal(si.n_bindings, 7);
}

static void test_against_cpu(void **state) {
    (void)state;
    /* YaRN as unsloth's -128K files have it, and with a small original context so that K's
     * pages hold positions past it too (the rotations scaled by the attention factor) */
    const rope_config tenk = rope_config_plain(1e4f, 40960);
    const rope_config yarn = rope_config_yarn(1e6f, 4, 32768), yarn_small = rope_config_yarn(1e4f, 4, 64);
    const hcase cases[] = {
        {.head_dim = 128, .heads = 4, .tokens = 37, .page_tokens = 16, .n_pages = 12}, /* Qwen3's K shape */
        {.head_dim = 128, .heads = 32, .tokens = 5, .page_tokens = 16, .n_pages = 3},  /* Qwen3's Q heads */
        {.head_dim = 64,
         .heads = 3,
         .tokens = 61,
         .extra = 24,
         .page_tokens = 5,
         .n_pages = 40}, /* strided, odd pages */
        {.head_dim = 128, .heads = 2, .tokens = 29, .page_tokens = 8, .n_pages = 40, .max_part = 64 << 10}, /* parts */
        {.head_dim = 2, .heads = 1, .tokens = 3, .page_tokens = 1, .n_pages = 5}, /* the smallest head */
        /* RoPE far out: positions across the table's lo/hi split up to its end, two thetas */
        {.head_dim = 128, .heads = 3, .tokens = 33, .extra = 20, .page_tokens = 16, .n_pages = 1, .q_pos = 40960},
        {.head_dim = 64, .heads = 7, .tokens = 5, .page_tokens = 16, .n_pages = 1, .q_pos = 40001, .rope = &tenk},
        {.head_dim = 128, .heads = 32, .tokens = 2, .page_tokens = 16, .n_pages = 1, .q_pos = 262144},
        {.head_dim = 128, .heads = 3, .tokens = 17, .page_tokens = 16, .n_pages = 1, .q_pos = 131072, .rope = &yarn},
        {.head_dim = 64, .heads = 2, .tokens = 37, .page_tokens = 16, .n_pages = 16, .rope = &yarn_small},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 500 + i);
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_head_norm_rope_pipes p;
    assert_int_equal(cvk_head_norm_rope_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 63), -1);
    assert_int_equal(cvk_head_norm_rope_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 64), 0);
    cvk_rope_table tab;
    double freq[64], mscale;
    rope_config plain = rope_config_plain(THETA, 40960);
    rope_freqs(&plain, 128, freq, &mscale);
    if (cvk_rope_table_create(&tab, &vk->mem, &vk->stager, 128, freq, mscale, 64)) fail_msg("%s", cd_errmsg());
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 1 << 16, 4, CVK_MEM_DEVICE), 0);
    cvk_view bv = cvk_view_whole(&b);
    cvk_head_norm_rope_args a = {.x = bv, .w = bv, .loc = bv, .table = &tab, .tokens = 1, .heads = 1};
    assert_int_equal(cvk_head_norm_rope(&vk->cmd, &vk->dpool, &p, &a), -1); /* head_dim 64 vs the table's 128 */
    assert_non_null(strstr(cd_errmsg(), "head_dim"));
    cvk_head_norm_rope_pipelines_destroy(&vk->dev, &p);
    assert_int_equal(cvk_head_norm_rope_pipelines(&p, &vk->dev, VK_NULL_HANDLE, 128), 0);
    a.tokens = 200; /* 200 * 128 floats do not fit 64 KiB */
    assert_int_equal(cvk_head_norm_rope(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "fewer"));
    a.tokens = 1;
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 2, 2, 128, 16), 0);
    a.pool = &b, a.lay = &lay, a.v = bv, a.pages = bv, a.table_stride = 1;
    assert_int_equal(cvk_head_norm_rope(&vk->cmd, &vk->dpool, &p, &a), -1); /* 1 head, the layout's 2 */
    cvk_head_norm_rope_pipelines_destroy(&vk->dev, &p);
    cvk_rope_table_destroy(&vk->mem, &tab);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_against_cpu),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
