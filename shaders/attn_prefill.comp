#version 450
// Prefill paged attention (flash-attention style): a batch of query tokens whose K/V are already
// in the pool, each at its own {table row, position} (loc), attending causally to positions
// 0..pos of its row:
//   out[i][h] = sum_{t <= pos_i} softmax_t(scale * dot(Q[i][h], K[row_i][t])) V[row_i][t]
//
// Workgroup (x = tile of TPW consecutive query tokens, y = kv head * head chunks, z = split of
// the K/V walk) holds
// ROWS = WG / LPR query rows: TPW tokens x HPW query heads of one kv head's group (GQA: the
// group's heads share every K/V tile loaded into shared memory). Each row is owned by LPR
// invocations, each holding DPL = HEAD_DIM / LPR dims (d = sub + i * LPR) of q (pre-scaled) and
// of the accumulator in registers; a score is LPR partial dots summed by subgroupShuffleXor
// (LPR 1 on lavapipe: no cross-lane work at all, the K/V reads are workgroup-uniform).
//
// Split s of a token at pos covers [s * len, (s + 1) * len), len = split_len (a multiple of KT),
// or with split_max > 0 split_len doubled until ceil((pos + 1) / len) <= split_max (attn_split.glsl:
// a token's splits depend on its own position only, so its result does not depend on the batch,
// and a long context gets wider splits rather than more). The workgroup walks K/V in tiles of KT
// positions over [lo, end), lo = split * len (a multiple of KT) and end = min(lo + len, 1 + the
// largest position among its tokens of the (row, len) being walked), with two barriers per tile:
//   load:    K and V of the tile (fp16 -> f32) into ks/vs, zeros where the page is missing or
//            belongs to another part; invocations < KT look up the NEXT tile's pages into the
//            other half of pg (double buffered, so the lookup costs no barrier)
//   barrier
//   compute: per row, scores s_j (masked to -inf past the row's position or where the page is
//            missing), tile max, online softmax: m' = max(m, max s), alpha = e^(m - m'),
//            l = l alpha + sum p_j, acc = acc alpha + sum p_j V_j
//   barrier
// Tokens of different table rows (or split lengths) in one tile: the workgroup walks once per
// distinct (row, len) (in order of first appearance), only those tokens taking part; sorted
// batches walk once (twice where a tile straddles a doubling of len).
// The pool may be split into parts (runtime/base/kv_layout.h): the host dispatches once per part, each
// counting only pages its part holds. With one part and one split the kernel writes
// out = acc / l directly; otherwise it writes the partial state {m, l, acc[HEAD_DIM]} of
// (token, head, part, split) to partials[(((tok * n_head + h) * n_parts + part) * n_split + split)
// * (HEAD_DIM + 2)], and attn_combine.comp merges them.
// attn_prefill_lanes.glsl is the same task for CPU devices (llvmpipe), organised differently.
// Tokens whose row is >= table_rows or whose position is >= limit get zeros.
// Fixed evaluation order: results are deterministic.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint HEAD_DIM = 128;
layout(constant_id = 2) const uint LPR = 1; // invocations per query row (power of two, <= subgroup size)
layout(constant_id = 3) const uint KT = 16; // K/V positions per tile
#define NEG_INF uintBitsToFloat(0xff800000u) // -infinity
#define NONE 0xffffffffu
const uint HALF = HEAD_DIM / 2;
const uint DPL = HEAD_DIM / LPR; // dims per invocation
const uint ROWS = WG / LPR;      // query rows per workgroup

layout(binding = 0) readonly buffer Pool { uint pool[]; };     // one part, fp16 pairs
layout(binding = 1) readonly buffer Q { float qv[]; };          // [tok][n_head][HEAD_DIM] (q_stride per token)
layout(binding = 2) readonly buffer Table { uint table[]; };    // [row][table_stride] page ids
layout(binding = 3) readonly buffer Loc { uint loc[]; };        // {row, position} per token
layout(binding = 4) writeonly buffer Partials { float part_out[]; };
layout(binding = 5) writeonly buffer Out { float outv[]; };     // [tok][n_head][HEAD_DIM] (out_stride per token)

