/* bench_quant: quantize and dequantize throughput of every supported type over 2^20 normal
 * weights (synthetic models quantize billions of them), beside ggml's reference quantizer for
 * the block types when the ggml oracle is installed (scripts/setup.sh). A benchmark asserts
 * nothing, so this is a build target and not a ctest test (tests/CMakeLists.txt):
 *
 *   build/tests/bench_quant [weights]       (default 1048576)
 *
 * The correctness checks of the same code are tests/test_quant.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h> /* ggml_oracle.h's test helper; the bench calls ggml_oracle_load only */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/base/rng.h"
#include "runtime/gguf/quant.h"
#include "tests/ggml_oracle.h"

static const enum qtype types[] = {QTYPE_F32,    QTYPE_F16,    QTYPE_BF16,   QTYPE_Q8_0,    QTYPE_Q4_K,  QTYPE_Q5_K,
                                   QTYPE_Q6_K,   QTYPE_Q4_0,   QTYPE_Q4_1,   QTYPE_Q5_0,    QTYPE_Q5_1,  QTYPE_Q2_K,
                                   QTYPE_Q3_K,   QTYPE_IQ4_NL, QTYPE_IQ4_XS, QTYPE_IQ3_XXS, QTYPE_IQ3_S, QTYPE_IQ2_XXS,
                                   QTYPE_IQ2_XS, QTYPE_IQ2_S,  QTYPE_IQ1_S,  QTYPE_IQ1_M,   QTYPE_MXFP4};

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

int main(int argc, char **argv) {
    long n = 1 << 20;
    if (argc > 1) n = strtol(argv[1], NULL, 10);
    if (argc > 2 || n < 256 || n % 256 || n > (1l << 30)) {
        fprintf(stderr, "usage: bench_quant [weights: a multiple of 256, up to 2^30]\n");
        return 2;
    }
    if (!getenv("CINDER_SOURCE_DIR")) setenv("CINDER_SOURCE_DIR", CINDER_SOURCE_DIR_DEFAULT, 0);
    ggml_oracle g;
    char err[1024];
    bool have_ggml = ggml_oracle_load(&g, err, sizeof err) == 0;
    if (!have_ggml) fprintf(stderr, "bench_quant: no ggml column: %s\n", err);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    uint8_t *q = malloc((size_t)n * 4);
    if (!x || !y || !q) {
        fprintf(stderr, "bench_quant: out of memory\n");
        return 1;
    }
    rng r;
    rng_seed(&r, 5);
    for (long i = 0; i < n; i++) x[i] = rng_normal(&r);
    printf("%ld weights, Mweights/s\n", n);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum qtype t = types[k];
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        quant_quantize_row(t, x, q, n);
        double qs = seconds_since(&t0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        quant_dequantize_row(t, q, y, n);
        double ds = seconds_since(&t0);
        printf("%-7s quantize %7.3g, dequantize %7.1f", qtype_name(t), n / qs / 1e6, n / ds / 1e6);
        ggml_from_float_fn gq = have_ggml ? ggml_quant(&g, t) : NULL;
        if (gq) {
            clock_gettime(CLOCK_MONOTONIC, &t0);
            gq(x, q, n);
            printf(" (ggml's reference quantizer %.3g)", n / seconds_since(&t0) / 1e6);
        }
        printf("\n");
    }
    free(x);
    free(y);
    free(q);
    return 0;
}
