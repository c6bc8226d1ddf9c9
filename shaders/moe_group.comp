#version 450
// MoE routing and expert grouping, one workgroup for the whole batch: with route = 1 first
// the router (below), then a stable counting sort of the routed (token, slot) pairs
// p = t*k + slot by expert id[p], so that the grouped matmuls can run every expert's tokens
// without the host seeing the ids. Routing here rather than in a kernel of its own saves a
// dependent stage per MoE layer; many tokens route in a grid of this kernel first (route = 2).
//
// Routing (route = 1 or 2), one subgroup per token (route = 1: tokens t = subgroup, subgroup +
// subgroups, ... of the one workgroup; route = 2: a grid of workgroups that only route, a token
// a subgroup, and return; the sort is then a second dispatch with route = 0):
//   p = softmax(logits[t][0..n_expert)); ids[t][0..k) = the k experts of largest p,
//   descending, ties to the lower index (cpu_moe_route); weights[t][j] = p[ids] / sum of the
//   chosen (renorm = 1) or the plain probability. Lanes take experts lane, lane + S, ... with
//   e = exp(logit - max) (max and the sum of e by subgroupMax / subgroupAdd); each of the k
//   rounds is a subgroup argmax (subgroupMax of e, then subgroupMin of the index among the
//   lanes holding it) over the experts not yet chosen, e held in registers. No barrier: a
//   token's routing is its subgroup's alone, so it is the same whatever else is in the batch. The ids go to the ids buffer (workgroupcoherent)
//   and a workgroup barrier over buffer memory makes them visible to the sort.
//
//   groups[e]  = {offset, count}: count = #{p : ids[p] == e}, offset = exclusive scan
//   gather[j]  = p / k  (the token)   for the j-th pair in (expert, p) order
//   scatter[j] = p      (t*k + slot)
//   entries j >= sum of counts are -1 (skipped by the matmul)
// Ids outside [0, n_expert) are dropped.
// With tile0 > 0 it also writes the grouped matmul's work lists, so that its indirect
// dispatches launch no workgroup for an empty expert and size token tiles to the count:
//   list 0: experts with 0 < count <= split, one item per tile0 tokens, at items[0..)
//   list 1: experts with count > split, one item per tile1 tokens, at items[cap..)
//   items[i] = {expert, first token of the tile}, experts in increasing order
//   dispatch[3d..3d+2] = {items in list d / 2, row_tiles[d], 1}, d < 4 (VkDispatchIndirectCommand:
//   x = the consumer's work items, y = its row tiles; two consumer shapes per list). Items on
//   x: workgroups in launch order take one row tile for an expert's consecutive items, so
//   its slice is read once per row tile while it is still in cache, not once per item.
//
// 1. Counts: every invocation adds its strided pairs into cnt[e] with shared atomics
//    (a sum: the same result in any order).
// 2. Scan: invocation i owns experts [i * per, (i + 1) * per), per = ceil(n_expert / WG), and
//    sums their pairs and items; subgroup 0 turns the WG sums into an exclusive prefix sum in
//    chunks of its lanes (subgroupExclusiveAdd, integers: the same result in any order); then
//    each invocation writes its experts' groups and turns cnt[e] into the first free slot of e.
//    On a GPU two barriers and WG / subgroup size subgroup scans, where one invocation walking
//    the experts was a chain of 128 dependent shared-memory round trips per layer.
// 3. Placement, in tiles of WG consecutive pairs (p = base + lid): each invocation sets its
//    bit in mask[e][lid / 32] (atomicOr: order-free). The rank of p among the tile's pairs of
//    expert e is the number of bits set below lid, so slot = cnt[e] + rank is the same on
//    every run and preserves p order. The invocation of rank 0 then advances cnt[e] by the
//    tile's count of e and clears e's mask. Three barriers per tile, WG/32 popcounts per pair.
// Uses only shared atomics and barriers at workgroup scope (the device runs with the Vulkan
// memory model but without vulkanMemoryModelDeviceScope, so device-scope atomics are invalid),
// and no subgroup size assumptions.

#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256; // a multiple of 32, <= 512 (op_moe_group.c checks)
layout(constant_id = 1) const uint PER_LANE = 32; // MAX_EXPERT / the device's least subgroup size
const uint MAX_EXPERT = 256;                 // the host checks n_expert <= MAX_EXPERT
const uint WORDS = WG / 32;                  // mask words per expert
const uint MAX_K = 8;                        // the host checks k <= MAX_K (route)

