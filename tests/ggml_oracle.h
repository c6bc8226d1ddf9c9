/* The real ggml as an oracle: libggml-base.so from node-llama-cpp's prebuilt binaries
 * (installed by scripts/setup.sh), opened with dlopen so the tests need no link-time
 * dependency on it. Header-only; include from one test file.
 *
 * Tests that compare against ggml must FAIL, not skip, when the library is missing: a silent
 * skip would let a layout error through. ggml_oracle_get() fails the running cmocka test with
 * a message that says how to install it (scripts/setup.sh). CINDER_GGML_BASE overrides the path. */
#pragma once
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/gguf/quant.h"
#include "tests/test_util.h"

#define GGML_ORACLE_LIB "third_party/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so"

/* GGML_TYPE_COUNT in the oracle's ggml.h (node-llama-cpp's bundle): its type traits end there. */
#define GGML_ORACLE_TYPE_COUNT 43

typedef void (*ggml_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*ggml_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct ggml_oracle {
    void *lib;
    /* quant blocks, in ggml's own declarations' argument order */
    ggml_to_float_fn dequantize_row_q8_0, dequantize_row_q4_K, dequantize_row_q5_K, dequantize_row_q6_K;
    ggml_from_float_fn quantize_row_q8_0_ref, quantize_row_q4_K_ref, quantize_row_q5_K_ref, quantize_row_q6_K_ref;
    ggml_to_float_fn dequantize_row_q4_0, dequantize_row_q4_1, dequantize_row_q5_0, dequantize_row_q5_1,
        dequantize_row_q2_K, dequantize_row_q3_K;
    ggml_from_float_fn quantize_row_q4_0_ref, quantize_row_q4_1_ref, quantize_row_q5_0_ref, quantize_row_q5_1_ref,
        quantize_row_q2_K_ref, quantize_row_q3_K_ref;
    ggml_to_float_fn dequantize_row_iq4_nl, dequantize_row_iq4_xs, dequantize_row_iq3_xxs, dequantize_row_iq3_s;
    ggml_to_float_fn dequantize_row_iq2_xxs, dequantize_row_iq2_xs, dequantize_row_iq2_s;
    ggml_to_float_fn dequantize_row_iq1_s, dequantize_row_iq1_m;
    ggml_to_float_fn dequantize_row_mxfp4;
    ggml_from_float_fn quantize_row_mxfp4_ref;
    /* what llama-quantize calls for every type (the IQ4 types' _ref is a weaker search) */
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                             const float *imatrix);
    /* scalar formats (ggml_fp16_t and ggml_bf16_t are 16-bit structs/ints: uint16_t in the ABI) */
    void (*fp16_to_fp32_row)(const uint16_t *x, float *y, int64_t n);
    void (*fp32_to_fp16_row)(const float *x, uint16_t *y, int64_t n);
    void (*bf16_to_fp32_row)(const uint16_t *x, float *y, int64_t n);
    void (*fp32_to_bf16_row_ref)(const float *x, uint16_t *y, int64_t n);
    uint16_t (*fp32_to_fp16)(float f);
    float (*fp16_to_fp32)(uint16_t h);
    /* type traits, indexed by ggml's type number */
    int64_t (*blck_size)(int type);
    size_t (*type_size)(int type);
    const char *(*type_name)(int type);
} ggml_oracle;

/* Loads the library and every symbol above; on failure writes the reason into err. */
static inline int ggml_oracle_load(ggml_oracle *o, char *err, size_t errlen) {
    const char *path = getenv("CINDER_GGML_BASE");
    if (!path) path = tu_src_path(GGML_ORACLE_LIB);
    o->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!o->lib) {
        snprintf(err, errlen, "cannot load ggml oracle %s (%s): run scripts/setup.sh", path, dlerror());
        return -1;
    }
#define ORACLE_SYM(field, sym)                                                                                         \
    do {                                                                                                               \
        *(void **)&o->field = dlsym(o->lib, sym);                                                                      \
        if (!o->field) {                                                                                               \
            snprintf(err, errlen, "ggml oracle %s lacks symbol %s: run scripts/setup.sh", path, sym);                  \
            return -1;                                                                                                 \
        }                                                                                                              \
    } while (0)
    ORACLE_SYM(dequantize_row_q8_0, "dequantize_row_q8_0");
    ORACLE_SYM(dequantize_row_q4_K, "dequantize_row_q4_K");
    ORACLE_SYM(dequantize_row_q5_K, "dequantize_row_q5_K");
    ORACLE_SYM(dequantize_row_q6_K, "dequantize_row_q6_K");
    ORACLE_SYM(quantize_row_q8_0_ref, "quantize_row_q8_0_ref");
    ORACLE_SYM(quantize_row_q4_K_ref, "quantize_row_q4_K_ref");
    ORACLE_SYM(quantize_row_q5_K_ref, "quantize_row_q5_K_ref");
    ORACLE_SYM(quantize_row_q6_K_ref, "quantize_row_q6_K_ref");
