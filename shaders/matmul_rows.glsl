// Matrix product for few tokens (decode steps, experts with a handful of tokens), the same
// task, bindings and push block as matmul.comp, and the SAME BITS: every output is summed in
// the canonical order of matmul.comp (k in chunks of 32, each chunk's sum by fma from 0 in k
// order, the chunk sums added in k order) of the weights as qb_dequant decodes them. So a
// token's result does not depend on which kernel ran it, i.e. on how many tokens were batched
// with it (runtime/model/gpu_model.h: batch invariance).
//
// Why a second kernel: matmul.comp decodes a BM x BK weight tile into shared memory once per
// tile and reuses it for BN tokens; with one token that costs a shared-memory round trip and
// barriers per weight, which CPU devices (llvmpipe) pay per lane. Here each invocation owns one
// weight row (RPI rows) and NT tokens: it decodes its row a scale group (32 weights, one chunk)
// at a time in registers and accumulates NT sums; no shared memory, no barrier.
//
// Split k (KL > 1, a GPU's decode): KL consecutive lanes of one subgroup share a row; per round
// of KL chunks lane j sums chunk c0 + j, and lane 0 of the row takes the round's chunk sums by
// subgroupShuffle and adds them in k order: no shared memory, no barrier. A projection then runs KL times as many invocations, each walking 1/KL of the
// row: a decode step's projection is bound by one invocation's walk when it has a few hundred
// rows (one invocation per row: attn_k 512, the router 128). With RPI > 1 as well, each lane
// does so for RPI rows, so every x load feeds RPI rows (x is read once per row and token
// otherwise: at 8 tokens far more bytes than the weights).
//
// Workgroup (x, y, z): rows m0 = x*BM.. of the slice (invocation i: rows m0 + i / KL + q*WG/KL,
// q < RPI, i counted from the subgroup ids so a row's lanes are consecutive lanes of one
// subgroup), tokens n0 = y*NT.., expert e = expert0 + z
// (grouped mode); with work items (flag 16) rows m0 = y*BM.. and item x, as in matmul.comp;
// token lists, parts and skipping exactly as matmul.comp.
// Gate-up pairs (GLU = 1, matmul.comp): invocation m owns output m, gate row m and up row
// n_rows + m of the slice, two sums per token, and writes silu(G x) * (U x).
//
// Two SPIR-V variants include this file: matmul_rows.comp reads the weights and x through
// storage buffers; matmul_rows_texel.comp (TEXEL) through uniform texel buffers of 16-byte
// texels (bindings 0 and 1; CPU devices, where a texel fetch is a gather and a storage-buffer
// load a loop over the lanes: docs/kernels/matvec.md). The bytes, and so the bits, are the same.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#ifdef TEXEL
#extension GL_EXT_samplerless_texture_functions : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
const uint QTYPE = QTYPE_FIXED; // one module per weight type (cmake/shaders.cmake)
layout(constant_id = 2) const uint BM = 64; // rows per workgroup (== WG * RPI / KL)
layout(constant_id = 3) const uint NT = 8;  // tokens per workgroup
layout(constant_id = 5) const uint RPI = 1; // rows per invocation: each x load feeds RPI rows
layout(constant_id = 6) const uint KL = 1;  // invocations per row splitting k
layout(constant_id = 7) const uint GLU = 0; // 1: gate-up pairs (matmul.comp); 4 unused here

#ifdef TEXEL
#include "quant_blocks.glsl"
layout(binding = 0) uniform utextureBuffer wt; // the weight part
layout(binding = 1) uniform utextureBuffer xt; // x's part: floats as bits, from texel pc.x0
#else
#define QB_BINDING 0
#include "quant_blocks.glsl"
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer X4 { vec4 x4[]; }; // the same floats, 4 per load (X4 flag)
#endif
layout(binding = 2) buffer Y { float y[]; }; // read only with flag 32 (accumulate)
layout(binding = 3) readonly buffer Gather { int gather[]; };
layout(binding = 4) readonly buffer Scatter { int scatter[]; };
layout(binding = 5) readonly buffer Groups { uvec2 groups[]; };
layout(binding = 6) readonly buffer Items { uvec2 items[]; };

