/* IEEE half and bfloat16 conversions, round-to-nearest-even, NaN preserved (as ggml does). */
#pragma once
#include <stdint.h>
#include <string.h>

static inline float fp32_from_bits(uint32_t w) {
    float f;
    memcpy(&f, &w, 4);
    return f;
}
static inline uint32_t fp32_to_bits(float f) {
    uint32_t w;
    memcpy(&w, &f, 4);
    return w;
}

static inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) { /* inf, or NaN made quiet (as ggml's and the hardware conversions do) */
        return fp32_from_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    }
    if (exp == 0) {
        if (man == 0) return fp32_from_bits(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return fp32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t f32_to_fp16(float f) {
    uint32_t x = fp32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;  /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00; /* rounds to inf */
    if (ax < 0x38800000u) {                      /* subnormal or zero in half */
        if (ax < 0x33000000u) return sign;       /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - 1 ... */
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t h = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static inline float bf16_to_f32(uint16_t h) { return fp32_from_bits((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t x = fp32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
