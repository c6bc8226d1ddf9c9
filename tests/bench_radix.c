/* bench_radix: match + insert of a long prompt into a populated radix tree, the figure quoted in
 * docs/PERF.md ("The radix index"). A benchmark asserts nothing, so this is a build target and
 * not a ctest test (tests/CMakeLists.txt):
 *
 *   build/tests/bench_radix [runs]       (default 100)
 *
 * The correctness checks of the same code are tests/test_radix.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix/radix.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"

static const uint8_t NS_A[RADIX_NS_BYTES] = {1};

static void die(void) {
    fprintf(stderr, "bench_radix: %s\n", cd_errmsg());
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Match + insert of a 10,000-token prompt at page_tokens 16 (a cached 1,000-token system
 * prompt, then new tokens) into a tree holding 32 other conversations; the median over `runs`
 * runs, in microseconds, and the tree's bytes per cached token. */
static void radix_bench(uint32_t runs) {
    enum { PT = 16, N = 10000, SYS = 1000, OTHERS = 32, OTHER_LEN = 4000, VOCAB = 151000 };
    radix_tree t;
    rng r;
    rng_seed(&r, 42);
    if (radix_init(&t, PT)) die();
    int32_t *ids = malloc(N * sizeof *ids), *prev = malloc(N * sizeof *prev);
    uint32_t *pages = malloc(N / PT * sizeof *pages), next_page = 0;
    double *t_match = malloc(runs * sizeof(double)), *t_insert = malloc(runs * sizeof(double));
    double *t_both = malloc(runs * sizeof(double)), *t_hit = malloc(runs * sizeof(double));
    if (!(ids && prev && pages && t_match && t_insert && t_both && t_hit)) die();
    for (uint32_t i = 0; i < SYS; i++) ids[i] = (int32_t)rng_below(&r, VOCAB);
    uint32_t first_new;
    for (uint32_t k = 0; k < OTHERS; k++) {
        for (uint32_t i = SYS; i < OTHER_LEN; i++) ids[i] = (int32_t)rng_below(&r, VOCAB);
        for (uint32_t i = 0; i < OTHER_LEN / PT; i++) pages[i] = next_page++;
        if (radix_insert(&t, NS_A, ids, OTHER_LEN, pages, &first_new)) die();
    }
    for (uint32_t run = 0; run < runs; run++) {
        memcpy(prev, ids, N * sizeof *ids);
        for (uint32_t i = SYS; i < N; i++) ids[i] = (int32_t)rng_below(&r, VOCAB);
        for (uint32_t i = 0; i < N / PT; i++) pages[i] = next_page++;
        radix_match m;
        double a = cd_now_ms();
        if (radix_match_prefix(&t, NS_A, ids, N, &m)) die();
        double b = cd_now_ms();
        if (radix_insert(&t, NS_A, ids, N, pages, &first_new)) die();
        double c = cd_now_ms();
        radix_release(&t, &m);
        t_match[run] = 1e3 * (b - a);
        t_insert[run] = 1e3 * (c - b);
        t_both[run] = 1e3 * (c - a);
        if (run) { /* a full hit: the previous prompt, all cached */
            a = cd_now_ms();
            if (radix_match_prefix(&t, NS_A, prev, N, &m)) die();
            b = cd_now_ms();
            if (m.n_tokens != N) die();
            radix_release(&t, &m);
            t_hit[run - 1] = 1e3 * (b - a);
        }
    }
    if (radix_check(&t)) die();
    double cached = (double)t.stats.pages * PT;
    printf("radix bench (page_tokens %d, %d-token prompt, %d cached, median of %u): match %.1f us + insert %.1f "
           "us = %.1f us; full-hit match %.1f us\n",
           PT, N, SYS, runs, median(t_match, runs), median(t_insert, runs), median(t_both, runs),
           runs > 1 ? median(t_hit, runs - 1) : 0.0);
    printf("radix bench: tree %.0f cached tokens in %llu nodes, %llu bytes: %.3f bytes per cached token\n", cached,
           (unsigned long long)t.stats.nodes, (unsigned long long)t.stats.bytes, (double)t.stats.bytes / cached);
    radix_free(&t);
    free(ids);
    free(prev);
    free(pages);
    free(t_match);
    free(t_insert);
    free(t_both);
    free(t_hit);
}

int main(int argc, char **argv) {
    long runs = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
    if (runs < 1 || runs > 100000) {
        fprintf(stderr, "usage: bench_radix [runs 1..100000]\n");
        return 2;
    }
    radix_bench((uint32_t)runs);
    return 0;
}
