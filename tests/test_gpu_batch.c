/* The batch forward (gpu_forward_batch, runtime/model/gpu_model.h): tokens of several sequences
 * in one pass, each over its own block-table row.
 *
 * - Correct: a sequence's logits after its prompt and a few greedy steps match the CPU reference
 *   (relative L2, top-1), with the prompt cut into chunks and mixed with other sequences.
 * - Batch invariant, bit for bit: the same sequence run alone (prompt in one pass, then one
 *   token per pass) and among others (its prompt split into odd chunks, sharing passes with the
 *   prefill chunks and decode tokens of other sequences at other positions, in other rows) gives
 *   identical logits at every step and identical K/V bytes in its pages. Also when its
 *   generated tokens are fed back as prompt tokens of a later pass (what a prefix-cache hit on a
 *   previous reply amounts to): the cache is invisible to the math.
 * Passes of a shape seen lately are submitted as recorded (gpu_recording): the mixed passes of
 * many shapes and the repeated decode passes go through that cache, so the bit equalities
 * above also hold for replayed recordings.
 * Sizes are awkward on purpose (prompts of 37, 61, 90 and 700 tokens, page size 16 and 4); 700
 * positions cross the fixed attention split boundary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/model/gpu_model.h"
#include "runtime/model/sampler.h"
#include "runtime/vk/vk_pipeline.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

#define N_CTX 736u
#define SEQS 4u
#define GEN 6u
#define OUTS 8u /* logits rows a pass may want: more than SEQS (a verify pass wants GEN - 1 of one row) */

/* The tiny preset in its default mix (gate Q4_K, up Q5_K: two matmuls and a swiglu stage) with
 * lavapipe's kernels or, with `gpu_defaults` set, in q4_k_m with a GPU's: gate and up as
 * gate-up pairs (one matmul), the lm_head as the matmul gathering the wanted rows. */
static bool gpu_defaults;
static gpu_rows_shape few_shape, one_shape; /* with gpu_defaults: gpu_model_opts's (0: default) */
static gpu_tile_shape big_tile;             /* the tiled kernel's (bm 0: default) */
static gpu_rows_shape head_shape;           /* the few-token lm_head's */
static bool int_dot;                        /* gpu_model_opts.int_dot on (else off) */

static model *tiny(void) {
    static model *m[2];
    if (!m[gpu_defaults]) {
        const char *path = tu_make_model(gpu_defaults ? "batch_tiny_q4km.gguf" : "batch_tiny.gguf", "tiny",
                                         gpu_defaults ? "q4_k_m" : NULL, 11, NULL);
        if (model_load(&m[gpu_defaults], path, (model_load_opts){0})) fail_msg("%s", cd_errmsg());
    }
    return m[gpu_defaults];
}

/* Row r owns pages [r * per, (r + 1) * per): no allocator needed for the test. */
static void static_tables(gpu_model *g) {
    uint32_t per = g->max_pages;
    uint32_t *pg = malloc(per * sizeof *pg);
    for (uint32_t r = 0; r < g->max_seqs; r++) {
        for (uint32_t i = 0; i < per; i++) pg[i] = r * per + i;
        if (gpu_model_set_table(g, r, pg, per)) fail_msg("%s", cd_errmsg());
    }
    free(pg);
}

static kv_pool kvp; /* the model's KV pool (kv/ owns pools; the model is given one) */

