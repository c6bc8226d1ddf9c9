#version 450
// Device-local copy bandwidth probe (runtime/vk/vk_probe.c): dst[i] = src[i] over n vec4s,
// a grid-stride loop so a fixed number of workgroups covers any n. At each step the threads
// of a workgroup touch 256 consecutive 16-byte vec4s: fully coalesced on every GPU.
// Bytes moved = 2 * 16 * n (read + write).
layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer Src { vec4 src[]; };
layout(binding = 1) writeonly buffer Dst { vec4 dst[]; };

// mirrors cvk_probe_mem_push in runtime/vk/vk_probe.c
layout(push_constant) uniform Push {
    uint n;       // vec4s
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) dst[i] = src[i];
}
