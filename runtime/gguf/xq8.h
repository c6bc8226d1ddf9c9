/* The integer family's arithmetic, on the CPU: x quantized to int8 blocks, and a weight row's dot
 * product with it as exact integer block sums (the GPU's is shaders/xq8.glsl; both give the same
 * bits, tests/test_vk_xq8.c).
 *
 * x (one token's vector of n floats, n a multiple of 32) is cut into blocks of 32. A block's
 * largest magnitude is amax = m * 2^E with m in [1, 2), j = the top 3 bits of m's fraction, and
 * its values stand for q * mult * d with mult = 9 + j and d = 2^(E - 10): amax / (mult * d) lies in
 * [113.8, 128), and
 *
 *     q = clamp(roundEven(x * c), -127, 127),   c = xq8_recip[j] * 2^(10 - E)
 *
 * with xq8_recip[j] the float nearest 1 / (9 + j), a constant both sides share. The step is at
 * most 1.12x llama.cpp's amax / 127 (which needs a division, whose rounding differs between
 * compilers). A block whose largest magnitude is below 2^-116 (biased exponent < 11) is all
 * zeros with d = 0; one holding an infinity or a NaN gets d = NaN and q = 0, so the outputs it
 * feeds are NaN, as in the float family.
 *
 * The dot of a row of Q8_0, Q4_K or Q6_K weights with such an x, in the family's canonical
 * order: per 32-weight chunk c (one Q8_0 block, one Q4_K sub-block, two Q6_K scale groups) exact
 * int32 sums of the weights' integer levels times q (times mult and the weights' integer
 * scales), and
 *
 *     y = 0;  for c in k order:  y = y + d_x[c] * v_c  (Q4_K then  y = y - d_x[c] * u_c)
 *
 *   Q8_0  v_c = d * float(mult * isum)
 *   Q6_K  v_c = d * float(mult * (sc0 * isum0 + sc1 * isum1))      (the two 16-weight groups)
 *   Q4_K  v_c = d * float(mult * sc * isum),  u_c = dmin * float(mult * m * sum_q)
 *
 * Why this shape: no float multiply feeds an add except by a power of two (d_x), which is exact,
 * so a compiler that fuses a * b + c into an fma (ACO) and one that does not (llvmpipe, which
 * splits even an explicit fma(): measured here) give the same bits; every other step is an exact
 * integer, a conversion or one product, each correctly rounded. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/gguf/quant.h"

#define XQ8_BLOCK 32

typedef struct xq8_block {
    float d;      /* 2^(E - 10), 0 (a zero block) or NaN (a block with a non-finite x) */
    int32_t mult; /* 9 + j (0 for a zero or non-finite block) */
    int32_t sum;  /* sum of q */
    int8_t q[XQ8_BLOCK];
} xq8_block;

/* The bits of the floats nearest 1 / 9, 1 / 10, ... 1 / 16 (shaders/xq8_quantize.comp has them too). */
extern const uint32_t xq8_recip[8];
/* The types the integer family computes with. */
bool xq8_type(enum qtype t);
/* n / 32 blocks of x into out. */
void xq8_quantize(const float *x, int64_t n, xq8_block *out);
/* One row of n weights of type t (xq8_type) against x's n / 32 blocks. */
float xq8_dot_row(enum qtype t, const void *row, const xq8_block *x, int64_t n);
