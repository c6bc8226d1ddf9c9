/* shaders/kv_write.comp: f32 K/V rows into fp16 pages through block tables from kv_pages,
 * checked half by half against f32_to_fp16 at kv_layout_index; every other half of the pool
 * must be untouched. Two sequences (one forked from the other), prefill then decode-style
 * writes, strided k/v (as inside a fused projection output), the pool in one part and in
 * many. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/kv_layout.h"
#include "kv/kv_pages.h"
#include "runtime/base/error.h"
#include "runtime/base/fp16.h"
#include "runtime/base/rng.h"
#include "runtime/vk/op_kv_write.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/vk_fixture.h"



/* writes n tokens of sequence row `row` starting at position pos0 (GPU and host model) */
static void write_tokens(rng *r, const kv_layout *l, cvk_buffer *bpool, uint16_t *want, const cvk_pipeline *p,
                         const uint32_t *table, uint32_t stride, uint32_t n_rows, uint32_t row, uint32_t pos0,
                         uint32_t n, uint32_t layer, uint32_t extra) {
    uint32_t w = l->n_head_kv * l->head_dim, ks = w + extra;
    float *k = malloc((size_t)n * ks * 4), *v = malloc((size_t)n * ks * 4);
    uint32_t *loc = malloc((size_t)n * 8);
    for (size_t i = 0; i < (size_t)n * ks; i++) k[i] = rng_normal(r) * 3, v[i] = rng_normal(r) * 3;
    for (uint32_t i = 0; i < n; i++) {
        loc[2 * i] = row, loc[2 * i + 1] = pos0 + i;
        uint32_t t = pos0 + i, page = table[row * stride + t / l->page_tokens];
        for (uint32_t h = 0; h < l->n_head_kv; h++)
            for (uint32_t d = 0; d < l->head_dim; d++) {
                want[kv_layout_index(l, page, layer, 0, h, t % l->page_tokens, d)] = f32_to_fp16(k[i * ks + h * l->head_dim + d]);
                want[kv_layout_index(l, page, layer, 1, h, t % l->page_tokens, d)] = f32_to_fp16(v[i * ks + h * l->head_dim + d]);
            }
    }
    cvk_buffer bk, bv, bt, bl;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bk, (uint64_t)n * ks * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bv, (uint64_t)n * ks * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bt, (uint64_t)n_rows * stride * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bl, (uint64_t)n * 8, 8, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bk), k), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bv), v), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bt), table), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bl), loc), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_kv_write_args a = {.pool = bpool, .lay = l, .k = cvk_view_whole(&bk), .v = cvk_view_whole(&bv),
                           .table = cvk_view_whole(&bt), .loc = cvk_view_whole(&bl), .n_tokens = n, .layer = layer,
                           .table_stride = stride, .k_stride = ks, .v_stride = ks};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_kv_write(&vk->cmd, &vk->dpool, p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &bk);
    cvk_buffer_destroy(&vk->mem, &bv);
    cvk_buffer_destroy(&vk->mem, &bt);
    cvk_buffer_destroy(&vk->mem, &bl);
    free(k), free(v), free(loc);
}

