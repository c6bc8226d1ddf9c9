#include "runtime/vk/op_get_rows.h"

#include "runtime/base/error.h"
#include "runtime/vk/vk_spirv.h"

int cvk_get_rows_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type, uint32_t wg) {
    if (!wg) wg = 256;
    if (!qtype_supported(type)) return cd_fail("get_rows: type %s is not supported", qtype_name(type));
    if (!d->info.caps.storage8 || !d->info.caps.storage16)
        return cd_fail("get_rows: the device lacks 8- or 16-bit storage buffer access");
    if (!cvk_wg_fits(&d->info.caps, wg)) return cd_fail("get_rows: workgroup size %u too large", wg);
    uint32_t spec[2] = {wg, (uint32_t)type};
    const cinder_spv_module *m = cvk_spirv_module("get_rows", type);
    if (!m) return -1;
    cvk_pipeline_desc desc = {.name = m->shader,
                              .spv = m->code,
                              .spv_size = *m->size,
                              .n_bindings = 3,
                              .push_size = sizeof(cvk_get_rows_push),
                              .spec = spec,
                              .n_spec = 2};
    return cvk_pipeline_create(p, d, cache, &desc);
}

static int check(const cvk_pipeline *p, const cvk_get_rows_args *a, uint64_t row_bytes, uint32_t stride) {
    const cvk_buffer *t = a->table;
    if (p->n_spec < 2 || p->spec[1] != (uint32_t)a->type)
        return cd_fail("get_rows: pipeline built for another type than %s", qtype_name(a->type));
    if (a->n % qtype_block_elems(a->type))
        return cd_fail("get_rows: row of %u is not a whole number of %s blocks", a->n, qtype_name(a->type));
    if (t->size < row_bytes * a->n_rows) return cd_fail("get_rows: table smaller than %u rows", a->n_rows);
    if (t->n_parts > 1 && t->part_bytes % row_bytes)
        return cd_fail("get_rows: table parts split rows (create it with granule = row bytes)");
    if (row_bytes > UINT32_MAX || a->ids.size < 4ull * a->n_ids ||
        a->dst.size < ((uint64_t)(a->n_ids - 1) * stride + a->n) * 4)
        return cd_fail("get_rows: ids or dst too small");
    return 0;
}

int cvk_get_rows(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_get_rows_args *a) {
    if (a->n_ids == 0 || a->n == 0) return 0;
    uint32_t stride = a->dst_stride ? a->dst_stride : a->n;
    uint64_t row_bytes = qtype_row_bytes(a->type, a->n);
    if (check(p, a, row_bytes, stride)) return -1;
    uint32_t wg = p->spec[0], gx = (a->n + wg - 1) / wg, gy, gz;
    if (cvk_grid_split("get_rows", a->n_ids, &gy, &gz)) return -1;
    uint64_t rows_per_part = a->table->part_bytes / row_bytes;
    cvk_cmd_label_begin(c, "get_rows");
    for (uint32_t k = 0; k < a->table->n_parts; k++) {
        uint64_t row0 = k * rows_per_part;
        if (row0 >= a->n_rows && k > 0) break;
        uint64_t rows = a->table->parts[k].size / row_bytes;
        cvk_get_rows_push pc = {a->n, (uint32_t)row_bytes, (uint32_t)row0, (uint32_t)rows, a->n_rows, a->n_ids, stride};
        cvk_view views[3] = {cvk_view_part(a->table, k), a->ids, a->dst};
        VkDescriptorSet set;
        if (cvk_descset(dp, p, views, &set)) {
            cvk_cmd_label_end(c);
            return -1;
        }
        cvk_cmd_dispatch(c, p, set, &pc, gx, gy, gz);
    }
    cvk_cmd_label_end(c);
    return 0;
}