layout(binding = 0) workgroupcoherent buffer I { int ids[]; }; // [n_tokens][k]: input, or routed here
layout(binding = 1) writeonly buffer G { uvec2 groups[]; }; // [n_expert] {offset, count}
layout(binding = 2) writeonly buffer A { int gather[]; };   // [n_tokens * k]
layout(binding = 3) writeonly buffer S { int scatter[]; };  // [n_tokens * k]
layout(binding = 4) writeonly buffer W { uvec2 items[]; };  // [2 * cap] (tile0 > 0)
layout(binding = 5) writeonly buffer D { uint dispatch[]; }; // [4][3] (tile0 > 0)
layout(binding = 6) readonly buffer L { float logits[]; };  // [n_tokens][stride] (route)
layout(binding = 7) writeonly buffer R { float weights[]; }; // [n_tokens][k] (route)

// mirrors cvk_moe_group_push in runtime/vk/op_moe_group.h
layout(push_constant) uniform Push {
    uint n_expert;
    uint n_tokens;
    uint k;
    uint tile0, tile1; // tokens per work item of list 0 / 1 (tile0 0: no lists written)
    uint split;        // largest count that goes to list 0
    uint cap;          // items list 1 starts at
    uint row_tiles0, row_tiles1, row_tiles2, row_tiles3; // y extents of the four dispatch commands
    uint route;              // 1: route the logits first (writes ids and weights); 2: route only
    uint renorm;             // route: weights renormalized over the chosen
    uint stride;             // route: floats between tokens' logits
} pc;

const uint NONE = 0xffffffffu;

// Routes token t; called by a whole subgroup (t uniform in it). A lane holds its experts'
// logits and e values in registers (lane + i * S for i < PER_LANE), read once: the k rounds
// compare registers and two subgroup reductions, not k passes over memory (on a GPU each a
// dependent load; moe_group ran 35 us a decode layer on an H200 before).
void route_token(uint t) {
    uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, base = t * pc.stride;
    float ev[PER_LANE];
    bool taken[PER_LANE];
    float m = -1.0 / 0.0;
    [[unroll]] for (uint i = 0; i < PER_LANE; i++) {
        uint x = lane + i * S;
        taken[i] = x >= pc.n_expert; // past the experts: never read, never chosen
        ev[i] = -1.0 / 0.0;
        if (!taken[i]) ev[i] = logits[base + x];
        m = max(m, ev[i]);
    }
    m = subgroupMax(m);
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < PER_LANE; i++)
        if (!taken[i]) {
            ev[i] = exp(ev[i] - m);
            sum += ev[i];
        }
    sum = subgroupAdd(sum);
    float wv[MAX_K];
    uint wi[MAX_K];
    float chosen = 0.0;
    for (uint j = 0; j < pc.k; j++) {
        float bv = -1.0; // below any e
        uint bi = NONE;
        [[unroll]] for (uint i = 0; i < PER_LANE; i++)
            if (!taken[i] && ev[i] > bv) { bv = ev[i]; bi = lane + i * S; } // strict >: the lowest index among equals
        float sv = subgroupMax(bv);
        uint w = subgroupMin(bv == sv ? bi : NONE);
        [[unroll]] for (uint i = 0; i < PER_LANE; i++) taken[i] = taken[i] || lane + i * S == w;
        wv[j] = sv;
        wi[j] = w;
        chosen += sv;
    }
    if (subgroupElect()) {
        float div = pc.renorm != 0u ? chosen : sum;
        for (uint j = 0; j < pc.k; j++) {
            ids[t * pc.k + j] = int(wi[j]);
            weights[t * pc.k + j] = wv[j] / div;
        }
    }
}

shared uint cnt[MAX_EXPERT];          // counts, then the next free slot per expert
shared uint mask[MAX_EXPERT * WORDS]; // tile members per expert, one bit per invocation
shared uint total;                    // pairs kept
shared uint ecount[MAX_EXPERT];       // count per expert (work lists)
shared uint item0[MAX_EXPERT];        // its first item (list 1's include cap)
shared uvec3 part[WG];                // per invocation: its block's sums, then their exclusive scan

