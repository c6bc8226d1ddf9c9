#include "kv/disk_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kv/disk_internal.h"
#include "kv/host_tier.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/key_encode.h"
#include "runtime/base/le_bytes.h"

#define MIB (1024.0 * 1024.0)
static const char magic[8] = {'C', 'I', 'N', 'D', 'E', 'R', 'K', 'V'};
enum { DTYPE_F16 = 1, TRAILER_BYTES = KV_DISK_MAC_BYTES };

void kv_disk_say(kv_disk_tier *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->last_msg, sizeof d->last_msg, fmt, ap);
    va_end(ap);
    if (!d->quiet) fprintf(stderr, "cinder: cache-dir: %s\n", d->last_msg);
}

/* ---- the files' times: a chunk's mtime is when it was last used (the budget's LRU order) ---- */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static struct timespec ts_of(int64_t ns) {
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
}

/* ---- the MAC: HMAC-SHA-256 under DIR/key ---- */

typedef struct mac {
    EVP_MAC *alg;
    EVP_MAC_CTX *ctx;
} mac;

static int mac_begin(const kv_disk_tier *d, mac *m) {
    *m = (mac){0};
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    if (!(m->alg = EVP_MAC_fetch(NULL, "HMAC", NULL)) || !(m->ctx = EVP_MAC_CTX_new(m->alg)) ||
        !EVP_MAC_init(m->ctx, d->key, sizeof d->key, params)) {
        EVP_MAC_CTX_free(m->ctx);
        EVP_MAC_free(m->alg);
        return cd_fail("disk tier: HMAC-SHA-256 is not available");
    }
    return 0;
}

static void mac_update(mac *m, const void *p, size_t n) { EVP_MAC_update(m->ctx, p, n); }

/* Finishes into out (and frees); -1 if the library failed. */
static int mac_end(mac *m, uint8_t out[KV_DISK_MAC_BYTES]) {
    size_t len = 0;
    int ok = EVP_MAC_final(m->ctx, out, &len, KV_DISK_MAC_BYTES) && len == KV_DISK_MAC_BYTES;
    EVP_MAC_CTX_free(m->ctx);
    EVP_MAC_free(m->alg);
    return ok ? 0 : cd_fail("disk tier: HMAC-SHA-256 failed");
}

/* ---- keys ---- */

/* the one key encoding (runtime/base/key_encode.h) */
static void sha_put(void *c, const void *p, size_t n) { EVP_DigestUpdate(c, p, n); }
static void put_field(EVP_MD_CTX *c, const char *tag, const void *p, size_t n) { cd_key_field(sha_put, c, tag, p, n); }

int kv_disk_chain(const kv_disk_tier *d, const int32_t *ids, uint32_t n_chunks, uint8_t (*out)[KV_DISK_HASH_BYTES]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint8_t *le = malloc((size_t)d->chunk_tokens * 4);
    int rc = c && le ? 0 : cd_fail("disk tier: out of memory");
    uint8_t prev[KV_DISK_HASH_BYTES] = {0};
    for (uint32_t k = 0; !rc && k < n_chunks; k++) {
        const int32_t *t = ids + (size_t)k * d->chunk_tokens;
        for (uint32_t i = 0; i < d->chunk_tokens; i++) cd_put_le32(le + 4 * i, (uint32_t)t[i]);
        unsigned len = 0;
        if (!EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
            rc = cd_fail("disk tier: SHA-256 is not available");
            break;
        }
        put_field(c, "domain", "cinder.kv-chunk.v1", 18);
        put_field(c, "namespace", d->ns, KV_DISK_HASH_BYTES);
        put_field(c, "prev", prev, KV_DISK_HASH_BYTES);
        put_field(c, "tokens", le, (size_t)d->chunk_tokens * 4);
        if (!EVP_DigestFinal_ex(c, out[k], &len) || len != KV_DISK_HASH_BYTES)
            rc = cd_fail("disk tier: SHA-256 failed");
        memcpy(prev, out[k], KV_DISK_HASH_BYTES);
    }
    EVP_MD_CTX_free(c);
    free(le);
    return rc;
}

