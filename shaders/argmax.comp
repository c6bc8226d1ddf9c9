#version 450
// Greedy argmax over rows of logits, ties to the lower id (as sampler_argmax), in two
// passes of the same shader (specialization constant PASS):
//   PASS 0: workgroup (c, r) reduces logits[r][c*chunk, min(n, (c+1)*chunk)) to one
//           (value, id) pair in part[r][c];
//   PASS 1: workgroup r reduces part[r][0, n_chunks) and writes out[r].
// Inside a workgroup: each invocation keeps its best pair (strict > over ascending ids keeps
// the lower id), subgroups reduce (max value, then min id among those holding it), and one
// invocation combines the per-subgroup partials. -inf everywhere gives id 0 (as the CPU);
// NaN logits give an unspecified id.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint PASS = 0;

layout(binding = 0) readonly buffer L { float logits[]; };
layout(binding = 1) buffer P { uvec2 part[]; }; // (floatBitsToUint(value), id)
layout(binding = 2) writeonly buffer O { uint out_id[]; };

// mirrors cvk_argmax_push in runtime/vk/op_sample.h
layout(push_constant) uniform Push {
    uint n;        // logits per row
    uint rows;
    uint stride;   // floats between rows
    uint chunk;    // logits per pass-0 workgroup
    uint n_chunks; // = ceil(n / chunk)
} pc;

shared float sh_v[WG]; // one per subgroup
shared uint sh_i[WG];

bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

void main() {
    uint lid = gl_LocalInvocationID.x;
    float bv = -1.0 / 0.0;
    uint bi = 0xffffffffu;
    uint row;
    if (PASS == 0) {
        row = gl_WorkGroupID.y;
        uint c = gl_WorkGroupID.x, lo = c * pc.chunk, hi = min(pc.n, lo + pc.chunk);
        uint base = row * pc.stride;
        for (uint i = lo + lid; i < hi; i += WG) {
            float v = logits[base + i];
            if (v > bv || bi == 0xffffffffu) { bv = v; bi = i; }
        }
    } else {
        row = gl_WorkGroupID.x;
        uint base = row * pc.n_chunks;
        for (uint c = lid; c < pc.n_chunks; c += WG) {
            uvec2 q = part[base + c];
            float v = uintBitsToFloat(q.x);
            if (better(v, q.y, bv, bi)) { bv = v; bi = q.y; }
        }
    }
    float sv = subgroupMax(bv);
    uint si = subgroupMin(bv == sv ? bi : 0xffffffffu);
    if (subgroupElect()) { sh_v[gl_SubgroupID] = sv; sh_i[gl_SubgroupID] = si; }
    barrier();
    if (lid != 0) return;
    bv = sh_v[0];
    bi = sh_i[0];
    for (uint s = 1; s < gl_NumSubgroups; s++)
        if (better(sh_v[s], sh_i[s], bv, bi)) { bv = sh_v[s]; bi = sh_i[s]; }
    if (PASS == 0) part[row * pc.n_chunks + gl_WorkGroupID.x] = uvec2(floatBitsToUint(bv), bi);
    else out_id[row] = bi;
}
