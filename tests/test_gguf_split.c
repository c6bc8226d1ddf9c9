/* Split models (runtime/gguf/gguf_split.c): the writer's shards read back as the whole model,
 * each tensor's bytes from its own shard; every way a set of shards can be incomplete or
 * inconsistent fails with a message naming the shard; every byte of a shard mutated and every
 * length it could be cut to fails cleanly or reads back consistent. The CLI side (mkmodel
 * --split-max-tensors, llama.cpp's own gguf-split, the same tokens) is tests/gguf_split.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "tests/test_util.h"

#define N_VALUES 8

/* A tensor's values, from its name: every tensor's bytes differ. */
static void values_of(const char *name, float *out) {
    unsigned h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    for (int i = 0; i < N_VALUES; i++) out[i] = (float)((h >> (i % 24)) & 0xffff) + (float)i / 8;
}

static int fill_values(void *user, void *buf, size_t nbytes) {
    assert_int_equal(nbytes, N_VALUES * sizeof(float));
    values_of(user, buf);
    return 0;
}

static void add_tensor(gguf_writer *w, const char *name) {
    int64_t ne[1] = {N_VALUES};
    assert_int_equal(gguf_writer_add_tensor(w, name, QTYPE_F32, 1, ne, NULL, fill_values, (void *)name), 0);
}

/* ---- shards written by gguf_writer_write_split ---- */

static const char *const model_tensors[] = {"a", "b", "c", "d", "e"};
#define N_MODEL 5

static gguf_writer *model_writer(uint32_t alignment) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    gguf_writer_set_str(w, "general.name", "split test");
    if (alignment) gguf_writer_set_u32(w, "general.alignment", alignment);
    for (int i = 0; i < N_MODEL; i++) add_tensor(w, model_tensors[i]);
    return w;
}

static uint64_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* The whole model: every tensor by name with its own bytes, shard max per max tensors. */
static void check_model(const gguf_file *f, uint32_t n_shards, uint64_t max) {
    assert_int_equal(f->n_shards, n_shards);
    assert_int_equal(f->n_tensors, N_MODEL);
    for (int i = 0; i < N_MODEL; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, model_tensors[i]);
        assert_non_null(t);
        assert_ptr_equal(t, &f->tensors[i]);
        assert_int_equal(t->shard, (uint32_t)(i / max));
        float want[N_VALUES];
        values_of(model_tensors[i], want);
        assert_memory_equal(t->data, want, sizeof want);
        /* a shard's tensors lie in its own mapping, never in the first's */
        bool in_first = (const uint8_t *)t->data >= f->base && (const uint8_t *)t->data < f->base + f->size;
        assert_int_equal(in_first, t->shard == 0);
    }
    assert_null(gguf_find_tensor(f, "f"));
}

static void test_write_split_reads_back(void **state) {
    (void)state;
    static const uint32_t alignments[] = {0, 64};
    for (size_t a = 0; a < 2; a++) {
        char prefix[512], path[600];
        snprintf(prefix, sizeof prefix, "%s/split_rt%zu", tu_tmp_dir(), a);
        gguf_writer *w = model_writer(alignments[a]);
        uint32_t n = 0;
        assert_int_equal(gguf_writer_write_split(w, prefix, 2, &n), 0);
        gguf_writer_free(w);
        assert_int_equal(n, 3);
        uint64_t disk = 0;
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(gguf_split_path(path, sizeof path, prefix, i, n), 0);
            disk += file_size(path);
            gguf_file *s;
            if (gguf_open_file(&s, path)) fail_msg("%s", cd_errmsg());
            /* the metadata in the first; split.* (and the alignment) in every one */
            assert_int_equal(s->n_kv, i ? 3 + (alignments[a] != 0) : 5 + (alignments[a] != 0));
            assert_int_equal(s->alignment, alignments[a] ? alignments[a] : GGUF_DEFAULT_ALIGNMENT);
            assert_true(gguf_find_kv(s, GGUF_KEY_SPLIT_NO)->val.type == GGUF_VT_U16);
            assert_int_equal(gguf_find_kv(s, GGUF_KEY_SPLIT_NO)->val.u64, i);
            assert_int_equal(gguf_find_kv(s, GGUF_KEY_SPLIT_COUNT)->val.u64, 3);
            assert_int_equal(gguf_find_kv(s, GGUF_KEY_SPLIT_TENSORS)->val.i64, N_MODEL);
            gguf_close(s);
        }
        assert_int_equal(gguf_split_path(path, sizeof path, prefix, 0, n), 0);
        assert_string_equal(path + strlen(prefix), "-00001-of-00003.gguf");
        gguf_file *f;
        if (gguf_open(&f, path)) fail_msg("%s", cd_errmsg());
        check_model(f, 3, 2);
        assert_int_equal(f->disk_bytes, disk);
        assert_non_null(gguf_find_kv(f, "general.name"));
        gguf_close(f);
    }
}

