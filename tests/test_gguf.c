/* GGUF reader and writer.
 *
 * - Every metadata value type round-trips through the writer and reader: scalars at their
 *   limits, strings with embedded NULs, empty strings and arrays, arrays of strings, arrays
 *   nested to the limit. Keys keep their insertion order; setting a key twice replaces it.
 * - Tensors of every known type round-trip with their bytes, at the default alignment and at
 *   general.alignment 64; fill callbacks get buffers of exactly their tensor's size.
 * - The getters coerce integers when the value fits and name the key when they refuse.
 * - Hostile files: a table of cases, each a small valid file with one field corrupted, must
 *   fail with a message naming the problem; every prefix of a valid file must fail (until
 *   the last tensor's bytes are all there); every single-byte mutation must either fail
 *   cleanly or give a file whose tensors all lie inside the buffer. Buffers are heap copies
 *   of exactly the parsed size, so ASan catches any read past the end.
 * - Writer failures: invalid tensors, a failing fill callback, an I/O error (RLIMIT_FSIZE),
 *   an uncreatable path; none leaves a file (or a .tmp) behind, and an old file survives.
 * - llama.cpp agrees: when the prebuilt libggml-base from node-llama-cpp is present, it
 *   reads what we write and we read what it writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "tests/test_util.h"

/* With CINDER_GGUF_SEEDS=dir, the valid files these tests build are also written there: that
 * is how the fuzzing seeds in tests/fuzz/corpus were made. */
static void seed(const char *name, const void *p, size_t n) {
    const char *dir = getenv("CINDER_GGUF_SEEDS");
    if (!dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static void seed_file(const char *name, const char *src) {
    size_t n;
    char *p = tu_read_file(src, &n);
    assert_non_null(p);
    seed(name, p, n);
    free(p);
}

/* ---- a byte builder for hand-made files ---- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_key(bb *b, const char *key, enum gguf_vtype t) {
    bb_str(b, key);
    bb_u32(b, t);
}

/* ---- a small valid file, described field by field so a case can corrupt one ---- */

typedef struct tinfo {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;
} tinfo;

typedef struct spec {
    uint32_t magic, version;
    uint64_t n_tensors, n_kv; /* as written in the header */
    bb kv;                    /* encoded metadata entries */
    int n_t;
    tinfo t[4];
    uint64_t pad_to;           /* padding before the data section */
    uint64_t data_bytes;       /* written after the padding */
    size_t cut;                /* keep only this many bytes (SIZE_MAX: all)... */
    bool cut_after_kv;         /* ...counted from the end of the metadata */
    size_t kv_end, header_end; /* set by build: ends of the metadata and the tensor infos */
} spec;

/* general.architecture = "test", test.count = u32 7; tensor a: F32 [8,2] at 0 (64 bytes),
 * tensor b: Q8_0 [32] at 64 (34 bytes); data section exactly 98 bytes. */
static void base_spec(spec *s) {
    memset(s, 0, sizeof *s);
    s->magic = 0x46554747;
    s->version = 3;
    bb_key(&s->kv, "general.architecture", GGUF_VT_STRING);
    bb_str(&s->kv, "test");
    bb_key(&s->kv, "test.count", GGUF_VT_U32);
    bb_u32(&s->kv, 7);
    s->n_kv = 2;
    s->n_t = 2;
    s->t[0] = (tinfo){"a", 2, {8, 2}, QTYPE_F32, 0};
    s->t[1] = (tinfo){"b", 1, {32}, QTYPE_Q8_0, 64};
    s->n_tensors = 2;
    s->pad_to = 32;
    s->data_bytes = 98;
    s->cut = SIZE_MAX;
}

static bb build(spec *s) {
    bb b = {0};
    bb_u32(&b, s->magic);
    bb_u32(&b, s->version);
    bb_u64(&b, s->n_tensors);
    bb_u64(&b, s->n_kv);
    bb_put(&b, s->kv.p, s->kv.n);
    s->kv_end = b.n;
    for (int i = 0; i < s->n_t; i++) {
        const tinfo *t = &s->t[i];
        bb_str(&b, t->name);
        bb_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++) bb_u64(&b, t->ne[d]); /* the reader stops at 5 */
        bb_u32(&b, t->type);
        bb_u64(&b, t->offset);
    }
    s->header_end = b.n;
    while (b.n % s->pad_to) bb_u8(&b, 0);
    for (uint64_t i = 0; i < s->data_bytes; i++) bb_u8(&b, (uint8_t)(i * 7 + 1));
    free(s->kv.p);
    s->kv = (bb){0};
    return b;
}

/* Parses an exact-size heap copy (so ASan sees any over-read). */
static int parse_copy(const uint8_t *p, size_t n, gguf_file **f, uint8_t **copy) {
    *copy = malloc(n ? n : 1);
    assert_non_null(*copy);
    if (n) memcpy(*copy, p, n);
    cd_errclear();
    return gguf_parse(f, *copy, n);
}

/* Every tensor lies inside the buffer, is consistent with its type and dims, and can be
 * found by name; every key can be found and read by the getters without crashing. */
static void check_invariants(const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        assert_true(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        assert_true((const uint8_t *)t->data >= f->base);
        assert_true((const uint8_t *)t->data + t->nbytes <= f->base + f->size);
        assert_true((const uint8_t *)t->data == f->base + f->data_offset + t->offset);
        assert_int_equal(t->offset % f->alignment, 0);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        assert_int_equal(t->nbytes, qtype_row_bytes(t->type, t->ne[0]) * (uint64_t)rows);
        char name[256];
        if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            assert_ptr_equal(gguf_find_tensor(f, name), t);
        }
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        char key[256];
        if (kv->key.len >= sizeof key || memchr(kv->key.ptr, 0, kv->key.len)) continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        assert_ptr_equal(gguf_find_kv(f, key), kv);
        uint32_t u32;
        uint64_t u64;
        int32_t i32;
        float f32;
        bool b;
        gguf_str s;
        const gguf_value *a;
        (void)gguf_get_u32(f, key, &u32);
        (void)gguf_get_u64(f, key, &u64);
        (void)gguf_get_i32(f, key, &i32);
        (void)gguf_get_f32(f, key, &f32);
        (void)gguf_get_bool(f, key, &b);
        (void)gguf_get_str(f, key, &s);
        if (gguf_get_arr(f, key, GGUF_VT_COUNT, &a) == 0)
            for (uint64_t j = 0; j < a->arr.n && j < 4; j++) (void)(gguf_arr_i64(a, j) + gguf_arr_f64(a, j));
    }
}

/* ---- hostile files ---- */

