/* The integer family's decode kernels: op_xq8.h. */
#include "runtime/vk/op_xq8.h"

#include "runtime/base/error.h"
#include "runtime/gguf/xq8.h"
#include "runtime/vk/vk_spirv.h"

enum { SPEC_WG, SPEC_TYPE, SPEC_NT, SPEC_KL, N_SPEC };

uint64_t cvk_xq8_q_bytes(uint32_t n_in, uint32_t n_tokens) { return (uint64_t)n_in * n_tokens; }
uint64_t cvk_xq8_d_bytes(uint32_t n_in, uint32_t n_tokens) { return (uint64_t)n_in / XQ8_BLOCK * n_tokens * 8; }

int cvk_xq8_quantize_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache) {
    const cinder_spv_module *m = cvk_spirv_module("xq8_quantize", CINDER_SPV_UNTYPED);
    if (!m) return -1;
    uint32_t spec[1] = {64};
    cvk_pipeline_desc desc = {.name = m->shader,
                              .spv = m->code,
                              .spv_size = *m->size,
                              .n_bindings = 3,
                              .push_size = sizeof(cvk_xq8_quantize_push),
                              .spec = spec,
                              .n_spec = 1};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_xq8_matvec_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                            const cvk_xq8_cfg *cfg) {
    const cvk_caps *k = &d->info.caps;
    cvk_xq8_cfg c = cfg ? *cfg : (cvk_xq8_cfg){0};
    uint32_t min_sg = k->min_subgroup_size ? k->min_subgroup_size : k->subgroup_size;
    if (!c.wg) c.wg = 32;
    if (!c.nt) c.nt = 1;
    if (!c.kl) c.kl = min_sg < 8 ? min_sg : 8;
    if (!xq8_type(type))
        return cd_fail("matvec_xq8: type %s is not one of the integer family's (Q8_0, Q4_K, Q6_K)", qtype_name(type));
    if (!k->int_dot) return cd_fail("matvec_xq8: the device has no integer dot product (shaderIntegerDotProduct)");
    if (!k->storage8 || !k->storage16)
        return cd_fail("matvec_xq8: the device lacks 8- or 16-bit storage buffer access");
    if (c.nt > 8 || c.kl & (c.kl - 1) || c.wg % c.kl || c.wg > k->max_wg_size[0])
        return cd_fail("matvec_xq8: tokens %u (1..8), lanes per row %u (a power of 2 dividing the workgroup of %u)",
                       c.nt, c.kl, c.wg);
    /* a row's lanes meet by subgroupShuffle: they must lie in one subgroup */
    if (c.kl > 1 && (c.kl > min_sg || !k->subgroup_shuffle))
        return cd_fail("matvec_xq8: %u lanes per row need subgroup shuffles within one subgroup (the device's smallest "
                       "has %u invocations)",
                       c.kl, min_sg);
    uint32_t spec[N_SPEC] = {c.wg, (uint32_t)type, c.nt, c.kl};
    /* Written for 32-lane subgroups, as the rows kernel (op_matmul.c): wave32 on RDNA; the one
     * subgroup operation moves products to the row's lane 0, which adds them in k order, so the
     * size changes no bit. */
    uint32_t sg = c.wg % 32 == 0 ? 32 : 0;
    const cinder_spv_module *m = cvk_spirv_module("matvec_xq8", type); /* spec 1 records its type */
    if (!m) return -1;
    cvk_pipeline_desc desc = {.name = m->shader,
                              .spv = m->code,
                              .spv_size = *m->size,
                              .n_bindings = 4,
                              .push_size = sizeof(cvk_xq8_matvec_push),
                              .spec = spec,
                              .n_spec = N_SPEC,
                              .subgroup_size = sg,
                              .full_subgroups = sg != 0};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_xq8_quantize(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_xq8_quantize_args *a) {
    if (!a->n_tokens) return 0;
    uint32_t xs = a->x_stride ? a->x_stride : a->n_in;
    if (!a->n_in || a->n_in % XQ8_BLOCK)
        return cd_fail("xq8_quantize: n_in %u is not a positive multiple of 32", a->n_in);
    if (xs < a->n_in) return cd_fail("xq8_quantize: x stride %u below n_in %u", xs, a->n_in);
    if (a->x.size < ((uint64_t)(a->n_tokens - 1) * xs + a->n_in) * 4) return cd_fail("xq8_quantize: x too small");
    if (a->xq.size < cvk_xq8_q_bytes(a->n_in, a->n_tokens) || a->xd.size < cvk_xq8_d_bytes(a->n_in, a->n_tokens))
        return cd_fail("xq8_quantize: the output views are too small for %u tokens", a->n_tokens);
    uint64_t blocks = (uint64_t)a->n_in / XQ8_BLOCK * a->n_tokens, groups = (blocks + 63) / 64;
    uint32_t gx, gy;
    if (cvk_grid_split("xq8_quantize", groups, &gx, &gy)) return -1;
    cvk_view views[3] = {a->x, a->xq, a->xd};
    VkDescriptorSet set;
    if (cvk_descset(dp, p, views, &set)) return -1;
    cvk_xq8_quantize_push pc = {a->n_in, a->n_tokens, xs};
    cvk_cmd_dispatch(c, p, set, &pc, gx, gy, 1);
    return 0;
}

static int check(const cvk_pipeline *p, const cvk_xq8_matvec_args *a, uint64_t row_bytes, uint32_t ys) {
    if (p->n_spec < N_SPEC || p->spec[SPEC_TYPE] != (uint32_t)a->type)
        return cd_fail("matvec_xq8: pipeline built for another type than %s", qtype_name(a->type));
    if (!row_bytes) return cd_fail("matvec_xq8: a row of %u is not whole %s blocks", a->n_in, qtype_name(a->type));
    if (row_bytes > UINT32_MAX) return cd_fail("matvec_xq8: rows too long");
    if (a->w->size < row_bytes * a->n_rows) return cd_fail("matvec_xq8: weights smaller than %u rows", a->n_rows);
    if (a->w->n_parts > 1 && a->w->part_bytes % row_bytes)
        return cd_fail("matvec_xq8: weight parts split rows (create the buffer with granule = row bytes)");
    if (a->xq.size < cvk_xq8_q_bytes(a->n_in, a->n_tokens) || a->xd.size < cvk_xq8_d_bytes(a->n_in, a->n_tokens))
        return cd_fail("matvec_xq8: quantized x too small for %u tokens", a->n_tokens);
    if (a->n_tokens > 1 && ys < a->n_rows) return cd_fail("matvec_xq8: y stride %u below n_rows %u", ys, a->n_rows);
    if (a->y.size < ((uint64_t)(a->n_tokens - 1) * ys + a->n_rows) * 4) return cd_fail("matvec_xq8: y too small");
    return 0;
}

int cvk_xq8_matvec(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_xq8_matvec_args *a) {
    if (!a->n_tokens || !a->n_rows) return 0;
    uint32_t ys = a->y_stride ? a->y_stride : a->n_rows;
    uint64_t row_bytes = qtype_row_bytes(a->type, a->n_in);
    if (check(p, a, row_bytes, ys)) return -1;
    uint32_t nt = p->spec[SPEC_NT], rows_wg = p->spec[SPEC_WG] / p->spec[SPEC_KL];
    uint32_t gy = (a->n_tokens + nt - 1) / nt;
    if (gy > CVK_GRID_MAX) return cd_fail("matvec_xq8: %u token groups exceed one grid dimension", gy);
    uint64_t rows_per_part = a->w->part_bytes / row_bytes;
    cvk_view views[4] = {{0}, a->xq, a->xd, a->y};
    cvk_cmd_label_begin(c, "matvec_xq8");
    for (uint32_t k = 0; k < a->w->n_parts; k++) {
        uint64_t row0 = k * rows_per_part, rows = a->w->parts[k].size / row_bytes;
        if (row0 >= a->n_rows) break;
        if (row0 + rows > a->n_rows) rows = a->n_rows - row0;
        uint64_t gx = (rows + rows_wg - 1) / rows_wg;
        if (gx > CVK_GRID_MAX) {
            cvk_cmd_label_end(c);
            return cd_fail("matvec_xq8: %llu row groups exceed one grid dimension", (unsigned long long)gx);
        }
        cvk_xq8_matvec_push pc = {a->n_in, (uint32_t)row_bytes, (uint32_t)row0, (uint32_t)rows, a->n_tokens,
                                  ys,      a->accumulate};
        views[0] = cvk_view_part(a->w, k);
        VkDescriptorSet set;
        if (cvk_descset(dp, p, views, &set)) {
            cvk_cmd_label_end(c);
            return -1;
        }
        cvk_cmd_dispatch(c, p, set, &pc, (uint32_t)gx, gy, 1);
    }
    cvk_cmd_label_end(c);
    return 0;
}
