#version 450
// fp16 FMA rate probe (runtime/vk/vk_probe.c): probe_fma32.comp in f16vec4 (packed f16vec2
// math on RDNA and NVIDIA: twice the fp32 rate where the hardware has it). 8 independent
// f16vec4 chains, FLOPs = 2 * 32 * iters per thread. Needs shaderFloat16 (caps.fp16).
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x_id = 0) in;

layout(binding = 0) writeonly buffer Out { float o[]; };

// mirrors cvk_probe_alu_push in runtime/vk/vk_probe.c
layout(push_constant) uniform Push {
    uint iters;
    float m, c;
} pc;

void main() {
    uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    float16_t s = float16_t(gl_LocalInvocationID.x & 15u) * float16_t(0.0625);
    f16vec4 m = f16vec4(pc.m), c = f16vec4(pc.c);
    f16vec4 x0 = f16vec4(s, s + float16_t(0.25), s + float16_t(0.5), s + float16_t(0.75));
    f16vec4 x1 = x0 + float16_t(1), x2 = x0 + float16_t(2), x3 = x0 + float16_t(3);
    f16vec4 x4 = x0 + float16_t(4), x5 = x0 + float16_t(5), x6 = x0 + float16_t(6), x7 = x0 + float16_t(7);
    for (uint i = 0; i < pc.iters; i++) {
        x0 = fma(x0, m, c); x1 = fma(x1, m, c); x2 = fma(x2, m, c); x3 = fma(x3, m, c);
        x4 = fma(x4, m, c); x5 = fma(x5, m, c); x6 = fma(x6, m, c); x7 = fma(x7, m, c);
    }
    f16vec4 r = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    vec4 f = vec4(r);
    o[gid] = f.x + f.y + f.z + f.w;
}
