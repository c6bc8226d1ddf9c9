#version 450
// NeoX RoPE in place on x laid out [tokens][heads][head_dim] (token rows tok_stride floats
// apart): for each head, pair (i, i + half), half = head_dim / 2, rotates by the angle
// pos[t] * inv_freq[i], inv_freq[i] = theta^(-2i/head_dim).
//
// The angle is never formed in float (at pos 40000 a float angle is off by ~2e-3 rad, and
// the device's sin/cos are only specified to 2^-11). The host tabulates, in double,
//   lo[p][i] = (cos, sin)(p * inv_freq[i])            p < 2^shift
//   hi[q][i] = (cos, sin)((q << shift) * inv_freq[i])  q < n_hi
// and the kernel splits pos = (q << shift) + p and applies the angle-addition formula:
// a few float roundings, no transcendental functions, ~1e-7 absolute on cos and sin.
// Positions past the table are clamped into it (wrong but in bounds); the host checks sizes.
// One invocation per pair; flat index over a 2-D grid of workgroups.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer Pos { uint pos[]; };
layout(binding = 2) readonly buffer Tab { vec2 tab[]; }; // lo rows, then hi rows; half vec2 each

// mirrors cvk_rope_push in runtime/vk/op_rope.h
layout(push_constant) uniform Push {
    uint tokens;
    uint heads;
    uint head_dim;  // even
    uint tok_stride; // floats between tokens
    uint shift;      // lo table holds 1 << shift positions
    uint n_hi;       // hi table rows
} pc;

void main() {
    uint half_d = pc.head_dim >> 1;
    uint gid = (gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u) * WG + gl_LocalInvocationID.x;
    uint per_tok = pc.heads * half_d;
    if (gid >= pc.tokens * per_tok) return;
    uint t = gid / per_tok, r = gid - t * per_tok;
    uint h = r / half_d, i = r - h * half_d;
    uint p = pos[t];
    uint lo = p & ((1u << pc.shift) - 1u), hi = min(p >> pc.shift, pc.n_hi - 1u);
    vec2 a = tab[lo * half_d + i];
    vec2 b = tab[((1u << pc.shift) + hi) * half_d + i];
    // (cos, sin)(A + B)
    float c = a.x * b.x - a.y * b.y;
    float s = a.y * b.x + a.x * b.y;
    uint base = t * pc.tok_stride + h * pc.head_dim + i;
    float u = x[base], v = x[base + half_d];
    x[base] = u * c - v * s;
    x[base + half_d] = u * s + v * c;
}
