#version 450
// weight types: all
// Decode matrix-vector product with dequantization in registers:
//   y[v][r] = sum_i W[s(v)][r][i] * x[v][i]      r < n_rows, v < n_vec
// over a (n_in, n_rows, n_slices) weight tensor of QTYPE. The slice s(v) is pc.slice (dense
// mode, ids_offset < 0) or ids[ids_offset + v] (MoE mode: expert ids stay on the GPU).
//
// Work split (llama.cpp's mul_mat_vec shape): a workgroup is WG / L groups of L lanes (L =
// lanes per row, sized by the host to the row's units), each group owning ROWS consecutive
// output rows, for NVEC vectors (dense mode; MoE mode: one vector, whose expert fixes the slice). A row is
// cut into units a single invocation decodes whole in registers (F32/F16/BF16: 4 elements;
// Q4_K/Q5_K/Q6_K: 64 weights = a quarter super-block; the other block types 32); lane l of a
// group takes units l, l + L, ... of each of its ROWS rows, so each weight is read once and
// used for all NVEC vectors. Partial sums are reduced per group by subgroupAdd (one cluster
// of lanes at a time), then, when a group spans subgroups, in shared memory; fixed order.
//
// Grid: x (+ z * 65535) = row blocks from pc.r_begin, y = vector groups. The tensor may be
// split into parts (runtime/vk/vk_memory.h): the host dispatches once per part, binding that
// part and passing its first flattened row (slice * n_rows + r) row0 and row count; rows
// outside the bound part are skipped. An expert id outside [0, n_slices) gives zeros, written
// by the dispatch of part 0.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;    // invocations per workgroup
const uint QTYPE = QTYPE_FIXED; // one module per weight type (cmake/shaders.cmake)
layout(constant_id = 2) const uint ROWS = 1;   // output rows per workgroup
layout(constant_id = 3) const uint NVEC = 1;   // vectors per workgroup (dense mode)
layout(constant_id = 4) const uint NSG = 64;   // bound on subgroups per workgroup
layout(constant_id = 5) const uint LPR = 0;    // lanes per row (0: pc.lpr, chosen per call)
layout(constant_id = 6) const uint LPR_MAX = 0; // host only: bound on the per-call choice

#define QB_BINDING 0
#include "quant_blocks.glsl"

layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 3) readonly buffer Ids { int ids[]; };

// mirrors cvk_matvec_push in runtime/vk/op_matvec.h
layout(push_constant) uniform Push {
    uint n_in;       // elements per row (a multiple of the block size)
    uint row_bytes;  // bytes per row
    uint n_rows;     // rows per slice = outputs per vector
    uint n_slices;   // slices (experts)
    uint row0;       // first flattened row held by the bound part
    uint rows;       // flattened rows held by the bound part
    uint r_begin;    // first output row of this dispatch
    uint n_vec;      // vectors
    uint x_stride;   // floats between vectors of x (0: all vectors share one x)
    uint y_stride;   // floats between vectors of y
    uint slice;      // dense mode: the slice
    int ids_offset;  // < 0: dense mode; else vector v uses slice ids[ids_offset + v]
    uint lpr;        // lanes per row: a power of 2 dividing WG
    uint x0;         // matvec_texel.comp only
} pc;

shared float red[NSG * ROWS * NVEC];
float acc[ROWS * NVEC]; // per invocation: acc[i * NVEC + j] for row i, vector j
uint xb[NVEC];          // first x element of vector j
uint nv;                // vectors this workgroup handles (<= NVEC)

float bf16(uint h) { return uintBitsToFloat(h << 16); }
float h16(uint h) { return unpackHalf2x16(h).x; }

// 4 float weights starting at element e of the row at byte offset `row`.
vec4 load4(uint row, uint e) {
    if (QTYPE == QTYPE_F32) {
        uint w = (row >> 2) + e;
        return uintBitsToFloat(uvec4(qb_u32[w], qb_u32[w + 1], qb_u32[w + 2], qb_u32[w + 3]));
    }
    uint w = (row >> 1) + e;
    uvec4 h = uvec4(qb_u16[w], qb_u16[w + 1], qb_u16[w + 2], qb_u16[w + 3]);
    if (QTYPE == QTYPE_BF16) return uintBitsToFloat(h << 16);
    return vec4(h16(h.x), h16(h.y), h16(h.z), h16(h.w));
}

float load1(uint row, uint e) {
    if (QTYPE == QTYPE_F32) return uintBitsToFloat(qb_u32[(row >> 2) + e]);
    uint h = uint(qb_u16[(row >> 1) + e]);
    return QTYPE == QTYPE_BF16 ? bf16(h) : h16(h);
}

