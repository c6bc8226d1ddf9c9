#include "runtime/vk/op_moe_route.h"

#include "runtime/base/error.h"
#include "shaders/shaders.h"

int cvk_moe_route_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    if (!wg) wg = 128;
    if (wg > d->info.caps.max_wg_size[0]) return cd_fail("moe_route: workgroup size %u too large", wg);
    uint32_t spec[1] = {wg};
    cvk_pipeline_desc desc = {.name = "moe_route", .spv = cinder_spv_moe_route, .spv_size = cinder_spv_moe_route_size,
                              .n_bindings = 3, .push_size = sizeof(cvk_moe_route_push), .spec = spec, .n_spec = 1};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_moe_route(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_route_args *a) {
    if (a->tokens == 0) return 0;
    uint32_t stride = a->stride ? a->stride : a->n_expert;
    if (a->n_expert == 0 || a->n_expert > CVK_MOE_MAX_EXPERT)
        return cd_fail("moe_route: %u experts (1..%d supported)", a->n_expert, CVK_MOE_MAX_EXPERT);
    if (a->k == 0 || a->k > CVK_MOE_MAX_K || a->k > a->n_expert)
        return cd_fail("moe_route: k = %u with %u experts (1..%d supported)", a->k, a->n_expert, CVK_MOE_MAX_K);
    if (stride < a->n_expert) return cd_fail("moe_route: stride below n_expert");
    if ((uint64_t)a->tokens * stride > UINT32_MAX) return cd_fail("moe_route: too many tokens");
    uint64_t need = ((uint64_t)(a->tokens - 1) * stride + a->n_expert) * 4, out = 4ull * a->tokens * a->k;
    if (a->logits.size < need || a->ids.size < out || a->weights.size < out)
        return cd_fail("moe_route: logits needs %llu bytes, ids and weights %llu each", (unsigned long long)need,
                       (unsigned long long)out);
    cvk_moe_route_push pc = {a->n_expert, a->k, a->tokens, stride, !a->no_renorm};
    cvk_view views[3] = {a->logits, a->ids, a->weights};
    VkDescriptorSet set;
    if (cvk_descset(dp, p, views, &set)) return -1;
    uint32_t gx = a->tokens < 65535 ? a->tokens : 65535, gy = (a->tokens + 65534) / 65535;
    cvk_cmd_label_begin(c, "moe_route");
    cvk_cmd_dispatch(c, p, set, &pc, gx, gy, 1);
    cvk_cmd_label_end(c);
    return 0;
}
