/* Model loading, config validation and the fingerprint, on synthetic GGUF files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"
#include "runtime/model/synth.h"
#include "tests/test_util.h"

static char *copy(const char *s) { return strdup(s); }

static model *load_ok(const char *path) {
    model *m = NULL;
    if (model_load(&m, path, (model_load_opts){0})) fail_msg("load %s: %s", path, cd_errmsg());
    return m;
}

static void test_tiny_config(void **state) {
    (void)state;
    char *path = copy(tu_make_model("model_tiny.gguf", "tiny", NULL, 7, NULL));
    model *m = load_ok(path);
    synth_spec s;
    synth_preset("tiny", &s);
    const model_config *c = &m->cfg;
    assert_int_equal(c->arch, ARCH_QWEN3MOE);
    assert_int_equal(c->n_layer, s.cfg.n_layer);
    assert_int_equal(c->n_embd, s.cfg.n_embd);
    assert_int_equal(c->n_head, s.cfg.n_head);
    assert_int_equal(c->n_head_kv, s.cfg.n_head_kv);
    assert_int_equal(c->head_dim, s.cfg.head_dim);
    assert_int_equal(c->n_expert, s.cfg.n_expert);
    assert_int_equal(c->n_expert_used, s.cfg.n_expert_used);
    assert_int_equal(c->n_ff_exp, s.cfg.n_ff_exp);
    assert_int_equal(c->n_vocab, 151936);
    assert_true(c->rope.freq_base == 1e6f && c->rope.scaling == ROPE_SCALING_NONE);
    assert_true(m->output != m->tok_embd);
    assert_true(m->chat_template.len > 100);
    /* the two mixes put each supported type somewhere */
    bool seen[QTYPE_COUNT] = {false};
    for (uint64_t i = 0; i < m->file->n_tensors; i++) seen[m->file->tensors[i].type] = true;
    model *lb = load_ok(tu_make_model("model_tiny_lowbit.gguf", "tiny", "mix-lowbit", 7, NULL));
    for (uint64_t i = 0; i < lb->file->n_tensors; i++) seen[lb->file->tensors[i].type] = true;
    for (uint32_t t = 0; t < QTYPE_COUNT; t++)
        if (qtype_supported((enum qtype)t) && !seen[t]) fail_msg("no tensor of mix or mix-lowbit is %s", qtype_name(t));
    model_free(lb);
    model_free(m);
    free(path);
}

static void fingerprint_of(const char *path, uint8_t out[32]) {
    model *m = load_ok(path);
    memcpy(out, m->fingerprint, 32);
    model_free(m);
}

static void one_thread(synth_spec *s) { s->n_threads = 1; }
static void other_theta(synth_spec *s) { s->cfg.rope.freq_base = 5e5f; }

/* The same spec gives the same bytes whatever the thread count; the fingerprint follows. */
static void test_deterministic(void **state) {
    (void)state;
    char *a = copy(tu_make_model("det_a.gguf", "tiny", "q8_0", 11, NULL));
    char *b = copy(tu_make_model("det_b.gguf", "tiny", "q8_0", 11, one_thread));
    size_t na, nb;
    char *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb);
    assert_non_null(da);
    assert_non_null(db);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da);
    free(db);
    uint8_t fa[32], fb[32];
    fingerprint_of(a, fa);
    fingerprint_of(b, fb);
    assert_memory_equal(fa, fb, 32);
    free(a);
    free(b);
}

static void flip_byte(const char *path, uint64_t offset) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, (long)offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)offset, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
}

