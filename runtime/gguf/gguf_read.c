/* GGUF reader. Every byte is bounds-checked before it is read, every size is computed with
 * overflow checks, and every count is checked against the bytes left before anything is
 * allocated for it, so a hostile file costs at most a few times its own header size in
 * memory and fails with a message naming the field.
 *
 * Order of checks:
 *   1. header: magic, version (2 or 3; both have 64-bit counts), n_tensors, n_kv
 *   2. n_kv x key/value, arrays recursing at most GGUF_MAX_NESTING deep
 *   3. duplicate keys (sorted index, kept for lookups), general.alignment (u32, power of two)
 *   4. n_tensors x tensor info: dims (1..4, each >= 0, product fits int64), known type,
 *      row length a multiple of the block size, nbytes fits, offset aligned
 *   5. duplicate tensor names (sorted index, kept for lookups)
 *   6. data section = header end rounded up to the alignment; every tensor inside the file;
 *      no two tensors overlap (tensors sorted by offset). */
#include "runtime/gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf_join.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */

/* Smallest encodings, for checking counts against the bytes left before allocating. */
#define MIN_KV_BYTES (8 + 4 + 1)             /* key length, value type, a u8 value */
#define MIN_TENSOR_BYTES (8 + 4 + 8 + 4 + 8) /* name length, n_dims, one ne, type, offset */
#define MIN_STRING_BYTES 8                   /* length */
#define MIN_ARRAY_BYTES (4 + 8)              /* element type, count */

/* The public struct plus the name-sorted indexes used for duplicate checks and lookups, and a
 * split model's other shards (their mappings hold the tensors' names and data). */
typedef struct gguf_impl {
    gguf_file pub;
    const gguf_kv **kv_by_key;
    const gguf_tensor **tensor_by_name;
    gguf_file **shards; /* pub.n_shards - 1 */
} gguf_impl;

/* ---- names, types, small helpers ---- */

size_t gguf_vtype_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_VT_U8:
    case GGUF_VT_I8:
    case GGUF_VT_BOOL: return 1;
    case GGUF_VT_U16:
    case GGUF_VT_I16: return 2;
    case GGUF_VT_U32:
    case GGUF_VT_I32:
    case GGUF_VT_F32: return 4;
    case GGUF_VT_U64:
    case GGUF_VT_I64:
    case GGUF_VT_F64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(enum gguf_vtype t) {
    static const char *const names[GGUF_VT_COUNT] = {
        [GGUF_VT_U8] = "u8",         [GGUF_VT_I8] = "i8",       [GGUF_VT_U16] = "u16", [GGUF_VT_I16] = "i16",
        [GGUF_VT_U32] = "u32",       [GGUF_VT_I32] = "i32",     [GGUF_VT_F32] = "f32", [GGUF_VT_BOOL] = "bool",
        [GGUF_VT_STRING] = "string", [GGUF_VT_ARRAY] = "array", [GGUF_VT_U64] = "u64", [GGUF_VT_I64] = "i64",
        [GGUF_VT_F64] = "f64",
    };
    return (unsigned)t < GGUF_VT_COUNT ? names[t] : "?";
}

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static int str_cmp(const char *a, uint64_t an, const char *b, uint64_t bn) {
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c) return c;
    return an < bn ? -1 : an > bn;
}

/* A name from the file, made safe to print: at most 80 bytes, non-printables as \xNN. Each
 * call returns one of four rotating buffers, so a message can show two names. */
static const char *show(gguf_str s) {
    static _Thread_local char bufs[4][80 * 4 + 8];
    static _Thread_local unsigned which;
    char *out = bufs[which++ & 3], *p = out;
    uint64_t n = s.len < 80 ? s.len : 80;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') *p++ = (char)c;
        else p += sprintf(p, "\\x%02x", c);
    }
    if (s.len > n) p += sprintf(p, "...");
    *p = 0;
    return out;
}

/* ---- the cursor ---- */

typedef struct reader {
    const uint8_t *base;
    size_t size, pos;
    char where[200]; /* what is being read, for messages: "metadata key 12 'general.name'" */
} reader;

static size_t left(const reader *r) { return r->size - r->pos; }