static void c_magic(spec *s) { s->magic = 0x46554746; }
static void c_version1(spec *s) { s->version = 1; }
static void c_version4(spec *s) { s->version = 4; }
static void c_version_be(spec *s) { s->version = 0x03000000; }
static void c_n_kv_huge(spec *s) { s->n_kv = 1ull << 60; }
static void c_n_tensors_huge(spec *s) { s->n_tensors = 1ull << 60; }
static void c_key_len_huge(spec *s) {
    bb_u64(&s->kv, 1ull << 62);
    bb_put(&s->kv, "xyz", 3);
    s->n_kv++;
}
static void c_value_type(spec *s) {
    bb_key(&s->kv, "x", 13);
    bb_u32(&s->kv, 0);
    s->n_kv++;
}
static void c_array_elem_type(spec *s) {
    bb_key(&s->kv, "x", GGUF_VT_ARRAY);
    bb_u32(&s->kv, 99);
    bb_u64(&s->kv, 1);
    s->n_kv++;
}
static void c_array_count_fixed(spec *s) {
    bb_key(&s->kv, "x", GGUF_VT_ARRAY);
    bb_u32(&s->kv, GGUF_VT_U32);
    bb_u64(&s->kv, 1ull << 62);
    s->n_kv++;
}
static void c_array_count_str(spec *s) {
    bb_key(&s->kv, "x", GGUF_VT_ARRAY);
    bb_u32(&s->kv, GGUF_VT_STRING);
    bb_u64(&s->kv, 1ull << 61);
    s->n_kv++;
}
static void c_array_count_nested(spec *s) {
    bb_key(&s->kv, "x", GGUF_VT_ARRAY);
    bb_u32(&s->kv, GGUF_VT_ARRAY);
    bb_u64(&s->kv, 1ull << 60);
    s->n_kv++;
}
static void c_array_count_u64max(spec *s) {
    bb_key(&s->kv, "x", GGUF_VT_ARRAY);
    bb_u32(&s->kv, GGUF_VT_F64);
    bb_u64(&s->kv, UINT64_MAX);
    s->n_kv++;
}
static void c_string_len_huge(spec *s) {
    bb_key(&s->kv, "x", GGUF_VT_STRING);
    bb_u64(&s->kv, 1ull << 63);
    s->n_kv++;
}
static void nest(spec *s, int depth) {
    bb_key(&s->kv, "deep", GGUF_VT_ARRAY);
    for (int i = 1; i < depth; i++) {
        bb_u32(&s->kv, GGUF_VT_ARRAY);
        bb_u64(&s->kv, 1);
    }
    bb_u32(&s->kv, GGUF_VT_U8);
    bb_u64(&s->kv, 1);
    bb_u8(&s->kv, 42);
    s->n_kv++;
}
static void c_nest9(spec *s) { nest(s, GGUF_MAX_NESTING + 1); }
static void c_nest_huge(spec *s) {
    /* 100000 levels: recursion must stop at the limit, not at the stack's end. */
    bb_key(&s->kv, "deep", GGUF_VT_ARRAY);
    for (int i = 0; i < 100000; i++) {
        bb_u32(&s->kv, GGUF_VT_ARRAY);
        bb_u64(&s->kv, 1);
    }
    s->n_kv++;
}
static void c_dup_key(spec *s) {
    bb_key(&s->kv, "test.count", GGUF_VT_U32);
    bb_u32(&s->kv, 8);
    s->n_kv++;
}
static void align_kv(spec *s, enum gguf_vtype t, uint64_t v) {
    bb_key(&s->kv, "general.alignment", t);
    if (t == GGUF_VT_U64) bb_u64(&s->kv, v);
    else if (t == GGUF_VT_STRING) bb_str(&s->kv, "32");
    else bb_u32(&s->kv, (uint32_t)v);
    s->n_kv++;
}
static void c_align0(spec *s) { align_kv(s, GGUF_VT_U32, 0); }
static void c_align48(spec *s) { align_kv(s, GGUF_VT_U32, 48); }
static void c_align_u64(spec *s) { align_kv(s, GGUF_VT_U64, 32); }
static void c_align_str(spec *s) { align_kv(s, GGUF_VT_STRING, 0); }
static void c_align64_misaligned(spec *s) {
    align_kv(s, GGUF_VT_U32, 64);
    s->pad_to = 64;
    s->t[1].offset = 96;
    s->data_bytes = 96 + 34;
}
static void c_type77(spec *s) { s->t[0].type = 77; }
static void c_type4(spec *s) { s->t[0].type = 4; } /* Q4_2: removed from ggml */
static void c_type_huge(spec *s) { s->t[0].type = 0xffffffffu; }
static void c_dims5(spec *s) { s->t[0].n_dims = 5; }
static void c_dims0(spec *s) { s->t[0].n_dims = 0; }
static void c_dims_huge(spec *s) { s->t[0].n_dims = 0x7fffffff; }
static void c_dim_overflow(spec *s) { s->t[0] = (tinfo){"a", 2, {1ull << 32, 1ull << 32}, QTYPE_F32, 0}; }
static void c_dim_overflow4(spec *s) { s->t[0] = (tinfo){"a", 4, {1 << 16, 1 << 16, 1 << 16, 1 << 16}, QTYPE_F32, 0}; }
static void c_dim_negative(spec *s) { s->t[0].ne[1] = 1ull << 63; }
static void c_bytes_overflow(spec *s) { s->t[0] = (tinfo){"a", 1, {1ull << 62}, QTYPE_F32, 0}; }
static void c_zero_dim_overflow(spec *s) { s->t[0] = (tinfo){"a", 3, {0, 1ull << 62, 1ull << 62}, QTYPE_F32, 0}; }
static void c_block(spec *s) { s->t[1].ne[0] = 33; }
static void c_misaligned(spec *s) { s->t[1].offset = 68; }
static void c_offset_range(spec *s) { s->t[1].offset = 1024; }
static void c_offset_huge(spec *s) { s->t[1].offset = 1ull << 63; }
static void c_offset_wrap(spec *s) { s->t[1].offset = UINT64_MAX - 31; }
static void c_size_range(spec *s) { s->t[0].ne[1] = 100; }
static void c_data_short(spec *s) { s->data_bytes = 97; }
static void c_overlap(spec *s) { s->t[1].offset = 32; }
static void c_overlap_same(spec *s) { s->t[1].offset = 0; }
static void c_overlap_inside(spec *s) {
    s->t[0].ne[1] = 8; /* a: [0,256); b at 64 lies inside; c after both */
    s->t[2] = (tinfo){"c", 1, {8}, QTYPE_F32, 256};
    s->n_t = 3;
    s->n_tensors = 3;
    s->data_bytes = 288;
}
static void c_overlap_later(spec *s) {
    /* a: [0,64), c: [64,96), b: [96,130), d: [128,160): only the last pair overlaps. */
    s->t[1].offset = 96;
    s->t[2] = (tinfo){"c", 1, {8}, QTYPE_F32, 64};
    s->t[3] = (tinfo){"d", 1, {8}, QTYPE_F32, 128};
    s->n_t = 4;
    s->n_tensors = 4;
    s->data_bytes = 160;
}
static void c_dup_tensor(spec *s) { s->t[1].name = "a"; }
static void c_cut0(spec *s) { s->cut = 0; }
static void c_cut3(spec *s) { s->cut = 3; }
static void c_cut4(spec *s) { s->cut = 4; }
static void c_cut11(spec *s) { s->cut = 11; }
static void c_cut_infos(spec *s) {
    s->cut = 0;
    s->cut_after_kv = true;
}
static void c_cut_in_info(spec *s) {
    s->cut = 64; /* tensor a's info is 41 bytes; this cuts b's type field */
    s->cut_after_kv = true;
}
static void c_more_tensors(spec *s) { s->n_tensors = 3; }
static void c_ugly_name(spec *s) {
    s->t[0].name = "\x01\\bad\xff";
    s->t[0].type = 77;
}

typedef struct hostile {
    const char *what;
    void (*mutate)(spec *);
    const char *expect;
} hostile;