static void init_model(gpu_model *g, uint32_t page_tokens) {
    const model_config *c = &tiny()->cfg;
    uint32_t pages = (N_CTX + page_tokens - 1) / page_tokens;
    kv_layout lay;
    if (kv_layout_init(&lay, c->n_layer, c->n_head_kv, c->head_dim, page_tokens) ||
        kv_pool_init(&kvp, vk, &lay, SEQS * pages * page_tokens) || vk_poison(vk, &kvp.buf))
        fail_msg("%s", cd_errmsg());
    gpu_model_opts o = {.n_ctx = N_CTX,
                        .n_batch = 128,
                        .max_seqs = SEQS,
                        .max_out = OUTS,
                        .kv = &kvp.buf,
                        .lay = &kvp.lay,
                        .gate_up_pairs = gpu_defaults ? 1 : -1,
                        .head_matvec = gpu_defaults ? -1 : 1,
                        .few_kernels = gpu_defaults ? 1 : -1,
                        .few_shape = few_shape,
                        .one_shape = one_shape,
                        .big_tile = big_tile,
                        .head_shape = head_shape,
                        .int_dot = int_dot ? 1 : -1};
    if (gpu_model_init(g, vk, tiny(), &o)) fail_msg("%s", cd_errmsg());
    assert_string_equal(gpu_model_family(g), int_dot ? "xq8" : "float");
    const uint32_t *few = g->matmul_few[0][QTYPE_Q4_K].spec, *one = g->matmul_one[0][QTYPE_Q4_K].spec;
    if (few_shape.bn) /* rows kernel's NT, BM, KL, RPI */
        assert_true(few[3] == few_shape.bn && few[2] == few_shape.bm && few[6] == few_shape.kl &&
                    few[5] == (few_shape.tm ? few_shape.tm : 1));
    if (one_shape.bm)
        assert_true(one[3] == 1 && one[2] == one_shape.bm && one[6] == one_shape.kl &&
                    one[5] == (one_shape.tm ? one_shape.tm : 1));
    const uint32_t *big = g->matmul[0][QTYPE_Q4_K].spec; /* WG, type, BM, BN, BK, TM, TN */
    const uint32_t *head = g->matmul_head_few.spec;
    if (head_shape.bn)
        assert_true(head[3] == head_shape.bn && head[2] == head_shape.bm && head[6] == head_shape.kl &&
                    head[5] == (head_shape.tm ? head_shape.tm : 1));
    if (big_tile.bm)
        assert_true(big[2] == big_tile.bm && big[3] == big_tile.bn && big[4] == big_tile.bk && big[5] == big_tile.tm &&
                    big[6] == big_tile.tn);
    assert_int_equal(gpu_layer_has_pairs(&g->w.layers[0]), gpu_defaults);
    assert_int_equal(g->head_matvec, !gpu_defaults);
    assert_int_equal(g->few_gpu, gpu_defaults);
    static_tables(g);
}

static void free_model(gpu_model *g) {
    gpu_model_free(g);
    kv_pool_free(&kvp);
}

/* One pass builder. */
typedef struct pass {
    int32_t ids[128];
    uint32_t row[128], pos[128], out[OUTS], n, n_out;
} pass;

static void add_tokens(pass *p, uint32_t row, const int32_t *ids, uint32_t pos0, uint32_t n, bool want_out) {
    for (uint32_t i = 0; i < n; i++) {
        p->ids[p->n] = ids[i];
        p->row[p->n] = row;
        p->pos[p->n++] = pos0 + i;
    }
    if (want_out) p->out[p->n_out++] = p->n - 1;
}

static void run(gpu_model *g, pass *p, int32_t *next) {
    gpu_batch b = {.n = p->n, .ids = p->ids, .row = p->row, .pos = p->pos, .n_out = p->n_out, .out = p->out};
    if (gpu_forward_batch(g, &b, next)) fail_msg("%s", cd_errmsg());
}

/* What one sequence saw: logits after the prompt and after each generated token. */
typedef struct trace {
    int32_t gen[GEN];
    float *logits; /* [GEN][n_vocab] */
} trace;

static void trace_logits(gpu_model *g, uint32_t j, trace *t, uint32_t step) {
    if (gpu_model_batch_logits(g, j, t->logits + (size_t)step * g->m->cfg.n_vocab)) fail_msg("%s", cd_errmsg());
}

/* The sequence alone in row `row`: its prompt in passes of up to n_batch tokens, then one token
 * per pass. */
