// Quant block layouts, mirroring runtime/gguf/quant.h (which mirrors ggml) field by field.
// tests/test_vk_get_rows.c reads the `const uint` lines below and checks each against
// sizeof/offsetof of the C structs, so the two cannot drift apart.
//
// With QB_BINDING defined before the include, it also declares byte, 16-bit and 32-bit
// views of the storage buffer at that binding (qb_u8, qb_u16, qb_u32) and per-element
// decoders reading through them; `row` arguments are byte offsets of a row in that buffer.
// Needs GL_EXT_shader_8bit_storage and GL_EXT_shader_16bit_storage (enabled by the includer).
#ifndef QUANT_BLOCKS_GLSL
#define QUANT_BLOCKS_GLSL

// Its includers are built once per weight type, with QTYPE_FIXED the enum qtype value
// (cmake/shaders.cmake, from the includer's "// weight types:" line): the decoders of the other
// types fold away in glslc, so each module holds one type's code. lavapipe translates and
// optimizes a whole module at every pipeline creation, cached binary or not.
#ifndef QTYPE_FIXED
#error "built once per weight type: cmake/shaders.cmake passes -DQTYPE_FIXED=<enum qtype>"
#endif

// enum qtype (ggml's numbering)
const uint QTYPE_F32 = 0;
const uint QTYPE_F16 = 1;
const uint QTYPE_Q4_0 = 2;
const uint QTYPE_Q4_1 = 3;
const uint QTYPE_Q5_0 = 6;
const uint QTYPE_Q5_1 = 7;
const uint QTYPE_Q8_0 = 8;
const uint QTYPE_Q2_K = 10;
const uint QTYPE_Q3_K = 11;
const uint QTYPE_Q4_K = 12;
const uint QTYPE_Q5_K = 13;
const uint QTYPE_Q6_K = 14;
const uint QTYPE_IQ2_XXS = 16;
const uint QTYPE_IQ2_XS = 17;
const uint QTYPE_IQ3_XXS = 18;
const uint QTYPE_IQ1_S = 19;
const uint QTYPE_IQ4_NL = 20;
const uint QTYPE_IQ3_S = 21;
const uint QTYPE_IQ2_S = 22;
const uint QTYPE_IQ4_XS = 23;
const uint QTYPE_IQ1_M = 29;
const uint QTYPE_BF16 = 30;
const uint QTYPE_MXFP4 = 39;

const uint QK8_0 = 32;
const uint QK_K = 256;
const uint K_SCALE_SIZE = 12;

// block_q8_0 { u16 d; i8 qs[32]; }
const uint Q8_0_BYTES = 34;
const uint Q8_0_D = 0;
const uint Q8_0_QS = 2;

// The legacy 32-weight blocks: weight i < 16 in the low nibble of qs[i], i >= 16 in the high
// nibble of qs[i - 16]; the fifth bit (Q5_0, Q5_1) is bit i of the 32-bit qh.
// block_q4_0 { u16 d; u8 qs[16]; }             d * (q - 8)
const uint Q4_0_BYTES = 18;
const uint Q4_0_D = 0;
const uint Q4_0_QS = 2;
// block_q4_1 { u16 d; u16 m; u8 qs[16]; }      d * q + m
const uint Q4_1_BYTES = 20;
const uint Q4_1_D = 0;
const uint Q4_1_M = 2;
const uint Q4_1_QS = 4;
// block_q5_0 { u16 d; u8 qh[4]; u8 qs[16]; }   d * (q - 16)
const uint Q5_0_BYTES = 22;
const uint Q5_0_D = 0;
const uint Q5_0_QH = 2;
const uint Q5_0_QS = 6;
// block_q5_1 { u16 d; u16 m; u8 qh[4]; u8 qs[16]; }   d * q + m
const uint Q5_1_BYTES = 24;
const uint Q5_1_D = 0;
const uint Q5_1_M = 2;
const uint Q5_1_QH = 4;
const uint Q5_1_QS = 8;

// block_q2_K { u8 scales[16]; u8 qs[64]; u16 d; u16 dmin; }: weight 128h + 32j + l is bits
// 2j..2j+1 of qs[32h + l]; scales[8h + 2j + l / 16] = 4-bit scale | 4-bit min << 4
const uint Q2_K_BYTES = 84;
const uint Q2_K_SCALES = 0;
const uint Q2_K_QS = 16;
const uint Q2_K_D = 80;
const uint Q2_K_DMIN = 82;
// block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; u16 d; }: as Q2_K's qs, less 4 unless
// bit 4h + j of hmask[l] is set; 6-bit scales (+ 32) packed as runtime/gguf/quant.h says
const uint Q3_K_BYTES = 110;
const uint Q3_K_HMASK = 0;
const uint Q3_K_QS = 32;
const uint Q3_K_SCALES = 96;
const uint Q3_K_D = 108;

// block_q4_K { u16 d; u16 dmin; u8 scales[12]; u8 qs[128]; }
const uint Q4_K_BYTES = 144;
const uint Q4_K_D = 0;
const uint Q4_K_DMIN = 2;
const uint Q4_K_SCALES = 4;
const uint Q4_K_QS = 16;

// block_q5_K { u16 d; u16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
const uint Q5_K_BYTES = 176;
const uint Q5_K_D = 0;
const uint Q5_K_DMIN = 2;
const uint Q5_K_SCALES = 4;
const uint Q5_K_QH = 16;
const uint Q5_K_QS = 48;

// block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; u16 d; }
const uint Q6_K_BYTES = 210;
const uint Q6_K_QL = 0;
const uint Q6_K_QH = 128;
const uint Q6_K_SCALES = 192;
const uint Q6_K_D = 208;

