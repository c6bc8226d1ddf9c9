// Prefill paged attention for CPU (SIMD-lane) devices, the body of attn_prefill_lanes.comp,
// attn_prefill_lanes_i64.comp (WIDE 1: 64-bit loads, 16 halves per load) and
// attn_prefill_lanes_texel.comp (TEXEL 1: the pool part read as 16-byte texels, two per 16
// halves). Same task, bindings (the texel variant: binding 0 a uniform texel buffer of the
// part), push block and outputs as attn_prefill.comp:
//   out[i][h] = sum_{t <= pos_i} softmax_t(scale * dot(Q[i][h], K[row_i][t])) V[row_i][t]
//
// Why a second kernel: llvmpipe runs an invocation per SIMD lane and turns every storage-buffer
// or shared-memory load instruction into a loop over the 8 lanes (bounds check and insert per
// lane), even when the address is the same for all of them; cross-lane operations
// (subgroupBroadcast, shuffles, reductions) are lane loops too. Only register arithmetic is cheap.
// So instead of sharing K/V tiles through shared memory (attn_prefill.comp), every invocation
// here reads its OWN K/V rows with the widest loads there are, and keeps a private online
// softmax state for every query row of the workgroup:
//
// Workgroup (x = tile of TPW tokens, y = kv head * head chunks, z = split of the K/V walk) holds
// R query rows = TPW tokens x HPW heads of one kv head's group (GQA: the rows share every K/V
// row read). Invocation `lane` walks positions lo + s * WG * P + lane * P + p (p < P) of the
// split [lo, lo + len), s = 0, 1, ... (lo = split * len; len as in attn_prefill.comp: split_len,
// or doubled per token until it needs at most split_max splits; a multiple of WG * P, so a
// position's lane is the same whatever the batch): per step it reads the P K rows, computes R x P scores
// against q (held, pre-scaled, in registers), and updates its own {m, l, acc[HEAD_DIM]} per row
// with one rescale per step (P positions). No shared memory, no barrier and no cross-lane work
// in the walk. At the end the WG states of a row are merged through shared memory (the one
// place with barriers) and written as out = acc / l (one part and one split) or as a partial
// {m, l, acc} to partials[((tok * n_head + h) * n_parts + part) * n_split + split], merged by
// attn_combine.comp.
//
// Loop limit (llvmpipe caps one invocation's loop iterations at 65535 in all): every loop in the
// step is [[unroll]] with spec-constant trip counts; the walk loop runs len / (WG * P) times
// per distinct (table row, len) of the workgroup (64 positions per iteration by default).
// Positions must be below 2^24 (the page index is computed in float, then corrected).
// Tokens of different table rows (or lens): one walk per distinct (row, len), only those tokens
// taking part.
// Tokens whose row is >= table_rows or whose position is >= limit get zeros.
// Fixed evaluation order: results are deterministic.
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 8;
layout(constant_id = 1) const uint HEAD_DIM = 128;
layout(constant_id = 2) const uint R = 8;              // query rows per workgroup
layout(constant_id = 3) const uint P = 8;              // consecutive positions per invocation per step
#define NEG_INF uintBitsToFloat(0xff800000u) // -infinity
#define NONE 0xffffffffu
const uint HALF = HEAD_DIM / 2;
#if WIDE || TEXEL
const uint U = HALF % 8u == 0u ? 8u : HALF % 4u == 0u ? 4u : HALF % 2u == 0u ? 2u : 1u; // uints per load
#else
const uint U = HALF % 4u == 0u ? 4u : HALF % 2u == 0u ? 2u : 1u;
#endif
const uint NU = HALF / U; // loads per K or V row

