#include "runtime/vk/op_head_norm_rope.h"

#include "runtime/base/error.h"
#include "shaders/shaders.h"

int cvk_head_norm_rope_pipelines(cvk_head_norm_rope_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim) {
    *p = (cvk_head_norm_rope_pipes){0};
    if (head_dim < 2 || head_dim % 2 || !cvk_wg_fits(&d->info.caps, head_dim / 2))
        return cd_fail("head_norm_rope: head_dim %u is not even or too large for a workgroup", head_dim);
    for (uint32_t kv = 0; kv < 2; kv++) {
        uint32_t spec[3] = {head_dim / 2, head_dim, kv};
        cvk_pipeline_desc desc = {.name = kv ? "head_norm_rope_kv" : "head_norm_rope",
                                  .spv = cinder_spv_head_norm_rope,
                                  .spv_size = cinder_spv_head_norm_rope_size,
                                  .n_bindings = 7,
                                  .push_size = sizeof(cvk_head_norm_rope_push),
                                  .spec = spec,
                                  .n_spec = 3};
        if (cvk_pipeline_create(kv ? &p->kv : &p->q, d, cache, &desc)) {
            cvk_head_norm_rope_pipelines_destroy(d, p);
            return -1;
        }
    }
    return 0;
}

void cvk_head_norm_rope_pipelines_destroy(cvk_device *d, cvk_head_norm_rope_pipes *p) {
    cvk_pipeline_destroy(d, &p->q);
    cvk_pipeline_destroy(d, &p->kv);
}

static int check_kv(const cvk_head_norm_rope_args *a, uint32_t stride) {
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    if (!l) return cd_fail("head_norm_rope: a pool without its layout");
    if (l->head_dim != a->table->head_dim || l->n_head_kv != a->heads)
        return cd_fail("head_norm_rope: the layout's %u heads of %u, the call's %u of %u", l->n_head_kv, l->head_dim,
                       a->heads, a->table->head_dim);
    if (a->layer >= l->n_layer) return cd_fail("head_norm_rope: layer %u of %u", a->layer, l->n_layer);
    if (pool->size < l->page_bytes || pool->part_bytes % l->page_bytes)
        return cd_fail("head_norm_rope: pool is not whole pages per part (create it with granule = page_bytes)");
    if (l->page_bytes / 4 > UINT32_MAX || pool->part_bytes / 4 > UINT32_MAX)
        return cd_fail("head_norm_rope: pool part too large for 32-bit indexing");
    uint64_t need = ((uint64_t)(a->tokens - 1) * stride + (uint64_t)a->heads * l->head_dim) * 4;
    if (a->v.size < need) return cd_fail("head_norm_rope: v holds fewer than %u tokens", a->tokens);
    if (a->pages.size < 4 || !a->table_stride) return cd_fail("head_norm_rope: empty block table");
    return 0;
}

int cvk_head_norm_rope(cvk_cmd *c, cvk_descpool *dp, const cvk_head_norm_rope_pipes *p,
                       const cvk_head_norm_rope_args *a) {
    const cvk_rope_table *t = a->table;
    if (a->tokens == 0 || a->heads == 0) return 0;
    if (!t || !t->buf.n_parts) return cd_fail("head_norm_rope: no rope table");
    uint32_t d = t->head_dim, stride = a->tok_stride ? a->tok_stride : a->heads * d;
    if (p->q.spec[1] != d) return cd_fail("head_norm_rope: pipelines for head_dim %u, table for %u", p->q.spec[1], d);
    if ((uint64_t)a->heads * d > stride)
        return cd_fail("head_norm_rope: token stride %u below heads * head_dim", stride);
    uint64_t rows = (uint64_t)a->tokens * a->heads;
    if ((uint64_t)a->tokens * stride > UINT32_MAX || rows > UINT32_MAX) return cd_fail("head_norm_rope: too many rows");
    uint64_t need = ((uint64_t)(a->tokens - 1) * stride + (uint64_t)a->heads * d) * 4;
    if (a->x.size < need) return cd_fail("head_norm_rope: x holds fewer than %u tokens", a->tokens);
    if (a->w.size < 4ull * d) return cd_fail("head_norm_rope: the norm weight holds fewer than %u floats", d);
    if (a->loc.size < 8ull * a->tokens) return cd_fail("head_norm_rope: loc holds fewer than %u pairs", a->tokens);
    if (a->pool && check_kv(a, stride)) return -1;
    uint32_t gx, gy;
    if (cvk_grid_split("head_norm_rope", rows, &gx, &gy)) return -1;
    cvk_head_norm_rope_push pc = {a->tokens, a->heads, stride, a->eps, t->shift, t->n_hi, 0, 0, 0, 0, 0, 0};
    cvk_view tab = cvk_view_whole(&t->buf);
    cvk_cmd_label_begin(c, a->pool ? "head_norm_rope_kv" : "head_norm_rope");
    uint32_t parts = a->pool ? a->pool->n_parts : 1;
    uint64_t ppp = a->pool ? a->pool->part_bytes / a->lay->page_bytes : 0;
    for (uint32_t k = 0; k < parts; k++) {
        /* Q binds x in the slots it does not read */
        cvk_view views[7] = {a->x, a->w, tab, a->loc, a->x, a->x, a->x};
        if (a->pool) {
            const kv_layout *l = a->lay;
            pc.layer = a->layer, pc.page_tokens = l->page_tokens, pc.table_stride = a->table_stride;
            pc.page0 = (uint32_t)(k * ppp), pc.pages = (uint32_t)(a->pool->parts[k].size / l->page_bytes);
            pc.page_words = (uint32_t)(l->page_bytes / 4);
            views[4] = cvk_view_part(a->pool, k), views[5] = a->v, views[6] = a->pages;
        }
        VkDescriptorSet set;
        const cvk_pipeline *pl = a->pool ? &p->kv : &p->q;
        if (cvk_descset(dp, pl, views, &set)) {
            cvk_cmd_label_end(c);
            return -1;
        }
        cvk_cmd_dispatch(c, pl, set, &pc, gx, gy, 1);
    }
    cvk_cmd_label_end(c);
    return 0;
}
