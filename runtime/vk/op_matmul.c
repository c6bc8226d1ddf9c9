#include "runtime/vk/op_matmul.h"

#include <stdbool.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_spirv.h"

const cvk_matmul_tile cvk_matmul_tile_default = {.bm = 64, .bn = 64, .bk = 32, .tm = 4, .tn = 4};
const cvk_matmul_tile cvk_matmul_tile_rows = {.bm = 64, .bn = 8, .rows = true};
const cvk_matmul_tile cvk_matmul_tile_one = {.bm = 256, .bn = 1, .tm = 4, .rows = true};
const cvk_matmul_tile cvk_matmul_tile_one_texel = {.bm = 256, .bn = 1, .tm = 8, .rows = true, .texel = true};
const cvk_matmul_tile cvk_matmul_tile_eight_texel = {.bm = 256, .bn = 8, .tm = 8, .rows = true, .texel = true};

bool cvk_matmul_texel_type(enum qtype type) {
    return type == QTYPE_Q8_0 || type == QTYPE_Q4_K || type == QTYPE_Q5_K || type == QTYPE_Q6_K;
}

static int rows_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                         const cvk_matmul_tile *t) {
    const cvk_caps *c = &d->info.caps;
    uint32_t rpi = t->tm ? t->tm : 1, kl = t->kl ? t->kl : 1, wg = t->bm / rpi * kl;
    if (!t->bm || !t->bn || t->bn > 16 || rpi > 8 || t->bm % rpi || (kl & (kl - 1)) || wg > c->max_wg_size[0] ||
        wg > c->max_wg_invocations)
        return cd_fail("matmul: bad rows kernel %u rows x %u tokens, %u rows per invocation, %u invocations per row",
                       t->bm, t->bn, rpi, kl);
    /* split k: a row's lanes meet by subgroupShuffle, so they must lie in one subgroup */
    uint32_t min_sg = c->min_subgroup_size ? c->min_subgroup_size : c->subgroup_size;
    if (kl > 1 && (kl > min_sg || !c->subgroup_shuffle))
        return cd_fail("matmul: split k over %u invocations per row needs subgroup shuffles within one subgroup "
                       "(the device's smallest subgroup has %u invocations)",
                       kl, min_sg);
    if (t->texel && kl > 1) return cd_fail("matmul: the texel rows kernel does not split k");
    if (t->texel && !cvk_matmul_texel_type(type))
        return cd_fail("matmul: the texel rows kernel takes block types, not %s", qtype_name(type));
    /* spec 1 is the host's record of the type: the module itself is built for it */
    uint32_t spec[8] = {wg, (uint32_t)type, t->bm, t->bn, 0, rpi, kl, t->glu};
    /* Written for 32-lane subgroups: a workgroup of whole 32s runs as wave32 where the device
     * lets it choose (RDNA; RADV's default for compute is wave64, half of each wave of a
     * 32-invocation workgroup idle). Its only subgroup operation moves chunk sums between the
     * lanes of a row, which then add them in k order, so the size changes no bit; elsewhere the
     * driver chooses. */
    uint32_t sg = wg % 32 == 0 ? 32 : 0;
    /* the texel kernel: weights (binding 0) and x (1) through uniform texel buffers */
    const cinder_spv_module *m = cvk_spirv_module(t->texel ? "matmul_rows_texel" : "matmul_rows", type);
    if (!m) return -1;
    cvk_pipeline_desc desc = {.name = m->shader,
                              .spv = m->code,
                              .spv_size = *m->size,
                              .n_bindings = 7,
                              .texel_bindings = t->texel ? 3 : 0,
                              .push_size = sizeof(cvk_matmul_push),
                              .spec = spec,
                              .n_spec = 8,
                              .subgroup_size = sg,
                              .full_subgroups = sg != 0};
    return cvk_pipeline_create(p, d, cache, &desc);
}

/* bk 0: shaders/matmul_rows.comp (one invocation per output row, both rows of a gate-up pair) */
static bool rows_kernel(const cvk_pipeline *p) { return p->spec[4] == 0; }

/* spec 7: a gate-up pair pipeline */
static bool glu_kernel(const cvk_pipeline *p) { return p->spec[7] != 0; }