#if TEXEL
// A texel fetch is one gather on llvmpipe, a storage-buffer load a loop over the lanes with a
// branch per lane (docs/VULKAN.md): K/V rows are each invocation's own, so every load differs
// across the lanes. The host uses this variant when head_dim is a multiple of 8 (U >= 4: a
// unit is whole texels) and every part of the pool fits one texel view.
layout(binding = 0) uniform utextureBuffer pool_t; // one part, fp16 pairs as 16-byte texels
#else
layout(binding = 0) readonly buffer Pool { uint pool[]; };    // one part, fp16 pairs; aliased views:
layout(binding = 0) readonly buffer Pool2 { uvec2 pool2[]; };
layout(binding = 0) readonly buffer Pool4 { uvec4 pool4[]; };
#endif
#if WIDE
layout(binding = 0) readonly buffer Pool8 { u64vec4 pool8[]; };
#endif
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
    uint hpw;          // query heads per workgroup (<= R)
    uint tpw;          // query tokens per workgroup (R / hpw)
    float scale;
    uint n_split;      // splits of the K/V walk (workgroup z)
    uint split_len;    // positions per split (the least, with split_max)
    uint split_max;    // > 0: a token's split length doubles until it needs at most this many splits
} pc;

shared float red[WG * HEAD_DIM]; // the merge: one row's scaled acc per invocation
shared float redm[WG];
shared float redl[WG];

// Unit c (U uints) of the row at uint offset o (a multiple of U), as up to 8 uints.
struct unit { uvec4 a, b; };
unit load_unit(uint o, uint c) {
#if TEXEL
    if (U == 8u) return unit(texelFetch(pool_t, int(o / 4u + 2u * c)), texelFetch(pool_t, int(o / 4u + 2u * c + 1u)));
    return unit(texelFetch(pool_t, int(o / 4u + c)), uvec4(0u)); // U 4 (the host refuses less)
#else
#if WIDE
    if (U == 8u) {
        u64vec4 x = pool8[o / 8u + c];
        return unit(uvec4(unpackUint2x32(x.x), unpackUint2x32(x.y)), uvec4(unpackUint2x32(x.z), unpackUint2x32(x.w)));
    }
#endif
    if (U == 4u) return unit(pool4[o / 4u + c], uvec4(0u));
    if (U == 2u) return unit(uvec4(pool2[o / 2u + c], 0u, 0u), uvec4(0u));
    return unit(uvec4(pool[o + c], 0u, 0u, 0u), uvec4(0u));
#endif
}
uint unit_word(unit u, uint e) { return e < 4u ? u.a[e] : u.b[e - 4u]; }