// mirrors cvk_matmul_push in runtime/vk/op_matmul.h (as matmul.comp)
layout(push_constant) uniform Push {
    uint n_in, row_bytes, n_rows, part_row0, part_rows, expert0, n_tokens;
    uint x_stride, x_rows, y_stride, y_rows, ids_off, n_ids, flags, item0, expert1;
    uint x0; // TEXEL: x's first texel in its part
} pc;
// flags 8 (set by the host when x_stride and n_in are multiples of 4 and x starts 16-byte
// aligned): x read as vec4s, a quarter of the load instructions (CPU devices pay per lane).
const uint X4_FLAG = 8u;

const uint NONE = 0xffffffffu;
const uint CHUNK = 32u; // the canonical order's chunk of k (matmul.comp)
// weights decoded per step: a scale group of the block types (their rows are whole blocks), or
// 32 float weights (float_one in main says when floats go a weight at a time instead): a chunk
const uint GROUP = CHUNK;
const bool FLOATW = QTYPE == QTYPE_F32 || QTYPE == QTYPE_F16 || QTYPE == QTYPE_BF16;

#ifdef TEXEL
uvec4 wtex(uint t) { return texelFetch(wt, int(t)); }
vec4 xtex(uint i) { return uintBitsToFloat(texelFetch(xt, int(pc.x0 + i))); } // x4[i]
float xone(uint i) { return xtex(i >> 2)[i & 3u]; }                           // x[i]
float w_half(uint o) { return unpackHalf2x16(wtex(o >> 4)[(o >> 2) & 3u] >> (8u * (o & 2u))).x; } // o even

// NW little-endian words of the bytes from byte offset o (even), out of the NT texels from o's
// (NW <= 4 NT; the caller's bytes lie in them): words shifted by whole words (a select per
// word, no indexing by o) and then by 16 bits when o is 2 mod 4; bytes past the texels read 0.
#define WORDSN(o, NW, NT, dst) { uint o_ = (o), t_ = o_ >> 4, sw_ = (o_ >> 2) & 3u, sh_ = (o_ & 2u) * 8u; \
        uint v_[4u * NT + 4u], u_[NW + 1u]; \
        [[unroll]] for (uint i_ = 0; i_ < NT; i_++) { uvec4 a_ = wtex(t_ + i_); \
            v_[4u * i_] = a_.x, v_[4u * i_ + 1u] = a_.y, v_[4u * i_ + 2u] = a_.z, v_[4u * i_ + 3u] = a_.w; } \
        [[unroll]] for (uint i_ = 4u * NT; i_ < 4u * NT + 4u; i_++) v_[i_] = 0u; \
        [[unroll]] for (uint h_ = 0; h_ <= NW; h_++) \
            u_[h_] = sw_ == 0u ? v_[h_] : sw_ == 1u ? v_[h_ + 1u] : sw_ == 2u ? v_[h_ + 2u] : v_[h_ + 3u]; \
        [[unroll]] for (uint h_ = 0; h_ < NW; h_++) dst[h_] = sh_ == 0u ? u_[h_] : (u_[h_] >> 16) | (u_[h_ + 1u] << 16); }
// The 32 bytes at byte offset o (even), one per element, from the 3 texels that hold them.
#define LOAD32(o, dst) { uint w8_[8]; WORDSN(o, 8u, 3u, w8_); \
        [[unroll]] for (uint h_ = 0; h_ < 8u; h_++) { \
            [[unroll]] for (uint b2_ = 0; b2_ < 4u; b2_++) dst[4u * h_ + b2_] = (w8_[h_] >> (8u * b2_)) & 255u; } }
// o a multiple of 16: its two texels
#define LOAD32_16(o, dst) [[unroll]] for (uint h_ = 0; h_ < 2u; h_++) { \
        uvec4 v_ = wtex(((o) >> 4) + h_); \
        [[unroll]] for (uint c_ = 0; c_ < 4u; c_++) { \
            [[unroll]] for (uint b_ = 0; b_ < 4u; b_++) dst[16u * h_ + 4u * c_ + b_] = (v_[c_] >> (8u * b_)) & 255u; } }
