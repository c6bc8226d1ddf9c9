#include "runtime/vk/op_attn_prefill.h"

#include <math.h>

#include "runtime/base/error.h"
#include "runtime/vk/op_attn_decode.h"
#include "runtime/vk/vk_barrier.h"
#include "shaders/shaders.h"

static int pow2(uint32_t x) { return x && !(x & (x - 1)); }

/* subgroupShuffleXor in compute shaders (every device cinder targets has it; checked anyway) */
static int has_shuffle(const cvk_device *d) {
    VkPhysicalDeviceSubgroupProperties sp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sp};
    vkGetPhysicalDeviceProperties2(d->info.phys, &p2);
    return (sp.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sp.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
}

int cvk_attn_prefill_pipeline_cfg(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache,
                                  uint32_t head_dim, const cvk_attn_prefill_cfg *cfg) {
    *p = (cvk_attn_prefill_pipes){0};
    const cvk_caps *caps = &d->info.caps;
    bool cpu = d->info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (!head_dim || head_dim % 2 || head_dim > 512) return cd_fail("attn_prefill: head_dim %u unsupported", head_dim);
    if (!has_shuffle(d)) return cd_fail("attn_prefill: the device has no subgroup shuffle in compute shaders");
    uint32_t wg = cfg && cfg->wg ? cfg->wg : cpu ? 64 : 256;
    if (wg > caps->max_wg_size[0] && !(cfg && cfg->wg)) wg = caps->max_wg_size[0];
    if (!pow2(wg) || wg > 1024 || wg > caps->max_wg_size[0] || wg > caps->max_wg_invocations)
        return cd_fail("attn_prefill: workgroup size %u is not a power of two within the device limit", wg);
    uint32_t lpr = cfg && cfg->lanes_per_row ? cfg->lanes_per_row : cpu ? 1 : 4;
    if (!(cfg && cfg->lanes_per_row))
        while (lpr > 1 && (head_dim % lpr || lpr > caps->min_subgroup_size || lpr > wg)) lpr /= 2;
    if (!pow2(lpr) || head_dim % lpr || lpr > caps->min_subgroup_size || lpr > wg)
        return cd_fail("attn_prefill: %u lanes per row must be a power of two dividing head_dim %u, at most the "
                       "subgroup size %u and the workgroup size %u", lpr, head_dim, caps->min_subgroup_size, wg);
    uint32_t kt = cfg && cfg->kv_tile ? cfg->kv_tile : cpu ? 8 : 16; /* lavapipe: 8 measured faster */
    if (!(cfg && cfg->kv_tile))
        while (kt > 1 && (2ull * kt * head_dim * 4 > 16384 || kt > wg)) kt /= 2;
    uint64_t shared = 2ull * kt * head_dim * 4 + 2ull * kt * 4 + 2ull * (wg / lpr) * 4;
    if (kt < 1 || kt > wg || shared > caps->max_shared)
        return cd_fail("attn_prefill: K/V tile of %u positions (%llu bytes of shared memory) does not fit "
                       "(workgroup %u, limit %u bytes)", kt, (unsigned long long)shared, wg, caps->max_shared);
    uint32_t spec[4] = {wg, head_dim, lpr, kt};
    cvk_pipeline_desc td = {.name = "attn_prefill", .spv = cinder_spv_attn_prefill,
                            .spv_size = cinder_spv_attn_prefill_size, .n_bindings = 6,
                            .push_size = sizeof(cvk_attn_prefill_push), .spec = spec, .n_spec = 4};
    if (cvk_pipeline_create(&p->tile, d, cache, &td)) return -1;
    uint32_t cspec[2] = {head_dim < 64 ? 32 : 64, head_dim};
    cvk_pipeline_desc cd = {.name = "attn_decode_combine", .spv = cinder_spv_attn_decode_combine,
                            .spv_size = cinder_spv_attn_decode_combine_size, .n_bindings = 2,
                            .push_size = sizeof(cvk_attn_combine_push), .spec = cspec, .n_spec = 2};
    if (cvk_pipeline_create(&p->combine, d, cache, &cd)) {
        cvk_pipeline_destroy(d, &p->tile);
        return -1;
    }
    p->head_dim = head_dim, p->wg = wg, p->lanes_per_row = lpr, p->kv_tile = kt;
    return 0;
}

int cvk_attn_prefill_pipeline(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                              uint32_t wg_or_0) {
    cvk_attn_prefill_cfg cfg = {.wg = wg_or_0};
    return cvk_attn_prefill_pipeline_cfg(p, d, cache, head_dim, &cfg);
}

void cvk_attn_prefill_pipeline_destroy(cvk_device *d, cvk_attn_prefill_pipes *p) {
    cvk_pipeline_destroy(d, &p->tile);
    cvk_pipeline_destroy(d, &p->combine);
    *p = (cvk_attn_prefill_pipes){0};
}

uint64_t cvk_attn_prefill_partials_bytes(uint32_t n_tokens, uint32_t n_head, uint32_t n_parts, uint32_t head_dim) {
    if (n_parts <= 1) return 0;
    return (uint64_t)n_tokens * n_head * n_parts * (head_dim + 2) * 4;
}

