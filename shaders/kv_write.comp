#version 450
// KV write: K and V rows of new tokens (f32, from the projections) into their pages as fp16.
// Token i (i < n_tokens) goes to block-table row loc[i].x at position loc[i].y: page
// table[loc[i].x * table_stride + loc[i].y / page_tokens], slot loc[i].y % page_tokens.
// Page layout: runtime/base/kv_layout.h. One workgroup per token (x + y * 65535); invocations stride
// over the n_head_kv * HEAD_DIM / 2 pairs of halves, each packed into one uint.
// The pool may be split into parts: the host dispatches once per part, binding it and passing
// page0/pages; a dispatch writes only the pages its part holds.

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HEAD_DIM = 128;

layout(binding = 0) buffer Pool { uint pool[]; };          // one part, fp16 pairs
layout(binding = 1) readonly buffer K { float k[]; };
layout(binding = 2) readonly buffer V { float v[]; };
layout(binding = 3) readonly buffer Table { uint table[]; };
layout(binding = 4) readonly buffer Loc { uvec2 loc[]; };  // {table row, position} per token

// mirrors cvk_kv_write_push in runtime/vk/op_kv_write.h
layout(push_constant) uniform Push {
    uint n_tokens;
    uint layer;
    uint n_head_kv;
    uint page_tokens;
    uint table_stride; // uints between block-table rows
    uint page0;        // first page in the bound part
    uint pages;        // pages in the bound part
    uint page_words;   // uints per page
    uint k_stride;     // floats between tokens of k
    uint v_stride;     // floats between tokens of v
} pc;

void main() {
    uint i = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    if (i >= pc.n_tokens) return;
    uvec2 lp = loc[i];
    uint page = table[lp.x * pc.table_stride + lp.y / pc.page_tokens];
    if (page < pc.page0 || page - pc.page0 >= pc.pages) return; // another part's page
    uint slot = lp.y % pc.page_tokens;
    uint base = (page - pc.page0) * pc.page_words;
    uint half_row = HEAD_DIM / 2, n_pairs = pc.n_head_kv * half_row;
    for (uint j = gl_LocalInvocationID.x; j < n_pairs; j += gl_WorkGroupSize.x) {
        uint h = j / half_row, w = j % half_row;
        uint kw = base + (((pc.layer * 2u) * pc.n_head_kv + h) * pc.page_tokens + slot) * half_row + w;
        uint vw = base + (((pc.layer * 2u + 1u) * pc.n_head_kv + h) * pc.page_tokens + slot) * half_row + w;
        uint ko = i * pc.k_stride + 2u * j, vo = i * pc.v_stride + 2u * j;
        pool[kw] = packHalf2x16(vec2(k[ko], k[ko + 1u]));
        pool[vw] = packHalf2x16(vec2(v[vo], v[vo + 1u]));
    }
}
