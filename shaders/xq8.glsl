// The integer family's arithmetic on the GPU, the same bits as runtime/gguf/xq8.c (its header
// says the canonical order and why every step is exact): a chunk of 32 weights as 8 words of
// 4 packed int8 levels, their exact int32 dot with x's 8 words of q, and the chunk's value v_c.
// Needs quant_blocks.glsl (QB_BINDING) and shaderIntegerDotProduct.
#extension GL_EXT_spirv_intrinsics : require

// OpSDot (4450) on two 32-bit words of 4 signed int8 each (operand 0 = PackedVectorFormat4x8Bit),
// capabilities DotProduct (6019) and DotProductInput4x8BitPacked (6018): glslang here predates
// GL_EXT_integer_dot_product. RDNA3 runs it as v_dot4_i32_iu8, RDNA2 as v_dot4c_i32_i8, NVIDIA as
// dp4a; lavapipe unaccelerated but exact.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int xq8_sdot4(uint a, uint b, spirv_literal int packed_format);

int xq8_dot4(uvec4 a, uvec4 b) {
    return xq8_sdot4(a.x, b.x, 0) + xq8_sdot4(a.y, b.y, 0) + xq8_sdot4(a.z, b.z, 0) + xq8_sdot4(a.w, b.w, 0);
}

// a 32-bit word from a 2-byte-aligned byte offset (Q8_0's 34- and Q6_K's 210-byte blocks)
uint xq8_word16(uint off) { return uint(qb_u16[off >> 1]) | (uint(qb_u16[(off >> 1) + 1u]) << 16); }

// Chunk c of the row at byte offset row: its 32 levels (w0: levels 0-15, w1: 16-31) and its
// scales: v_c = f * float(mult * (s0 * isum0 + s1 * isum1)) (Q8_0: s0 = s1 = 1) and for Q4_K
// u_c = g * float(mult * m * sum_q).
struct xq8_chunk { uvec4 w0, w1; float f, g; int s0, s1, m; };

xq8_chunk xq8_load_chunk(uint row, uint c) {
    xq8_chunk k;
    if (QTYPE == QTYPE_Q8_0) {
        uint b = row + c * Q8_0_BYTES + Q8_0_QS;
        k.w0 = uvec4(xq8_word16(b), xq8_word16(b + 4u), xq8_word16(b + 8u), xq8_word16(b + 12u));
        k.w1 = uvec4(xq8_word16(b + 16u), xq8_word16(b + 20u), xq8_word16(b + 24u), xq8_word16(b + 28u));
        k.f = qb_half(row + c * Q8_0_BYTES + Q8_0_D), k.g = 0.0, k.s0 = 1, k.s1 = 1, k.m = 0;
    } else if (QTYPE == QTYPE_Q4_K) { // sub-block j: low nibbles of 32 bytes for even j, high for odd
        uint b = row + (c / 8u) * Q4_K_BYTES, j = c % 8u, q = (b + Q4_K_QS + 32u * (j / 2u)) >> 2;
        uint sh = 4u * (j & 1u);
        k.w0 = (uvec4(qb_u32[q], qb_u32[q + 1u], qb_u32[q + 2u], qb_u32[q + 3u]) >> sh) & 0x0f0f0f0fu;
        k.w1 = (uvec4(qb_u32[q + 4u], qb_u32[q + 5u], qb_u32[q + 6u], qb_u32[q + 7u]) >> sh) & 0x0f0f0f0fu;
        uvec2 sm = qb_scale_min_k4(b + Q4_K_SCALES, j);
        k.f = qb_half(b + Q4_K_D), k.g = qb_half(b + Q4_K_DMIN);
        k.s0 = k.s1 = int(sm.x), k.m = int(sm.y);
    } else { // Q6_K: half h, quarter t; level = (ql nibble | qh 2 bits << 4) - 32
        uint b = row + (c / 8u) * Q6_K_BYTES, h = (c % 8u) / 4u, t = c % 4u;
        uint ql = b + Q6_K_QL + 64u * h + 32u * (t & 1u), qh = b + Q6_K_QH + 32u * h;
        uint w[8];
        [[unroll]] for (uint i = 0; i < 8u; i++) {
            uint lv = ((xq8_word16(ql + 4u * i) >> (4u * (t >> 1))) & 0x0f0f0f0fu) |
                      (((xq8_word16(qh + 4u * i) >> (2u * t)) & 0x03030303u) << 4);
            // minus 32 per byte without borrows: bit 5 set -> clear it; clear -> set bits 5-7
            w[i] = lv ^ (0xe0e0e0e0u ^ (((lv >> 5) & 0x01010101u) * 0xc0u));
        }
        k.w0 = uvec4(w[0], w[1], w[2], w[3]), k.w1 = uvec4(w[4], w[5], w[6], w[7]);
        uint sc = b + Q6_K_SCALES + 8u * h + 2u * t;
        k.f = qb_half(b + Q6_K_D), k.g = 0.0, k.s0 = qb_sbyte(sc), k.s1 = qb_sbyte(sc + 1u), k.m = 0;
    }
    return k;
}

// d_x * v_c (.x) and d_x * u_c (.y, Q4_K; else 0) against x's block: q0 levels 0-15 of q, q1
// 16-31, ds its xd entry. Both products by d_x are exact (a power of two): see xq8.h.
vec2 xq8_chunk_terms(xq8_chunk k, uvec4 q0, uvec4 q1, uvec2 ds) {
    float dx = uintBitsToFloat(ds.x);
    int mult = int(ds.y >> 16), sum_q = bitfieldExtract(int(ds.y), 0, 16);
    int i0 = xq8_dot4(k.w0, q0), i1 = xq8_dot4(k.w1, q1);
    float v = dx * (k.f * float(mult * (k.s0 * i0 + k.s1 * i1)));
    return vec2(v, QTYPE == QTYPE_Q4_K ? dx * (k.g * float(mult * k.m * sum_q)) : 0.0);
}
