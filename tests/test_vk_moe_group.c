/* shaders/moe_group.comp, and the GPU-side MoE FFN chain it feeds.
 *
 * moe_group alone: groups / gather / scatter compared exactly with a host counting sort
 * (stable by expert, then pair index), list tails of -1 included, on random ids with
 * out-of-range ones (negative and >= n_expert), duplicates, T not a multiple of anything,
 * experts with no tokens, every token on one expert, nothing kept, 4096 tokens x 8, 256
 * experts, several workgroup sizes.
 *
 * The chain, as the forward pass runs a MoE FFN over T tokens (no host round trip):
 *   moe_group(logits) -> ids, w, groups, gather, scatter (routing, then grouping)
 *   hg = matmul(gate_exps, xb, gather, scatter, groups); hu likewise with up_exps
 *   swiglu(hg, hu) over T*k rows; eo = matmul(down_exps, hg, gather = scatter = scatter list)
 *   moe_combine(x, eo, w, rows = T)
 * against cpu_ref.c moe() order on the router's ids and weights (downloaded for the
 * reference): per pair double dot products on quant_dequantize_row weights, silu in float,
 * weighted sum in float from slot 0, added into x. Q4_K / Q6_K / F32 weights (mixed as in
 * real files), T = 1, 7, 100, 333, 8 and 128 experts, k = 2 and 8, weights split into parts.
 *
 * CINDER_MOE_BENCH=1 runs, instead of the tests, a timing of the chain at the small
 * preset's shape (n_embd 512, n_ff 256, 16 experts, k 4, 512 tokens, Q4_K);
 * CINDER_MOE_BENCH_SHAPE=n_embd,n_ff,n_expert,k,T varies it (docs/kernels/matmul.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/gguf/quant.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/op_matmul.h"
#include "runtime/vk/op_moe_combine.h"
#include "runtime/vk/op_moe_group.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

static cvk_pipeline group_pipe;

static int setup(void **state) {
    if (vk_setup(state)) return -1;
    return cvk_moe_group_pipeline(&group_pipe, &vk->dev, vk->pcache.cache, 0);
}

static int teardown(void **state) {
    cvk_pipeline_destroy(&vk->dev, &group_pipe);
    return vk_teardown(state);
}

static void test_push_layout(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_moe_group, cinder_spv_moe_group_size, &si), 0);
    const uint32_t rt = offsetof(cvk_moe_group_push, row_tiles);
    const uint32_t want[] = {offsetof(cvk_moe_group_push, n_expert),
                             offsetof(cvk_moe_group_push, n_tokens),
                             offsetof(cvk_moe_group_push, k),
                             offsetof(cvk_moe_group_push, tile0),
                             offsetof(cvk_moe_group_push, tile1),
                             offsetof(cvk_moe_group_push, split),
                             offsetof(cvk_moe_group_push, cap),
                             rt,
                             rt + 4,
                             rt + 8,
                             rt + 12,
                             offsetof(cvk_moe_group_push, route),
                             offsetof(cvk_moe_group_push, renorm),
                             offsetof(cvk_moe_group_push, stride)};
    assert_int_equal(si.n_push, 14);
    for (int i = 0; i < 14; i++) assert_int_equal(si.push_offset[i], want[i]);
    assert_int_equal(si.push_size, sizeof(cvk_moe_group_push));
    assert_int_equal(si.n_bindings, 8);
}

static cvk_buffer make_buf(uint64_t bytes, uint64_t granule) {
    cvk_buffer b;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, bytes ? bytes : 4, granule, CVK_MEM_DEVICE), 0);
    return b;
}

static cvk_buffer upload(const void *src, uint64_t bytes) {
    cvk_buffer b = make_buf(bytes, 4);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&b), src), 0);
    return b;
}

/* The host's grouping: what moe_group must write, entry for entry. */
static void host_group(const int32_t *ids, uint32_t n_tokens, uint32_t k, uint32_t n_expert, uint32_t *groups,
                       int32_t *gather, int32_t *scatter) {
    uint32_t n = n_tokens * k, off = 0;
    for (uint32_t e = 0; e < n_expert; e++) {
        groups[2 * e] = off;
        for (uint32_t p = 0; p < n; p++)
            if (ids[p] == (int32_t)e) gather[off] = (int32_t)(p / k), scatter[off] = (int32_t)p, off++;
        groups[2 * e + 1] = off - groups[2 * e];
    }
    for (; off < n; off++) gather[off] = scatter[off] = -1;
}

