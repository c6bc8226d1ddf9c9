#version 450
// RMS norm over rows: y[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * w[i].
// One workgroup per row (row = x + y * 65535 workgroups); each invocation accumulates a
// strided share of x^2, reduced by row_rms_scale (row_rms.glsl: a fixed order, deterministic).
// y may be the same buffer as x (in place): each element is read and written by one invocation.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer W { float w[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

// mirrors cvk_rmsnorm_push in runtime/vk/op_rmsnorm.h
layout(push_constant) uniform Push {
    uint n;        // elements per row
    uint rows;
    uint x_stride; // floats between rows of x
    uint y_stride; // floats between rows of y
    float eps;
} pc;

#include "row_rms.glsl"

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    if (row >= pc.rows) return; // uniform across the workgroup
    uint xb = row * pc.x_stride, yb = row * pc.y_stride;
    float acc = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += WG) {
        float v = x[xb + i];
        acc = fma(v, v, acc);
    }
    float scale = row_rms_scale(acc, pc.n, pc.eps);
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += WG) y[yb + i] = x[xb + i] * scale * w[i];
}
