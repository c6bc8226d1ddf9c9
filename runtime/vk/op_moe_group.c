#include "runtime/vk/op_moe_group.h"

#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"
#include "shaders/shaders.h"

int cvk_moe_group_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    if (!wg) wg = 256;
    if (wg % 32 || wg > 512) return cd_fail("moe_group: workgroup size %u (a multiple of 32 up to 512)", wg);
    if (!cvk_wg_fits(&d->info.caps, wg)) return cd_fail("moe_group: workgroup size %u too large for the device", wg);
    uint64_t shared = 4ull * CVK_MOE_MAX_EXPERT * (3 + wg / 32) + 4 + 16ull * wg; /* part[] as uvec3, 16-byte padded */
    if (shared > d->info.caps.max_shared)
        return cd_fail("moe_group: needs %llu bytes of shared memory, the device has %u", (unsigned long long)shared,
                       d->info.caps.max_shared);
    /* routing keeps a token's logits in registers: MAX_EXPERT over the smallest subgroup */
    uint32_t sg = d->info.caps.min_subgroup_size ? d->info.caps.min_subgroup_size : d->info.caps.subgroup_size;
    if (sg < 4) return cd_fail("moe_group: subgroups of %u invocations (4 or more needed)", sg);
    uint32_t spec[2] = {wg, (CVK_MOE_MAX_EXPERT + sg - 1) / sg};
    cvk_pipeline_desc desc = {.name = "moe_group",
                              .spv = cinder_spv_moe_group,
                              .spv_size = cinder_spv_moe_group_size,
                              .n_bindings = 8,
                              .push_size = sizeof(cvk_moe_group_push),
                              .spec = spec,
                              .n_spec = 2};
    return cvk_pipeline_create(p, d, cache, &desc);
}

uint32_t cvk_moe_group_cap(uint32_t n_tokens, uint32_t k, uint32_t n_expert, uint32_t tile0, uint32_t tile1) {
    uint64_t pairs = (uint64_t)n_tokens * k, tile = tile1 && tile1 < tile0 ? tile1 : tile0;
    if (!tile) return 0;
    uint64_t cap = (pairs + tile - 1) / tile + (n_expert < pairs ? n_expert : pairs);
    return cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
}

static bool route_in_grid(const cvk_moe_group_args *a) {
    if (a->route_mode == CVK_MOE_ROUTE_AUTO) return a->n_tokens > CVK_MOE_ROUTE_GRID_TOKENS;
    return a->route_mode == CVK_MOE_ROUTE_GRID;
}

int cvk_moe_group(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_moe_group_args *a) {
    if (a->n_tokens == 0) return 0;
    if (a->n_expert == 0 || a->n_expert > CVK_MOE_MAX_EXPERT)
        return cd_fail("moe_group: %u experts (1..%d supported)", a->n_expert, CVK_MOE_MAX_EXPERT);
    if (a->k == 0) return cd_fail("moe_group: k is 0");
    uint64_t pairs = (uint64_t)a->n_tokens * a->k;
    if (pairs > INT32_MAX) return cd_fail("moe_group: %llu pairs exceed int32 lists", (unsigned long long)pairs);
    if (a->ids.size < pairs * 4 || a->gather.size < pairs * 4 || a->scatter.size < pairs * 4)
        return cd_fail("moe_group: ids, gather and scatter need %llu bytes each", (unsigned long long)pairs * 4);
    if (a->groups.size < 8ull * a->n_expert) return cd_fail("moe_group: groups needs %llu bytes", 8ull * a->n_expert);
    cvk_moe_group_push pc = {.n_expert = a->n_expert, .n_tokens = a->n_tokens, .k = a->k};
    cvk_view logits = a->groups, weights = a->groups; /* bound, never read or written without routing */
    if (a->logits.buf) {
        uint32_t stride = a->stride ? a->stride : a->n_expert;
        if (a->k > CVK_MOE_MAX_K || a->k > a->n_expert)
            return cd_fail("moe_group: routing k = %u with %u experts (1..%d supported)", a->k, a->n_expert,
                           CVK_MOE_MAX_K);
        if (stride < a->n_expert) return cd_fail("moe_group: logits stride below n_expert");
        if ((unsigned)a->route_mode > CVK_MOE_ROUTE_GRID)
            return cd_fail("moe_group: route mode %d", (int)a->route_mode);
        if ((uint64_t)a->n_tokens * stride > UINT32_MAX) return cd_fail("moe_group: too many tokens' logits");
        uint64_t need = ((uint64_t)(a->n_tokens - 1) * stride + a->n_expert) * 4;
        if (a->logits.size < need || a->weights.size < pairs * 4)
            return cd_fail("moe_group: routing needs %llu bytes of logits and %llu of weights",
                           (unsigned long long)need, (unsigned long long)pairs * 4);
        pc.route = 1, pc.renorm = !a->no_renorm, pc.stride = stride;
        logits = a->logits, weights = a->weights;
    }
    cvk_view items = a->groups, dispatch = a->groups; /* bound, never written without lists */
    if (a->tile0) {
        if (!a->tile1) return cd_fail("moe_group: list 1 needs a tile");
        uint32_t need = cvk_moe_group_cap(a->n_tokens, a->k, a->n_expert, a->tile0, a->tile1);
        if (a->cap < need) return cd_fail("moe_group: work lists of %u items, %u needed", a->cap, need);
        if (a->cap > CVK_GRID_MAX)
            return cd_fail("moe_group: work lists of %u items exceed a dispatch's 65535 workgroups", a->cap);
        if (a->items.size < 16ull * a->cap || a->dispatch.size < 48)
            return cd_fail("moe_group: items needs %llu bytes, dispatch 48", 16ull * a->cap);
        for (int d = 0; d < 4; d++)
            if (!a->row_tiles[d] || a->row_tiles[d] > CVK_GRID_MAX)
                return cd_fail("moe_group: %u row tiles", a->row_tiles[d]);
        pc.tile0 = a->tile0, pc.tile1 = a->tile1, pc.split = a->split, pc.cap = a->cap;
        for (int d = 0; d < 4; d++) pc.row_tiles[d] = a->row_tiles[d];
        items = a->items, dispatch = a->dispatch;
    }
    cvk_view views[8] = {a->ids, a->groups, a->gather, a->scatter, items, dispatch, logits, weights};
    VkDescriptorSet set;
    if (cvk_descset(dp, p, views, &set)) return -1;
    cvk_cmd_label_begin(c, "moe_group");
    if (pc.route && route_in_grid(a)) {
        /* a token a subgroup, so the device's subgroup size sizes the grid; should the pipeline
         * run with another, every token is still routed (the shader strides over the grid) */
        uint32_t sg = p->subgroup_size ? p->subgroup_size : c->dev->info.caps.subgroup_size;
        uint32_t per = sg && p->spec[0] > sg ? p->spec[0] / sg : 1, groups = (a->n_tokens + per - 1) / per;
        cvk_moe_group_push route = pc;
        route.route = 2;
        cvk_cmd_dispatch(c, p, set, &route, groups < CVK_GRID_MAX ? groups : CVK_GRID_MAX, 1,
                         1); /* the shader strides past it */
        cvk_barrier_compute_to_compute(c->cb);
        pc.route = 0;
    }
    cvk_cmd_dispatch(c, p, set, &pc, 1, 1, 1);
    cvk_cmd_label_end(c);
    return 0;
}
