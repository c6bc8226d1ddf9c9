#version 450
// int8 dot-product rate probe (runtime/vk/vk_probe.c): OpSDot on packed 4 x int8 (the
// SPV_KHR_integer_dot_product instruction behind v_dot4_i32_i8 on RDNA and dp4a on NVIDIA),
// 8 independent chains per thread: acc = sdot(acc as 4 x int8, b) + acc. Feeding the
// accumulator back as the next input keeps the dot inside the loop (a loop-invariant dot
// would be hoisted). Ops = 8 per dot4 (4 multiply-adds), 8 * 8 * iters per thread.
// Needs shaderIntegerDotProduct (caps.int_dot). glslang here predates
// GL_EXT_integer_dot_product, so the instruction is declared through GL_EXT_spirv_intrinsics:
// 4450 = OpSDot, capabilities 6019 = DotProduct, 6018 = DotProductInput4x8BitPacked, and the
// last operand 0 = PackedVectorFormat4x8Bit.
#extension GL_EXT_spirv_intrinsics : require
layout(local_size_x_id = 0) in;

layout(binding = 0) writeonly buffer Out { int o[]; };

// mirrors cvk_probe_dot_push in runtime/vk/vk_probe.c
layout(push_constant) uniform Push {
    uint iters;
    uint b;       // the second operand: 4 packed int8
} pc;

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int packed_format);

void main() {
    uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    int s = int(gl_LocalInvocationID.x);
    int a0 = s, a1 = s + 1, a2 = s + 2, a3 = s + 3, a4 = s + 4, a5 = s + 5, a6 = s + 6, a7 = s + 7;
    uint b = pc.b;
    for (uint i = 0; i < pc.iters; i++) {
        a0 += sdot4x8(uint(a0), b, 0); a1 += sdot4x8(uint(a1), b, 0);
        a2 += sdot4x8(uint(a2), b, 0); a3 += sdot4x8(uint(a3), b, 0);
        a4 += sdot4x8(uint(a4), b, 0); a5 += sdot4x8(uint(a5), b, 0);
        a6 += sdot4x8(uint(a6), b, 0); a7 += sdot4x8(uint(a7), b, 0);
    }
    o[gid] = ((a0 ^ a1) + (a2 ^ a3)) ^ ((a4 + a5) + (a6 ^ a7));
}
