#version 450
// Per-head RMS norm then NeoX RoPE, for Q in place, or for K straight into its KV pages with V
// beside it: one stage where rmsnorm, RoPE and the KV write took three (issue 15: fewer dependent
// stages per layer). Q and K dispatches are independent and share the stage.
//
// One workgroup of HEAD_DIM / 2 invocations per (token t, head h) row of x ([tokens][heads]
// [HEAD_DIM], tok_stride floats between tokens); invocation i holds the RoPE pair (i, i + half):
//   s  = sum over the row of x^2: fma(a, a, b * b) per invocation, the partials added in
//        row_rms.glsl's fixed pairwise tree (the same order at any subgroup size: a
//        subgroupAdd's order is the implementation's)
//   y  = x * inversesqrt(s / HEAD_DIM + eps) * w                         (as rmsnorm.comp)
//   (y[i], y[i + half]) rotated by pos * theta^(-2i/HEAD_DIM), the tabulated angle-addition of
//   runtime/vk/rope_table.h, pos = loc[t].y
// KV (spec constant): y is not written back; it goes to the page of block-table row loc[t].x at
// position loc[t].y as fp16, with V's row h of token t (layout: runtime/base/kv_layout.h), pages of the bound
// pool part only (the host dispatches once per part). Otherwise y replaces x.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;        // = HEAD_DIM / 2
layout(constant_id = 1) const uint HEAD_DIM = 128;
layout(constant_id = 2) const bool KV = false;

layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer W { float w[]; };            // [HEAD_DIM] norm weight
layout(binding = 2) readonly buffer Tab { vec2 tab[]; };         // rope table (op_rope.h)
layout(binding = 3) readonly buffer Loc { uvec2 loc[]; };        // {table row, position} per token
layout(binding = 4) buffer Pool { uint pool[]; };                // KV: one part, fp16 pairs
layout(binding = 5) readonly buffer V { float v[]; };            // KV: [tokens][heads][HEAD_DIM]
layout(binding = 6) readonly buffer Table { uint table[]; };     // KV: page ids per row

// mirrors cvk_head_norm_rope_push in runtime/vk/op_head_norm_rope.h
layout(push_constant) uniform Push {
    uint tokens;
    uint heads;
    uint tok_stride;   // floats between tokens of x (and v)
    float eps;
    uint shift;        // rope table: lo rows 1 << shift
    uint n_hi;         // rope table: hi rows
    uint layer;        // KV:
    uint page_tokens;
    uint table_stride; // uints between block-table rows
    uint page0;        // first page in the bound part
    uint pages;        // pages in the bound part
    uint page_words;   // uints per page
} pc;

const uint HALF = HEAD_DIM / 2;
#include "row_rms.glsl"
shared float y[HEAD_DIM]; // KV: the rotated row, re-paired for packing

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    if (row >= pc.tokens * pc.heads) return; // uniform across the workgroup
    uint t = row / pc.heads, h = row - t * pc.heads, i = gl_LocalInvocationID.x;
    uvec2 lp = loc[t];
    uint page = 0;
    if (KV) {
        page = table[lp.x * pc.table_stride + lp.y / pc.page_tokens];
        if (page < pc.page0 || page - pc.page0 >= pc.pages) return; // another part's page
    }
    uint base = t * pc.tok_stride + h * HEAD_DIM;
    float a = x[base + i], b = x[base + i + HALF];
    float scale = row_rms_scale(fma(a, a, b * b), HEAD_DIM, pc.eps);
    a = a * scale * w[i];
    b = b * scale * w[i + HALF];

    uint lo = lp.y & ((1u << pc.shift) - 1u), hi = min(lp.y >> pc.shift, pc.n_hi - 1u);
    vec2 ta = tab[lo * HALF + i];
    vec2 tb = tab[((1u << pc.shift) + hi) * HALF + i];
    // every multiply-add explicit: the same roundings on every compiler (ACO fuses a * c - b * sn
    // into one fma where llvmpipe does not)
    float c = fma(ta.x, tb.x, -(ta.y * tb.y)); // (cos, sin)(A + B)
    float sn = fma(ta.y, tb.x, ta.x * tb.y);
    float ra = fma(a, c, -(b * sn)), rb = fma(a, sn, b * c);
    if (!KV) {
        x[base + i] = ra;
        x[base + i + HALF] = rb;
        return;
    }
    y[i] = ra;
    y[i + HALF] = rb;
    barrier();
    uint slot = lp.y % pc.page_tokens, pb = (page - pc.page0) * pc.page_words;
    uint n_head_kv = pc.heads;
    uint kw = pb + (((pc.layer * 2u) * n_head_kv + h) * pc.page_tokens + slot) * HALF + i;
    uint vw = pb + (((pc.layer * 2u + 1u) * n_head_kv + h) * pc.page_tokens + slot) * HALF + i;
    pool[kw] = packHalf2x16(vec2(y[2u * i], y[2u * i + 1u]));
    pool[vw] = packHalf2x16(vec2(v[base + 2u * i], v[base + 2u * i + 1u]));
}