static void alone(gpu_model *g, uint32_t row, const int32_t *prompt, uint32_t n, trace *t) {
    for (uint32_t done = 0; done < n;) {
        uint32_t k = n - done < g->n_batch ? n - done : g->n_batch;
        pass p = {0};
        int32_t next[SEQS];
        add_tokens(&p, row, prompt + done, done, k, done + k == n);
        run(g, &p, next);
        done += k;
        if (done == n) {
            t->gen[0] = next[0];
            trace_logits(g, 0, t, 0);
        }
    }
    for (uint32_t s = 1; s < GEN; s++) {
        pass p = {0};
        add_tokens(&p, row, &t->gen[s - 1], n + s - 1, 1, true);
        int32_t next[SEQS];
        run(g, &p, next);
        t->gen[s] = next[0];
        trace_logits(g, 0, t, s);
    }
}

static void download_pool(gpu_model *g, uint16_t *out) {
    if (cvk_stager_download(&vk->stager, cvk_view_whole(g->kv), out)) fail_msg("%s", cd_errmsg());
}

/* K/V bytes of row r's first n positions, every layer (pages of row r, static tables). */
static void row_kv(const gpu_model *g, const uint16_t *pool, uint32_t r, uint32_t n, uint16_t *out) {
    const kv_layout *l = &g->lay;
    size_t k = 0, page_halves = l->page_bytes / 2;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t layer = 0; layer < l->n_layer; layer++)
            for (uint32_t kv = 0; kv < 2; kv++)
                for (uint32_t h = 0; h < l->n_head_kv; h++) {
                    uint32_t page = r * g->max_pages + t / l->page_tokens, slot = t % l->page_tokens;
                    size_t o = page * page_halves +
                        (((size_t)(layer * 2 + kv) * l->n_head_kv + h) * l->page_tokens + slot) * l->head_dim;
                    memcpy(out + k, pool + o, l->head_dim * 2);
                    k += l->head_dim;
                }
}

static void random_ids(rng *r, int32_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)rng_below(r, 150000);
}

