/* Tensor element types and the quant block layouts, byte-exact to ggml's (the numbering is
 * ggml's `enum ggml_type`, which GGUF files store). One definition of each block layout,
 * pinned by static asserts; the GLSL includes in shaders/ mirror these structs and a test
 * checks the two agree.
 *
 * cinder supports F32, F16, BF16, Q8_0, Q4_K, Q5_K and Q6_K. Other ggml types are known by
 * name (so errors can say what a file holds) but are rejected when a tensor is loaded. */
#pragma once
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qtype {
    QTYPE_F32 = 0,
    QTYPE_F16 = 1,
    QTYPE_Q4_0 = 2,
    QTYPE_Q4_1 = 3,
    QTYPE_Q5_0 = 6,
    QTYPE_Q5_1 = 7,
    QTYPE_Q8_0 = 8,
    QTYPE_Q8_1 = 9,
    QTYPE_Q2_K = 10,
    QTYPE_Q3_K = 11,
    QTYPE_Q4_K = 12,
    QTYPE_Q5_K = 13,
    QTYPE_Q6_K = 14,
    QTYPE_Q8_K = 15,
    QTYPE_BF16 = 30,
    QTYPE_COUNT = 40, /* bound for tables indexed by type; ggml's numbering stays below it */
};

#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* Q8_0: 32 weights = d * q, d stored as fp16. */
typedef struct {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");

/* Q4_K: super-block of 256 = 8 sub-blocks of 32; 6-bit scales and mins packed in 12 bytes;
 * weight = d * sc * q - dmin * m with 4-bit q. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");

/* Q5_K: as Q4_K plus one high bit per weight in qh. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; weight = d * sc * (q - 32), q 6-bit split into
 * 4 low bits (ql) and 2 high bits (qh). */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

const char *qtype_name(enum qtype t);                 /* "Q4_K", "?" when unknown */
int qtype_from_name(const char *name, enum qtype *out); /* case-insensitive; 0 or -1 */
bool qtype_known(uint32_t t);       /* a ggml type whose block size we know */
bool qtype_supported(enum qtype t); /* one of the seven cinder computes with */
int64_t qtype_block_elems(enum qtype t); /* weights per block (1 for float types) */
size_t qtype_block_bytes(enum qtype t);  /* bytes per block */
/* Bytes of a row of n elements; 0 when the type is unknown or n is not a multiple of the
 * block size (callers treat 0 as an invalid row). */
size_t qtype_row_bytes(enum qtype t, int64_t n);

/* Row conversion. n must be a multiple of qtype_block_elems(t); t must be supported. */
void quant_dequantize_row(enum qtype t, const void *src, float *dst, int64_t n);
void quant_quantize_row(enum qtype t, const float *src, void *dst, int64_t n);
