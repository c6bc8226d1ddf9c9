#include "runtime/vk/op_attn_prefill.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"
#include "shaders/shaders.h"

static int pow2(uint32_t x) { return x && !(x & (x - 1)); }

/* The tiled kernel (attn_prefill.comp): configuration, pipeline. */
static int make_tiled(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                      const cvk_attn_prefill_cfg *cfg, bool cpu) {
    const cvk_caps *caps = &d->info.caps;
    if (!d->info.caps.subgroup_shuffle)
        return cd_fail("attn_prefill: the device has no subgroup shuffle in compute shaders");
    uint32_t wg = cfg->wg ? cfg->wg : cpu ? 64 : 256;
    if (wg > caps->max_wg_size[0] && !cfg->wg) wg = caps->max_wg_size[0];
    if (!pow2(wg) || wg > 1024 || wg > caps->max_wg_size[0] || wg > caps->max_wg_invocations)
        return cd_fail("attn_prefill: workgroup size %u is not a power of two within the device limit", wg);
    uint32_t lpr = cfg->lanes_per_row ? cfg->lanes_per_row : cpu ? 1 : 4;
    if (!cfg->lanes_per_row)
        while (lpr > 1 && (head_dim % lpr || lpr > caps->min_subgroup_size || lpr > wg)) lpr /= 2;
    if (!pow2(lpr) || head_dim % lpr || lpr > caps->min_subgroup_size || lpr > wg)
        return cd_fail("attn_prefill: %u lanes per row must be a power of two dividing head_dim %u, at most the "
                       "subgroup size %u and the workgroup size %u",
                       lpr, head_dim, caps->min_subgroup_size, wg);
    uint32_t kt = cfg->kv_tile ? cfg->kv_tile : cpu ? 8 : 16;
    if (!cfg->kv_tile)
        while (kt > 1 && (2ull * kt * head_dim * 4 > 16384 || kt > wg)) kt /= 2;
    uint64_t shared = 2ull * kt * head_dim * 4 + 2ull * kt * 4 + 2ull * (wg / lpr) * 4;
    if (kt < 1 || kt > wg || shared > caps->max_shared)
        return cd_fail("attn_prefill: K/V tile of %u positions (%llu bytes of shared memory) does not fit "
                       "(workgroup %u, limit %u bytes)",
                       kt, (unsigned long long)shared, wg, caps->max_shared);
    uint32_t spec[4] = {wg, head_dim, lpr, kt};
    cvk_pipeline_desc td = {.name = "attn_prefill",
                            .spv = cinder_spv_attn_prefill,
                            .spv_size = cinder_spv_attn_prefill_size,
                            .n_bindings = 6,
                            .push_size = sizeof(cvk_attn_prefill_push),
                            .spec = spec,
                            .n_spec = 4};
    if (cvk_pipeline_create(&p->tile, d, cache, &td)) return -1;
    p->kernel = CVK_ATTN_PREFILL_TILED, p->wg = wg, p->lanes_per_row = lpr, p->kv_tile = kt;
    p->rows = wg / lpr, p->step = kt;
    return 0;
}