static void invariance(uint32_t page_tokens, uint32_t la) {
    const model *m = tiny();
    uint32_t V = m->cfg.n_vocab;
    rng r;
    rng_seed(&r, 3 + page_tokens);
    int32_t *a = malloc(la * sizeof *a), b[37], c[90];
    random_ids(&r, a, la);
    random_ids(&r, b, 37);
    random_ids(&r, c, 90);

    gpu_model g;
    init_model(&g, page_tokens);
    trace solo = {.logits = malloc((size_t)GEN * V * 4)}, mixed = {.logits = malloc((size_t)GEN * V * 4)};
    alone(&g, 1, a, la, &solo);
    /* its decode passes were submitted as recorded: one recording per attention limit (the
     * longest row rounded up to whole splits), which a GPU's 64-position splits may change */
    uint32_t limits = 0;
    for (uint32_t s = 1, last = 0; s < GEN; s++) {
        uint32_t lim = (la + s + g.split_len - 1) / g.split_len;
        limits += lim != last, last = lim;
    }
    assert_true(g.rec_hits >= GEN - 1 - limits);
    size_t pool_halves = g.kv->size / 2, row_halves = (size_t)la * 2 * g.lay.n_layer * g.lay.n_head_kv * g.lay.head_dim;
    uint16_t *pool = malloc(g.kv->size), *kv_solo = malloc(row_halves * 2), *kv_mixed = malloc(row_halves * 2);
    download_pool(&g, pool);
    row_kv(&g, pool, 1, la, kv_solo);
    (void)pool_halves;

    /* Among others, in another row (3): b (row 0) is prefilled first and then decodes in every
     * pass; c (row 2) is prefilled in chunks of 29 beside a's chunks of odd sizes; once a's
     * prompt is done all three decode together, in a different order each pass. */
    static const uint32_t chunks[] = {13, 37, 11, 50, 7, 64};
    int32_t next[SEQS], b_last = -1, c_last = -1;
    uint32_t a_done = 0, c_done = 0, a_gen = 0, b_pos = 37, c_pos = 90, pass_no = 0;
    while (a_gen < GEN) {
        pass p = {0};
        int ja = -1, jb = -1, jc = -1;
        bool flip = pass_no % 2;
        if (b_last < 0) {
            add_tokens(&p, 0, b, 0, 37, true);
            jb = 0;
        }
        if (!flip && b_last >= 0) {
            jb = (int)p.n_out;
            add_tokens(&p, 0, &b_last, b_pos++, 1, true);
        }
        if (c_done < 90) {
            uint32_t k = 90 - c_done < 29 ? 90 - c_done : 29;
            if (c_done + k == 90) jc = (int)p.n_out;
            add_tokens(&p, 2, c + c_done, c_done, k, c_done + k == 90);
            c_done += k;
        } else if (c_last >= 0) {
            jc = (int)p.n_out;
            add_tokens(&p, 2, &c_last, c_pos++, 1, true);
        }
        if (a_done < la) {
            uint32_t k = chunks[pass_no % 6], room = g.n_batch - p.n - 1;
            if (k > la - a_done) k = la - a_done;
            if (k > room) k = room;
            if (a_done + k == la) ja = (int)p.n_out;
            add_tokens(&p, 3, a + a_done, a_done, k, a_done + k == la);
            a_done += k;
        } else {
            ja = (int)p.n_out;
            add_tokens(&p, 3, &mixed.gen[a_gen - 1], la + a_gen - 1, 1, true);
        }
        if (flip && b_last >= 0) {
            jb = (int)p.n_out;
            add_tokens(&p, 0, &b_last, b_pos++, 1, true);
        }
        run(&g, &p, next);
        if (jb >= 0) b_last = next[jb];
        if (jc >= 0) c_last = next[jc];
        if (ja >= 0) {
            mixed.gen[a_gen] = next[ja];
            trace_logits(&g, (uint32_t)ja, &mixed, a_gen);
            a_gen++;
        }
        pass_no++;
    }
    download_pool(&g, pool);
    row_kv(&g, pool, 3, la, kv_mixed);
    assert_memory_equal(solo.gen, mixed.gen, sizeof solo.gen);
    for (uint32_t s = 0; s < GEN; s++)
        if (memcmp(solo.logits + (size_t)s * V, mixed.logits + (size_t)s * V, V * 4))
            fail_msg("page %u: step %u: logits alone and among others differ", page_tokens, s);
    assert_memory_equal(kv_solo, kv_mixed, row_halves * 2);

    /* The cache's view: a's prompt and its first GEN-1 generated tokens prefilled in one pass in
     * row 2 (as a later request that re-sends the reply would) write the same K/V as the decode
     * steps did, and give the same last logits. */
    uint32_t n_all = la + GEN - 1;
    int32_t *all = malloc(n_all * sizeof *all);
    memcpy(all, a, la * sizeof *all);
    memcpy(all + la, solo.gen, (GEN - 1) * sizeof *all);
    for (uint32_t done = 0; done < n_all;) {
        uint32_t k = n_all - done < 100 ? n_all - done : 100;
        pass q = {0};
        add_tokens(&q, 2, all + done, done, k, done + k == n_all);
        run(&g, &q, next);
        done += k;
    }
    assert_int_equal(next[0], solo.gen[GEN - 1]);
    float *last = malloc((size_t)V * 4), *reprefilled = malloc((size_t)V * 4);
    if (gpu_model_batch_logits(&g, 0, last)) fail_msg("%s", cd_errmsg());
    if (memcmp(last, solo.logits + (size_t)(GEN - 1) * V, V * 4)) fail_msg("re-prefilled reply: logits differ");
    memcpy(reprefilled, last, (size_t)V * 4);
    download_pool(&g, pool);
    row_kv(&g, pool, 2, la, kv_mixed);
    assert_memory_equal(kv_solo, kv_mixed, row_halves * 2);

    /* Speculative decoding's verify pass: a's prompt in row 2 again, then its generated tokens
     * 0..GEN-2 in one pass (beside b's next token) with a logits row for each (GEN - 1 + 1 rows,
     * more than the SEQS rows of sequences): every row's logits and token are those of the
     * one-token decode step at that position. */
    for (uint32_t done = 0; done < la;) {
        uint32_t k = la - done < 100 ? la - done : 100;
        pass q = {0};
        add_tokens(&q, 2, a + done, done, k, false);
        run(&g, &q, next);
        done += k;
    }
    pass v = {0};
    add_tokens(&v, 0, &b_last, b_pos, 1, true);
    for (uint32_t s = 0; s + 1 < GEN; s++) add_tokens(&v, 2, &solo.gen[s], la + s, 1, true);
    int32_t vnext[OUTS];
    run(&g, &v, vnext);
    for (uint32_t s = 0; s + 1 < GEN; s++) {
        assert_int_equal(vnext[1 + s], solo.gen[s + 1]);
        if (gpu_model_batch_logits(&g, 1 + s, last)) fail_msg("%s", cd_errmsg());
        if (memcmp(last, solo.logits + (size_t)(s + 1) * V, V * 4)) fail_msg("verify pass: row %u: logits differ", s);
    }
    print_message(
        "page %u, prompt %u: %u steps bit-identical alone, among others (%u passes), re-prefilled and verified\n",
        page_tokens, la, GEN, pass_no);

    /* and right: against the CPU reference */
    cpu_state cs;
    assert_int_equal(cpu_state_init(&cs, m, N_CTX), 0);
    cs.int_dot = int_dot; /* the same arithmetic as the GPU's plan */
    for (uint32_t i = 0; i < n_all; i++) assert_int_equal(cpu_forward(&cs, all[i], i, i + 1 == n_all), 0);
    double err = tu_rel_l2(reprefilled, cs.logits, V);
    print_message("page %u: logits after %u tokens vs CPU: rel L2 %.2e\n", page_tokens, n_all, err);
    /* the integer family: x's quantizer turns the GPU's last-bit differences into a level now and
     * then (docs/kernels/xq8.md), so its bound is test_gpu_model's for the family */
    assert_true(err < (int_dot ? 1e-2 : 2e-3));
    assert_int_equal(sampler_argmax(cs.logits, (int32_t)V), solo.gen[GEN - 1]);
    cpu_state_free(&cs);

    free(last);
    free(reprefilled);
    free(all);
    free(a);
    free(pool);
    free(kv_solo);
    free(kv_mixed);
    free(solo.logits);
    free(mixed.logits);
    free_model(&g);
}

