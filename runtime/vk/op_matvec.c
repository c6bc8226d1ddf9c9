#include "runtime/vk/op_matvec.h"

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_spirv.h"

/* spec constants: 0 WG, 1 QTYPE (host only: the module is built for the type), 2 ROWS, 3 NVEC,
 * 4 NSG (bound on subgroups per workgroup), 5 LPR (lanes per row, 0: per call), 6 LPR_MAX (bound on the per-call choice; host only),
 * 7 A16 (host only: Q6_K rows in the aligned layout of cvk_matvec_pack_rows, the texel kernel's) */
enum { SPEC_WG, SPEC_TYPE, SPEC_ROWS, SPEC_NVEC, SPEC_NSG, SPEC_LPR, SPEC_LPR_MAX, SPEC_A16, N_SPEC };

/* a16: a Q6_K super-block's ql, qh and scales (208 bytes = 13 x 16) come first in the file's
 * block, its f16 d last (block_q6_K) */
enum { A16_BODY = 208 };
static_assert(offsetof(block_q6_K, d) == A16_BODY, "block_q6_K: d after ql, qh and scales");

uint64_t cvk_matvec_row_bytes(const cvk_matvec_cfg *cfg, enum qtype type, uint32_t n_in) {
    uint64_t file = qtype_row_bytes(type, n_in);
    return cfg && cfg->a16 ? (file + 15) / 16 * 16 : file;
}

void cvk_matvec_pack_rows(const cvk_matvec_cfg *cfg, enum qtype type, uint32_t n_in, const void *src, void *dst,
                          uint64_t n_rows) {
    uint64_t from = qtype_row_bytes(type, n_in), to = cvk_matvec_row_bytes(cfg, type, n_in);
    if (!(cfg && cfg->a16)) {
        memcpy(dst, src, from * n_rows);
        return;
    }
    uint32_t nb = n_in / QK_K;
    for (uint64_t r = 0; r < n_rows; r++) {
        const uint8_t *s = (const uint8_t *)src + r * from;
        uint8_t *d = (uint8_t *)dst + r * to;
        for (uint32_t b = 0; b < nb; b++) {
            memcpy(d + (uint64_t)b * A16_BODY, s + (uint64_t)b * sizeof(block_q6_K), A16_BODY);
            memcpy(d + (uint64_t)nb * A16_BODY + 2ull * b, s + (uint64_t)b * sizeof(block_q6_K) + A16_BODY, 2);
        }
        memset(d + from, 0, to - from);
    }
}

static bool cpu_device(const cvk_device *d) { return d->info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU; }

static uint32_t unit_elems(enum qtype t) {
    if (t == QTYPE_F32 || t == QTYPE_F16 || t == QTYPE_BF16) return 4;
    return (t == QTYPE_Q4_K || t == QTYPE_Q5_K || t == QTYPE_Q6_K) ? 64 : 32;
}

int cvk_matvec_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                        const cvk_matvec_cfg *cfg) {
    cvk_matvec_cfg c = cfg ? *cfg : (cvk_matvec_cfg){0};
    if (!c.wg) c.wg = 64;
    if (!c.rows) c.rows = 2;
    if (!c.nvec) c.nvec = cpu_device(d) ? 1 : 4;
    const cvk_caps *k = &d->info.caps;
    if (!qtype_supported(type)) return cd_fail("matvec: type %s is not supported", qtype_name(type));
    if (!k->storage8 || !k->storage16) return cd_fail("matvec: the device lacks 8- or 16-bit storage buffer access");
    if (c.wg > k->max_wg_size[0] || c.wg > k->max_wg_invocations)
        return cd_fail("matvec: workgroup size %u too large", c.wg);
    if (c.rows > 16 || c.nvec > 8) return cd_fail("matvec: rows %u > 16 or nvec %u > 8", c.rows, c.nvec);
    if (c.rows * c.nvec > c.wg) return cd_fail("matvec: rows * nvec exceeds the workgroup size");
    if (c.lanes_per_row & (c.lanes_per_row - 1) || c.wg % (c.lanes_per_row ? c.lanes_per_row : 1))
        return cd_fail("matvec: lanes per row %u is not a power of 2 dividing the workgroup size", c.lanes_per_row);
    if (c.a16 != c.texel || (c.texel && (type != QTYPE_Q6_K || c.lanes_per_row != 1 || c.subgroup_size)))
        return cd_fail("matvec: the texel kernel (and only it) takes the aligned layout: Q6_K, one lane per row, "
                       "the driver's subgroup size");
    uint32_t min_sg = k->min_subgroup_size ? k->min_subgroup_size : 1;
    if (c.subgroup_size && c.subgroup_size < min_sg) min_sg = c.subgroup_size;
    uint32_t nsg = (c.wg + min_sg - 1) / min_sg;
    if ((uint64_t)nsg * c.rows * c.nvec * 4 > k->max_shared)
        return cd_fail("matvec: reduction needs more shared memory than the device has");
    /* lavapipe: groups within one subgroup (no barrier, no shared memory) run fastest */
    uint32_t lpr_max = cpu_device(d) ? (c.subgroup_size ? c.subgroup_size : k->subgroup_size) : 0;
    uint32_t spec[N_SPEC] = {c.wg, (uint32_t)type, c.rows, c.nvec, nsg, c.lanes_per_row, lpr_max, c.a16};
    /* the texel kernel (Q6_K only): weights (binding 0) and x (1) through uniform texel buffers */
    const cinder_spv_module *m = c.texel ? cvk_spirv_module("matvec_texel", CINDER_SPV_UNTYPED)
                                         : cvk_spirv_module("matvec", type); /* spec 1 records its type */
    if (!m) return -1;
    cvk_pipeline_desc desc = {.name = m->shader,
                              .spv = m->code,
                              .spv_size = *m->size,
                              .n_bindings = 4,
                              .texel_bindings = c.texel ? 3 : 0,
                              .push_size = sizeof(cvk_matvec_push),
                              .spec = spec,
                              .n_spec = N_SPEC,
                              .subgroup_size = c.subgroup_size,
                              .full_subgroups = c.subgroup_size && c.wg % c.subgroup_size == 0};
    return cvk_pipeline_create(p, d, cache, &desc);
}