static void run_case(uint32_t head_dim, uint32_t n_head_kv, uint32_t page_tokens, uint32_t n_pages,
                     uint64_t max_part, uint32_t extra, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 3, n_head_kv, head_dim, page_tokens), 0);
    kv_pages pages;
    assert_int_equal(kv_pages_init(&pages, n_pages, page_tokens), 0);
    /* shuffle the free list so tables are non-contiguous */
    for (uint32_t i = n_pages - 1; i > 0; i--) {
        uint32_t j = rng_below(&r, i + 1), x = pages.free_ids[i];
        pages.free_ids[i] = pages.free_ids[j], pages.free_ids[j] = x;
    }
    size_t n_halves = (size_t)n_pages * lay.page_halves;
    uint16_t *want = malloc(n_halves * 2), *got = malloc(n_halves * 2);
    for (size_t i = 0; i < n_halves; i++) want[i] = (uint16_t)(0x7c01 + i % 7); /* NaN patterns: untouched */
    uint64_t saved = vk->mem.max_part;
    if (max_part) vk->mem.max_part = max_part;
    cvk_buffer bpool;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpool, n_halves * 2, lay.page_bytes, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    if (max_part) assert_true(bpool.n_parts > 2);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bpool), want), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_pipeline p;
    if (cvk_kv_write_pipeline(&p, &vk->dev, vk->pcache.cache, head_dim, 0)) fail_msg("%s", cd_errmsg());

    /* a prefill of 37 tokens into sequence 0, for two layers; b forks it, then both decode */
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    kv_cow cow;
    uint32_t stride = 64, table[2 * 64] = {0};
    assert_int_equal(kv_seq_append(&pages, &a, 37, &cow), 0);
    memcpy(table, a.pages, a.n_pages * 4);
    write_tokens(&r, &lay, &bpool, want, &p, table, stride, 2, 0, 0, 37, 0, extra);
    write_tokens(&r, &lay, &bpool, want, &p, table, stride, 2, 0, 0, 37, 2, extra);
    assert_int_equal(kv_seq_fork(&pages, &a, &b), 0);
    for (int step = 0; step < 20; step++) {
        kv_seq *s = step % 2 ? &b : &a;
        uint32_t row = step % 2, pos = s->n_tokens;
        assert_int_equal(kv_seq_append(&pages, s, 1, &cow), 0);
        if (cow.n_tokens) { /* the engine copies the page on the device; the model copies it here */
            for (uint32_t l = 0; l < lay.n_layer; l++)
                for (uint32_t kv = 0; kv < 2; kv++)
                    for (uint32_t h = 0; h < n_head_kv; h++)
                        for (uint32_t t = 0; t < cow.n_tokens; t++)
                            for (uint32_t d = 0; d < head_dim; d++)
                                want[kv_layout_index(&lay, cow.dst, l, kv, h, t, d)] =
                                    want[kv_layout_index(&lay, cow.src, l, kv, h, t, d)];
            assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bpool), want), 0);
            assert_int_equal(cvk_stager_flush(&vk->stager), 0);
        }
        memcpy(table + row * stride, s->pages, s->n_pages * 4);
        write_tokens(&r, &lay, &bpool, want, &p, table, stride, 2, row, pos, 1, step % 3, extra);
    }
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bpool), got), 0);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n_halves; i++)
        if (got[i] != want[i] && !bad++) first = i;
    if (bad) fail_msg("%zu halves differ; first at %zu: %04x, want %04x", bad, first, got[first], want[first]);
    kv_seq_free(&pages, &a);
    kv_seq_free(&pages, &b);
    assert_int_equal(pages.n_free, n_pages);
    kv_pages_free(&pages);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bpool);
    free(want), free(got);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_kv_write, cinder_spv_kv_write_size, &si), 0);
    assert_int_equal(si.n_push, 10);
    assert_int_equal(si.push_size, sizeof(cvk_kv_write_push));
    for (uint32_t i = 0; i < 10; i++) assert_int_equal(si.push_offset[i], 4 * i);
    assert_int_equal(offsetof(cvk_kv_write_push, v_stride), 36);
    assert_int_equal(si.n_bindings, 5);
}

static void test_write(void **state) {
    (void)state;
    run_case(128, 2, 16, 20, 0, 0, 1);
    run_case(64, 4, 16, 20, 0, 24, 2);   /* strided rows */
    run_case(64, 1, 5, 40, 0, 0, 3);     /* odd page size */
    run_case(128, 2, 8, 40, 64 << 10, 0, 4); /* 24 KiB pages, 2 per 64 KiB part */
}

static void test_bad_args(void **state) {
    (void)state;
    cvk_pipeline p;
    assert_int_equal(cvk_kv_write_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 63, 0), -1);
    assert_int_equal(cvk_kv_write_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64, 0), 0);
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 2, 2, 128, 16), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 2 * lay.page_bytes, lay.page_bytes, CVK_MEM_DEVICE), 0);
    cvk_kv_write_args a = {.pool = &b, .lay = &lay, .k = cvk_view_whole(&b), .v = cvk_view_whole(&b),
                           .table = cvk_view_whole(&b), .loc = cvk_view_whole(&b), .n_tokens = 1, .table_stride = 1};
    assert_int_equal(cvk_kv_write(&vk->cmd, &vk->dpool, &p, &a), -1); /* head_dim mismatch */
    assert_non_null(strstr(cd_errmsg(), "head_dim"));
    cvk_pipeline_destroy(&vk->dev, &p);
    assert_int_equal(cvk_kv_write_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 128, 0), 0);
    a.layer = 2;
    assert_int_equal(cvk_kv_write(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.layer = 0, a.k = cvk_view_range(&b, 0, 100);
    assert_int_equal(cvk_kv_write(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "fewer"));
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_write),
        cmocka_unit_test(test_bad_args),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
