/* shaders/attn_prefill.comp and attn_prefill_lanes*.comp (+ attn_combine.comp for split
 * pools and split-K) against a
 * double-precision CPU implementation of cpu_ref.c's causal attention over the same fp16 K/V
 * the pool holds, each token at its own {table row, position}. Random pool contents and q;
 * block tables naming shuffled, non-contiguous pages; head_dim 64, 66, 68, 72 and 128; GQA 4/2, 8/2,
 * 32/4 (and 8/8, 64/1 wider than a workgroup); page_tokens 16 and 5; batches starting at
 * position 0, mid-page, on a page boundary, after a 700-token cached prefix, a single token
 * at positions 0, 15, 16 and 700, two rows interleaved and in blocks, token counts not a
 * multiple of the tile; the pool in one part and in many (results match); both kernels (tiled:
 * lanes per row 1..8, workgroups 32..256, K/V tiles 2..16; lanes: workgroups 1..32, rows 1..16,
 * 1..8 positions per step; hd 66, 68, 72 exercise its 32-, 64- and 128-bit loads, 64/128 the
 * 64-bit-integer ones); split-K at
 * 1..7 and 64 splits (not dividing the walk, empty splits), with parts, page-boundary and mid-page
 * starts, three table rows; batch-invariant splits that widen with the position (tiles that
 * straddle a doubling, every token alone = in the batch, bit for bit); the distinct-rows hint of
 * a decode step (same bits); the default split count and its partials; invalid locs give zeros;
 * argument errors; the push layout.
 * CINDER_ATTN_BENCH=1 times a 512-token prefill and 96 tokens after a 5000-token history instead
 * (see bench() and docs/kernels/attention.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/kv_layout.h"
#include "runtime/base/error.h"
#include "runtime/base/fp16.h"
#include "runtime/base/rng.h"
#include "runtime/vk/op_attn_prefill.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#define TOL 1e-3 /* per head vector, relative to its largest element */

/* A run of new tokens: count tokens of table row `row` at positions pos0, pos0 + 1, ... */
typedef struct seg {
    uint32_t row, pos0, count;
} seg;

typedef struct tcase {
    uint32_t head_dim, n_head, n_head_kv, page_tokens, n_layer, layer;
    const seg *segs;
    uint32_t n_segs;
    int interleave; /* tokens of the segments alternate (round robin) instead of one after another */
    float q_scale;  /* 0 = 1 */
} tcase;

/* The data of one case: pool, tables, q, loc, and the reference output. */
typedef struct scene {
    kv_layout lay;
    uint32_t n_tokens, n_rows, stride, n_pages, max_len;
    uint16_t *pool;
    uint32_t *table, *loc;
    float *q, *ref;
} scene;