// Float types: unit u = elements 4u..4u+3.
void unit_float(uint row, uint u, uint ai) {
    vec4 w = load4(row, 4 * u);
    for (uint j = 0; j < NVEC; j++) {
        if (j >= nv) break;
        uint o = xb[j] + 4 * u;
        acc[ai + j] += dot(w, vec4(x[o], x[o + 1], x[o + 2], x[o + 3]));
    }
}

// Q8_0: unit u = block u (34 bytes, 2-aligned): d * sum q * x.
void unit_q8_0(uint row, uint u, uint ai) {
    uint b = row + u * Q8_0_BYTES;
    float d = qb_half(b + Q8_0_D);
    uint w0 = (b + Q8_0_QS) >> 1;
    for (uint j = 0; j < NVEC; j++) {
        if (j >= nv) break;
        uint o = xb[j] + u * QK8_0;
        float s = 0.0;
        for (uint k = 0; k < 16; k++) {
            int w = int(qb_u16[w0 + k]);
            s += float(bitfieldExtract(w, 0, 8)) * x[o + 2 * k] + float(bitfieldExtract(w, 8, 8)) * x[o + 2 * k + 1];
        }
        acc[ai + j] += d * s;
    }
}

// Q4_K / Q5_K: unit u = super-block u / 4, pair p = u % 4: 32 bytes of qs whose low nibbles
// are sub-block 2p (elements 64p + l) and high nibbles sub-block 2p + 1 (64p + 32 + l);
// Q5_K adds bits 2p and 2p + 1 of qh[l]. Weight = d * sc * q - dmin * m, so per sub-block
// sum (d sc q - dmin m) x = d sc (sum q x) - dmin m (sum x).
void unit_q45_K(uint row, uint u, uint ai) {
    bool q5 = QTYPE == QTYPE_Q5_K;
    uint b = row + (u >> 2) * (q5 ? Q5_K_BYTES : Q4_K_BYTES), p = u & 3u;
    vec2 dm = unpackHalf2x16(qb_u32[b >> 2]); // d, dmin (row and block 4-aligned)
    uint sco = b + (q5 ? Q5_K_SCALES : Q4_K_SCALES);
    uvec2 sm0 = qb_scale_min_k4(sco, 2 * p), sm1 = qb_scale_min_k4(sco, 2 * p + 1);
    float d0 = dm.x * float(sm0.x), m0 = dm.y * float(sm0.y);
    float d1 = dm.x * float(sm1.x), m1 = dm.y * float(sm1.y);
    uint qw = (b + (q5 ? Q5_K_QS : Q4_K_QS) + 32 * p) >> 2, hw = (b + Q5_K_QH) >> 2;
    uint xe = (u >> 2) * QK_K + 64 * p;
    float slo[NVEC], shi[NVEC], xlo[NVEC], xhi[NVEC];
    for (uint j = 0; j < NVEC; j++) slo[j] = shi[j] = xlo[j] = xhi[j] = 0.0;
    for (uint k = 0; k < 8; k++) {
        uint q = qb_u32[qw + k];
        uvec4 lo = uvec4(q, q >> 8, q >> 16, q >> 24) & 15u;
        uvec4 hi = uvec4(q >> 4, q >> 12, q >> 20, q >> 28) & 15u;
        if (q5) {
            uint h = qb_u32[hw + k] >> (2 * p);
            lo |= (uvec4(h, h >> 8, h >> 16, h >> 24) & 1u) << 4;
            hi |= (uvec4(h >> 1, h >> 9, h >> 17, h >> 25) & 1u) << 4;
        }
        vec4 flo = vec4(lo), fhi = vec4(hi);
        for (uint j = 0; j < NVEC; j++) {
            if (j >= nv) break;
            uint o = xb[j] + xe + 4 * k;
            vec4 a = vec4(x[o], x[o + 1], x[o + 2], x[o + 3]);
            vec4 c = vec4(x[o + 32], x[o + 33], x[o + 34], x[o + 35]);
            slo[j] += dot(flo, a);
            shi[j] += dot(fhi, c);
            xlo[j] += a.x + a.y + a.z + a.w;
            xhi[j] += c.x + c.y + c.z + c.w;
        }
    }
    for (uint j = 0; j < NVEC; j++) {
        if (j >= nv) break;
        acc[ai + j] += d0 * slo[j] - m0 * xlo[j] + d1 * shi[j] - m1 * xhi[j];
    }
}

