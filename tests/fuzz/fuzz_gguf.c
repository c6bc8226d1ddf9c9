/* libFuzzer target for the GGUF reader (and, through round trips, the writer).
 *
 * For every input: gguf_parse must either fail with a message or return a file whose every
 * tensor lies inside the input (first and last byte are touched, so ASan checks the range)
 * and whose keys and tensors are all found by name. A parsed file is then written back with
 * gguf_writer (metadata deep-copied with set_value, tensor bytes from the input), reopened,
 * and compared value by value and byte by byte. Any violation aborts, which libFuzzer
 * reports as a crash with the input saved. Run with scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "tests/fuzz/fuzz_util.h"

#define CHECK(cond) FUZZ_CHECK("fuzz_gguf", cond)

static volatile uint8_t sink;

/* A name as a C string, or false if it holds a NUL or is too long for the writer round trip. */
static bool cstr(gguf_str s, char *out, size_t cap) {
    if (s.len >= cap || memchr(s.ptr, 0, s.len)) return false;
    memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return true;
}

static void check_file(const gguf_file *f, const uint8_t *data, size_t size) {
    CHECK(f->base == data && f->size == size);
    CHECK(f->alignment && !(f->alignment & (f->alignment - 1)));
    CHECK(f->data_offset <= size);
    char name[256];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        CHECK(qtype_known(t->type));
        CHECK(p == data + f->data_offset + t->offset);
        CHECK(t->offset % f->alignment == 0);
        CHECK(t->nbytes <= size && p >= data && (size_t)(p - data) <= size - t->nbytes);
        int64_t rows = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) CHECK(t->ne[d] >= 0);
        for (int d = 1; d < GGUF_MAX_DIMS; d++) rows *= t->ne[d];
        if (t->ne[0] && rows) CHECK(t->nbytes == qtype_row_bytes(t->type, t->ne[0]) * (uint64_t)rows);
        else CHECK(t->nbytes == 0);
        if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
        if (cstr(t->name, name, sizeof name)) CHECK(gguf_find_tensor(f, name) == t);
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (!cstr(kv->key, name, sizeof name)) continue;
        CHECK(gguf_find_kv(f, name) == kv);
        uint32_t u32;
        uint64_t u64;
        int32_t i32;
        float f32;
        bool b;
        gguf_str s;
        const gguf_value *a;
        (void)gguf_get_u32(f, name, &u32);
        (void)gguf_get_u64(f, name, &u64);
        (void)gguf_get_i32(f, name, &i32);
        (void)gguf_get_f32(f, name, &f32);
        (void)gguf_get_bool(f, name, &b);
        if (gguf_get_str(f, name, &s) == 0) CHECK(s.ptr >= (const char *)data && s.len <= size);
        if (gguf_get_arr(f, name, GGUF_VT_COUNT, &a) == 0 && a->arr.n)
            sink ^= (uint8_t)gguf_arr_i64(a, a->arr.n - 1) ^ (uint8_t)(gguf_arr_f64(a, 0) != 0);
    }
}

/* Writes f back out and checks the copy reads back identical. Skipped for inputs the C-string
 * writer API cannot express (NULs in names) or that would write a lot (huge alignment). */
static void round_trip(const gguf_file *f) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/dev/shm/fuzz_gguf.%d.gguf", (int)getpid());
    if (f->alignment > 4096) return;
    char name[256];
    gguf_writer *w = gguf_writer_new();
    CHECK(w);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (!cstr(f->kv[i].key, name, sizeof name)) goto out;
        gguf_writer_set_value(w, name, &f->kv[i].val);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!cstr(t->name, name, sizeof name)) goto out;
        CHECK(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, NULL, NULL) == 0);
    }
    if (gguf_writer_write(w, path) != 0) {
        fprintf(stderr, "fuzz_gguf: write failed: %s\n", cd_errmsg());
        abort();
    }
    gguf_file *g;
    if (gguf_open_file(&g, path) != 0) { /* the file alone: its split.* keys, if any, are data here */
        fprintf(stderr, "fuzz_gguf: reopen failed: %s\n", cd_errmsg());
        abort();
    }
    CHECK(g->n_kv == f->n_kv && g->n_tensors == f->n_tensors && g->alignment == f->alignment);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        CHECK(g->kv[i].key.len == f->kv[i].key.len);
        CHECK(memcmp(g->kv[i].key.ptr, f->kv[i].key.ptr, f->kv[i].key.len) == 0);
        CHECK(gguf_value_eq(&g->kv[i].val, &f->kv[i].val));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *a = &f->tensors[i], *b = &g->tensors[i];
        CHECK(a->name.len == b->name.len && memcmp(a->name.ptr, b->name.ptr, a->name.len) == 0);
        CHECK(a->type == b->type && a->n_dims == b->n_dims && a->nbytes == b->nbytes);
        CHECK(memcmp(a->ne, b->ne, sizeof a->ne) == 0);
        CHECK(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
    }
    gguf_close(g);
out:
    gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = (gguf_file *)&sink; /* must be reset to NULL on failure */
    cd_errclear();
    if (gguf_parse(&f, data, size) != 0) {
        CHECK(f == NULL);
        CHECK(strcmp(cd_errmsg(), "unknown error") != 0);
        return 0;
    }
    check_file(f, data, size);
    round_trip(f);
    gguf_close(f);
    return 0;
}