static int need(reader *r, uint64_t n, const char *what) {
    if (n <= left(r)) return 0;
    return cd_fail("truncated header: %s: %s needs %" PRIu64 " bytes at offset %zu, %zu left", r->where, what, n,
                   r->pos, left(r));
}

/* A count of items each at least `min_bytes` long must fit in what is left. */
static int need_count(reader *r, uint64_t n, uint64_t min_bytes, const char *what) {
    if (n <= left(r) / min_bytes) return 0;
    return cd_fail("truncated header: %s: %s %" PRIu64 " cannot fit in the %zu bytes left at offset %zu", r->where,
                   what, n, left(r), r->pos);
}

static int rd_u32(reader *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    memcpy(v, r->base + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(reader *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    memcpy(v, r->base + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int rd_str(reader *r, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(r, &len, what) || need(r, len, what)) return -1;
    s->ptr = (const char *)r->base + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

/* ---- values ---- */

static void value_free(gguf_value *v) {
    if (v->type != GGUF_VT_ARRAY || !v->arr.items) return;
    if (v->arr.type == GGUF_VT_ARRAY)
        for (uint64_t i = 0; i < v->arr.n; i++) value_free(&v->arr.items[i]);
    free(v->arr.items);
    v->arr.items = NULL;
}

/* Decodes a fixed-size value at p (unaligned). */
static void decode_scalar(enum gguf_vtype t, const uint8_t *p, gguf_value *v) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } x;
    memcpy(&x, p, gguf_vtype_size(t));
    v->type = t;
    switch (t) {
    case GGUF_VT_U8:
    case GGUF_VT_BOOL: v->u64 = x.u8; break;
    case GGUF_VT_I8: v->i64 = x.i8; break;
    case GGUF_VT_U16: v->u64 = x.u16; break;
    case GGUF_VT_I16: v->i64 = x.i16; break;
    case GGUF_VT_U32: v->u64 = x.u32; break;
    case GGUF_VT_I32: v->i64 = x.i32; break;
    case GGUF_VT_F32: v->f64 = x.f32; break;
    case GGUF_VT_U64: v->u64 = x.u64; break;
    case GGUF_VT_I64: v->i64 = x.i64; break;
    case GGUF_VT_F64: v->f64 = x.f64; break;
    default: break;
    }
}

/* Reads a value of type t (already read and checked) into v. depth = enclosing arrays. On
 * failure v may hold partly built items; value_free releases them. */
static int read_value(reader *r, enum gguf_vtype t, gguf_value *v, int depth) {
    v->type = t;
    if (t == GGUF_VT_STRING) return rd_str(r, &v->str, "string");
    if (t != GGUF_VT_ARRAY) {
        size_t n = gguf_vtype_size(t);
        if (need(r, n, "value")) return -1;
        decode_scalar(t, r->base + r->pos, v);
        r->pos += n;
        return 0;
    }
    if (depth >= GGUF_MAX_NESTING)
        return cd_fail("%s: arrays nested deeper than %d levels", r->where, GGUF_MAX_NESTING);
    uint32_t et;
    uint64_t n;
    if (rd_u32(r, &et, "array element type")) return -1;
    if (et >= GGUF_VT_COUNT) return cd_fail("%s: unknown array element type %" PRIu32, r->where, et);
    if (rd_u64(r, &n, "array length")) return -1;
    v->arr.type = (enum gguf_vtype)et;
    v->arr.raw = r->base + r->pos;
    v->arr.items = NULL;
    v->arr.n = 0;
    size_t es = gguf_vtype_size(v->arr.type);
    if (es) {
        if (need_count(r, n, es, "array length")) return -1;
        v->arr.n = n;
        r->pos += n * es;
        return 0;
    }
    if (need_count(r, n, et == GGUF_VT_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES, "array length")) return -1;
    if (n == 0) return 0;
    v->arr.items = calloc(n, sizeof *v->arr.items);
    if (!v->arr.items) return cd_fail("%s: out of memory for %" PRIu64 " array items", r->where, n);
    v->arr.n = n;
    for (uint64_t i = 0; i < n; i++)
        if (read_value(r, v->arr.type, &v->arr.items[i], depth + 1)) return -1;
    return 0;
}

/* ---- lookups ---- */

static int kv_ptr_cmp(const void *a, const void *b) {
    const gguf_kv *x = *(const gguf_kv *const *)a, *y = *(const gguf_kv *const *)b;
    return str_cmp(x->key.ptr, x->key.len, y->key.ptr, y->key.len);
}

static int tensor_name_cmp(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return str_cmp(x->name.ptr, x->name.len, y->name.ptr, y->name.len);
}

static int tensor_offset_cmp(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    const gguf_impl *g = (const gguf_impl *)f;
    size_t n = strlen(key), lo = 0, hi = f->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const gguf_kv *kv = g->kv_by_key[mid];
        int c = str_cmp(kv->key.ptr, kv->key.len, key, n);
        if (c == 0) return kv;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    const gguf_impl *g = (const gguf_impl *)f;
    size_t n = strlen(name), lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const gguf_tensor *t = g->tensor_by_name[mid];
        int c = str_cmp(t->name.ptr, t->name.len, name, n);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ---- parsing ---- */

static int read_header(reader *r, gguf_file *f) {
    snprintf(r->where, sizeof r->where, "file header");
    uint32_t magic;
    if (rd_u32(r, &magic, "magic")) return -1;
    if (magic != GGUF_MAGIC) return cd_fail("bad magic 0x%08" PRIx32 " (not a GGUF file)", magic);
    if (rd_u32(r, &f->version, "version")) return -1;
    if (f->version != 2 && f->version != 3) {
        if (f->version == 1) return cd_fail("unsupported GGUF version 1 (32-bit counts; re-convert the file)");
        if ((f->version & 0xffff) == 0)
            return cd_fail("unsupported GGUF version %" PRIu32 " (big-endian file?)", f->version);
        return cd_fail("unsupported GGUF version %" PRIu32, f->version);
    }
    if (rd_u64(r, &f->n_tensors, "tensor count") || rd_u64(r, &f->n_kv, "metadata count")) return -1;
    if (need_count(r, f->n_kv, MIN_KV_BYTES, "metadata count")) return -1;
    return 0;
}

static int read_kvs(reader *r, gguf_impl *g) {
    gguf_file *f = &g->pub;
    if (f->n_kv == 0) return 0;
    f->kv = calloc(f->n_kv, sizeof *f->kv);
    g->kv_by_key = malloc(f->n_kv * sizeof *g->kv_by_key);
    if (!f->kv || !g->kv_by_key) return cd_fail("out of memory for %" PRIu64 " metadata keys", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        snprintf(r->where, sizeof r->where, "metadata key %" PRIu64, i);
        if (rd_str(r, &kv->key, "key")) return -1;
        snprintf(r->where, sizeof r->where, "metadata key %" PRIu64 " '%s'", i, show(kv->key));
        uint32_t t;
        if (rd_u32(r, &t, "value type")) return -1;
        if (t >= GGUF_VT_COUNT) return cd_fail("%s has unknown value type %" PRIu32, r->where, t);
        if (read_value(r, (enum gguf_vtype)t, &kv->val, 0)) return -1;
        g->kv_by_key[i] = kv;
    }
    qsort(g->kv_by_key, f->n_kv, sizeof *g->kv_by_key, kv_ptr_cmp);
    for (uint64_t i = 1; i < f->n_kv; i++)
        if (kv_ptr_cmp(&g->kv_by_key[i - 1], &g->kv_by_key[i]) == 0)
            return cd_fail("duplicate key '%s'", show(g->kv_by_key[i]->key));
    return 0;
}

static int read_alignment(gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    if (kv->val.type != GGUF_VT_U32)
        return cd_fail("general.alignment has type %s, expected u32", gguf_vtype_name(kv->val.type));
    uint64_t a = kv->val.u64;
    if (a == 0 || (a & (a - 1))) return cd_fail("general.alignment %" PRIu64 " is not a nonzero power of two", a);
    f->alignment = a;
    return 0;
}

/* One tensor info: everything that can be checked before the data section is known. */
static int read_tensor(reader *r, const gguf_file *f, uint64_t i, gguf_tensor *t) {
    snprintf(r->where, sizeof r->where, "tensor %" PRIu64, i);
    if (rd_str(r, &t->name, "name")) return -1;
    snprintf(r->where, sizeof r->where, "tensor %" PRIu64 " '%s'", i, show(t->name));
    const char *name = show(t->name);
    if (rd_u32(r, &t->n_dims, "n_dims")) return -1;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return cd_fail("tensor '%s' has %" PRIu32 " dimensions (1 to %d allowed)", name, t->n_dims, GGUF_MAX_DIMS);
    int64_t n_el = 1, n_rows = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && rd_u64(r, &ne, "dimension")) return -1;
        if (ne > INT64_MAX) return cd_fail("tensor '%s' dimension %" PRIu32 " is negative", name, d);
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_el, t->ne[d], &n_el) ||
            (d > 0 && __builtin_mul_overflow(n_rows, t->ne[d], &n_rows)))
            return cd_fail("tensor '%s' dimension overflow", name);
    }
    uint32_t type;
    if (rd_u32(r, &type, "type") || rd_u64(r, &t->offset, "offset")) return -1;
    if (!qtype_known(type)) {
        const char *gone = qtype_removed_name(type);
        if (gone)
            return cd_fail("tensor '%s' has type %" PRIu32 " (%s), which ggml removed from GGUF files: "
                           "re-quantize the model with a current llama.cpp",
                           name, type, gone);
        return cd_fail("tensor '%s' has unknown type %" PRIu32 " (newer than this cinder?)", name, type);
    }
    t->type = (enum qtype)type;
    int64_t blk = qtype_block_elems(t->type);
    if (t->ne[0] % blk)
        return cd_fail("tensor '%s' row length %" PRId64 " is not a multiple of the %s block size %" PRId64, name,
                       t->ne[0], qtype_name(t->type), blk);
    uint64_t row_bytes;
    if (__builtin_mul_overflow((uint64_t)(t->ne[0] / blk), (uint64_t)qtype_block_bytes(t->type), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, (uint64_t)n_rows, &t->nbytes))
        return cd_fail("tensor '%s' dimension overflow (size in bytes)", name);
    t->nbytes = (uint64_t)qtype_row_bytes(t->type, t->ne[0]) * (uint64_t)n_rows;
    if (t->offset % f->alignment)
        return cd_fail("tensor '%s' offset %" PRIu64 " not aligned to %" PRIu64, name, t->offset, f->alignment);
    return 0;
}