static void scene_make(scene *s, const tcase *t, uint64_t seed, int with_ref) {
    rng r;
    rng_seed(&r, seed);
    memset(s, 0, sizeof *s);
    assert_int_equal(kv_layout_init(&s->lay, t->n_layer, t->n_head_kv, t->head_dim, t->page_tokens), 0);
    uint32_t pt = t->page_tokens, hd = t->head_dim;
    uint32_t len[8] = {0}; /* tokens in each table row: up to the last new token */
    for (uint32_t i = 0; i < t->n_segs; i++) {
        const seg *g = &t->segs[i];
        assert_true(g->row < 8);
        s->n_tokens += g->count;
        s->n_rows = g->row + 1 > s->n_rows ? g->row + 1 : s->n_rows;
        if (g->pos0 + g->count > len[g->row]) len[g->row] = g->pos0 + g->count;
    }
    uint32_t total_pages = 0;
    for (uint32_t i = 0; i < s->n_rows; i++) {
        s->max_len = len[i] > s->max_len ? len[i] : s->max_len;
        total_pages += (len[i] + pt - 1) / pt;
    }
    s->stride = (s->max_len + pt - 1) / pt + 1;
    s->n_pages = total_pages + total_pages / 4 + 3;
    size_t n_halves = (size_t)s->n_pages * s->lay.page_halves;
    s->pool = malloc(n_halves * 2);
    for (size_t i = 0; i < n_halves; i++) s->pool[i] = f32_to_fp16(rng_normal(&r));
    /* block tables: a shuffled permutation of the pool's pages, handed out in order */
    uint32_t *perm = malloc(s->n_pages * 4), next = 0;
    for (uint32_t i = 0; i < s->n_pages; i++) perm[i] = i;
    for (uint32_t i = s->n_pages - 1; i > 0; i--) {
        uint32_t j = rng_below(&r, i + 1), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    s->table = malloc((size_t)s->n_rows * s->stride * 4);
    for (uint32_t w = 0; w < s->n_rows; w++)
        for (uint32_t i = 0; i < s->stride; i++)
            s->table[w * s->stride + i] = i < (len[w] + pt - 1) / pt ? perm[next++] : 0xdeadbeef;
    free(perm);
    /* what no token attends to (spare pages, slots past a row's last token) is NaN, as memory
     * nothing wrote can be: a kernel that reads it, even weighed by 0, fails */
    bool *used = calloc((size_t)s->n_pages * pt, 1);
    for (uint32_t w = 0; w < s->n_rows; w++)
        for (uint32_t i = 0; i < len[w]; i++) used[(size_t)s->table[w * s->stride + i / pt] * pt + i % pt] = true;
    for (uint32_t pg = 0; pg < s->n_pages; pg++)
        for (uint32_t slot = 0; slot < pt; slot++)
            if (!used[(size_t)pg * pt + slot])
                for (uint32_t l = 0; l < s->lay.n_layer; l++)
                    for (uint32_t kv = 0; kv < 2; kv++)
                        for (uint32_t h = 0; h < s->lay.n_head_kv; h++)
                            for (uint32_t d = 0; d < hd; d++)
                                s->pool[kv_layout_index(&s->lay, pg, l, kv, h, slot, d)] = 0x7e00;
    free(used);
    /* loc: the segments one after another, or round robin */
    s->loc = malloc((size_t)s->n_tokens * 8);
    uint32_t n = 0, done[16] = {0};
    while (n < s->n_tokens)
        for (uint32_t i = 0; i < t->n_segs; i++) {
            uint32_t take = t->interleave ? 1 : t->segs[i].count;
            for (uint32_t k = 0; k < take && done[i] < t->segs[i].count; k++, done[i]++, n++) {
                s->loc[2 * n] = t->segs[i].row;
                s->loc[2 * n + 1] = t->segs[i].pos0 + done[i];
            }
        }
    size_t row = (size_t)t->n_head * hd;
    float qs = t->q_scale ? t->q_scale : 1.0f;
    s->q = malloc(s->n_tokens * row * 4);
    for (size_t i = 0; i < s->n_tokens * row; i++) s->q[i] = rng_normal(&r) * qs;
    s->ref = calloc(s->n_tokens * row, 4);
    if (with_ref)
        for (uint32_t i = 0; i < s->n_tokens; i++)
            tu_attn_reference(&s->lay, s->pool, s->q + i * row, s->table + s->loc[2 * i] * s->stride,
                              s->loc[2 * i + 1] + 1, t->n_head, t->layer, s->ref + i * row);
}

static void scene_free(scene *s) { free(s->pool), free(s->table), free(s->loc), free(s->q), free(s->ref); }

/* Pipelines built once per (head_dim, configuration) for the whole binary: lavapipe compiles the
 * unrolled kernel slowly, so the cases share them. Destroyed by teardown(). */
static struct {
    uint32_t hd;
    cvk_attn_prefill_cfg cfg;
    cvk_attn_prefill_pipes p;
} pcache[64];
static uint32_t n_pcache;

static const cvk_attn_prefill_pipes *pipes_for(uint32_t hd, const cvk_attn_prefill_cfg *cfg) {
    cvk_attn_prefill_cfg c = cfg ? *cfg : (cvk_attn_prefill_cfg){0};
    for (uint32_t i = 0; i < n_pcache; i++)
        if (pcache[i].hd == hd && !memcmp(&pcache[i].cfg, &c, sizeof c)) return &pcache[i].p;
    assert_true(n_pcache < 64);
    if (cvk_attn_prefill_pipeline_cfg(&pcache[n_pcache].p, &vk->dev, vk->pcache.cache, hd, &c))
        fail_msg("%s", cd_errmsg());
    pcache[n_pcache].hd = hd, pcache[n_pcache].cfg = c;
    return &pcache[n_pcache++].p;
}

static int teardown(void **state) {
    for (uint32_t i = 0; i < n_pcache; i++) cvk_attn_prefill_pipeline_destroy(&vk->dev, &pcache[i].p);
    n_pcache = 0;
    return vk_teardown(state);
}

/* How a run calls the op: the pool in parts of part_pages pages (0 = one part), n_split (0 = the
 * default), partials bytes (0 = what that split count needs; for the default split count
 * cvk_attn_prefill_partials_max), the kernel configuration (NULL = defaults). */
typedef struct runopt {
    uint32_t part_pages, n_split;
    uint32_t split_len; /* > 0: batch-invariant splits of at least this many positions, at most n_split */
    bool distinct_rows; /* the hint: every token of another row */
    uint64_t partials;
    const cvk_attn_prefill_cfg *cfg;
} runopt;

/* Runs the prefill op on the scene into out; returns the part count. */
static uint32_t run_gpu(const scene *s, const tcase *t, const runopt *o, float *out) {
    uint32_t hd = t->head_dim, part_pages = o->part_pages;
    const cvk_attn_prefill_cfg *cfg = o->cfg;
    size_t row = (size_t)t->n_head * hd;
    uint64_t saved_part = vk->mem.max_part;
    if (part_pages) vk->mem.max_part = part_pages * s->lay.page_bytes;
    cvk_buffer bpool, bq, btab, bloc, bpart, bout;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpool, (uint64_t)s->n_pages * s->lay.page_bytes, s->lay.page_bytes,
                                       CVK_MEM_DEVICE),
                     0);
    vk->mem.max_part = saved_part;
    if (part_pages) assert_true(bpool.n_parts > 2);
    const cvk_attn_prefill_pipes *p = pipes_for(hd, cfg);
    uint64_t pbytes = o->partials ? o->partials
        : o->n_split ? cvk_attn_prefill_partials_bytes(s->n_tokens, t->n_head, bpool.n_parts, o->n_split, hd)
                     : cvk_attn_prefill_partials_max(p, &s->lay, t->n_head, bpool.n_parts, s->n_tokens, s->max_len);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bq, s->n_tokens * row * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &btab, (uint64_t)s->n_rows * s->stride * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bloc, s->n_tokens * 8ull, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpart, pbytes ? pbytes : 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bout, s->n_tokens * row * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bpool), s->pool), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bq), s->q), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&btab), s->table), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bloc), s->loc), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_attn_prefill_args a = {.pool = &bpool,
                               .lay = &s->lay,
                               .q = cvk_view_whole(&bq),
                               .table = cvk_view_whole(&btab),
                               .loc = cvk_view_whole(&bloc),
                               .partials = cvk_view_whole(&bpart),
                               .out = cvk_view_whole(&bout),
                               .n_tokens = s->n_tokens,
                               .n_head = t->n_head,
                               .layer = t->layer,
                               .table_stride = s->stride,
                               .max_len = s->max_len,
                               .n_split = o->n_split,
                               .split_len = o->split_len,
                               .distinct_rows = o->distinct_rows};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    if (cvk_attn_prefill(&vk->cmd, &vk->dpool, p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bout), out), 0);
    uint32_t n_parts = bpool.n_parts;

    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &bpool);
    cvk_buffer_destroy(&vk->mem, &bq);
    cvk_buffer_destroy(&vk->mem, &btab);
    cvk_buffer_destroy(&vk->mem, &bloc);
    cvk_buffer_destroy(&vk->mem, &bpart);
    cvk_buffer_destroy(&vk->mem, &bout);
    return n_parts;
}

