#version 450
// weight types: all
// Prefill matrix-matrix product through shared-memory tiles, for expert e's slice of W:
//   Y[out(t)][r] = sum_k W[e * n_rows + r][k] * X[in(t)][k]      r < n_rows, t < count
// W rows are stored as QTYPE (any type qtype_supported names: quant_blocks.glsl decodes it) in the bound part,
// which holds the rows [part_row0, part_row0 + part_rows) of the whole buffer.
//   plain (flag 4 clear): e = expert0, count = n_tokens, list entry j = ids_off + t,
//     in(t) = gather[j] (flag 1) or t, out(t) = scatter[j] (flag 2) or t.
//   grouped (flag 4): e = expert0 + gl_WorkGroupID.z, {o, c} = groups[e], count = c,
//     j = ids_off + o + t, in(t) = gather[j] (flag 1) or j, out(t) = scatter[j] (flag 2) or j;
//     n_tokens (the grid's token extent) bounds every count; tiles past c exit at once, and
//     entries j >= n_ids (the lists' length) are skipped.
//   work items (flags 4 | 16): workgroup (x, y) takes row tile y and item {e, n0} =
//     items[item0 + x] (written by moe_group: only experts with tokens, BN tokens per item)
//     instead of e = expert0 + z and n0 = y * BN; items of experts outside [expert0, expert1)
//     exit (their rows are in another part). The host dispatches indirectly with the item
//     count moe_group wrote as the x extent: an expert's items run one after another on a
//     row tile, which stays in cache between them.
// A token whose in(t) or out(t) falls outside [0, x_rows) / [0, y_rows) is skipped.
//   gate-up pairs (GLU = 1, a pipeline of its own): each slice of W is 2 * n_rows rows, the n_rows gate rows G then
//     the n_rows up rows U, and Y[out(t)][r] = silu(G[r] x) * (U[r] x), the expression of
//     shaders/swiglu.comp on the same two sums (so the same bits as two products and a swiglu
//     pass, one stage fewer). The tile's rows interleave the pairs (tile row 2i: G row i,
//     2i + 1: U row i) so both sums of an output sit in one invocation's register block. A
//     slice lies whole in one part (the host checks).
//
// Workgroup (x, y, z) owns the BM x BN tile of slice rows m0 = x*BM.. and tokens n0 = y*BN..
// Per step of BK along k, the workgroup dequantizes BM x BK weights into ws (once per tile,
// reused by all BN tokens) and loads BN x BK inputs into xs; each invocation then
// accumulates a TM x TN register block: rows tm*TM.., tokens tn*TN.., read from shared
// memory as vec4s (TM/4 + TN/4 loads per k for TM*TN fmas; neighbouring invocations read
// neighbouring vec4s), into the current chunk's sums (CHUNK below). Rows past nr and tokens
// past the count load zeros and store nothing;
// k past n_in loads zeros.
// WG must equal (BM/TM) * (BN/TN), TM and TN multiples of 4; runtime/vk/op_matmul.c checks.
//
// Weights split over buffer parts: the host dispatches once per part holding rows of the
// slice(s), binding that part; the shader intersects the slice [e*n_rows, (e+1)*n_rows)
// with the part's rows: lo..hi, w_row0 = lo - part_row0 (row within the part), r0 = lo -
// e*n_rows (output column of that row), nr = hi - lo (rows here; 0: the workgroup exits).
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
const uint QTYPE = QTYPE_FIXED; // one module per weight type (cmake/shaders.cmake)
layout(constant_id = 2) const uint BM = 64; // weight rows per tile
layout(constant_id = 3) const uint BN = 64; // tokens per tile
layout(constant_id = 4) const uint BK = 32; // k per step
layout(constant_id = 5) const uint TM = 4;  // weight rows per invocation
layout(constant_id = 6) const uint TN = 4;  // tokens per invocation
layout(constant_id = 7) const uint GLU = 0; // 1: gate-up pairs (above)

#define QB_BINDING 0
#include "quant_blocks.glsl"

layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) buffer Y { float y[]; }; // read only with flag 32 (accumulate)
layout(binding = 3) readonly buffer Gather { int gather[]; };
layout(binding = 4) readonly buffer Scatter { int scatter[]; };
layout(binding = 5) readonly buffer Groups { uvec2 groups[]; }; // [n_experts] {offset, count}
layout(binding = 6) readonly buffer Items { uvec2 items[]; };   // work items {expert, first token}

