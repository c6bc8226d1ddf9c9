/* GGUF v3 files: a reader that maps the file and validates every byte it will ever touch,
 * and a writer that streams tensors out (so multi-GB synthetic models never sit in RAM).
 *
 * Layout (little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { gguf_string key | u32 value type | value }
 *   n_tensors x { gguf_string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to general.alignment (default 32) | tensor data (each offset aligned)
 * where gguf_string = u64 length + bytes (no NUL). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/gguf/quant.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NESTING 8 /* arrays of arrays: deeper files are rejected */

enum gguf_vtype {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
    GGUF_VT_COUNT
};

/* A string inside the mapped file: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    enum gguf_vtype type;
    union {
        uint64_t u64; /* U8..U64 and BOOL, zero-extended */
        int64_t i64;  /* I8..I64, sign-extended */
        double f64;   /* F32, F64 */
        gguf_str str; /* STRING */
        struct {
            enum gguf_vtype type; /* element type */
            uint64_t n;
            const uint8_t *raw; /* fixed-size element types: n packed elements in the file */
            gguf_value *items;  /* STRING and ARRAY element types: n parsed values */
        } arr;
    };
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value val;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    enum qtype type;
    uint64_t offset; /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* inside the mapping of the file that holds it */
    uint32_t shard;   /* that file: 0, or its index (split.no) in a split model */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *base; /* the whole file */
    size_t size;
    bool mapped; /* base came from mmap (gguf_open) rather than the caller */
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* start of the data section in the file */
    /* A split model (below): its tensors are every shard's, the metadata is the first's; base,
     * size and data_offset are the first shard's. 1 and size for one file. */
    uint32_t n_shards;
    uint64_t disk_bytes; /* every shard's size together */
} gguf_file;

/* Maps and validates a file. On failure returns -1 with cd_errmsg() naming the problem
 * (bad magic, unsupported version, truncated header, tensor out of range, overlapping
 * tensors, unknown type, dimension overflow, ...). Messages do not repeat the path: callers
 * prefix it (cd_fail_ctx). Versions 2 and 3 are read (same layout); 1 is rejected. Tensors
 * have 1..GGUF_MAX_DIMS dims; every tensor's data lies inside the file and none overlap. The
 * first shard of a split model opens the whole model (below). */
int gguf_open(gguf_file **out, const char *path);
/* One file on its own, as gguf_open reads each shard: split.* keys are not looked at. */
int gguf_open_file(gguf_file **out, const char *path);
/* The same over a caller-owned buffer (tests, fuzzing); buf must outlive the file. A split
 * model's shard parses as itself. */
int gguf_parse(gguf_file **out, const void *buf, size_t size);
void gguf_close(gguf_file *f); /* a split model's every shard */

/* ---- split models (runtime/gguf/gguf_split.c) ----
 * llama.cpp's gguf-split cuts a model into PREFIX-00001-of-0000N.gguf ... -0000N-of-0000N.gguf.
 * Every shard is a whole GGUF file holding some of the tensors, their data in that file. The
 * first has all the metadata; every shard has split.no (u16, 0-based), split.count (u16, N)
 * and split.tensors.count (i32, the model's tensor count).
 *
 * gguf_open on the first shard opens them all, found by name, and checks that every one is
 * there, that each says the same split.count and split.tensors.count, that split.no matches
 * its place in the name, that the tensors add up to split.tensors.count and that no name
 * comes twice; an error names the shard. Opened on another shard it fails, naming the first.
 * A file with split.count 1, 0 (gguf-split --merge writes it) or none is one file. */
#define GGUF_KEY_SPLIT_NO "split.no"
#define GGUF_KEY_SPLIT_COUNT "split.count"
#define GGUF_KEY_SPLIT_TENSORS "split.tensors.count"
#define GGUF_SPLIT_MAX 65535 /* split.count is a u16 */

/* PREFIX-%05u-of-%05u.gguf for shard no (0-based) of count, as llama_split_path writes it.
 * -1 when it does not fit in cap bytes. */
int gguf_split_path(char *buf, size_t cap, const char *prefix, uint32_t no, uint32_t count);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
bool gguf_str_eq(gguf_str s, const char *c);

/* Typed getters: 0 on success; -1 if missing or of an incompatible type (message names the
 * key). Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out); /* F32 or F64 */
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* An array value whose elements have type `elem` (GGUF_VT_COUNT: any element type; read
 * out->arr.type). */
int gguf_get_arr(const gguf_file *f, const char *key, enum gguf_vtype elem, const gguf_value **out);
/* Element i of a fixed-size numeric array as int64/double (unaligned-safe). Floats are
 * truncated toward zero (NaN/out of range: 0); an index out of range or a STRING/ARRAY
 * array gives 0. */
int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i);
double gguf_arr_f64(const gguf_value *arr, uint64_t i);
size_t gguf_vtype_size(enum gguf_vtype t); /* 0 for STRING/ARRAY */
/* Deep equality of two values, nested arrays included (floats compared by bits). */
bool gguf_value_eq(const gguf_value *a, const gguf_value *b);
const char *gguf_vtype_name(enum gguf_vtype t);

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;
/* Produces a tensor's bytes at write time; buf has exactly nbytes. Returns 0 or -1. */
typedef int (*gguf_fill_fn)(void *user, void *buf, size_t nbytes);

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
/* Metadata setters copy their inputs. Setting a key twice replaces it. Order is kept. */
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of n fixed-size elements of type elem (not STRING/ARRAY), packed little-endian. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype elem, const void *data, size_t n);
void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, size_t n);
/* Any value, deep-copied: every scalar type, strings with embedded NULs, arrays of strings and
 * nested arrays (items for STRING/ARRAY elements, raw for fixed-size ones), e.g. a value read
 * from another file. */
void gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v);
/* Adds a tensor; its bytes come from `data` (copied pointer, must live until write) or,
 * when data is NULL, from fill(user, ...) during gguf_writer_write. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, enum qtype type, uint32_t n_dims, const int64_t *ne,
                           const void *data, gguf_fill_fn fill, void *user);
/* Writes to path (via path.tmp renamed into place, so a failed write never leaves a half
 * file under the final name). Tensors are written one at a time: fill callbacks get a buffer
 * sized to their tensor, in the order tensors were added. Data is aligned to
 * general.alignment when set (u32, power of two), else 32. A setter that ran out of memory
 * or an invalid value makes this fail (setters return nothing). */
int gguf_writer_write(gguf_writer *w, const char *path);
/* Writes a split model as gguf-split --split-max-tensors does: shards of max_tensors tensors
 * each, in the order added (at least one shard), named by gguf_split_path(prefix, ...); the
 * first with all the metadata, every one with the split.* keys. *n_shards gets the count.
 * On failure the shards written so far are removed. */
int gguf_writer_write_split(gguf_writer *w, const char *prefix, uint64_t max_tensors, uint32_t *n_shards);
