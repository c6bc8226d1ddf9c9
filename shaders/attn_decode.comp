#version 450
// Decode paged attention, split pass (flash-decoding). One query token per sequence.
// Workgroup (x = query head h, y = split s, z = sequence q) covers pages
// [s * pps, (s + 1) * pps) of sequence q's block table, pps = ceil(ceil(len / page_tokens) / n_split),
// len = seq_lens[q] (read on the device, so a recorded step replays as lengths grow). It walks
// its tokens in tiles of WG, one token per invocation for the score
//   score = dot(q_h * scale, K[t][kv head h / (n_head / n_head_kv)])
// and keeps an online softmax (running max m, running sum l, acc[d] = sum p_t * V[t][d]); each
// invocation owns pairs of output dims for the V sum, reading neighbouring halves of one V row.
// It writes the partial {m, l, acc[HEAD_DIM]} to partials[((q * n_head + h) * n_parts + part)
// * n_split + s]; attn_decode_combine.comp merges them.
// The pool may be split into parts (runtime/base/kv_layout.h): the host dispatches once per part and
// each dispatch counts only pages its part holds, so a part is one more split of the split-K.
// Reductions go through shared memory in a fixed order: results are deterministic.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint HEAD_DIM = 128;
#define NEG_INF uintBitsToFloat(0xff800000u) // -infinity
const uint HALF = HEAD_DIM / 2;
const uint NP = (HALF + WG - 1) / WG; // dim pairs per invocation

layout(binding = 0) readonly buffer Pool { uint pool[]; };  // one part, fp16 pairs
layout(binding = 1) readonly buffer Q { float qv[]; };       // [seq][n_head][HEAD_DIM] (q_stride per seq)
layout(binding = 2) readonly buffer Table { uint table[]; }; // [seq][table_stride] page ids
layout(binding = 3) readonly buffer Lens { uint seq_lens[]; };
layout(binding = 4) writeonly buffer Partials { float part_out[]; };

// mirrors cvk_attn_decode_push in runtime/vk/op_attn_decode.h
layout(push_constant) uniform Push {
    uint n_head;
    uint n_head_kv;
    uint page_tokens;
    uint layer;
    uint table_stride; // uints between block-table rows
    uint q_stride;     // floats between sequences of q
    uint page0;        // first page in the bound part
    uint pages;        // pages in the bound part
    uint page_words;   // uints per page
    uint n_split;
    uint part;         // index of the bound part
    uint n_parts;
    float scale;
} pc;

shared float qs[HEAD_DIM];
shared float red[WG];
shared float ps[WG];
shared uint rows[WG]; // V row (uint index) of each token of the tile; ~0u = none

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint h = gl_WorkGroupID.x, s = gl_WorkGroupID.y, q = gl_WorkGroupID.z;
    uint kvh = h / (pc.n_head / pc.n_head_kv);
    uint len = seq_lens[q];
    uint n_pg = (len + pc.page_tokens - 1u) / pc.page_tokens;
    uint pps = (n_pg + pc.n_split - 1u) / pc.n_split;
    uint t0 = s * pps * pc.page_tokens, t1 = min(len, (s + 1u) * pps * pc.page_tokens);

    for (uint d = tid; d < HEAD_DIM; d += WG) qs[d] = qv[q * pc.q_stride + h * HEAD_DIM + d] * pc.scale;
    barrier();

    uint k_off = ((pc.layer * 2u) * pc.n_head_kv + kvh) * pc.page_tokens * HALF;
    uint v_off = ((pc.layer * 2u + 1u) * pc.n_head_kv + kvh) * pc.page_tokens * HALF;
    float m = NEG_INF, l = 0.0;
    vec2 acc[NP];
    for (uint i = 0; i < NP; i++) acc[i] = vec2(0.0);

    for (uint base = t0; base < t1; base += WG) {
        uint t = base + tid;
        float sc = NEG_INF;
        uint vrow = ~0u;
        if (t < t1) {
            uint page = table[q * pc.table_stride + t / pc.page_tokens];
            if (page >= pc.page0 && page - pc.page0 < pc.pages) {
                uint row = (page - pc.page0) * pc.page_words + (t % pc.page_tokens) * HALF;
                uint kr = row + k_off;
                float dot_ = 0.0;
                for (uint w = 0; w < HALF; w++) {
                    vec2 kk = unpackHalf2x16(pool[kr + w]);
                    dot_ += qs[2u * w] * kk.x + qs[2u * w + 1u] * kk.y;
                }
                sc = dot_;
                vrow = row + v_off;
            }
        }
        rows[tid] = vrow;
        red[tid] = sc;
        barrier();
        for (uint st = WG / 2u; st > 0u; st >>= 1u) {
            if (tid < st) red[tid] = max(red[tid], red[tid + st]);
            barrier();
        }
        float tmax = red[0];
        barrier();
        if (tmax == NEG_INF) continue; // nothing of this tile in this part (uniform)
        float m_new = max(m, tmax);
        float alpha = exp(m - m_new); // 0 on the first tile (m = -inf)
        float p = vrow == ~0u ? 0.0 : exp(sc - m_new);
        ps[tid] = p;
        red[tid] = p;
        barrier();
        for (uint st = WG / 2u; st > 0u; st >>= 1u) {
            if (tid < st) red[tid] += red[tid + st];
            barrier();
        }
        l = l * alpha + red[0];
        m = m_new;
        uint n_t = min(WG, t1 - base);
        for (uint i = 0; i < NP; i++) {
            uint w = tid + i * WG;
            if (w >= HALF) break;
            vec2 a = acc[i] * alpha;
            for (uint j = 0; j < n_t; j++) {
                uint vr = rows[j];
                if (vr == ~0u) continue;
                a += ps[j] * unpackHalf2x16(pool[vr + w]);
            }
            acc[i] = a;
        }
        barrier(); // before the next tile overwrites rows, ps, red
    }

    uint o = (((q * pc.n_head + h) * pc.n_parts + pc.part) * pc.n_split + s) * (HEAD_DIM + 2u);
    if (tid == 0u) {
        part_out[o] = m;
        part_out[o + 1u] = l;
    }
    for (uint i = 0; i < NP; i++) {
        uint w = tid + i * WG;
        if (w < HALF) {
            part_out[o + 2u + 2u * w] = acc[i].x;
            part_out[o + 3u + 2u * w] = acc[i].y;
        }
    }
}
