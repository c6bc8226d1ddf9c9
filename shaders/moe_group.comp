#version 450
// MoE expert grouping, one workgroup for the whole batch: a stable counting sort of the
// routed (token, slot) pairs p = t*k + slot by expert id[p], so that the prefill matmul's
// grouped mode can run every expert's tokens without the host seeing the ids.
//
//   groups[e]  = {offset, count}: count = #{p : ids[p] == e}, offset = exclusive scan
//   gather[j]  = p / k  (the token)   for the j-th pair in (expert, p) order
//   scatter[j] = p      (t*k + slot)
//   entries j >= sum of counts are -1 (skipped by the matmul)
// Ids outside [0, n_expert) are dropped.
//
// 1. Counts: every invocation adds its strided pairs into cnt[e] with shared atomics
//    (a sum: the same result in any order).
// 2. Scan: invocation 0 walks the <= 256 experts, writes groups and turns cnt[e] into the
//    first free slot of e.
// 3. Placement, in tiles of WG consecutive pairs (p = base + lid): each invocation sets its
//    bit in mask[e][lid / 32] (atomicOr: order-free). The rank of p among the tile's pairs of
//    expert e is the number of bits set below lid, so slot = cnt[e] + rank is the same on
//    every run and preserves p order. The invocation of rank 0 then advances cnt[e] by the
//    tile's count of e and clears e's mask. Three barriers per tile, WG/32 popcounts per pair.
// Uses only shared atomics at workgroup scope (the device runs with the Vulkan memory model
// but without vulkanMemoryModelDeviceScope, so the default device-scope atomics are invalid),
// and no subgroup size assumptions.

#extension GL_KHR_memory_scope_semantics : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256; // a multiple of 32, <= 512 (op_moe_group.c checks)
const uint MAX_EXPERT = 256;                 // the host checks n_expert <= MAX_EXPERT
const uint WORDS = WG / 32;                  // mask words per expert

layout(binding = 0) readonly buffer I { int ids[]; };       // [n_tokens][k]
layout(binding = 1) writeonly buffer G { uvec2 groups[]; }; // [n_expert] {offset, count}
layout(binding = 2) writeonly buffer A { int gather[]; };   // [n_tokens * k]
layout(binding = 3) writeonly buffer S { int scatter[]; };  // [n_tokens * k]

// mirrors cvk_moe_group_push in runtime/vk/op_moe_group.h
layout(push_constant) uniform Push {
    uint n_expert;
    uint n_tokens;
    uint k;
} pc;

shared uint cnt[MAX_EXPERT];          // counts, then the next free slot per expert
shared uint mask[MAX_EXPERT * WORDS]; // tile members per expert, one bit per invocation
shared uint total;                    // pairs kept

void main() {
    uint lid = gl_LocalInvocationID.x, n = pc.n_tokens * pc.k;
    for (uint e = lid; e < pc.n_expert; e += WG) cnt[e] = 0;
    for (uint i = lid; i < pc.n_expert * WORDS; i += WG) mask[i] = 0;
    barrier();

    for (uint p = lid; p < n; p += WG) {
        uint e = uint(ids[p]);
        if (e < pc.n_expert) atomicAdd(cnt[e], 1u, gl_ScopeWorkgroup, 0, 0);
    }
    barrier();

    if (lid == 0) {
        uint s = 0;
        for (uint e = 0; e < pc.n_expert; e++) {
            uint c = cnt[e];
            groups[e] = uvec2(s, c);
            cnt[e] = s;
            s += c;
        }
        total = s;
    }
    barrier();

    uint w = lid / 32u, bit = 1u << (lid % 32u), below = bit - 1u;
    for (uint base = 0; base < n; base += WG) {
        uint p = base + lid, e = p < n ? uint(ids[p]) : 0xffffffffu;
        bool keep = e < pc.n_expert;
        if (keep) atomicOr(mask[e * WORDS + w], bit, gl_ScopeWorkgroup, 0, 0);
        barrier();
        uint rank = 0, tile_count = 0;
        if (keep) {
            for (uint i = 0; i < WORDS; i++) {
                uint m = mask[e * WORDS + i], c = uint(bitCount(m));
                tile_count += c;
                rank += i < w ? c : (i == w ? uint(bitCount(m & below)) : 0u);
            }
            uint j = cnt[e] + rank;
            gather[j] = int(p / pc.k);
            scatter[j] = int(p);
        }
        barrier(); // every pair of the tile has read cnt and mask
        if (keep && rank == 0) {
            cnt[e] += tile_count;
            for (uint i = 0; i < WORDS; i++) mask[e * WORDS + i] = 0;
        }
        barrier();
    }

    for (uint j = total + lid; j < n; j += WG) {
        gather[j] = -1;
        scatter[j] = -1;
    }
}