/* The lanes kernel (attn_prefill_lanes*.comp): configuration, pipeline. */
static int make_lanes(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                      const cvk_attn_prefill_cfg *cfg) {
    const cvk_caps *caps = &d->info.caps;
    /* rows: every invocation holds q and the accumulator of all of them (2 * rows * head_dim floats
     * per SIMD lane), and the step is unrolled over rows x head_dim, so lavapipe's build (NIR
     * passes, every process, warm shader cache or not) grows with it: the largest power of two
     * up to 8 with rows * head_dim <= 256 (4 at hd 64, 2 at hd 128) builds in a third of the time
     * of 512's at the same speed within noise at hd 64, ~0-25% slower at hd 128 (docs/kernels/attention.md) */
    uint32_t rows = cfg->rows;
    if (!rows)
        for (rows = 8; rows > 1 && rows * head_dim > 256; rows /= 2) {}
    uint32_t wg = cfg->wg ? cfg->wg : 8, pp = cfg->kv_tile ? cfg->kv_tile : 8;
    if (!pow2(wg) || wg > 1024 || wg > caps->max_wg_size[0] || wg > caps->max_wg_invocations)
        return cd_fail("attn_prefill: workgroup size %u is not a power of two within the device limit", wg);
    if (rows > 64) return cd_fail("attn_prefill: %u rows per workgroup (lanes kernel: 1..64)", rows);
    if (cfg->lanes_per_row > 1)
        return cd_fail("attn_prefill: the lanes kernel has one invocation per K/V row, not %u per query row",
                       cfg->lanes_per_row);
    if (pp > 32) return cd_fail("attn_prefill: %u positions per invocation and step (lanes kernel: 1..32)", pp);
    uint64_t shared = (uint64_t)wg * head_dim * 4 + 2ull * wg * 4;
    if (shared > caps->max_shared)
        return cd_fail("attn_prefill: %llu bytes of shared memory for the merge of %u invocations (limit %u)",
                       (unsigned long long)shared, wg, caps->max_shared);
    /* Texel loads where a unit of the row is whole texels (head_dim a multiple of 8) and every
     * buffer part gets a texel view (no part exceeds the storage range); else 64-bit loads (16
     * halves a load) where the device has them and a row is a multiple of 16 halves. */
    bool texel = !cfg->storage_loads && head_dim % 8 == 0 && caps->max_texels >= caps->max_storage_range / 16;
    bool wide = !texel && caps->int64 && head_dim % 16 == 0;
    uint32_t spec[4] = {wg, head_dim, rows, pp};
    cvk_pipeline_desc td = {.name = "attn_prefill_lanes",
                            .spv = cinder_spv_attn_prefill_lanes,
                            .spv_size = cinder_spv_attn_prefill_lanes_size,
                            .n_bindings = 6,
                            .push_size = sizeof(cvk_attn_prefill_push),
                            .spec = spec,
                            .n_spec = 4};
    if (wide) td.spv = cinder_spv_attn_prefill_lanes_i64, td.spv_size = cinder_spv_attn_prefill_lanes_i64_size;
    if (texel)
        td.spv = cinder_spv_attn_prefill_lanes_texel, td.spv_size = cinder_spv_attn_prefill_lanes_texel_size,
        td.texel_bindings = 1;
    if (cvk_pipeline_create(&p->tile, d, cache, &td)) return -1;
    p->kernel = CVK_ATTN_PREFILL_LANES, p->wg = wg, p->lanes_per_row = 1, p->kv_tile = pp, p->rows = rows;
    p->texel = texel;
    p->step = wg * pp;
    return 0;
}

int cvk_attn_prefill_pipeline_cfg(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                                  const cvk_attn_prefill_cfg *cfg_or_null) {
    *p = (cvk_attn_prefill_pipes){0};
    cvk_attn_prefill_cfg cfg = cfg_or_null ? *cfg_or_null : (cvk_attn_prefill_cfg){0};
    bool cpu = d->info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (!head_dim || head_dim % 2 || head_dim > 512) return cd_fail("attn_prefill: head_dim %u unsupported", head_dim);
    cvk_attn_prefill_kernel k = cfg.kernel ? cfg.kernel : cpu ? CVK_ATTN_PREFILL_LANES : CVK_ATTN_PREFILL_TILED;
    if (k != CVK_ATTN_PREFILL_TILED && k != CVK_ATTN_PREFILL_LANES)
        return cd_fail("attn_prefill: unknown kernel %d", (int)cfg.kernel);
    if (k == CVK_ATTN_PREFILL_TILED ? make_tiled(p, d, cache, head_dim, &cfg, cpu)
                                    : make_lanes(p, d, cache, head_dim, &cfg))
        return -1;
    uint32_t cspec[2] = {head_dim < 64 ? 32 : 64, head_dim};
    cvk_pipeline_desc cd = {.name = "attn_combine",
                            .spv = cinder_spv_attn_combine,
                            .spv_size = cinder_spv_attn_combine_size,
                            .n_bindings = 2,
                            .push_size = sizeof(cvk_attn_combine_push),
                            .spec = cspec,
                            .n_spec = 2};
    if (cvk_pipeline_create(&p->combine, d, cache, &cd)) {
        cvk_pipeline_destroy(d, &p->tile);
        return -1;
    }
    p->head_dim = head_dim, p->cpu = cpu;
    return 0;
}

