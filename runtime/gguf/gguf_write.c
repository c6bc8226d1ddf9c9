/* GGUF writer. Metadata is held (deep-copied) in insertion order; tensors are held as
 * descriptions only, and their bytes are produced one tensor at a time at write time, so a
 * multi-GB file needs one tensor's worth of memory.
 *
 * Setters return nothing: an allocation failure or an invalid argument is remembered in
 * w->err and reported by gguf_writer_write, which then writes nothing. */
#include "runtime/gguf/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/error.h"

typedef struct wkv {
    char *key;
    gguf_value val; /* owns its strings, raw arrays and items */
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    enum qtype type;
    uint64_t nbytes;
    uint64_t offset; /* assigned at write time */
    const void *data;
    gguf_fill_fn fill;
    void *user;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    char err[256]; /* first setter failure, reported by write */
};

static void set_err(gguf_writer *w, const char *fmt, const char *key) {
    if (!w->err[0]) snprintf(w->err, sizeof w->err, fmt, key);
}

/* ---- owned values ---- */

static void owned_free(gguf_value *v) {
    if (v->type == GGUF_VT_STRING) {
        free((char *)v->str.ptr);
    } else if (v->type == GGUF_VT_ARRAY) {
        if (v->arr.items)
            for (uint64_t i = 0; i < v->arr.n; i++) owned_free(&v->arr.items[i]);
        free(v->arr.items);
        free((void *)v->arr.raw);
    }
}

/* Deep copy of src into dst (dst fully owned on success, freeable on failure). */
static int owned_copy(gguf_value *dst, const gguf_value *src, int depth) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    if ((unsigned)src->type >= GGUF_VT_COUNT) return -1;
    if (src->type == GGUF_VT_STRING) {
        char *p = malloc(src->str.len ? src->str.len : 1);
        if (!p) return -1;
        if (src->str.len) memcpy(p, src->str.ptr, src->str.len);
        dst->str.ptr = p;
        dst->str.len = src->str.len;
        return 0;
    }
    if (src->type != GGUF_VT_ARRAY) {
        dst->u64 = src->u64; /* the union's widest member: copies i64/f64 too */
        return 0;
    }
    if (depth >= GGUF_MAX_NESTING || (unsigned)src->arr.type >= GGUF_VT_COUNT) return -1;
    dst->arr.type = src->arr.type;
    size_t es = gguf_vtype_size(src->arr.type);
    if (es) {
        if (src->arr.n > SIZE_MAX / es) return -1;
        void *p = malloc(src->arr.n ? src->arr.n * es : 1);
        if (!p) return -1;
        if (src->arr.n) memcpy(p, src->arr.raw, src->arr.n * es);
        dst->arr.raw = p;
        dst->arr.n = src->arr.n;
        return 0;
    }
    if (src->arr.n == 0) return 0;
    if (src->arr.n > SIZE_MAX / sizeof(gguf_value)) return -1;
    dst->arr.items = calloc(src->arr.n, sizeof(gguf_value));
    if (!dst->arr.items) return -1;
    dst->arr.n = src->arr.n;
    for (uint64_t i = 0; i < src->arr.n; i++) {
        /* Element values must carry the array's element type. */
        if (src->arr.items[i].type != src->arr.type) return -1;
        if (owned_copy(&dst->arr.items[i], &src->arr.items[i], depth + 1)) return -1;
    }
    return 0;
}

/* ---- setters ---- */

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        owned_free(&w->kv[i].val);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

void gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    gguf_value copy;
    if (owned_copy(&copy, v, 0)) {
        owned_free(&copy);
        set_err(w, "metadata key '%s': out of memory or malformed value", key);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            owned_free(&w->kv[i].val);
            w->kv[i].val = copy;
            return;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) goto oom;
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) goto oom;
    w->kv[w->n_kv++] = (wkv){.key = k, .val = copy};
    return;
oom:
    owned_free(&copy);
    set_err(w, "metadata key '%s': out of memory", key);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    gguf_writer_set_value(w, key, &(gguf_value){.type = GGUF_VT_U32, .u64 = v});
}