static const hostile hostile_cases[] = {
    {"bad magic", c_magic, "bad magic 0x46554746"},
    {"version 1", c_version1, "unsupported GGUF version 1"},
    {"version 4", c_version4, "unsupported GGUF version 4"},
    {"big-endian version", c_version_be, "big-endian"},
    {"n_kv 2^60", c_n_kv_huge, "metadata count 1152921504606846976 cannot fit"},
    {"n_tensors 2^60", c_n_tensors_huge, "tensor count 1152921504606846976 cannot fit"},
    {"key length 2^62", c_key_len_huge, "truncated header: metadata key 2: key needs 4611686018427387904"},
    {"unknown value type", c_value_type, "metadata key 2 'x' has unknown value type 13"},
    {"unknown array element type", c_array_elem_type, "'x': unknown array element type 99"},
    {"u32 array of 2^62", c_array_count_fixed, "array length 4611686018427387904 cannot fit"},
    {"string array of 2^61", c_array_count_str, "array length 2305843009213693952 cannot fit"},
    {"nested array of 2^60", c_array_count_nested, "array length 1152921504606846976 cannot fit"},
    {"f64 array of 2^64-1", c_array_count_u64max, "cannot fit"},
    {"string length 2^63", c_string_len_huge, "truncated header: metadata key 2 'x': string needs"},
    {"nesting 9", c_nest9, "'deep': arrays nested deeper than 8 levels"},
    {"nesting 100000", c_nest_huge, "nested deeper than 8"},
    {"duplicate key", c_dup_key, "duplicate key 'test.count'"},
    {"alignment 0", c_align0, "general.alignment 0 is not a nonzero power of two"},
    {"alignment 48", c_align48, "general.alignment 48 is not a nonzero power of two"},
    {"alignment u64", c_align_u64, "general.alignment has type u64, expected u32"},
    {"alignment string", c_align_str, "general.alignment has type string, expected u32"},
    {"offset not aligned to 64", c_align64_misaligned, "tensor 'b' offset 96 not aligned to 64"},
    {"type 77", c_type77, "tensor 'a' has unknown type 77"},
    {"type 4", c_type4, "tensor 'a' has type 4 (Q4_2), which ggml removed from GGUF files"},
    {"type 2^32-1", c_type_huge, "tensor 'a' has unknown type 4294967295"},
    {"5 dims", c_dims5, "tensor 'a' has 5 dimensions"},
    {"0 dims", c_dims0, "tensor 'a' has 0 dimensions"},
    {"2^31 dims", c_dims_huge, "tensor 'a' has 2147483647 dimensions"},
    {"2^32 x 2^32", c_dim_overflow, "tensor 'a' dimension overflow"},
    {"(2^16)^4", c_dim_overflow4, "tensor 'a' dimension overflow"},
    {"negative dim", c_dim_negative, "tensor 'a' dimension 1 is negative"},
    {"2^62 floats", c_bytes_overflow, "tensor 'a' dimension overflow"},
    {"0 x 2^62 x 2^62", c_zero_dim_overflow, "tensor 'a' dimension overflow"},
    {"row not whole blocks", c_block, "tensor 'b' row length 33 is not a multiple of the Q8_0 block size 32"},
    {"offset not aligned", c_misaligned, "tensor 'b' offset 68 not aligned to 32"},
    {"offset past end", c_offset_range, "tensor 'b' data ["},
    {"offset 2^63", c_offset_huge, "out of file range"},
    {"offset wraps", c_offset_wrap, "tensor 'b' data at offset"},
    {"size past end", c_size_range, "tensor 'a' data ["},
    {"data one byte short", c_data_short, ") out of file range (file has"},
    {"overlap", c_overlap, "tensors 'a' and 'b' overlap"},
    {"same offset", c_overlap_same, "overlap"},
    {"inside another", c_overlap_inside, "tensors 'a' and 'b' overlap"},
    {"overlap after gaps", c_overlap_later, "tensors 'b' and 'd' overlap"},
    {"duplicate tensor", c_dup_tensor, "duplicate tensor name 'a'"},
    {"more tensors than infos", c_more_tensors, "tensor '' has 0 dimensions"},
    {"unprintable name", c_ugly_name, "tensor '\\x01\\x5cbad\\xff' has unknown type 77"},
    {"empty", c_cut0, "truncated header: file header: magic needs 4 bytes at offset 0, 0 left"},
    {"3 bytes", c_cut3, "truncated header: file header: magic needs 4 bytes"},
    {"no version", c_cut4, "truncated header: file header: version needs 4 bytes at offset 4, 0 left"},
    {"half a count", c_cut11, "truncated header: file header: tensor count"},
    {"no tensor infos", c_cut_infos, "truncated header: tensor infos: tensor count 2 cannot fit in the 0 bytes left"},
    {"half a tensor info", c_cut_in_info, "truncated header: tensor 1 'b': type needs 4 bytes"},
};

static void run_hostile(const hostile *c) {
    spec s;
    base_spec(&s);
    c->mutate(&s);
    bb b = build(&s);
    size_t n = s.cut == SIZE_MAX ? b.n : s.cut_after_kv ? s.kv_end + s.cut : s.cut;
    assert_true(n <= b.n);
    gguf_file *f;
    uint8_t *copy;
    int rc = parse_copy(b.p, n, &f, &copy);
    if (rc == 0) {
        gguf_close(f);
        fail_msg("case '%s': parsed, expected failure with '%s'", c->what, c->expect);
    }
    assert_null(f);
    if (!strstr(cd_errmsg(), c->expect))
        fail_msg("case '%s': message '%s' lacks '%s'", c->what, cd_errmsg(), c->expect);
    free(copy);
    free(b.p);
}

static void test_hostile_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof hostile_cases / sizeof hostile_cases[0]; i++) run_hostile(&hostile_cases[i]);
}

static void test_base_spec_valid(void **state) {
    (void)state;
    spec s;
    base_spec(&s);
    bb b = build(&s);
    gguf_file *f;
    uint8_t *copy;
    assert_int_equal(parse_copy(b.p, b.n, &f, &copy), 0);
    assert_int_equal(f->version, 3);
    assert_int_equal(f->n_kv, 2);
    assert_int_equal(f->n_tensors, 2);
    assert_int_equal(f->alignment, 32);
    assert_int_equal(f->data_offset % 32, 0);
    const gguf_tensor *a = gguf_find_tensor(f, "a"), *bt = gguf_find_tensor(f, "b");
    assert_non_null(a);
    assert_non_null(bt);
    assert_int_equal(a->nbytes, 64);
    assert_int_equal(bt->nbytes, 34);
    assert_int_equal(((const uint8_t *)bt->data)[0], (uint8_t)(64 * 7 + 1));
    check_invariants(f);
    seed("base.seed", b.p, b.n);
    gguf_close(f);
    free(copy);
    free(b.p);

    /* Version 2 has the same layout and is read too; so is nesting exactly at the limit, and
     * a file without tensors whose padding is cut off. */
    base_spec(&s);
    s.version = 2;
    nest(&s, GGUF_MAX_NESTING);
    b = build(&s);
    assert_int_equal(parse_copy(b.p, b.n, &f, &copy), 0);
    const gguf_value *v = &gguf_find_kv(f, "deep")->val;
    for (int i = 1; i < GGUF_MAX_NESTING; i++) {
        assert_int_equal(v->type, GGUF_VT_ARRAY);
        assert_int_equal(v->arr.n, 1);
        v = &v->arr.items[0];
    }
    assert_int_equal(v->arr.type, GGUF_VT_U8);
    assert_int_equal(gguf_arr_i64(v, 0), 42);
    seed("v2_nest8.seed", b.p, b.n);
    gguf_close(f);
    free(copy);
    free(b.p);

    base_spec(&s);
    s.n_t = 0;
    s.n_tensors = 0;
    s.data_bytes = 0;
    s.pad_to = 1;
    b = build(&s);
    assert_true(b.n % 32 != 0);
    assert_int_equal(parse_copy(b.p, b.n, &f, &copy), 0);
    assert_int_equal(f->data_offset, b.n);
    seed("no_tensors.seed", b.p, b.n);
    gguf_close(f);
    free(copy);
    free(b.p);
}

/* A richer small file (arrays, nested arrays, three tensors) for truncation and mutation. */
static bb rich_file(size_t *data_end) {
    spec s;
    base_spec(&s);
    bb_key(&s.kv, "arr.str", GGUF_VT_ARRAY);
    bb_u32(&s.kv, GGUF_VT_STRING);
    bb_u64(&s.kv, 3);
    bb_str(&s.kv, "one");
    bb_str(&s.kv, "");
    bb_str(&s.kv, "three");
    bb_key(&s.kv, "arr.nested", GGUF_VT_ARRAY);
    bb_u32(&s.kv, GGUF_VT_ARRAY);
    bb_u64(&s.kv, 2);
    bb_u32(&s.kv, GGUF_VT_I16);
    bb_u64(&s.kv, 2);
    bb_u32(&s.kv, 0x8001ffff);
    bb_u32(&s.kv, GGUF_VT_STRING);
    bb_u64(&s.kv, 1);
    bb_str(&s.kv, "x");
    bb_key(&s.kv, "general.alignment", GGUF_VT_U32);
    bb_u32(&s.kv, 32);
    bb_key(&s.kv, "f", GGUF_VT_F64);
    bb_u64(&s.kv, 0x400921fb54442d18ull);
    s.n_kv += 4;
    s.t[2] = (tinfo){"c", 3, {2, 2, 2}, QTYPE_F16, 128};
    s.n_t = 3;
    s.n_tensors = 3;
    s.data_bytes = 144;
    bb b = build(&s);
    *data_end = b.n;
    return b;
}