// mirrors cvk_matmul_push in runtime/vk/op_matmul.h
layout(push_constant) uniform Push {
    uint n_in;      // elements per weight row (k extent)
    uint row_bytes; // bytes per weight row
    uint n_rows;    // rows per expert slice
    uint part_row0; // row of the whole buffer at the start of the bound part
    uint part_rows; // rows in the bound part
    uint expert0;   // expert of gl_WorkGroupID.z == 0
    uint n_tokens;  // plain: tokens; grouped: the largest count (grid extent)
    uint x_stride;  // floats between rows of X
    uint x_rows;    // rows of X
    uint y_stride;  // floats between rows of Y
    uint y_rows;    // rows of Y
    uint ids_off;   // first entry of gather / scatter used
    uint n_ids;     // grouped: entries in the bound lists
    uint flags;     // 1: gather, 2: scatter, 4: grouped, 16: work items (with 4), 32: y += W x
    uint item0;     // work items: the list's first entry in items
    uint expert1;   // work items: experts [expert0, expert1) have rows in the bound part
    uint x0;        // matmul_rows_texel.comp only
} pc;

const uint NONE = 0xffffffffu;
// The canonical order of every output's sum (all matmul kernels): k in chunks of CHUNK (one
// Q4_K/Q5_K sub-block, two Q6_K scale groups, one Q8_0 block), each chunk summed by fma from 0
// in k order, the chunk sums added to the output in k order. The host keeps BK a divisor or a
// multiple of CHUNK, so a chunk ends with a tile step or within one at a multiple of SUB.
const uint CHUNK = 32u;
const uint SUB = BK < CHUNK ? BK : CHUNK; // k per inner run: a chunk, or a tile step within one
// Quantized weights are decoded 8 at a time (qb_decode8: n_in is a multiple of 32 for them, so
// a run never straddles n_in); float types one at a time.
const bool RUNS = QTYPE != QTYPE_F32 && QTYPE != QTYPE_F16 && QTYPE != QTYPE_BF16 && BK % 8u == 0u;

shared vec4 ws[BK * BM / 4]; // element k * BM + m
shared vec4 xs[BK * BN / 4]; // element k * BN + n
shared uint xrow[BN];      // X row of token n0 + n, NONE when skipped
shared uint yrow[BN];      // Y row of token n0 + n, NONE when skipped

