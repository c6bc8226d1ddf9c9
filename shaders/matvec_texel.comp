#version 450
// Decode matrix-vector product for CPU devices (lavapipe): Q6_K rows in the 16-byte-aligned
// layout of cvk_matvec_pack_rows (A16), one invocation per ROWS consecutive rows, the weights
// and x read through uniform texel buffers (16-byte uint texels of their buffer parts).
//   y[v][r] = sum_i W[s(v)][r][i] * x[v][i]
// Why texels: on llvmpipe a storage-buffer load whose address differs across the lanes is a
// loop over the lanes with a bounds check and a branch per lane, ~1 GB/s on two cores, while
// a texel fetch is one gather, ~13 GB/s (docs/kernels/matvec.md). The sums are those of
// matvec.comp's one-lane-per-row Q6_K path with float x: per row and vector, units of 64
// weights in k order, each d * dot(scales, per-quarter sums of q * x).
//
// Per unit, x of every vector is fetched once for the invocation's rows, and each row's weights
// are fetched and decoded once for every vector. Shaped for llvmpipe, where (measured on the
// 30B lm_head, docs/kernels/matvec.md) a texel fetch is a call that clobbers the vector
// registers, and a temporary array indexed by anything but a constant lives in per-lane scratch
// memory: the vector loops are written out (XV, DOTS: j is a literal, NVEC <= 8 is a
// specialization constant, so every index is a constant once the row loop is unrolled), and no
// loop with a run-time trip count wraps the row loop (one around it cost 1.6x).
//
// Same push block, grid, parts and slice selection as matvec.comp (LPR 1: a group is one
// invocation); x0 is x's first texel in its part (the host binds whole parts).
#extension GL_EXT_samplerless_texture_functions : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;   // invocations per workgroup
layout(constant_id = 2) const uint ROWS = 16; // output rows per invocation
layout(constant_id = 3) const uint NVEC = 1;  // vectors per workgroup (dense mode), 1..8

const uint QK_K = 256;
const uint BODY = 13; // texels of a super-block's ql (0-7), qh (8-11) and scales (12)

layout(binding = 0) uniform utextureBuffer wt; // the weight part
layout(binding = 1) uniform utextureBuffer xt; // x's part: floats as bits
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 3) readonly buffer Ids { int ids[]; };

// mirrors cvk_matvec_push in runtime/vk/op_matvec.h
layout(push_constant) uniform Push {
    uint n_in, row_bytes, n_rows, n_slices;
    uint row0, rows, r_begin, n_vec;
    uint x_stride, y_stride, slice;
    int ids_offset;
    uint lpr; // 1
    uint x0;  // x's first texel in its part
} pc;

float acc[ROWS * NVEC]; // acc[i * NVEC + j]: row i, vector j

vec4 x4(uint e) { return uintBitsToFloat(texelFetch(xt, int(pc.x0 + e / 4))); }