/* One shard (max >= the tensor count) is a file of its own: -00001-of-00001, split.count 1. */
static void test_one_shard(void **state) {
    (void)state;
    char prefix[512], path[600];
    snprintf(prefix, sizeof prefix, "%s/split_one", tu_tmp_dir());
    gguf_writer *w = model_writer(0);
    uint32_t n = 0;
    assert_int_equal(gguf_writer_write_split(w, prefix, 99, &n), 0);
    assert_int_equal(gguf_writer_write_split(w, prefix, 0, &n), -1);
    assert_non_null(strstr(cd_errmsg(), "at least one tensor"));
    gguf_writer_free(w);
    assert_int_equal(n, 1);
    gguf_split_path(path, sizeof path, prefix, 0, 1);
    gguf_file *f;
    if (gguf_open(&f, path)) fail_msg("%s", cd_errmsg());
    check_model(f, 1, 99);
    assert_int_equal(f->disk_bytes, f->size);
    gguf_close(f);
}

/* ---- hostile shard sets, written key by key ---- */

typedef struct shard {
    int64_t no, count, n_tensors; /* -1: key absent */
    bool count_is_string, metadata_only;
    const char *tensors[5]; /* NULL-terminated */
    const char *name;       /* the file's name, when not the split name */
} shard;

typedef struct shard_set {
    int n;
    shard s[4];
} shard_set;

/* a, b | c, d | e: a model of 5 tensors in 3 shards */
static shard_set base_set(void) {
    return (shard_set){
        3, {{0, 3, 5, .tensors = {"a", "b"}}, {1, 3, 5, .tensors = {"c", "d"}}, {2, 3, 5, .tensors = {"e"}}}};
}

static void write_shard(const char *path, const shard *s) {
    gguf_writer *w = gguf_writer_new();
    if (s->no == 0) gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    if (s->no >= 0)
        gguf_writer_set_value(w, GGUF_KEY_SPLIT_NO, &(gguf_value){.type = GGUF_VT_U16, .u64 = (uint64_t)s->no});
    if (s->count_is_string) gguf_writer_set_str(w, GGUF_KEY_SPLIT_COUNT, "3");
    else if (s->count >= 0)
        gguf_writer_set_value(w, GGUF_KEY_SPLIT_COUNT, &(gguf_value){.type = GGUF_VT_U32, .u64 = (uint64_t)s->count});
    if (s->n_tensors >= 0) gguf_writer_set_i32(w, GGUF_KEY_SPLIT_TENSORS, (int32_t)s->n_tensors);
    for (int i = 0; s->tensors[i]; i++) add_tensor(w, s->tensors[i]);
    if (gguf_writer_write(w, path)) fail_msg("%s", cd_errmsg());
    gguf_writer_free(w);
}

/* Writes the set under tmp/NAME as NAME-0000i-of-00003.gguf (or a shard's own name); returns
 * the first shard's path. */
static const char *write_set(const char *name, const shard_set *set, char prefix[512]) {
    static char first[600];
    char dir[400], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmp_dir(), name);
    tu_remove_tree(dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(prefix, 512, "%s/m", dir);
    for (int i = 0; i < set->n; i++) {
        const shard *s = &set->s[i];
        if (s->name) snprintf(path, sizeof path, "%s/%s", dir, s->name);
        else gguf_split_path(path, sizeof path, prefix, (uint32_t)i, 3);
        write_shard(path, s);
        if (i == 0) snprintf(first, sizeof first, "%s", path);
    }
    return first;
}

typedef struct hostile {
    const char *name;
    void (*mutate)(shard_set *);
    const char *open; /* the file opened: NULL the first shard, else this shard's name */
    const char *want; /* in the message; "%P" stands for the directory's prefix */
} hostile;