#define W_U4(t) wtex(t)
#else
vec4 xtex(uint i) { return x4[i]; }
float xone(uint i) { return x[i]; }
float w_half(uint o) { return qb_half(o); }
uint w_u16(uint o) { return uint(qb_u16[o >> 1]); }
// Byte l of the 32 at byte offset o (even), from 16 loads of 16 bits.
#define LOAD32(o, dst) [[unroll]] for (uint h_ = 0; h_ < 16u; h_++) { \
        uint v_ = uint(qb_u16[((o) >> 1) + h_]); dst[2u * h_] = v_ & 255u; dst[2u * h_ + 1u] = v_ >> 8; }

// The same 32 bytes as 8 little-endian words, from 9 aligned 32-bit loads and a funnel shift
// (o even: Q6_K's 210-byte blocks are 2-aligned): on lavapipe each load is a loop over the
// lanes, whatever its width.
#define WORDS32_W(o, dst) { uint w_ = (o) >> 2, s_ = ((o) & 2u) * 8u, v_[9]; \
        [[unroll]] for (uint h_ = 0; h_ < 9u; h_++) v_[h_] = qb_u32[w_ + h_]; \
        [[unroll]] for (uint h_ = 0; h_ < 8u; h_++) dst[h_] = s_ == 0u ? v_[h_] : (v_[h_] >> 16) | (v_[h_ + 1u] << 16); }

// The same 32 bytes from two 16-byte loads; o a multiple of 16 (Q4_K / Q5_K: 144- and
// 176-byte blocks, their qs and qh runs at 16-byte offsets, parts bound at offset 0).
layout(binding = 0) readonly buffer QbU4 { uvec4 qb_u4[]; };
#define W_U4(t) qb_u4[t]
#define LOAD32_16(o, dst) [[unroll]] for (uint h_ = 0; h_ < 2u; h_++) { \
        uvec4 v_ = qb_u4[((o) >> 4) + h_]; \
        [[unroll]] for (uint c_ = 0; c_ < 4u; c_++) { \
            [[unroll]] for (uint b_ = 0; b_ < 4u; b_++) dst[16u * h_ + 4u * c_ + b_] = (v_[c_] >> (8u * b_)) & 255u; } }

#endif

// The 32 weights of group k (0..3) of a Q6_K half block (128 weights), as qb_dequant decodes
// them, from the half's words: ql[l0 + i] (i < 8: the group's 32 low-nibble bytes), qh[i] (the
// half's 32 high-bit bytes), s2 (the group's two scales, 16 bits) and dh. Four weights per word,
// decoded packed: the low nibbles (of the high half for k >= 2) or the 2 high bits << 4 is q in
// 0..63 per byte; with bit 5 flipped a byte read as a 6-bit signed number is q - 32 (a shift left
// and an arithmetic shift right). qb_dequant's dh * sc * q is (dh * sc) * q: the product is
// formed once per 16 weights, the same bits.
#define Q6K_GROUP(ql, l0, qh, k, s2, dh, w) { \
        uint s2_ = (s2), k_ = (k); \
        float ds0_ = (dh) * float(bitfieldExtract(int(s2_), 0, 8)), ds1_ = (dh) * float(bitfieldExtract(int(s2_), 8, 8)); \
        [[unroll]] for (uint i_ = 0; i_ < 8u; i_++) { \
            uint q4_ = ((ql[(l0) + i_] >> (4u * (k_ >> 1))) & 0x0F0F0F0Fu) | (((qh[i_] >> (2u * k_)) & 0x03030303u) << 4); \
            int qs_ = int(q4_ ^ 0x20202020u); \
            [[unroll]] for (uint c_ = 0; c_ < 4u; c_++) \
                w[4u * i_ + c_] = (i_ < 4u ? ds0_ : ds1_) * float((qs_ << (26u - 8u * c_)) >> 26); } }