/* Worst error of got against want over every (token, head) vector, relative to the vector's max. */
static double compare(const scene *s, const tcase *t, const float *got, const float *want, const char *what) {
    uint32_t hd = t->head_dim;
    size_t row = (size_t)t->n_head * hd;
    double worst = 0;
    for (uint32_t i = 0; i < s->n_tokens; i++)
        for (uint32_t h = 0; h < t->n_head; h++) {
            const float *g = got + i * row + h * hd, *w = want + i * row + h * hd;
            double mx = 0;
            for (uint32_t d = 0; d < hd; d++) mx = fmax(mx, fabs(w[d]));
            for (uint32_t d = 0; d < hd; d++) {
                double e = fabs((double)g[d] - w[d]) / (mx + 1e-30);
                worst = fmax(worst, e);
                if (!(e <= TOL))
                    fail_msg("%s hd=%u heads=%u/%u pt=%u: token %u (row %u pos %u) head %u [%u] = %.7g, want %.7g",
                             what, hd, t->n_head, t->n_head_kv, t->page_tokens, i, s->loc[2 * i], s->loc[2 * i + 1], h,
                             d, g[d], w[d]);
            }
        }
    return worst;
}

/* The case against the reference with the pool in one part, then (o->part_pages != 0) in parts
 * of part_pages pages: both within TOL of the reference and of each other. */
static void run_case_opt(const tcase *t, uint64_t seed, const runopt *o) {
    scene s;
    scene_make(&s, t, seed, 1);
    size_t n = (size_t)s.n_tokens * t->n_head * t->head_dim;
    float *one = calloc(n, 4), *split = calloc(n, 4);
    runopt o1 = *o;
    o1.part_pages = 0;
    run_gpu(&s, t, &o1, one);
    double e1 = compare(&s, t, one, s.ref, "one part");
    double e2 = 0, e12 = 0;
    uint32_t parts = 1;
    if (o->part_pages) {
        parts = run_gpu(&s, t, o, split);
        e2 = compare(&s, t, split, s.ref, "parts");
        e12 = compare(&s, t, split, one, "parts vs one part");
    }
    const cvk_attn_prefill_cfg *cfg = o->cfg;
    const cvk_attn_prefill_pipes *p = pipes_for(t->head_dim, cfg);
    fprintf(stderr,
            "  hd=%u heads=%u/%u pt=%u tokens=%u max_len=%u %s wg=%u lpr=%u kt=%u rows=%u splits=%u: "
            "worst rel error %.2e (%u parts: %.2e, vs one part %.2e)\n",
            t->head_dim, t->n_head, t->n_head_kv, t->page_tokens, s.n_tokens, s.max_len,
            p->kernel == CVK_ATTN_PREFILL_LANES ? "lanes" : "tiled", p->wg, p->lanes_per_row, p->kv_tile, p->rows,
            o->n_split, e1, parts, e2, e12);
    free(one), free(split);
    scene_free(&s);
}

static void run_case(const tcase *t, uint64_t seed, uint32_t part_pages, const cvk_attn_prefill_cfg *cfg) {
    runopt o = {.part_pages = part_pages, .cfg = cfg};
    run_case_opt(t, seed, &o);
}

static void test_push_layout_matches_glsl(void **state) {
    (void)state;
    cvk_spirv_info si;
    const uint32_t *spv[] = {cinder_spv_attn_prefill, cinder_spv_attn_prefill_lanes, cinder_spv_attn_prefill_lanes_i64};
    const size_t size[] = {cinder_spv_attn_prefill_size, cinder_spv_attn_prefill_lanes_size,
                           cinder_spv_attn_prefill_lanes_i64_size};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(cvk_spirv_reflect(spv[k], size[k], &si), 0);
        assert_int_equal(si.n_push, 21);
        assert_int_equal(si.push_size, sizeof(cvk_attn_prefill_push));
        for (uint32_t i = 0; i < 21; i++) assert_int_equal(si.push_offset[i], 4 * i); /* all 32-bit, in order */
        assert_int_equal(si.n_bindings, 6);
    }
    assert_int_equal(offsetof(cvk_attn_prefill_push, scale), 68);
    assert_int_equal(offsetof(cvk_attn_prefill_push, split_len), 76);
    assert_int_equal(offsetof(cvk_attn_prefill_push, split_max), 80);
    assert_int_equal(cvk_spirv_reflect(cinder_spv_attn_combine, cinder_spv_attn_combine_size, &si), 0);
    assert_int_equal(si.n_push, 3);
    assert_int_equal(si.push_size, sizeof(cvk_attn_combine_push));
    assert_int_equal(si.n_bindings, 2);
}

/* One sequence, batches at awkward starts and lengths, page sizes 16 and 5 */
static void test_one_sequence(void **state) {
    (void)state;
    const seg from0[] = {{0, 0, 37}}, mid[] = {{0, 7, 29}}, boundary[] = {{0, 32, 50}}, prefix[] = {{0, 700, 5}};
    const struct { const seg *s; } batches[] = {{from0}, {mid}, {boundary}, {prefix}};
    const uint32_t dims[][3] = {{128, 4, 2}, {64, 8, 2}, {128, 32, 4}};
    uint64_t seed = 1;
    for (uint32_t d = 0; d < 3; d++)
        for (uint32_t pt = 0; pt < 2; pt++)
            for (uint32_t b = 0; b < 4; b++) {
                tcase c = {.head_dim = dims[d][0],
                           .n_head = dims[d][1],
                           .n_head_kv = dims[d][2],
                           .page_tokens = pt ? 5 : 16,
                           .n_layer = 2,
                           .layer = (uint32_t)(b & 1),
                           .segs = batches[b].s,
                           .n_segs = 1};
                run_case(&c, seed++, 0, NULL);
            }
    /* head_dim 72, 68, 66: rows that are not whole 64-bit (lanes) or 4-wide (tiled) loads */
    const seg mixed[] = {{0, 7, 29}, {1, 700, 3}};
    tcase c = {.head_dim = 72, .n_head = 8, .n_head_kv = 2, .page_tokens = 5, .n_layer = 1, .segs = mixed, .n_segs = 2};
    run_case(&c, seed++, 0, NULL);
    c.head_dim = 68; /* rows of 17 uvec2 */
    run_case(&c, seed++, 0, NULL);
    c.head_dim = 66; /* rows of 33 uints */
    run_case(&c, seed++, 0, NULL);
}