void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    gguf_writer_set_value(w, key, &(gguf_value){.type = GGUF_VT_I32, .i64 = v});
}

void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    gguf_writer_set_value(w, key, &(gguf_value){.type = GGUF_VT_U64, .u64 = v});
}

void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    gguf_writer_set_value(w, key, &(gguf_value){.type = GGUF_VT_F32, .f64 = v});
}

void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    gguf_writer_set_value(w, key, &(gguf_value){.type = GGUF_VT_BOOL, .u64 = v});
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    gguf_writer_set_value(w, key, &(gguf_value){.type = GGUF_VT_STRING, .str = {v, strlen(v)}});
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype elem, const void *data, size_t n) {
    if (!gguf_vtype_size(elem)) {
        set_err(w, "metadata key '%s': gguf_writer_set_arr needs a fixed-size element type", key);
        return;
    }
    gguf_value v = {.type = GGUF_VT_ARRAY};
    v.arr.type = elem;
    v.arr.n = n;
    v.arr.raw = data;
    gguf_writer_set_value(w, key, &v);
}

void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, size_t n) {
    gguf_value v = {.type = GGUF_VT_ARRAY};
    v.arr.type = GGUF_VT_STRING;
    v.arr.n = n;
    if (n) {
        v.arr.items = calloc(n, sizeof *v.arr.items);
        if (!v.arr.items) {
            set_err(w, "metadata key '%s': out of memory", key);
            return;
        }
        for (size_t i = 0; i < n; i++)
            v.arr.items[i] = (gguf_value){.type = GGUF_VT_STRING, .str = {strs[i], strlen(strs[i])}};
    }
    gguf_writer_set_value(w, key, &v);
    free(v.arr.items);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, enum qtype type, uint32_t n_dims, const int64_t *ne,
                           const void *data, gguf_fill_fn fill, void *user) {
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
        return cd_fail("tensor '%s': %" PRIu32 " dimensions (1 to %d allowed)", name, n_dims, GGUF_MAX_DIMS);
    if (!qtype_known(type)) return cd_fail("tensor '%s': unknown type %d", name, (int)type);
    wtensor t = {.n_dims = n_dims, .type = type, .data = data, .fill = fill, .user = user};
    int64_t n_rows = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0) return cd_fail("tensor '%s': dimension %" PRIu32 " is negative", name, d);
        if (d > 0 && __builtin_mul_overflow(n_rows, t.ne[d], &n_rows))
            return cd_fail("tensor '%s': dimension overflow", name);
    }
    int64_t blk = qtype_block_elems(type);
    if (t.ne[0] % blk)
        return cd_fail("tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %" PRId64, name,
                       t.ne[0], qtype_name(type), blk);
    uint64_t row_bytes;
    if (__builtin_mul_overflow((uint64_t)(t.ne[0] / blk), (uint64_t)qtype_block_bytes(type), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, (uint64_t)n_rows, &t.nbytes) || (t.ne[0] && n_rows > INT64_MAX / t.ne[0]))
        return cd_fail("tensor '%s': dimension overflow", name);
    if (!data && !fill && t.nbytes) return cd_fail("tensor '%s': neither data nor a fill callback", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return cd_fail("duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return cd_fail("out of memory");
        w->t = p;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name))) return cd_fail("out of memory");
    w->t[w->n_t++] = t;
    return 0;
}

/* ---- output ---- */

typedef struct out {
    FILE *fp;
    const char *path;
    uint64_t pos;
    int rc;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->rc || n == 0) return;
    if (fwrite(p, 1, n, o->fp) != n) {
        o->rc = cd_fail("writing %s: %s", o->path, strerror(errno ? errno : EIO));
        return;
    }
    o->pos += n;
}

static void put_u32(out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(out *o, uint64_t v) { put(o, &v, 8); }

static void put_str(out *o, const char *p, uint64_t n) {
    put_u64(o, n);
    put(o, p, n);
}

static void pad(out *o, uint64_t alignment) {
    static const uint8_t zeros[64];
    uint64_t n = (alignment - o->pos % alignment) % alignment;
    while (n > 0 && !o->rc) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        put(o, zeros, k);
        n -= k;
    }
}