#include "attn_split.glsl"

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint group = pc.n_head / pc.n_head_kv;
    uint chunks = (group + pc.hpw - 1u) / pc.hpw;
    uint kvh = gl_WorkGroupID.y / chunks, hc = gl_WorkGroupID.y % chunks;
    uint tok0 = gl_WorkGroupID.x * pc.tpw, split = gl_WorkGroupID.z;

    // rows: token, head, table row (NONE = none/invalid), position; q (pre-scaled) and the state
    uint rrow[R], rpos[R], rlen[R], rtok[R], rh[R];
    float q[R * HEAD_DIM], acc[R * HEAD_DIM], m[R], l[R];
    [[unroll]] for (uint r = 0; r < R; r++) {
        uint lt = r / pc.hpw, gi = hc * pc.hpw + r % pc.hpw;
        uint tok = tok0 + lt;
        bool live = lt < pc.tpw && tok < pc.n_tokens && gi < group;
        uint row = NONE, pos = 0u;
        if (live) {
            row = loc[2u * tok];
            pos = loc[2u * tok + 1u];
            if (row >= pc.table_rows || pos >= pc.limit) row = NONE;
        }
        rrow[r] = row;
        rpos[r] = pos;
        rlen[r] = attn_split_len(pos, pc.split_len, pc.split_max);
        rtok[r] = live ? tok : NONE;
        rh[r] = kvh * group + gi;
        uint qo = row != NONE ? tok * pc.q_stride + rh[r] * HEAD_DIM : 0u;
        [[unroll]] for (uint d = 0; d < HEAD_DIM; d++) {
            q[r * HEAD_DIM + d] = row != NONE ? qv[qo + d] * pc.scale : 0.0;
            acc[r * HEAD_DIM + d] = 0.0;
        }
        m[r] = NEG_INF;
        l[r] = 0.0;
    }
    uint k_off = ((pc.layer * 2u) * pc.n_head_kv + kvh) * pc.page_tokens * HALF;
    uint v_off = ((pc.layer * 2u + 1u) * pc.n_head_kv + kvh) * pc.page_tokens * HALF;
    float inv_pt = 1.0 / float(pc.page_tokens);
    int ipt = int(pc.page_tokens);

    // The walks: one per distinct (table row, split length) of the rows, in row order, over
    // positions [lo, end) of this split in steps of WG * P; steps[k] of them for the row k that
    // starts a walk, 0 for the others. Then ONE loop over all the steps, in walk order: llvmpipe
    // runs a loop body once even when every lane skips it (a `continue` or an empty range only
    // masks lanes), so a loop per row with `continue` for repeated rows paid a whole masked
    // step per repeated row and per walk with nothing in this split. The same steps in the same
    // order as one loop per walk: the same bits.
    uint steps[R], wlo[R], wend[R], total = 0u;
    [[unroll]] for (uint k = 0; k < R; k++) {
        uint cur = rrow[k], len = rlen[k];
        bool first = cur != NONE;
        [[unroll]] for (uint j = 0; j < k; j++) first = first && !(rrow[j] == cur && rlen[j] == len);
        uint lo = split * len, hi = lo + min(len, pc.limit - min(lo, pc.limit)), end = 0u;
        [[unroll]] for (uint j = k; j < R; j++) end = rrow[j] == cur && rlen[j] == len ? max(end, rpos[j] + 1u) : end;
        end = min(end, hi);
        steps[k] = first && end > lo ? (end - lo + WG * P - 1u) / (WG * P) : 0u;
        wlo[k] = lo, wend[k] = end;
        total += steps[k];
    }
    for (uint st = 0; st < total; st++) { // uniform
        // this step's walk: the row k with steps before it <= st < steps up to it (selects only)
        uint cur = NONE, len = 0u, base = 0u, end = 0u, before = 0u;
        [[unroll]] for (uint k = 0; k < R; k++) {
            bool here = st >= before && st < before + steps[k];
            cur = here ? rrow[k] : cur;
            len = here ? rlen[k] : len;
            base = here ? wlo[k] + (st - before) * (WG * P) : base;
            end = here ? wend[k] : end;
            before += steps[k];
        }
        uint trow = cur * pc.table_stride;
        // where this invocation's P positions are: uint offset of the row in the part, or not here
        uint o[P];
        bool ok[P];
        [[unroll]] for (uint p = 0; p < P; p++) {
            uint t = base + lane * P + p;
            uint pi = uint(float(t) * inv_pt); // t / page_tokens, off by at most one below 2^24
            int slot = int(t) - int(pi * pc.page_tokens);
            if (slot < 0) { pi -= 1u; slot += ipt; }
            else if (slot >= ipt) { pi += 1u; slot -= ipt; }
            uint page = table[t < end ? trow + pi : 0u] - pc.page0;
            ok[p] = t < end && page < pc.pages; // pages outside the part wrap to >= pages
            o[p] = ok[p] ? page * pc.page_words + uint(slot) * HALF : 0u;
        }
        // scores
        float s[R * P];
        [[unroll]] for (uint i = 0; i < R * P; i++) s[i] = 0.0;
        [[unroll]] for (uint c = 0; c < NU; c++) {
            unit kw[P];
            [[unroll]] for (uint p = 0; p < P; p++) kw[p] = load_unit(o[p] + k_off, c);
            [[unroll]] for (uint e = 0; e < U; e++) {
                vec2 kf[P];
                [[unroll]] for (uint p = 0; p < P; p++) kf[p] = unpackHalf2x16(unit_word(kw[p], e));
                uint d = (c * U + e) * 2u;
                [[unroll]] for (uint r = 0; r < R; r++)
                    [[unroll]] for (uint p = 0; p < P; p++)
                        s[r * P + p] = fma(q[r * HEAD_DIM + d + 1u], kf[p].y,
                                           fma(q[r * HEAD_DIM + d], kf[p].x, s[r * P + p]));
            }
        }
        // online softmax, one rescale per step: m' = max(m, s_p), alpha = e^(m - m'), p_j = e^(s_j - m')
        float alpha[R], pr[R * P];
        [[unroll]] for (uint r = 0; r < R; r++) {
            float mx = m[r];
            [[unroll]] for (uint p = 0; p < P; p++) {
                bool v = ok[p] && rrow[r] == cur && rlen[r] == len && base + lane * P + p <= rpos[r];
                s[r * P + p] = v ? s[r * P + p] : NEG_INF;
                mx = max(mx, s[r * P + p]);
            }
            float ms = mx == NEG_INF ? 0.0 : mx;
            alpha[r] = m[r] == NEG_INF ? 0.0 : exp(m[r] - ms);
            float sum = 0.0;
            [[unroll]] for (uint p = 0; p < P; p++) {
                float e = s[r * P + p] == NEG_INF ? 0.0 : exp(s[r * P + p] - ms);
                pr[r * P + p] = e;
                sum += e;
            }
            l[r] = l[r] * alpha[r] + sum;
            m[r] = mx;
        }
        // acc = acc * alpha + sum_p p_j V_j
        [[unroll]] for (uint c = 0; c < NU; c++) {
            unit vw[P];
            // a position not here reads zeros: its p_j is 0, but 0 * V is NaN where the slot was
            // never written (fresh device memory: 0x7f7f... is an fp16 NaN) and V * 0 must add nothing
            [[unroll]] for (uint p = 0; p < P; p++) vw[p] = ok[p] ? load_unit(o[p] + v_off, c) : unit(uvec4(0u), uvec4(0u));
            [[unroll]] for (uint e = 0; e < U; e++) {
                vec2 vf[P];
                [[unroll]] for (uint p = 0; p < P; p++) vf[p] = unpackHalf2x16(unit_word(vw[p], e));
                uint d = (c * U + e) * 2u;
                [[unroll]] for (uint r = 0; r < R; r++) {
                    vec2 a = vec2(acc[r * HEAD_DIM + d], acc[r * HEAD_DIM + d + 1u]) * alpha[r];
                    [[unroll]] for (uint p = 0; p < P; p++) a = fma(vec2(pr[r * P + p]), vf[p], a);
                    acc[r * HEAD_DIM + d] = a.x;
                    acc[r * HEAD_DIM + d + 1u] = a.y;
                }
            }
        }
    }

    // merge the WG states of each row: M = max m_i, L = sum e^(m_i - M) l_i, A = sum e^(m_i - M) acc_i
    uint n_out = pc.n_parts * pc.n_split;
    [[unroll]] for (uint r = 0; r < R; r++) {
        redm[lane] = m[r];
        barrier();
        float mx = NEG_INF;
        [[unroll]] for (uint i = 0; i < WG; i++) mx = max(mx, redm[i]);
        float f = m[r] == NEG_INF ? 0.0 : exp(m[r] - mx);
        redl[lane] = l[r] * f;
        [[unroll]] for (uint d = 0; d < HEAD_DIM; d++) red[lane * HEAD_DIM + d] = acc[r * HEAD_DIM + d] * f;
        barrier();
        float lt = 0.0;
        [[unroll]] for (uint i = 0; i < WG; i++) lt += redl[i];
        uint tok = rtok[r];
        if (tok != NONE) {
            float inv = lt > 0.0 ? 1.0 / lt : 0.0;
            uint po = ((tok * pc.n_head + rh[r]) * pc.n_parts + pc.part) * pc.n_split + split;
            for (uint d = lane; d < HEAD_DIM; d += WG) { // HEAD_DIM / WG iterations
                float a = 0.0;
                [[unroll]] for (uint i = 0; i < WG; i++) a += red[i * HEAD_DIM + d];
                if (n_out == 1u) outv[tok * pc.out_stride + rh[r] * HEAD_DIM + d] = a * inv;
                else part_out[po * (HEAD_DIM + 2u) + 2u + d] = a;
            }
            if (n_out > 1u && lane == 0u) {
                part_out[po * (HEAD_DIM + 2u)] = mx;
                part_out[po * (HEAD_DIM + 2u) + 1u] = lt;
            }
        }
        barrier(); // before the next row overwrites red, redm, redl
    }
}