int cvk_attn_prefill_pipeline(cvk_attn_prefill_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t head_dim,
                              uint32_t wg_or_0) {
    cvk_attn_prefill_cfg cfg = {.wg = wg_or_0};
    return cvk_attn_prefill_pipeline_cfg(p, d, cache, head_dim, &cfg);
}

void cvk_attn_prefill_pipeline_destroy(cvk_device *d, cvk_attn_prefill_pipes *p) {
    cvk_pipeline_destroy(d, &p->tile);
    cvk_pipeline_destroy(d, &p->combine);
    *p = (cvk_attn_prefill_pipes){0};
}

uint64_t cvk_attn_prefill_partials_bytes(uint32_t n_tokens, uint32_t n_head, uint32_t n_parts, uint32_t n_split,
                                         uint32_t head_dim) {
    uint64_t n = (uint64_t)(n_parts ? n_parts : 1) * (n_split ? n_split : 1);
    if (n <= 1) return 0;
    return (uint64_t)n_tokens * n_head * n * (head_dim + 2) * 4;
}

/* A workgroup: `rows` query rows = tpw tokens x hpw heads of one kv head's group; chunks
 * workgroups cover a group wider than rows; n_x token tiles. */
typedef struct geometry {
    uint32_t hpw, tpw, chunks, n_x;
} geometry;

static geometry geometry_of(const cvk_attn_prefill_pipes *p, uint32_t n_tokens, uint32_t n_head, uint32_t n_head_kv,
                            bool distinct_rows) {
    uint32_t rows = p->rows ? p->rows : 1, group = n_head_kv && n_head >= n_head_kv ? n_head / n_head_kv : 1;
    geometry g;
    g.hpw = group < rows ? group : rows;
    g.tpw = rows / g.hpw;
    /* tokens of distinct table rows (a decode step) would walk one after another in a workgroup:
     * the tiled kernel takes one each instead (its idle rows cost nothing); the lanes kernel
     * computes every one of its rows whether live or not, so it keeps them filled */
    if (distinct_rows && p->kernel == CVK_ATTN_PREFILL_TILED) g.tpw = 1;
    g.chunks = (group + g.hpw - 1) / g.hpw;
    g.n_x = (uint32_t)(((uint64_t)n_tokens + g.tpw - 1) / g.tpw);
    return g;
}

/* Threads lavapipe runs compute on: LP_NUM_THREADS when set, else the online CPUs. */
static uint32_t cpu_threads(void) {
    const char *e = getenv("LP_NUM_THREADS");
    long n = e && *e ? atol(e) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (uint32_t)n;
}

/* llvmpipe stops a loop silently once one invocation has run 65535 loop iterations in all (see
 * docs/kernels/attention.md). Only the walk (a tile, or a step of wg * kv_tile positions) is a
 * real loop, run once per distinct table row of a workgroup (at most tpw); the few small loops
 * around it get a share of the budget. The least split count that keeps every invocation under
 * it (one split covers ~4M positions of one sequence for the lanes kernel, ~0.5M for the tiled one
 * at 8-position tiles). */