/* Two sequences in one batch, one after the other and interleaved token by token */
static void test_mixed_rows(void **state) {
    (void)state;
    const seg two[] = {{1, 3, 21}, {0, 40, 19}}, three[] = {{2, 0, 9}, {0, 16, 17}, {1, 95, 4}};
    tcase c = {.head_dim = 128, .n_head = 8, .n_head_kv = 2, .page_tokens = 16, .n_layer = 1, .segs = two, .n_segs = 2};
    run_case(&c, 50, 0, NULL);
    c.interleave = 1;
    run_case(&c, 51, 0, NULL);
    c.page_tokens = 5, c.segs = three, c.n_segs = 3;
    run_case(&c, 52, 0, NULL);
    c.interleave = 0, c.head_dim = 64, c.n_head = 4;
    run_case(&c, 53, 0, NULL);
}

/* The pool in parts of a few pages: one dispatch per part + combine; results match the one-part run */
static void test_parts(void **state) {
    (void)state;
    const seg prefix[] = {{0, 700, 5}}, two[] = {{0, 0, 70}, {1, 30, 33}};
    tcase c = {.head_dim = 128,
               .n_head = 8,
               .n_head_kv = 2,
               .page_tokens = 16,
               .n_layer = 4,
               .layer = 3,
               .segs = prefix,
               .n_segs = 1};
    run_case(&c, 60, 16, NULL);
    c.segs = two, c.n_segs = 2, c.interleave = 1;
    run_case(&c, 61, 3, NULL);
    c.page_tokens = 5;
    run_case(&c, 62, 7, NULL);
}

/* Configurations of either kernel: tiled (workgroup, lanes per row, K/V tile), lanes (workgroup,
 * positions per invocation and step, rows per workgroup) */
#define TILED(w, l, k)                                                                                                 \
    { .wg = w, .lanes_per_row = l, .kv_tile = k, .kernel = CVK_ATTN_PREFILL_TILED }
#define LANES(w, k, r)                                                                                                 \
    { .wg = w, .kv_tile = k, .rows = r, .kernel = CVK_ATTN_PREFILL_LANES }

/* Configurations of both kernels beside the defaults: lanes per row 1/4/8 (subgroup shuffles),
 * small and large workgroups, a K/V tile that does not divide the page (5 over pages of 5 and
 * 16), GQA groups wider than a workgroup's rows (head chunks) and group 1, lanes kernels with
 * one row, odd rows and one invocation. Each configuration is its own pipeline, and lavapipe
 * compiles one in ~25 s with a cold shader cache, so every case here shares one head size and
 * page size (one pipeline per configuration): the list is the few that reach different code. */
static void test_configs(void **state) {
    (void)state;
    const seg two[] = {{0, 5, 45}, {1, 0, 20}};
    uint32_t sg = vk->dev.info.caps.min_subgroup_size;
    const cvk_attn_prefill_cfg cfgs[] = {
        TILED(64, 4, 5),
        TILED(32, 8, 16),
        TILED(256, 1, 16),
        LANES(8, 1, 1),
        LANES(16, 3, 3),
        LANES(1, 5, 8),
        /* the lanes kernel's storage-buffer loads (a device without texel views for its parts) */
        {.kernel = CVK_ATTN_PREFILL_LANES, .storage_loads = true},
    };
    uint64_t seed = 70;
    for (uint32_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        if (cfgs[i].lanes_per_row > sg) continue;
        tcase c = {.head_dim = 64,
                   .n_head = 8,
                   .n_head_kv = 2,
                   .page_tokens = 5,
                   .n_layer = 1,
                   .segs = two,
                   .n_segs = 2,
                   .interleave = (int)(i & 1)};
        run_case(&c, seed++, i == 0 ? 2 : 0, &cfgs[i]);
        c.n_head_kv = 8; /* group 1 */
        run_case(&c, seed++, 0, &cfgs[i]);
        c.n_head = 64, c.n_head_kv = 1; /* group 64: wider than some workgroups' rows */
        run_case(&c, seed++, 0, &cfgs[i]);
    }
}

/* Split-K: the K/V walk cut into n_split ranges, merged by the combine pass, on both kernels (and
 * the lanes kernel built for the page size): split counts that divide the walk and that do not,
 * more splits than steps (empty splits), starts on a page boundary and mid-page, three table
 * rows (in blocks and interleaved), page size 5, splits x pool parts. */
static void test_splits(void **state) {
    (void)state;
    const cvk_attn_prefill_kernel T = CVK_ATTN_PREFILL_TILED, L = CVK_ATTN_PREFILL_LANES;
    const cvk_attn_prefill_cfg cfgs[] = {{0}, {.kernel = T}, {.kernel = L, .rows = 3, .kv_tile = 4}};
    const seg hist[] = {{0, 1000, 23}};                        /* a few tokens after a long history */
    const seg bound[] = {{0, 480, 40}};                        /* starts on a page boundary */
    const seg mid[] = {{1, 205, 30}, {0, 0, 3}};               /* mid-page, and a second row */
    const seg rows3[] = {{2, 0, 9}, {0, 300, 17}, {1, 95, 4}}; /* three table rows */
    uint64_t seed = 200;
    for (uint32_t k = 0; k < 3; k++) {
        const cvk_attn_prefill_cfg *cfg = &cfgs[k];
        tcase c = {.head_dim = 128,
                   .n_head = 8,
                   .n_head_kv = 2,
                   .page_tokens = 16,
                   .n_layer = 2,
                   .layer = 1,
                   .segs = hist,
                   .n_segs = 1};
        const uint32_t splits[] = {1, 2, 3, 7};
        for (uint32_t i = 0; i < 4; i++) {
            runopt o = {.n_split = splits[i], .cfg = cfg};
            run_case_opt(&c, seed++, &o);
        }
        runopt o = {.n_split = 64, .cfg = cfg}; /* 64 splits of a 523-token walk: most are empty */
        c.segs = bound, c.head_dim = 64, c.n_head = 4;
        run_case_opt(&c, seed++, &o);
        o.n_split = 5, o.part_pages = 7; /* 5 splits x the pool's parts */
        c.segs = mid, c.n_segs = 2, c.interleave = 1;
        run_case_opt(&c, seed++, &o);
        o.n_split = 3, o.part_pages = 0;
        c.segs = rows3, c.n_segs = 3, c.page_tokens = 5, c.head_dim = 72, c.n_head = 8;
        run_case_opt(&c, seed++, &o);
        c.interleave = 0, o.n_split = 4;
        run_case_opt(&c, seed++, &o);
    }
}