static void put_value(out *o, const gguf_value *v) {
    size_t es = gguf_vtype_size(v->type);
    if (es) {
        union {
            uint8_t u8;
            uint16_t u16;
            uint32_t u32;
            uint64_t u64;
            float f32;
            double f64;
        } x;
        switch (v->type) {
        case GGUF_VT_U8:
        case GGUF_VT_I8:
        case GGUF_VT_BOOL: x.u8 = (uint8_t)v->u64; break;
        case GGUF_VT_U16:
        case GGUF_VT_I16: x.u16 = (uint16_t)v->u64; break;
        case GGUF_VT_U32:
        case GGUF_VT_I32: x.u32 = (uint32_t)v->u64; break;
        case GGUF_VT_F32: x.f32 = (float)v->f64; break;
        case GGUF_VT_F64: x.f64 = v->f64; break;
        default: x.u64 = v->u64; break; /* U64, I64 (two's complement) */
        }
        put(o, &x, es);
    } else if (v->type == GGUF_VT_STRING) {
        put_str(o, v->str.ptr, v->str.len);
    } else {
        put_u32(o, v->arr.type);
        put_u64(o, v->arr.n);
        size_t aes = gguf_vtype_size(v->arr.type);
        if (aes) put(o, v->arr.raw, v->arr.n * aes);
        else
            for (uint64_t i = 0; i < v->arr.n; i++) put_value(o, &v->arr.items[i]);
    }
}

/* The alignment the file will declare: general.alignment if set, else the default. */
static int writer_alignment(const gguf_writer *w, uint64_t *out) {
    *out = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        const gguf_value *v = &w->kv[i].val;
        if (v->type != GGUF_VT_U32) return cd_fail("general.alignment must be a u32");
        if (v->u64 == 0 || (v->u64 & (v->u64 - 1)))
            return cd_fail("general.alignment %" PRIu64 " is not a nonzero power of two", v->u64);
        *out = v->u64;
    }
    return 0;
}