static uint64_t loop_limit_positions(const cvk_attn_prefill_pipes *p, geometry g, uint64_t table_rows) {
    uint64_t walks = table_rows && table_rows < g.tpw ? table_rows : g.tpw, step = p->step ? p->step : 1;
    uint64_t other = p->kernel == CVK_ATTN_PREFILL_TILED
        ? (uint64_t)g.tpw * g.tpw
        : (uint64_t)p->rows * (p->rows + (p->head_dim + p->wg - 1) / p->wg);
    uint64_t budget = 65535 - 256 > other + 1024 ? 65535 - 256 - other : 1024; /* iterations for the walks */
    return budget / (walks ? walks : 1) * step;                                /* positions one split may walk */
}
static uint32_t loop_limit_splits(const cvk_attn_prefill_pipes *p, geometry g, uint64_t lim, uint64_t table_rows) {
    uint64_t per_split = loop_limit_positions(p, g, table_rows);
    uint64_t n = (lim + per_split - 1) / per_split;
    return n < 1 ? 1 : n > 65535 ? 65535 : (uint32_t)n;
}

uint32_t cvk_attn_prefill_splits(const cvk_attn_prefill_pipes *p, const kv_layout *lay, uint32_t n_tokens,
                                 uint32_t n_head, uint32_t max_len) {
    if (!n_tokens || !max_len) return 1;
    geometry g = geometry_of(p, n_tokens, n_head, lay->n_head_kv, false);
    uint64_t wgs = (uint64_t)g.n_x * lay->n_head_kv * g.chunks;
    /* workgroups that fill the device. CPU: one per thread; more only add the combine pass (lavapipe,
     * 2 threads, 5000 positions: 1 workgroup 0.82 ms, in 2 splits 0.58 ms, in 4 splits 0.76 ms;
     * 2 workgroups 0.84 ms, in 4 splits each 1.34 ms) */
    uint64_t target = p->cpu ? cpu_threads() : 512;
    uint64_t min_len = p->cpu ? 512 : 256; /* positions per split, at least */
    if (min_len < p->step) min_len = p->step;
    uint64_t n = (target + wgs - 1) / wgs, by_len = max_len / min_len;
    if (n > by_len) n = by_len;
    n = n < 1 ? 1 : n > 64 ? 64 : n;
    uint32_t least = loop_limit_splits(p, g, max_len, 0); /* any table: at most tpw rows per workgroup */
    return n < least ? least : (uint32_t)n;
}

uint64_t cvk_attn_prefill_partials_max(const cvk_attn_prefill_pipes *p, const kv_layout *lay, uint32_t n_head,
                                       uint32_t n_parts, uint32_t max_tokens, uint32_t max_len) {
    uint64_t most = 0;
    for (uint32_t t = 1; t <= max_tokens; t++) {
        uint32_t n = cvk_attn_prefill_splits(p, lay, t, n_head, max_len);
        uint64_t b = cvk_attn_prefill_partials_bytes(t, n_head, n_parts, n, lay->head_dim);
        if (b > most) most = b;
    }
    return most;
}

