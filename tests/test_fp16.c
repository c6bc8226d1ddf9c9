/* fp16 and bf16 conversions (runtime/base/fp16.h): hand-worked values, exhaustive checks
 * over all 65536 half and bfloat16 values, and f32 -> fp16 / bf16 rounding compared bit for
 * bit with the real ggml on every float whose bits are a multiple of a small stride (plus all
 * the halfway points, which are where rounding bugs live). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/fp16.h"
#include "runtime/base/rng.h"
#include "tests/ggml_oracle.h"

static int is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

/* Values worked out by hand from the IEEE binary16 definition. */
static void test_fp16_known(void **state) {
    (void)state;
    assert_true(fp16_to_f32(0x3c00) == 1.0f);
    assert_true(fp16_to_f32(0xc000) == -2.0f);
    assert_true(fp16_to_f32(0x3555) == 0x1.554p-2f);                  /* 0.333251953125 */
    assert_true(fp16_to_f32(0x7bff) == 65504.0f);                     /* largest finite */
    assert_true(fp16_to_f32(0x0400) == 0x1p-14f);                     /* smallest normal */
    assert_true(fp16_to_f32(0x03ff) == 0x1.ff8p-15f);                 /* largest subnormal: 1023 * 2^-24 */
    assert_true(fp16_to_f32(0x0001) == 0x1p-24f);                     /* smallest subnormal */
    assert_int_equal(fp32_to_bits(fp16_to_f32(0x8000)), 0x80000000u); /* -0 */
    assert_true(isinf(fp16_to_f32(0x7c00)) && fp16_to_f32(0x7c00) > 0);
    assert_true(isinf(fp16_to_f32(0xfc00)) && fp16_to_f32(0xfc00) < 0);
    /* NaNs stay NaN, keep sign and payload, and come back quiet */
    assert_int_equal(fp32_to_bits(fp16_to_f32(0x7e00)), 0x7fc00000u);
    assert_int_equal(fp32_to_bits(fp16_to_f32(0xfc01)), 0xffc02000u);

    assert_int_equal(f32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(f32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(f32_to_fp16(65519.99f), 0x7bff); /* below the halfway point to 2^16 */
    assert_int_equal(f32_to_fp16(65520.0f), 0x7c00);  /* halfway, ties to even = inf */
    assert_int_equal(f32_to_fp16(1e10f), 0x7c00);
    assert_int_equal(f32_to_fp16(-INFINITY), 0xfc00);
    assert_int_equal(f32_to_fp16(NAN), 0x7e00);
    assert_int_equal(f32_to_fp16(-NAN), 0xfe00);
    assert_int_equal(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);                   /* tie, even stays */
    assert_int_equal(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);               /* tie, odd rounds up */
    assert_int_equal(f32_to_fp16(nextafterf(1.0f + 0x1p-11f, 2.0f)), 0x3c01); /* just past the tie */
    assert_int_equal(f32_to_fp16(0x1p-25f), 0x0000);                          /* tie between 0 and 2^-24 */
    assert_int_equal(f32_to_fp16(0x1.000002p-25f), 0x0001);
    assert_int_equal(f32_to_fp16(3 * 0x1p-25f), 0x0002); /* 1.5 ulp ties to 2 */
    assert_int_equal(f32_to_fp16(0x1.ffcp-15f), 0x0400); /* rounds up into the normals */
    assert_int_equal(f32_to_fp16(0x1p-149f), 0x0000);    /* float subnormal */

    assert_true(bf16_to_f32(0x3f80) == 1.0f);
    assert_true(bf16_to_f32(0x4049) == 3.140625f);
    assert_true(bf16_to_f32(0xc2f7) == -123.5f);
    assert_int_equal(f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(f32_to_bf16(3.14159265f), 0x4049);
    assert_int_equal(f32_to_bf16(fp32_from_bits(0x3f808000u)), 0x3f80); /* tie, even stays */
    assert_int_equal(f32_to_bf16(fp32_from_bits(0x3f818000u)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(f32_to_bf16(fp32_from_bits(0x7f7fffffu)), 0x7f80); /* max float -> inf */
    assert_int_equal(f32_to_bf16(fp32_from_bits(0x7f800001u)), 0x7fc0); /* sNaN made quiet */
}

/* Every half value: to float and back is the identity (NaN: stays a NaN with its sign), and
 * the float is bit-identical to ggml's. */
static void test_fp16_exhaustive(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    static uint16_t h[65536];
    static float ours[65536], theirs[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    g->fp16_to_fp32_row(h, theirs, 65536);
    int mismatches = 0;
    for (int i = 0; i < 65536; i++) {
        ours[i] = fp16_to_f32(h[i]);
        if (fp32_to_bits(ours[i]) != fp32_to_bits(theirs[i]) && mismatches++ < 10)
            print_error("fp16 %04x: ours %08x ggml %08x\n", i, fp32_to_bits(ours[i]), fp32_to_bits(theirs[i]));
        uint16_t back = f32_to_fp16(ours[i]);
        if (is_half_nan(h[i])) {
            assert_true(isnan(ours[i]));
            assert_true(is_half_nan(back));
            assert_int_equal(back & 0x8000, h[i] & 0x8000);
        } else {
            assert_int_equal(back, h[i]);
        }
    }
    assert_int_equal(mismatches, 0);
    /* the scalar export agrees with the row one */
    for (int i = 0; i < 65536; i += 97)
        assert_int_equal(fp32_to_bits(g->fp16_to_fp32((uint16_t)i)), fp32_to_bits(theirs[i]));
}

static void test_bf16_exhaustive(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    static uint16_t h[65536];
    static float theirs[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    g->bf16_to_fp32_row(h, theirs, 65536);
    for (int i = 0; i < 65536; i++) {
        float f = bf16_to_f32(h[i]);
        assert_int_equal(fp32_to_bits(f), fp32_to_bits(theirs[i]));
        uint16_t back = f32_to_bf16(f);
        if ((h[i] & 0x7f80) == 0x7f80 && (h[i] & 0x7f)) assert_int_equal(back, h[i] | 0x40); /* NaN: quiet */
        else assert_int_equal(back, h[i]);
    }
}

/* Compares f32 -> fp16 and f32 -> bf16 with ggml on n floats; returns the mismatch count. */
static long compare_batch(const ggml_oracle *g, const float *x, int64_t n, uint16_t *a, uint16_t *b) {
    long bad = 0;
    g->fp32_to_fp16_row(x, b, n);
    for (int64_t i = 0; i < n; i++) a[i] = f32_to_fp16(x[i]);
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != b[i] && bad++ < 10)
            print_error("f32 %08x -> fp16: ours %04x ggml %04x\n", fp32_to_bits(x[i]), a[i], b[i]);
    }
    g->fp32_to_bf16_row_ref(x, b, n);
    for (int64_t i = 0; i < n; i++) a[i] = f32_to_bf16(x[i]);
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != b[i] && bad++ < 10)
            print_error("f32 %08x -> bf16: ours %04x ggml %04x\n", fp32_to_bits(x[i]), a[i], b[i]);
    }
    return bad;
}

enum { BATCH = 1 << 20 };

/* Every float whose bit pattern is a multiple of 61 (covers every exponent, both signs,
 * subnormals, infinities and NaNs; with CINDER_FP16_EXHAUSTIVE=1 in the environment, every
 * float: about a minute), then random floats near the fp16 range. */
static void test_f32_to_half_vs_ggml(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    float *x = malloc(BATCH * sizeof *x);
    uint16_t *a = malloc(BATCH * sizeof *a), *b = malloc(BATCH * sizeof *b);
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(b);
    long bad = 0, total = 0;
    const char *ex = getenv("CINDER_FP16_EXHAUSTIVE");
    uint64_t bits = 0, stride = ex && *ex == '1' ? 1 : 61;
    while (bits <= 0xffffffffull) {
        int64_t n = 0;
        for (; n < BATCH && bits <= 0xffffffffull; n++, bits += stride) x[n] = fp32_from_bits((uint32_t)bits);
        bad += compare_batch(g, x, n, a, b);
        total += n;
    }
    /* random floats whose exponent lands in or near half's range (2^-26 .. 2^17) */
    rng r;
    rng_seed(&r, 16);
    for (int rep = 0; rep < 4; rep++) {
        for (int64_t i = 0; i < BATCH; i++) {
            uint32_t e = 101 + rng_below(&r, 43), m = (uint32_t)rng_u64(&r) & 0x807fffffu;
            x[i] = fp32_from_bits(m | (e << 23));
        }
        bad += compare_batch(g, x, BATCH, a, b);
        total += BATCH;
    }
    print_message("f32 -> fp16/bf16: %ld floats compared with ggml, %ld mismatches\n", total, bad);
    assert_int_equal(bad, 0);
    free(x);
    free(a);
    free(b);
}

/* The exact halfway point between every pair of adjacent halves (and one float either side
 * of it), where round-to-nearest-even decides; also the bf16 halfway points. */
static void test_ties_vs_ggml(void **state) {
    (void)state;
    const ggml_oracle *g = ggml_oracle_get();
    enum { N = 0x7c00 * 2 * 3 * 2 };
    float *x = malloc(N * sizeof *x);
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(b);
    int64_t n = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        /* midpoint of h and h + 1 (h = 0x7bff: the midpoint of 65504 and 65536) */
        double lo = fp16_to_f32((uint16_t)h), hi = h == 0x7bff ? 65536.0 : fp16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact: halves have 11 significant bits */
        assert_true((double)mid == (lo + hi) / 2);
        for (int s = 0; s < 2; s++) {
            float v = s ? -mid : mid;
            x[n++] = v;
            x[n++] = nextafterf(v, INFINITY);
            x[n++] = nextafterf(v, -INFINITY);
            /* bf16 halfway point above the float made from h's bits in the top half */
            uint32_t w = ((uint32_t)h << 16) | 0x8000u | (s ? 0x80000000u : 0);
            x[n++] = fp32_from_bits(w);
            x[n++] = fp32_from_bits(w + 1);
            x[n++] = fp32_from_bits(w - 1);
        }
    }
    assert_int_equal(n, N);
    long bad = compare_batch(g, x, n, a, b);
    /* spot check the scalar export on the same points */
    for (int64_t i = 0; i < n; i += 101) bad += g->fp32_to_fp16(x[i]) != f32_to_fp16(x[i]);
    assert_int_equal(bad, 0);
    free(x);
    free(a);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_known),      cmocka_unit_test(test_fp16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive), cmocka_unit_test(test_f32_to_half_vs_ggml),
        cmocka_unit_test(test_ties_vs_ggml),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