#define ORACLE_PAIR(t)                                                                                                 \
    ORACLE_SYM(dequantize_row_##t, "dequantize_row_" #t);                                                              \
    ORACLE_SYM(quantize_row_##t##_ref, "quantize_row_" #t "_ref")
    ORACLE_PAIR(q4_0);
    ORACLE_PAIR(q4_1);
    ORACLE_PAIR(q5_0);
    ORACLE_PAIR(q5_1);
    ORACLE_PAIR(q2_K);
    ORACLE_PAIR(q3_K);
#undef ORACLE_PAIR
    ORACLE_SYM(dequantize_row_iq4_nl, "dequantize_row_iq4_nl");
    ORACLE_SYM(dequantize_row_iq4_xs, "dequantize_row_iq4_xs");
    ORACLE_SYM(dequantize_row_iq3_xxs, "dequantize_row_iq3_xxs");
    ORACLE_SYM(dequantize_row_iq3_s, "dequantize_row_iq3_s");
    ORACLE_SYM(dequantize_row_iq2_xxs, "dequantize_row_iq2_xxs");
    ORACLE_SYM(dequantize_row_iq2_xs, "dequantize_row_iq2_xs");
    ORACLE_SYM(dequantize_row_iq2_s, "dequantize_row_iq2_s");
    ORACLE_SYM(dequantize_row_iq1_s, "dequantize_row_iq1_s");
    ORACLE_SYM(dequantize_row_iq1_m, "dequantize_row_iq1_m");
    ORACLE_SYM(dequantize_row_mxfp4, "dequantize_row_mxfp4");
    ORACLE_SYM(quantize_row_mxfp4_ref, "quantize_row_mxfp4_ref"); /* what quantize_chunk runs for it */
    ORACLE_SYM(quantize_chunk, "ggml_quantize_chunk");
    ORACLE_SYM(fp16_to_fp32_row, "ggml_fp16_to_fp32_row");
    ORACLE_SYM(fp32_to_fp16_row, "ggml_fp32_to_fp16_row");
    ORACLE_SYM(bf16_to_fp32_row, "ggml_bf16_to_fp32_row");
    ORACLE_SYM(fp32_to_bf16_row_ref, "ggml_fp32_to_bf16_row_ref");
    ORACLE_SYM(fp32_to_fp16, "ggml_fp32_to_fp16");
    ORACLE_SYM(fp16_to_fp32, "ggml_fp16_to_fp32");
    ORACLE_SYM(blck_size, "ggml_blck_size");
    ORACLE_SYM(type_size, "ggml_type_size");
    ORACLE_SYM(type_name, "ggml_type_name");
#undef ORACLE_SYM
    return 0;
}

/* ggml's reference converters for a block type (NULL for the float types). */
static inline ggml_to_float_fn ggml_deq(const ggml_oracle *g, enum qtype t) {
    switch (t) {
    case QTYPE_Q8_0: return g->dequantize_row_q8_0;
    case QTYPE_Q4_K: return g->dequantize_row_q4_K;
    case QTYPE_Q5_K: return g->dequantize_row_q5_K;
    case QTYPE_Q6_K: return g->dequantize_row_q6_K;
    case QTYPE_Q4_0: return g->dequantize_row_q4_0;
    case QTYPE_Q4_1: return g->dequantize_row_q4_1;
    case QTYPE_Q5_0: return g->dequantize_row_q5_0;
    case QTYPE_Q5_1: return g->dequantize_row_q5_1;
    case QTYPE_Q2_K: return g->dequantize_row_q2_K;
    case QTYPE_Q3_K: return g->dequantize_row_q3_K;
    case QTYPE_IQ4_NL: return g->dequantize_row_iq4_nl;
    case QTYPE_IQ4_XS: return g->dequantize_row_iq4_xs;
    case QTYPE_IQ3_XXS: return g->dequantize_row_iq3_xxs;
    case QTYPE_IQ3_S: return g->dequantize_row_iq3_s;
    case QTYPE_IQ2_XXS: return g->dequantize_row_iq2_xxs;
    case QTYPE_IQ2_XS: return g->dequantize_row_iq2_xs;
    case QTYPE_IQ2_S: return g->dequantize_row_iq2_s;
    case QTYPE_IQ1_S: return g->dequantize_row_iq1_s;
    case QTYPE_IQ1_M: return g->dequantize_row_iq1_m;
    case QTYPE_MXFP4: return g->dequantize_row_mxfp4;
    default: return NULL;
    }
}

/* The process-wide oracle, loaded on first use; fails (never skips) the running cmocka test
 * when the library is unavailable. Include <cmocka.h> before this header. */
static inline const ggml_oracle *ggml_oracle_get(void) {
    static ggml_oracle o;
    static int state; /* 0 untried, 1 loaded, -1 failed */
    static char err[1024];
    if (state == 0) state = ggml_oracle_load(&o, err, sizeof err) == 0 ? 1 : -1;
    if (state < 0) fail_msg("%s", err);
    return &o;
}

/* One row through ggml_quantize_chunk (no importance matrix), as llama-quantize quantizes the
 * IQ4 types: the search their quantize_row_*_ref skips. */
static inline void oracle_chunk_iq4_nl(const float *src, void *dst, int64_t n) {
    ggml_oracle_get()->quantize_chunk(QTYPE_IQ4_NL, src, dst, 0, 1, n, NULL);
}
static inline void oracle_chunk_iq4_xs(const float *src, void *dst, int64_t n) {
    ggml_oracle_get()->quantize_chunk(QTYPE_IQ4_XS, src, dst, 0, 1, n, NULL);
}
/* The IQ3 types the same way (quantize_chunk sets up their grid search on first use). */
static inline void oracle_chunk_iq3_xxs(const float *src, void *dst, int64_t n) {
    ggml_oracle_get()->quantize_chunk(QTYPE_IQ3_XXS, src, dst, 0, 1, n, NULL);
}
static inline void oracle_chunk_iq3_s(const float *src, void *dst, int64_t n) {
    ggml_oracle_get()->quantize_chunk(QTYPE_IQ3_S, src, dst, 0, 1, n, NULL);
}

/* The IQ2 and IQ1 types need an importance matrix in ggml (IQ2_XXS, IQ2_XS and IQ1_S refuse to
 * run without one): a flat one, every weight equally important, which is what cinder's quantizer assumes. */
static inline void oracle_chunk_flat(enum qtype t, const float *src, void *dst, int64_t n) {
    static float ones[16384];
    assert_true(n <= 16384);
    for (int64_t i = 0; i < n; i++) ones[i] = 1.0f;
    ggml_oracle_get()->quantize_chunk(t, src, dst, 0, 1, n, ones);
}
static inline void oracle_chunk_iq2_xxs(const float *src, void *dst, int64_t n) {
    oracle_chunk_flat(QTYPE_IQ2_XXS, src, dst, n);
}
static inline void oracle_chunk_iq2_xs(const float *src, void *dst, int64_t n) {
    oracle_chunk_flat(QTYPE_IQ2_XS, src, dst, n);
}
static inline void oracle_chunk_iq2_s(const float *src, void *dst, int64_t n) {
    oracle_chunk_flat(QTYPE_IQ2_S, src, dst, n);
}
static inline void oracle_chunk_iq1_s(const float *src, void *dst, int64_t n) {
    oracle_chunk_flat(QTYPE_IQ1_S, src, dst, n);
}
static inline void oracle_chunk_iq1_m(const float *src, void *dst, int64_t n) {
    oracle_chunk_flat(QTYPE_IQ1_M, src, dst, n);
}

/* ggml's quantizer for a block type (NULL for the float types). */
static inline ggml_from_float_fn ggml_quant(const ggml_oracle *g, enum qtype t) {
    switch (t) {
    case QTYPE_Q8_0: return g->quantize_row_q8_0_ref;
    case QTYPE_Q4_K: return g->quantize_row_q4_K_ref;
    case QTYPE_Q5_K: return g->quantize_row_q5_K_ref;
    case QTYPE_Q6_K: return g->quantize_row_q6_K_ref;
    case QTYPE_Q4_0: return g->quantize_row_q4_0_ref;
    case QTYPE_Q4_1: return g->quantize_row_q4_1_ref;
    case QTYPE_Q5_0: return g->quantize_row_q5_0_ref;
    case QTYPE_Q5_1: return g->quantize_row_q5_1_ref;
    case QTYPE_Q2_K: return g->quantize_row_q2_K_ref;
    case QTYPE_Q3_K: return g->quantize_row_q3_K_ref;
    case QTYPE_IQ4_NL: return oracle_chunk_iq4_nl;
    case QTYPE_IQ4_XS: return oracle_chunk_iq4_xs;
    case QTYPE_IQ3_XXS: return oracle_chunk_iq3_xxs;
    case QTYPE_IQ3_S: return oracle_chunk_iq3_s;
    case QTYPE_IQ2_XXS: return oracle_chunk_iq2_xxs;
    case QTYPE_IQ2_XS: return oracle_chunk_iq2_xs;
    case QTYPE_IQ2_S: return oracle_chunk_iq2_s;
    case QTYPE_IQ1_S: return oracle_chunk_iq1_s;
    case QTYPE_IQ1_M: return oracle_chunk_iq1_m;
    case QTYPE_MXFP4: return g->quantize_row_mxfp4_ref;
    default: return NULL;
    }
}
