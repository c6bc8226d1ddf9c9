#version 450
// weight types: Q8_0 Q4_K Q6_K
// The integer family's matrix product for few tokens (runtime/gguf/xq8.h: the arithmetic and
// its canonical order; the same bits as xq8_dot_row):
//   s = s + d_x[t][c] * v_c(W[r], q[t][c])  (Q4_K then - d_x * u_c), chunks in k order, from 0
//   y[t][r] = s, or y[t][r] + s with accumulate (a residual added by the projection: the same
//   bits as a separate add)
// with x quantized by xq8_quantize.comp. A chunk's 32 weights are read and unpacked to int8
// once for the NT tokens of the workgroup, and each token's dot is 8 dot4 instructions.
//
// Work split: KL consecutive lanes of one subgroup share a row; per round of KL chunks lane j
// takes chunk c0 + j, and the row's lane 0 takes the round's terms by subgroupShuffle and adds
// them in k order (as matmul_rows.glsl's split k): no shared memory, no barrier. Workgroup x: WG /
// KL rows from x * WG / KL of the bound weight part; y: tokens from y * NT. The weights may be in
// parts (runtime/vk/vk_memory.h): the host dispatches once per part, passing its first row row0.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 32;
const uint QTYPE = QTYPE_FIXED; // one module per weight type (spec 1 is the host's record of it)
layout(constant_id = 2) const uint NT = 1; // tokens per workgroup
layout(constant_id = 3) const uint KL = 8; // lanes per row: a power of 2 within the subgroup

#define QB_BINDING 0
#include "quant_blocks.glsl"
#include "xq8.glsl"

layout(binding = 1) readonly buffer Xq { uvec4 xq[]; };
layout(binding = 2) readonly buffer Xd { uvec2 xd[]; };
layout(binding = 3) buffer Y { float y[]; }; // read only with accumulate

// mirrors cvk_xq8_matvec_push in runtime/vk/op_xq8.h
layout(push_constant) uniform Push {
    uint n_in;      // weights per row (a multiple of the type's block)
    uint row_bytes;
    uint row0;      // the bound part's first row
    uint rows;      // rows in the bound part
    uint n_tokens;
    uint y_stride;  // floats between tokens of y
    uint accumulate; // 1: y += the product
} pc;

void main() {
    uint i = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    uint j = i % KL, r = gl_WorkGroupID.x * (WG / KL) + i / KL, lead = gl_SubgroupInvocationID - j;
    bool live = r < pc.rows;
    uint row = live ? r * pc.row_bytes : 0u, t0 = gl_WorkGroupID.y * NT, nb = pc.n_in / 32u;
    float acc[NT];
    [[unroll]] for (uint t = 0; t < NT; t++) acc[t] = 0.0;
    for (uint c0 = 0; c0 < nb; c0 += KL) { // uniform
        uint c = c0 + j;
        bool here = live && c < nb;
        xq8_chunk k;
        if (here) k = xq8_load_chunk(row, c);
        [[unroll]] for (uint t = 0; t < NT; t++) {
            uint tok = t0 + t, blk = tok * nb + c;
            vec2 p = vec2(0.0); // the chunk's terms (xq8_chunk_terms)
            if (here && tok < pc.n_tokens) p = xq8_chunk_terms(k, xq[2u * blk], xq[2u * blk + 1u], xd[blk]);
            if (KL == 1u) {
                acc[t] = acc[t] + p.x;
                if (QTYPE == QTYPE_Q4_K) acc[t] = acc[t] - p.y;
                continue;
            }
            [[unroll]] for (uint jj = 0; jj < KL; jj++) {
                float v = subgroupShuffle(p.x, lead + jj), u = QTYPE == QTYPE_Q4_K ? subgroupShuffle(p.y, lead + jj) : 0.0;
                if (j == 0u && c0 + jj < nb) {
                    acc[t] = acc[t] + v;
                    if (QTYPE == QTYPE_Q4_K) acc[t] = acc[t] - u;
                }
            }
        }
    }
    if (j != 0u || !live) return;
    [[unroll]] for (uint t = 0; t < NT; t++)
        if (t0 + t < pc.n_tokens) {
            uint o = (t0 + t) * pc.y_stride + pc.row0 + r;
            y[o] = pc.accumulate != 0u ? y[o] + acc[t] : acc[t];
        }
}