/* dist: 0 uniform over [-2, n_expert + 2) (some dropped), 1 one expert for all, 2 a third
 * of the experts only, 3 nothing in range */
static void group_case(const cvk_pipeline *p, rng *r, uint32_t n_tokens, uint32_t k, uint32_t n_expert, int dist) {
    uint32_t n = n_tokens * k;
    int32_t *ids = malloc(n * 4), *gl = malloc(n * 4), *sl = malloc(n * 4), *ggl = malloc(n * 4), *gsl = malloc(n * 4);
    uint32_t *groups = malloc(n_expert * 8), *ggroups = malloc(n_expert * 8);
    uint32_t one = rng_below(r, n_expert);
    for (uint32_t i = 0; i < n; i++) {
        switch (dist) {
        case 0: ids[i] = (int32_t)rng_below(r, n_expert + 4) - 2; break;
        case 1: ids[i] = (int32_t)one; break;
        case 2: ids[i] = (int32_t)(3 * rng_below(r, (n_expert + 2) / 3)); break;
        default:
            ids[i] = rng_below(r, 2) ? -1 - (int32_t)rng_below(r, 1000) : (int32_t)(n_expert + rng_below(r, 9));
            break;
        }
    }
    host_group(ids, n_tokens, k, n_expert, groups, gl, sl);
    /* work lists: tiles and split vary per case (1/8 with split 3: a CPU device's) */
    const uint32_t tiles0[] = {1, 8, 8, 16, 1}, tiles1[] = {64, 16, 64, 32, 8}, splits[] = {0, 3, 32, UINT32_MAX};
    uint32_t v = rng_below(r, 5), tile0 = tiles0[v], tile1 = tiles1[v], split = splits[rng_below(r, 4)];
    uint32_t cap = cvk_moe_group_cap(n_tokens, k, n_expert, tile0, tile1) + rng_below(r, 3);
    uint32_t *items = calloc(2ull * cap, 8), *gitems = malloc(16ull * cap), nl[2] = {0, 0}, gdisp[12];
    for (uint32_t e = 0; e < n_expert; e++) {
        uint32_t c = groups[2 * e + 1], l = c > split, tile = l ? tile1 : tile0;
        for (uint32_t t0 = 0; t0 < c; t0 += tile) {
            items[2 * (l * cap + nl[l])] = e;
            items[2 * (l * cap + nl[l]) + 1] = t0;
            nl[l]++;
        }
    }
    assert_true(nl[0] <= cap && nl[1] <= cap);
    cvk_buffer bit = make_buf(16ull * cap, 8), bd = make_buf(48, 4);
    cvk_buffer bi = upload(ids, n * 4), bg = make_buf(n_expert * 8, 8), ba = make_buf(n * 4, 4),
               bs = make_buf(n * 4, 4);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    /* garbage first: every entry must be written */
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&bg), 0xdeadbeefu), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&ba), 0x12345678u), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&bs), 0x12345678u), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&bd), 0x12345678u), 0);
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    cvk_moe_group_args a = {.ids = cvk_view_whole(&bi),
                            .groups = cvk_view_whole(&bg),
                            .gather = cvk_view_whole(&ba),
                            .scatter = cvk_view_whole(&bs),
                            .n_expert = n_expert,
                            .n_tokens = n_tokens,
                            .k = k,
                            .items = cvk_view_whole(&bit),
                            .dispatch = cvk_view_whole(&bd),
                            .tile0 = tile0,
                            .tile1 = tile1,
                            .split = split,
                            .cap = cap,
                            .row_tiles = {3, 5, 7, 65535}};
    if (cvk_moe_group(&vk->cmd, &vk->dpool, p, &a)) fail_msg("%s", cd_errmsg());
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bit), gitems), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bd), gdisp), 0);
    const uint32_t want_disp[12] = {nl[0], 3, 1, nl[0], 5, 1, nl[1], 7, 1, nl[1], 65535, 1};
    for (int d = 0; d < 12; d++)
        if (gdisp[d] != want_disp[d])
            fail_msg("T=%u k=%u E=%u dist=%d: dispatch word %d = %u, want %u", n_tokens, k, n_expert, dist, d, gdisp[d],
                     want_disp[d]);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t i = l * cap; i < l * cap + nl[l]; i++)
            if (gitems[2 * i] != items[2 * i] || gitems[2 * i + 1] != items[2 * i + 1])
                fail_msg("T=%u k=%u E=%u dist=%d tiles %u/%u split %u: item %u = {%u, %u}, want {%u, %u}", n_tokens, k,
                         n_expert, dist, tile0, tile1, split, i, gitems[2 * i], gitems[2 * i + 1], items[2 * i],
                         items[2 * i + 1]);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bg), ggroups), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&ba), ggl), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bs), gsl), 0);
    for (uint32_t e = 0; e < n_expert; e++)
        if (groups[2 * e] != ggroups[2 * e] || groups[2 * e + 1] != ggroups[2 * e + 1])
            fail_msg("T=%u k=%u E=%u dist=%d: groups[%u] = {%u, %u}, want {%u, %u}", n_tokens, k, n_expert, dist, e,
                     ggroups[2 * e], ggroups[2 * e + 1], groups[2 * e], groups[2 * e + 1]);
    for (uint32_t j = 0; j < n; j++)
        if (gl[j] != ggl[j] || sl[j] != gsl[j])
            fail_msg("T=%u k=%u E=%u dist=%d: entry %u = (%d, %d), want (%d, %d)", n_tokens, k, n_expert, dist, j,
                     ggl[j], gsl[j], gl[j], sl[j]);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &bi);
    cvk_buffer_destroy(&vk->mem, &bg);
    cvk_buffer_destroy(&vk->mem, &ba);
    cvk_buffer_destroy(&vk->mem, &bs);
    cvk_buffer_destroy(&vk->mem, &bit);
    cvk_buffer_destroy(&vk->mem, &bd);
    free(ids), free(gl), free(sl), free(ggl), free(gsl), free(groups), free(ggroups), free(items), free(gitems);
}