#ifdef TEXEL
// A Q6_K half block's words for Q6K_GROUP, fetched once for its 4 groups (10 texel fetches per
// 128 weights instead of 32: on llvmpipe a fetch is a called function, about half the kernel's
// time): ql (16 words: the half's 64 bytes), qh (8: its 32), sd (5: the block's 16 scales and d).
#define Q6K_HALF(row, kh, ql, qh, sd) { \
        uint b_ = (row) + ((kh) / QK_K) * Q6_K_BYTES, h_ = ((kh) % QK_K) / 128u; \
        WORDSN(b_ + Q6_K_QL + 64u * h_, 16u, 5u, ql) \
        WORDSN(b_ + Q6_K_QH + 32u * h_, 8u, 3u, qh) \
        WORDSN(b_ + Q6_K_SCALES, 5u, 2u, sd) }
// Group k of the half h (0, 1) whose words Q6K_HALF fetched.
#define Q6K_HALF_GROUP(ql, qh, sd, h, k, w) { \
        uint sw_ = (h) == 0u ? sd[(k) >> 1] : sd[2u + ((k) >> 1)]; /* scale bytes 8h + 2k, 8h + 2k + 1 */ \
        Q6K_GROUP(ql, 8u * ((k) & 1u), qh, k, sw_ >> (16u * ((k) & 1u)), unpackHalf2x16(sd[4]).x, w) }
#endif

// Weights k0 .. k0 + GROUP - 1 of the row at byte offset `row`, each the float qb_dequant
// returns for it (the same expression, evaluated in the same order), with the group's scales
// decoded once and its bytes read 16 bits at a time.
void decode_group(uint row, uint k0, out float w[GROUP]) {
    if (QTYPE == QTYPE_Q8_0) {
        uint b = row + (k0 / QK8_0) * Q8_0_BYTES;
        uint q[32];
        LOAD32(b + Q8_0_QS, q);
        float d = w_half(b + Q8_0_D);
        [[unroll]] for (uint i = 0; i < GROUP; i++) w[i] = d * float(bitfieldExtract(int(q[i]), 0, 8));
    } else if (QTYPE == QTYPE_Q4_K || QTYPE == QTYPE_Q5_K) {
        bool five = QTYPE == QTYPE_Q5_K;
        uint nb = five ? Q5_K_BYTES : Q4_K_BYTES;
        uint b = row + (k0 / QK_K) * nb, g = (k0 % QK_K) / 32, j = g / 2, hi = g & 1u;
        // d, dmin and the 12 scale bytes: the block's first 16 bytes, one load (blocks of 144
        // and 176 bytes start 16-aligned); the same values as qb_scale_min_k4 and qb_half
        uvec4 hd = W_U4(b >> 4);
        uvec2 sm = qb_scale_min_k4_w(hd.yzw, g);
        vec2 dm = unpackHalf2x16(hd.x);
        float d = dm.x * float(sm.x);
        float mn = dm.y * float(sm.y);
        uint qs[32], qh[32];
        LOAD32_16(b + (five ? Q5_K_QS : Q4_K_QS) + 32 * j, qs);
        if (five) { LOAD32_16(b + Q5_K_QH, qh); }
        [[unroll]] for (uint l = 0; l < 32u; l++) {
            uint q = (qs[l] >> (4 * hi)) & 15u;
            if (five) q |= ((qh[l] >> (2 * j + hi)) & 1u) << 4;
            w[l] = fma(d, float(q), -mn); // qb_q4_K's expression: one rounding on every compiler
        }
    } else if (QTYPE == QTYPE_Q6_K) {
#ifndef TEXEL // the texel variant reads Q6_K by half blocks (Q6K_HALF, main)
        uint b = row + (k0 / QK_K) * Q6_K_BYTES, g = (k0 % QK_K) / 32, h = g / 4, k = g % 4;
        uint ql[8], qh[8]; // 32 bytes each, as words
        WORDS32_W(b + Q6_K_QL + 64 * h + 32 * (k & 1u), ql);
        WORDS32_W(b + Q6_K_QH + 32 * h, qh);
        Q6K_GROUP(ql, 0u, qh, k, w_u16(b + Q6_K_SCALES + 8 * h + 2 * k), w_half(b + Q6_K_D), w)
#endif
    } else if (!FLOATW) {
#ifndef TEXEL // the other block types (Q4_0 .. Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS): qb_decode8's words, qb_dequant's values
        [[unroll]] for (uint r = 0; r < GROUP / 8u; r++) {
            float v[8];
            qb_decode8(QTYPE, row, k0 + 8u * r, v);
            [[unroll]] for (uint i = 0; i < 8u; i++) w[8u * r + i] = v[i];
        }
#endif
    } else {
#ifndef TEXEL // the texel variant is built for the block types only (op_matmul.c)
        // float rows, 16 bytes per load (row and k0 at whole groups: 16-byte aligned); each
        // value converted as qb_dequant converts it (a half's or a bf16's bits are exact in f32)
        uint t = row / 16u + k0 * (QTYPE == QTYPE_F32 ? 4u : 2u) / 16u;
        [[unroll]] for (uint i = 0; i < GROUP / (QTYPE == QTYPE_F32 ? 4u : 8u); i++) {
            uvec4 v = qb_u4[t + i];
            if (QTYPE == QTYPE_F32) {
                [[unroll]] for (uint c = 0; c < 4u; c++) w[4u * i + c] = uintBitsToFloat(v[c]);
            } else {
                [[unroll]] for (uint c = 0; c < 4u; c++) {
                    vec2 h = QTYPE == QTYPE_F16 ? unpackHalf2x16(v[c])
                                                : vec2(uintBitsToFloat(v[c] << 16), uintBitsToFloat(v[c] & 0xffff0000u));
                    w[8u * i + 2u * c] = h.x, w[8u * i + 2u * c + 1u] = h.y;
                }
            }
        }
#endif
    }
}

