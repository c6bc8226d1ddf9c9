#include "runtime/vk/op_attn_decode.h"

#include <math.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"
#include "shaders/shaders.h"

int cvk_attn_decode_pipeline(cvk_attn_decode_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                             uint32_t wg) {
    *p = (cvk_attn_decode_pipes){0};
    if (!wg) wg = 64;
    if (wg < 32 || wg > 1024 || (wg & (wg - 1)) || !cvk_wg_fits(&d->info.caps, wg))
        return cd_fail("attn_decode: workgroup size %u is not a power of two in 32..1024 within the device limit", wg);
    if (!head_dim || head_dim % 2 || head_dim > 512) return cd_fail("attn_decode: head_dim %u unsupported", head_dim);
    uint32_t spec[2] = {wg, head_dim};
    cvk_pipeline_desc sd = {.name = "attn_decode", .spv = cinder_spv_attn_decode,
                            .spv_size = cinder_spv_attn_decode_size, .n_bindings = 5,
                            .push_size = sizeof(cvk_attn_decode_push), .spec = spec, .n_spec = 2};
    if (cvk_pipeline_create(&p->split, d, cache, &sd)) return -1;
    uint32_t cspec[2] = {head_dim < 64 ? 32 : 64, head_dim};
    cvk_pipeline_desc cd = {.name = "attn_decode_combine", .spv = cinder_spv_attn_decode_combine,
                            .spv_size = cinder_spv_attn_decode_combine_size, .n_bindings = 2,
                            .push_size = sizeof(cvk_attn_combine_push), .spec = cspec, .n_spec = 2};
    if (cvk_pipeline_create(&p->combine, d, cache, &cd)) {
        cvk_pipeline_destroy(d, &p->split);
        return -1;
    }
    p->head_dim = head_dim;
    return 0;
}

void cvk_attn_decode_pipeline_destroy(cvk_device *d, cvk_attn_decode_pipes *p) {
    cvk_pipeline_destroy(d, &p->split);
    cvk_pipeline_destroy(d, &p->combine);
    *p = (cvk_attn_decode_pipes){0};
}

uint64_t cvk_attn_decode_partials_bytes(uint32_t n_seq, uint32_t n_head, uint32_t n_split, uint32_t n_parts,
                                        uint32_t head_dim) {
    return (uint64_t)n_seq * n_head * (n_split ? n_split : 1) * (n_parts ? n_parts : 1) * (head_dim + 2) * 4;
}

uint32_t cvk_attn_decode_splits(uint32_t max_len, uint32_t page_tokens) {
    uint32_t pages = (uint32_t)(((uint64_t)max_len + page_tokens - 1) / (page_tokens ? page_tokens : 1));
    uint32_t per = (512 + page_tokens - 1) / (page_tokens ? page_tokens : 1); /* pages per split */
    uint32_t n = (pages + per - 1) / (per ? per : 1);
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

static int check(const cvk_attn_decode_pipes *p, const cvk_attn_decode_args *a, uint32_t qs, uint32_t os,
                 uint32_t n_split) {
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    uint32_t row = a->n_head * l->head_dim;
    if (p->head_dim != l->head_dim)
        return cd_fail("attn_decode: pipelines built for head_dim %u, layout has %u", p->head_dim, l->head_dim);
    if (!a->n_head || a->n_head % l->n_head_kv)
        return cd_fail("attn_decode: %u query heads are not a multiple of %u kv heads", a->n_head, l->n_head_kv);
    if (a->layer >= l->n_layer) return cd_fail("attn_decode: layer %u of %u", a->layer, l->n_layer);
    if (a->n_seq > 65535 || a->n_head > 65535 || n_split > 65535) return cd_fail("attn_decode: grid too large");
    if (pool->size < l->page_bytes || pool->part_bytes % l->page_bytes)
        return cd_fail("attn_decode: pool is not whole pages per part (create it with granule = page_bytes)");
    if (pool->part_bytes / 4 > UINT32_MAX) return cd_fail("attn_decode: pool part too large for 32-bit indexing");
    if (qs < row || os < row) return cd_fail("attn_decode: q/out stride below n_head * head_dim");
    if (a->q.size < ((uint64_t)(a->n_seq - 1) * qs + row) * 4 || a->out.size < ((uint64_t)(a->n_seq - 1) * os + row) * 4)
        return cd_fail("attn_decode: q or out holds fewer than %u sequences", a->n_seq);
    if (a->seq_lens.size < 4ull * a->n_seq) return cd_fail("attn_decode: seq_lens holds fewer than %u", a->n_seq);
    if (!a->table_stride || a->table.size < 4ull * a->table_stride * (a->n_seq - 1) + 4)
        return cd_fail("attn_decode: block table holds fewer than %u rows", a->n_seq);
    uint64_t need = cvk_attn_decode_partials_bytes(a->n_seq, a->n_head, n_split, pool->n_parts, l->head_dim);
    if (a->partials.size < need)
        return cd_fail("attn_decode: partials hold %llu bytes, needs %llu", (unsigned long long)a->partials.size,
                       (unsigned long long)need);
    return 0;
}

int cvk_attn_decode(cvk_cmd *c, cvk_descpool *dp, const cvk_attn_decode_pipes *p, const cvk_attn_decode_args *a) {
    if (a->n_seq == 0 || a->n_head == 0) return 0;
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    uint32_t row = a->n_head * l->head_dim, n_split = a->n_split ? a->n_split : 1;
    uint32_t qs = a->q_stride ? a->q_stride : row, os = a->out_stride ? a->out_stride : row;
    if (check(p, a, qs, os, n_split)) return -1;
    float scale = a->scale != 0 ? a->scale : (float)(1.0 / sqrt((double)l->head_dim));
    uint64_t ppp = pool->part_bytes / l->page_bytes;
    cvk_cmd_label_begin(c, "attn_decode");
    for (uint32_t k = 0; k < pool->n_parts; k++) {
        cvk_attn_decode_push pc = {a->n_head, l->n_head_kv, l->page_tokens, a->layer, a->table_stride, qs,
                                   (uint32_t)(k * ppp), (uint32_t)(pool->parts[k].size / l->page_bytes),
                                   (uint32_t)(l->page_bytes / 4), n_split, k, pool->n_parts, scale};
        cvk_view views[5] = {cvk_view_part(pool, k), a->q, a->table, a->seq_lens, a->partials};
        VkDescriptorSet set;
        if (cvk_descset(dp, &p->split, views, &set)) { cvk_cmd_label_end(c); return -1; }
        cvk_cmd_dispatch(c, &p->split, set, &pc, a->n_head, n_split, a->n_seq);
    }
    cvk_barrier_compute_to_compute(c->cb);
    cvk_attn_combine_push cp = {a->n_head, n_split * pool->n_parts, os};
    cvk_view cviews[2] = {a->partials, a->out};
    VkDescriptorSet cset;
    if (cvk_descset(dp, &p->combine, cviews, &cset)) { cvk_cmd_label_end(c); return -1; }
    cvk_cmd_dispatch(c, &p->combine, cset, &cp, a->n_head, a->n_seq, 1);
    cvk_cmd_label_end(c);
    return 0;
}