// mirrors cvk_attn_prefill_push in runtime/vk/op_attn_prefill.h
layout(push_constant) uniform Push {
    uint n_tokens;
    uint n_head;
    uint n_head_kv;
    uint page_tokens;
    uint layer;
    uint table_stride; // uints between block-table rows
    uint table_rows;   // rows the table holds
    uint limit;        // positions >= limit are invalid (max_len, table_stride * page_tokens)
    uint q_stride;     // floats between tokens of q
    uint out_stride;   // floats between tokens of out
    uint page0;        // first page in the bound part
    uint pages;        // pages in the bound part
    uint page_words;   // uints per page
    uint part;         // index of the bound part
    uint n_parts;
    uint hpw;          // query heads per workgroup (<= ROWS)
    uint tpw;          // query tokens per workgroup (ROWS / hpw)
    float scale;
    uint n_split;      // splits of the K/V walk (workgroup z)
    uint split_len;    // positions per split, a multiple of KT (the least, with split_max)
    uint split_max;    // > 0: a token's split length doubles until it needs at most this many splits
} pc;

shared float ks[KT * HEAD_DIM];
shared float vs[KT * HEAD_DIM];
shared uint pg[2 * KT];   // per tile position: uint offset of its row in the page (slot * HALF), NONE = skip
shared uint trow[ROWS];   // per token of the tile: table row (NONE = none/invalid)
shared uint tpos[ROWS];   // per token of the tile: position
shared uint tlen[ROWS];   // per token of the tile: its split length

// Offset of position t of table row `row` within the bound part, NONE when not in it.
uint page_offset(uint row, uint t, uint end) {
    if (t >= end) return NONE;
    uint page = table[row * pc.table_stride + t / pc.page_tokens];
    if (page < pc.page0 || page - pc.page0 >= pc.pages) return NONE;
    return (page - pc.page0) * pc.page_words + (t % pc.page_tokens) * HALF;
}

#include "attn_split.glsl"

