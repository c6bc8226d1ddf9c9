#include "runtime/vk/op_kv_write.h"

#include "runtime/base/error.h"
#include "shaders/shaders.h"

int cvk_kv_write_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim, uint32_t wg) {
    if (!wg) wg = 64;
    if (wg > d->info.caps.max_wg_size[0]) return cd_fail("kv_write: workgroup size %u too large", wg);
    if (!head_dim || head_dim % 2) return cd_fail("kv_write: head_dim %u is not even", head_dim);
    uint32_t spec[2] = {wg, head_dim};
    cvk_pipeline_desc desc = {.name = "kv_write", .spv = cinder_spv_kv_write, .spv_size = cinder_spv_kv_write_size,
                              .n_bindings = 5, .push_size = sizeof(cvk_kv_write_push), .spec = spec, .n_spec = 2};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_kv_write(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_kv_write_args *a) {
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    if (a->n_tokens == 0) return 0;
    uint32_t row = l->n_head_kv * l->head_dim;
    uint32_t ks = a->k_stride ? a->k_stride : row, vs = a->v_stride ? a->v_stride : row;
    if (p->n_spec < 2 || p->spec[1] != l->head_dim)
        return cd_fail("kv_write: pipeline built for head_dim %u, layout has %u", p->n_spec > 1 ? p->spec[1] : 0,
                       l->head_dim);
    if (a->layer >= l->n_layer) return cd_fail("kv_write: layer %u of %u", a->layer, l->n_layer);
    if (ks < row || vs < row) return cd_fail("kv_write: k/v stride below n_head_kv * head_dim");
    if (pool->size < l->page_bytes || pool->part_bytes % l->page_bytes)
        return cd_fail("kv_write: pool is not whole pages per part (create it with granule = page_bytes)");
    if (l->page_bytes / 4 > UINT32_MAX || pool->part_bytes / 4 > UINT32_MAX)
        return cd_fail("kv_write: pool part too large for 32-bit indexing");
    if (a->k.size < ((uint64_t)(a->n_tokens - 1) * ks + row) * 4 ||
        a->v.size < ((uint64_t)(a->n_tokens - 1) * vs + row) * 4)
        return cd_fail("kv_write: k or v holds fewer than %u tokens", a->n_tokens);
    if (a->loc.size < 8ull * a->n_tokens) return cd_fail("kv_write: loc holds fewer than %u pairs", a->n_tokens);
    if (a->table.size < 4 || !a->table_stride) return cd_fail("kv_write: empty block table");
    uint64_t ppp = pool->part_bytes / l->page_bytes;
    uint32_t gx = a->n_tokens < 65535 ? a->n_tokens : 65535, gy = (a->n_tokens + 65534) / 65535;
    cvk_cmd_label_begin(c, "kv_write");
    for (uint32_t k = 0; k < pool->n_parts; k++) {
        cvk_kv_write_push pc = {a->n_tokens, a->layer, l->n_head_kv, l->page_tokens, a->table_stride,
                                (uint32_t)(k * ppp), (uint32_t)(pool->parts[k].size / l->page_bytes),
                                (uint32_t)(l->page_bytes / 4), ks, vs};
        cvk_view views[5] = {cvk_view_part(pool, k), a->k, a->v, a->table, a->loc};
        VkDescriptorSet set;
        if (cvk_descset(dp, p, views, &set)) { cvk_cmd_label_end(c); return -1; }
        cvk_cmd_dispatch(c, p, set, &pc, gx, gy, 1);
    }
    cvk_cmd_label_end(c);
    return 0;
}
