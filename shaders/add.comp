#version 450
// Elementwise sum: y[i] = a[i] + b[i] for i < n. y may be a or b (the residual y += x binds
// y as both a and y): each element is read and written by one invocation.
// One element per invocation; flat index over a 2-D grid of workgroups.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

// mirrors cvk_add_push in runtime/vk/op_eltwise.h
layout(push_constant) uniform Push {
    uint n;
} pc;

void main() {
    uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u) * WG + gl_LocalInvocationID.x;
    if (i < pc.n) y[i] = a[i] + b[i];
}