static void test_invariance_page16(void **state) {
    (void)state;
    invariance(16, 61);
}
static void test_invariance_page4(void **state) {
    (void)state;
    invariance(4, 61);
}
/* past one attention split (512 positions on a CPU device): the fixed split boundaries matter */
static void test_invariance_long(void **state) {
    (void)state;
    invariance(16, 700);
}
/* A GPU's kernels on lavapipe: gate-up pairs (the SwiGLU in the matmul's epilogue), the lm_head
 * as the matmul gathering 1-4 wanted rows (the one- and few-token kernels: the same bits) */
static void test_invariance_gpu_defaults(void **state) {
    (void)state;
    gpu_defaults = true;
    invariance(16, 61);
    gpu_defaults = false;
}
/* ... with other shapes of the few- and one-token kernels and of the tiled one
 * (gpu_model_opts.few_shape, one_shape, big_tile: what cinder profile --few-shape / --one-shape /
 * --big-tile measure on a GPU): 2-token columns of 4 rows x 8 lanes, one token 8 rows x 2 lanes,
 * tiles of 32 rows x 16 tokens x 16 k with 8 x 8 register blocks (narrower than the MoE's list-0
 * items: the work lists' capacity follows the smaller tile), the lm_head in 3-token columns of
 * 16 rows x 2 lanes with 2 rows a lane (each x load feeds both) */