static void test_every_prefix_fails(void **state) {
    (void)state;
    size_t end;
    bb b = rich_file(&end);
    seed("rich.seed", b.p, b.n);
    for (size_t n = 0; n <= b.n; n++) {
        gguf_file *f;
        uint8_t *copy;
        int rc = parse_copy(b.p, n, &f, &copy);
        if (n < end) {
            if (rc == 0) fail_msg("prefix of %zu of %zu bytes parsed", n, b.n);
            assert_null(f);
            const char *m = cd_errmsg();
            if (!strstr(m, "truncated") && !strstr(m, "out of file range"))
                fail_msg("prefix %zu: unexpected message '%s'", n, m);
        } else {
            assert_int_equal(rc, 0);
            check_invariants(f);
            gguf_close(f);
        }
        free(copy);
    }
    free(b.p);
}

static void test_every_byte_mutation(void **state) {
    (void)state;
    size_t end;
    bb b = rich_file(&end);
    static const int deltas[] = {-1, 0x00, 0xff, 0x80, 0x7f, 0x01, 0x20, 0x40};
    int ok = 0, failed = 0;
    for (size_t i = 0; i < b.n; i++)
        for (size_t k = 0; k < sizeof deltas / sizeof deltas[0]; k++) {
            uint8_t save = b.p[i];
            b.p[i] = deltas[k] < 0 ? (uint8_t)(save ^ 1) : (uint8_t)deltas[k];
            gguf_file *f;
            uint8_t *copy;
            if (parse_copy(b.p, b.n, &f, &copy) == 0) {
                check_invariants(f);
                gguf_close(f);
                ok++;
            } else {
                assert_null(f);
                assert_string_not_equal(cd_errmsg(), "unknown error");
                failed++;
            }
            free(copy);
            b.p[i] = save;
        }
    assert_true(ok > 0 && failed > 0);
    free(b.p);
}

/* ---- round trip of every value type ---- */

static gguf_value arr_of(enum gguf_vtype et, gguf_value *items, uint64_t n) {
    gguf_value v = {.type = GGUF_VT_ARRAY};
    v.arr.type = et;
    v.arr.n = n;
    v.arr.items = items;
    return v;
}

static gguf_value raw_arr(enum gguf_vtype et, const void *raw, uint64_t n) {
    gguf_value v = {.type = GGUF_VT_ARRAY};
    v.arr.type = et;
    v.arr.n = n;
    v.arr.raw = raw;
    return v;
}

static gguf_value str_val(const char *p, uint64_t n) { return (gguf_value){.type = GGUF_VT_STRING, .str = {p, n}}; }

static void test_roundtrip_values(void **state) {
    (void)state;
    static const uint8_t u8s[] = {0, 1, 255};
    static const int8_t i8s[] = {-128, 0, 127};
    static const uint16_t u16s[] = {0, 1, 65535};
    static const int16_t i16s[] = {-32768, -1, 32767};
    static const uint32_t u32s[] = {0, 1, UINT32_MAX};
    static const int32_t i32s[] = {INT32_MIN, -1, INT32_MAX};
    static const float f32s[] = {-0.0f, 1.5f, INFINITY};
    static const uint8_t bools[] = {1, 0, 1};
    static const uint64_t u64s[] = {0, 1ull << 40, UINT64_MAX};
    static const int64_t i64s[] = {INT64_MIN, -1, INT64_MAX};
    static const double f64s[] = {-1e300, 0x1p-1074, 3.141592653589793};
    static const char *const strs[] = {"one", "", "three \xe4\xb8\x89"};

    gguf_value s_items[3] = {str_val("x", 1), str_val("", 0), str_val("a\0b", 3)};
    gguf_value inner[3] = {arr_of(GGUF_VT_STRING, s_items, 3), arr_of(GGUF_VT_STRING, NULL, 0),
                           arr_of(GGUF_VT_STRING, s_items + 2, 1)};
    gguf_value i32_arrs[2] = {raw_arr(GGUF_VT_I32, i32s, 3), raw_arr(GGUF_VT_I32, i32s, 0)};
    gguf_value mid[2] = {arr_of(GGUF_VT_ARRAY, i32_arrs, 2), arr_of(GGUF_VT_ARRAY, i32_arrs + 1, 1)};
    /* GGUF_MAX_NESTING arrays deep: the most the reader accepts. */
    gguf_value chain[GGUF_MAX_NESTING];
    chain[GGUF_MAX_NESTING - 1] = raw_arr(GGUF_VT_U16, u16s, 3);
    for (int i = GGUF_MAX_NESTING - 2; i >= 0; i--) chain[i] = arr_of(GGUF_VT_ARRAY, &chain[i + 1], 1);

    struct {
        const char *key;
        gguf_value v;
    } want[] = {
        {"dup", {.type = GGUF_VT_STRING, .str = {"second", 6}}}, /* set first as u32, replaced */
        {"v.u8", {.type = GGUF_VT_U8, .u64 = 200}},
        {"v.i8", {.type = GGUF_VT_I8, .i64 = -100}},
        {"v.u16", {.type = GGUF_VT_U16, .u64 = 60000}},
        {"v.i16", {.type = GGUF_VT_I16, .i64 = -30000}},
        {"v.u32", {.type = GGUF_VT_U32, .u64 = 4000000000u}},
        {"v.i32", {.type = GGUF_VT_I32, .i64 = -2000000000}},
        {"v.f32", {.type = GGUF_VT_F32, .f64 = 3.5}},
        {"v.bool", {.type = GGUF_VT_BOOL, .u64 = 1}},
        {"v.bool0", {.type = GGUF_VT_BOOL, .u64 = 0}},
        {"v.str", str_val("hello", 5)},
        {"v.str_empty", str_val("", 0)},
        {"v.str_nul", str_val("a\0b\0", 4)},
        {"v.u64", {.type = GGUF_VT_U64, .u64 = UINT64_MAX}},
        {"v.i64", {.type = GGUF_VT_I64, .i64 = INT64_MIN}},
        {"v.f64", {.type = GGUF_VT_F64, .f64 = -0x1.23456789abcdep-1000}},
        {"", str_val("empty key", 9)},
        {"a.u8", raw_arr(GGUF_VT_U8, u8s, 3)},
        {"a.i8", raw_arr(GGUF_VT_I8, i8s, 3)},
        {"a.u16", raw_arr(GGUF_VT_U16, u16s, 3)},
        {"a.i16", raw_arr(GGUF_VT_I16, i16s, 3)},
        {"a.u32", raw_arr(GGUF_VT_U32, u32s, 3)},
        {"a.i32", raw_arr(GGUF_VT_I32, i32s, 3)},
        {"a.f32", raw_arr(GGUF_VT_F32, f32s, 3)},
        {"a.bool", raw_arr(GGUF_VT_BOOL, bools, 3)},
        {"a.u64", raw_arr(GGUF_VT_U64, u64s, 3)},
        {"a.i64", raw_arr(GGUF_VT_I64, i64s, 3)},
        {"a.f64", raw_arr(GGUF_VT_F64, f64s, 3)},
        {"a.empty_u8", raw_arr(GGUF_VT_U8, NULL, 0)},
        {"a.empty_str", arr_of(GGUF_VT_STRING, NULL, 0)},
        {"a.empty_arr", arr_of(GGUF_VT_ARRAY, NULL, 0)},
        {"a.str", arr_of(GGUF_VT_STRING, NULL, 3)}, /* items filled from strs below */
        {"a.arr_str", arr_of(GGUF_VT_ARRAY, inner, 3)},
        {"a.arr_arr_i32", arr_of(GGUF_VT_ARRAY, mid, 2)},
        {"a.deep", chain[0]},
    };
    enum { N = sizeof want / sizeof want[0] };
    gguf_value str_items[3];
    for (int i = 0; i < 3; i++) str_items[i] = str_val(strs[i], strlen(strs[i]));
    for (int i = 0; i < N; i++)
        if (!strcmp(want[i].key, "a.str")) want[i].v.arr.items = str_items;

    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    gguf_writer_set_u32(w, "dup", 1);
    for (int i = 1; i < N; i++) {
        const char *k = want[i].key;
        const gguf_value *v = &want[i].v;
        /* The typed setters where one exists, set_value for the rest. */
        if (v->type == GGUF_VT_U32) gguf_writer_set_u32(w, k, (uint32_t)v->u64);
        else if (v->type == GGUF_VT_I32) gguf_writer_set_i32(w, k, (int32_t)v->i64);
        else if (v->type == GGUF_VT_U64) gguf_writer_set_u64(w, k, v->u64);
        else if (v->type == GGUF_VT_F32) gguf_writer_set_f32(w, k, (float)v->f64);
        else if (v->type == GGUF_VT_BOOL) gguf_writer_set_bool(w, k, v->u64 != 0);
        else if (!strcmp(k, "v.str")) gguf_writer_set_str(w, k, "hello");
        else if (!strcmp(k, "a.str")) gguf_writer_set_arr_str(w, k, strs, 3);
        else if (!strcmp(k, "a.u32")) gguf_writer_set_arr(w, k, GGUF_VT_U32, u32s, 3);
        else gguf_writer_set_value(w, k, v);
    }
    gguf_writer_set_str(w, "dup", "second");
    const char *path = tu_tmp_path("gguf_values.gguf");
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);

    gguf_file *f;
    if (gguf_open(&f, path)) fail_msg("%s", cd_errmsg());
    assert_int_equal(f->n_kv, N);
    assert_int_equal(f->n_tensors, 0);
    for (int i = 0; i < N; i++) {
        if (!gguf_str_eq(f->kv[i].key, want[i].key)) fail_msg("key %d: expected '%s'", i, want[i].key);
        if (!gguf_value_eq(&f->kv[i].val, &want[i].v)) fail_msg("value of '%s' differs", want[i].key);
        assert_ptr_equal(gguf_find_kv(f, want[i].key), &f->kv[i]);
    }
    check_invariants(f);
    gguf_close(f);
    seed_file("values.seed", path);
}

