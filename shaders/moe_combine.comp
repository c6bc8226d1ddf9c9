#version 450
// MoE combine: the weighted sum of each token's k expert outputs, added into the residual.
//   x[r][i] += sum_j w[r*k + j] * e[(r*k + j) * e_stride + i]      r < rows, i < n
// The sum runs over j in order from 0 in float, separate multiply and add (precise), then is
// added to x once: exactly the order of cpu_ref.c moe() (xb2 = sum, then x += xb2).
// One element per invocation; flat index over a 2-D grid of workgroups.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer E { float e[]; };
layout(binding = 2) readonly buffer W { float w[]; };

// mirrors cvk_moe_combine_push in runtime/vk/op_moe_combine.h
layout(push_constant) uniform Push {
    uint n, k, rows, e_stride;
} pc;

void main() {
    uint g = (gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u) * WG + gl_LocalInvocationID.x;
    if (g >= pc.n * pc.rows) return;
    uint r = g / pc.n, i = g - r * pc.n;
    precise float acc = 0.0;
    for (uint j = 0; j < pc.k; j++) {
        uint s = r * pc.k + j;
        precise float t = w[s] * e[s * pc.e_stride + i];
        acc = acc + t;
    }
    precise float y = x[g] + acc;
    x[g] = y;
}