/* Any weight byte, the RoPE base, or the seed changes the fingerprint. */
static void test_fingerprint_changes(void **state) {
    (void)state;
    char *base = copy(tu_make_model("fp_base.gguf", "tiny", "q8_0", 21, NULL));
    char *theta = copy(tu_make_model("fp_theta.gguf", "tiny", "q8_0", 21, other_theta));
    char *seed = copy(tu_make_model("fp_seed.gguf", "tiny", "q8_0", 22, NULL));
    uint8_t f0[32], f1[32], f2[32], f3[32];
    fingerprint_of(base, f0);
    fingerprint_of(theta, f1);
    fingerprint_of(seed, f2);
    assert_memory_not_equal(f0, f1, 32);
    assert_memory_not_equal(f0, f2, 32);

    /* one bit in the last layer's expert weights */
    gguf_file *g;
    assert_int_equal(gguf_open(&g, base), 0);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.1.ffn_down_exps.weight");
    assert_non_null(t);
    uint64_t off = g->data_offset + t->offset + t->nbytes / 2;
    gguf_close(g);
    flip_byte(base, off);
    fingerprint_of(base, f3);
    assert_memory_not_equal(f0, f3, 32);
    flip_byte(base, off); /* and back */
    fingerprint_of(base, f3);
    assert_memory_equal(f0, f3, 32);
    free(base);
    free(theta);
    free(seed);
}

/* A dense qwen3 model loads through the same code. */
static void make_dense(synth_spec *s) {
    s->cfg.arch = ARCH_QWEN3;
    s->cfg.n_ff = 512;
    s->cfg.n_expert = s->cfg.n_expert_used = s->cfg.n_ff_exp = 0;
}

static void test_dense(void **state) {
    (void)state;
    char *path = copy(tu_make_model("dense.gguf", "tiny", "q8_0", 5, make_dense));
    model *m = load_ok(path);
    assert_int_equal(m->cfg.arch, ARCH_QWEN3);
    assert_int_equal(m->cfg.n_ff, 512);
    assert_non_null(m->layers[0].ffn_down);
    model_free(m);
    free(path);
}

/* ---- hostile models: a valid file with one thing changed ---- */

/* Rewrites a model keeping all metadata and tensors except the given edits. */
typedef struct edit {
    const char *drop_tensor;       /* omit this tensor */
    const char *drop_key;          /* omit this key */
    const char *str_key, *str_val; /* add or replace a string key */
    const char *bad_shape;         /* give this tensor one extra row */
    const char *q8_1_tensor; /* retype this tensor as Q8_1 (ggml's activation type: cinder never computes with it) */
    const char *f32_key;
    float f32_val; /* add or replace an f32 key */
    const char *u32_key;
    uint32_t u32_val; /* add or replace a u32 key */
} edit;

static int copy_bytes(void *user, void *buf, size_t n) {
    const gguf_tensor *t = user;
    memset(buf, 0, n);
    memcpy(buf, t->data, n < t->nbytes ? n : t->nbytes);
    return 0;
}

static void set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_U32: gguf_writer_set_u32(w, key, (uint32_t)v->u64); break;
    case GGUF_VT_I32: gguf_writer_set_i32(w, key, (int32_t)v->i64); break;
    case GGUF_VT_F32: gguf_writer_set_f32(w, key, (float)v->f64); break;
    case GGUF_VT_BOOL: gguf_writer_set_bool(w, key, v->u64 != 0); break;
    case GGUF_VT_STRING: {
        char *s = strndup(v->str.ptr, v->str.len);
        gguf_writer_set_str(w, key, s);
        free(s);
        break;
    }
    case GGUF_VT_ARRAY:
        if (v->arr.type == GGUF_VT_STRING) {
            char **strs = malloc(v->arr.n * sizeof *strs);
            for (uint64_t i = 0; i < v->arr.n; i++) strs[i] = strndup(v->arr.items[i].str.ptr, v->arr.items[i].str.len);
            gguf_writer_set_arr_str(w, key, (const char *const *)strs, v->arr.n);
            for (uint64_t i = 0; i < v->arr.n; i++) free(strs[i]);
            free(strs);
        } else {
            gguf_writer_set_arr(w, key, v->arr.type, v->arr.raw, v->arr.n);
        }
        break;
    default: fail_msg("unexpected metadata type %d for %s", v->type, key);
    }
}