static int read_tensors(reader *r, gguf_impl *g) {
    gguf_file *f = &g->pub;
    snprintf(r->where, sizeof r->where, "tensor infos");
    if (need_count(r, f->n_tensors, MIN_TENSOR_BYTES, "tensor count")) return -1;
    if (f->n_tensors == 0) return 0;
    f->tensors = calloc(f->n_tensors, sizeof *f->tensors);
    g->tensor_by_name = malloc(f->n_tensors * sizeof *g->tensor_by_name);
    if (!f->tensors || !g->tensor_by_name) return cd_fail("out of memory for %" PRIu64 " tensors", f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (read_tensor(r, f, i, &f->tensors[i])) return -1;
        g->tensor_by_name[i] = &f->tensors[i];
    }
    qsort(g->tensor_by_name, f->n_tensors, sizeof *g->tensor_by_name, tensor_name_cmp);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (tensor_name_cmp(&g->tensor_by_name[i - 1], &g->tensor_by_name[i]) == 0)
            return cd_fail("duplicate tensor name '%s'", show(g->tensor_by_name[i]->name));
    return 0;
}

/* Places the data section and checks every tensor lies inside the file, none overlapping. */
static int place_data(reader *r, gguf_file *f) {
    uint64_t a = f->alignment, end = r->pos;
    /* pos <= size <= SIZE_MAX and a <= 2^31, so this cannot wrap on a 64-bit host. */
    f->data_offset = (end + a - 1) / a * a;
    if (f->n_tensors == 0) {
        if (f->data_offset > f->size) f->data_offset = f->size;
        return 0;
    }
    if (f->data_offset > f->size)
        return cd_fail("truncated file: the data section starts at %" PRIu64 ", past the end (%zu bytes)",
                       f->data_offset, f->size);
    uint64_t room = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > room || t->nbytes > room - t->offset) {
            uint64_t a0, a1;
            if (__builtin_add_overflow(f->data_offset, t->offset, &a0) || __builtin_add_overflow(a0, t->nbytes, &a1))
                return cd_fail("tensor '%s' data at offset %" PRIu64 " + %" PRIu64 " bytes out of file range",
                               show(t->name), t->offset, t->nbytes);
            return cd_fail("tensor '%s' data [%" PRIu64 ",%" PRIu64 ") out of file range (file has %zu bytes)",
                           show(t->name), a0, a1, f->size);
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    const gguf_tensor **by_off = malloc(f->n_tensors * sizeof *by_off);
    if (!by_off) return cd_fail("out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) by_off[i] = &f->tensors[i];
    qsort(by_off, f->n_tensors, sizeof *by_off, tensor_offset_cmp);
    /* Sorted by start, a tensor overlaps an earlier one iff it starts before the furthest end so
     * far. Empty tensors occupy nothing. */
    const gguf_tensor *reach = NULL;
    int rc = 0;
    for (uint64_t i = 0; i < f->n_tensors && rc == 0; i++) {
        const gguf_tensor *t = by_off[i];
        if (t->nbytes == 0) continue;
        if (reach && t->offset < reach->offset + reach->nbytes)
            rc = cd_fail("tensors '%s' and '%s' overlap: [%" PRIu64 ",%" PRIu64 ") and [%" PRIu64 ",%" PRIu64
                         ") in the data section",
                         show(reach->name), show(t->name), reach->offset, reach->offset + reach->nbytes, t->offset,
                         t->offset + t->nbytes);
        if (!reach || t->offset + t->nbytes > reach->offset + reach->nbytes) reach = t;
    }
    free(by_off);
    return rc;
}

static void impl_free(gguf_impl *g) {
    gguf_file *f = &g->pub;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) value_free(&f->kv[i].val);
    free(f->kv);
    free(f->tensors);
    free(g->kv_by_key);
    free(g->tensor_by_name);
    for (uint32_t i = 0; i + 1 < f->n_shards; i++) impl_free((gguf_impl *)g->shards[i]);
    free(g->shards);
    if (f->mapped && f->base) munmap((void *)f->base, f->size);
    free(g);
}