// acc[q * NT + n] += w[q] . x[xrow[n]][k0 .. k0 + N) for the RPI rows q, one fma at a time in
// k order (rows NONE: skipped); each x load feeds the RPI rows. A macro, not a function:
// llvmpipe spills an inout array parameter (the kernel ran 2x slower).
#define ADD_GROUP(w, acc) ADD_N(w, acc, GROUP)
#define ADD_N(w, acc, N) \
    if (wide && N % 4u == 0u) { \
        [[unroll]] for (uint n = 0; n < NT; n++) { \
            if (xrow[n] == NONE) continue; /* acc stays 0, never stored */ \
            uint o = (xrow[n] * pc.x_stride + k0) / 4u; \
            [[unroll]] for (uint i = 0; i < N; i += 4u) { \
                vec4 xv = xtex(o + i / 4u); \
                [[unroll]] for (uint q = 0; q < RPI; q++) { \
                    acc[q * NT + n] = fma(w[q][i], xv.x, acc[q * NT + n]); \
                    acc[q * NT + n] = fma(w[q][i + 1u], xv.y, acc[q * NT + n]); \
                    acc[q * NT + n] = fma(w[q][i + 2u], xv.z, acc[q * NT + n]); \
                    acc[q * NT + n] = fma(w[q][i + 3u], xv.w, acc[q * NT + n]); \
                } \
            } \
        } \
    } else { \
        [[unroll]] for (uint i = 0; i < N; i++) { \
            [[unroll]] for (uint n = 0; n < NT; n++) { \
                float xv = xrow[n] != NONE ? xone(xrow[n] * pc.x_stride + k0 + i) : 0.0; \
                [[unroll]] for (uint q = 0; q < RPI; q++) acc[q * NT + n] = fma(w[q][i], xv, acc[q * NT + n]); \
            } \
        } \
    }

// Group k0 of the RPI rows (and of their up rows for GLU) decoded and added to part (part_u).
#define ADD_DECODED(kg) { \
        uint k0 = (kg); \
        float w[RPI][GROUP]; \
        [[unroll]] for (uint q = 0; q < RPI; q++) decode_group(row[q], k0, w[q]); \
        ADD_GROUP(w, part) \
        if (glu) { \
            [[unroll]] for (uint q = 0; q < RPI; q++) decode_group(row_u[q], k0, w[q]); \
            ADD_GROUP(w, part_u) \
        } }

