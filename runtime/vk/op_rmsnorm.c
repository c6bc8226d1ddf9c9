#include "runtime/vk/op_rmsnorm.h"

#include "runtime/base/error.h"
#include "shaders/shaders.h"

int cvk_rmsnorm_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    if (!wg) wg = 256;
    if (!cvk_wg_fits(&d->info.caps, wg) || (wg & (wg - 1)))
        return cd_fail("rmsnorm: workgroup size %u is not a power of two within the device limit", wg);
    uint32_t spec[1] = {wg};
    cvk_pipeline_desc desc = {.name = "rmsnorm",
                              .spv = cinder_spv_rmsnorm,
                              .spv_size = cinder_spv_rmsnorm_size,
                              .n_bindings = 3,
                              .push_size = sizeof(cvk_rmsnorm_push),
                              .spec = spec,
                              .n_spec = 1};
    return cvk_pipeline_create(p, d, cache, &desc);
}

static int fits(const cvk_view *v, uint32_t rows, uint32_t stride, uint32_t n, const char *what) {
    uint64_t need = ((uint64_t)(rows - 1) * stride + n) * sizeof(float);
    if (v->size < need)
        return cd_fail("rmsnorm: %s holds %llu bytes, needs %llu", what, (unsigned long long)v->size,
                       (unsigned long long)need);
    return 0;
}

int cvk_rmsnorm(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_rmsnorm_args *a) {
    cvk_rmsnorm_push pc = {a->n, a->rows, a->x_stride ? a->x_stride : a->n, a->y_stride ? a->y_stride : a->n, a->eps};
    if (a->n == 0 || a->rows == 0) return 0;
    if (pc.x_stride < a->n || pc.y_stride < a->n) return cd_fail("rmsnorm: row stride below n");
    if (fits(&a->x, a->rows, pc.x_stride, a->n, "x") || fits(&a->y, a->rows, pc.y_stride, a->n, "y") ||
        fits(&a->w, 1, 0, a->n, "w"))
        return -1;
    cvk_view views[3] = {a->x, a->w, a->y};
    VkDescriptorSet set;
    uint32_t gx, gy;
    if (cvk_grid_split("rmsnorm", a->rows, &gx, &gy) || cvk_descset(dp, p, views, &set)) return -1;
    cvk_cmd_label_begin(c, "rmsnorm");
    cvk_cmd_dispatch(c, p, set, &pc, gx, gy, 1);
    cvk_cmd_label_end(c);
    return 0;
}