static int parse(gguf_file **out, const void *buf, size_t size, bool mapped) {
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g) return cd_fail("out of memory");
    gguf_file *f = &g->pub;
    f->base = buf;
    f->size = size;
    f->mapped = mapped;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    f->n_shards = 1;
    f->disk_bytes = size;
    reader r = {.base = buf, .size = size};
    if (read_header(&r, f) || read_kvs(&r, g) || read_alignment(f) || read_tensors(&r, g) || place_data(&r, f)) {
        /* Every kv slot is zeroed or (partly) parsed, so all of them can be freed. */
        f->mapped = false; /* the caller unmaps on failure */
        impl_free(g);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_parse(gguf_file **out, const void *buf, size_t size) {
    *out = NULL;
    if (!buf && size) return cd_fail("null buffer");
    return parse(out, buf ? buf : "", size, false);
}

int gguf_open_file(gguf_file **out, const char *path) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cd_fail("cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cd_fail("cannot stat: %s", strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return cd_fail("is a directory, not a GGUF file");
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cd_fail("not a regular file");
    }
    if (st.st_size == 0) {
        close(fd);
        return cd_fail("empty file (0 bytes), not a GGUF file");
    }
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return cd_fail("cannot map %zu bytes: %s", size, strerror(e));
    if (parse(out, p, size, true)) {
        munmap(p, size);
        return -1;
    }
    return 0;
}