uint32_t cvk_matmul_row_tiles(const cvk_pipeline *p, uint32_t n_rows) {
    uint64_t rows = glu_kernel(p) && !rows_kernel(p) ? 2ull * n_rows : n_rows;
    return (uint32_t)((rows + p->spec[2] - 1) / p->spec[2]);
}
uint32_t cvk_matmul_token_tile(const cvk_pipeline *p) { return p->spec[3]; }

int cvk_matmul_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, enum qtype type,
                        const cvk_matmul_tile *tile) {
    const cvk_matmul_tile *t = tile ? tile : &cvk_matmul_tile_default;
    const cvk_caps *c = &d->info.caps;
    if (!qtype_supported(type)) return cd_fail("matmul: type %s is not supported", qtype_name(type));
    if (!c->storage8 || !c->storage16) return cd_fail("matmul: the device lacks 8- or 16-bit storage buffer access");
    if (t->rows) return rows_pipeline(p, d, cache, type, t);
    if (!t->bm || !t->bn || !t->bk || !t->tm || !t->tn || t->tm % 4 || t->tn % 4 || t->bm % t->tm || t->bn % t->tn ||
        t->tm * t->tn > 64 || 256 % t->bk) /* a divisor or multiple of the 32-k chunk */
        return cd_fail("matmul: bad tile %ux%ux%u / %ux%u (tm, tn: multiples of 4 dividing bm, bn, tm * tn <= 64; "
                       "bk must divide 256)",
                       t->bm, t->bn, t->bk, t->tm, t->tn);
    uint32_t wg = (t->bm / t->tm) * (t->bn / t->tn);
    uint64_t shared = 4ull * ((uint64_t)(t->bm + t->bn) * t->bk + 2ull * t->bn);
    if (wg > c->max_wg_size[0] || wg > c->max_wg_invocations)
        return cd_fail("matmul: tile needs %u invocations, the device allows %u", wg, c->max_wg_size[0]);
    if (shared > c->max_shared)
        return cd_fail("matmul: tile needs %llu bytes of shared memory, the device has %u", (unsigned long long)shared,
                       c->max_shared);
    uint32_t spec[8] = {wg, (uint32_t)type, t->bm, t->bn, t->bk, t->tm, t->tn, t->glu}; /* spec 1: above */
    const cinder_spv_module *m = cvk_spirv_module("matmul", type);
    if (!m) return -1;
    cvk_pipeline_desc desc = {.name = m->shader,
                              .spv = m->code,
                              .spv_size = *m->size,
                              .n_bindings = 7,
                              .push_size = sizeof(cvk_matmul_push),
                              .spec = spec,
                              .n_spec = 8};
    return cvk_pipeline_create(p, d, cache, &desc);
}

