#version 450
// Paged attention, combine pass: merges the n_partials = n_parts * n_split partial softmax
// states {m, l, acc[HEAD_DIM]} that attn_prefill.comp (either kernel) wrote for each (token,
// query head) when the pool has several parts or a token's walk several splits:
//   M = max_i m_i,  L = sum_i exp(m_i - M) l_i,  out[d] = sum_i exp(m_i - M) acc_i[d] / L
// A partial that saw no tokens has m = -inf, l = 0 and weighs 0. A sequence of length 0
// gives zeros. Workgroup (x = head, y = token); invocations stride over the dims.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint HEAD_DIM = 128;
#define NEG_INF uintBitsToFloat(0xff800000u) // -infinity

layout(binding = 0) readonly buffer Partials { float part_in[]; };
layout(binding = 1) writeonly buffer Out { float outv[]; }; // [token][n_head][HEAD_DIM] (out_stride per token)

// mirrors cvk_attn_combine_push in runtime/vk/op_attn_prefill.h
layout(push_constant) uniform Push {
    uint n_head;
    uint n_partials;
    uint out_stride; // floats between tokens of out
} pc;

void main() {
    uint h = gl_WorkGroupID.x, q = gl_WorkGroupID.y;
    uint base = (q * pc.n_head + h) * pc.n_partials * (HEAD_DIM + 2u);
    float mx = NEG_INF;
    for (uint i = 0; i < pc.n_partials; i++) mx = max(mx, part_in[base + i * (HEAD_DIM + 2u)]);
    float sum = 0.0;
    if (mx != NEG_INF)
        for (uint i = 0; i < pc.n_partials; i++) {
            uint b = base + i * (HEAD_DIM + 2u);
            sum = fma(exp(part_in[b] - mx), part_in[b + 1u], sum);
        }
    float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (uint d = gl_LocalInvocationID.x; d < HEAD_DIM; d += WG) {
        float a = 0.0;
        if (mx != NEG_INF)
            for (uint i = 0; i < pc.n_partials; i++) {
                uint b = base + i * (HEAD_DIM + 2u);
                float w = exp(part_in[b] - mx);
                if (w > 0.0) a = fma(w, part_in[b + 2u + d], a);
            }
        outv[q * pc.out_stride + h * HEAD_DIM + d] = a * inv;
    }
}