// Q6_K: unit u = super-block u / 4, half h = (u / 2) % 2, lanes l in [16 qq, 16 qq + 16) with
// qq = u % 2. Lane l yields elements 128h + l + 32k (k = 0..3): the low (k < 2) or high nibble
// of ql[64h + l + 32 (k & 1)] with bits 2k..2k+1 of qh[32h + l], scale index 8h + qq + 2k.
void unit_q6_K(uint row, uint u, uint ai) {
    uint b = row + (u >> 2) * Q6_K_BYTES, h = (u >> 1) & 1u, qq = u & 1u;
    float d = qb_half(b + Q6_K_D);
    float sc[4];
    for (uint k = 0; k < 4; k++) sc[k] = d * float(qb_sbyte(b + Q6_K_SCALES + 8 * h + qq + 2 * k));
    uint l0 = 16 * qq;
    uint w0 = (b + Q6_K_QL + 64 * h + l0) >> 1, w1 = w0 + 16, wh = (b + Q6_K_QH + 32 * h + l0) >> 1;
    uint xe = (u >> 2) * QK_K + 128 * h + l0;
    float s[4 * NVEC];
    for (uint j = 0; j < 4 * NVEC; j++) s[j] = 0.0;
    for (uint k = 0; k < 8; k++) { // two lanes per 16-bit word
        uint a = uint(qb_u16[w0 + k]), c = uint(qb_u16[w1 + k]), e = uint(qb_u16[wh + k]);
        // q[lane][k] for lanes 2k, 2k + 1
        ivec2 q0 = ivec2(uvec2(a, a >> 8) & 15u | (uvec2(e, e >> 8) & 3u) << 4) - 32;
        ivec2 q1 = ivec2(uvec2(c, c >> 8) & 15u | (uvec2(e >> 2, e >> 10) & 3u) << 4) - 32;
        ivec2 q2 = ivec2(uvec2(a >> 4, a >> 12) & 15u | (uvec2(e >> 4, e >> 12) & 3u) << 4) - 32;
        ivec2 q3 = ivec2(uvec2(c >> 4, c >> 12) & 15u | (uvec2(e >> 6, e >> 14) & 3u) << 4) - 32;
        for (uint j = 0; j < NVEC; j++) {
            if (j >= nv) break;
            uint o = xb[j] + xe + 2 * k;
            s[4 * j + 0] += dot(vec2(q0), vec2(x[o], x[o + 1]));
            s[4 * j + 1] += dot(vec2(q1), vec2(x[o + 32], x[o + 33]));
            s[4 * j + 2] += dot(vec2(q2), vec2(x[o + 64], x[o + 65]));
            s[4 * j + 3] += dot(vec2(q3), vec2(x[o + 96], x[o + 97]));
        }
    }
    for (uint j = 0; j < NVEC; j++) {
        if (j >= nv) break;
        acc[ai + j] += sc[0] * s[4 * j] + sc[1] * s[4 * j + 1] + sc[2] * s[4 * j + 2] + sc[3] * s[4 * j + 3];
    }
}

// The other block types (Q4_0 .. Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS): unit u = weights 32u .. 32u + 31, decoded
// 8 at a time by qb_decode8 (qb_dequant's values), summed by fma in k order.
void unit_block32(uint row, uint u, uint ai) {
    float s[NVEC];
    for (uint j = 0; j < NVEC; j++) s[j] = 0.0;
    for (uint k = 0; k < 32u; k += 8u) {
        float w[8];
        qb_decode8(QTYPE, row, 32u * u + k, w);
        for (uint j = 0; j < NVEC; j++) {
            if (j >= nv) break;
            uint o = xb[j] + 32u * u + k;
            for (uint r = 0; r < 8u; r++) s[j] = fma(w[r], x[o + r], s[j]);
        }
    }
    for (uint j = 0; j < NVEC; j++)
        if (j < nv) acc[ai + j] += s[j];
}

