/* shaders/attn_decode.comp + attn_decode_combine.comp against a CPU implementation of
 * cpu_ref.c's attention math (double dots, max-subtracted expf, double sums) over the same
 * fp16 K/V the pool holds. A batch of sequences at awkward lengths (0, 1, 15, 16, 17, 100,
 * 1000, 5000) whose block tables name shuffled, non-contiguous pages; GQA groups of 1, 2 and 8;
 * head_dim 64 and 128; 1 to 37 splits (more splits than pages: empty splits); the pool in one
 * part and in many (mem.max_part lowered); a layer other than 0; large scores. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/kv_layout.h"
#include "runtime/base/error.h"
#include "runtime/base/fp16.h"
#include "runtime/base/rng.h"
#include "runtime/vk/op_attn_decode.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"




typedef struct tcase {
    uint32_t head_dim, n_head, n_head_kv, page_tokens, n_layer, layer;
    uint32_t n_split;       /* 0: cvk_attn_decode_splits */
    uint64_t max_part;      /* 0: the device's */
    uint32_t wg;
    float q_scale;          /* 0 = 1 */
    const uint32_t *lens;
    uint32_t n_seq;
} tcase;

static void run_case(const tcase *t, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, t->n_layer, t->n_head_kv, t->head_dim, t->page_tokens), 0);
    uint32_t pt = t->page_tokens, hd = t->head_dim, max_len = 0, total_pages = 0;
    for (uint32_t s = 0; s < t->n_seq; s++) {
        max_len = t->lens[s] > max_len ? t->lens[s] : max_len;
        total_pages += (t->lens[s] + pt - 1) / pt;
    }
    uint32_t stride = (max_len + pt - 1) / pt + 1, n_pages = total_pages + total_pages / 4 + 3;
    /* pool contents: random fp16 K and V everywhere (unused pages too) */
    size_t n_halves = (size_t)n_pages * lay.page_halves;
    uint16_t *pool = malloc(n_halves * 2);
    for (size_t i = 0; i < n_halves; i++) pool[i] = f32_to_fp16(rng_normal(&r));
    /* block tables: a shuffled permutation of the pool's pages, handed out in order */
    uint32_t *perm = malloc(n_pages * 4), *table = calloc((size_t)t->n_seq * stride, 4), next = 0;
    for (uint32_t i = 0; i < n_pages; i++) perm[i] = i;
    for (uint32_t i = n_pages - 1; i > 0; i--) {
        uint32_t j = rng_below(&r, i + 1), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (uint32_t s = 0; s < t->n_seq; s++) {
        for (uint32_t i = 0; i < (t->lens[s] + pt - 1) / pt; i++) table[s * stride + i] = perm[next++];
        for (uint32_t i = (t->lens[s] + pt - 1) / pt; i < stride; i++) table[s * stride + i] = 0xdeadbeef;
    }
    size_t row = (size_t)t->n_head * hd;
    float *q = malloc(t->n_seq * row * 4), *out = calloc(t->n_seq * row, 4), *ref = calloc(t->n_seq * row, 4);
    float qs = t->q_scale ? t->q_scale : 1.0f;
    for (size_t i = 0; i < t->n_seq * row; i++) q[i] = rng_normal(&r) * qs;
    for (uint32_t s = 0; s < t->n_seq; s++)
        tu_attn_reference(&lay, pool, q + s * row, table + s * stride, t->lens[s], t->n_head, t->layer, ref + s * row);

    uint64_t saved_part = vk->mem.max_part;
    if (t->max_part) vk->mem.max_part = t->max_part;
    cvk_buffer bpool, bq, btab, blen, bpart, bout;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpool, (uint64_t)n_pages * lay.page_bytes, lay.page_bytes, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved_part;
    if (t->max_part) assert_true(bpool.n_parts > 2);
    uint32_t n_split = t->n_split ? t->n_split : cvk_attn_decode_splits(max_len, pt);
    uint64_t pbytes = cvk_attn_decode_partials_bytes(t->n_seq, t->n_head, n_split, bpool.n_parts, hd);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bq, t->n_seq * row * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &btab, (uint64_t)t->n_seq * stride * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &blen, t->n_seq * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpart, pbytes, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bout, t->n_seq * row * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bpool), pool), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bq), q), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&btab), table), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&blen), t->lens), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_attn_decode_pipes p;
    if (cvk_attn_decode_pipeline(&p, &vk->dev, vk->pcache.cache, hd, t->wg)) fail_msg("%s", cd_errmsg());
    cvk_attn_decode_args a = {.pool = &bpool, .lay = &lay, .q = cvk_view_whole(&bq), .table = cvk_view_whole(&btab),
                              .seq_lens = cvk_view_whole(&blen), .partials = cvk_view_whole(&bpart),
                              .out = cvk_view_whole(&bout), .n_seq = t->n_seq, .n_head = t->n_head,
                              .layer = t->layer, .table_stride = stride, .n_split = n_split};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_attn_decode(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bout), out), 0);

    double worst = 0;
    for (uint32_t s = 0; s < t->n_seq; s++)
        for (uint32_t h = 0; h < t->n_head; h++) {
            const float *g = out + s * row + h * hd, *w = ref + s * row + h * hd;
            double mx = 0;
            for (uint32_t d = 0; d < hd; d++) mx = fmax(mx, fabs(w[d]));
            for (uint32_t d = 0; d < hd; d++) {
                double e = fabs((double)g[d] - w[d]) / (mx + 1e-30);
                if (t->lens[s] == 0) e = fabs(g[d]);
                worst = fmax(worst, e);
                if (!(e <= 1e-3))
                    fail_msg("hd=%u heads=%u/%u pt=%u split=%u parts=%u: seq %u (len %u) head %u [%u] = %.7g, want %.7g",
                             hd, t->n_head, t->n_head_kv, pt, n_split, bpool.n_parts, s, t->lens[s], h, d, g[d], w[d]);
            }
        }
    fprintf(stderr, "  hd=%u heads=%u/%u pt=%u wg=%u splits=%u parts=%u: worst relative error %.2e\n", hd, t->n_head,
            t->n_head_kv, pt, t->wg ? t->wg : 64, n_split, bpool.n_parts, worst);

    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_attn_decode_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bpool);
    cvk_buffer_destroy(&vk->mem, &bq);
    cvk_buffer_destroy(&vk->mem, &btab);
    cvk_buffer_destroy(&vk->mem, &blen);
    cvk_buffer_destroy(&vk->mem, &bpart);
    cvk_buffer_destroy(&vk->mem, &bout);
    free(pool), free(perm), free(table), free(q), free(out), free(ref);
}

