#version 450
// MoE combine: the weighted sum of each token's k expert outputs, added into the residual,
// and (norm = 1) the RMS norm of the new row, the next stage's input, in the same pass:
//   x[r][i] += sum_j w[r*k + j] * e[(r*k + j) * e_stride + i]      r < rows, i < n
//   y[r][i]  = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * nw[i]      (norm = 1)
// The sum runs over j in order from 0 in float, separate multiply and add (precise), then is
// added to x once: exactly the order of cpu_ref.c moe() (xb2 = sum, then x += xb2). The norm
// is rmsnorm.comp's (the same strided shares, row_rms_scale, the same expression), so with the
// same WG the fused y has the bits of moe_combine followed by rmsnorm: one stage fewer per
// layer (the next layer's attn_norm, or the head's output_norm, rides on the combine).
// One workgroup per row (row = x + y * 65535 workgroups), each invocation a strided share.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer E { float e[]; };
layout(binding = 2) readonly buffer W { float w[]; };
layout(binding = 3) readonly buffer NW { float nw[]; }; // norm weights [n] (norm = 1)
layout(binding = 4) writeonly buffer Y { float y[]; };  // normed rows, n apart (norm = 1)

// mirrors cvk_moe_combine_push in runtime/vk/op_moe_combine.h
layout(push_constant) uniform Push {
    uint n, k, rows, e_stride;
    uint norm; // 1: write y
    float eps;
} pc;

#include "row_rms.glsl"

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    if (row >= pc.rows) return; // uniform across the workgroup
    uint xb = row * pc.n;
    float acc = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += WG) {
        precise float sum = 0.0;
        for (uint j = 0; j < pc.k; j++) {
            uint s = row * pc.k + j;
            precise float t = w[s] * e[s * pc.e_stride + i];
            sum = sum + t;
        }
        precise float v = x[xb + i] + sum;
        x[xb + i] = v;
        acc = fma(v, v, acc); // rmsnorm.comp's expression
    }
    if (pc.norm == 0u) return; // uniform
    float scale = row_rms_scale(acc, pc.n, pc.eps);
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += WG) y[xb + i] = x[xb + i] * scale * nw[i];
}
