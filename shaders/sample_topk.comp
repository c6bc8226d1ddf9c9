#version 450
// Seeded sampling over rows of logits with top-k, temperature and top-p, in the order of
// sampler_sample (runtime/model/sampler.h), with each row's own parameters and uniform u in
// [0, 1) read from a buffer (so rows of different requests sample in one dispatch, and a replayed
// recording takes new values):
//   0. a row whose temperature is not > 0 or whose top_k is outside 1..pc.k_max is skipped:
//      its out_id is left as it was (the argmax written before, for greedy rows);
//   1. the top_k largest logits, descending, ties by lower id;
//   2. p_i = exp((v_i - v_0) / temperature);
//   3. keep the shortest prefix whose mass sum(p) / total reaches top_p (at least one);
//   4. walk the kept prefix until the running sum exceeds u * (kept mass).
// Two passes of this shader (specialization constant PASS), like argmax.comp:
//   PASS 0: workgroup (c, r) selects the top K = min(top_k, chunk) of its chunk of 8 * WG
//           logits, K rounds of a workgroup argmax over logits held in registers (a bit
//           marks the taken ones), and writes them sorted to part[r][c][0..K) (lists are
//           min(k_max, chunk) entries apart, whatever the row's own top_k);
//           missing entries (a short last chunk) have id 0xffffffff.
//   PASS 1: workgroup r merges the sorted chunk lists (K rounds of an argmax over the list
//           heads), then one invocation does steps 2-4 and writes out[r].
// Sums are float (the CPU's are double): ids agree except when u or top_p falls within
// ~1e-6 of a boundary between two tokens.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint PASS = 0;
const uint ITEMS = 8;     // logits per invocation in pass 0; chunk = ITEMS * WG
const uint MAX_K = 256;   // the host checks k_max <= MAX_K
const uint MAX_CHUNKS = 1024; // and n_chunks <= MAX_CHUNKS
const uint NONE = 0xffffffffu;

layout(binding = 0) readonly buffer L { float logits[]; };
layout(binding = 1) buffer P { uvec2 part[]; };  // [rows][n_chunks][min(k_max, chunk)] (floatBitsToUint(v), id)
// mirrors cvk_sample_row in runtime/vk/op_sample.h
struct Row {
    float temperature;
    int top_k;
    float top_p;     // >= 1: no limit
    float u;         // this step's uniform draw
};
layout(binding = 2) readonly buffer R { Row prm[]; }; // [rows]
layout(binding = 3) writeonly buffer O { uint out_id[]; };    // [rows]

// mirrors cvk_sample_push in runtime/vk/op_sample.h
layout(push_constant) uniform Push {
    uint n;        // logits per row
    uint rows;
    uint stride;   // floats between rows
    uint n_chunks; // ceil(n / (ITEMS * WG))
    uint k_max;    // bound on the rows' top_k (1..MAX_K): fixes the scratch layout
} pc;

shared float sh_v[2 * WG]; // one per subgroup, two rounds' worth
shared uint sh_i[2 * WG];
shared uint head[MAX_CHUNKS];
shared float sel_v[MAX_K];
shared uint sel_i[MAX_K];

bool better(float v, uint i, float bv, uint bi) {
    if (i == NONE) return false;
    if (bi == NONE) return true;
    return v > bv || (v == bv && i < bi);
}

// Workgroup argmax of (bv, bi) in round j: every invocation returns the same winner. One
// barrier per round: rounds alternate between two halves of sh_v / sh_i, and a half is written
// again two rounds later, after the next round's barrier, which every reader of it has passed.
void reduce(uint j, inout float bv, inout uint bi) {
    float sv = subgroupMax(bi == NONE ? -1.0 / 0.0 : bv);
    uint si = subgroupMin(bi != NONE && bv == sv ? bi : NONE);
    uint h = (j & 1u) * WG;
    if (subgroupElect()) { sh_v[h + gl_SubgroupID] = sv; sh_i[h + gl_SubgroupID] = si; }
    barrier();
    bv = sh_v[h];
    bi = sh_i[h];
    for (uint s = 1; s < gl_NumSubgroups; s++)
        if (better(sh_v[h + s], sh_i[h + s], bv, bi)) { bv = sh_v[h + s]; bi = sh_i[h + s]; }
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint chunk = ITEMS * WG;
    uint row = PASS == 0 ? gl_WorkGroupID.y : gl_WorkGroupID.x;
    Row r = prm[row];
    if (!(r.temperature > 0.0) || r.top_k < 1 || uint(r.top_k) > pc.k_max) return; // uniform per workgroup
    uint top_k = uint(r.top_k);
    uint k_part = min(top_k, chunk);        // entries this row's lists hold
    uint k_stride = min(pc.k_max, chunk);   // entries between lists
    if (PASS == 0) {
        uint c = gl_WorkGroupID.x;
        uint lo = c * chunk, base = row * pc.stride;
        float v[ITEMS];
        uint live = 0; // bit m: item m exists and is not taken
        for (uint m = 0; m < ITEMS; m++) {
            uint i = lo + lid + m * WG;
            v[m] = i < pc.n ? logits[base + i] : 0.0;
            if (i < pc.n) live |= 1u << m;
        }
        uint out_base = (row * pc.n_chunks + c) * k_stride;
        for (uint j = 0; j < k_part; j++) {
            float bv = 0.0;
            uint bi = NONE;
            for (uint m = 0; m < ITEMS; m++) // ascending ids: strict > keeps the lower id
                if ((live & (1u << m)) != 0u && (bi == NONE || v[m] > bv)) { bv = v[m]; bi = lo + lid + m * WG; }
            reduce(j, bv, bi);
            if (bi != NONE && (bi - lo) % WG == lid) live &= ~(1u << ((bi - lo) / WG));
            if (lid == 0) part[out_base + j] = uvec2(floatBitsToUint(bv), bi);
        }
        return;
    }

    uint k = min(top_k, pc.n);
    for (uint c = lid; c < pc.n_chunks; c += WG) head[c] = 0;
    barrier();
    uint list0 = row * pc.n_chunks * k_stride;
    for (uint j = 0; j < k; j++) {
        float bv = 0.0;
        uint bi = NONE;
        for (uint c = lid; c < pc.n_chunks; c += WG) {
            if (head[c] >= k_part) continue;
            uvec2 q = part[list0 + c * k_stride + head[c]];
            float v = uintBitsToFloat(q.x);
            if (better(v, q.y, bv, bi)) { bv = v; bi = q.y; }
        }
        reduce(j, bv, bi);
        uint wc = bi / chunk; // ids are unique, so the winner's chunk is its own
        if (wc % WG == lid) head[wc]++;
        if (lid == 0) { sel_v[j] = bv; sel_i[j] = bi; }
    }
    if (lid != 0) return;
    float vmax = sel_v[0], total = 0.0;
    for (uint i = 0; i < k; i++) {
        float p = exp((sel_v[i] - vmax) / r.temperature);
        sel_v[i] = p;
        total += p;
    }
    uint keep = k;
    if (r.top_p < 1.0) {
        float mass = 0.0;
        for (uint i = 0; i < k; i++) {
            mass += sel_v[i] / total;
            if (mass >= r.top_p) { keep = i + 1; break; }
        }
    }
    float kept = 0.0;
    for (uint i = 0; i < keep; i++) kept += sel_v[i];
    float u = r.u * kept, acc = 0.0;
    uint id = sel_i[keep - 1];
    for (uint i = 0; i < keep; i++) {
        acc += sel_v[i];
        if (u < acc) { id = sel_i[i]; break; }
    }
    out_id[row] = id;
}
