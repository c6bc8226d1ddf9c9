#include "runtime/vk/op_eltwise.h"

#include "runtime/base/error.h"
#include "shaders/shaders.h"

static int make(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg, const char *name,
                const uint32_t *spv, size_t spv_size, uint32_t push_size) {
    if (!wg) wg = 256;
    if (!cvk_wg_fits(&d->info.caps, wg)) return cd_fail("%s: workgroup size %u too large", name, wg);
    uint32_t spec[1] = {wg};
    cvk_pipeline_desc desc = {.name = name,
                              .spv = spv,
                              .spv_size = spv_size,
                              .n_bindings = 3,
                              .push_size = push_size,
                              .spec = spec,
                              .n_spec = 1};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_swiglu_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    return make(p, d, cache, wg, "swiglu", cinder_spv_swiglu, cinder_spv_swiglu_size, sizeof(cvk_swiglu_push));
}

static int fits(const char *op, const cvk_view *v, uint32_t rows, uint32_t stride, uint32_t n, const char *what) {
    uint64_t need = ((uint64_t)(rows - 1) * stride + n) * sizeof(float);
    if (v->size < need)
        return cd_fail("%s: %s holds %llu bytes, needs %llu", op, what, (unsigned long long)v->size,
                       (unsigned long long)need);
    return 0;
}

static int dispatch(cvk_cmd *c, const cvk_pipeline *p, VkDescriptorSet set, const void *pc, uint64_t n,
                    const char *label) {
    uint32_t gx, gy;
    if (cvk_grid_split(label, (n + p->spec[0] - 1) / p->spec[0], &gx, &gy)) return -1;
    cvk_cmd_label_begin(c, label);
    cvk_cmd_dispatch(c, p, set, pc, gx, gy, 1);
    cvk_cmd_label_end(c);
    return 0;
}

int cvk_swiglu(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_swiglu_args *a) {
    if (a->n == 0 || a->rows == 0) return 0;
    cvk_swiglu_push pc = {a->n, a->rows, a->g_stride ? a->g_stride : a->n, a->u_stride ? a->u_stride : a->n,
                          a->h_stride ? a->h_stride : a->n};
    if (pc.g_stride < a->n || pc.u_stride < a->n || pc.h_stride < a->n) return cd_fail("swiglu: row stride below n");
    uint64_t total = (uint64_t)a->n * a->rows;
    if (total > UINT32_MAX || (uint64_t)a->rows * pc.g_stride > UINT32_MAX ||
        (uint64_t)a->rows * pc.u_stride > UINT32_MAX || (uint64_t)a->rows * pc.h_stride > UINT32_MAX)
        return cd_fail("swiglu: too many elements");
    if (fits("swiglu", &a->g, a->rows, pc.g_stride, a->n, "g") ||
        fits("swiglu", &a->u, a->rows, pc.u_stride, a->n, "u") ||
        fits("swiglu", &a->h, a->rows, pc.h_stride, a->n, "h"))
        return -1;
    cvk_view views[3] = {a->g, a->u, a->h};
    VkDescriptorSet set;
    if (cvk_descset(dp, p, views, &set)) return -1;
    return dispatch(c, p, set, &pc, total, "swiglu");
}