static void test_group_exact(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 7);
    const uint32_t shapes[][3] = {{1, 1, 1},    {1, 8, 128},  {7, 2, 8},      {100, 4, 16},  {333, 8, 128},
                                  {513, 3, 17}, {97, 5, 256}, {4096, 8, 128}, {1000, 1, 64}, {65, 7, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int dist = 0; dist < 4; dist++)
            group_case(&group_pipe, &r, shapes[i][0], shapes[i][1], shapes[i][2], dist);
}

/* Workgroup sizes other than the default: one and sixteen mask words per expert. */
static void test_group_workgroup_sizes(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 8);
    const uint32_t wgs[] = {32, 96, 512};
    for (size_t i = 0; i < 3; i++) {
        cvk_pipeline p;
        if (cvk_moe_group_pipeline(&p, &vk->dev, vk->pcache.cache, wgs[i])) fail_msg("%s", cd_errmsg());
        group_case(&p, &r, 333, 8, 128, 0);
        group_case(&p, &r, 31, 3, 256, 2);
        group_case(&p, &r, 1, 1, 5, 1);
        cvk_pipeline_destroy(&vk->dev, &p);
    }
}

static void test_group_bad_args(void **state) {
    (void)state;
    cvk_pipeline p;
    assert_int_equal(cvk_moe_group_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 100), -1); /* not a multiple of 32 */
    assert_int_equal(cvk_moe_group_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 1024), -1);
    cvk_buffer b = make_buf(64, 4);
    cvk_view v = cvk_view_whole(&b);
    cvk_moe_group_args a = {.ids = v, .groups = v, .gather = v, .scatter = v, .n_expert = 8, .n_tokens = 4, .k = 4};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), 0); /* 16 pairs, 8 groups: fits */
    a.k = 5;                                                                   /* 80 bytes of ids */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1);
    a.k = 4, a.n_expert = 9; /* 72 bytes of groups */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1);
    a.n_expert = 257;
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1);
    a.n_expert = 8, a.k = 0;
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1);
    a.n_expert = 8, a.k = 4, a.tile0 = 8, a.tile1 = 64, a.cap = 9, a.items = v, a.dispatch = v;
    a.row_tiles[0] = a.row_tiles[1] = a.row_tiles[2] = a.row_tiles[3] = 1;
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1); /* 16 pairs / 8 + 8 experts: 10 */
    a.cap = 10;                                                                 /* 160 bytes of items */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1);
    a.cap = 65536; /* a list could hold more items than a dispatch's x extent */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), -1);
    assert_non_null(strstr(cd_errmsg(), "65535 workgroups"));
    a.tile0 = 0, a.k = 0;
    a.n_tokens = 0; /* nothing to do */
    assert_int_equal(cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &a), 0);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_buffer_destroy(&vk->mem, &b);
}