static int check(const cvk_pipeline *p, const cvk_matvec_args *a, uint64_t row_bytes, uint32_t n_slices, uint32_t xs,
                 uint32_t ys) {
    const cvk_buffer *w = a->w;
    if (p->n_spec < N_SPEC || p->spec[SPEC_TYPE] != (uint32_t)a->type)
        return cd_fail("matvec: pipeline built for another type than %s", qtype_name(a->type));
    if (a->n_in % qtype_block_elems(a->type))
        return cd_fail("matvec: row of %u is not a whole number of %s blocks", a->n_in, qtype_name(a->type));
    uint64_t total = (uint64_t)a->n_rows * n_slices;
    if (row_bytes > UINT32_MAX || total > UINT32_MAX) return cd_fail("matvec: tensor too large");
    if (w->size < row_bytes * total)
        return cd_fail("matvec: weights smaller than %llu rows", (unsigned long long)total);
    if (w->n_parts > 1 && w->part_bytes % row_bytes)
        return cd_fail("matvec: weight parts split rows (create the buffer with granule = row bytes)");
    if (w->part_bytes > UINT32_MAX) return cd_fail("matvec: a weight part exceeds 4 GiB");
    if (a->x.size < ((uint64_t)(a->n_vec - 1) * xs + a->n_in) * 4) return cd_fail("matvec: x too small");
    if (p->texel_bindings && xs % 4) return cd_fail("matvec: x stride %u is not whole 16-byte texels", xs);
    if (a->y.size < ((uint64_t)(a->n_vec - 1) * ys + a->n_rows) * 4) return cd_fail("matvec: y too small");
    if (a->use_ids && a->ids.size < ((uint64_t)a->ids_offset + a->n_vec) * 4) return cd_fail("matvec: ids too small");
    if (a->use_ids && a->ids_offset > INT32_MAX) return cd_fail("matvec: ids_offset too large");
    if (!a->use_ids && a->slice >= n_slices) return cd_fail("matvec: slice %u of %u", a->slice, n_slices);
    return 0;
}