#define ZERO_PART [[unroll]] for (uint i = 0; i < RPI * NT; i++) part[i] = 0.0, part_u[i] = 0.0;
#define ACC_PART [[unroll]] for (uint i = 0; i < RPI * NT; i++) acc[i] = acc[i] + part[i], acc_u[i] = acc_u[i] + part_u[i];
#ifdef TEXEL
#define FLOAT_ONE_SUM(kc)
#else
// float rows a weight at a time, the chunk from kc
#define FLOAT_ONE_SUM(kc) \
    for (uint k = (kc); k < min((kc) + CHUNK, pc.n_in); k++) { \
        float w[RPI][1]; \
        uint k0 = k; \
        [[unroll]] for (uint q = 0; q < RPI; q++) w[q][0] = qb_dequant(QTYPE, row[q], k); \
        ADD_N(w, part, 1u) \
        if (glu) { \
            [[unroll]] for (uint q = 0; q < RPI; q++) w[q][0] = qb_dequant(QTYPE, row_u[q], k); \
            ADD_N(w, part_u, 1u) \
        } \
    }
#endif
// part (part_u) = chunk c's sums, by fma from 0 in k order; zeros for a chunk past the row
#define CHUNK_SUM(c) { \
        ZERO_PART \
        uint kc_ = (c) * CHUNK; \
        if (kc_ < pc.n_in) { \
            if (float_one) { FLOAT_ONE_SUM(kc_) } \
            else ADD_DECODED(kc_) \
        } }