static int check(const cvk_pipeline *p, const cvk_matmul_args *a, uint64_t row_bytes, uint32_t xs, uint32_t ys) {
    const cvk_buffer *w = a->w;
    bool grouped = a->groups.buf != NULL;
    uint64_t slices = grouped ? a->n_experts : (uint64_t)a->expert + 1, slice_rows = (a->glu ? 2ull : 1ull) * a->n_rows;
    if (p->n_spec < 8 || p->spec[1] != (uint32_t)a->type)
        return cd_fail("matmul: pipeline built for another type than %s", qtype_name(a->type));
    if (glu_kernel(p) != a->glu)
        return cd_fail("matmul: a %s pipeline for a %s product", glu_kernel(p) ? "gate-up pair" : "plain",
                       a->glu ? "gate-up pair" : "plain");
    if (a->n_in % qtype_block_elems(a->type))
        return cd_fail("matmul: row of %u is not a whole number of %s blocks", a->n_in, qtype_name(a->type));
    if (row_bytes > UINT32_MAX || w->size / row_bytes < slices * slice_rows)
        return cd_fail("matmul: weights hold fewer than %llu rows", (unsigned long long)(slices * slice_rows));
    if (a->glu && a->accumulate) return cd_fail("matmul: gate-up pairs do not accumulate");
    if (a->glu && w->n_parts > 1 && w->part_bytes % (slice_rows * row_bytes))
        return cd_fail(
            "matmul: weight parts split gate-up pair slices (create the buffer with granule = 2 * n_rows rows)");
    if (w->size / row_bytes > UINT32_MAX) return cd_fail("matmul: weights hold more than 2^32 rows");
    if (w->n_parts > 1 && w->part_bytes % row_bytes)
        return cd_fail("matmul: weight parts split rows (create the buffer with granule = row bytes)");
    if (xs < a->n_in || ys < a->n_rows) return cd_fail("matmul: row stride below the row length");
    if (!a->x_rows || !a->y_rows) return cd_fail("matmul: x_rows and y_rows must be set");
    if (a->x.size < ((uint64_t)(a->x_rows - 1) * xs + a->n_in) * 4 ||
        a->y.size < ((uint64_t)(a->y_rows - 1) * ys + a->n_rows) * 4)
        return cd_fail("matmul: x or y smaller than its rows");
    if ((uint64_t)a->x_rows * xs > UINT32_MAX || (uint64_t)a->y_rows * ys > UINT32_MAX)
        return cd_fail("matmul: x or y has more than 2^32 floats");
    if (grouped) {
        if (a->n_experts == 0 || a->n_experts > CVK_GRID_MAX)
            return cd_fail("matmul: grouped with %u experts", a->n_experts);
        if (a->expert) return cd_fail("matmul: grouped mode takes expert = 0");
        if (a->groups.size < 8ull * a->n_experts) return cd_fail("matmul: groups shorter than n_experts entries");
        if (a->items.buf) {
            if (a->item_tile != p->spec[3])
                return cd_fail("matmul: work items of %u tokens for a pipeline of %u", a->item_tile, p->spec[3]);
            if (a->items.size < 8ull * ((uint64_t)a->item0 + 1) || a->dispatch.size < 12)
                return cd_fail("matmul: work items or dispatch arguments missing");
        }
        return 0; /* list lengths are checked per entry on the GPU (n_ids) */
    }
    if (a->n_experts) return cd_fail("matmul: n_experts without groups");
    if (a->items.buf) return cd_fail("matmul: work items without groups");
    uint64_t need = ((uint64_t)a->ids_off + a->n_tokens) * 4;
    if ((a->gather.buf && a->gather.size < need) || (a->scatter.buf && a->scatter.size < need))
        return cd_fail("matmul: gather or scatter list shorter than ids_off + n_tokens");
    if (!a->gather.buf && !a->scatter.buf && a->ids_off) return cd_fail("matmul: ids_off without a list");
    return 0;
}

