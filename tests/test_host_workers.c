/* The host's worker threads (engine/host_workers.h): every item of every job runs
 * exactly once, on a worker in range, and run returns only when all have; jobs of every size
 * back to back (0, 1, fewer items than workers, many), a pool of no helpers, free right after
 * init and after work. Under ASan in the test script as well. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/host_workers.h"

typedef struct tally {
    atomic_uint *done; /* per item */
    atomic_uint *by;   /* per worker */
    uint32_t workers;
    atomic_uint bad;
} tally;

static void count_item(void *ctx, uint32_t item, uint32_t worker) {
    tally *t = ctx;
    atomic_fetch_add(&t->done[item], 1);
    if (worker >= t->workers) atomic_fetch_add(&t->bad, 1);
    else atomic_fetch_add(&t->by[worker], 1);
    for (volatile int spin = 0; spin < 200; spin++) {} /* a little work, so workers overlap */
}

static void run_jobs(uint32_t helpers) {
    host_workers w;
    host_workers_init(&w, helpers);
    assert_true(host_workers_count(&w) <= helpers + 1);
    enum { MAX = 300 };
    tally t = {.done = calloc(MAX, sizeof *t.done),
               .by = calloc(host_workers_count(&w), sizeof *t.by),
               .workers = host_workers_count(&w)};
    assert_true(t.done && t.by);
    uint32_t others = 0;
    for (uint32_t job = 0; job < 2000; job++) {
        uint32_t n = job % 7 == 0 ? 0 : job % 5 == 0 ? 1 : job % 3 == 0 ? helpers : job % MAX;
        for (uint32_t i = 0; i < MAX; i++) atomic_store(&t.done[i], 0);
        host_workers_run(&w, n, count_item, &t);
        for (uint32_t i = 0; i < MAX; i++)
            if (atomic_load(&t.done[i]) != (i < n))
                fail_msg("job %u: item %u ran %u times", job, i, atomic_load(&t.done[i]));
    }
    assert_int_equal(atomic_load(&t.bad), 0);
    for (uint32_t k = 1; k < t.workers; k++) others += atomic_load(&t.by[k]);
    if (t.workers > 1) assert_true(others > 0); /* the helpers did take items */
    host_workers_free(&w);
    host_workers_free(&w); /* zeroed: fine */
    free(t.done), free(t.by);
}

static void test_helpers(void **state) {
    (void)state;
    run_jobs(3);
    run_jobs(1);
}

static void test_no_helpers(void **state) {
    (void)state;
    run_jobs(0);
    host_workers w;
    host_workers_init(&w, 5);
    host_workers_free(&w); /* never ran */
    host_workers z = {0};
    host_workers_free(&z);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_no_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