static void m_none(shard_set *s) { (void)s; }
static void m_missing_last(shard_set *s) { s->n = 2; }
static void m_missing_middle(shard_set *s) { s->s[1].name = "other.gguf"; }
static void m_count_differs(shard_set *s) { s->s[1].count = 4; }
static void m_no_differs(shard_set *s) { s->s[2].no = 1; }
static void m_no_past_count(shard_set *s) { s->s[2].no = 7; }
static void m_no_count_key(shard_set *s) { s->s[1].count = -1; }
static void m_total_short(shard_set *s) { s->s[0].n_tensors = s->s[1].n_tensors = s->s[2].n_tensors = 6; }
static void m_total_differs(shard_set *s) { s->s[2].n_tensors = 9; }
static void m_no_total(shard_set *s) { s->s[0].n_tensors = -1; }
static void m_duplicate(shard_set *s) { s->s[2].tensors[0] = "b"; }
static void m_count_string(shard_set *s) { s->s[0].count_is_string = true; }
static void m_count_huge(shard_set *s) { s->s[0].count = 70000; }
static void m_renamed(shard_set *s) { s->s[0].name = "model.gguf"; }
static void m_first_no(shard_set *s) {
    s->s[0].no = 1;
    s->s[0].name = "model.gguf";
}

static const hostile hostiles[] = {
    {"not_first", m_none, "m-00002-of-00003.gguf",
     "shard 2 of 3 of a split model: open the first shard, %P-00001-of-00003.gguf"},
    {"not_first_renamed", m_first_no, "model.gguf", "shard 2 of 3 of a split model (split.no 1): open the first shard"},
    {"missing_last", m_missing_last, NULL, "shard 3 of 3, %P-00003-of-00003.gguf: cannot open: No such file"},
    {"missing_middle", m_missing_middle, NULL, "shard 2 of 3, %P-00002-of-00003.gguf: cannot open: No such file"},
    {"count_differs", m_count_differs, NULL,
     "shard 2 of 3, %P-00002-of-00003.gguf: split.count is 4, the first shard's 3: a shard of another split"},
    {"no_differs", m_no_differs, NULL,
     "shard 3 of 3, %P-00003-of-00003.gguf: split.no is 1 but its name makes it shard 3 (split.no 2)"},
    {"no_past_count", m_no_past_count, NULL, "shard 3 of 3, %P-00003-of-00003.gguf: split.no 7 is past split.count 3"},
    {"no_count_key", m_no_count_key, NULL, "shard 2 of 3, %P-00002-of-00003.gguf: has no split.count"},
    {"total_short", m_total_short, NULL, "the 3 shards hold 5 tensors, split.tensors.count says 6"},
    {"total_differs", m_total_differs, NULL,
     "shard 3 of 3, %P-00003-of-00003.gguf: split.tensors.count is 9, the first shard's 5"},
    {"no_total", m_no_total, NULL, "a split model's first shard without split.tensors.count"},
    {"duplicate", m_duplicate, NULL, "tensor 'b' is in two shards: %P-00001-of-00003.gguf and %P-00003-of-00003.gguf"},
    {"count_string", m_count_string, NULL, "key 'split.count' has type string, expected integer"},
    {"count_huge", m_count_huge, NULL, "split.count is 70000 (at most 65535)"},
    {"renamed", m_renamed, NULL, "split.count is 3 but the name does not end in -00001-of-00003.gguf"},
};

/* "%P" in want replaced by prefix. */
static void expand(const char *want, const char *prefix, char *out, size_t cap) {
    size_t n = 0;
    for (const char *p = want; *p && n + 1 < cap;) {
        if (p[0] == '%' && p[1] == 'P') {
            n += (size_t)snprintf(out + n, cap - n, "%s", prefix);
            p += 2;
        } else {
            out[n++] = *p++;
        }
    }
    out[n < cap ? n : cap - 1] = 0;
}

static void test_hostile_sets(void **state) {
    (void)state;
    char prefix[512], want[1600], path[600];
    for (size_t i = 0; i < sizeof hostiles / sizeof hostiles[0]; i++) {
        const hostile *h = &hostiles[i];
        shard_set set = base_set();
        h->mutate(&set);
        char name[64];
        snprintf(name, sizeof name, "split_%s", h->name);
        const char *first = write_set(name, &set, prefix);
        if (h->open) snprintf(path, sizeof path, "%s/%s/%s", tu_tmp_dir(), name, h->open);
        else snprintf(path, sizeof path, "%s", first);
        gguf_file *f = (gguf_file *)&set;
        cd_errclear();
        if (gguf_open(&f, path) == 0) fail_msg("%s: opened", h->name);
        assert_null(f);
        expand(h->want, prefix, want, sizeof want);
        if (!strstr(cd_errmsg(), want)) fail_msg("%s: message\n  %s\nlacks\n  %s", h->name, cd_errmsg(), want);
    }
    /* the base set itself opens, and a non-first shard still opens on its own */
    shard_set set = base_set();
    const char *first = write_set("split_base", &set, prefix);
    gguf_file *f;
    if (gguf_open(&f, first)) fail_msg("%s", cd_errmsg());
    assert_int_equal(f->n_tensors, 5);
    gguf_close(f);
    gguf_split_path(path, sizeof path, prefix, 1, 3);
    if (gguf_open_file(&f, path)) fail_msg("%s", cd_errmsg());
    assert_int_equal(f->n_tensors, 2);
    gguf_close(f);
}