/* --- the MoE FFN chain --- */

typedef struct chain {
    enum qtype gate_type, down_type; /* gate and up share a type, as in GGUF files */
    uint32_t T, n_expert, k, n_embd, n_ff;
    uint64_t max_part; /* weights split into parts of about this many bytes; 0: not */
} chain;

typedef struct chain_pipes {
    cvk_pipeline mm_gate, mm_down, swiglu, combine;
} chain_pipes;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void random_weights(rng *r, enum qtype ty, uint32_t rows, uint32_t n, uint8_t *out) {
    size_t rb = qtype_row_bytes(ty, n);
    float *row = malloc(n * 4);
    for (uint32_t i = 0; i < rows; i++) {
        for (uint32_t j = 0; j < n; j++) row[j] = rng_normal(r) * 0.1f;
        tu_quantize_row(ty, row, out + rb * i, n);
    }
    free(row);
}

static cvk_buffer weight_buffer(const uint8_t *w, uint64_t bytes, uint64_t row_bytes, uint64_t max_part) {
    cvk_buffer b;
    uint64_t saved = vk->mem.max_part;
    if (max_part) vk->mem.max_part = max_part;
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, bytes, row_bytes, CVK_MEM_DEVICE), 0);
    vk->mem.max_part = saved;
    if (max_part) assert_true(b.n_parts >= 3);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&b), w), 0);
    return b;
}

/* Runs the chain once, or best of `bench` runs with GPU timestamps; checks it against the
 * reference when `check`. */