void main() {
    const uint TPM = BM / TM;
    uint tid = gl_LocalInvocationID.x;
    uvec2 wg = (pc.flags & 16u) != 0 ? gl_WorkGroupID.yx : gl_WorkGroupID.xy; // {row tile, token tile or item}
    uint m0 = wg.x * BM, n0 = wg.y * BN;
    uint tm = tid % TPM, tn = tid / TPM;

    // the slice's rows in this part (uniform across the workgroup)
    uint e = pc.expert0 + gl_WorkGroupID.z;
    if ((pc.flags & 16u) != 0) { // work item x: BN tokens of one expert from its first token
        uvec2 it = items[pc.item0 + wg.y];
        e = it.x;
        n0 = it.y;
        if (e < pc.expert0 || e >= pc.expert1) return; // its rows lie in another part
    }
    const bool glu = GLU != 0u;
    uint slice = glu ? 2u * pc.n_rows : pc.n_rows, g0 = e * slice;
    uint lo = max(g0, pc.part_row0), hi = min(g0 + slice, pc.part_row0 + pc.part_rows);
    uint nr = hi > lo ? hi - lo : 0u, w_row0 = lo - pc.part_row0, r0 = lo - g0;
    if (glu && nr != slice) return; // uniform; the host never splits a pair slice
    // the tokens: plain 0..n_tokens at list entry ids_off; grouped from the expert's group
    bool grouped = (pc.flags & 4u) != 0;
    uint count = pc.n_tokens, j0 = pc.ids_off;
    if (grouped) {
        uvec2 grp = groups[e];
        count = min(grp.y, pc.n_tokens);
        j0 += grp.x;
    }
    if (m0 >= nr || n0 >= count) return; // uniform: nothing of this tile exists

    for (uint n = tid; n < BN; n += WG) {
        uint t = n0 + n, xi = NONE, yi = NONE, j = j0 + t;
        if (t < count && (!grouped || j < pc.n_ids)) {
            int own = grouped ? int(j) : int(t);
            int g = (pc.flags & 1u) != 0 ? gather[j] : own;
            int s = (pc.flags & 2u) != 0 ? scatter[j] : own;
            if (g >= 0 && uint(g) < pc.x_rows && s >= 0 && uint(s) < pc.y_rows) xi = uint(g), yi = uint(s);
        }
        xrow[n] = xi;
        yrow[n] = yi;
    }
    barrier();

    float acc[TM * TN], part[TM * TN]; // part: the current chunk's sums (the canonical order)
    for (uint i = 0; i < TM * TN; i++) acc[i] = 0.0, part[i] = 0.0;

    for (uint k0 = 0; k0 < pc.n_in; k0 += BK) {
        if (RUNS) { // quantized: runs of 8 weights of a row, scales decoded once per run
            for (uint i = tid; i < BM * BK / 8u; i += WG) {
                uint kk = (i % (BK / 8u)) * 8u, mm = i / (BK / 8u), m = m0 + mm, k = k0 + kk;
                float v[8];
                uint src = glu ? (m >> 1) + (m & 1u) * pc.n_rows : m; // glu: interleaved G and U rows
                if (m < nr && k < pc.n_in) qb_decode8(QTYPE, (w_row0 + src) * pc.row_bytes, k, v);
                else for (uint r = 0; r < 8u; r++) v[r] = 0.0;
                for (uint r = 0; r < 8u; r++) ws[((kk + r) * BM + mm) >> 2][mm & 3u] = v[r];
            }
        } else {
            for (uint i = tid; i < BM * BK; i += WG) {
                uint kk = i % BK, mm = i / BK, m = m0 + mm, k = k0 + kk;
                float v = 0.0;
                uint src = glu ? (m >> 1) + (m & 1u) * pc.n_rows : m;
                if (m < nr && k < pc.n_in) v = qb_dequant(QTYPE, (w_row0 + src) * pc.row_bytes, k);
                ws[(kk * BM + mm) >> 2][mm & 3u] = v;
            }
        }
        for (uint i = tid; i < BN * BK; i += WG) {
            uint kk = i % BK, nn = i / BK, k = k0 + kk, r = xrow[nn];
            xs[(kk * BN + nn) >> 2][nn & 3u] = r != NONE && k < pc.n_in ? x[r * pc.x_stride + k] : 0.0;
        }
        barrier();
        for (uint ks = 0; ks < BK; ks += SUB) {
            for (uint kk = ks; kk < ks + SUB; kk++) {
                vec4 a[TM / 4], b[TN / 4];
                for (uint i = 0; i < TM / 4; i++) a[i] = ws[(kk * BM + tm * TM) / 4 + i];
                for (uint j = 0; j < TN / 4; j++) b[j] = xs[(kk * BN + tn * TN) / 4 + j];
                for (uint i = 0; i < TM; i++)
                    for (uint j = 0; j < TN; j++)
                        part[i * TN + j] = fma(a[i >> 2][i & 3u], b[j >> 2][j & 3u], part[i * TN + j]);
            }
            uint k_end = k0 + ks + SUB; // a chunk ends (or the row, inside this run): acc += its sums, in k order
            if (k_end - SUB < pc.n_in && (k_end % CHUNK == 0u || k_end >= pc.n_in))
                for (uint i = 0; i < TM * TN; i++) acc[i] = acc[i] + part[i], part[i] = 0.0;
        }
        barrier();
    }

    for (uint j = 0; j < TN; j++) {
        uint o = yrow[tn * TN + j];
        if (o == NONE) continue;
        if (glu) { // tile rows 2i, 2i + 1 (TM even): output m / 2 = silu(G x) * (U x), swiglu.comp's expression
            for (uint i = 0; i < TM; i += 2) {
                uint m = m0 + tm * TM + i;
                if (m >= nr) continue;
                float gv = acc[i * TN + j], uv = acc[(i + 1) * TN + j];
                y[o * pc.y_stride + (m >> 1)] = gv / (1.0 + exp(-gv)) * uv;
            }
            continue;
        }
        for (uint i = 0; i < TM; i++) {
            uint m = m0 + tm * TM + i;
            if (m >= nr) continue;
            uint yo = o * pc.y_stride + r0 + m;
            y[yo] = (pc.flags & 32u) != 0 ? y[yo] + acc[i * TN + j] : acc[i * TN + j]; // 32: y += W x
        }
    }
}