void main() {
    // Lanes per row L (a power of 2 dividing WG, from the host): the workgroup is G = WG / L
    // groups of L invocations, group g owning ROWS consecutive rows. Positions come from the
    // subgroup ids so that a group's lanes are consecutive lanes of one subgroup (L <= the
    // subgroup size) or whole subgroups (L > it), whatever order the driver lays them out in.
    uint L = LPR != 0 ? LPR : pc.lpr, G = WG / L, SG = gl_SubgroupSize, sl = gl_SubgroupInvocationID;
    uint vt = gl_SubgroupID * SG + sl, g = vt / L, l = vt % L;
    uint rb = pc.r_begin + (gl_WorkGroupID.x + gl_WorkGroupID.z * 65535u) * (ROWS * G);
    uint gy = gl_WorkGroupID.y;
    bool moe = pc.ids_offset >= 0;
    uint v0 = moe ? gy : gy * NVEC;
    if (rb >= pc.n_rows || v0 >= pc.n_vec) return; // uniform across the workgroup
    nv = moe ? 1u : min(NVEC, pc.n_vec - v0);
    int sl_id = moe ? ids[uint(pc.ids_offset) + gy] : int(pc.slice);
    bool bad = sl_id < 0 || uint(sl_id) >= pc.n_slices; // expert id out of range: zeros
    if (bad && pc.row0 != 0) return;
    uint fr0 = bad ? 0u : uint(sl_id) * pc.n_rows + rb; // flattened row of output row rb
    for (uint j = 0; j < NVEC; j++) xb[j] = (v0 + j) * pc.x_stride;
    for (uint i = 0; i < ROWS * NVEC; i++) acc[i] = 0.0;

    bool floaty = QTYPE == QTYPE_F32 || QTYPE == QTYPE_F16 || QTYPE == QTYPE_BF16;
    bool k64 = QTYPE == QTYPE_Q4_K || QTYPE == QTYPE_Q5_K || QTYPE == QTYPE_Q6_K;
    uint unit = floaty ? 4 : (k64 ? 64 : 32);
    uint n_units = pc.n_in / unit;
    for (uint i = 0; i < ROWS; i++) {
        uint r = rb + g * ROWS + i, fr = fr0 + g * ROWS + i;
        if (bad || r >= pc.n_rows || fr < pc.row0 || fr - pc.row0 >= pc.rows) continue;
        uint row = (fr - pc.row0) * pc.row_bytes;
        for (uint u = l; u < n_units; u += L) {
            if (floaty) unit_float(row, u, i * NVEC);
            else if (QTYPE == QTYPE_Q8_0) unit_q8_0(row, u, i * NVEC);
            else if (QTYPE == QTYPE_Q6_K) unit_q6_K(row, u, i * NVEC);
            else if (k64) unit_q45_K(row, u, i * NVEC);
            else unit_block32(row, u, i * NVEC);
        }
        if (floaty) // the n_in % 4 tail
            for (uint e = n_units * 4 + l; e < pc.n_in; e += L) {
                float w = load1(row, e);
                for (uint j = 0; j < NVEC; j++)
                    if (j < nv) acc[i * NVEC + j] += w * x[xb[j] + e];
            }
    }

    // Sum over the L lanes of each group: clusters of C = min(L, SG) lanes by subgroupAdd of
    // one cluster at a time (fixed order: deterministic; needs only subgroup arithmetic).
    uint C = min(L, SG), cl = sl / C;
    if (C > 1) // L == 1: nothing to sum
    for (uint k = 0; k < ROWS * NVEC; k++) {
        float mine = 0.0;
        for (uint c = 0; c < SG / C; c++) {
            float s = subgroupAdd(cl == c ? acc[k] : 0.0);
            if (cl == c) mine = s;
        }
        acc[k] = mine;
    }
    if (L <= SG) { // lane 0 of each group has its sums
        if (l != 0) return;
        for (uint k = 0; k < ROWS * NVEC; k++) {
            uint i = k / NVEC, j = k % NVEC, r = rb + g * ROWS + i, fr = fr0 + g * ROWS + i;
            if (j >= nv || r >= pc.n_rows) continue;
            if (!bad && (fr < pc.row0 || fr - pc.row0 >= pc.rows)) continue;
            y[(v0 + j) * pc.y_stride + r] = acc[k];
        }
        return;
    }
    // L > SG: a group is L / SG whole subgroups; their sums meet in shared memory
    if (sl == 0)
        for (uint k = 0; k < ROWS * NVEC; k++) red[gl_SubgroupID * ROWS * NVEC + k] = acc[k];
    barrier();
    uint per = L / SG;
    for (uint o = gl_LocalInvocationID.x; o < G * ROWS * NVEC; o += WG) {
        uint gg = o / (ROWS * NVEC), k = o % (ROWS * NVEC), i = k / NVEC, j = k % NVEC;
        uint r = rb + gg * ROWS + i, fr = fr0 + gg * ROWS + i;
        if (j >= nv || r >= pc.n_rows) continue;
        if (!bad && (fr < pc.row0 || fr - pc.row0 >= pc.rows)) continue;
        float s = 0.0;
        for (uint q = 0; q < per; q++) s += red[(gg * per + q) * ROWS * NVEC + k];
        y[(v0 + j) * pc.y_stride + r] = s;
    }
}