static int check(const cvk_attn_prefill_pipes *p, const cvk_attn_prefill_args *a, uint32_t qs, uint32_t os, geometry g,
                 uint32_t n_split, uint64_t lim) {
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    uint32_t row = a->n_head * l->head_dim;
    if (p->head_dim != l->head_dim)
        return cd_fail("attn_prefill: pipelines built for head_dim %u, layout has %u", p->head_dim, l->head_dim);
    if (a->n_head % l->n_head_kv)
        return cd_fail("attn_prefill: %u query heads are not a multiple of %u kv heads", a->n_head, l->n_head_kv);
    if (a->layer >= l->n_layer) return cd_fail("attn_prefill: layer %u of %u", a->layer, l->n_layer);
    bool combine = (uint64_t)pool->n_parts * n_split > 1;
    if (g.n_x > CVK_GRID_MAX || (uint64_t)l->n_head_kv * g.chunks > CVK_GRID_MAX || n_split > CVK_GRID_MAX ||
        a->n_head > CVK_GRID_MAX || (combine && a->n_tokens > CVK_GRID_MAX))
        return cd_fail("attn_prefill: grid too large (%u tokens, %u heads, %u splits)", a->n_tokens, a->n_head,
                       n_split);
    if (p->kernel == CVK_ATTN_PREFILL_LANES && lim > (1u << 24))
        return cd_fail("attn_prefill: positions up to %llu (the lanes kernel takes < 2^24)", (unsigned long long)lim);
    if (pool->size < l->page_bytes || pool->part_bytes % l->page_bytes)
        return cd_fail("attn_prefill: pool is not whole pages per part (create it with granule = page_bytes)");
    if (pool->part_bytes / 4 > UINT32_MAX) return cd_fail("attn_prefill: pool part too large for 32-bit indexing");
    if (qs < row || os < row) return cd_fail("attn_prefill: q/out stride below n_head * head_dim");
    if ((uint64_t)(a->n_tokens - 1) * (qs > os ? qs : os) + row > UINT32_MAX)
        return cd_fail("attn_prefill: q/out too large for 32-bit indexing");
    if (a->q.size < ((uint64_t)(a->n_tokens - 1) * qs + row) * 4 ||
        a->out.size < ((uint64_t)(a->n_tokens - 1) * os + row) * 4)
        return cd_fail("attn_prefill: q or out holds fewer than %u tokens", a->n_tokens);
    if (a->loc.size < 8ull * a->n_tokens) return cd_fail("attn_prefill: loc holds fewer than %u tokens", a->n_tokens);
    if (!a->table_stride || a->table.size < 4ull * a->table_stride)
        return cd_fail("attn_prefill: block table holds no row of %u pages", a->table_stride);
    uint64_t need = cvk_attn_prefill_partials_bytes(a->n_tokens, a->n_head, pool->n_parts, n_split, l->head_dim);
    if (need / 4 > UINT32_MAX) return cd_fail("attn_prefill: partials too large for 32-bit indexing");
    if (a->partials.size < need)
        return cd_fail("attn_prefill: partials hold %llu bytes, needs %llu (%u parts x %u splits)",
                       (unsigned long long)a->partials.size, (unsigned long long)need, pool->n_parts, n_split);
    return 0;
}

