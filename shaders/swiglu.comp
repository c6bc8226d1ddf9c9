#version 450
// SwiGLU over rows: h[r][i] = silu(g[r][i]) * u[r][i], silu(x) = x / (1 + exp(-x)), for
// r < rows, i < n; each operand's rows are its own stride apart (so g and u may be the two
// halves of a fused gate/up output). h may alias g or u element for element.
// One element per invocation; flat index over a 2-D grid of workgroups.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(binding = 0) readonly buffer G { float g[]; };
layout(binding = 1) readonly buffer U { float u[]; };
layout(binding = 2) writeonly buffer H { float h[]; };

// mirrors cvk_swiglu_push in runtime/vk/op_eltwise.h
layout(push_constant) uniform Push {
    uint n;        // elements per row
    uint rows;
    uint g_stride; // floats between rows of g
    uint u_stride;
    uint h_stride;
} pc;

void main() {
    uint k = (gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u) * WG + gl_LocalInvocationID.x;
    if (k >= pc.n * pc.rows) return;
    uint r = k / pc.n, i = k - r * pc.n;
    float x = g[r * pc.g_stride + i];
    h[r * pc.h_stride + i] = x / (1.0 + exp(-x)) * u[r * pc.u_stride + i];
}