static int check(const cvk_attn_prefill_pipes *p, const cvk_attn_prefill_args *a, uint32_t qs, uint32_t os,
                 uint32_t n_x) {
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    uint32_t row = a->n_head * l->head_dim;
    if (p->head_dim != l->head_dim)
        return cd_fail("attn_prefill: pipelines built for head_dim %u, layout has %u", p->head_dim, l->head_dim);
    if (a->n_head % l->n_head_kv)
        return cd_fail("attn_prefill: %u query heads are not a multiple of %u kv heads", a->n_head, l->n_head_kv);
    if (a->layer >= l->n_layer) return cd_fail("attn_prefill: layer %u of %u", a->layer, l->n_layer);
    if (n_x > 65535 || (uint64_t)l->n_head_kv * a->n_head > 65535 || a->n_head > 65535 ||
        (pool->n_parts > 1 && a->n_tokens > 65535))
        return cd_fail("attn_prefill: grid too large (%u tokens, %u heads)", a->n_tokens, a->n_head);
    if (pool->size < l->page_bytes || pool->part_bytes % l->page_bytes)
        return cd_fail("attn_prefill: pool is not whole pages per part (create it with granule = page_bytes)");
    if (pool->part_bytes / 4 > UINT32_MAX) return cd_fail("attn_prefill: pool part too large for 32-bit indexing");
    if (qs < row || os < row) return cd_fail("attn_prefill: q/out stride below n_head * head_dim");
    if ((uint64_t)(a->n_tokens - 1) * (qs > os ? qs : os) + row > UINT32_MAX)
        return cd_fail("attn_prefill: q/out too large for 32-bit indexing");
    if (a->q.size < ((uint64_t)(a->n_tokens - 1) * qs + row) * 4 ||
        a->out.size < ((uint64_t)(a->n_tokens - 1) * os + row) * 4)
        return cd_fail("attn_prefill: q or out holds fewer than %u tokens", a->n_tokens);
    if (a->loc.size < 8ull * a->n_tokens) return cd_fail("attn_prefill: loc holds fewer than %u tokens", a->n_tokens);
    if (!a->table_stride || a->table.size < 4ull * a->table_stride)
        return cd_fail("attn_prefill: block table holds no row of %u pages", a->table_stride);
    uint64_t need = cvk_attn_prefill_partials_bytes(a->n_tokens, a->n_head, pool->n_parts, l->head_dim);
    if (a->partials.size < need)
        return cd_fail("attn_prefill: partials hold %llu bytes, needs %llu", (unsigned long long)a->partials.size,
                       (unsigned long long)need);
    return 0;
}

int cvk_attn_prefill(cvk_cmd *c, cvk_descpool *dp, const cvk_attn_prefill_pipes *p, const cvk_attn_prefill_args *a) {
    if (a->n_tokens == 0 || a->n_head == 0) return 0;
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    uint32_t row = a->n_head * l->head_dim;
    uint32_t qs = a->q_stride ? a->q_stride : row, os = a->out_stride ? a->out_stride : row;
    /* a workgroup: ROWS query rows = tpw tokens x hpw heads of one kv head's group */
    uint32_t rows = p->wg / p->lanes_per_row, group = l->n_head_kv ? a->n_head / l->n_head_kv : 1;
    uint32_t hpw = group < rows ? group : rows, tpw = rows / (hpw ? hpw : 1);
    uint32_t chunks = (group + hpw - 1) / (hpw ? hpw : 1), n_x = (a->n_tokens + tpw - 1) / (tpw ? tpw : 1);
    if (check(p, a, qs, os, n_x)) return -1;
    uint64_t lim = (uint64_t)a->table_stride * l->page_tokens;
    if (a->max_len && a->max_len < lim) lim = a->max_len;
    float scale = a->scale != 0 ? a->scale : (float)(1.0 / sqrt((double)l->head_dim));
    uint64_t ppp = pool->part_bytes / l->page_bytes;
    uint64_t table_rows = a->table.size / 4 / a->table_stride;
    /* one part: the kernel writes out directly and never touches partials; bind out there */
    cvk_view partials = pool->n_parts > 1 ? a->partials : a->out;
    cvk_cmd_label_begin(c, "attn_prefill");
    for (uint32_t k = 0; k < pool->n_parts; k++) {
        cvk_attn_prefill_push pc = {a->n_tokens, a->n_head, l->n_head_kv, l->page_tokens, a->layer, a->table_stride,
                                    (uint32_t)(table_rows > UINT32_MAX ? UINT32_MAX : table_rows),
                                    (uint32_t)(lim > UINT32_MAX ? UINT32_MAX : lim), qs, os, (uint32_t)(k * ppp),
                                    (uint32_t)(pool->parts[k].size / l->page_bytes), (uint32_t)(l->page_bytes / 4),
                                    k, pool->n_parts, hpw, tpw, scale};
        cvk_view views[6] = {cvk_view_part(pool, k), a->q, a->table, a->loc, partials, a->out};
        VkDescriptorSet set;
        if (cvk_descset(dp, &p->tile, views, &set)) { cvk_cmd_label_end(c); return -1; }
        cvk_cmd_dispatch(c, &p->tile, set, &pc, n_x, l->n_head_kv * chunks, 1);
    }
    if (pool->n_parts > 1) {
        cvk_barrier_compute_to_compute(c->cb);
        cvk_attn_combine_push cp = {a->n_head, pool->n_parts, os};
        cvk_view cviews[2] = {a->partials, a->out};
        VkDescriptorSet cset;
        if (cvk_descset(dp, &p->combine, cviews, &cset)) { cvk_cmd_label_end(c); return -1; }
        cvk_cmd_dispatch(c, &p->combine, cset, &cp, a->n_head, a->n_tokens, 1);
    }
    cvk_cmd_label_end(c);
    return 0;
}