// An expert of c pairs: {pairs, items in list 0, items in list 1} (tile0 0: no lists, counted anyway).
uvec3 expert_sums(uint c) {
    bool l0 = c <= pc.split;
    uint tile = l0 ? pc.tile0 : pc.tile1, items = (c + tile - 1u) / max(tile, 1u);
    return uvec3(c, l0 ? items : 0u, l0 ? 0u : items);
}

// Called by subgroup 0 alone: part[0..WG) becomes its exclusive prefix sum, in chunks of the
// subgroup's active invocations (ranked densely by subgroupExclusiveAdd(1): no assumption on
// the subgroup's size or on how local invocations map to its lanes). Writes total and the
// dispatch commands.
void scan_parts(bool lists) {
    uint rank = subgroupExclusiveAdd(1u), lanes = subgroupAdd(1u);
    uvec3 carry = uvec3(0);
    for (uint b = 0; b < WG; b += lanes) {
        uint i = b + rank;
        uvec3 v = i < WG ? part[i] : uvec3(0);
        uvec3 before = subgroupExclusiveAdd(v) + carry;
        if (i < WG) part[i] = before;
        carry += subgroupAdd(v);
    }
    if (rank == 0u) {
        total = carry.x;
        if (lists) {
            uint rt[4] = {pc.row_tiles0, pc.row_tiles1, pc.row_tiles2, pc.row_tiles3};
            for (uint d = 0; d < 4u; d++) {
                dispatch[3u * d] = d < 2u ? carry.y : carry.z;
                dispatch[3u * d + 1u] = rt[d];
                dispatch[3u * d + 2u] = 1u;
            }
        }
    }
}

void main() {
    uint lid = gl_LocalInvocationID.x, n = pc.n_tokens * pc.k;
    if (pc.route != 0u) {
        // one call site for both modes, so a token's routing is the same code in either
        bool grid = pc.route == 2u;
        uint first = grid ? gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID : gl_SubgroupID;
        uint step = grid ? gl_NumWorkGroups.x * gl_NumSubgroups : gl_NumSubgroups;
        for (uint t = first; t < pc.n_tokens; t += step) route_token(t);
        if (grid) return; // uniform: the whole workgroup leaves, no barrier was reached
    }
    for (uint e = lid; e < pc.n_expert; e += WG) cnt[e] = 0;
    for (uint i = lid; i < pc.n_expert * WORDS; i += WG) mask[i] = 0;
    // shared memory as barrier() does, and the routed ids written to the buffer above
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared | gl_StorageSemanticsBuffer,
                   gl_SemanticsAcquireRelease);

    for (uint p = lid; p < n; p += WG) {
        uint e = uint(ids[p]);
        if (e < pc.n_expert) atomicAdd(cnt[e], 1u, gl_ScopeWorkgroup, 0, 0);
    }
    barrier();

    // 2. Scan: each invocation owns a block of consecutive experts, sums its counts and items,
    // subgroup 0 scans the blocks' sums, and each invocation then writes its block's offsets.
    bool lists = pc.tile0 != 0u;
    uint per = (pc.n_expert + WG - 1u) / WG, e0 = min(lid * per, pc.n_expert), e1 = min(e0 + per, pc.n_expert);
    uvec3 own = uvec3(0); // pairs, list 0 items, list 1 items of the block
    for (uint e = e0; e < e1; e++) own += expert_sums(cnt[e]);
    part[lid] = own;
    barrier();
    if (gl_SubgroupID == 0u) scan_parts(lists);
    barrier();
    uvec3 run = part[lid];
    for (uint e = e0; e < e1; e++) {
        uint c = cnt[e];
        groups[e] = uvec2(run.x, c);
        cnt[e] = run.x;
        ecount[e] = c;
        item0[e] = c <= pc.split ? run.y : pc.cap + run.z;
        run += expert_sums(c);
    }
    barrier();

    if (lists) {
        for (uint e = lid; e < pc.n_expert; e += WG) {
            uint c = ecount[e], tile = c <= pc.split ? pc.tile0 : pc.tile1;
            for (uint t = 0, i = item0[e]; t < c; t += tile, i++) items[i] = uvec2(e, t);
        }
    }

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