int cvk_attn_prefill(cvk_cmd *c, cvk_descpool *dp, const cvk_attn_prefill_pipes *p, const cvk_attn_prefill_args *a) {
    if (a->n_tokens == 0 || a->n_head == 0) return 0;
    const kv_layout *l = a->lay;
    const cvk_buffer *pool = a->pool;
    uint32_t row = a->n_head * l->head_dim;
    uint32_t qs = a->q_stride ? a->q_stride : row, os = a->out_stride ? a->out_stride : row;
    geometry g = geometry_of(p, a->n_tokens, a->n_head, l->n_head_kv, a->distinct_rows);
    uint64_t lim = (uint64_t)a->table_stride * l->page_tokens;
    if (a->max_len && a->max_len < lim) lim = a->max_len;
    if (lim > UINT32_MAX) lim = UINT32_MAX;
    uint64_t table_rows = a->table_stride ? a->table.size / 4 / a->table_stride : 0;
    uint32_t least = loop_limit_splits(p, g, lim, table_rows), n_split = a->n_split, split_max = 0;
    uint64_t step = p->step ? p->step : 1;
    if (a->split_len) { /* boundaries fixed per token: its result does not depend on the batch */
        uint64_t sl = ((uint64_t)a->split_len + step - 1) / step * step, longest = sl, n = (lim + sl - 1) / sl;
        if (a->n_split) {
            split_max = a->n_split;
            if (n > split_max) n = split_max;
            uint64_t need = lim ? (lim - 1) / split_max + 1 : 1; /* the token at lim - 1 (attn_split.glsl) */
            while (longest < need) longest *= 2;
        }
        if (longest * n > UINT32_MAX) /* split * len in the kernel, for every split of every token */
            return cd_fail("attn_prefill: splits of %llu positions overflow", (unsigned long long)longest);
        if (longest > loop_limit_positions(p, g, table_rows))
            return cd_fail("attn_prefill: splits of %llu positions exceed llvmpipe's loop limit (%llu at most)",
                           (unsigned long long)longest, (unsigned long long)loop_limit_positions(p, g, table_rows));
        n_split = (uint32_t)n;
    } else if (!n_split) { /* the default, lowered to what partials holds */
        n_split = cvk_attn_prefill_splits(p, l, a->n_tokens, a->n_head, (uint32_t)lim);
        uint64_t one = cvk_attn_prefill_partials_bytes(a->n_tokens, a->n_head, pool->n_parts, 2, l->head_dim) / 2;
        uint64_t fit = one ? a->partials.size / one : n_split;
        if (pool->n_parts == 1 && fit < 2) fit = 1; /* one split needs no partials */
        if (fit < n_split) n_split = fit ? (uint32_t)fit : 1;
        if (n_split < least) n_split = least; /* check() says when partials cannot hold that */
    } else if (n_split < least) {
        return cd_fail("attn_prefill: %u splits of %llu positions exceed llvmpipe's loop limit (at least %u)", n_split,
                       (unsigned long long)lim, least);
    }
    /* split s walks [s * split_len, (s + 1) * split_len), a multiple of the kernel's step (whole
     * tiles or steps); trailing splits may be empty */
    uint64_t split_len = lim;
    if (a->split_len) {
        split_len = ((uint64_t)a->split_len + step - 1) / step * step;
    } else if (n_split > 1) {
        uint64_t per = (lim + n_split - 1) / n_split;
        split_len = (per + step - 1) / step * step;
        if (split_len * n_split > UINT32_MAX)
            return cd_fail("attn_prefill: %u splits of %llu positions overflow", n_split,
                           (unsigned long long)split_len);
    }
    if (check(p, a, qs, os, g, n_split, lim)) return -1;
    float scale = a->scale != 0 ? a->scale : (float)(1.0 / sqrt((double)l->head_dim));
    uint64_t ppp = pool->part_bytes / l->page_bytes;
    bool combine = (uint64_t)pool->n_parts * n_split > 1;
    /* one part, one split: the kernel writes out directly and never touches partials; bind out there */
    cvk_view partials = combine ? a->partials : a->out;
    cvk_cmd_label_begin(c, "attn_prefill");
    for (uint32_t k = 0; k < pool->n_parts; k++) {
        cvk_attn_prefill_push pc = {a->n_tokens,
                                    a->n_head,
                                    l->n_head_kv,
                                    l->page_tokens,
                                    a->layer,
                                    a->table_stride,
                                    (uint32_t)(table_rows > UINT32_MAX ? UINT32_MAX : table_rows),
                                    (uint32_t)lim,
                                    qs,
                                    os,
                                    (uint32_t)(k * ppp),
                                    (uint32_t)(pool->parts[k].size / l->page_bytes),
                                    (uint32_t)(l->page_bytes / 4),
                                    k,
                                    pool->n_parts,
                                    g.hpw,
                                    g.tpw,
                                    scale,
                                    n_split,
                                    (uint32_t)split_len,
                                    split_max};
        cvk_view views[6] = {cvk_view_part(pool, k), a->q, a->table, a->loc, partials, a->out};
        VkDescriptorSet set;
        if (cvk_descset(dp, &p->tile, views, &set)) {
            cvk_cmd_label_end(c);
            return -1;
        }
        cvk_cmd_dispatch(c, &p->tile, set, &pc, g.n_x, l->n_head_kv * g.chunks, n_split);
    }
    if (combine) {
        cvk_barrier_compute_to_compute(c->cb);
        cvk_attn_combine_push cp = {a->n_head, pool->n_parts * n_split, os};
        cvk_view cviews[2] = {a->partials, a->out};
        VkDescriptorSet cset;
        if (cvk_descset(dp, &p->combine, cviews, &cset)) {
            cvk_cmd_label_end(c);
            return -1;
        }
        cvk_cmd_dispatch(c, &p->combine, cset, &cp, a->n_head, a->n_tokens, 1);
    }
    cvk_cmd_label_end(c);
    return 0;
}
