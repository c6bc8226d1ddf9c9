#version 450
// x to the integer family's int8 blocks (runtime/gguf/xq8.h: the same bits as xq8_quantize):
// token t's floats x[t * x_stride + i], i < n_in, in blocks of 32, each to 32 int8 levels q
// (xq: two uvec4 per block, 4 levels a word, level 0 in the low byte) and {d's bits, mult << 16 |
// the sum of q in 16 bits} (xd: a uvec2 per block); block b of token t at t * n_in / 32 + b. One invocation a block.
// Integer, exact and correctly rounded steps only, so every compiler gives these bits: the
// largest magnitude as the integer max of the bits with the sign cleared, the scale from its
// exponent and top 3 fraction bits, x times the scale's reciprocal (one rounding), roundEven.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Xq { uvec4 xq[]; };
layout(binding = 2) writeonly buffer Xd { uvec2 xd[]; };

// mirrors cvk_xq8_quantize_push in runtime/vk/op_xq8.h
layout(push_constant) uniform Push {
    uint n_in;     // floats per token (a multiple of 32)
    uint n_tokens;
    uint x_stride; // floats between tokens of x
} pc;

// the floats nearest 1 / 9 .. 1 / 16 (runtime/gguf/xq8.c's xq8_recip, checked equal by the test)
const uint RECIP[8] = uint[8](0x3de38e39u, 0x3dcccccdu, 0x3dba2e8cu, 0x3daaaaabu, 0x3d9d89d9u, 0x3d924925u, 0x3d888889u,
                              0x3d800000u);

void main() {
    uint nb = pc.n_in / 32u, blk = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
    if (blk >= nb * pc.n_tokens) return;
    uint t = blk / nb, base = t * pc.x_stride + (blk % nb) * 32u;
    float v[32];
    uint amax = 0u;
    for (uint i = 0; i < 32u; i++) {
        v[i] = x[base + i];
        amax = max(amax, floatBitsToUint(v[i]) & 0x7fffffffu);
    }
    uint e = amax >> 23;
    uint w[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    int sum = 0;
    uint j = (amax >> 20) & 7u; // the top 3 bits of the fraction
    bool quantized = e < 255u && e >= 11u;
    uint d = e == 255u ? 0x7fc00000u : e < 11u ? 0u : (e - 10u) << 23; // NaN, zeros, 2^(E - 10)
    uint mult = quantized ? 9u + j : 0u;
    if (quantized) {
        float c = uintBitsToFloat(RECIP[j]) * uintBitsToFloat((264u - e) << 23); // 1 / scale, one rounding
        for (uint i = 0; i < 32u; i++) {
            int q = int(clamp(roundEven(v[i] * c), -127.0, 127.0));
            sum += q;
            w[i / 4u] |= (uint(q) & 255u) << (8u * (i % 4u));
        }
    }
    xq[2u * blk] = uvec4(w[0], w[1], w[2], w[3]);
    xq[2u * blk + 1u] = uvec4(w[4], w[5], w[6], w[7]);
    xd[blk] = uvec2(d, (mult << 16) | (uint(sum) & 0xffffu));
}