static char *rewrite(const char *src, const char *dst_name, edit e) {
    gguf_file *g;
    assert_int_equal(gguf_open(&g, src), 0);
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        char *key = strndup(g->kv[i].key.ptr, g->kv[i].key.len);
        if (!e.drop_key || strcmp(key, e.drop_key)) set_value(w, key, &g->kv[i].val);
        free(key);
    }
    if (e.str_key) gguf_writer_set_str(w, e.str_key, e.str_val);
    if (e.f32_key) gguf_writer_set_f32(w, e.f32_key, e.f32_val);
    if (e.u32_key) gguf_writer_set_u32(w, e.u32_key, e.u32_val);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        char *name = strndup(t->name.ptr, t->name.len);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        enum qtype type = t->type;
        if (e.bad_shape && !strcmp(name, e.bad_shape)) ne[1] += 1;
        if (e.q8_1_tensor && !strcmp(name, e.q8_1_tensor)) type = QTYPE_Q8_1;
        if (!e.drop_tensor || strcmp(name, e.drop_tensor))
            assert_int_equal(gguf_writer_add_tensor(w, name, type, t->n_dims, ne, NULL, copy_bytes, (void *)t), 0);
        free(name);
    }
    char *dst = copy(tu_tmp_path(dst_name));
    assert_int_equal(gguf_writer_write(w, dst), 0);
    gguf_writer_free(w);
    gguf_close(g);
    return dst;
}

static void expect_load_error(const char *path, const char *needle) {
    model *m = NULL;
    assert_int_equal(model_load(&m, path, (model_load_opts){0}), -1);
    assert_null(m);
    if (!strstr(cd_errmsg(), needle)) fail_msg("error '%s' does not mention '%s'", cd_errmsg(), needle);
}