void gguf_close(gguf_file *f) {
    if (f) impl_free((gguf_impl *)f);
}

/* ---- a split model's shards joined into one file (gguf_join.h) ---- */

/* Every shard's tensors in one array, shard by shard in file order, each marked with its
 * shard; the name index rebuilt over all of them. */
static int join_tensors(gguf_file *first, gguf_file **rest, uint32_t n_rest, gguf_tensor **ts_out,
                        const gguf_tensor ***idx_out) {
    uint64_t total = first->n_tensors;
    for (uint32_t i = 0; i < n_rest; i++)
        if (__builtin_add_overflow(total, rest[i]->n_tensors, &total)) return cd_fail("tensor count overflow");
    gguf_tensor *ts = calloc(total ? total : 1, sizeof *ts);
    const gguf_tensor **idx = malloc((total ? total : 1) * sizeof *idx);
    if (!ts || !idx) {
        free(ts);
        free(idx);
        return cd_fail("out of memory for %" PRIu64 " tensors", total);
    }
    uint64_t k = 0;
    for (uint32_t s = 0; s <= n_rest; s++) {
        const gguf_file *f = s ? rest[s - 1] : first;
        for (uint64_t i = 0; i < f->n_tensors; i++, k++) {
            ts[k] = f->tensors[i];
            ts[k].shard = s;
            idx[k] = &ts[k];
        }
    }
    qsort(idx, total, sizeof *idx, tensor_name_cmp);
    *ts_out = ts;
    *idx_out = idx;
    return 0;
}