static void run_chain(const chain *c, uint64_t seed, int bench, bool check) {
    rng r;
    rng_seed(&r, seed);
    uint32_t T = c->T, E = c->n_expert, k = c->k, D = c->n_embd, F = c->n_ff, P = T * k;
    size_t rbg = qtype_row_bytes(c->gate_type, D), rbd = qtype_row_bytes(c->down_type, F);
    uint8_t *wg = malloc(rbg * E * F), *wu = malloc(rbg * E * F), *wdn = malloc(rbd * E * D);
    random_weights(&r, c->gate_type, E * F, D, wg);
    random_weights(&r, c->gate_type, E * F, D, wu);
    random_weights(&r, c->down_type, E * D, F, wdn);
    float *logits = malloc((size_t)T * E * 4), *xb = malloc((size_t)T * D * 4), *x = malloc((size_t)T * D * 4);
    for (size_t i = 0; i < (size_t)T * E; i++) logits[i] = rng_normal(&r) * 2;
    for (size_t i = 0; i < (size_t)T * D; i++) xb[i] = rng_normal(&r), x[i] = rng_normal(&r);

    chain_pipes pp;
    if (cvk_matmul_pipeline(&pp.mm_gate, &vk->dev, vk->pcache.cache, c->gate_type, NULL) ||
        cvk_matmul_pipeline(&pp.mm_down, &vk->dev, vk->pcache.cache, c->down_type, NULL))
        fail_msg("%s", cd_errmsg());
    assert_int_equal(cvk_swiglu_pipeline(&pp.swiglu, &vk->dev, vk->pcache.cache, 0), 0);
    assert_int_equal(cvk_moe_combine_pipeline(&pp.combine, &vk->dev, vk->pcache.cache, 0), 0);

    cvk_buffer bwg = weight_buffer(wg, rbg * E * F, rbg, c->max_part);
    cvk_buffer bwu = weight_buffer(wu, rbg * E * F, rbg, c->max_part);
    cvk_buffer bwd = weight_buffer(wdn, rbd * E * D, rbd, c->max_part);
    cvk_buffer blog = upload(logits, (uint64_t)T * E * 4), bxb = upload(xb, (uint64_t)T * D * 4);
    cvk_buffer bx = upload(x, (uint64_t)T * D * 4);
    cvk_buffer bids = make_buf((uint64_t)P * 4, 4), bw = make_buf((uint64_t)P * 4, 4);
    cvk_buffer bgrp = make_buf((uint64_t)E * 8, 8), bga = make_buf((uint64_t)P * 4, 4),
               bsc = make_buf((uint64_t)P * 4, 4);
    cvk_buffer bhg = make_buf((uint64_t)P * F * 4, 4), bhu = make_buf((uint64_t)P * F * 4, 4);
    cvk_buffer beo = make_buf((uint64_t)P * D * 4, 4);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);

    cvk_moe_group_args ga = {.logits = cvk_view_whole(&blog),
                             .weights = cvk_view_whole(&bw),
                             .ids = cvk_view_whole(&bids),
                             .groups = cvk_view_whole(&bgrp),
                             .gather = cvk_view_whole(&bga),
                             .scatter = cvk_view_whole(&bsc),
                             .n_expert = E,
                             .n_tokens = T,
                             .k = k};
    cvk_matmul_args gate = {.w = &bwg,
                            .type = c->gate_type,
                            .n_in = D,
                            .n_rows = F,
                            .x = cvk_view_whole(&bxb),
                            .x_rows = T,
                            .y = cvk_view_whole(&bhg),
                            .y_rows = P,
                            .n_tokens = T,
                            .gather = cvk_view_whole(&bga),
                            .scatter = cvk_view_whole(&bsc),
                            .groups = cvk_view_whole(&bgrp),
                            .n_experts = E};
    cvk_matmul_args up = gate;
    up.w = &bwu, up.y = cvk_view_whole(&bhu);
    cvk_swiglu_args sa = {
        .g = cvk_view_whole(&bhg), .u = cvk_view_whole(&bhu), .h = cvk_view_whole(&bhg), .n = F, .rows = P};
    cvk_matmul_args down = {.w = &bwd,
                            .type = c->down_type,
                            .n_in = F,
                            .n_rows = D,
                            .x = cvk_view_whole(&bhg),
                            .x_rows = P,
                            .y = cvk_view_whole(&beo),
                            .y_rows = P,
                            .n_tokens = T,
                            .gather = cvk_view_whole(&bsc),
                            .scatter = cvk_view_whole(&bsc),
                            .groups = cvk_view_whole(&bgrp),
                            .n_experts = E};
    cvk_moe_combine_args ca = {
        .x = cvk_view_whole(&bx), .e = cvk_view_whole(&beo), .w = cvk_view_whole(&bw), .n = D, .k = k, .rows = T};

    bool timed = bench && cvk_timer_enable(&vk->timer, true) == 0;
    int reps = bench ? bench : 1;
    double best_wall = 1e30, best_span[8] = {0};
    uint32_t n_span = 0;
    cvk_timing tm[8];
    for (int rep = 0; rep < reps; rep++) {
        if (rep) { /* x is updated in place: put it back */
            assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
            assert_int_equal(cvk_stager_flush(&vk->stager), 0);
        }
        assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
        if (cvk_moe_group(&vk->cmd, &vk->dpool, &group_pipe, &ga)) fail_msg("%s", cd_errmsg());
        cvk_barrier_compute_to_compute(vk->cmd.cb);
        if (cvk_matmul(&vk->cmd, &vk->dpool, &pp.mm_gate, &gate) || cvk_matmul(&vk->cmd, &vk->dpool, &pp.mm_gate, &up))
            fail_msg("%s", cd_errmsg());
        cvk_barrier_compute_to_compute(vk->cmd.cb);
        if (cvk_swiglu(&vk->cmd, &vk->dpool, &pp.swiglu, &sa)) fail_msg("%s", cd_errmsg());
        cvk_barrier_compute_to_compute(vk->cmd.cb);
        if (cvk_matmul(&vk->cmd, &vk->dpool, &pp.mm_down, &down)) fail_msg("%s", cd_errmsg());
        cvk_barrier_compute_to_compute(vk->cmd.cb);
        if (cvk_moe_combine(&vk->cmd, &vk->dpool, &pp.combine, &ca)) fail_msg("%s", cd_errmsg());
        cvk_barrier_device_to_host(vk->cmd.cb);
        double w0 = now_s();
        assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
        double wall = now_s() - w0;
        uint32_t n = 0;
        if (timed && cvk_timer_read(&vk->timer, tm, 8, &n) == 0 && wall < best_wall) {
            n_span = n;
            for (uint32_t i = 0; i < n; i++) best_span[i] = (tm[i].end_ns - tm[i].start_ns) * 1e-9;
        }
        if (wall < best_wall) best_wall = wall;
        assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    }
    if (bench) {
        cvk_timer_enable(&vk->timer, false);
        double flops = 2.0 * P * (2.0 * F * D + (double)D * F);
        printf("  chain %s/%s: T %u, %u experts, k %u, n_embd %u, n_ff %u (%.2f GFLOP in the matmuls)\n",
               qtype_name(c->gate_type), qtype_name(c->down_type), T, E, k, D, F, flops * 1e-9);
        printf("  best of %d: submit+wait %.1f ms\n", reps, best_wall * 1e3);
        for (uint32_t i = 0; i < n_span; i++) printf("    %-12s %8.2f ms\n", tm[i].label, best_span[i] * 1e3);
    }

    float *got = malloc((size_t)T * D * 4), *w = malloc(P * 4);
    int32_t *ids = malloc(P * 4);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bx), got), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bids), ids), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&bw), w), 0);

    if (check) { /* reference, expert by expert (only one expert's weights dequantized at once) */
        float *dg = malloc((size_t)F * D * 4), *du = malloc((size_t)F * D * 4), *dd = malloc((size_t)D * F * 4);
        float *eo = malloc((size_t)P * D * 4), *h = malloc(F * 4);
        double *emag = malloc((size_t)P * D * sizeof(double));
        for (uint32_t e = 0; e < E; e++) {
            bool used = false;
            for (uint32_t q = 0; q < P && !used; q++) used = ids[q] == (int32_t)e;
            if (!used) continue;
            for (uint32_t i = 0; i < F; i++) {
                quant_dequantize_row(c->gate_type, wg + rbg * ((size_t)e * F + i), dg + (size_t)i * D, D);
                quant_dequantize_row(c->gate_type, wu + rbg * ((size_t)e * F + i), du + (size_t)i * D, D);
            }
            for (uint32_t i = 0; i < D; i++)
                quant_dequantize_row(c->down_type, wdn + rbd * ((size_t)e * D + i), dd + (size_t)i * F, F);
            for (uint32_t q = 0; q < P; q++) {
                if (ids[q] != (int32_t)e) continue;
                const float *xr = xb + (size_t)(q / k) * D;
                for (uint32_t i = 0; i < F; i++) {
                    double sg = 0, su = 0;
                    for (uint32_t j = 0; j < D; j++)
                        sg += (double)dg[(size_t)i * D + j] * xr[j], su += (double)du[(size_t)i * D + j] * xr[j];
                    h[i] = cpu_silu((float)sg) * (float)su;
                }
                for (uint32_t i = 0; i < D; i++) {
                    double s = 0, m = 0;
                    for (uint32_t j = 0; j < F; j++) {
                        double v = (double)dd[(size_t)i * F + j] * h[j];
                        s += v, m += fabs(v);
                    }
                    eo[(size_t)q * D + i] = (float)s;
                    emag[(size_t)q * D + i] = m;
                }
            }
        }
        double worst = 0, num = 0, den = 0;
        for (uint32_t t = 0; t < T; t++) {
            for (uint32_t j = 0; j < k; j++)
                if (ids[t * k + j] < 0 || (uint32_t)ids[t * k + j] >= E) fail_msg("router id %d", ids[t * k + j]);
            for (uint32_t i = 0; i < D; i++) {
                float acc = 0;
                double mag = fabs(x[(size_t)t * D + i]) * 1e-2;
                for (uint32_t j = 0; j < k; j++) {
                    acc += w[t * k + j] * eo[((size_t)t * k + j) * D + i];
                    mag += fabs(w[t * k + j]) * emag[((size_t)t * k + j) * D + i];
                }
                float ref = x[(size_t)t * D + i] + acc, v = got[(size_t)t * D + i];
                double err = fabs((double)v - ref);
                if (isnan(v) || err > 1e-4 * mag + 1e-6)
                    fail_msg("chain %s/%s T=%u E=%u k=%u: x[%u][%u] = %.9g, want %.9g (mag %.3g)",
                             qtype_name(c->gate_type), qtype_name(c->down_type), T, E, k, t, i, v, ref, mag);
                if (mag > 0) worst = fmax(worst, err / mag);
                num += (v - ref) * (double)(v - ref), den += (double)acc * acc;
            }
        }
        printf("  chain %-4s/%-4s T=%-3u E=%-3u k=%u D=%u F=%u parts=%u/%u: worst |err|/mag %.2g, rel L2 of the "
               "update %.2g\n",
               qtype_name(c->gate_type), qtype_name(c->down_type), T, E, k, D, F, bwg.n_parts, bwd.n_parts, worst,
               sqrt(num / (den > 0 ? den : 1)));
        free(dg), free(du), free(dd), free(eo), free(h), free(emag);
    }

    cvk_buffer *bufs[] = {&bwg, &bwu, &bwd, &blog, &bxb, &bx, &bids, &bw, &bgrp, &bga, &bsc, &bhg, &bhu, &beo};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cvk_buffer_destroy(&vk->mem, bufs[i]);
    cvk_pipeline_destroy(&vk->dev, &pp.mm_gate);
    cvk_pipeline_destroy(&vk->dev, &pp.mm_down);
    cvk_pipeline_destroy(&vk->dev, &pp.swiglu);
    cvk_pipeline_destroy(&vk->dev, &pp.combine);
    free(wg), free(wu), free(wdn), free(logits), free(xb), free(x), free(got), free(w), free(ids);
}