/* Batch-invariant splits that widen with the position (the engine's): split_len positions at
 * least, doubled per token until it needs at most n_split splits. Against the reference with
 * batches whose token tiles straddle a doubling (two split lengths in one workgroup), three rows
 * interleaved, the pool in parts; and every token of a batch alone (its own max_len, so another
 * split count in the dispatch, down to one) gives the same bits as in the batch. */
static void test_growing_splits(void **state) {
    (void)state;
    const cvk_attn_prefill_kernel T = CVK_ATTN_PREFILL_TILED, L = CVK_ATTN_PREFILL_LANES;
    const cvk_attn_prefill_cfg cfgs[] = {{0}, {.kernel = T}, {.kernel = L, .rows = 3, .kv_tile = 4}};
    const seg cross[] = {{0, 500, 30}, {0, 1010, 21}};           /* len doubles at pos + 1 = 513 and 1025 */
    const seg rows3[] = {{2, 0, 9}, {0, 300, 17}, {1, 1020, 6}}; /* three rows, three lengths */
    uint64_t seed = 900;
    for (uint32_t k = 0; k < 3; k++) {
        const cvk_attn_prefill_cfg *cfg = &cfgs[k];
        tcase c = {.head_dim = 64,
                   .n_head = 8,
                   .n_head_kv = 2,
                   .page_tokens = 16,
                   .n_layer = 2,
                   .layer = 1,
                   .segs = cross,
                   .n_segs = 2};
        runopt o = {.n_split = 4, .split_len = 32, .cfg = cfg};
        run_case_opt(&c, seed++, &o);
        o.part_pages = 9;
        c.segs = rows3, c.n_segs = 3, c.interleave = 1, c.page_tokens = 5, c.head_dim = 72;
        run_case_opt(&c, seed++, &o);
    }
    /* alone = in the batch, bit for bit (both kernels) */
    for (uint32_t k = 0; k < 2; k++) {
        tcase c = {
            .head_dim = 64, .n_head = 8, .n_head_kv = 2, .page_tokens = 16, .n_layer = 1, .segs = cross, .n_segs = 2};
        runopt o = {.n_split = 4, .split_len = 32, .cfg = &cfgs[k]};
        scene s;
        scene_make(&s, &c, 950 + k, 0);
        size_t row = (size_t)c.n_head * c.head_dim;
        float *all = calloc(s.n_tokens * row, 4), *one = calloc(row, 4);
        run_gpu(&s, &c, &o, all);
        for (uint32_t i = 0; i < s.n_tokens; i += 3) {
            scene a = s;
            a.n_tokens = 1, a.q = s.q + i * row, a.loc = s.loc + 2 * i, a.max_len = s.loc[2 * i + 1] + 1;
            run_gpu(&a, &c, &o, one);
            if (memcmp(one, all + i * row, row * 4))
                fail_msg("%s: token %u (pos %u) alone differs from the batch", k ? "tiled" : "default kernel", i,
                         s.loc[2 * i + 1]);
        }
        free(all), free(one);
        scene_free(&s);
    }
}

/* A decode step: one token of each of 6 rows at different lengths. With the distinct-rows hint
 * (the tiled kernel then gives each token its own workgroup) the result is the reference's and
 * the same bits as without it, for both kernels, with growing splits and the pool in parts. */
static void test_distinct_rows_hint(void **state) {
    (void)state;
    const seg step[] = {{0, 700, 1}, {1, 40, 1}, {2, 1500, 1}, {3, 0, 1}, {4, 333, 1}, {5, 1023, 1}};
    const cvk_attn_prefill_cfg cfgs[] = {{.kernel = CVK_ATTN_PREFILL_TILED}, {.kernel = CVK_ATTN_PREFILL_LANES}};
    for (uint32_t k = 0; k < 2; k++) {
        tcase c = {
            .head_dim = 64, .n_head = 8, .n_head_kv = 2, .page_tokens = 16, .n_layer = 1, .segs = step, .n_segs = 6};
        scene s;
        scene_make(&s, &c, 960 + k, 1);
        size_t n = (size_t)s.n_tokens * c.n_head * c.head_dim;
        float *with = calloc(n, 4), *without = calloc(n, 4);
        for (uint32_t parts = 0; parts < 2; parts++) {
            runopt o = {.n_split = 4, .split_len = 32, .cfg = &cfgs[k], .part_pages = parts ? 11 : 0};
            run_gpu(&s, &c, &o, without);
            o.distinct_rows = true;
            run_gpu(&s, &c, &o, with);
            compare(&s, &c, with, s.ref, "distinct rows hint");
            if (memcmp(with, without, n * 4)) fail_msg("%s: the hint changed the bits", k ? "lanes" : "tiled");
        }
        free(with), free(without);
        scene_free(&s);
    }
}

/* The default split count: several for a few tokens after a long history (one workgroup, a
 * CPU device taken to have 4 threads), one for a long prompt; it fits in
 * cvk_attn_prefill_partials_max, and a smaller partials buffer lowers it (results unchanged). */