static void test_invariance_gpu_shapes(void **state) {
    (void)state;
    gpu_defaults = true;
    few_shape = (gpu_rows_shape){.bn = 2, .bm = 4, .kl = 8};
    one_shape = (gpu_rows_shape){.bm = 8, .kl = 2, .tm = 2};
    big_tile = (gpu_tile_shape){.bm = 32, .bn = 16, .bk = 16, .tm = 8, .tn = 8};
    head_shape = (gpu_rows_shape){.bn = 3, .bm = 16, .kl = 2, .tm = 2};
    invariance(16, 61);
    gpu_defaults = false;
    few_shape = one_shape = head_shape = (gpu_rows_shape){0};
    big_tile = (gpu_tile_shape){0};
}

/* The integer family (q/k/v/o as int8 dot products) with a GPU's kernels: a token's quantized x
 * and block sums do not depend on its neighbours, so batching stays invisible. */
static void test_invariance_int_dot(void **state) {
    (void)state;
    gpu_defaults = int_dot = true;
    invariance(16, 61);
    gpu_defaults = int_dot = false;
}

/* Shapes the kernels cannot take are errors naming them. */
static void test_bad_shapes(void **state) {
    (void)state;
    const model_config *c = &tiny()->cfg;
    kv_layout lay;
    if (kv_layout_init(&lay, c->n_layer, c->n_head_kv, c->head_dim, 16) || kv_pool_init(&kvp, vk, &lay, 256))
        fail_msg("%s", cd_errmsg());
    /* few_shape, one_shape, head_shape */
    gpu_rows_shape bad[][3] = {{{.bn = 17}, {0}, {0}},
                               {{0}, {.bn = 2}, {0}},
                               {{.kl = 65}, {0}, {0}},
                               {{0}, {.bm = 64, .kl = 64}, {0}},
                               {{0}, {0}, {.bn = 17}}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gpu_model g;
        gpu_model_opts o = {.n_ctx = 256,
                            .n_batch = 8,
                            .kv = &kvp.buf,
                            .lay = &kvp.lay,
                            .few_kernels = 1,
                            .head_matvec = -1,
                            .few_shape = bad[i][0],
                            .one_shape = bad[i][1],
                            .head_shape = bad[i][2]};
        assert_int_equal(gpu_model_init(&g, vk, tiny(), &o), -1);
        print_message("refused: %s\n", cd_errmsg());
        assert_non_null(strstr(cd_errmsg(), "kernel"));
    }
    gpu_tile_shape bad_tiles[] = {{.bm = 64, .bn = 64, .bk = 48, .tm = 4, .tn = 4},    /* bk not dividing 256 */
                                  {.bm = 64, .bn = 64, .bk = 32, .tm = 6, .tn = 4},    /* tm not a multiple of 4 */
                                  {.bm = 256, .bn = 128, .bk = 16, .tm = 4, .tn = 4},  /* 2,048 invocations */
                                  {.bm = 256, .bn = 256, .bk = 64, .tm = 8, .tn = 8}}; /* 133 KB of shared memory */
    for (size_t i = 0; i < sizeof bad_tiles / sizeof bad_tiles[0]; i++) {
        gpu_model g;
        gpu_model_opts o = {
            .n_ctx = 256, .n_batch = 8, .kv = &kvp.buf, .lay = &kvp.lay, .few_kernels = 1, .big_tile = bad_tiles[i]};
        assert_int_equal(gpu_model_init(&g, vk, tiny(), &o), -1);
        print_message("refused: %s\n", cd_errmsg());
        assert_non_null(strstr(cd_errmsg(), "tile"));
    }
    kv_pool_free(&kvp);
}

/* The memory plan is made on pipelines described, not built (gpu_model_init): on a device of its
 * own (nothing memoized yet), a refusal and a plan-only init build no pipeline, and the plan they
 * make is the one a full init makes with every pipeline built. */
