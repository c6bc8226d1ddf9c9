/* Split models (gguf.h, "split models"): the first shard opens the rest, by name, and every
 * shard is checked against the first before any is joined:
 *   1. the first's split.count (absent, 0 or 1: one file) and split.no (0, else "open the first");
 *   2. its name ends in -00001-of-0000N.gguf (how the others are found);
 *   3. each other shard i opens, says split.count N, split.no i and the same split.tensors.count;
 *   4. the tensors of all add up to split.tensors.count; no name twice (gguf_join_shards).
 * llama.cpp's loader checks 1, 2, split.no of 3 and 4; the rest catches shards of two different
 * cuts of one model mixed in one folder. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "runtime/gguf/gguf_join.h"

#define SPLIT_SUFFIX "-%05" PRIu32 "-of-%05" PRIu32 ".gguf"

typedef struct split_keys {
    uint32_t no, count; /* count 1 when the file has no split.count */
    bool has_tensors;
    uint64_t n_tensors; /* split.tensors.count */
} split_keys;

int gguf_split_path(char *buf, size_t cap, const char *prefix, uint32_t no, uint32_t count) {
    int n = snprintf(buf, cap, "%s" SPLIT_SUFFIX, prefix, no + 1, count);
    return n >= 0 && (size_t)n < cap ? 0 : cd_fail("split file name too long");
}

/* The length of path's prefix when it ends in shard no's suffix, else 0. */
static size_t split_prefix_len(const char *path, uint32_t no, uint32_t count) {
    char suffix[48];
    snprintf(suffix, sizeof suffix, SPLIT_SUFFIX, no + 1, count);
    size_t n = strlen(path), k = strlen(suffix);
    return n > k && strcmp(path + n - k, suffix) == 0 ? n - k : 0;
}

static int read_keys(const gguf_file *f, split_keys *k) {
    *k = (split_keys){.count = 1};
    if (!gguf_find_kv(f, GGUF_KEY_SPLIT_COUNT)) return 0;
    if (gguf_get_u32(f, GGUF_KEY_SPLIT_COUNT, &k->count)) return -1;
    if (k->count == 0) k->count = 1; /* gguf-split --merge writes 0 into the merged file */
    if (k->count > GGUF_SPLIT_MAX)
        return cd_fail(GGUF_KEY_SPLIT_COUNT " is %" PRIu32 " (at most %d)", k->count, GGUF_SPLIT_MAX);
    if (gguf_find_kv(f, GGUF_KEY_SPLIT_NO) && gguf_get_u32(f, GGUF_KEY_SPLIT_NO, &k->no)) return -1;
    if (k->no >= k->count)
        return cd_fail(GGUF_KEY_SPLIT_NO " %" PRIu32 " is past " GGUF_KEY_SPLIT_COUNT " %" PRIu32, k->no, k->count);
    k->has_tensors = gguf_find_kv(f, GGUF_KEY_SPLIT_TENSORS) != NULL;
    return k->has_tensors ? gguf_get_u64(f, GGUF_KEY_SPLIT_TENSORS, &k->n_tensors) : 0;
}

/* A later shard: "this is not the first", naming the first when the name says where it is. */
static int not_first(const char *path, const split_keys *k) {
    size_t n = split_prefix_len(path, k->no, k->count);
    char first[4096];
    if (n && n < sizeof first - 32) {
        snprintf(first, sizeof first, "%.*s", (int)n, path);
        char name[4096 + 32];
        gguf_split_path(name, sizeof name, first, 0, k->count);
        return cd_fail("shard %" PRIu32 " of %" PRIu32 " of a split model: open the first shard, %s", k->no + 1,
                       k->count, name);
    }
    return cd_fail("shard %" PRIu32 " of %" PRIu32 " of a split model (split.no %" PRIu32 "): open the first shard",
                   k->no + 1, k->count, k->no);
}

