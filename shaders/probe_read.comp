#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
// Streaming-read bandwidth probe (runtime/vk/vk_probe.c): every thread sums the 16-byte vec4s
// it reads in a coalesced grid-stride loop; the workgroup reduces its sums (subgroupAdd, then
// one shared slot per subgroup: a single barrier, cheap on lavapipe too) and writes one float. The written sum depends on every byte read, so the compiler
// cannot drop a load. Bytes moved = 16 * n (the n_groups floats written are negligible).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(binding = 0) readonly buffer Src { vec4 src[]; };
layout(binding = 1) writeonly buffer Out { float partial[]; };

// mirrors cvk_probe_mem_push in runtime/vk/vk_probe.c
layout(push_constant) uniform Push {
    uint n;       // vec4s
} pc;

shared float sums[WG]; // one per subgroup; WG bounds the subgroup count for any subgroup size

void main() {
    uint stride = gl_NumWorkGroups.x * WG, t = gl_LocalInvocationID.x;
    // two accumulators: two loads in flight per thread without waiting for the adds
    vec4 a = vec4(0), b = vec4(0);
    uint i = gl_GlobalInvocationID.x;
    for (; i + stride < pc.n; i += 2 * stride) {
        a += src[i];
        b += src[i + stride];
    }
    if (i < pc.n) a += src[i];
    a += b;
    float sg = subgroupAdd(a.x + a.y + a.z + a.w);
    if (subgroupElect()) sums[gl_SubgroupID] = sg;
    barrier();
    if (t == 0) {
        float total = 0;
        for (uint s = 0; s < gl_NumSubgroups; s++) total += sums[s];
        partial[gl_WorkGroupID.x] = total;
    }
}
