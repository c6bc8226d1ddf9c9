#version 450
// MoE router, one workgroup per token: softmax over n_expert logits, the top k experts by
// probability (ties to the lower index, as cpu_moe_route), their weights renormalized to sum
// to 1 (renorm = 1) or left as softmax probabilities (renorm = 0).
//
// The exponentials e[x] = exp(logit[x] - max) sit in shared memory. Selection runs k rounds
// of a workgroup argmax: each invocation scans its strided experts in ascending order (strict
// > keeps the lowest index among equals), subgroups reduce (max value, then min index among
// those holding it), and every invocation reduces the per-subgroup partials in the same
// order, so all of them know the winner; its owner marks it taken (-1 < any exp). The
// winner's e is proportional to its probability, so weights are e / sum over the chosen.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
const uint MAX_EXPERT = 256; // the host checks n_expert <= MAX_EXPERT and k <= MAX_K
const uint MAX_K = 8;

layout(binding = 0) readonly buffer L { float logits[]; };
layout(binding = 1) writeonly buffer I { uint ids[]; };     // [tokens][k]
layout(binding = 2) writeonly buffer W { float weights[]; }; // [tokens][k]

// mirrors cvk_moe_route_push in runtime/vk/op_moe_route.h
layout(push_constant) uniform Push {
    uint n_expert;
    uint k;
    uint tokens;
    uint stride; // floats between tokens' logits
    uint renorm;
} pc;

shared float e[MAX_EXPERT];
shared float part_v[WG]; // one per subgroup; WG bounds the subgroup count
shared uint part_i[WG];

void main() {
    uint tok = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    if (tok >= pc.tokens) return; // uniform across the workgroup
    uint lid = gl_LocalInvocationID.x, base = tok * pc.stride;

    float m = -1.0 / 0.0;
    for (uint x = lid; x < pc.n_expert; x += WG) {
        float v = logits[base + x];
        e[x] = v;
        m = max(m, v);
    }
    m = subgroupMax(m);
    if (subgroupElect()) part_v[gl_SubgroupID] = m;
    barrier();
    m = part_v[0];
    for (uint s = 1; s < gl_NumSubgroups; s++) m = max(m, part_v[s]);
    barrier();

    float sum = 0.0;
    for (uint x = lid; x < pc.n_expert; x += WG) {
        float p = exp(e[x] - m);
        e[x] = p;
        sum += p;
    }
    sum = subgroupAdd(sum);
    if (subgroupElect()) part_v[gl_SubgroupID] = sum;
    barrier();
    sum = 0.0;
    for (uint s = 0; s < gl_NumSubgroups; s++) sum += part_v[s];
    barrier();

    float wv[MAX_K];
    uint wi[MAX_K];
    float chosen = 0.0;
    for (uint j = 0; j < pc.k; j++) {
        float bv = -2.0;
        uint bi = 0xffffffffu;
        for (uint x = lid; x < pc.n_expert; x += WG) {
            float v = e[x];
            if (v > bv) { bv = v; bi = x; }
        }
        float sv = subgroupMax(bv);
        uint si = subgroupMin(bv == sv ? bi : 0xffffffffu);
        if (subgroupElect()) { part_v[gl_SubgroupID] = sv; part_i[gl_SubgroupID] = si; }
        barrier();
        bv = part_v[0];
        bi = part_i[0];
        for (uint s = 1; s < gl_NumSubgroups; s++) {
            float v = part_v[s];
            uint i = part_i[s];
            if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
        }
        barrier(); // partials read before the next round writes them
        wv[j] = bv;
        wi[j] = bi;
        chosen += bv;
        if (bi % WG == lid) e[bi] = -1.0; // only its owner reads e[bi]
    }
    if (lid == 0) {
        float div = pc.renorm != 0u ? chosen : sum;
        for (uint j = 0; j < pc.k; j++) {
            ids[tok * pc.k + j] = wi[j];
            weights[tok * pc.k + j] = wv[j] / div;
        }
    }
}