/* ---- getters ---- */

static void test_getters(void **state) {
    (void)state;
    static const int16_t i16s[] = {-5, 7, 300};
    static const float f32s[] = {1.75f, -2.5f, NAN};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_value(w, "u8", &(gguf_value){.type = GGUF_VT_U8, .u64 = 9});
    gguf_writer_set_value(w, "i8neg", &(gguf_value){.type = GGUF_VT_I8, .i64 = -3});
    gguf_writer_set_value(w, "i64big", &(gguf_value){.type = GGUF_VT_I64, .i64 = 1ll << 40});
    gguf_writer_set_u64(w, "u64big", 1ull << 40);
    gguf_writer_set_u64(w, "u64max", UINT64_MAX);
    gguf_writer_set_i32(w, "i32", -7);
    gguf_writer_set_u32(w, "u32max", UINT32_MAX);
    gguf_writer_set_f32(w, "f32", 0.25f);
    gguf_writer_set_value(w, "f64", &(gguf_value){.type = GGUF_VT_F64, .f64 = 1e6});
    gguf_writer_set_bool(w, "bool", true);
    gguf_writer_set_str(w, "qwen3moe.name", "x");
    gguf_writer_set_arr(w, "i16s", GGUF_VT_I16, i16s, 3);
    gguf_writer_set_arr(w, "f32s", GGUF_VT_F32, f32s, 3);
    const char *path = tu_tmp_path("gguf_getters.gguf");
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_file *f;
    assert_int_equal(gguf_open(&f, path), 0);

    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f32;
    bool b;
    gguf_str s;
    const gguf_value *a;
    assert_int_equal(gguf_get_u32(f, "u8", &u32), 0);
    assert_int_equal(u32, 9);
    assert_int_equal(gguf_get_i32(f, "u8", &i32), 0);
    assert_int_equal(i32, 9);
    assert_int_equal(gguf_get_i32(f, "i8neg", &i32), 0);
    assert_int_equal(i32, -3);
    assert_int_equal(gguf_get_u32(f, "i32", &u32), -1);
    assert_string_equal(cd_errmsg(), "key 'i32' value -7 does not fit in u32");
    assert_int_equal(gguf_get_u64(f, "i8neg", &u64), -1);
    assert_string_equal(cd_errmsg(), "key 'i8neg' value -3 does not fit in u64");
    assert_int_equal(gguf_get_u64(f, "i64big", &u64), 0);
    assert_int_equal(u64, 1ull << 40);
    assert_int_equal(gguf_get_u64(f, "u64max", &u64), 0);
    assert_true(u64 == UINT64_MAX);
    assert_int_equal(gguf_get_u32(f, "u64big", &u32), -1);
    assert_string_equal(cd_errmsg(), "key 'u64big' value 1099511627776 does not fit in u32");
    assert_int_equal(gguf_get_i32(f, "u32max", &i32), -1);
    assert_string_equal(cd_errmsg(), "key 'u32max' value 4294967295 does not fit in i32");
    assert_int_equal(gguf_get_i32(f, "i64big", &i32), -1);
    assert_int_equal(gguf_get_u32(f, "u32max", &u32), 0);
    assert_int_equal(u32, UINT32_MAX);
    assert_int_equal(gguf_get_u32(f, "qwen3moe.name", &u32), -1);
    assert_string_equal(cd_errmsg(), "key 'qwen3moe.name' has type string, expected integer");
    assert_int_equal(gguf_get_u32(f, "bool", &u32), -1);
    assert_string_equal(cd_errmsg(), "key 'bool' has type bool, expected integer");
    assert_int_equal(gguf_get_u32(f, "qwen3moe.block_count", &u32), -1);
    assert_string_equal(cd_errmsg(), "missing key 'qwen3moe.block_count'");

    assert_int_equal(gguf_get_f32(f, "f32", &f32), 0);
    assert_true(f32 == 0.25f);
    assert_int_equal(gguf_get_f32(f, "f64", &f32), 0);
    assert_true(f32 == 1e6f);
    assert_int_equal(gguf_get_f32(f, "u8", &f32), -1);
    assert_string_equal(cd_errmsg(), "key 'u8' has type u8, expected float");
    assert_int_equal(gguf_get_bool(f, "bool", &b), 0);
    assert_true(b);
    assert_int_equal(gguf_get_bool(f, "u8", &b), -1);
    assert_string_equal(cd_errmsg(), "key 'u8' has type u8, expected bool");
    assert_int_equal(gguf_get_str(f, "qwen3moe.name", &s), 0);
    assert_true(gguf_str_eq(s, "x"));
    assert_false(gguf_str_eq(s, "xy"));
    assert_false(gguf_str_eq(s, ""));
    assert_int_equal(gguf_get_str(f, "u8", &s), -1);
    assert_string_equal(cd_errmsg(), "key 'u8' has type u8, expected string");

    assert_int_equal(gguf_get_arr(f, "i16s", GGUF_VT_I16, &a), 0);
    assert_int_equal(a->arr.n, 3);
    assert_int_equal(gguf_arr_i64(a, 0), -5);
    assert_int_equal(gguf_arr_i64(a, 2), 300);
    assert_true(gguf_arr_f64(a, 1) == 7.0);
    assert_int_equal(gguf_arr_i64(a, 3), 0); /* out of range */
    assert_int_equal(gguf_get_arr(f, "i16s", GGUF_VT_COUNT, &a), 0);
    assert_int_equal(gguf_get_arr(f, "i16s", GGUF_VT_I32, &a), -1);
    assert_string_equal(cd_errmsg(), "key 'i16s' is an array of i16, expected an array of i32");
    assert_int_equal(gguf_get_arr(f, "u8", GGUF_VT_COUNT, &a), -1);
    assert_string_equal(cd_errmsg(), "key 'u8' has type u8, expected array");
    assert_int_equal(gguf_get_arr(f, "f32s", GGUF_VT_F32, &a), 0);
    assert_true(gguf_arr_f64(a, 0) == 1.75);
    assert_int_equal(gguf_arr_i64(a, 1), -2);
    assert_int_equal(gguf_arr_i64(a, 2), 0); /* NaN */
    assert_true(isnan(gguf_arr_f64(a, 2)));

    assert_string_equal(gguf_vtype_name(GGUF_VT_STRING), "string");
    assert_string_equal(gguf_vtype_name((enum gguf_vtype)99), "?");
    assert_int_equal(gguf_vtype_size(GGUF_VT_F64), 8);
    assert_int_equal(gguf_vtype_size(GGUF_VT_ARRAY), 0);
    assert_null(gguf_find_kv(f, "nope"));
    assert_null(gguf_find_tensor(f, "nope"));
    gguf_close(f);
}

/* ---- tensors ---- */