// The non-linear 4-bit types: level q (0..15) stands for IQ4NL_VALUES[q] (ggml's kvalues_iq4nl,
// runtime/gguf/quant.c's quant_iq4nl_values; tests/test_vk_get_rows.c checks the two agree).
// Constant data: the compilers keep it in a read-only constant segment, or in registers.
const int IQ4NL_VALUES[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
// IQ4NL_VALUES[q] as a chain of selects over constant indices: an array indexed by a per-lane
// value is a per-lane load on llvmpipe (a loop over the lanes), which made every IQ4 weight cost
// as much as a storage-buffer load there; ALU selects are cheap on every device.
int qb_iq4nl_value(uint q) {
    int v = IQ4NL_VALUES[0];
    for (uint i = 1u; i < 16u; i++) v = q == i ? IQ4NL_VALUES[i] : v;
    return v;
}
// block_iq4_nl { u16 d; u8 qs[16]; }: weight i < 16 in the low nibble of qs[i], i >= 16 in the
// high nibble of qs[i - 16] (as Q4_0); d * IQ4NL_VALUES[q]
const uint IQ4_NL_BYTES = 18;
const uint IQ4_NL_D = 0;
const uint IQ4_NL_QS = 2;
// block_iq4_xs { u16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: sub-block j (32 weights)
// is an IQ4_NL block at qs[16j] of step d * (ls - 32), ls = nibble j % 2 of scales_l[j / 2] |
// bits 2j, 2j + 1 of scales_h << 4
const uint IQ4_XS_BYTES = 136;
const uint IQ4_XS_D = 0;
const uint IQ4_XS_SCALES_H = 2;
const uint IQ4_XS_SCALES_L = 4;
const uint IQ4_XS_QS = 8;

// The 3-bit grid types (runtime/gguf/quant.h): weight i of sub-block ib (32 weights) is byte
// i % 4 of grid entry idx(group 2l + h), l = i % 32 / 8, h = i % 8 / 4, signed by bit i % 8 of
// sign byte l, times the sub-block's step. Blocks of 98 and 110 bytes: 2-aligned.
// block_iq3_xxs { u16 d; u8 qs[64]; u8 ss[32]; }: idx = qs[8 ib + 2l + h] into IQ3XXS_GRID; the
// word at ss[4 ib]: 7-bit sign fields at bits 7l (the eighth sign makes the count even), scale
// s at bits 28..31, step d * (0.5 + s) * 0.5
const uint IQ3_XXS_BYTES = 98;
const uint IQ3_XXS_D = 0;
const uint IQ3_XXS_QS = 2;
const uint IQ3_XXS_SS = 66;
// block_iq3_s { u16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]; }: idx = qs[8 ib + 2l + h]
// | bit 2l + h of qh[ib] << 8 into IQ3S_GRID; sign byte signs[4 ib + l]; step d * (1 + 2 s), s
// nibble ib % 2 of scales[ib / 2]
const uint IQ3_S_BYTES = 110;
const uint IQ3_S_D = 0;
const uint IQ3_S_QS = 2;
const uint IQ3_S_QH = 66;
const uint IQ3_S_SIGNS = 74;
const uint IQ3_S_SCALES = 106;
// The IQ2 types (quant.h): group l = i % 32 / 8 of sub-block ib is a point of a 3-level grid
// (8 two-bit codes a 16-bit entry, IQ2*_GRID holding two a word; levels 8, 25, 43), a sign per
// weight, step d * (0.5 + s) * 0.25.
// block_iq2_xxs { u16 d; u16 qs[32]; }: per sub-block 4 index bytes at 2 + 8 ib, then the word of
// 4 seven-bit sign fields and the scale in bits 28..31.
const uint IQ2_LEVELS = 0x2b1908; // 8 | 25 << 8 | 43 << 16 (quant_iq2_levels)
const uint IQ2_XXS_BYTES = 66;
const uint IQ2_XXS_QS = 2;
// block_iq2_xs { u16 d; u16 qs[32]; u8 scales[8]; }: qs[4 ib + l] = 9-bit index | sign field << 9;
// scale nibble l / 2 of scales[ib].
const uint IQ2_XS_BYTES = 74;
const uint IQ2_XS_QS = 2;
const uint IQ2_XS_SCALES = 66;
// block_iq2_s { u16 d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8]; }: index qs[4 ib + l] |
// bits 2l, 2l + 1 of qh[ib] << 8; sign byte signs[4 ib + l]; scales as IQ2_XS.
const uint IQ2_S_BYTES = 82;
const uint IQ2_S_QS = 2;
const uint IQ2_S_SIGNS = 34;
const uint IQ2_S_QH = 66;
const uint IQ2_S_SCALES = 74;
// The IQ1 types (quant.h): group l of sub-block ib is a point of IQ1S_GRID (codes as IQ2's, code
// c the value c - 1) plus a delta of +-1/8, times the step d * (2 s + 1), s a 3-bit scale.
// block_iq1_s { u16 d; u8 qs[32]; u16 qh[8]; }: index qs[4 ib + l] | bits 3l .. 3l + 2 of qh[ib]
// << 8; qh[ib] bits 12..14 the scale, bit 15 the delta's sign.
const uint IQ1_S_BYTES = 50;
const uint IQ1_S_QS = 2;
const uint IQ1_S_QH = 34;
// block_iq1_m { u8 qs[32]; u8 qh[16]; u8 scales[8]; }: index qs[4 ib + l] | bits 0..2 of nibble
// l % 2 of qh[2 ib + l / 2] << 8, bit 3 the group's delta sign; the 16-bit word scales[ib / 2]
// holds the scale of groups 0-1 at bit 6 (ib % 2), of groups 2-3 three above; the top nibble of
// word w is bits 4w .. 4w + 3 of d.
const uint IQ1_M_BYTES = 56;
const uint IQ1_M_QS = 0;
const uint IQ1_M_QH = 32;
const uint IQ1_M_SCALES = 48;

// block_mxfp4 { u8 e; u8 qs[16]; }: levels placed as in IQ4_NL; weight = 2^(e - 128) * value,
// value the doubled E2M1 float of the level (runtime/gguf/quant.h). 17-byte blocks: any alignment.
const uint MXFP4_BYTES = 17;
const uint MXFP4_E = 0;
const uint MXFP4_QS = 1;

// ggml's kvalues_mxfp4[q]: magnitude 0, 1, 2, 3 as is, then 4, 6, 8, 12 = (2 or 3) << 1 or 2;
// bit 3 the sign. Integer ALU only (no table indexed per lane: see qb_iq4nl_value).
int qb_mxfp4_value(uint q) {
    uint m = q & 7u;
    int v = int(m < 4u ? m : (2u + (m & 1u)) << ((m >> 1) - 1u));
    return (q & 8u) != 0u ? -v : v;
}
// 2^(e - 128), exactly as quant_e8m0_half builds it (subnormal below e = 2).
float qb_e8m0_half(uint e) { return uintBitsToFloat(e >= 2u ? (e - 1u) << 23 : 0x00200000u << e); }

// IQ4_XS's 6-bit scale of sub-block j less 32, from scales_h and the 4 scales_l bytes as a word.
int qb_iq4_xs_scale(uint sh, uint sl, uint j) {
    return int(((sl >> (4u * j)) & 15u) | (((sh >> (2u * j)) & 3u) << 4)) - 32; // byte j/2, nibble j%2
}

// Byte i (0..11) of 12 scale bytes held as 3 words, and get_scale_min_k4 over them: the
// values qb_scale_min_k4 reads byte by byte (no memory access: for any includer).
uint qb_wbyte(uvec3 s, uint i) { return (s[i >> 2] >> (8u * (i & 3u))) & 255u; }
uvec2 qb_scale_min_k4_w(uvec3 s, uint j) {
    if (j < 4) return uvec2(qb_wbyte(s, j) & 63u, qb_wbyte(s, j + 4) & 63u);
    uint hi_s = qb_wbyte(s, j - 4) >> 6, hi_m = qb_wbyte(s, j) >> 6, lo = qb_wbyte(s, j + 4);
    return uvec2((lo & 15u) | (hi_s << 4), (lo >> 4) | (hi_m << 4));
}

#ifdef QB_BINDING
#include "iq_grids.glsl"
layout(binding = QB_BINDING) readonly buffer QbU8 { uint8_t qb_u8[]; };
layout(binding = QB_BINDING) readonly buffer QbU16 { uint16_t qb_u16[]; };
layout(binding = QB_BINDING) readonly buffer QbU32 { uint qb_u32[]; };

uint qb_byte(uint off) { return uint(qb_u8[off]); }
int qb_sbyte(uint off) { return bitfieldExtract(int(qb_u8[off]), 0, 8); } // sign-extends
float qb_half(uint off) { return unpackHalf2x16(uint(qb_u16[off >> 1])).x; } // off even

// get_scale_min_k4: 6-bit scale and min of sub-block j (0..7) packed in 12 bytes at off.
uvec2 qb_scale_min_k4(uint off, uint j) {
    if (j < 4) return uvec2(qb_byte(off + j) & 63u, qb_byte(off + j + 4) & 63u);
    uint hi_s = qb_byte(off + j - 4) >> 6, hi_m = qb_byte(off + j) >> 6, lo = qb_byte(off + j + 4);
    return uvec2((lo & 15u) | (hi_s << 4), (lo >> 4) | (hi_m << 4));
}

float qb_q8_0(uint row, uint e) {
    uint b = row + (e / QK8_0) * Q8_0_BYTES;
    return qb_half(b + Q8_0_D) * float(qb_sbyte(b + Q8_0_QS + e % QK8_0));
}

// Q4_K: 64 weights per scale pair: low nibbles of 32 bytes, then their high nibbles.
float qb_q4_K(uint row, uint e) {
    uint b = row + (e / QK_K) * Q4_K_BYTES, i = e % QK_K, j = i / 64, hi = (i / 32) & 1u, l = i % 32;
    uvec2 sm = qb_scale_min_k4(b + Q4_K_SCALES, i / 32);
    float d = qb_half(b + Q4_K_D) * float(sm.x), m = qb_half(b + Q4_K_DMIN) * float(sm.y);
    uint q = (qb_byte(b + Q4_K_QS + 32 * j + l) >> (4 * hi)) & 15u;
    return fma(d, float(q), -m); // one rounding on every compiler (docs/kernels/matmul.md, "Numerics")
}

// Q5_K: as Q4_K plus bit (2j + hi) of qh[l] as the fifth bit.
float qb_q5_K(uint row, uint e) {
    uint b = row + (e / QK_K) * Q5_K_BYTES, i = e % QK_K, j = i / 64, hi = (i / 32) & 1u, l = i % 32;
    uvec2 sm = qb_scale_min_k4(b + Q5_K_SCALES, i / 32);
    float d = qb_half(b + Q5_K_D) * float(sm.x), m = qb_half(b + Q5_K_DMIN) * float(sm.y);
    uint q = (qb_byte(b + Q5_K_QS + 32 * j + l) >> (4 * hi)) & 15u;
    q |= ((qb_byte(b + Q5_K_QH + l) >> (2 * j + hi)) & 1u) << 4;
    return fma(d, float(q), -m); // one rounding on every compiler (docs/kernels/matmul.md, "Numerics")
}

// Q6_K: halves of 128; quarter k of a half takes the low (k < 2) or high nibble of
// ql[l + 32 * (k & 1)] and bits 2k..2k+1 of qh[l]; scale index l / 16 + 2k.
float qb_q6_K(uint row, uint e) {
    uint b = row + (e / QK_K) * Q6_K_BYTES, i = e % QK_K, h = i / 128, k = (i % 128) / 32, l = i % 32;
    uint lo = (qb_byte(b + Q6_K_QL + 64 * h + l + 32 * (k & 1u)) >> (4 * (k >> 1))) & 15u;
    uint hb = (qb_byte(b + Q6_K_QH + 32 * h + l) >> (2 * k)) & 3u;
    int q = int(lo | (hb << 4)) - 32;
    float sc = float(qb_sbyte(b + Q6_K_SCALES + 8 * h + l / 16 + 2 * k));
    return qb_half(b + Q6_K_D) * sc * float(q);
}

// The legacy blocks (Q4_0, Q4_1, Q5_0, Q5_1): block sizes, field offsets, level bias.
uint qb_legacy_bytes(uint type) {
    return type == QTYPE_Q4_0 ? Q4_0_BYTES : type == QTYPE_Q4_1 ? Q4_1_BYTES : type == QTYPE_Q5_0 ? Q5_0_BYTES : Q5_1_BYTES;
}
uint qb_legacy_qs(uint type) {
    return type == QTYPE_Q4_0 ? Q4_0_QS : type == QTYPE_Q4_1 ? Q4_1_QS : type == QTYPE_Q5_0 ? Q5_0_QS : Q5_1_QS;
}
bool qb_legacy_affine(uint type) { return type == QTYPE_Q4_1 || type == QTYPE_Q5_1; } // d * q + m
bool qb_legacy_five(uint type) { return type == QTYPE_Q5_0 || type == QTYPE_Q5_1; }
// The 32-bit qh of a Q5_0 / Q5_1 block at b (2-aligned: two 16-bit loads).
uint qb_legacy_qh(uint type, uint b) {
    uint o = (b + (type == QTYPE_Q5_0 ? Q5_0_QH : Q5_1_QH)) >> 1;
    return uint(qb_u16[o]) | (uint(qb_u16[o + 1]) << 16);
}
// The weight of level q (with the fifth bit) in a legacy block of scale d and min m: q * d is
// exact, so each form rounds once (+ m) or never, on every compiler.
float qb_legacy_weight(uint type, uint q, float d, float m) {
    if (qb_legacy_affine(type)) return fma(float(q), d, m);
    return float(int(q) - (qb_legacy_five(type) ? 16 : 8)) * d;
}

float qb_legacy(uint type, uint row, uint e) {
    uint b = row + (e / 32u) * qb_legacy_bytes(type), i = e % 32u;
    uint q = (qb_byte(b + qb_legacy_qs(type) + i % 16u) >> (4u * (i / 16u))) & 15u;
    if (qb_legacy_five(type)) q |= ((qb_legacy_qh(type, b) >> i) & 1u) << 4;
    float m = qb_legacy_affine(type) ? qb_half(b + 2u) : 0.0; // Q4_1_M == Q5_1_M == 2
    return qb_legacy_weight(type, q, qb_half(b), m);
}

// Q2_K: (d * sc) * q - dmin * m, the product exact: one rounding (fma or not).
float qb_q2_K(uint row, uint e) {
    uint b = row + (e / QK_K) * Q2_K_BYTES, i = e % QK_K, h = i / 128u, j = (i % 128u) / 32u, l = i % 32u;
    uint sc = qb_byte(b + Q2_K_SCALES + i / 16u);
    float dl = qb_half(b + Q2_K_D) * float(sc & 15u), ml = qb_half(b + Q2_K_DMIN) * float(sc >> 4);
    uint q = (qb_byte(b + Q2_K_QS + 32u * h + l) >> (2u * j)) & 3u;
    return fma(dl, float(q), -ml);
}

// Q3_K scale k (0..15) less 32, from the 12 scale bytes at off.
int qb_q3_K_scale(uint off, uint k) {
    uint lo = (qb_byte(off + k % 8u) >> (4u * (k / 8u))) & 15u, hi = (qb_byte(off + 8u + k % 4u) >> (2u * (k / 4u))) & 3u;
    return int(lo | (hi << 4)) - 32;
}

// Q3_K: (d * sc) * q, every product exact: no rounding at all.
float qb_q3_K(uint row, uint e) {
    uint b = row + (e / QK_K) * Q3_K_BYTES, i = e % QK_K, h = i / 128u, j = (i % 128u) / 32u, l = i % 32u;
    int q = int((qb_byte(b + Q3_K_QS + 32u * h + l) >> (2u * j)) & 3u);
    if (((qb_byte(b + Q3_K_HMASK + l) >> (4u * h + j)) & 1u) == 0u) q -= 4;
    return qb_half(b + Q3_K_D) * float(qb_q3_K_scale(b + Q3_K_SCALES, i / 16u)) * float(q);
}

// IQ4_NL: d * value, exact (11 + 7 significant bits): no rounding.
float qb_iq4_nl(uint row, uint e) {
    uint b = row + (e / 32u) * IQ4_NL_BYTES, i = e % 32u;
    uint q = (qb_byte(b + IQ4_NL_QS + i % 16u) >> (4u * (i / 16u))) & 15u;
    return qb_half(b + IQ4_NL_D) * float(qb_iq4nl_value(q));
}

// MXFP4: value * 2^(e - 128), exact (a subnormal may flush to zero: quant.h).
float qb_mxfp4(uint row, uint e) {
    uint b = row + (e / 32u) * MXFP4_BYTES, i = e % 32u;
    uint q = (qb_byte(b + MXFP4_QS + i % 16u) >> (4u * (i / 16u))) & 15u;
    return float(qb_mxfp4_value(q)) * qb_e8m0_half(qb_byte(b + MXFP4_E));
}

// IQ4_XS: (d * (ls - 32)) * value, both products exact (at most 11 + 6 + 7 bits): no rounding.
float qb_iq4_xs(uint row, uint e) {
    uint b = row + (e / QK_K) * IQ4_XS_BYTES, i = e % QK_K, j = i / 32u, l = i % 32u;
    uint sl = uint(qb_u16[(b + IQ4_XS_SCALES_L) >> 1]) | (uint(qb_u16[(b + IQ4_XS_SCALES_L + 2u) >> 1]) << 16);
    float dl = qb_half(b + IQ4_XS_D) * float(qb_iq4_xs_scale(uint(qb_u16[(b + IQ4_XS_SCALES_H) >> 1]), sl, j));
    uint q = (qb_byte(b + IQ4_XS_QS + 16u * j + l % 16u) >> (4u * (l / 16u))) & 15u;
    return dl * float(qb_iq4nl_value(q));
}

// IQ3_XXS's sign byte of a 7-bit field: bit 7 set when the field has an odd number of ones.
uint qb_ksigns(uint field) { return field | ((uint(bitCount(field)) & 1u) << 7); }
// The sign and scale word of IQ3_XXS sub-block ib of the block at b (two 16-bit loads).
uint qb_iq3_xxs_word(uint b, uint ib) {
    uint o = (b + IQ3_XXS_SS + 4u * ib) >> 1;
    return uint(qb_u16[o]) | (uint(qb_u16[o + 1u]) << 16);
}
// Both steps are exact (at most 16 significant bits) and so is step * magnitude: no rounding.
float qb_iq3_xxs_step(uint b, uint w) { return qb_half(b + IQ3_XXS_D) * (0.5 + float(w >> 28)) * 0.5; }
float qb_iq3_s_step(uint b, uint ib) {
    return qb_half(b + IQ3_S_D) * float(1u + 2u * ((qb_byte(b + IQ3_S_SCALES + ib / 2u) >> (4u * (ib % 2u))) & 15u));
}
// The weight of magnitude byte j of grid entry g, sign bit r of sign byte sg, step dl.
float qb_grid_weight(uint g, uint j, uint sg, uint r, float dl) {
    float v = dl * float((g >> (8u * j)) & 255u);
    return ((sg >> r) & 1u) != 0u ? -v : v;
}

float qb_iq3_xxs(uint row, uint e) {
    uint b = row + (e / QK_K) * IQ3_XXS_BYTES, i = e % QK_K, ib = i / 32u, l = (i % 32u) / 8u, h = (i % 8u) / 4u;
    uint w = qb_iq3_xxs_word(b, ib);
    uint g = IQ3XXS_GRID[qb_byte(b + IQ3_XXS_QS + 8u * ib + 2u * l + h)];
    return qb_grid_weight(g, i % 4u, qb_ksigns((w >> (7u * l)) & 127u), i % 8u, qb_iq3_xxs_step(b, w));
}

float qb_iq3_s(uint row, uint e) {
    uint b = row + (e / QK_K) * IQ3_S_BYTES, i = e % QK_K, ib = i / 32u, l = (i % 32u) / 8u, h = (i % 8u) / 4u;
    uint idx = qb_byte(b + IQ3_S_QS + 8u * ib + 2u * l + h) | (((qb_byte(b + IQ3_S_QH + ib) >> (2u * l + h)) & 1u) << 8);
    return qb_grid_weight(IQ3S_GRID[idx], i % 4u, qb_byte(b + IQ3_S_SIGNS + 4u * ib + l), i % 8u, qb_iq3_s_step(b, ib));
}

// The IQ2 types: the level of code c (0..2) is byte c of IQ2_LEVELS.
uint qb_iq2_level(uint code, uint j) { return (IQ2_LEVELS >> (8u * ((code >> (2u * j)) & 3u))) & 255u; }
// Grid entry idx of each table (two 16-bit entries a word).
uint qb_iq2xxs_entry(uint idx) { return (IQ2XXS_GRID[idx >> 1] >> (16u * (idx & 1u))) & 0xFFFFu; }
uint qb_iq2xs_entry(uint idx) { return (IQ2XS_GRID[idx >> 1] >> (16u * (idx & 1u))) & 0xFFFFu; }
uint qb_iq2s_entry(uint idx) { return (IQ2S_GRID[idx >> 1] >> (16u * (idx & 1u))) & 0xFFFFu; }
// The step of 4-bit scale s: exact (d's 11 significant bits and 0.5 + s's at most 5), as is
// step * level, so no IQ2 weight rounds.
float qb_iq2_step(uint b, uint s) { return qb_half(b) * (0.5 + float(s)) * 0.25; }
// The sign and scale word of IQ2_XXS sub-block ib of the block at b (two 16-bit loads).
uint qb_iq2_xxs_word(uint b, uint ib) {
    uint o = (b + IQ2_XXS_QS + 8u * ib + 4u) >> 1;
    return uint(qb_u16[o]) | (uint(qb_u16[o + 1u]) << 16);
}
// Group l of IQ2 sub-block ib at b: its grid entry (x), sign byte (y) and scale (z).
uvec3 qb_iq2_group(uint type, uint b, uint ib, uint l) {
    if (type == QTYPE_IQ2_XXS) {
        uint w = qb_iq2_xxs_word(b, ib);
        return uvec3(qb_iq2xxs_entry(qb_byte(b + IQ2_XXS_QS + 8u * ib + l)), qb_ksigns((w >> (7u * l)) & 127u), w >> 28);
    }
    uint sc = (qb_byte(b + (type == QTYPE_IQ2_XS ? IQ2_XS_SCALES : IQ2_S_SCALES) + ib) >> (4u * (l / 2u))) & 15u;
    if (type == QTYPE_IQ2_XS) {
        uint q = uint(qb_u16[(b + IQ2_XS_QS) / 2u + 4u * ib + l]);
        return uvec3(qb_iq2xs_entry(q & 511u), qb_ksigns(q >> 9), sc);
    }
    uint idx = qb_byte(b + IQ2_S_QS + 4u * ib + l) | (((qb_byte(b + IQ2_S_QH + ib) >> (2u * l)) & 3u) << 8);
    return uvec3(qb_iq2s_entry(idx), qb_byte(b + IQ2_S_SIGNS + 4u * ib + l), sc);
}
uint qb_iq2_bytes(uint type) { return type == QTYPE_IQ2_XXS ? IQ2_XXS_BYTES : type == QTYPE_IQ2_XS ? IQ2_XS_BYTES : IQ2_S_BYTES; }
// Weight j of a group (entry, sign byte, scale) at step dl.
float qb_iq2_weight(uvec3 g, uint j, float dl) {
    float v = dl * float(qb_iq2_level(g.x, j));
    return ((g.y >> j) & 1u) != 0u ? -v : v;
}
float qb_iq2(uint type, uint row, uint e) {
    uint b = row + (e / QK_K) * qb_iq2_bytes(type), i = e % QK_K;
    uvec3 g = qb_iq2_group(type, b, i / 32u, (i % 32u) / 8u);
    return qb_iq2_weight(g, i % 8u, qb_iq2_step(b, g.z));
}

// The IQ1 types: grid entry idx (two 16-bit entries a word).
uint qb_iq1_entry(uint idx) { return (IQ1S_GRID[idx >> 1] >> (16u * (idx & 1u))) & 0xFFFFu; }
// Group l of IQ1 sub-block ib at b: its grid entry (x), delta sign (y, 1: -1/8) and scale (z).
uvec3 qb_iq1_group(uint type, uint b, uint ib, uint l) {
    if (type == QTYPE_IQ1_S) {
        uint qh = uint(qb_u16[(b + IQ1_S_QH) / 2u + ib]);
        uint idx = qb_byte(b + IQ1_S_QS + 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8);
        return uvec3(qb_iq1_entry(idx), qh >> 15, (qh >> 12) & 7u);
    }
    uint h = (qb_byte(b + IQ1_M_QH + 2u * ib + l / 2u) >> (4u * (l % 2u))) & 15u;
    uint sc = uint(qb_u16[(b + IQ1_M_SCALES) / 2u + ib / 2u]);
    return uvec3(qb_iq1_entry(qb_byte(b + IQ1_M_QS + 4u * ib + l) | ((h & 7u) << 8)), h >> 3,
                 (sc >> (6u * (ib % 2u) + 3u * (l / 2u))) & 7u);
}
uint qb_iq1_bytes(uint type) { return type == QTYPE_IQ1_S ? IQ1_S_BYTES : IQ1_M_BYTES; }
// d: IQ1_S's first field, IQ1_M's the top nibbles of its four scale words.
float qb_iq1_d(uint type, uint b) {
    if (type == QTYPE_IQ1_S) return qb_half(b);
    uint h = 0u;
    for (uint w = 0u; w < 4u; w++) h |= (qb_byte(b + IQ1_M_SCALES + 2u * w + 1u) >> 4) << (4u * w);
    return unpackHalf2x16(h).x;
}
// The step of 3-bit scale s, and step * (g + delta): both exact (d's 11 significant bits, 2 s + 1's
// at most 4, g + delta's at most 4), so no IQ1 weight rounds.
float qb_iq1_step(float d, uint s) { return d * float(2u * s + 1u); }
float qb_iq1_weight(uvec3 g, uint j, float dl) {
    return dl * (float(int((g.x >> (2u * j)) & 3u) - 1) + (g.y != 0u ? -0.125 : 0.125));
}
float qb_iq1(uint type, uint row, uint e) {
    uint b = row + (e / QK_K) * qb_iq1_bytes(type), i = e % QK_K;
    uvec3 g = qb_iq1_group(type, b, i / 32u, (i % 32u) / 8u);
    return qb_iq1_weight(g, i % 8u, qb_iq1_step(qb_iq1_d(type, b), g.z));
}

// Element e of the row at byte offset `row`, stored as `type`.
float qb_dequant(uint type, uint row, uint e) {
    switch (type) {
    case QTYPE_F32: return uintBitsToFloat(qb_u32[(row >> 2) + e]);
    case QTYPE_F16: return unpackHalf2x16(uint(qb_u16[(row >> 1) + e])).x;
    case QTYPE_BF16: return uintBitsToFloat(uint(qb_u16[(row >> 1) + e]) << 16);
    case QTYPE_Q8_0: return qb_q8_0(row, e);
    case QTYPE_Q4_K: return qb_q4_K(row, e);
    case QTYPE_Q5_K: return qb_q5_K(row, e);
    case QTYPE_Q6_K: return qb_q6_K(row, e);
    case QTYPE_Q4_0: case QTYPE_Q4_1: case QTYPE_Q5_0: case QTYPE_Q5_1: return qb_legacy(type, row, e);
    case QTYPE_Q2_K: return qb_q2_K(row, e);
    case QTYPE_Q3_K: return qb_q3_K(row, e);
    case QTYPE_IQ4_NL: return qb_iq4_nl(row, e);
    case QTYPE_IQ4_XS: return qb_iq4_xs(row, e);
    case QTYPE_IQ3_XXS: return qb_iq3_xxs(row, e);
    case QTYPE_IQ3_S: return qb_iq3_s(row, e);
    case QTYPE_IQ2_XXS: case QTYPE_IQ2_XS: case QTYPE_IQ2_S: return qb_iq2(type, row, e);
    case QTYPE_IQ1_S: case QTYPE_IQ1_M: return qb_iq1(type, row, e);
    case QTYPE_MXFP4: return qb_mxfp4(row, e);
    }
    return 0.0;
}
// Byte r (0..7) of 8 bytes held as 2 words.
uint qb_byte8(uvec2 v, uint r) { return (v[r >> 2] >> (8u * (r & 3u))) & 255u; }
// 8 bytes at an even offset as 2 words, from four 16-bit loads (Q8_0, Q6_K: 2-aligned blocks).
uvec2 qb_load8_u16(uint off) {
    uint h = off >> 1;
    return uvec2(uint(qb_u16[h]) | (uint(qb_u16[h + 1]) << 16), uint(qb_u16[h + 2]) | (uint(qb_u16[h + 3]) << 16));
}

// 8 bytes at any offset as 2 words, from the 2 or 3 aligned words that hold them (MXFP4's
// unaligned blocks). The last word read holds at least one of the 8 bytes, so it lies inside
// the binding (vk_descriptor.c rounds a view's range up to whole words).
uvec2 qb_load8_any(uint off) {
    uint o = off >> 2, sh = 8u * (off & 3u);
    uint a = qb_u32[o], b = qb_u32[o + 1u];
    if (sh == 0u) return uvec2(a, b);
    uint c = qb_u32[o + 2u];
    return uvec2((a >> sh) | (b << (32u - sh)), (b >> sh) | (c << (32u - sh)));
}

// Weights k0 .. k0 + 7 (k0 % 8 == 0) of the row at byte offset `row` of a quantized type, each
// the float qb_dequant returns for it (the same expression, in the same order), with the
// block's scales decoded once and the 8 bytes read as words: 5-7 loads where qb_dequant takes
// 5-6 loads per weight (tests/test_vk_matmul.c checks every kernel against the others bit for bit).
void qb_decode8(uint type, uint row, uint k0, out float w[8]) {
    if (type == QTYPE_Q4_K || type == QTYPE_Q5_K) { // 144- and 176-byte blocks: 16-aligned
        bool five = type == QTYPE_Q5_K;
        uint b = row + (k0 / QK_K) * (five ? Q5_K_BYTES : Q4_K_BYTES), i = k0 % QK_K;
        uint g = i / 32, j = i / 64, hi = g & 1u, l0 = i % 32, w0 = b >> 2;
        uvec2 sm = qb_scale_min_k4_w(uvec3(qb_u32[w0 + 1], qb_u32[w0 + 2], qb_u32[w0 + 3]), g);
        vec2 dm = unpackHalf2x16(qb_u32[w0]); // d, dmin
        float d = dm.x * float(sm.x), mn = dm.y * float(sm.y);
        uint qo = (b + (five ? Q5_K_QS : Q4_K_QS) + 32 * j + l0) >> 2, ho = (b + Q5_K_QH + l0) >> 2;
        uvec2 qs = uvec2(qb_u32[qo], qb_u32[qo + 1]), qh = five ? uvec2(qb_u32[ho], qb_u32[ho + 1]) : uvec2(0);
        for (uint r = 0; r < 8u; r++) {
            uint q = (qb_byte8(qs, r) >> (4 * hi)) & 15u;
            if (five) q |= ((qb_byte8(qh, r) >> (2 * j + hi)) & 1u) << 4;
            w[r] = fma(d, float(q), -mn); // as qb_q4_K: one rounding on every compiler
        }
    } else if (type == QTYPE_Q6_K) {
        uint b = row + (k0 / QK_K) * Q6_K_BYTES, i = k0 % QK_K, h = i / 128, k = (i % 128) / 32, l0 = i % 32;
        uvec2 ql = qb_load8_u16(b + Q6_K_QL + 64 * h + l0 + 32 * (k & 1u)), qh = qb_load8_u16(b + Q6_K_QH + 32 * h + l0);
        float sc = float(qb_sbyte(b + Q6_K_SCALES + 8 * h + l0 / 16 + 2 * k)), dh = qb_half(b + Q6_K_D);
        for (uint r = 0; r < 8u; r++) {
            uint lo = (qb_byte8(ql, r) >> (4 * (k >> 1))) & 15u, hb = (qb_byte8(qh, r) >> (2 * k)) & 3u;
            int q = int(lo | (hb << 4)) - 32;
            w[r] = dh * sc * float(q);
        }
    } else if (type == QTYPE_Q8_0) {
        uint b = row + (k0 / QK8_0) * Q8_0_BYTES;
        uvec2 qs = qb_load8_u16(b + Q8_0_QS + k0 % QK8_0);
        float d = qb_half(b + Q8_0_D);
        for (uint r = 0; r < 8u; r++) w[r] = d * float(bitfieldExtract(int(qb_byte8(qs, r)), 0, 8));
    } else if (type == QTYPE_Q4_0 || type == QTYPE_Q4_1 || type == QTYPE_Q5_0 || type == QTYPE_Q5_1) {
        // 8 weights of one nibble half: bytes (k0 % 16) .. + 7 of qs, 2-aligned (blocks of 18-24)
        uint b = row + (k0 / 32u) * qb_legacy_bytes(type), i = k0 % 32u, sh = 4u * (i / 16u);
        uvec2 qs = qb_load8_u16(b + qb_legacy_qs(type) + i % 16u);
        uint qh = qb_legacy_five(type) ? qb_legacy_qh(type, b) >> i : 0u;
        float d = qb_half(b), m = qb_legacy_affine(type) ? qb_half(b + 2u) : 0.0;
        for (uint r = 0; r < 8u; r++) w[r] = qb_legacy_weight(type, ((qb_byte8(qs, r) >> sh) & 15u) | (((qh >> r) & 1u) << 4), d, m);
    } else if (type == QTYPE_Q2_K || type == QTYPE_Q3_K) {
        // 8 weights of one 16-weight sub-block: one scale; the 8 bytes of qs (and of hmask)
        bool three = type == QTYPE_Q3_K;
        uint b = row + (k0 / QK_K) * (three ? Q3_K_BYTES : Q2_K_BYTES), i = k0 % QK_K;
        uint h = i / 128u, j = (i % 128u) / 32u, l0 = i % 32u;
        uvec2 qs = qb_load8_u16(b + (three ? Q3_K_QS : Q2_K_QS) + 32u * h + l0);
        if (three) {
            uvec2 hm = qb_load8_u16(b + Q3_K_HMASK + l0);
            float dl = qb_half(b + Q3_K_D) * float(qb_q3_K_scale(b + Q3_K_SCALES, i / 16u));
            for (uint r = 0; r < 8u; r++) {
                int q = int((qb_byte8(qs, r) >> (2u * j)) & 3u) - (((qb_byte8(hm, r) >> (4u * h + j)) & 1u) != 0u ? 0 : 4);
                w[r] = dl * float(q); // as qb_q3_K: (d * sc) * q
            }
        } else {
            uint sc = qb_byte(b + Q2_K_SCALES + i / 16u);
            float dl = qb_half(b + Q2_K_D) * float(sc & 15u), ml = qb_half(b + Q2_K_DMIN) * float(sc >> 4);
            for (uint r = 0; r < 8u; r++) w[r] = fma(dl, float((qb_byte8(qs, r) >> (2u * j)) & 3u), -ml);
        }
    } else if (type == QTYPE_IQ4_NL || type == QTYPE_IQ4_XS) {
        // 8 weights of one nibble half of a 32-weight (sub-)block: one step, 8 bytes of qs.
        // IQ4_NL's 18-byte blocks are 2-aligned (16-bit loads); IQ4_XS's 136-byte blocks and
        // their qs runs 8-aligned (its 8-byte head and the 8 bytes: two words each)
        uint sh = 4u * ((k0 % 32u) / 16u);
        uvec2 qs;
        float dl;
        if (type == QTYPE_IQ4_NL) {
            uint b = row + (k0 / 32u) * IQ4_NL_BYTES;
            qs = qb_load8_u16(b + IQ4_NL_QS + k0 % 16u);
            dl = qb_half(b + IQ4_NL_D);
        } else {
            uint b = row + (k0 / QK_K) * IQ4_XS_BYTES, i = k0 % QK_K, j = i / 32u, w0 = b >> 2;
            uint hd = qb_u32[w0], qo = (b + IQ4_XS_QS + 16u * j + i % 16u) >> 2; // hd: d | scales_h << 16
            qs = uvec2(qb_u32[qo], qb_u32[qo + 1u]);
            dl = unpackHalf2x16(hd).x * float(qb_iq4_xs_scale(hd >> 16, qb_u32[w0 + 1u], j)); // as qb_iq4_xs
        }
        for (uint r = 0; r < 8u; r++) w[r] = dl * float(qb_iq4nl_value((qb_byte8(qs, r) >> sh) & 15u));
    } else if (type == QTYPE_IQ3_XXS || type == QTYPE_IQ3_S) {
        // 8 weights = group pair l of sub-block ib: two grid indices (one 16-bit load), one sign
        // byte, one step
        bool xxs = type == QTYPE_IQ3_XXS;
        uint b = row + (k0 / QK_K) * (xxs ? IQ3_XXS_BYTES : IQ3_S_BYTES), i = k0 % QK_K, ib = i / 32u, l = (i % 32u) / 8u;
        uint two = uint(qb_u16[(b + IQ3_XXS_QS + 8u * ib + 2u * l) >> 1]); // IQ3_XXS_QS == IQ3_S_QS
        uint ga, gb, sg;
        float dl;
        if (xxs) {
            uint sw = qb_iq3_xxs_word(b, ib);
            ga = IQ3XXS_GRID[two & 255u], gb = IQ3XXS_GRID[two >> 8];
            sg = qb_ksigns((sw >> (7u * l)) & 127u);
            dl = qb_iq3_xxs_step(b, sw);
        } else {
            uint qh = qb_byte(b + IQ3_S_QH + ib) >> (2u * l);
            ga = IQ3S_GRID[(two & 255u) | ((qh & 1u) << 8)], gb = IQ3S_GRID[(two >> 8) | (((qh >> 1) & 1u) << 8)];
            sg = qb_byte(b + IQ3_S_SIGNS + 4u * ib + l);
            dl = qb_iq3_s_step(b, ib);
        }
        for (uint r = 0; r < 8u; r++) w[r] = qb_grid_weight(r < 4u ? ga : gb, r % 4u, sg, r, dl); // as qb_iq3_*
    } else if (type == QTYPE_IQ2_XXS || type == QTYPE_IQ2_XS || type == QTYPE_IQ2_S) {
        // 8 weights = one group: one grid entry, one sign byte, one step
        uint b = row + (k0 / QK_K) * qb_iq2_bytes(type), i = k0 % QK_K;
        uvec3 g = qb_iq2_group(type, b, i / 32u, (i % 32u) / 8u);
        float dl = qb_iq2_step(b, g.z);
        for (uint r = 0; r < 8u; r++) w[r] = qb_iq2_weight(g, r, dl); // as qb_iq2
    } else if (type == QTYPE_IQ1_S || type == QTYPE_IQ1_M) {
        // 8 weights = one group: one grid entry, one delta, one step
        uint b = row + (k0 / QK_K) * qb_iq1_bytes(type), i = k0 % QK_K;
        uvec3 g = qb_iq1_group(type, b, i / 32u, (i % 32u) / 8u);
        float dl = qb_iq1_step(qb_iq1_d(type, b), g.z);
        for (uint r = 0; r < 8u; r++) w[r] = qb_iq1_weight(g, r, dl); // as qb_iq1
    } else if (type == QTYPE_MXFP4) {
        // 8 weights of one nibble half of a block: one scale byte, 8 bytes of qs
        uint b = row + (k0 / 32u) * MXFP4_BYTES, sh = 4u * ((k0 % 32u) / 16u);
        uvec2 qs = qb_load8_any(b + MXFP4_QS + k0 % 16u);
        float d = qb_e8m0_half(qb_byte(b + MXFP4_E));
        for (uint r = 0; r < 8u; r++) w[r] = float(qb_mxfp4_value((qb_byte8(qs, r) >> sh) & 15u)) * d; // as qb_mxfp4
    } else {
        for (uint r = 0; r < 8u; r++) w[r] = qb_dequant(type, row, k0 + r);
    }
}

#endif // QB_BINDING
#endif // QUANT_BLOCKS_GLSL