static void test_chain(void **state) {
    (void)state;
    const chain cs[] = {
        {QTYPE_Q4_K, QTYPE_Q6_K, 1, 8, 2, 256, 512, 0},
        {QTYPE_Q4_K, QTYPE_Q6_K, 7, 128, 8, 256, 256, 0},
        {QTYPE_F32, QTYPE_F32, 100, 8, 2, 64, 96, 0},
        {QTYPE_Q6_K, QTYPE_Q4_K, 100, 128, 8, 256, 256, 0},
        {QTYPE_Q4_K, QTYPE_Q4_K, 333, 8, 8, 256, 256, 0},
        {QTYPE_F32, QTYPE_F32, 7, 128, 8, 32, 64, 0},
        {QTYPE_Q6_K, QTYPE_Q6_K, 333, 128, 2, 256, 256, 0},
        {QTYPE_Q3_K, QTYPE_Q2_K, 7, 128, 8, 256, 256, 0},   /* the small files' types (Q3_K_M, Q2_K) */
        {QTYPE_Q4_0, QTYPE_Q5_1, 100, 8, 2, 64, 96, 0},     /* legacy 32-weight blocks */
        {QTYPE_IQ4_XS, QTYPE_IQ4_NL, 7, 8, 2, 256, 256, 0}, /* the non-linear 4-bit types */
        {QTYPE_MXFP4, QTYPE_MXFP4, 7, 8, 2, 96, 160, 0},    /* MXFP4_MOE's experts: 51- and 85-byte rows */
        {QTYPE_IQ3_XXS, QTYPE_IQ3_S, 7, 8, 2, 256, 256, 0}, /* the 3-bit grid types (IQ3_XXS, IQ3_M files) */
        {QTYPE_IQ2_XXS, QTYPE_IQ2_S, 7, 8, 2, 256, 256, 0}, /* the 2-bit grid types (IQ2_XXS, IQ2_M files) */
        {QTYPE_IQ1_S, QTYPE_IQ1_M, 7, 8, 2, 256, 256, 0},   /* the 1-bit grid types (IQ1_S, IQ1_M files) */
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) run_chain(&cs[i], 1000 + i, 0, true);
}