typedef struct tdesc {
    const char *name;
    enum qtype type;
    uint32_t n_dims;
    int64_t ne[4];
    bool use_fill;
    uint64_t nbytes; /* computed */
    uint8_t *bytes;  /* expected contents */
    int fills;
} tdesc;

static int fill_tensor(void *user, void *buf, size_t n) {
    tdesc *t = user;
    assert_int_equal(n, t->nbytes);
    memcpy(buf, t->bytes, n);
    t->fills++;
    return 0;
}

static void check_tensor_roundtrip(uint32_t alignment) {
    tdesc ts[] = {
        {.name = "t.f32", .type = QTYPE_F32, .n_dims = 2, .ne = {7, 3}, .use_fill = false},
        {.name = "t.f16", .type = QTYPE_F16, .n_dims = 1, .ne = {5}, .use_fill = true},
        {.name = "t.bf16", .type = QTYPE_BF16, .n_dims = 3, .ne = {4, 2, 3}, .use_fill = true},
        {.name = "t.q8_0", .type = QTYPE_Q8_0, .n_dims = 2, .ne = {64, 2}, .use_fill = false},
        {.name = "t.q4_k", .type = QTYPE_Q4_K, .n_dims = 2, .ne = {256, 2}, .use_fill = true},
        {.name = "t.q5_k", .type = QTYPE_Q5_K, .n_dims = 4, .ne = {256, 1, 1, 2}, .use_fill = true},
        {.name = "t.q6_k", .type = QTYPE_Q6_K, .n_dims = 2, .ne = {256, 3}, .use_fill = true},
        {.name = "t.q4_0", .type = QTYPE_Q4_0, .n_dims = 1, .ne = {32}, .use_fill = false},
        {.name = "t.q2_k", .type = QTYPE_Q2_K, .n_dims = 1, .ne = {256}, .use_fill = true},
        {.name = "t.empty", .type = QTYPE_F32, .n_dims = 2, .ne = {0, 4}, .use_fill = false},
        {.name = "t.empty_rows", .type = QTYPE_Q8_0, .n_dims = 2, .ne = {32, 0}, .use_fill = true},
    };
    enum { N = sizeof ts / sizeof ts[0] };
    gguf_writer *w = gguf_writer_new();
    if (alignment) gguf_writer_set_u32(w, "general.alignment", alignment);
    gguf_writer_set_str(w, "general.name", "tensors");
    for (int i = 0; i < N; i++) {
        tdesc *t = &ts[i];
        int64_t rows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++) rows *= t->ne[d];
        t->nbytes = qtype_row_bytes(t->type, t->ne[0]) * (uint64_t)rows;
        t->bytes = malloc(t->nbytes + 1);
        for (uint64_t j = 0; j < t->nbytes; j++) t->bytes[j] = (uint8_t)(j * 31 + (uint64_t)i * 101 + 7);
        bool empty = t->nbytes == 0 && !t->use_fill;
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne,
                                                t->use_fill || empty ? NULL : t->bytes,
                                                t->use_fill ? fill_tensor : NULL, t),
                         0);
    }
    const char *path = tu_tmp_path("gguf_tensors.gguf");
    if (gguf_writer_write(w, path)) fail_msg("%s", cd_errmsg());
    gguf_writer_free(w);

    gguf_file *f;
    if (gguf_open(&f, path)) fail_msg("%s", cd_errmsg());
    uint64_t a = alignment ? alignment : 32;
    assert_int_equal(f->alignment, a);
    assert_int_equal(f->data_offset % a, 0);
    assert_true(f->mapped);
    assert_int_equal(f->n_tensors, N);
    for (int i = 0; i < N; i++) {
        const tdesc *t = &ts[i];
        const gguf_tensor *g = &f->tensors[i];
        assert_true(gguf_str_eq(g->name, t->name));
        assert_ptr_equal(gguf_find_tensor(f, t->name), g);
        assert_int_equal(g->type, t->type);
        assert_int_equal(g->n_dims, t->n_dims);
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) assert_int_equal(g->ne[d], d < t->n_dims ? t->ne[d] : 1);
        assert_int_equal(g->nbytes, t->nbytes);
        assert_int_equal(g->offset % a, 0);
        assert_int_equal(t->fills, t->use_fill && t->nbytes ? 1 : 0);
        if (t->nbytes) assert_memory_equal(g->data, t->bytes, t->nbytes);
        free(t->bytes);
    }
    check_invariants(f);
    gguf_close(f);
    if (alignment == 64) seed_file("tensors_align64.seed", path);
}

static void test_roundtrip_tensors(void **state) {
    (void)state;
    check_tensor_roundtrip(0);
    check_tensor_roundtrip(64);
    check_tensor_roundtrip(4096);
}

/* ---- writer failures ---- */

static int fill_fails(void *user, void *buf, size_t n) {
    (void)user;
    memset(buf, 0, n);
    return cd_fail("generator broke");
}

