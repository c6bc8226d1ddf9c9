/* The device KV page pool (kv/kv_pool.h): reserving a sequence's pages, copy on write of a
 * shared partly filled last page on the device (the bytes of the copy are checked), and the
 * all-or-nothing failures: too few pages, and a copy whose submission fails (injected). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "runtime/base/error.h"
#include "runtime/vk/vk_fault.h"
#include "tests/vk_fixture.h"

#define PT 4u /* tokens per page */

static void make_pool(kv_pool *p, uint32_t n_pages) {
    kv_layout lay;
    if (kv_layout_init(&lay, 2, 1, 8, PT) || kv_pool_init(p, vk, &lay, n_pages * PT)) fail_msg("%s", cd_errmsg());
    assert_int_equal(p->pages.n_pages, n_pages);
    assert_int_equal(kv_pages_free_count(&p->pages), n_pages);
}

/* Every page's bytes = its id in every half (so a copy shows up as the source's id). */
static void stamp_pages(kv_pool *p) {
    uint64_t halves = p->buf.size / 2, per = p->lay.page_bytes / 2;
    uint16_t *h = malloc(p->buf.size);
    for (uint64_t i = 0; i < halves; i++) h[i] = (uint16_t)(i / per);
    if (cvk_stager_upload(&vk->stager, cvk_view_whole(&p->buf), h) || cvk_stager_flush(&vk->stager))
        fail_msg("%s", cd_errmsg());
    free(h);
}

static uint16_t page_stamp(kv_pool *p, uint32_t page) {
    uint16_t *h = malloc(p->buf.size);
    if (cvk_stager_download(&vk->stager, cvk_view_whole(&p->buf), h)) fail_msg("%s", cd_errmsg());
    uint64_t per = p->lay.page_bytes / 2;
    uint16_t first = h[page * per], last = h[page * per + per - 1];
    free(h);
    assert_int_equal(first, last); /* the whole page, not part of it */
    return first;
}

static void test_extend_and_cow(void **state) {
    (void)state;
    kv_pool p;
    make_pool(&p, 6);
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    assert_int_equal(kv_pool_pages_needed(&p, &a, 6), 2);
    assert_int_equal(kv_pool_extend(&p, &a, 6), 0); /* tokens 0..5: a whole page and half of one */
    assert_int_equal(a.n_pages, 2);
    assert_int_equal(kv_pages_free_count(&p.pages), 4);
    stamp_pages(&p);
    assert_int_equal(kv_seq_fork(&p.pages, &a, &b), 0); /* b shares both pages */
    uint32_t shared_tail = a.pages[1];
    /* b's next token goes into the shared partial page: one fresh page, the copy first */
    assert_int_equal(kv_pool_pages_needed(&p, &b, 1), 1);
    assert_int_equal(kv_pool_extend(&p, &b, 1), 0);
    assert_int_not_equal(b.pages[1], shared_tail);
    assert_int_equal(b.pages[0], a.pages[0]);
    assert_int_equal(page_stamp(&p, b.pages[1]), shared_tail); /* copied on the device */
    assert_int_equal(kv_page_refs(&p.pages, shared_tail), 1);  /* a's again */
    assert_int_equal(b.n_tokens, 7);
    /* a whole page more than the pool holds: refused, nothing taken */
    uint32_t free_before = kv_pages_free_count(&p.pages);
    assert_int_equal(kv_pool_extend(&p, &a, 4 * PT), -1);
    assert_non_null(strstr(cd_errmsg(), "KV pool exhausted"));
    assert_int_equal(kv_pages_free_count(&p.pages), free_before);
    assert_int_equal(a.n_tokens, 6);
    if (kv_pages_check(&p.pages)) fail_msg("%s", cd_errmsg());
    kv_seq_free(&p.pages, &a);
    kv_seq_free(&p.pages, &b);
    assert_int_equal(kv_pages_free_count(&p.pages), 6);
    kv_pool_free(&p);
    kv_pool_free(&p); /* zeroed is fine */
}

/* The copy's submission fails: the sequence and every page's references are as before. */
static void test_failed_copy_changes_nothing(void **state) {
    (void)state;
    kv_pool p;
    make_pool(&p, 4);
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    assert_int_equal(kv_pool_extend(&p, &a, 5), 0);
    assert_int_equal(kv_seq_fork(&p.pages, &a, &b), 0);
    kv_seq before = b;
    uint32_t pages[2] = {b.pages[0], b.pages[1]}, refs[4];
    for (uint32_t i = 0; i < 4; i++) refs[i] = kv_page_refs(&p.pages, i);
    cvk_fault.submit_at = 0;
    assert_int_equal(kv_pool_extend(&p, &b, 3), -1);
    cvk_fault.submit_at = -1;
    assert_true(cvk_fault.hit);
    cvk_fault.hit = false;
    assert_int_equal(b.n_tokens, before.n_tokens);
    assert_int_equal(b.n_pages, before.n_pages);
    assert_memory_equal(b.pages, pages, sizeof pages);
    for (uint32_t i = 0; i < 4; i++) assert_int_equal(kv_page_refs(&p.pages, i), refs[i]);
    if (kv_pages_check(&p.pages)) fail_msg("%s", cd_errmsg());
    assert_int_equal(kv_pool_extend(&p, &b, 3), 0); /* and works once the device does */
    kv_seq_free(&p.pages, &a);
    kv_seq_free(&p.pages, &b);
    kv_pool_free(&p);
}

static void test_bad_init(void **state) {
    (void)state;
    kv_pool p;
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 2, 1, 8, PT), 0);
    assert_int_equal(kv_pool_init(&p, vk, &lay, 0), -1);
    assert_non_null(strstr(cd_errmsg(), "no pages"));
    kv_pool_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extend_and_cow),
        cmocka_unit_test(test_failed_copy_changes_nothing),
        cmocka_unit_test(test_bad_init),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