/* Weights in parts: expert slices straddle parts, parts hold several slices. */
static void test_chain_split_weights(void **state) {
    (void)state;
    const chain cs[] = {
        /* gate/up: 144-byte rows (Q4_K of 256) in parts of 700 rows; down: 210-byte rows (Q6_K
         * of 256) in parts of 480: 256-row slices straddle parts, parts hold 2-3 slices */
        {QTYPE_Q4_K, QTYPE_Q6_K, 333, 8, 2, 256, 256, 144 * 700},
        /* F32: gate/up 32-row slices in parts of 37 rows, down 64-row slices in parts of 74 */
        {QTYPE_F32, QTYPE_F32, 100, 16, 8, 64, 32, 256 * 37},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) run_chain(&cs[i], 2000 + i, 0, true);
}

/* A timing run, not a test: main runs it only when CINDER_MOE_BENCH is set. */
static void bench_chain(void **state) {
    (void)state;
    chain c = {QTYPE_Q4_K, QTYPE_Q4_K, 512, 16, 4, 512, 256, 0};
    const char *s = getenv("CINDER_MOE_BENCH_SHAPE");
    if (s && sscanf(s, "%u,%u,%u,%u,%u", &c.n_embd, &c.n_ff, &c.n_expert, &c.k, &c.T) != 5)
        fail_msg("CINDER_MOE_BENCH_SHAPE=%s: want n_embd,n_ff,n_expert,k,T", s);
    const char *ref = getenv("CINDER_MOE_BENCH_REF");
    run_chain(&c, 42, 3, !ref || atoi(ref) != 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layout),
        cmocka_unit_test(test_group_exact),
        cmocka_unit_test(test_group_workgroup_sizes),
        cmocka_unit_test(test_group_bad_args),
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_chain_split_weights),
    };
    if (getenv("CINDER_MOE_BENCH")) {
        const struct CMUnitTest timing[] = {cmocka_unit_test(bench_chain)};
        return tu_status(cmocka_run_group_tests(timing, setup, teardown));
    }
    return tu_status(cmocka_run_group_tests(tests, setup, teardown));
}