static void test_default_splits(void **state) {
    (void)state;
    const seg few[] = {{0, 4000, 2}};
    tcase c = {.head_dim = 64, .n_head = 4, .n_head_kv = 1, .page_tokens = 16, .n_layer = 1, .segs = few, .n_segs = 1};
    const cvk_attn_prefill_pipes *p = pipes_for(c.head_dim, NULL);
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 1, 1, 64, 16), 0);
    const char *saved = getenv("LP_NUM_THREADS"); /* read by the op at each call (lavapipe has its threads) */
    char *keep = saved ? strdup(saved) : NULL;
    setenv("LP_NUM_THREADS", "4", 1);
    uint32_t n2 = cvk_attn_prefill_splits(p, &lay, 2, 4, 4002), n512 = cvk_attn_prefill_splits(p, &lay, 512, 4, 512);
    uint64_t most = cvk_attn_prefill_partials_max(p, &lay, 4, 1, 512, 4002);
    if (keep) setenv("LP_NUM_THREADS", keep, 1), free(keep);
    else unsetenv("LP_NUM_THREADS");
    fprintf(stderr, "  default splits: 2 tokens at 4000: %u, 512 tokens from 0: %u\n", n2, n512);
    assert_true(n2 >= 2 && n2 <= 64);
    assert_true(n512 < n2);
    assert_true(most >= cvk_attn_prefill_partials_bytes(2, 4, 1, n2, 64));
    runopt o = {0};
    run_case_opt(&c, 300, &o);                                          /* the default count, partials_max */
    o.partials = cvk_attn_prefill_partials_bytes(2, 4, 1, 2, 64) + 100; /* room for 2 splits only */
    run_case_opt(&c, 301, &o);
    o.partials = 4; /* none: one split */
    run_case_opt(&c, 302, &o);
}

static void test_large_scores(void **state) {
    (void)state;
    /* scores of a few hundred: exp overflows unless the running max is subtracted */
    const seg b[] = {{0, 10, 40}};
    tcase c = {.head_dim = 128,
               .n_head = 4,
               .n_head_kv = 2,
               .page_tokens = 16,
               .n_layer = 1,
               .q_scale = 30.0f,
               .segs = b,
               .n_segs = 1};
    run_case(&c, 80, 0, NULL);
}

/* One token at position pos, alone in its batch (a decode step's shape) */
static void test_single_token(void **state) {
    (void)state;
    const uint32_t pos[] = {0, 15, 16, 700};
    for (uint32_t k = 0; k < 4; k++) {
        const seg one[] = {{1, pos[k], 1}, {0, 0, 0}};
        tcase t = {
            .head_dim = 128, .n_head = 8, .n_head_kv = 2, .page_tokens = 16, .n_layer = 1, .segs = one, .n_segs = 2};
        scene s;
        scene_make(&s, &t, 90 + k, 1);
        size_t row = (size_t)t.n_head * t.head_dim;
        float *pre = calloc(row, 4);
        runopt o = {0};
        run_gpu(&s, &t, &o, pre);
        compare(&s, &t, pre, s.ref, "single token");
        free(pre);
        scene_free(&s);
    }
}

/* A token whose row is past the table or whose position is >= max_len gets zeros, and reads nothing */
static void test_invalid_locs_give_zeros(void **state) {
    (void)state;
    const seg b[] = {{0, 0, 20}};
    tcase t = {.head_dim = 64, .n_head = 4, .n_head_kv = 2, .page_tokens = 16, .n_layer = 1, .segs = b, .n_segs = 1};
    scene s;
    scene_make(&s, &t, 95, 1);
    s.loc[2 * 3] = 5;            /* row 5 of a 1-row table */
    s.loc[2 * 7 + 1] = 1u << 30; /* far past max_len and the table */
    s.loc[2 * 19 + 1] = 20;      /* == max_len */
    size_t row = (size_t)t.n_head * t.head_dim;
    float *out = calloc(s.n_tokens * row, 4);
    memset(s.ref + 3 * row, 0, row * 4);
    memset(s.ref + 7 * row, 0, row * 4);
    memset(s.ref + 19 * row, 0, row * 4);
    runopt o = {0};
    run_gpu(&s, &t, &o, out);
    for (size_t i = 0; i < row; i++) {
        assert_true(out[3 * row + i] == 0.0f);
        assert_true(out[7 * row + i] == 0.0f);
        assert_true(out[19 * row + i] == 0.0f);
    }
    compare(&s, &t, out, s.ref, "invalid locs");
    free(out);
    scene_free(&s);
}

