#include "runtime/vk/op_moe_combine.h"

#include <stdbool.h>

#include "runtime/base/error.h"
#include "shaders/shaders.h"

int cvk_moe_combine_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    if (!wg) wg = 256;
    if (!cvk_wg_fits(&d->info.caps, wg) || (wg & (wg - 1)))
        return cd_fail("moe_combine: workgroup size %u is not a power of two within the device limit", wg);
    uint32_t spec[1] = {wg};
    cvk_pipeline_desc desc = {.name = "moe_combine",
                              .spv = cinder_spv_moe_combine,
                              .spv_size = cinder_spv_moe_combine_size,
                              .n_bindings = 5,
                              .push_size = sizeof(cvk_moe_combine_push),
                              .spec = spec,
                              .n_spec = 1};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_moe_combine(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_combine_args *a) {
    if (a->n == 0 || a->rows == 0) return 0;
    if (a->k == 0) return cd_fail("moe_combine: k is 0");
    uint32_t es = a->e_stride ? a->e_stride : a->n;
    if (es < a->n) return cd_fail("moe_combine: e_stride %u below n %u", es, a->n);
    uint64_t total = (uint64_t)a->n * a->rows, pairs = (uint64_t)a->rows * a->k;
    if (total > UINT32_MAX || pairs * es > UINT32_MAX) return cd_fail("moe_combine: too many elements");
    if (a->x.size < total * 4)
        return cd_fail("moe_combine: x holds %llu bytes, needs %llu", (unsigned long long)a->x.size,
                       (unsigned long long)(total * 4));
    if (a->e.size < ((pairs - 1) * es + a->n) * 4) return cd_fail("moe_combine: e too small");
    if (a->w.size < pairs * 4) return cd_fail("moe_combine: w too small");
    bool norm = a->norm_w.buf != NULL;
    if (norm && (a->norm_w.size < (uint64_t)a->n * 4 || a->y.size < total * 4))
        return cd_fail("moe_combine: norm weights or y smaller than their rows");
    cvk_moe_combine_push pc = {a->n, a->k, a->rows, es, norm, a->eps};
    /* without the norm its bindings get x: bound, never read or written */
    cvk_view views[5] = {a->x, a->e, a->w, norm ? a->norm_w : a->x, norm ? a->y : a->x};
    VkDescriptorSet set;
    uint32_t gx, gy;
    if (cvk_grid_split("moe_combine", a->rows, &gx, &gy) || cvk_descset(dp, p, views, &set)) return -1;
    cvk_cmd_label_begin(c, "moe_combine");
    cvk_cmd_dispatch(c, p, set, &pc, gx, gy, 1);
    cvk_cmd_label_end(c);
    return 0;
}