/* Shard `no` of the model whose first shard says *first. */
static int open_shard(gguf_file **out, const char *path, uint32_t no, const split_keys *first) {
    split_keys k;
    if (gguf_open_file(out, path) || read_keys(*out, &k)) goto fail;
    if (!gguf_find_kv(*out, GGUF_KEY_SPLIT_COUNT)) {
        cd_fail("has no " GGUF_KEY_SPLIT_COUNT ": not a shard of this model");
    } else if (k.count != first->count) {
        cd_fail(GGUF_KEY_SPLIT_COUNT " is %" PRIu32 ", the first shard's %" PRIu32 ": a shard of another split",
                k.count, first->count);
    } else if (k.no != no) {
        cd_fail(GGUF_KEY_SPLIT_NO " is %" PRIu32 " but its name makes it shard %" PRIu32 " (split.no %" PRIu32 ")",
                k.no, no + 1, no);
    } else if (k.has_tensors && k.n_tensors != first->n_tensors) {
        cd_fail(GGUF_KEY_SPLIT_TENSORS " is %" PRIu64 ", the first shard's %" PRIu64 ": a shard of another split",
                k.n_tensors, first->n_tensors);
    } else {
        return 0;
    }
fail:
    gguf_close(*out);
    *out = NULL;
    return cd_fail_ctx("shard %" PRIu32 " of %" PRIu32 ", %s: ", no + 1, first->count, path);
}

/* Shards 1 .. count-1 next to the first (at path), checked and joined to it. */
static int open_rest(gguf_file *f, const char *path, const split_keys *k) {
    size_t n = split_prefix_len(path, 0, k->count);
    if (!n)
        return cd_fail(GGUF_KEY_SPLIT_COUNT " is %" PRIu32 " but the name does not end in -00001-of-%05" PRIu32
                                            ".gguf, so the other shards cannot be found (keep gguf-split's names)",
                       k->count, k->count);
    if (!k->has_tensors) return cd_fail("a split model's first shard without " GGUF_KEY_SPLIT_TENSORS);
    size_t cap = n + 32;
    gguf_file **rest = calloc(k->count, sizeof *rest);
    char **paths = calloc(k->count, sizeof *paths);
    char *prefix = malloc(n + 1);
    int rc = rest && paths && prefix ? 0 : cd_fail("out of memory");
    if (rc == 0) snprintf(prefix, n + 1, "%s", path);
    uint64_t total = f->n_tensors;
    uint32_t opened = 0;
    for (uint32_t i = 0; rc == 0 && i < k->count; i++) {
        rc = (paths[i] = malloc(cap)) ? gguf_split_path(paths[i], cap, prefix, i, k->count) : cd_fail("out of memory");
        if (rc == 0 && i > 0 && (rc = open_shard(&rest[i - 1], paths[i], i, k)) == 0) {
            opened = i;
            total += rest[i - 1]->n_tensors;
        }
    }
    if (rc == 0 && total != k->n_tensors)
        rc = cd_fail("the %" PRIu32 " shards hold %" PRIu64 " tensors, " GGUF_KEY_SPLIT_TENSORS " says %" PRIu64,
                     k->count, total, k->n_tensors);
    if (rc == 0) {
        rc = gguf_join_shards(f, rest, k->count - 1, (const char *const *)paths);
    } else {
        for (uint32_t i = 0; i < opened; i++) gguf_close(rest[i]);
    }
    for (uint32_t i = 0; paths && i < k->count; i++) free(paths[i]);
    free(paths);
    free(rest);
    free(prefix);
    return rc;
}

int gguf_open(gguf_file **out, const char *path) {
    split_keys k;
    if (gguf_open_file(out, path)) return -1;
    int rc = read_keys(*out, &k);
    if (rc == 0 && k.no != 0) rc = not_first(path, &k);
    if (rc == 0 && k.count == 1 && k.has_tensors && k.n_tensors != (*out)->n_tensors)
        rc = cd_fail(GGUF_KEY_SPLIT_TENSORS " is %" PRIu64 " but the file has %" PRIu64 " tensors", k.n_tensors,
                     (*out)->n_tensors);
    if (rc == 0 && k.count > 1) rc = open_rest(*out, path, &k);
    if (rc) {
        gguf_close(*out);
        *out = NULL;
    }
    return rc;
}