static void test_hostile_models(void **state) {
    (void)state;
    char *src = copy(tu_make_model("hostile_src.gguf", "tiny", "q8_0", 3, NULL));
    struct {
        const char *file;
        edit e;
        const char *needle;
    } cases[] = {
        {"h_no_q.gguf", {.drop_tensor = "blk.1.attn_q.weight"}, "missing tensor 'blk.1.attn_q.weight'"},
        {"h_no_layers.gguf", {.drop_key = "qwen3moe.block_count"}, "qwen3moe.block_count"},
        {"h_no_experts.gguf", {.drop_key = "qwen3moe.expert_count"}, "qwen3moe.expert_count"},
        {"h_shape.gguf", {.bad_shape = "blk.0.attn_k.weight"}, "blk.0.attn_k.weight' has shape"},
        {"h_type.gguf",
         {.q8_1_tensor = "blk.0.attn_v.weight"},
         "attn_v.weight' has type Q8_1, which cinder does not compute with"},
        {"h_arch.gguf", {.str_key = "general.architecture", .str_val = "llama"}, "architecture 'llama'"},
        {"h_rope.gguf",
         {.str_key = "qwen3moe.rope.scaling.type", .str_val = "longrope"},
         "RoPE scaling 'longrope' is not supported (cinder runs none, linear and yarn)"},
        {"h_yarn_factor.gguf",
         {.str_key = "qwen3moe.rope.scaling.type",
          .str_val = "yarn",
          .f32_key = "qwen3moe.rope.scaling.factor",
          .f32_val = 0.5f},
         "its factor must be at least 1"},
        {"h_rope_factor.gguf", {.f32_key = "qwen3moe.rope.scaling.factor", .f32_val = -4}, "rope.scaling.factor -4"},
        {"h_rope_dims.gguf",
         {.u32_key = "qwen3moe.rope.dimension_count", .u32_val = 32},
         "partial RoPE is not supported"},
        {"h_tok.gguf", {.drop_key = "tokenizer.ggml.merges"}, "tokenizer.ggml.merges"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = rewrite(src, cases[i].file, cases[i].e);
        expect_load_error(p, cases[i].needle);
        free(p);
    }
    /* the untouched rewrite still loads: the edits, not the rewriting, cause the errors */
    char *same = rewrite(src, "h_same.gguf", (edit){0});
    model_free(load_ok(same));
    free(same);
    free(src);
}

/* YaRN from the file or from the command line: the config as llama.cpp reads it, and one
 * fingerprint per RoPE the model runs (on and off never share cache pages; the same YaRN
 * from either source does). The weights are the same file's, so their digest is skipped. */
static model *load_with(const char *path, rope_override o) {
    model *m = NULL;
    if (model_load(&m, path, (model_load_opts){.skip_weight_hash = true, .rope = o}))
        fail_msg("load %s: %s", path, cd_errmsg());
    return m;
}

static void test_yarn(void **state) {
    (void)state;
    char *plain = copy(tu_make_model("yarn_plain.gguf", "tiny", "q8_0", 31, NULL));
    char *yarn = rewrite(plain, "yarn.gguf",
                         (edit){.str_key = "qwen3moe.rope.scaling.type",
                                .str_val = "yarn",
                                .f32_key = "qwen3moe.rope.scaling.factor",
                                .f32_val = 4,
                                .u32_key = "qwen3moe.rope.scaling.original_context_length",
                                .u32_val = 64});
    model *y = load_with(yarn, (rope_override){0}), *p = load_with(plain, (rope_override){0});
    const rope_config *r = &y->cfg.rope;
    assert_int_equal(r->scaling, ROPE_SCALING_YARN);
    assert_true(r->factor == 4 && r->orig_ctx == 64 && r->ext_factor == 1 && r->attn_factor == 1);
    assert_true(r->beta_fast == 32 && r->beta_slow == 1);
    assert_int_equal(y->cfg.n_ctx_train, 40960); /* the file's context_length */
    assert_memory_not_equal(y->fingerprint, p->fingerprint, 32);

    model *p_yarn = load_with(plain, (rope_override){.scaling = "yarn", .factor = 4, .orig_ctx = 64});
    assert_memory_equal(p_yarn->fingerprint, y->fingerprint, 32);
    assert_int_equal(p_yarn->cfg.n_ctx_train, 256); /* orig x factor, as llama.cpp re-adjusts it */
    model *y_off = load_with(yarn, (rope_override){.scaling = "none"});
    assert_memory_equal(y_off->fingerprint, p->fingerprint, 32);
    model *y_8 = load_with(yarn, (rope_override){.factor = 8});
    assert_memory_not_equal(y_8->fingerprint, y->fingerprint, 32);
    assert_int_equal(y_8->cfg.n_ctx_train, 512);
    model *p_lin = load_with(plain, (rope_override){.factor = 2}); /* a factor alone: linear, as llama.cpp */
    assert_int_equal(p_lin->cfg.rope.scaling, ROPE_SCALING_LINEAR);
    model *p_base = load_with(plain, (rope_override){.freq_base = 5e5f});
    assert_memory_not_equal(p_base->fingerprint, p->fingerprint, 32);

    model *bad = NULL;
    assert_int_equal(model_load(&bad, plain, (model_load_opts){.rope = {.scaling = "longrope"}}), -1);
    assert_non_null(strstr(cd_errmsg(), "'longrope' is not supported"));
    assert_int_equal(model_load(&bad, plain, (model_load_opts){.rope = {.scaling = "yarn", .factor = 0.25f}}), -1);
    assert_non_null(strstr(cd_errmsg(), "at least 1"));
    model *all[] = {y, p, p_yarn, y_off, y_8, p_lin, p_base};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) model_free(all[i]);
    free(yarn);
    free(plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_config),         cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_fingerprint_changes), cmocka_unit_test(test_dense),
        cmocka_unit_test(test_hostile_models),      cmocka_unit_test(test_yarn),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