// Unit u (64 weights: quarter-super-block qq of half h of super-block sb) of the rows at texels
// rt[i] (ok[i]: in range), for the nv vectors starting at x elements xb[j].
void unit(uint u, uint rt[ROWS], bool ok[ROWS], uint xb[8], uint nv) {
    uint sb = u >> 2, h = (u >> 1) & 1u, qq = u & 1u, nb = pc.n_in / QK_K;
    uint xe = sb * QK_K + 128 * h + 16 * qq; // this unit's x: xe + 32 k + 4 i + 0..3
    vec4 xv[8 * 16];                         // xv[16 j + 4 k + i]: vector j's x at xe + 32 k + 4 i
#define XV(j)                                                                                    \
    if (j < NVEC) { /* a vector past nv reads vector 0's x and is never stored */                 \
        uint xj = (j < nv ? xb[j] : xb[0]) + xe;                                                 \
        for (uint k = 0; k < 4; k++)                                                             \
            for (uint i = 0; i < 4; i++) xv[16 * j + 4 * k + i] = x4(xj + 32 * k + 4 * i);       \
    }
    XV(0) XV(1) XV(2) XV(3) XV(4) XV(5) XV(6) XV(7)
    for (uint r = 0; r < ROWS; r++) {
        if (!ok[r]) continue;
        uint w = rt[r] + sb * BODY;
        uvec4 A = texelFetch(wt, int(w + 4 * h + qq)), C = texelFetch(wt, int(w + 4 * h + qq + 2));
        uvec4 E = texelFetch(wt, int(w + 8 + 2 * h + qq)), S = texelFetch(wt, int(w + 12));
        uvec4 D = texelFetch(wt, int(rt[r] + nb * BODY + (sb >> 3))); // the row's f16 d's after its bodies
        float d = unpackHalf2x16(D[(sb >> 1) & 3u])[sb & 1u];
        uvec2 s2 = h == 0 ? S.xy : S.zw; // scales 8h + qq + 2k: byte qq or qq + 2 of word 2h or 2h + 1
        int o = int(8 * qq);
        vec4 sc = vec4(bitfieldExtract(int(s2.x), o, 8), bitfieldExtract(int(s2.x), o + 16, 8),
                       bitfieldExtract(int(s2.y), o, 8), bitfieldExtract(int(s2.y), o + 16, 8));
        vec4 qf[16]; // qf[4 k + i]: weights 32 k + 4 i + 0..3 of the unit, q - 32
        for (uint i = 0; i < 4; i++) {
            uint q[4];
            q[0] = (A[i] & 0x0F0F0F0Fu) | ((E[i] << 4) & 0x30303030u);
            q[1] = (C[i] & 0x0F0F0F0Fu) | ((E[i] << 2) & 0x30303030u);
            q[2] = ((A[i] >> 4) & 0x0F0F0F0Fu) | (E[i] & 0x30303030u);
            q[3] = ((C[i] >> 4) & 0x0F0F0F0Fu) | ((E[i] >> 2) & 0x30303030u);
            for (uint k = 0; k < 4; k++) // q - 32
                qf[4 * k + i] = vec4(ivec4(int(q[k] ^ 0x20202020u)) << ivec4(26, 18, 10, 2) >> 26);
        }
#define DOTS(j)                                                                                  \
        if (j < NVEC) {                                                                          \
            vec4 sf = vec4(0.0);                                                                 \
            for (uint i = 0; i < 4; i++)                                                         \
                for (uint k = 0; k < 4; k++) sf[k] += dot(qf[4 * k + i], xv[16 * j + 4 * k + i]); \
            acc[r * NVEC + j] += d * dot(sc, sf);                                                \
        }
        DOTS(0) DOTS(1) DOTS(2) DOTS(3) DOTS(4) DOTS(5) DOTS(6) DOTS(7)
    }
}

void main() {
    uint rb = pc.r_begin + (gl_WorkGroupID.x + gl_WorkGroupID.z * 65535u) * (ROWS * WG);
    uint gy = gl_WorkGroupID.y;
    bool moe = pc.ids_offset >= 0;
    uint v0 = moe ? gy : gy * NVEC;
    if (rb >= pc.n_rows || v0 >= pc.n_vec) return; // uniform across the workgroup
    uint nv = moe ? 1u : min(NVEC, pc.n_vec - v0);
    int sl_id = moe ? ids[uint(pc.ids_offset) + gy] : int(pc.slice);
    bool bad = sl_id < 0 || uint(sl_id) >= pc.n_slices; // expert id out of range: zeros
    if (bad && pc.row0 != 0) return;
    uint fr0 = bad ? 0u : uint(sl_id) * pc.n_rows + rb; // flattened row of output row rb
    uint g = gl_LocalInvocationID.x, xb[8], rt[ROWS];
    bool ok[ROWS];
    for (uint j = 0; j < NVEC; j++) xb[j] = (v0 + j) * pc.x_stride;
    for (uint i = 0; i < ROWS * NVEC; i++) acc[i] = 0.0;
    for (uint i = 0; i < ROWS; i++) {
        uint r = rb + g * ROWS + i, fr = fr0 + g * ROWS + i;
        ok[i] = !bad && r < pc.n_rows && fr >= pc.row0 && fr - pc.row0 < pc.rows;
        rt[i] = ok[i] ? (fr - pc.row0) * (pc.row_bytes / 16) : 0u;
    }
    for (uint u = 0; u < pc.n_in / 64; u++) unit(u, rt, ok, xb, nv);
    for (uint k = 0; k < ROWS * NVEC; k++) {
        uint i = k / NVEC, j = k % NVEC, r = rb + g * ROWS + i, fr = fr0 + g * ROWS + i;
        if (j >= nv || r >= pc.n_rows) continue;
        if (!bad && (fr < pc.row0 || fr - pc.row0 >= pc.rows)) continue;
        y[(v0 + j) * pc.y_stride + r] = acc[k];
    }
}