static int fill_zero(void *user, void *buf, size_t n) {
    (void)user;
    memset(buf, 0, n);
    return 0;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_writer_errors(void **state) {
    (void)state;
    float x[64] = {0};
    gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_tensor(w, "bad", QTYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, x, NULL, NULL), -1);
    assert_non_null(strstr(cd_errmsg(), "5 dimensions"));
    assert_int_equal(gguf_writer_add_tensor(w, "bad", QTYPE_F32, 0, (int64_t[]){1}, x, NULL, NULL), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "bad", (enum qtype)77, 1, (int64_t[]){1}, x, NULL, NULL), -1);
    assert_non_null(strstr(cd_errmsg(), "unknown type 77"));
    assert_int_equal(gguf_writer_add_tensor(w, "bad", QTYPE_Q8_0, 1, (int64_t[]){33}, x, NULL, NULL), -1);
    assert_non_null(strstr(cd_errmsg(), "row length 33 is not a multiple of the Q8_0 block size 32"));
    assert_int_equal(gguf_writer_add_tensor(w, "bad", QTYPE_F32, 1, (int64_t[]){-1}, x, NULL, NULL), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "bad", QTYPE_F32, 2, (int64_t[]){1ll << 32, 1ll << 32}, x, NULL, NULL),
                     -1);
    assert_non_null(strstr(cd_errmsg(), "dimension overflow"));
    assert_int_equal(gguf_writer_add_tensor(w, "bad", QTYPE_F32, 1, (int64_t[]){4}, NULL, NULL, NULL), -1);
    assert_non_null(strstr(cd_errmsg(), "neither data nor a fill callback"));
    assert_int_equal(gguf_writer_add_tensor(w, "ok", QTYPE_F32, 1, (int64_t[]){4}, x, NULL, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "ok", QTYPE_F32, 1, (int64_t[]){4}, x, NULL, NULL), -1);
    assert_string_equal(cd_errmsg(), "duplicate tensor name 'ok'");

    /* A path that cannot be created. */
    assert_int_equal(gguf_writer_write(w, "/nonexistent-dir/x.gguf"), -1);
    assert_non_null(strstr(cd_errmsg(), "cannot create /nonexistent-dir/x.gguf.tmp"));

    /* An old file survives a failed write, and no .tmp is left behind. */
    const char *path = tu_tmp_path("gguf_fail.gguf");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(gguf_writer_write(w, path), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "broken", QTYPE_F32, 1, (int64_t[]){8}, NULL, fill_fails, NULL), 0);
    assert_int_equal(gguf_writer_write(w, path), -1);
    assert_string_equal(cd_errmsg(), "tensor 'broken': generator broke");
    assert_false(exists(tmp));
    gguf_file *f;
    assert_int_equal(gguf_open(&f, path), 0);
    assert_int_equal(f->n_tensors, 1);
    gguf_close(f);
    gguf_writer_free(w);

    /* Invalid metadata is reported at write time (the setters return nothing). */
    w = gguf_writer_new();
    gguf_writer_set_u64(w, "general.alignment", 64);
    assert_int_equal(gguf_writer_write(w, path), -1);
    assert_string_equal(cd_errmsg(), "general.alignment must be a u32");
    gguf_writer_set_u32(w, "general.alignment", 24);
    assert_int_equal(gguf_writer_write(w, path), -1);
    assert_string_equal(cd_errmsg(), "general.alignment 24 is not a nonzero power of two");
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_writer_set_arr(w, "strs", GGUF_VT_STRING, NULL, 0);
    assert_int_equal(gguf_writer_write(w, path), -1);
    assert_non_null(strstr(cd_errmsg(), "'strs'"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_value chain[GGUF_MAX_NESTING + 1];
    chain[GGUF_MAX_NESTING] = raw_arr(GGUF_VT_U8, "", 0);
    for (int i = GGUF_MAX_NESTING - 1; i >= 0; i--) chain[i] = arr_of(GGUF_VT_ARRAY, &chain[i + 1], 1);
    gguf_writer_set_value(w, "too.deep", &chain[0]);
    assert_int_equal(gguf_writer_write(w, path), -1);
    assert_non_null(strstr(cd_errmsg(), "metadata key 'too.deep'"));
    gguf_writer_free(w);
}

/* An I/O error mid-file (the file size limit, in a child so the limit stays there) is
 * reported, leaves no .tmp and no file under the final name. */
static void test_writer_io_error(void **state) {
    (void)state;
    const char *path = tu_tmp_path("gguf_ioerr.gguf");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1 << 20, 1 << 20};
        if (setrlimit(RLIMIT_FSIZE, &rl)) _exit(10);
        gguf_writer *w = gguf_writer_new();
        gguf_writer_set_str(w, "general.name", "big");
        for (int i = 0; i < 4; i++) {
            char name[32];
            snprintf(name, sizeof name, "t%d", i);
            if (gguf_writer_add_tensor(w, name, QTYPE_F32, 2, (int64_t[]){1024, 128}, NULL, fill_zero, NULL)) _exit(11);
        }
        int rc = gguf_writer_write(w, path);
        gguf_writer_free(w);
        if (rc == 0) _exit(12);
        if (!strstr(cd_errmsg(), "writing ") || !strstr(cd_errmsg(), "File too large")) {
            fprintf(stderr, "unexpected message: %s\n", cd_errmsg());
            _exit(13);
        }
        _exit(exists(tmp) || exists(path) ? 14 : 0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_open_errors(void **state) {
    (void)state;
    gguf_file *f = (gguf_file *)1;
    assert_int_equal(gguf_open(&f, tu_tmp_path("no-such-file.gguf")), -1);
    assert_null(f);
    assert_non_null(strstr(cd_errmsg(), "cannot open: No such file or directory"));
    assert_int_equal(gguf_open(&f, tu_tmp_dir()), -1);
    assert_non_null(strstr(cd_errmsg(), "is a directory"));
    assert_int_equal(gguf_open(&f, "/dev/null"), -1);
    assert_non_null(strstr(cd_errmsg(), "not a regular file"));
    const char *empty = tu_tmp_path("gguf_empty.gguf");
    unlink(empty);
    FILE *fp = fopen(empty, "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(gguf_open(&f, empty), -1);
    assert_non_null(strstr(cd_errmsg(), "empty file"));
    const char *junk = tu_tmp_path("gguf_junk.gguf");
    unlink(junk);
    fp = fopen(junk, "wb");
    assert_non_null(fp);
    fputs("\x7f"
          "ELF and then some",
          fp);
    fclose(fp);
    assert_int_equal(gguf_open(&f, junk), -1);
    assert_string_equal(cd_errmsg(), "bad magic 0x464c457f (not a GGUF file)");
    if (geteuid() != 0) { /* root reads anything */
        chmod(junk, 0);
        assert_int_equal(gguf_open(&f, junk), -1);
        assert_non_null(strstr(cd_errmsg(), "Permission denied"));
    }
    unlink(junk);
    unlink(empty);
    gguf_close(NULL);
}

/* ---- llama.cpp agrees (the prebuilt libggml-base from node-llama-cpp, when present) ---- */

struct gguf_context;
struct ggml_context;
struct ggml_tensor;
struct gguf_init_params_ {
    bool no_alloc;
    struct ggml_context **ctx;
};
struct ggml_init_params_ {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};

static struct {
    void *so;
    struct gguf_context *(*init_from_file)(const char *, struct gguf_init_params_);
    void (*gguf_free)(struct gguf_context *);
    int64_t (*get_n_kv)(const struct gguf_context *);
    int64_t (*find_key)(const struct gguf_context *, const char *);
    int (*get_kv_type)(const struct gguf_context *, int64_t);
    int (*get_arr_type)(const struct gguf_context *, int64_t);
    size_t (*get_arr_n)(const struct gguf_context *, int64_t);
    const char *(*get_arr_str)(const struct gguf_context *, int64_t, size_t);
    uint32_t (*get_val_u32)(const struct gguf_context *, int64_t);
    const char *(*get_val_str)(const struct gguf_context *, int64_t);
    int64_t (*get_n_tensors)(const struct gguf_context *);
    int64_t (*find_tensor)(const struct gguf_context *, const char *);
    size_t (*get_tensor_offset)(const struct gguf_context *, int64_t);
    int (*get_tensor_type)(const struct gguf_context *, int64_t);
    size_t (*get_tensor_size)(const struct gguf_context *, int64_t);
    size_t (*get_data_offset)(const struct gguf_context *);
    struct gguf_context *(*init_empty)(void);
    void (*set_val_u8)(struct gguf_context *, const char *, uint8_t);
    void (*set_val_i16)(struct gguf_context *, const char *, int16_t);
    void (*set_val_u32)(struct gguf_context *, const char *, uint32_t);
    void (*set_val_i64)(struct gguf_context *, const char *, int64_t);
    void (*set_val_f64)(struct gguf_context *, const char *, double);
    void (*set_val_bool)(struct gguf_context *, const char *, bool);
    void (*set_val_str)(struct gguf_context *, const char *, const char *);
    void (*set_arr_data)(struct gguf_context *, const char *, int, const void *, size_t);
    void (*set_arr_str)(struct gguf_context *, const char *, const char **, size_t);
    void (*add_tensor)(struct gguf_context *, const struct ggml_tensor *);
    void (*set_tensor_data)(struct gguf_context *, const char *, const void *);
    bool (*write_to_file)(const struct gguf_context *, const char *, bool);
    struct ggml_context *(*ggml_init)(struct ggml_init_params_);
    void (*ggml_free)(struct ggml_context *);
    struct ggml_tensor *(*new_tensor)(struct ggml_context *, int, int, const int64_t *);
    struct ggml_tensor *(*set_name)(struct ggml_tensor *, const char *);
} gg;

static bool load_ggml(void) {
    if (gg.so) return true;
    static const char *const dirs[] = {"linux-x64", "linux-x64-vulkan"};
    for (size_t i = 0; i < 2 && !gg.so; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/@node-llama-cpp/%s/bins/%s/libggml-base.so", CINDER_NPM_DIR, dirs[i], dirs[i]);
        gg.so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!gg.so) return false;
#define SYM(field, name)                                                                                               \
    do {                                                                                                               \
        *(void **)&gg.field = dlsym(gg.so, name);                                                                      \
        if (!gg.field) return false;                                                                                   \
    } while (0)
    SYM(init_from_file, "gguf_init_from_file");
    SYM(gguf_free, "gguf_free");
    SYM(get_n_kv, "gguf_get_n_kv");
    SYM(find_key, "gguf_find_key");
    SYM(get_kv_type, "gguf_get_kv_type");
    SYM(get_arr_type, "gguf_get_arr_type");
    SYM(get_arr_n, "gguf_get_arr_n");
    SYM(get_arr_str, "gguf_get_arr_str");
    SYM(get_val_u32, "gguf_get_val_u32");
    SYM(get_val_str, "gguf_get_val_str");
    SYM(get_n_tensors, "gguf_get_n_tensors");
    SYM(find_tensor, "gguf_find_tensor");
    SYM(get_tensor_offset, "gguf_get_tensor_offset");
    SYM(get_tensor_type, "gguf_get_tensor_type");
    SYM(get_tensor_size, "gguf_get_tensor_size");
    SYM(get_data_offset, "gguf_get_data_offset");
    SYM(init_empty, "gguf_init_empty");
    SYM(set_val_u8, "gguf_set_val_u8");
    SYM(set_val_i16, "gguf_set_val_i16");
    SYM(set_val_u32, "gguf_set_val_u32");
    SYM(set_val_i64, "gguf_set_val_i64");
    SYM(set_val_f64, "gguf_set_val_f64");
    SYM(set_val_bool, "gguf_set_val_bool");
    SYM(set_val_str, "gguf_set_val_str");
    SYM(set_arr_data, "gguf_set_arr_data");
    SYM(set_arr_str, "gguf_set_arr_str");
    SYM(add_tensor, "gguf_add_tensor");
    SYM(set_tensor_data, "gguf_set_tensor_data");
    SYM(write_to_file, "gguf_write_to_file");
    SYM(ggml_init, "ggml_init");
    SYM(ggml_free, "ggml_free");
    SYM(new_tensor, "ggml_new_tensor");
    SYM(set_name, "ggml_set_name");
#undef SYM
    return true;
}

/* llama.cpp reads (allocating and loading every tensor, which checks its stricter layout
 * rules: contiguous offsets, padded sizes) what our writer writes. */
static void test_llama_reads_ours(void **state) {
    (void)state;
    if (!load_ggml()) fail_msg("cannot load libggml-base.so from node-llama-cpp: run scripts/setup.sh");
    static const char *const strs[] = {"a", "", "ccc"};
    static const float fl[3] = {1, 2, 3};
    uint8_t q8[2 * 34] = {0}, q4k[144] = {0};
    for (size_t i = 0; i < sizeof q4k; i++) q4k[i] = (uint8_t)i;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    gguf_writer_set_u32(w, "qwen3moe.block_count", 48);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, 3);
    gguf_writer_set_arr(w, "floats", GGUF_VT_F32, fl, 3);
    assert_int_equal(gguf_writer_add_tensor(w, "w.f32", QTYPE_F32, 2, (int64_t[]){3, 1}, fl, NULL, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "w.q8", QTYPE_Q8_0, 2, (int64_t[]){32, 2}, q8, NULL, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "w.q4k", QTYPE_Q4_K, 1, (int64_t[]){256}, q4k, NULL, NULL), 0);
    const char *path = tu_tmp_path("gguf_for_llama.gguf");
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);

    struct ggml_context *gctx = NULL;
    struct gguf_context *ctx = gg.init_from_file(path, (struct gguf_init_params_){false, &gctx});
    assert_non_null(ctx);
    assert_int_equal(gg.get_n_kv(ctx), 4);
    int64_t k = gg.find_key(ctx, "qwen3moe.block_count");
    assert_true(k >= 0);
    assert_int_equal(gg.get_val_u32(ctx, k), 48);
    k = gg.find_key(ctx, "tokenizer.ggml.tokens");
    assert_int_equal(gg.get_arr_n(ctx, k), 3);
    assert_string_equal(gg.get_arr_str(ctx, k, 2), "ccc");
    assert_string_equal(gg.get_val_str(ctx, gg.find_key(ctx, "general.architecture")), "qwen3moe");
    assert_int_equal(gg.get_n_tensors(ctx), 3);

    gguf_file *f;
    assert_int_equal(gguf_open(&f, path), 0);
    assert_int_equal(gg.get_data_offset(ctx), f->data_offset);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)f->tensors[i].name.len, f->tensors[i].name.ptr);
        int64_t t = gg.find_tensor(ctx, name);
        assert_true(t >= 0);
        assert_int_equal(gg.get_tensor_offset(ctx, t), f->tensors[i].offset);
        assert_int_equal(gg.get_tensor_type(ctx, t), f->tensors[i].type);
        assert_int_equal(gg.get_tensor_size(ctx, t), f->tensors[i].nbytes);
    }
    gguf_close(f);
    gg.gguf_free(ctx);
    if (gctx) gg.ggml_free(gctx);
}