static void test_plan_builds_no_pipeline(void **state) {
    (void)state;
    cvk_ctx *own = calloc(1, sizeof *own);
    assert_non_null(own);
    assert_int_equal(cvk_ctx_init(own, NULL), 0);
    const model_config *c = &tiny()->cfg;
    kv_layout lay;
    kv_pool pool;
    assert_int_equal(kv_layout_init(&lay, c->n_layer, c->n_head_kv, c->head_dim, 16), 0);
    assert_int_equal(kv_pool_init(&pool, own, &lay, 4 * 256), 0);
    gpu_memory_plan refused, planned, built;
    gpu_model g;
    gpu_model_opts o = {.n_ctx = 256, .n_batch = 64, .kv = &pool.buf, .lay = &pool.lay, .plan = &refused};
    o.device_memory = 1 << 20;
    assert_int_equal(gpu_model_init(&g, own, tiny(), &o), -1);
    assert_non_null(strstr(cd_errmsg(), "the weights need"));
    assert_false(refused.fits);
    assert_int_equal(cvk_pipeline_memo_count(&own->dev), 0);
    o.device_memory = 0, o.plan = &planned, o.plan_only = true;
    assert_int_equal(gpu_model_init(&g, own, tiny(), &o), 0);
    assert_null(g.attn_prefill.tile.pipe);
    assert_non_null(g.attn_prefill.tile.layout);
    gpu_model_free(&g);
    assert_int_equal(cvk_pipeline_memo_count(&own->dev), 0);
    o.plan = &built, o.plan_only = false;
    assert_int_equal(gpu_model_init(&g, own, tiny(), &o), 0);
    assert_true(cvk_pipeline_memo_count(&own->dev) > 10);
    assert_non_null(g.attn_prefill.tile.shared); /* held by the device, compiled on first use */
    assert_true(planned.fits && built.fits);
    assert_true(planned.weights == built.weights && planned.kv == built.kv && planned.work == built.work &&
                planned.device == built.device && planned.n_ctx == built.n_ctx);
    assert_true(refused.work == built.work && refused.kv == built.kv);
    gpu_model_free(&g);
    kv_pool_free(&pool);
    cvk_ctx_free(own);
    free(own);
}

/* Bad batches are errors, not crashes. */
static void test_bad_batch(void **state) {
    (void)state;
    gpu_model g;
    init_model(&g, 16);
    int32_t ids[2] = {5, 6}, next[SEQS];
    uint32_t row[2] = {0, SEQS}, pos[2] = {0, 1}, out[1] = {1};
    gpu_batch b = {.n = 2, .ids = ids, .row = row, .pos = pos, .n_out = 1, .out = out};
    assert_int_equal(gpu_forward_batch(&g, &b, next), -1); /* row out of range */
    row[1] = 0;
    pos[1] = N_CTX;
    assert_int_equal(gpu_forward_batch(&g, &b, next), -1); /* position past the context */
    pos[1] = 1;
    ids[0] = -1;
    assert_int_equal(gpu_forward_batch(&g, &b, next), -1);
    ids[0] = 5;
    out[0] = 2;
    assert_int_equal(gpu_forward_batch(&g, &b, next), -1);
    out[0] = 1;
    assert_int_equal(gpu_forward_batch(&g, &b, next), 0);
    b.n = 0;
    assert_int_equal(gpu_forward_batch(&g, &b, next), -1);
    free_model(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance_page16),
        cmocka_unit_test(test_invariance_page4),
        cmocka_unit_test(test_invariance_long),
        cmocka_unit_test(test_bad_batch),
        cmocka_unit_test(test_plan_builds_no_pipeline),
        cmocka_unit_test(test_invariance_gpu_defaults), /* last: they switch the model */
        cmocka_unit_test(test_invariance_gpu_shapes),
        cmocka_unit_test(test_invariance_int_dot),
        cmocka_unit_test(test_bad_shapes),
    };
    return tu_status(cmocka_run_group_tests(tests, vk_setup, vk_teardown));
}