void main() {
    uint tid = gl_LocalInvocationID.x;
    // a row's LPR lanes must be neighbouring lanes of one subgroup for subgroupShuffleXor to sum
    // them: rows come from the subgroup ids, whatever order the driver lays invocations out in
    // (LPR divides the subgroup size; WG is whole subgroups or one partial one)
    uint vt = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    uint r = vt / LPR, sub = vt % LPR;
    uint group = pc.n_head / pc.n_head_kv;
    uint chunks = (group + pc.hpw - 1u) / pc.hpw;
    uint kvh = gl_WorkGroupID.y / chunks;
    uint lt = r / pc.hpw, gi = (gl_WorkGroupID.y % chunks) * pc.hpw + r % pc.hpw;
    uint tok0 = gl_WorkGroupID.x * pc.tpw, tok = tok0 + lt, h = kvh * group + gi, split = gl_WorkGroupID.z;
    bool live = lt < pc.tpw && tok < pc.n_tokens && gi < group;

    for (uint i = tid; i < pc.tpw; i += WG) {
        uint row = NONE, pos = 0u;
        if (tok0 + i < pc.n_tokens) {
            row = loc[2u * (tok0 + i)];
            pos = loc[2u * (tok0 + i) + 1u];
            if (row >= pc.table_rows || pos >= pc.limit) row = NONE;
        }
        trow[i] = row;
        tpos[i] = pos;
        tlen[i] = attn_split_len(pos, pc.split_len, pc.split_max);
    }
    barrier();
    uint myrow = live ? trow[lt] : NONE, mypos = live ? tpos[lt] : 0u, mylen = live ? tlen[lt] : 0u;

    float qr[DPL], acc[DPL], s[KT];
    [[unroll]] for (uint i = 0; i < DPL; i++) {
        qr[i] = myrow != NONE ? qv[tok * pc.q_stride + h * HEAD_DIM + sub + i * LPR] * pc.scale : 0.0;
        acc[i] = 0.0;
    }
    float m = NEG_INF, l = 0.0;
    uint k_off = ((pc.layer * 2u) * pc.n_head_kv + kvh) * pc.page_tokens * HALF;
    uint v_off = ((pc.layer * 2u + 1u) * pc.n_head_kv + kvh) * pc.page_tokens * HALF;

    for (uint k = 0; k < pc.tpw; k++) { // one walk per distinct (table row, split length) of the tile (uniform)
        uint cur = trow[k], len = tlen[k];
        if (cur == NONE) continue;
        bool seen = false;
        if (k > 0u && trow[k - 1u] == cur && tlen[k - 1u] == len) seen = true;
        else
            for (uint j = 0; j < k; j++) if (trow[j] == cur && tlen[j] == len) { seen = true; break; }
        if (seen) continue;
        uint lo = split * len, hi = lo + min(len, pc.limit - min(lo, pc.limit));
        uint end = 0u;
        for (uint j = k; j < pc.tpw; j++) if (trow[j] == cur && tlen[j] == len) end = max(end, tpos[j] + 1u);
        end = min(end, hi);
        bool mine = myrow == cur && mylen == len;

        if (tid < KT) pg[tid] = page_offset(cur, lo + tid, end);
        barrier();
        uint b = 0u;
        for (uint t0 = lo; t0 < end; t0 += KT, b ^= KT) {
            [[unroll]] for (uint it = 0; it < (KT * HALF + WG - 1u) / WG; it++) {
                uint e = it * WG + tid;
                if (KT * HALF % WG != 0u && e >= KT * HALF) break;
                uint j = e / HALF, w = e % HALF, o = pg[b + j];
                vec2 kk = vec2(0.0), vv = vec2(0.0);
                if (o != NONE) {
                    kk = unpackHalf2x16(pool[o + k_off + w]);
                    vv = unpackHalf2x16(pool[o + v_off + w]);
                }
                ks[j * HEAD_DIM + 2u * w] = kk.x;
                ks[j * HEAD_DIM + 2u * w + 1u] = kk.y;
                vs[j * HEAD_DIM + 2u * w] = vv.x;
                vs[j * HEAD_DIM + 2u * w + 1u] = vv.y;
            }
            if (tid < KT) pg[(b ^ KT) + tid] = page_offset(cur, t0 + KT + tid, end);
            barrier();
            bool any = false; // anything of this tile in this part (uniform)
            [[unroll]] for (uint j = 0; j < KT; j++) any = any || pg[b + j] != NONE;
            if (any) {
                float tmax = NEG_INF;
                [[unroll]] for (uint j = 0; j < KT; j++) {
                    float d = 0.0;
                    [[unroll]] for (uint i = 0; i < DPL; i++) d = fma(qr[i], ks[j * HEAD_DIM + sub + i * LPR], d);
                    [[unroll]] for (uint x = 1u; x < LPR; x <<= 1u) d += subgroupShuffleXor(d, x);
                    s[j] = mine && pg[b + j] != NONE && t0 + j <= mypos ? d : NEG_INF;
                    tmax = max(tmax, s[j]);
                }
                if (tmax != NEG_INF) {
                    float m_new = max(m, tmax);
                    float alpha = exp(m - m_new); // 0 on the first tile (m = -inf)
                    l *= alpha;
                    [[unroll]] for (uint i = 0; i < DPL; i++) acc[i] *= alpha;
                    [[unroll]] for (uint j = 0; j < KT; j++) {
                        float p = exp(s[j] - m_new);
                        l += p;
                        [[unroll]] for (uint i = 0; i < DPL; i++) acc[i] = fma(p, vs[j * HEAD_DIM + sub + i * LPR], acc[i]);
                    }
                    m = m_new;
                }
            }
            barrier(); // before the next tile overwrites ks, vs and this half of pg
        }
    }

    if (!live) return;
    if (pc.n_parts * pc.n_split == 1u) {
        float inv = l > 0.0 ? 1.0 / l : 0.0;
        [[unroll]] for (uint i = 0; i < DPL; i++) outv[tok * pc.out_stride + h * HEAD_DIM + sub + i * LPR] = acc[i] * inv;
    } else {
        uint o = (((tok * pc.n_head + h) * pc.n_parts + pc.part) * pc.n_split + split) * (HEAD_DIM + 2u);
        if (sub == 0u) {
            part_out[o] = m;
            part_out[o + 1u] = l;
        }
        [[unroll]] for (uint i = 0; i < DPL; i++) part_out[o + 2u + sub + i * LPR] = acc[i];
    }
}