static const uint32_t awkward[] = {1, 15, 16, 17, 100, 1000, 5000, 0};

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_attn_decode, cinder_spv_attn_decode_size, &si), 0);
    assert_int_equal(si.n_push, 13);
    assert_int_equal(si.push_size, sizeof(cvk_attn_decode_push));
    for (uint32_t i = 0; i < 13; i++) assert_int_equal(si.push_offset[i], 4 * i); /* all 32-bit, in order */
    assert_int_equal(offsetof(cvk_attn_decode_push, scale), 48);
    assert_int_equal(si.n_bindings, 5);
    assert_int_equal(cvk_spirv_reflect(cinder_spv_attn_decode_combine, cinder_spv_attn_decode_combine_size, &si), 0);
    assert_int_equal(si.n_push, 3);
    assert_int_equal(si.push_size, sizeof(cvk_attn_combine_push));
    assert_int_equal(si.n_bindings, 2);
}

static void test_awkward_lengths(void **state) {
    (void)state;
    tcase c128 = {.head_dim = 128, .n_head = 4, .n_head_kv = 2, .page_tokens = 16, .n_layer = 2, .layer = 1,
                  .lens = awkward, .n_seq = 8};
    run_case(&c128, 1);
    tcase c64 = {.head_dim = 64, .n_head = 8, .n_head_kv = 1, .page_tokens = 16, .n_layer = 1, .layer = 0,
                 .lens = awkward, .n_seq = 8};
    run_case(&c64, 2);
}