int gguf_join_shards(gguf_file *first, gguf_file **rest, uint32_t n_rest, const char *const *paths) {
    gguf_impl *g = (gguf_impl *)first;
    gguf_tensor *ts = NULL;
    const gguf_tensor **idx = NULL;
    gguf_file **owned = malloc((n_rest ? n_rest : 1) * sizeof *owned);
    int rc = owned ? join_tensors(first, rest, n_rest, &ts, &idx) : cd_fail("out of memory");
    uint64_t total = first->n_tensors, bytes = first->size;
    for (uint32_t i = 0; i < n_rest; i++) total += rest[i]->n_tensors, bytes += rest[i]->size;
    for (uint64_t i = 1; rc == 0 && i < total; i++) {
        if (tensor_name_cmp(&idx[i - 1], &idx[i])) continue;
        uint32_t a = idx[i - 1]->shard, b = idx[i]->shard; /* qsort keeps no order among equals */
        rc = cd_fail("tensor '%s' is in two shards: %s and %s", show(idx[i]->name), paths[a < b ? a : b],
                     paths[a < b ? b : a]);
    }
    if (rc) {
        for (uint32_t i = 0; i < n_rest; i++) gguf_close(rest[i]);
        free(owned);
        free(ts);
        free(idx);
        return -1;
    }
    memcpy(owned, rest, n_rest * sizeof *owned);
    free(first->tensors);
    free(g->tensor_by_name);
    first->tensors = ts;
    first->n_tensors = total;
    g->tensor_by_name = idx;
    g->shards = owned;
    first->n_shards = n_rest + 1;
    first->disk_bytes = bytes;
    return 0;
}

/* ---- typed getters ---- */

static const gguf_kv *get(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) cd_fail("missing key '%s'", key);
    return kv;
}

static bool is_unsigned(enum gguf_vtype t) {
    return t == GGUF_VT_U8 || t == GGUF_VT_U16 || t == GGUF_VT_U32 || t == GGUF_VT_U64;
}

static bool is_signed(enum gguf_vtype t) {
    return t == GGUF_VT_I8 || t == GGUF_VT_I16 || t == GGUF_VT_I32 || t == GGUF_VT_I64;
}

/* An integer value range-checked against [lo, hi]. */
static int get_int(const gguf_file *f, const char *key, int64_t lo, uint64_t hi, const char *want, uint64_t *u,
                   int64_t *s) {
    const gguf_kv *kv = get(f, key);
    if (!kv) return -1;
    const gguf_value *v = &kv->val;
    if (is_unsigned(v->type)) {
        if (v->u64 > hi) return cd_fail("key '%s' value %" PRIu64 " does not fit in %s", key, v->u64, want);
        *u = v->u64;
        *s = (int64_t)v->u64; /* only used when hi <= INT64_MAX */
        return 0;
    }
    if (is_signed(v->type)) {
        if (v->i64 < lo || (v->i64 > 0 && (uint64_t)v->i64 > hi))
            return cd_fail("key '%s' value %" PRId64 " does not fit in %s", key, v->i64, want);
        *u = (uint64_t)v->i64;
        *s = v->i64;
        return 0;
    }
    return cd_fail("key '%s' has type %s, expected integer", key, gguf_vtype_name(v->type));
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t u;
    int64_t s;
    if (get_int(f, key, 0, UINT32_MAX, "u32", &u, &s)) return -1;
    *out = (uint32_t)u;
    return 0;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    uint64_t u;
    int64_t s;
    if (get_int(f, key, 0, UINT64_MAX, "u64", &u, &s)) return -1;
    *out = u;
    return 0;
}