/* The dispatches of one call, inside the caller's label. */
static int record(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_matmul_args *a) {
    if (a->n_tokens == 0 || a->n_rows == 0) return 0;
    if (a->n_in == 0) return cd_fail("matmul: n_in is 0");
    uint32_t xs = a->x_stride ? a->x_stride : a->n_in, ys = a->y_stride ? a->y_stride : a->n_rows;
    uint64_t row_bytes = qtype_row_bytes(a->type, a->n_in);
    if (check(p, a, row_bytes, xs, ys)) return -1;
    bool grouped = a->groups.buf != NULL;
    uint32_t bm = p->spec[2], bn = p->spec[3];
    uint32_t gy = (a->n_tokens + bn - 1) / bn;
    if (gy > CVK_GRID_MAX) return cd_fail("matmul: %u tokens exceed 65535 token tiles", a->n_tokens);
    uint32_t flags = (a->gather.buf ? CVK_MATMUL_GATHER : 0) | (a->scatter.buf ? CVK_MATMUL_SCATTER : 0) |
        (grouped ? CVK_MATMUL_GROUPED : 0) | (a->items.buf ? CVK_MATMUL_ITEMS : 0) |
        (a->accumulate ? CVK_MATMUL_ACCUMULATE : 0);
    if (xs % 4 == 0 && a->n_in % 4 == 0 && a->x.off % 16 == 0) flags |= CVK_MATMUL_X4;
    uint32_t x0 = 0; /* the texel kernel sees x's whole part: x's first texel there */
    if (p->texel_bindings && cvk_texel_offset(&a->x, &x0)) return cd_fail_ctx("matmul: x: ");
    if (p->texel_bindings && !(flags & CVK_MATMUL_X4))
        return cd_fail("matmul: the texel rows kernel reads x rows as whole texels: x_stride %u and n_in %u must be "
                       "multiples of 4",
                       xs, a->n_in);
    /* entries the bound lists hold (grouped mode skips list entries j >= n_ids) */
    uint64_t n_ids = UINT32_MAX;
    if (a->gather.buf && a->gather.size / 4 < n_ids) n_ids = a->gather.size / 4;
    if (a->scatter.buf && a->scatter.size / 4 < n_ids) n_ids = a->scatter.size / 4;
    /* unused bindings get the x view: bound but never read */
    cvk_view gather = a->gather.buf ? a->gather : a->x, scatter = a->scatter.buf ? a->scatter : a->x;
    cvk_view groups = grouped ? a->groups : a->x, items = a->items.buf ? a->items : a->x;
    const cvk_buffer *w = a->w;
    uint64_t rpp = w->n_parts > 1 ? w->part_bytes / row_bytes : UINT64_MAX;
    /* rows of W per slice (gate-up pairs: both halves), and of the grid per output row */
    uint64_t sr = (a->glu ? 2ull : 1ull) * a->n_rows, grid_per = a->glu && !rows_kernel(p) ? 2 : 1;
    /* experts [e0, e1): rows [e0 * sr, e1 * sr) */
    uint64_t e0 = grouped ? 0 : a->expert, e1 = grouped ? a->n_experts : (uint64_t)a->expert + 1;
    for (uint32_t k = 0; k < w->n_parts; k++) {
        uint64_t p0 = w->n_parts > 1 ? k * rpp : 0, p1 = p0 + w->parts[k].size / row_bytes;
        /* the experts whose slices meet rows [p0, p1) */
        uint64_t lo = p0 / sr, hi = (p1 + sr - 1) / sr;
        if (lo < e0) lo = e0;
        if (hi > e1) hi = e1;
        if (lo >= hi) continue;
        /* most rows of one slice in this part: a whole slice, or all the part holds of one */
        uint64_t nr = sr;
        if (hi - lo == 1) {
            uint64_t g0 = lo * sr, g1 = g0 + sr;
            nr = (g1 < p1 ? g1 : p1) - (g0 > p0 ? g0 : p0);
        } else if (p1 - p0 < nr) {
            nr = p1 - p0;
        }
        if (a->glu) nr = nr / 2 * grid_per; /* whole pair slices: n_rows outputs, 2 tiled rows each */
        uint32_t gx = (uint32_t)((nr + bm - 1) / bm), gz = (uint32_t)(hi - lo);
        if (gx > CVK_GRID_MAX) return cd_fail("matmul: %llu rows exceed 65535 row tiles", (unsigned long long)nr);
        cvk_matmul_push pc = {
            a->n_in,  (uint32_t)row_bytes, a->n_rows, (uint32_t)p0, (uint32_t)(p1 - p0), (uint32_t)lo,    a->n_tokens,
            xs,       a->x_rows,           ys,        a->y_rows,    a->ids_off,          (uint32_t)n_ids, flags,
            a->item0, (uint32_t)hi,        x0};
        cvk_view views[7] = {cvk_view_part(w, k), a->x, a->y, gather, scatter, groups, items};
        VkDescriptorSet set;
        if (cvk_descset(dp, p, views, &set)) return -1;
        /* work items: the grid moe_group wrote (x = items, y = the slice's row tiles); items of
         * experts outside [lo, hi) exit in this part's dispatch */
        if (a->items.buf) {
            if (cvk_cmd_dispatch_indirect(c, p, set, &pc, a->dispatch)) return -1;
        } else {
            cvk_cmd_dispatch(c, p, set, &pc, gx, gy, gz);
        }
    }
    return 0;
}

int cvk_matmul(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_matmul_args *a) {
    cvk_cmd_label_begin(c, "matmul");
    int rc = record(c, dp, p, a);
    cvk_cmd_label_end(c);
    return rc;
}

int cvk_matmul_lists(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *const p[2], const cvk_matmul_args a[2]) {
    cvk_cmd_label_begin(c, "matmul");
    int rc = record(c, dp, p[0], &a[0]);
    if (!rc) rc = record(c, dp, p[1], &a[1]);
    cvk_cmd_label_end(c);
    return rc;
}