static void test_bad_args(void **state) {
    (void)state;
    kv_layout lay;
    assert_int_equal(kv_layout_init(&lay, 1, 2, 64, 16), 0);
    cvk_attn_prefill_pipes p;
    assert_int_equal(cvk_attn_prefill_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 63, 0), -1);
    assert_int_equal(cvk_attn_prefill_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64, 48), -1);
    const cvk_attn_prefill_kernel T = CVK_ATTN_PREFILL_TILED, L = CVK_ATTN_PREFILL_LANES;
    cvk_attn_prefill_cfg bad_lpr = {.lanes_per_row = 3, .kernel = T};
    assert_int_equal(cvk_attn_prefill_pipeline_cfg(&p, &vk->dev, VK_NULL_HANDLE, 64, &bad_lpr), -1);
    cvk_attn_prefill_cfg bad_kt = {.wg = 32, .kv_tile = 64, .kernel = T};
    assert_int_equal(cvk_attn_prefill_pipeline_cfg(&p, &vk->dev, VK_NULL_HANDLE, 64, &bad_kt), -1);
    cvk_attn_prefill_cfg odd_lpr = {.lanes_per_row = 4, .kernel = T}; /* 4 does not divide 70... */
    assert_int_equal(cvk_attn_prefill_pipeline_cfg(&p, &vk->dev, VK_NULL_HANDLE, 70, &odd_lpr), -1);
    cvk_attn_prefill_cfg bad_lanes[] = {{.rows = 65, .kernel = L},
                                        {.kv_tile = 33, .kernel = L},
                                        {.wg = 12, .kernel = L},
                                        {.lanes_per_row = 2, .kernel = L}};
    for (int i = 0; i < 4; i++)
        assert_int_equal(cvk_attn_prefill_pipeline_cfg(&p, &vk->dev, VK_NULL_HANDLE, 64, &bad_lanes[i]), -1);
    assert_int_equal(cvk_attn_prefill_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 70, 0), 0); /* ...the default adapts */
    assert_int_equal(p.head_dim % p.lanes_per_row, 0);
    cvk_attn_prefill_pipeline_destroy(&vk->dev, &p);
    assert_int_equal(cvk_attn_prefill_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 128, 0), 0);
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4 * lay.page_bytes, lay.page_bytes, CVK_MEM_DEVICE), 0);
    cvk_attn_prefill_args a = {.pool = &b,
                               .lay = &lay,
                               .q = cvk_view_whole(&b),
                               .table = cvk_view_whole(&b),
                               .loc = cvk_view_whole(&b),
                               .out = cvk_view_whole(&b),
                               .n_tokens = 1,
                               .n_head = 4,
                               .table_stride = 1};
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1); /* head_dim 128 pipelines, 64 layout */
    assert_non_null(strstr(cd_errmsg(), "head_dim"));
    cvk_attn_prefill_pipeline_destroy(&vk->dev, &p);
    assert_int_equal(cvk_attn_prefill_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 64, 0), 0);
    a.n_head = 3;
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1); /* 3 heads over 2 kv heads */
    a.n_head = 4, a.layer = 1;
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.layer = 0, a.loc = cvk_view_range(&b, 0, 4);
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "loc"));
    a.loc = cvk_view_whole(&b), a.q_stride = 100;
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "stride"));
    a.q_stride = 0, a.q = cvk_view_range(&b, 0, 1000);
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.q = cvk_view_whole(&b), a.table_stride = 0;
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1);
    a.table_stride = 1, a.n_tokens = 0;
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), 0); /* nothing to do */
    cvk_buffer_destroy(&vk->mem, &b);
    /* a split pool needs partials */
    uint64_t saved = vk->mem.max_part;
    vk->mem.max_part = lay.page_bytes;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, 4 * lay.page_bytes, lay.page_bytes, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    assert_true(b.n_parts == 4);
    a.pool = &b, a.n_tokens = 1, a.q = a.table = a.loc = a.out = cvk_view_part(&b, 0);
    a.partials = (cvk_view){0};
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "partials"));
    a.partials = cvk_view_range(&b, 0, cvk_attn_prefill_partials_bytes(1, 4, 4, 1, 64)), a.n_split = 2;
    assert_int_equal(cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a), -1); /* an explicit count must fit */
    assert_non_null(strstr(cd_errmsg(), "partials"));
    a.n_split = 0;
    cvk_attn_prefill_pipeline_destroy(&vk->dev, &p);
    cvk_attn_prefill_cfg bad_kernel = {.kernel = (cvk_attn_prefill_kernel)7};
    assert_int_equal(cvk_attn_prefill_pipeline_cfg(&p, &vk->dev, VK_NULL_HANDLE, 64, &bad_kernel), -1);
    assert_int_equal(cvk_attn_prefill_partials_bytes(10, 4, 1, 1, 64), 0);
    assert_int_equal(cvk_attn_prefill_partials_bytes(10, 4, 3, 1, 64), 10 * 4 * 3 * 66 * 4);
    assert_int_equal(cvk_attn_prefill_partials_bytes(10, 4, 1, 5, 64), 10 * 4 * 5 * 66 * 4);
    assert_int_equal(cvk_attn_prefill_partials_bytes(10, 4, 3, 5, 64), 10 * 4 * 15 * 66 * 4);
    cvk_attn_prefill_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &b);
}

/* --- timing (CINDER_ATTN_BENCH=1) --- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A benchmark shape: count new tokens at positions pos0.. of one sequence (the history before
 * pos0 already in the pool), n_head query heads over n_head_kv kv heads, page 16, one layer. */
typedef struct bshape {
    const char *name;
    uint32_t head_dim, n_head, n_head_kv, pos0, count;
} bshape;

