// Greedy argmax over rows of logits, ties to the lower id (as sampler_argmax), in two
// passes of the same shader (specialization constant PASS):
//   PASS 0: workgroup (c, r) reduces logits[r][c*chunk, min(n, (c+1)*chunk)) to one
//           (value, id) pair in part[r][c];
//   PASS 1: workgroup r reduces part[r][0, n_chunks) and writes out[r].
// Inside a workgroup: each invocation keeps its best pair (strict > over ascending ids keeps
// the lower id), subgroups reduce (max value, then min id among those holding it), and one
// invocation combines the per-subgroup partials. -inf everywhere gives id 0 (as the CPU);
// NaN logits give an unspecified id.
//
// Two SPIR-V variants include this file: argmax.comp reads the logits through a storage
// buffer; argmax_texel.comp (TEXEL; CPU devices) through a uniform texel buffer of 16-byte
// texels, 4 logits per fetch: on llvmpipe a storage-buffer load whose address differs across
// the lanes is a loop over the lanes, a texel fetch one gather (docs/kernels/matvec.md). The
// rows must then start at whole texels (stride a multiple of 4; the host checks). Both give
// the same id: the maximum and the lowest id holding it do not depend on who reads what.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint PASS = 0;

#ifdef TEXEL
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 0) uniform utextureBuffer lt; // the logits' part: floats as bits, from texel pc.l0
#else
layout(binding = 0) readonly buffer L { float logits[]; };
#endif
layout(binding = 1) buffer P { uvec2 part[]; }; // (floatBitsToUint(value), id)
layout(binding = 2) writeonly buffer O { uint out_id[]; };

// mirrors cvk_argmax_push in runtime/vk/op_sample.h
layout(push_constant) uniform Push {
    uint n;        // logits per row
    uint rows;
    uint stride;   // floats between rows
    uint chunk;    // logits per pass-0 workgroup
    uint n_chunks; // = ceil(n / chunk)
    uint l0;       // TEXEL: the logits' first texel in their part
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
#ifdef TEXEL // chunk and stride are multiples of 4: texel t holds ids 4t .. 4t + 3 of the row
        for (uint t = lo / 4 + lid; 4 * t < hi; t += WG) {
            vec4 v = uintBitsToFloat(texelFetch(lt, int(pc.l0 + base / 4 + t)));
            for (uint j = 0; j < 4; j++) // ids past n (the row's last texel) are not logits
                if (4 * t + j < hi && (v[j] > bv || bi == 0xffffffffu)) { bv = v[j]; bi = 4 * t + j; }
        }
#else
        for (uint i = lo + lid; i < hi; i += WG) {
            float v = logits[base + i];
            if (v > bv || bi == 0xffffffffu) { bv = v; bi = i; }
        }
#endif
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