static void test_splits_and_parts(void **state) {
    (void)state;
    const uint32_t splits[] = {1, 3, 37};
    for (uint32_t i = 0; i < 3; i++) {
        tcase c = {.head_dim = 128, .n_head = 2, .n_head_kv = 2, .page_tokens = 16, .n_layer = 3, .layer = 2,
                   .n_split = splits[i], .lens = awkward, .n_seq = 8};
        run_case(&c, 10 + i);
    }
    /* the pool split into parts of 1 MiB: 16 pages of 64 KiB (hd 128, 2 kv heads, 4 layers) */
    tcase p = {.head_dim = 128, .n_head = 4, .n_head_kv = 2, .page_tokens = 16, .n_layer = 4, .layer = 3,
               .max_part = 1 << 20, .lens = awkward, .n_seq = 8};
    run_case(&p, 20);
    p.n_split = 1; /* parts alone as the only split */
    run_case(&p, 21);
}

static void test_page_sizes_and_workgroups(void **state) {
    (void)state;
    const uint32_t lens[] = {1, 7, 8, 9, 33, 777, 2049};
    tcase a = {.head_dim = 64, .n_head = 4, .n_head_kv = 4, .page_tokens = 8, .n_layer = 2, .layer = 1,
               .wg = 32, .lens = lens, .n_seq = 7};
    run_case(&a, 30);
    a.page_tokens = 1, a.wg = 128;
    run_case(&a, 31);
    a.page_tokens = 48, a.wg = 256, a.head_dim = 128;
    run_case(&a, 32);
}

static void test_large_scores(void **state) {
    (void)state;
    /* scores of a few hundred: exp overflows unless the running max is subtracted */
    tcase c = {.head_dim = 128, .n_head = 4, .n_head_kv = 2, .page_tokens = 16, .n_layer = 1, .layer = 0,
               .q_scale = 30.0f, .lens = awkward, .n_seq = 8};
    run_case(&c, 40);
}

static void test_bad_args(void **state) {
    (void)state;
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 1, 2, 64, 16), 0);
    assert_int_equal(kv_layout_init(&lay, 1, 2, 63, 16), -1);
    assert_int_equal(kv_layout_init(&lay, 1, 2, 64, 16), 0);
    cvk_attn_decode_pipes p;
    assert_int_equal(cvk_attn_decode_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64, 48), -1);
    assert_int_equal(cvk_attn_decode_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 128, 64), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4 * lay.page_bytes, lay.page_bytes, CVK_MEM_DEVICE), 0);
    cvk_attn_decode_args a = {.pool = &b, .lay = &lay, .q = cvk_view_whole(&b), .table = cvk_view_whole(&b),
                              .seq_lens = cvk_view_whole(&b), .partials = cvk_view_whole(&b),
                              .out = cvk_view_whole(&b), .n_seq = 1, .n_head = 4, .table_stride = 1};
    assert_int_equal(cvk_attn_decode(&vk->cmd, &vk->dpool, &p, &a), -1); /* head_dim 128 pipelines, 64 layout */
    assert_non_null(strstr(cd_errmsg(), "head_dim"));
    cvk_attn_decode_pipeline_destroy(&vk->dev, &p);
    assert_int_equal(cvk_attn_decode_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64, 64), 0);
    a.n_head = 3;
    assert_int_equal(cvk_attn_decode(&vk->cmd, &vk->dpool, &p, &a), -1); /* 3 heads over 2 kv heads */
    a.n_head = 4, a.layer = 1;
    assert_int_equal(cvk_attn_decode(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.layer = 0, a.partials = cvk_view_range(&b, 0, 100);
    assert_int_equal(cvk_attn_decode(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "partials"));
    assert_int_equal(cvk_attn_decode_splits(1, 16), 1);
    assert_int_equal(cvk_attn_decode_splits(5000, 16), 10);
    assert_int_equal(cvk_attn_decode_splits(1u << 30, 16), 64);
    cvk_attn_decode_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_awkward_lengths),
        cmocka_unit_test(test_splits_and_parts),
        cmocka_unit_test(test_page_sizes_and_workgroups),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