void main() {
    uvec2 wg = (pc.flags & 16u) != 0 ? gl_WorkGroupID.yx : gl_WorkGroupID.xy; // {row tile, token tile or item}
    uint e = pc.expert0 + gl_WorkGroupID.z, n0 = wg.y * NT;
    if ((pc.flags & 16u) != 0) { // work item x (matmul.comp): NT tokens of one expert
        uvec2 it = items[pc.item0 + wg.y];
        e = it.x;
        n0 = it.y;
        if (e < pc.expert0 || e >= pc.expert1) return;
    }
    const bool glu = GLU != 0u;
    uint slice = glu ? 2u * pc.n_rows : pc.n_rows, g0 = e * slice;
    uint lo = max(g0, pc.part_row0), hi = min(g0 + slice, pc.part_row0 + pc.part_rows);
    uint nr = hi > lo ? hi - lo : 0u, w_row0 = lo - pc.part_row0, r0 = lo - g0;
    if (glu) {
        if (nr != slice) return; // the host never splits a pair slice
        nr = pc.n_rows;          // outputs
    }
    bool grouped = (pc.flags & 4u) != 0;
    uint count = pc.n_tokens, j0 = pc.ids_off;
    if (grouped) {
        uvec2 grp = groups[e];
        count = min(grp.y, pc.n_tokens);
        j0 += grp.x;
    }
    const uint STEP = WG / KL; // rows between an invocation's RPI rows
    // positions from the subgroup ids: a row's KL lanes are consecutive lanes of one subgroup
    // (the host keeps KL a power of 2 within the smallest subgroup size), for subgroupShuffle
    uint li = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID, lane = li % KL;
    uint m0 = wg.x * BM + li / KL; // rows m0 + q * STEP, q < RPI
    if (wg.x * BM >= nr || n0 >= count) return; // uniform: nothing of this tile exists
    if (m0 >= nr) return; // all of this row's lanes (the shuffles stay within a row)

    uint xrow[NT], yrow[NT];
    [[unroll]] for (uint n = 0; n < NT; n++) {
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

    float acc[RPI * NT], acc_u[RPI * NT], part[RPI * NT], part_u[RPI * NT];
    [[unroll]] for (uint i = 0; i < RPI * NT; i++) acc[i] = 0.0, acc_u[i] = 0.0;
    uint row[RPI], row_u[RPI];
    [[unroll]] for (uint q = 0; q < RPI; q++) { // a row past nr (q > 0): the last one decoded, never stored
        uint m = min(m0 + q * STEP, nr - 1u);
        row[q] = (w_row0 + m) * pc.row_bytes, row_u[q] = (w_row0 + pc.n_rows + m) * pc.row_bytes;
    }
#ifdef TEXEL
    // x rows at whole texels (the host refuses others): a constant, not the X4 flag. llvmpipe
    // runs both sides of every branch with lanes masked off, so a runtime choice between the two
    // x paths of ADD_GROUP paid for both (the texel kernels ran 2-3.5x slower).
    const bool wide = true;
#else
    bool wide = (pc.flags & X4_FLAG) != 0u;
#endif
    // Float rows are read 16 bytes per load in groups of 32 (n_in a multiple of 32) for one token
    // or split k (a GPU's router: 32 independent loads instead of one per fma); otherwise a
    // weight at a time: on llvmpipe 8 tokens x 32 weights spill (the 30B router at batch 8:
    // 2.7 -> 4.4 ms), where one token gains (1.34 -> 0.96 ms). (Not a const: glslc's optimizer
    // fails on that spec-constant expression.)
    bool float_one = FLOATW && ((NT > 1u && KL == 1u) || pc.n_in % GROUP != 0u);
    uint n_chunks = (pc.n_in + CHUNK - 1u) / CHUNK;
    if (KL == 1u) { // a lane walks the whole row: each chunk's sums added as it ends
#ifdef TEXEL
        if (QTYPE == QTYPE_Q6_K) { // a half block's words fetched once for its 4 groups (Q6K_HALF)
            for (uint kh = 0; kh < pc.n_in; kh += 128u) {
                uint ql[RPI][16], qh[RPI][8], sd[RPI][5], ql_u[RPI][16], qh_u[RPI][8], sd_u[RPI][5];
                uint h = (kh % QK_K) / 128u;
                [[unroll]] for (uint q = 0; q < RPI; q++) Q6K_HALF(row[q], kh, ql[q], qh[q], sd[q])
                if (glu) {
                    [[unroll]] for (uint q = 0; q < RPI; q++) Q6K_HALF(row_u[q], kh, ql_u[q], qh_u[q], sd_u[q])
                }
                [[unroll]] for (uint g = 0; g < 4u; g++) {
                    uint k0 = kh + 32u * g;
                    float w[RPI][GROUP];
                    ZERO_PART
                    [[unroll]] for (uint q = 0; q < RPI; q++) Q6K_HALF_GROUP(ql[q], qh[q], sd[q], h, g, w[q])
                    ADD_GROUP(w, part)
                    if (glu) {
                        [[unroll]] for (uint q = 0; q < RPI; q++) Q6K_HALF_GROUP(ql_u[q], qh_u[q], sd_u[q], h, g, w[q])
                        ADD_GROUP(w, part_u)
                    }
                    ACC_PART
                }
            }
        } else
#endif
        for (uint c = 0; c < n_chunks; c++) {
            CHUNK_SUM(c)
            ACC_PART
        }
    } else {
        // split k: per round lane j sums chunk c0 + j, then lane 0 of the row takes the round's
        // chunk sums from lanes 0 .. KL - 1 in k order (chunks past the row: none are added).
        // (Every lane runs the adds; only lane 0's sums are stored.)
        uint src0 = gl_SubgroupInvocationID - lane; // the row's lane 0
        for (uint c0 = 0; c0 < n_chunks; c0 += KL) { // uniform
            CHUNK_SUM(c0 + lane)
            [[unroll]] for (uint j = 0; j < KL; j++) {
                if (c0 + j >= n_chunks) break; // uniform
                [[unroll]] for (uint i = 0; i < RPI * NT; i++) {
                    acc[i] = acc[i] + subgroupShuffle(part[i], src0 + j);
                    if (glu) acc_u[i] = acc_u[i] + subgroupShuffle(part_u[i], src0 + j);
                }
            }
        }
    }
    if (lane != 0u) return;
    [[unroll]] for (uint q = 0; q < RPI; q++) {
        uint m = m0 + q * STEP;
        if (m >= nr) break;
        [[unroll]] for (uint n = 0; n < NT; n++) {
            float a = acc[q * NT + n];
            if (glu) a = a / (1.0 + exp(-a)) * acc_u[q * NT + n]; // shaders/swiglu.comp's expression
            if (yrow[n] != NONE) {
                uint o = yrow[n] * pc.y_stride + r0 + m;
                y[o] = (pc.flags & 32u) != 0 ? y[o] + a : a; // 32: y += W x (a residual)
            }
        }
    }
}