static int write_tensor_data(out *o, wtensor *t, void **buf, size_t *cap) {
    if (t->nbytes == 0) return 0;
    if (t->data) {
        put(o, t->data, t->nbytes);
        return o->rc;
    }
    if (t->nbytes > *cap) {
        free(*buf);
        *cap = 0;
        if (!(*buf = malloc(t->nbytes)))
            return cd_fail("tensor '%s': out of memory for %" PRIu64 " bytes", t->name, t->nbytes);
        *cap = t->nbytes;
    }
    if (t->fill(t->user, *buf, t->nbytes)) return cd_fail_ctx("tensor '%s': ", t->name);
    put(o, *buf, t->nbytes);
    return o->rc;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    if (w->err[0]) return cd_fail("%s", w->err);
    uint64_t alignment;
    if (writer_alignment(w, &alignment)) return -1;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        off = (off + alignment - 1) / alignment * alignment;
        w->t[i].offset = off;
        if (__builtin_add_overflow(off, w->t[i].nbytes, &off)) return cd_fail("tensor data too large");
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return cd_fail("out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    out o = {.fp = fopen(tmp, "wb"), .path = tmp};
    if (!o.fp) {
        int rc = cd_fail("cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    setvbuf(o.fp, NULL, _IOFBF, 1 << 20);
    errno = 0;

    put(&o, "GGUF", 4);
    put_u32(&o, 3);
    put_u64(&o, w->n_t);
    put_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&o, w->kv[i].key, strlen(w->kv[i].key));
        put_u32(&o, w->kv[i].val.type);
        put_value(&o, &w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&o, t->name, strlen(t->name));
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
        put_u32(&o, t->type);
        put_u64(&o, t->offset);
    }
    /* As llama.cpp writes: data section aligned, each tensor padded to the alignment. */
    pad(&o, alignment);
    uint64_t data_start = o.pos;
    void *buf = NULL;
    size_t cap = 0;
    int rc = o.rc;
    for (size_t i = 0; i < w->n_t && rc == 0; i++) {
        if (o.pos - data_start != w->t[i].offset) {
            rc = cd_fail("internal error: tensor '%s' at %" PRIu64 ", expected %" PRIu64, w->t[i].name,
                         o.pos - data_start, w->t[i].offset);
            break;
        }
        rc = write_tensor_data(&o, &w->t[i], &buf, &cap);
        if (rc == 0) pad(&o, alignment);
        rc = rc ? rc : o.rc;
    }
    free(buf);
    if (rc == 0 && fflush(o.fp) != 0) rc = cd_fail("writing %s: %s", tmp, strerror(errno));
    if (rc == 0 && fsync(fileno(o.fp)) != 0 && errno != EINVAL && errno != EROFS)
        rc = cd_fail("syncing %s: %s", tmp, strerror(errno));
    if (fclose(o.fp) != 0 && rc == 0) rc = cd_fail("closing %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = cd_fail("renaming %s to %s: %s", tmp, path, strerror(errno));
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
}

/* ---- split models (gguf.h) ---- */

static void set_u16(gguf_writer *w, const char *key, uint32_t v) {
    gguf_value x = {.type = GGUF_VT_U16, .u64 = v};
    gguf_writer_set_value(w, key, &x);
}

/* Shard i of n: tensors [i * max, (i + 1) * max) described by the same pointers and fill
 * callbacks (nothing is copied but their descriptions), the metadata in the first. Later shards
 * keep general.alignment so their tensors are laid out as the first's. */
static gguf_writer *shard_writer(const gguf_writer *w, uint32_t i, uint32_t n, uint64_t max) {
    gguf_writer *s = gguf_writer_new();
    if (!s) return NULL;
    for (size_t k = 0; k < w->n_kv; k++)
        if (i == 0 || !strcmp(w->kv[k].key, "general.alignment")) gguf_writer_set_value(s, w->kv[k].key, &w->kv[k].val);
    set_u16(s, GGUF_KEY_SPLIT_NO, i);
    set_u16(s, GGUF_KEY_SPLIT_COUNT, n);
    gguf_writer_set_i32(s, GGUF_KEY_SPLIT_TENSORS, (int32_t)w->n_t);
    for (uint64_t k = i * max; k < w->n_t && k < (i + 1) * max; k++) {
        const wtensor *t = &w->t[k];
        if (gguf_writer_add_tensor(s, t->name, t->type, t->n_dims, t->ne, t->data, t->fill, t->user)) {
            gguf_writer_free(s);
            return NULL;
        }
    }
    return s;
}

int gguf_writer_write_split(gguf_writer *w, const char *prefix, uint64_t max_tensors, uint32_t *n_shards) {
    if (w->err[0]) return cd_fail("%s", w->err);
    if (max_tensors == 0) return cd_fail("a shard needs room for at least one tensor");
    uint64_t n = w->n_t ? (w->n_t + max_tensors - 1) / max_tensors : 1;
    if (n > GGUF_SPLIT_MAX || w->n_t > INT32_MAX)
        return cd_fail("%zu tensors in shards of %" PRIu64 " make more than %d shards", w->n_t, max_tensors,
                       GGUF_SPLIT_MAX);
    size_t cap = strlen(prefix) + 32;
    char *path = malloc(cap);
    if (!path) return cd_fail("out of memory");
    int rc = 0;
    uint32_t done = 0;
    for (; rc == 0 && done < n; done++) {
        gguf_writer *s = shard_writer(w, done, (uint32_t)n, max_tensors);
        rc = s ? gguf_split_path(path, cap, prefix, done, (uint32_t)n) : cd_fail("out of memory");
        if (rc == 0) rc = gguf_writer_write(s, path);
        gguf_writer_free(s);
    }
    for (uint32_t i = 0; rc && i + 1 < done; i++) /* the shard that failed left nothing */
        if (gguf_split_path(path, cap, prefix, i, (uint32_t)n) == 0) unlink(path);
    free(path);
    if (rc == 0) *n_shards = (uint32_t)n;
    return rc;
}