/* split.count 1 and 0 (what gguf-split --merge leaves) are one file; split.tensors.count must
 * then be the file's own count. The first shard may hold no tensor (gguf-split
 * --no-tensor-first-split). */
static void test_single_and_empty_first(void **state) {
    (void)state;
    char path[600];
    static const struct {
        int64_t count, n_tensors;
        bool opens;
    } one[] = {{1, 4, true}, {0, 4, true}, {1, 5, false}, {-1, 4, true}, {1, -1, true}};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        snprintf(path, sizeof path, "%s/split_single%zu.gguf", tu_tmp_dir(), i);
        write_shard(path, &(shard){0, one[i].count, one[i].n_tensors, .tensors = {"a", "b", "c", "d"}});
        gguf_file *f;
        int rc = gguf_open(&f, path);
        if (one[i].opens) {
            if (rc) fail_msg("case %zu: %s", i, cd_errmsg());
            assert_int_equal(f->n_shards, 1);
            assert_int_equal(f->n_tensors, 4);
            gguf_close(f);
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(cd_errmsg(), "split.tensors.count is 5 but the file has 4 tensors"));
        }
    }
    char prefix[512];
    shard_set set = {
        3, {{0, 3, 5, .tensors = {NULL}}, {1, 3, 5, .tensors = {"a", "b", "c"}}, {2, 3, 5, .tensors = {"d", "e"}}}};
    const char *first = write_set("split_empty_first", &set, prefix);
    gguf_file *f;
    if (gguf_open(&f, first)) fail_msg("%s", cd_errmsg());
    assert_int_equal(f->n_tensors, 5);
    assert_int_equal(gguf_find_tensor(f, "a")->shard, 1);
    assert_int_equal(gguf_find_tensor(f, "e")->shard, 2);
    gguf_close(f);
}

/* Shard 2 mutated at every byte (three values) and cut to every length: opening the model
 * fails with a message naming shard 2 (or the total tensor count), or succeeds with every tensor inside its shard and the
 * tensors of shards 1 and 3 intact. Under ASan any read outside a mapping is reported. */
static void test_shard_mutations(void **state) {
    (void)state;
    char prefix[512], path[600];
    shard_set set = base_set();
    const char *first = write_set("split_mutate", &set, prefix);
    gguf_split_path(path, sizeof path, prefix, 1, 3);
    size_t len;
    char *orig = tu_read_file(path, &len);
    assert_non_null(orig);
    char *buf = malloc(len);
    assert_non_null(buf);
    unsigned failed = 0, opened = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        for (int v = 0; v < (cut < len ? 4 : 1); v++) {
            memcpy(buf, orig, len);
            size_t n = len;
            if (v == 0) n = cut; /* truncated */
            else buf[cut] = (char)(v == 1 ? buf[cut] ^ 0x01 : v == 2 ? 0xff : 0x00);
            assert_int_equal(tu_write_file(path, buf, n), 0);
            gguf_file *f;
            cd_errclear();
            if (gguf_open(&f, first)) {
                /* shard 2's tensor count is only wrong against the total */
                if (!strstr(cd_errmsg(), path) && !strstr(cd_errmsg(), "split.tensors.count says 5"))
                    fail_msg("cut %zu v %d: message does not name shard 2: %s", cut, v, cd_errmsg());
                failed++;
                continue;
            }
            opened++;
            for (const char *const *t = (const char *const[]){"a", "b", "e", NULL}; *t; t++) {
                float want[N_VALUES];
                values_of(*t, want);
                assert_memory_equal(gguf_find_tensor(f, *t)->data, want, sizeof want);
            }
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                if (t->nbytes) (void)*(volatile const uint8_t *)((const uint8_t *)t->data + t->nbytes - 1);
            }
            gguf_close(f);
        }
    }
    assert_int_equal(tu_write_file(path, orig, len), 0);
    print_message("shard 2 (%zu bytes): %u variants failed cleanly, %u opened\n", len, failed, opened);
    assert_true(failed > len);
    free(buf);
    free(orig);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_split_reads_back), cmocka_unit_test(test_one_shard),
        cmocka_unit_test(test_hostile_sets),           cmocka_unit_test(test_single_and_empty_first),
        cmocka_unit_test(test_shard_mutations),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