int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out) {
    uint64_t u;
    int64_t s;
    if (get_int(f, key, INT32_MIN, INT32_MAX, "i32", &u, &s)) return -1;
    *out = (int32_t)s;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = get(f, key);
    if (!kv) return -1;
    if (kv->val.type != GGUF_VT_F32 && kv->val.type != GGUF_VT_F64)
        return cd_fail("key '%s' has type %s, expected float", key, gguf_vtype_name(kv->val.type));
    *out = (float)kv->val.f64;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = get(f, key);
    if (!kv) return -1;
    if (kv->val.type != GGUF_VT_BOOL)
        return cd_fail("key '%s' has type %s, expected bool", key, gguf_vtype_name(kv->val.type));
    *out = kv->val.u64 != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = get(f, key);
    if (!kv) return -1;
    if (kv->val.type != GGUF_VT_STRING)
        return cd_fail("key '%s' has type %s, expected string", key, gguf_vtype_name(kv->val.type));
    *out = kv->val.str;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, enum gguf_vtype elem, const gguf_value **out) {
    const gguf_kv *kv = get(f, key);
    if (!kv) return -1;
    if (kv->val.type != GGUF_VT_ARRAY)
        return cd_fail("key '%s' has type %s, expected array", key, gguf_vtype_name(kv->val.type));
    if (elem != GGUF_VT_COUNT && kv->val.arr.type != elem)
        return cd_fail("key '%s' is an array of %s, expected an array of %s", key, gguf_vtype_name(kv->val.arr.type),
                       gguf_vtype_name(elem));
    *out = &kv->val;
    return 0;
}

int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i) {
    if (arr->type != GGUF_VT_ARRAY || i >= arr->arr.n || !gguf_vtype_size(arr->arr.type)) return 0;
    size_t es = gguf_vtype_size(arr->arr.type);
    gguf_value v;
    decode_scalar(arr->arr.type, arr->arr.raw + i * es, &v);
    if (is_signed(v.type)) return v.i64;
    if (v.type == GGUF_VT_F32 || v.type == GGUF_VT_F64) {
        /* Truncates; NaN and out-of-range values give 0 rather than undefined behaviour. */
        return v.f64 >= -0x1p63 && v.f64 < 0x1p63 ? (int64_t)v.f64 : 0;
    }
    return (int64_t)v.u64;
}

double gguf_arr_f64(const gguf_value *arr, uint64_t i) {
    if (arr->type != GGUF_VT_ARRAY || i >= arr->arr.n || !gguf_vtype_size(arr->arr.type)) return 0;
    size_t es = gguf_vtype_size(arr->arr.type);
    gguf_value v;
    decode_scalar(arr->arr.type, arr->arr.raw + i * es, &v);
    if (is_signed(v.type)) return (double)v.i64;
    if (v.type == GGUF_VT_F32 || v.type == GGUF_VT_F64) return v.f64;
    return (double)v.u64;
}

/* Deep equality of two values: type, element type, every element (floats by bits). */
bool gguf_value_eq(const gguf_value *a, const gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_VT_STRING: return a->str.len == b->str.len && memcmp(a->str.ptr, b->str.ptr, a->str.len) == 0;
    case GGUF_VT_ARRAY: {
        if (a->arr.type != b->arr.type || a->arr.n != b->arr.n) return false;
        size_t es = gguf_vtype_size(a->arr.type);
        if (es) return a->arr.n == 0 || memcmp(a->arr.raw, b->arr.raw, a->arr.n * es) == 0;
        for (uint64_t i = 0; i < a->arr.n; i++)
            if (!gguf_value_eq(&a->arr.items[i], &b->arr.items[i])) return false;
        return true;
    }
    case GGUF_VT_F32:
    case GGUF_VT_F64: return memcmp(&a->f64, &b->f64, sizeof a->f64) == 0;
    default: return a->u64 == b->u64;
    }
}