/* We read what llama.cpp writes. */
static void test_we_read_llamas(void **state) {
    (void)state;
    if (!load_ggml()) fail_msg("cannot load libggml-base.so from node-llama-cpp: run scripts/setup.sh");
    static const char *strs[] = {"x", "", "yz"};
    static const int32_t ints[] = {-1, 2, -3, 4};
    struct gguf_context *ctx = gg.init_empty();
    gg.set_val_u8(ctx, "u8", 250);
    gg.set_val_i16(ctx, "i16", -1234);
    gg.set_val_u32(ctx, "general.alignment", 64);
    gg.set_val_i64(ctx, "i64", INT64_MIN);
    gg.set_val_f64(ctx, "f64", 2.5);
    gg.set_val_bool(ctx, "bool", true);
    gg.set_val_str(ctx, "str", "hello");
    gg.set_arr_data(ctx, "ints", GGUF_VT_I32, ints, 4);
    gg.set_arr_str(ctx, "strs", strs, 3);
    struct ggml_context *gctx = gg.ggml_init((struct ggml_init_params_){1 << 20, NULL, true});
    assert_non_null(gctx);
    float data_a[2 * 8];
    uint8_t data_b[3 * 34];
    for (int i = 0; i < 16; i++) data_a[i] = (float)i;
    for (size_t i = 0; i < sizeof data_b; i++) data_b[i] = (uint8_t)(i * 3);
    struct ggml_tensor *ta = gg.new_tensor(gctx, QTYPE_F32, 2, (int64_t[]){8, 2});
    gg.set_name(ta, "a");
    struct ggml_tensor *tb = gg.new_tensor(gctx, QTYPE_Q8_0, 2, (int64_t[]){32, 3});
    gg.set_name(tb, "b");
    gg.add_tensor(ctx, ta);
    gg.add_tensor(ctx, tb);
    gg.set_tensor_data(ctx, "a", data_a);
    gg.set_tensor_data(ctx, "b", data_b);
    const char *path = tu_tmp_path("gguf_from_llama.gguf");
    assert_true(gg.write_to_file(ctx, path, false));
    gg.gguf_free(ctx);
    gg.ggml_free(gctx);

    gguf_file *f;
    if (gguf_open(&f, path)) fail_msg("%s", cd_errmsg());
    assert_int_equal(f->alignment, 64);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    gguf_str s;
    bool b;
    float x;
    const gguf_value *a;
    assert_int_equal(gguf_get_u32(f, "u8", &u32), 0);
    assert_int_equal(u32, 250);
    assert_int_equal(gguf_get_i32(f, "i16", &i32), 0);
    assert_int_equal(i32, -1234);
    assert_int_equal(gguf_find_kv(f, "i64")->val.i64, INT64_MIN);
    assert_int_equal(gguf_get_u64(f, "i64", &u64), -1);
    assert_int_equal(gguf_get_f32(f, "f64", &x), 0);
    assert_true(x == 2.5f);
    assert_int_equal(gguf_get_bool(f, "bool", &b), 0);
    assert_true(b);
    assert_int_equal(gguf_get_str(f, "str", &s), 0);
    assert_true(gguf_str_eq(s, "hello"));
    assert_int_equal(gguf_get_arr(f, "ints", GGUF_VT_I32, &a), 0);
    assert_int_equal(a->arr.n, 4);
    assert_int_equal(gguf_arr_i64(a, 2), -3);
    assert_int_equal(gguf_get_arr(f, "strs", GGUF_VT_STRING, &a), 0);
    assert_int_equal(a->arr.n, 3);
    assert_true(gguf_str_eq(a->arr.items[2].str, "yz"));
    assert_true(gguf_str_eq(a->arr.items[1].str, ""));
    const gguf_tensor *t = gguf_find_tensor(f, "a");
    assert_non_null(t);
    assert_memory_equal(t->data, data_a, sizeof data_a);
    t = gguf_find_tensor(f, "b");
    assert_int_equal(t->type, QTYPE_Q8_0);
    assert_int_equal(t->ne[1], 3);
    assert_memory_equal(t->data, data_b, sizeof data_b);
    check_invariants(f);
    gguf_close(f);
    seed_file("llama_written.seed", path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_spec_valid),    cmocka_unit_test(test_hostile_table),
        cmocka_unit_test(test_every_prefix_fails), cmocka_unit_test(test_every_byte_mutation),
        cmocka_unit_test(test_roundtrip_values),   cmocka_unit_test(test_getters),
        cmocka_unit_test(test_roundtrip_tensors),  cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_io_error),    cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_llama_reads_ours),   cmocka_unit_test(test_we_read_llamas),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
