/* libFuzzer target for split models (runtime/gguf/gguf_split.c: shards found by name, checked
 * against the first, joined).
 *
 * An input is up to four shards separated by the marker "SHRD": piece k is written as
 * m-0000k-of-0000n.gguf (n pieces) in a scratch directory and the first is opened with
 * gguf_open. It must fail with a message, or give a model that is the sum of its shards: one
 * shard (the first alone) or all n; every tensor found by name, from the shard it says, with
 * the same size and bytes as that shard read on its own (gguf_open_file); the tensor counts
 * and the bytes on disk add up. Any violation aborts. Run with scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "tests/fuzz/fuzz_util.h"

#define CHECK(cond) FUZZ_CHECK("fuzz_gguf_split", cond)
#define MAX_SHARDS 4
#define MARKER "SHRD"

static volatile uint8_t sink;
static char dir[64];

static bool cstr(gguf_str s, char *out, size_t cap) {
    if (s.len >= cap || memchr(s.ptr, 0, s.len)) return false;
    memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return true;
}

/* Cuts the input at each marker (at most MAX_SHARDS pieces) and writes the pieces as shards. */
static uint32_t write_shards(const uint8_t *data, size_t size, uint64_t *bytes) {
    const uint8_t *p = data, *end = data + size;
    uint32_t n = 0;
    const uint8_t *starts[MAX_SHARDS];
    size_t lens[MAX_SHARDS];
    while (n < MAX_SHARDS) {
        const uint8_t *m = n + 1 < MAX_SHARDS ? memmem(p, (size_t)(end - p), MARKER, 4) : NULL;
        starts[n] = p;
        lens[n] = m ? (size_t)(m - p) : (size_t)(end - p);
        n++;
        if (!m) break;
        p = m + 4;
    }
    *bytes = 0;
    char prefix[80], path[128];
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    for (uint32_t i = 0; i < MAX_SHARDS; i++) { /* the last run's extra shards must not linger */
        for (uint32_t c = 1; c <= MAX_SHARDS; c++) {
            gguf_split_path(path, sizeof path, prefix, i, c);
            if (c != n || i >= n) unlink(path);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        gguf_split_path(path, sizeof path, prefix, i, n);
        FILE *f = fopen(path, "wb");
        CHECK(f);
        CHECK(fwrite(starts[i], 1, lens[i], f) == lens[i]);
        CHECK(fclose(f) == 0);
        *bytes += lens[i];
    }
    return n;
}

/* Every tensor of the model is the tensor of that name in its shard read alone. */
static void check_model(const gguf_file *f, uint32_t n, uint64_t bytes) {
    CHECK(f->n_shards == 1 || f->n_shards == n);
    if (f->n_shards == n) CHECK(f->disk_bytes == bytes);
    char prefix[80], path[128], name[256];
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    uint64_t total = 0;
    for (uint32_t s = 0; s < f->n_shards; s++) {
        gguf_split_path(path, sizeof path, prefix, s, n);
        gguf_file *one;
        CHECK(gguf_open_file(&one, path) == 0);
        total += one->n_tensors;
        for (uint64_t i = 0; i < one->n_tensors; i++) {
            const gguf_tensor *a = &one->tensors[i];
            if (!cstr(a->name, name, sizeof name)) continue;
            const gguf_tensor *b = gguf_find_tensor(f, name);
            CHECK(b && b->shard == s && b->type == a->type && b->nbytes == a->nbytes);
            CHECK(memcmp(a->ne, b->ne, sizeof a->ne) == 0);
            CHECK(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
            if (b->nbytes) sink ^= ((const uint8_t *)b->data)[b->nbytes - 1];
        }
        gguf_close(one);
    }
    CHECK(total == f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) CHECK(f->tensors[i].shard < f->n_shards);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/fuzz_gguf_split.%d", (int)getpid());
        mkdir(dir, 0700);
    }
    uint64_t bytes;
    uint32_t n = write_shards(data, size, &bytes);
    char path[128];
    snprintf(path, sizeof path, "%s/m-00001-of-%05u.gguf", dir, n);
    gguf_file *f = (gguf_file *)&sink; /* must be reset to NULL on failure */
    cd_errclear();
    if (gguf_open(&f, path) != 0) {
        CHECK(f == NULL);
        CHECK(strcmp(cd_errmsg(), "unknown error") != 0);
        return 0;
    }
    check_model(f, n, bytes);
    gguf_close(f);
    return 0;
}