uint64_t kv_disk_chunk_bytes(const kv_disk_tier *d) {
    return KV_DISK_HEADER_BYTES + (uint64_t)d->chunk_tokens * 4 + d->chunk_pages * d->lay.page_bytes + TRAILER_BYTES;
}

int kv_disk_init(kv_disk_tier *d, cvk_ctx *vk, const cvk_buffer *pool, const kv_layout *lay,
                 const uint8_t ns[KV_DISK_HASH_BYTES], const char *dir, uint32_t chunk_pages, uint64_t max_bytes) {
    *d = (kv_disk_tier){
        .vk = vk, .pool = pool, .lay = *lay, .dir_fd = -1, .top_fd = -1, .stamp = 1, .keep_from = UINT64_MAX};
    kv_disk_index_free(&d->index); /* the empty index */
    memcpy(d->ns, ns, KV_DISK_HASH_BYTES);
    if (!dir || !*dir) return cd_fail("--cache-dir: empty path");
    if (!lay->page_bytes || (vk && pool->size % lay->page_bytes))
        return cd_fail("disk tier: the pool is not whole pages of %llu bytes", (unsigned long long)lay->page_bytes);
    if (!chunk_pages) chunk_pages = KV_DISK_CHUNK_TOKENS_DEFAULT / lay->page_tokens;
    if (!chunk_pages) chunk_pages = 1;
    if (chunk_pages > 4096 || (uint64_t)chunk_pages * lay->page_tokens > (1u << 16))
        return cd_fail("disk tier: a chunk of %u pages of %u tokens is too large", chunk_pages, lay->page_tokens);
    d->chunk_pages = chunk_pages;
    d->chunk_tokens = chunk_pages * lay->page_tokens;
    char nsx[2 * KV_DISK_HASH_BYTES + 1];
    kv_disk_hex(ns, KV_DISK_HASH_BYTES, nsx);
    size_t len = strlen(dir) + 1 + sizeof nsx;
    d->dir = malloc(len);
    d->tokens = malloc((size_t)d->chunk_tokens * sizeof *d->tokens);
    d->slot_ids = malloc((size_t)chunk_pages * sizeof *d->slot_ids);
    if (!d->dir || !d->tokens || !d->slot_ids) {
        kv_disk_free(d);
        return cd_fail("disk tier: out of memory");
    }
    for (uint32_t i = 0; i < chunk_pages; i++) d->slot_ids[i] = i;
    snprintf(d->dir, len, "%s/%s", dir, nsx);
    if (kv_disk_open_dirs(d, dir, nsx)) {
        kv_disk_free(d);
        return -1;
    }
    kv_disk_remove_stale_tmp(d);
    if (kv_disk_index_ns(&d->index, nsx) != 0 || kv_disk_set_budget(d, max_bytes) || kv_disk_rescan(d) ||
        kv_disk_fault_env(d)) {
        if (!d->index.n_ns) cd_fail("disk tier: out of memory");
        kv_disk_free(d);
        return -1;
    }
    uint64_t bytes = (uint64_t)chunk_pages * lay->page_bytes;
    if (!vk) { /* no device: the staging slots in host memory */
        if (!(d->host_stage = calloc(1, bytes))) {
            kv_disk_free(d);
            return cd_fail("disk tier: out of memory");
        }
        return 0;
    }
    if (cvk_buffer_create(&vk->mem, &d->stage, bytes, lay->page_bytes, CVK_MEM_READBACK)) {
        cd_fail_ctx("disk tier: cannot allocate a %.1f MiB staging buffer: ", bytes / MIB);
        kv_disk_free(d);
        return -1;
    }
    if (!d->stage.host_visible) {
        kv_disk_free(d);
        return cd_fail("disk tier: the device gave no host-visible memory for %.1f MiB of staging", bytes / MIB);
    }
    if (cvk_cmd_init(&d->cmd, &vk->dev, false)) {
        kv_disk_free(d);
        return -1;
    }
    return 0;
}