static void bench_one(const bshape *b, const cvk_attn_prefill_cfg *cfg) {
    const seg g[] = {{0, b->pos0, b->count}};
    tcase t = {.head_dim = b->head_dim,
               .n_head = b->n_head,
               .n_head_kv = b->n_head_kv,
               .page_tokens = 16,
               .n_layer = 1,
               .segs = g,
               .n_segs = 1};
    scene s;
    scene_make(&s, &t, 7, 0);
    size_t row = (size_t)t.n_head * t.head_dim;
    cvk_buffer bpool, bq, btab, bloc, bpart, bout;
    assert_int_equal(
        cvk_buffer_create(&vk->mem, &bpool, (uint64_t)s.n_pages * s.lay.page_bytes, s.lay.page_bytes, CVK_MEM_DEVICE),
        0);
    cvk_attn_prefill_pipes p;
    double tc = now_s();
    if (cvk_attn_prefill_pipeline_cfg(&p, &vk->dev, vk->pcache.cache, t.head_dim, cfg)) fail_msg("%s", cd_errmsg());
    tc = now_s() - tc;
    uint64_t pbytes = cvk_attn_prefill_partials_max(&p, &s.lay, t.n_head, bpool.n_parts, s.n_tokens, s.max_len);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bq, s.n_tokens * row * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &btab, (uint64_t)s.stride * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bloc, s.n_tokens * 8ull, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bpart, pbytes ? pbytes : 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bout, s.n_tokens * row * 4, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bpool), s.pool), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bq), s.q), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&btab), s.table), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bloc), s.loc), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_attn_prefill_args a = {.pool = &bpool,
                               .lay = &s.lay,
                               .q = cvk_view_whole(&bq),
                               .table = cvk_view_whole(&btab),
                               .loc = cvk_view_whole(&bloc),
                               .partials = cvk_view_whole(&bpart),
                               .out = cvk_view_whole(&bout),
                               .n_tokens = s.n_tokens,
                               .n_head = t.n_head,
                               .table_stride = s.stride,
                               .max_len = s.max_len};
    const char *es = getenv("CINDER_ATTN_BENCH_SPLIT");
    a.n_split = es ? (uint32_t)atoi(es) : 0;
    if (a.n_split && a.n_split * (uint64_t)s.n_tokens * t.n_head * (t.head_dim + 2) * 4 > bpart.size)
        fail_msg("CINDER_ATTN_BENCH_SPLIT=%u: more than the bench's partials hold", a.n_split);
    assert_int_equal(cvk_cmd_begin_reusable(&vk->cmd), 0);
    if (cvk_attn_prefill(&vk->cmd, &vk->dpool, &p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_end(&vk->cmd), 0);
    double best = 1e30;
    const char *er = getenv("CINDER_ATTN_BENCH_REPS");
    int reps = er && atoi(er) > 0 ? atoi(er) : 5;
    for (int k = 0; k < reps; k++) {
        double t0 = now_s();
        assert_int_equal(cvk_cmd_submit(&vk->cmd), 0);
        assert_int_equal(cvk_cmd_wait(&vk->cmd), 0);
        best = fmin(best, now_s() - t0);
    }
    /* useful work: QK and PV over positions 0..pos of each token, per query head */
    double pairs = 0;
    for (uint32_t i = 0; i < b->count; i++) pairs += b->pos0 + i + 1.0;
    double flop = 2.0 * 2 * t.n_head * t.head_dim * pairs;
    uint32_t splits = a.n_split ? a.n_split : cvk_attn_prefill_splits(&p, &s.lay, s.n_tokens, t.n_head, s.max_len);
    printf("  bench %-20s heads %u/%u hd %u, %u tokens at %u, %s wg=%u lpr=%u kt=%u rows=%u splits=%u: %8.2f ms "
           "(%.2f GFLOP/s useful; pipeline build %.1f s)\n",
           b->name, b->n_head, b->n_head_kv, b->head_dim, b->count, b->pos0,
           p.kernel != CVK_ATTN_PREFILL_LANES ? "tiled"
               : p.texel                      ? "lanes/texel"
                                              : "lanes",
           p.wg, p.lanes_per_row, p.kv_tile, p.rows, splits, best * 1e3, flop / best * 1e-9, tc);
    fflush(stdout);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_attn_prefill_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &bpool);
    cvk_buffer_destroy(&vk->mem, &bq);
    cvk_buffer_destroy(&vk->mem, &btab);
    cvk_buffer_destroy(&vk->mem, &bloc);
    cvk_buffer_destroy(&vk->mem, &bpart);
    cvk_buffer_destroy(&vk->mem, &bout);
    scene_free(&s);
}

/* A timing run, not a test: only with CINDER_ATTN_BENCH=1 (see docs/kernels/attention.md).
 * CINDER_ATTN_BENCH=<name> runs only the shapes whose name contains it; CINDER_ATTN_BENCH_CFG=
 * wg,lpr,kt[,kernel,rows,storage] (cvk_attn_prefill_cfg, kernel 1 tiled, 2 lanes; storage 1: the
 * lanes kernel's storage-buffer loads instead of texels)
 * times that one configuration instead of the list below; CINDER_ATTN_BENCH_REPS=n takes the best of n
 * runs (default 5); CINDER_ATTN_BENCH_SPLIT=n forces n splits of the K/V walk. */
static void bench(void **state) {
    (void)state;
    const bshape shapes[] = {
        {"from0-512", 128, 8, 2, 0, 512},               /* a 512-token prompt from an empty context */
        {"hist5000-96-tiny", 64, 4, 2, 5000, 96},       /* a new turn after a cached history: tiny */
        {"hist5000-96-qwen3moe", 128, 32, 4, 5000, 96}, /* the same on Qwen3-30B-A3B's attention */
        {"hist5000-4-tiny", 64, 4, 2, 5000, 4},         /* a few tokens: split-K makes the workgroups */
    };
    const cvk_attn_prefill_cfg cfgs[] = {
        {0}, {.kernel = CVK_ATTN_PREFILL_TILED}, TILED(128, 1, 16), TILED(64, 4, 16), TILED(256, 4, 16)};
    const char *e = getenv("CINDER_ATTN_BENCH"), *ec = getenv("CINDER_ATTN_BENCH_CFG");
    int all = !strcmp(e, "1");
    cvk_attn_prefill_cfg one = {0};
    uint32_t kernel = 0, storage = 0;
    if (ec) sscanf(ec, "%u,%u,%u,%u,%u,%u", &one.wg, &one.lanes_per_row, &one.kv_tile, &kernel, &one.rows, &storage);
    one.kernel = (cvk_attn_prefill_kernel)kernel, one.storage_loads = storage != 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (!all && !strstr(shapes[i].name, e)) continue;
        size_t n = ec ? 1 : sizeof cfgs / sizeof *cfgs;
        for (size_t c = 0; c < n; c++) {
            const cvk_attn_prefill_cfg *cf = ec ? &one : &cfgs[c];
            if (cf->lanes_per_row > vk->dev.info.caps.min_subgroup_size) continue;
            if (i > 0 && !ec && c > 1) break; /* the long-history shapes: the default and the tiled kernel */
            bench_one(&shapes[i], cf);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout_matches_glsl),
        cmocka_unit_test(test_one_sequence),
        cmocka_unit_test(test_mixed_rows),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_growing_splits),
        cmocka_unit_test(test_distinct_rows_hint),
        cmocka_unit_test(test_default_splits),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_single_token),
        cmocka_unit_test(test_invalid_locs_give_zeros),
        cmocka_unit_test(test_bad_args),
    };
    const char *f = getenv("CINDER_TEST_FILTER"); /* e.g. test_splits, or test_* patterns */
    if (f && *f) cmocka_set_test_filter(f);
    const char *e = getenv("CINDER_ATTN_BENCH");
    if (e && *e && *e != '0') {
        const struct CMUnitTest timing[] = {cmocka_unit_test(bench)};
        return tu_status(cmocka_run_group_tests(timing, vk_setup, teardown));
    }
    return tu_status(cmocka_run_group_tests(tests, vk_setup, teardown));
}
