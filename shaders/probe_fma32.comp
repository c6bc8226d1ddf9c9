#version 450
// fp32 FMA rate probe (runtime/vk/vk_probe.c): 8 independent vec4 chains x = fma(x, m, c)
// per thread (32 scalar FMAs in flight: enough ILP to hide FMA latency on any GPU), iters
// times, m and c from push constants so nothing folds. FLOPs = 2 * 32 * iters per thread.
// x converges to c / (1 - m): the values stay finite. The sum is written per thread so no
// chain is dead code.
layout(local_size_x_id = 0) in;

layout(binding = 0) writeonly buffer Out { float o[]; };

// mirrors cvk_probe_alu_push in runtime/vk/vk_probe.c
layout(push_constant) uniform Push {
    uint iters;
    float m, c;
} pc;

void main() {
    uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    float s = float(gl_LocalInvocationID.x) * 1e-3;
    vec4 m = vec4(pc.m), c = vec4(pc.c);
    vec4 x0 = vec4(s, s + 1, s + 2, s + 3), x1 = x0 + 4, x2 = x0 + 8, x3 = x0 + 12;
    vec4 x4 = x0 + 16, x5 = x0 + 20, x6 = x0 + 24, x7 = x0 + 28;
    for (uint i = 0; i < pc.iters; i++) {
        x0 = fma(x0, m, c); x1 = fma(x1, m, c); x2 = fma(x2, m, c); x3 = fma(x3, m, c);
        x4 = fma(x4, m, c); x5 = fma(x5, m, c); x6 = fma(x6, m, c); x7 = fma(x7, m, c);
    }
    vec4 r = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    o[gid] = r.x + r.y + r.z + r.w;
}