void kv_disk_free(kv_disk_tier *d) {
    if (d->cmd.dev) cvk_cmd_free(&d->cmd);
    if (d->vk) cvk_buffer_destroy(&d->vk->mem, &d->stage);
    if (d->dir && d->dir_fd >= 0) close(d->dir_fd);
    if (d->dir && d->top_fd >= 0) close(d->top_fd);
    free(d->dir);
    free(d->tokens);
    free(d->slot_ids);
    free(d->host_stage);
    kv_disk_index_free(&d->index);
    kv_disk_set_free(&d->stale);
    OPENSSL_cleanse(d->key, sizeof d->key);
    memset(d, 0, sizeof *d);
}

/* ---- reading ---- */

void *kv_disk_stage_ptr(const kv_disk_tier *d, uint32_t i) {
    if (i >= d->chunk_pages) return NULL;
    if (!d->vk) return d->host_stage ? d->host_stage + (size_t)i * d->lay.page_bytes : NULL;
    return kv_slot_ptr(&d->stage, d->lay.page_bytes, i);
}

/* 0: n bytes read; 1: the file ended first; -1: a read error (errno). */
static int read_full(kv_disk_tier *d, int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = kv_disk_io_read(d, fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void make_header(const kv_disk_tier *d, uint32_t k, const uint8_t *prev, const uint8_t *h, uint8_t *hd) {
    memset(hd, 0, KV_DISK_HEADER_BYTES);
    memcpy(hd, magic, 8);
    cd_put_le32(hd + 8, KV_DISK_VERSION);
    cd_put_le32(hd + 12, KV_DISK_HEADER_BYTES);
    memcpy(hd + 16, d->ns, KV_DISK_HASH_BYTES);
    cd_put_le32(hd + 48, d->lay.n_layer);
    cd_put_le32(hd + 52, d->lay.n_head_kv);
    cd_put_le32(hd + 56, d->lay.head_dim);
    cd_put_le32(hd + 60, d->lay.page_tokens);
    cd_put_le32(hd + 64, DTYPE_F16);
    cd_put_le32(hd + 68, d->chunk_pages);
    cd_put_le64(hd + 72, d->lay.page_bytes);
    cd_put_le32(hd + 80, k);
    cd_put_le32(hd + 84, d->chunk_tokens);
    memcpy(hd + 88, prev, KV_DISK_HASH_BYTES);
    memcpy(hd + 120, h, KV_DISK_HASH_BYTES);
}

/* The header's problem, or NULL: checked field by field before anything is sized from it.
 * *skip: the file may be good for another build (another format version): leave it. */
static const char *check_header(const kv_disk_tier *d, const uint8_t *hd, uint32_t k, char *why, size_t cap,
                                bool *skip) {
    if (memcmp(hd, magic, 8)) return "bad header (not a cinder KV chunk: wrong magic)";
    if (cd_get_le32(hd + 8) != KV_DISK_VERSION) {
        snprintf(why, cap, "bad header (format version %u, this build reads %u)", cd_get_le32(hd + 8), KV_DISK_VERSION);
        *skip = true;
        return why;
    }
    if (cd_get_le32(hd + 12) != KV_DISK_HEADER_BYTES) return "bad header (header size)";
    if (memcmp(hd + 16, d->ns, KV_DISK_HASH_BYTES)) {
        char theirs[17], ours[17];
        kv_disk_hex(hd + 16, 8, theirs);
        kv_disk_hex(d->ns, 8, ours);
        snprintf(why, cap, "written for another model or config (namespace %s..., ours %s...), ignored", theirs, ours);
        return why;
    }
    if (cd_get_le32(hd + 48) != d->lay.n_layer || cd_get_le32(hd + 52) != d->lay.n_head_kv ||
        cd_get_le32(hd + 56) != d->lay.head_dim || cd_get_le32(hd + 60) != d->lay.page_tokens ||
        cd_get_le32(hd + 64) != DTYPE_F16 || cd_get_le32(hd + 68) != d->chunk_pages ||
        cd_get_le64(hd + 72) != d->lay.page_bytes || cd_get_le32(hd + 84) != d->chunk_tokens) {
        snprintf(why, cap,
                 "bad header (KV layout %u layers, %u kv heads, head_dim %u, %u tokens/page, dtype %u, %u pages/chunk, "
                 "%llu bytes/page, %u tokens; ours %u, %u, %u, %u, %u, %u, %llu, %u)",
                 cd_get_le32(hd + 48), cd_get_le32(hd + 52), cd_get_le32(hd + 56), cd_get_le32(hd + 60),
                 cd_get_le32(hd + 64), cd_get_le32(hd + 68), (unsigned long long)cd_get_le64(hd + 72),
                 cd_get_le32(hd + 84), d->lay.n_layer, d->lay.n_head_kv, d->lay.head_dim, d->lay.page_tokens, DTYPE_F16,
                 d->chunk_pages, (unsigned long long)d->lay.page_bytes, d->chunk_tokens);
        return why;
    }
    if (cd_get_le32(hd + 80) != k) {
        snprintf(why, cap, "bad header (chunk %u, expected %u)", cd_get_le32(hd + 80), k);
        return why;
    }
    for (int i = 152; i < (int)KV_DISK_HEADER_BYTES; i++)
        if (hd[i]) return "bad header (reserved bytes not zero)";
    return NULL;
}

/* A bad file: never served; removed unless it may be good for someone else or later (skip). */
static void reject(kv_disk_tier *d, const char *path, const uint8_t h[KV_DISK_HASH_BYTES], const char *why, bool skip) {
    if (skip) {
        kv_disk_say(d, "%s: %s; skipped, recomputing", path, why);
        kv_disk_set_add(&d->stale, h); /* write-through replaces it instead of trusting the name */
    } else {
        kv_disk_say(d, "%s: %s; removed, recomputing", path, why);
        char name[NAME_CAP];
        kv_disk_chunk_name(h, name);
        unlinkat(d->dir_fd, name, 0);
        uint32_t i = kv_disk_index_find(&d->index, h);
        if (i != KV_DISK_NONE) kv_disk_index_remove(&d->index, i);
    }
    d->rejected++;
}

/* Reads the open chunk file fd of chain hash h (k, prev: its place) into the staging buffer
 * and checks it; NULL, or the problem (*skip: leave the file). */
static const char *read_chunk(kv_disk_tier *d, int fd, const int32_t *tokens, uint32_t k, const uint8_t *prev,
                              const uint8_t *h, char *why, size_t cap, bool *skip) {
    uint8_t hd[KV_DISK_HEADER_BYTES], sum[TRAILER_BYTES], want_sum[TRAILER_BYTES];
    struct stat st;
    uint64_t pb = d->lay.page_bytes;
    uint64_t want = KV_DISK_HEADER_BYTES + (uint64_t)d->chunk_tokens * 4 + d->chunk_pages * pb + TRAILER_BYTES;
    if (fstat(fd, &st)) return *skip = true, "cannot stat";
    if (!S_ISREG(st.st_mode)) return *skip = true, "not a regular file"; /* a FIFO is never read */
    if ((uint64_t)st.st_size < KV_DISK_HEADER_BYTES) return "truncated (no whole header)";
    int r = read_full(d, fd, hd, sizeof hd);
    if (r) return *skip = r < 0, r < 0 ? "read error" : "truncated (no whole header)";
    const char *bad = check_header(d, hd, k, why, cap, skip);
    if (bad) return bad;
    if ((uint64_t)st.st_size != want) {
        snprintf(why, cap, "%s (%llu bytes, a chunk of this layout is %llu)",
                 (uint64_t)st.st_size < want ? "truncated" : "bad size", (unsigned long long)st.st_size,
                 (unsigned long long)want);
        return why;
    }
    /* sizes are ours from here on: the header matched our layout field by field */
    kv_disk_fault_arm(d, KV_FAULT_READ, (uint64_t)d->chunk_tokens * 4 + pb / 2);
    mac m;
    if (mac_begin(d, &m)) return *skip = true, "HMAC-SHA-256 is not available";
    mac_update(&m, hd, sizeof hd);
    uint8_t *le = (uint8_t *)d->tokens; /* read as bytes, decoded in place below */
    r = read_full(d, fd, le, (size_t)d->chunk_tokens * 4);
    if (!r) mac_update(&m, le, (size_t)d->chunk_tokens * 4);
    for (uint32_t i = 0; !r && i < d->chunk_pages; i++) {
        void *p = kv_disk_stage_ptr(d, i);
        if (!p) r = -1;
        else if (!(r = read_full(d, fd, p, pb))) mac_update(&m, p, pb);
    }
    if (!r) r = read_full(d, fd, sum, sizeof sum);
    if (mac_end(&m, want_sum) && !r) return *skip = true, "HMAC-SHA-256 failed";
    if (r) return *skip = r < 0, r < 0 ? "read error" : "truncated (read failed)";
    if (CRYPTO_memcmp(sum, want_sum, sizeof sum))
        return "corrupt or forged (MAC mismatch: not written with this directory's key)";
    for (uint32_t i = 0; i < d->chunk_tokens; i++) d->tokens[i] = (int32_t)cd_get_le32(le + 4 * i);
    if (memcmp(d->tokens, tokens, (size_t)d->chunk_tokens * sizeof *tokens))
        return "its tokens differ from the prompt's (a hash collision or a forged file)";
    if (memcmp(hd + 88, prev, KV_DISK_HASH_BYTES) || memcmp(hd + 120, h, KV_DISK_HASH_BYTES))
        return "bad header (chain hash differs from its name)";
    return NULL;
}

int kv_disk_read(kv_disk_tier *d, const int32_t *tokens, uint32_t k, const uint8_t prev[KV_DISK_HASH_BYTES],
                 const uint8_t h[KV_DISK_HASH_BYTES]) {
    char path[4096], name[NAME_CAP], why[512];
    kv_disk_path(d, h, path, sizeof path);
    kv_disk_chunk_name(h, name);
    double t0 = cd_now_ms();
    int fd = openat(d->dir_fd, name, OPEN_READ);
    if (fd < 0) {
        if (errno == ENOENT) { /* never written, or removed (maybe by another process) */
            uint32_t i = kv_disk_index_find(&d->index, h);
            if (i != KV_DISK_NONE) kv_disk_index_remove(&d->index, i);
            return 0;
        }
        snprintf(why, sizeof why, "%s", errno == ELOOP ? "a symbolic link, not followed" : strerror(errno));
        reject(d, path, h, why, true);
        return 0;
    }
    bool skip = false;
    const char *bad = read_chunk(d, fd, tokens, k, prev, h, why, sizeof why, &skip);
    kv_disk_fault_disarm(d);
    if (!bad) { /* a use: the newest in our index, and in another process's scan (mtime) */
        int64_t now = now_ns();
        struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, ts_of(now)};
        (void)futimens(fd, ts);
        uint32_t i = kv_disk_index_find(&d->index, h);
        if (i != KV_DISK_NONE) kv_disk_index_touch(&d->index, i, now, d->stamp++);
        else kv_disk_index_add(&d->index, 0, KV_DISK_VERSION, h, kv_disk_chunk_bytes(d), now, d->stamp++);
    }
    close(fd);
    if (bad) {
        reject(d, path, h, bad, skip);
        return 0;
    }
    d->ms_read += cd_now_ms() - t0;
    d->bytes_read += kv_disk_chunk_bytes(d);
    return 1;
}

int kv_disk_upload(kv_disk_tier *d, uint32_t first, const uint32_t *gpu_pages, uint32_t n) {
    if ((uint64_t)first + n > d->chunk_pages)
        return cd_fail("disk tier: pages %u + %u of a %u-page chunk", first, n, d->chunk_pages);
    if (!d->vk) return cd_fail("disk tier: no device to upload to");
    double t0 = cd_now_ms();
    if (kv_copy_pages(&d->cmd, d->pool, &d->stage, d->lay.page_bytes, gpu_pages, d->slot_ids + first, n,
                      KV_HOST_RESTORE))
        return cd_fail_ctx("disk tier: ");
    d->ms_read += cd_now_ms() - t0;
    d->chunks_read++;
    return 0;
}

/* ---- writing ---- */

static int write_full(kv_disk_tier *d, int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = kv_disk_io_write(d, fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        if (w == 0) return errno = ENOSPC, -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Header, tokens, staged pages and their MAC into fd; 0, or -1 with errno (-2: the MAC failed,
 * cd_errmsg). */
static int write_chunk(kv_disk_tier *d, int fd, const int32_t *tokens, uint32_t k, const uint8_t *prev,
                       const uint8_t *h) {
    uint8_t hd[KV_DISK_HEADER_BYTES], sum[TRAILER_BYTES];
    uint64_t pb = d->lay.page_bytes;
    make_header(d, k, prev, h, hd);
    uint8_t *le = (uint8_t *)d->tokens;
    for (uint32_t i = 0; i < d->chunk_tokens; i++) cd_put_le32(le + 4 * i, (uint32_t)tokens[i]);
    mac m;
    if (mac_begin(d, &m)) return -2;
    kv_disk_fault_arm(d, KV_FAULT_WRITE, KV_DISK_HEADER_BYTES + (uint64_t)d->chunk_tokens * 4 + pb / 2);
    mac_update(&m, hd, sizeof hd);
    mac_update(&m, le, (size_t)d->chunk_tokens * 4);
    bool ok = !write_full(d, fd, hd, sizeof hd) && !write_full(d, fd, le, (size_t)d->chunk_tokens * 4);
    for (uint32_t i = 0; ok && i < d->chunk_pages; i++) {
        const void *p = kv_disk_stage_ptr(d, i);
        if (!p) errno = EFAULT;
        ok = p && !write_full(d, fd, p, pb);
        if (ok) mac_update(&m, p, pb);
    }
    int e = errno;
    if (mac_end(&m, sum)) return -2;
    if (!ok) return errno = e, -1;
    return write_full(d, fd, sum, sizeof sum);
}

static int store_failed(kv_disk_tier *d, const char *path, int e) {
    kv_disk_say(d, "%s: cannot write: %s; the chunk stays uncached on disk", path, strerror(e));
    d->write_errors++;
    return 0;
}

/* A chunk the budget cannot hold: counted, one line the first time. */
static int over_budget(kv_disk_tier *d, const char *path, uint64_t size) {
    d->over_budget++;
    snprintf(
        d->last_msg, sizeof d->last_msg,
        "%s: a chunk of %llu bytes does not fit the budget of %llu bytes (--cache-dir-max-mb)%s; it and the rest of "
        "the prompt stay uncached on disk (said once, counted each time)",
        path, (unsigned long long)size, (unsigned long long)d->max_bytes,
        size > d->max_bytes ? "" : " beside the prompt's earlier chunks");
    if (!d->said_over_budget) fprintf(stderr, "cinder: cache-dir: %s\n", d->last_msg);
    d->said_over_budget = true;
    return 0;
}

/* Whether chunk h is on disk already (written earlier by this process or another; checked when
 * read), refreshing its last use: the write-through of a prefix is a use of its chunks. */
static bool already_there(kv_disk_tier *d, const uint8_t *h, const char *name) {
    if (kv_disk_set_has(&d->stale, h)) return false; /* a skipped file: replaced, not trusted */
    int64_t now = now_ns();
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, ts_of(now)};
    uint32_t i = kv_disk_index_find(&d->index, h);
    if (i != KV_DISK_NONE) {
        if (utimensat(d->dir_fd, name, ts, AT_SYMLINK_NOFOLLOW) && errno == ENOENT) {
            kv_disk_index_remove(&d->index, i); /* removed under us (another process's budget) */
            return false;
        }
        kv_disk_index_touch(&d->index, i, now, d->stamp++);
        return true;
    }
    struct stat st;
    if (fstatat(d->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) return false;
    (void)utimensat(d->dir_fd, name, ts, AT_SYMLINK_NOFOLLOW);
    kv_disk_index_add(&d->index, 0, KV_DISK_VERSION, h, (uint64_t)st.st_size, now, d->stamp++);
    return true;
}

int kv_disk_store(kv_disk_tier *d, const int32_t *tokens, uint32_t k, const uint8_t prev[KV_DISK_HASH_BYTES],
                  const uint8_t h[KV_DISK_HASH_BYTES], const uint32_t *gpu_pages) {
    char path[4096], name[NAME_CAP], tmp[NAME_CAP + 64];
    kv_disk_path(d, h, path, sizeof path);
    kv_disk_chunk_name(h, name);
    if (already_there(d, h, name)) return 0;
    double t0 = cd_now_ms();
    uint64_t size = kv_disk_chunk_bytes(d);
    if (size > d->max_bytes) return over_budget(d, path, size);
    if (cd_now_ms() - d->scan_ms >= KV_DISK_RESCAN_MS && kv_disk_rescan(d)) return -1;
    int room = kv_disk_make_room(d, size);
    if (room < 0) return d->write_errors++, 0;
    if (!room) return over_budget(d, path, size);
    /* the file and its space first: a full disk or a read-only directory costs no GPU copy */
    int fd = kv_disk_open_tmp(d, d->dir_fd, name, tmp, sizeof tmp);
    if (fd < 0) return store_failed(d, path, errno);
    int e = posix_fallocate(fd, 0, (off_t)size);
    if (e && e != EINVAL && e != EOPNOTSUPP) {
        close(fd);
        unlinkat(d->dir_fd, tmp, 0);
        return store_failed(d, path, e);
    }
    d->downloads += d->vk != NULL;
    if (d->vk &&
        kv_copy_pages(&d->cmd, d->pool, &d->stage, d->lay.page_bytes, gpu_pages, d->slot_ids, d->chunk_pages,
                      KV_HOST_DEMOTE)) {
        close(fd);
        unlinkat(d->dir_fd, tmp, 0);
        return cd_fail_ctx("disk tier: ");
    }
    /* durable before it is named: fsync the file, rename, fsync the directory; its mtime is
     * its last use (the budget's order) */
    int rc = write_chunk(d, fd, tokens, k, prev, h);
    e = errno;
    kv_disk_fault_disarm(d);
    int64_t now = now_ns();
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, ts_of(now)};
    if (!rc) (void)futimens(fd, ts);
    if (!rc && (kv_disk_fault_next(d, KV_FAULT_FSYNC) >= 0 ? (errno = EIO, 1) : fsync(fd))) rc = -1, e = errno;
    if (close(fd) && !rc) rc = -1, e = errno;
    if (!rc &&
        (kv_disk_fault_next(d, KV_FAULT_RENAME) >= 0 ? (errno = EIO, 1) : renameat(d->dir_fd, tmp, d->dir_fd, name)))
        rc = -1, e = errno;
    if (rc) {
        unlinkat(d->dir_fd, tmp, 0);
        return rc == -2 ? -1 : store_failed(d, path, e);
    }
    /* the rename is trusted once the directory is synced; a name that may not survive a crash is
     * taken back (EINVAL: this file system cannot sync a directory, nothing to wait for) */
    if ((kv_disk_fault_next(d, KV_FAULT_DIRSYNC) >= 0 ? (errno = EIO, -1) : fsync(d->dir_fd)) && errno != EINVAL) {
        e = errno;
        unlinkat(d->dir_fd, name, 0);
        kv_disk_say(d, "%s: cannot sync its directory: %s; removed, the chunk stays uncached on disk", path,
                    strerror(e));
        d->write_errors++;
        return 0;
    }
    kv_disk_set_remove(&d->stale, h);
    kv_disk_index_add(&d->index, 0, KV_DISK_VERSION, h, size, now, d->stamp++);
    d->chunks_written++;
    d->bytes_written += size;
    d->ms_write += cd_now_ms() - t0;
    return 1;
}

int kv_disk_store_chunks(kv_disk_tier *d, const int32_t *ids, uint32_t n_chunks, uint8_t (*h)[KV_DISK_HASH_BYTES],
                         const uint32_t *gpu_pages) {
    static const uint8_t zero[KV_DISK_HASH_BYTES]; /* h_-1 */
    uint64_t err0 = d->write_errors, over0 = d->over_budget;
    d->keep_from = d->stamp; /* the chunks this write-through uses or writes are never its victims */
    int rc = 0;
    for (uint32_t c = 0; !rc && c < n_chunks && d->write_errors == err0 && d->over_budget == over0; c++)
        if (kv_disk_store(d, ids + (size_t)c * d->chunk_tokens, c, c ? h[c - 1] : zero, h[c],
                          gpu_pages + (size_t)c * d->chunk_pages) < 0)
            rc = -1;
    d->keep_from = UINT64_MAX;
    return rc;
}