int cvk_matvec(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_matvec_args *a) {
    if (a->n_vec == 0 || a->n_rows == 0) return 0;
    if (a->n_in == 0) return cd_fail("matvec: n_in is 0");
    uint32_t n_slices = a->n_slices ? a->n_slices : 1;
    uint32_t xs = a->x_shared ? 0 : (a->x_stride ? a->x_stride : a->n_in);
    uint32_t ys = a->y_stride ? a->y_stride : a->n_rows;
    if (!a->x_shared && xs < a->n_in) return cd_fail("matvec: x stride below n_in");
    if (ys < a->n_rows && a->n_vec > 1) return cd_fail("matvec: y stride below n_rows");
    uint64_t row_bytes = cvk_matvec_row_bytes(&(cvk_matvec_cfg){.a16 = p->spec[SPEC_A16] != 0}, a->type, a->n_in);
    if (check(p, a, row_bytes, n_slices, xs, ys)) return -1;
    uint32_t x0 = 0; /* texel kernel: x's first texel in its part */
    if (p->texel_bindings && cvk_texel_offset(&a->x, &x0)) return cd_fail_ctx("matvec: x: ");
    uint32_t wg = p->spec[SPEC_WG], lpr = p->spec[SPEC_LPR], nvec = p->spec[SPEC_NVEC];
    if (!lpr) { /* the smallest power of 2 covering the row's units, within the workgroup (and cap) */
        uint32_t n_units = a->n_in / unit_elems(a->type), cap = wg & -wg; /* largest power of 2 dividing wg */
        if (p->spec[SPEC_LPR_MAX] && p->spec[SPEC_LPR_MAX] < cap) cap = p->spec[SPEC_LPR_MAX];
        for (lpr = 1; lpr < n_units && lpr < cap;) lpr *= 2;
    }
    uint32_t rows_wg = p->spec[SPEC_ROWS] * (wg / lpr);
    uint32_t gy = a->use_ids ? a->n_vec : (a->n_vec + nvec - 1) / nvec;
    if (gy > CVK_GRID_MAX) return cd_fail("matvec: %u vector groups exceed one grid dimension", gy);
    uint64_t rows_per_part = a->w->part_bytes / row_bytes, total = (uint64_t)a->n_rows * n_slices;
    /* the ids view is bound even in dense mode (never read there): x will do */
    cvk_view views[4] = {{0}, a->x, a->y, a->use_ids ? a->ids : a->x};
    cvk_cmd_label_begin(c, "matvec");
    for (uint32_t k = 0; k < a->w->n_parts; k++) {
        uint64_t row0 = k * rows_per_part, rows = a->w->parts[k].size / row_bytes;
        if (row0 >= total) break;
        if (row0 + rows > total) rows = total - row0;
        /* output rows this part can touch: all of them with ids; the slice's overlap in dense mode */
        uint64_t r_begin = 0, r_end = a->n_rows;
        if (!a->use_ids) {
            uint64_t s0 = (uint64_t)a->slice * a->n_rows, lo = row0 > s0 ? row0 : s0;
            uint64_t hi = row0 + rows < s0 + a->n_rows ? row0 + rows : s0 + a->n_rows;
            if (lo >= hi) continue;
            r_begin = lo - s0, r_end = hi - s0;
        }
        uint64_t blocks = (r_end - r_begin + rows_wg - 1) / rows_wg;
        uint32_t gx, gz;
        cvk_matvec_push pc = {a->n_in,
                              (uint32_t)row_bytes,
                              a->n_rows,
                              n_slices,
                              (uint32_t)row0,
                              (uint32_t)rows,
                              (uint32_t)r_begin,
                              a->n_vec,
                              xs,
                              ys,
                              a->slice,
                              a->use_ids ? (int32_t)a->ids_offset : -1,
                              lpr,
                              x0};
        views[0] = cvk_view_part(a->w, k);
        VkDescriptorSet set;
        if (cvk_grid_split("matvec", blocks, &gx, &gz) || cvk_descset(dp, p, views, &set)) {
            cvk_cmd_label_end(c);
            return -1;
        }
        cvk_cmd_dispatch(c, p, set, &pc, gx, gy, gz);
    }
    cvk_cmd_label_end(c);
    return 0;
}

cvk_matvec_cfg cvk_matvec_choose(const cvk_device *d, enum qtype type, uint32_t n_in, uint32_t n_rows, uint32_t n_vec) {
    uint32_t nvec = n_vec < 1 ? 1 : n_vec > 8 ? 8 : n_vec;
    if (cpu_device(d) && type == QTYPE_Q6_K && n_rows >= 32768) {
        /* lavapipe, lm_head-sized Q6_K: matvec_texel.comp, the weights in the aligned layout and
         * read with x through texel buffers (gathers, not per-lane load loops: the head 4.1x
         * faster on the 30B one, docs/kernels/matvec.md), one lane per row, 8 rows per lane (x
         * read once for them; 16 was slower, 4 no faster), 16 from 4 vectors on (each x fetch
         * then feeds twice the rows; measured in docs/kernels/matvec.md). Several vectors (the batch forward's head)
         * share each row's fetch and decode; each vector's sums are the same whatever their
         * number and the rows per lane. */
        return (cvk_matvec_cfg){.wg = nvec > 4 ? 128 : 64,
                                .rows = nvec >= 4 ? 16 : 8,
                                .nvec = nvec,
                                .lanes_per_row = 1,
                                .a16 = true,
                                .texel = true};
    }
    if (cpu_device(d)) /* lavapipe: masked-off vectors still cost their loads, so NVEC = n_vec */
        return (cvk_matvec_cfg){.wg = 64, .rows = 2, .nvec = nvec};
    return (cvk_matvec_cfg){.wg = 64, .rows = 2, .nvec = nvec < 4 ? nvec : 4};
}
