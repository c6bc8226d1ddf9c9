#include "kv/disk_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kv/host_tier.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"

#define MIB (1024.0 * 1024.0)
static const char magic[8] = {'C', 'I', 'N', 'D', 'E', 'R', 'K', 'V'};
enum { DTYPE_F16 = 1, TRAILER_BYTES = 16 };


static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void hex(const uint8_t *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = digits[b[i] >> 4], out[2 * i + 1] = digits[b[i] & 15];
    out[2 * n] = 0;
}

/* A message about a file: stderr and last_msg. */
static void say(kv_disk_tier *d, const char *fmt, ...) CD_PRINTF(2, 3);
static void say(kv_disk_tier *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->last_msg, sizeof d->last_msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cinder: cache-dir: %s\n", d->last_msg);
}

/* ---- the set of chain hashes known to be on disk ---- */

static uint32_t slot_of(const uint8_t h[KV_DISK_HASH_BYTES], uint32_t cap) {
    uint64_t v;
    memcpy(&v, h, sizeof v); /* a SHA-256: any 8 bytes are uniform */
    return (uint32_t)(v & (cap - 1));
}

static bool is_zero(const uint8_t *h) {
    for (int i = 0; i < KV_DISK_HASH_BYTES; i++)
        if (h[i]) return false;
    return true;
}

bool kv_disk_known(const kv_disk_tier *d, const uint8_t h[KV_DISK_HASH_BYTES]) {
    if (!d->cap_known) return false;
    for (uint32_t i = slot_of(h, d->cap_known);; i = (i + 1) & (d->cap_known - 1)) {
        if (is_zero(d->known[i])) return false;
        if (!memcmp(d->known[i], h, KV_DISK_HASH_BYTES)) return true;
    }
}

static void set_put(uint8_t (*tab)[KV_DISK_HASH_BYTES], uint32_t cap, const uint8_t *h) {
    uint32_t i = slot_of(h, cap);
    while (!is_zero(tab[i]) && memcmp(tab[i], h, KV_DISK_HASH_BYTES)) i = (i + 1) & (cap - 1);
    memcpy(tab[i], h, KV_DISK_HASH_BYTES);
}

/* Adds h (an all-zero hash is never a SHA-256 output worth keeping). Out of memory: the set
 * stays as it is (a chunk is then checked on disk again: slower, not wrong). */
static void known_add(kv_disk_tier *d, const uint8_t h[KV_DISK_HASH_BYTES]) {
    if (is_zero(h) || kv_disk_known(d, h)) return;
    if (2 * (d->n_known + 1) > d->cap_known) {
        uint32_t cap = d->cap_known ? 2 * d->cap_known : 256;
        uint8_t(*tab)[KV_DISK_HASH_BYTES] = calloc(cap, KV_DISK_HASH_BYTES);
        if (!tab) return;
        for (uint32_t i = 0; i < d->cap_known; i++)
            if (!is_zero(d->known[i])) set_put(tab, cap, d->known[i]);
        free(d->known);
        d->known = tab;
        d->cap_known = cap;
    }
    set_put(d->known, d->cap_known, h);
    d->n_known++;
}

static void known_remove(kv_disk_tier *d, const uint8_t h[KV_DISK_HASH_BYTES]) {
    if (!kv_disk_known(d, h)) return;
    /* rebuild without h (rare: only after a rejected file) */
    uint8_t(*tab)[KV_DISK_HASH_BYTES] = calloc(d->cap_known, KV_DISK_HASH_BYTES);
    if (!tab) return;
    for (uint32_t i = 0; i < d->cap_known; i++)
        if (!is_zero(d->known[i]) && memcmp(d->known[i], h, KV_DISK_HASH_BYTES)) set_put(tab, d->cap_known, d->known[i]);
    free(d->known);
    d->known = tab;
    d->n_known--;
}

/* ---- keys ---- */

static void put_field(EVP_MD_CTX *c, const char *tag, const void *p, size_t n) {
    uint8_t lens[2][8];
    put64(lens[0], strlen(tag));
    put64(lens[1], n);
    EVP_DigestUpdate(c, lens[0], 8);
    EVP_DigestUpdate(c, tag, strlen(tag));
    EVP_DigestUpdate(c, lens[1], 8);
    if (n) EVP_DigestUpdate(c, p, n);
}

int kv_disk_chain(const kv_disk_tier *d, const int32_t *ids, uint32_t n_chunks, uint8_t (*out)[KV_DISK_HASH_BYTES]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint8_t *le = malloc((size_t)d->chunk_tokens * 4);
    int rc = c && le ? 0 : cd_fail("disk tier: out of memory");
    uint8_t prev[KV_DISK_HASH_BYTES] = {0};
    for (uint32_t k = 0; !rc && k < n_chunks; k++) {
        const int32_t *t = ids + (size_t)k * d->chunk_tokens;
        for (uint32_t i = 0; i < d->chunk_tokens; i++) put32(le + 4 * i, (uint32_t)t[i]);
        unsigned len = 0;
        if (!EVP_DigestInit_ex(c, EVP_sha256(), NULL)) { rc = cd_fail("disk tier: SHA-256 is not available"); break; }
        put_field(c, "domain", "cinder.kv-chunk.v1", 18);
        put_field(c, "namespace", d->ns, KV_DISK_HASH_BYTES);
        put_field(c, "prev", prev, KV_DISK_HASH_BYTES);
        put_field(c, "tokens", le, (size_t)d->chunk_tokens * 4);
        if (!EVP_DigestFinal_ex(c, out[k], &len) || len != KV_DISK_HASH_BYTES) rc = cd_fail("disk tier: SHA-256 failed");
        memcpy(prev, out[k], KV_DISK_HASH_BYTES);
    }
    EVP_MD_CTX_free(c);
    free(le);
    return rc;
}

void kv_disk_path(const kv_disk_tier *d, const uint8_t h[KV_DISK_HASH_BYTES], char *path, size_t cap) {
    char hx[2 * KV_DISK_HASH_BYTES + 1];
    hex(h, KV_DISK_HASH_BYTES, hx);
    snprintf(path, cap, "%s/%s.kv", d->dir, hx);
}

/* ---- init ---- */

static int mkdir_p(const char *path) {
    char *p = strdup(path);
    if (!p) return cd_fail("out of memory");
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) { rc = cd_fail("--cache-dir: cannot create %s: %s", p, strerror(errno)); break; }
        *s = c;
        if (!c) break;
    }
    free(p);
    if (rc) return rc;
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) return cd_fail("--cache-dir: %s is not a directory", path);
    return 0;
}

int kv_disk_init(kv_disk_tier *d, cvk_ctx *vk, const cvk_buffer *pool, const kv_layout *lay,
                 const uint8_t ns[KV_DISK_HASH_BYTES], const char *dir, uint32_t chunk_pages) {
    *d = (kv_disk_tier){.vk = vk, .pool = pool, .lay = *lay};
    memcpy(d->ns, ns, KV_DISK_HASH_BYTES);
    if (!dir || !*dir) return cd_fail("--cache-dir: empty path");
    if (!lay->page_bytes || pool->size % lay->page_bytes)
        return cd_fail("disk tier: the pool is not whole pages of %llu bytes", (unsigned long long)lay->page_bytes);
    if (!chunk_pages) chunk_pages = KV_DISK_CHUNK_TOKENS_DEFAULT / lay->page_tokens;
    if (!chunk_pages) chunk_pages = 1;
    if (chunk_pages > 4096 || (uint64_t)chunk_pages * lay->page_tokens > (1u << 16))
        return cd_fail("disk tier: a chunk of %u pages of %u tokens is too large", chunk_pages, lay->page_tokens);
    d->chunk_pages = chunk_pages;
    d->chunk_tokens = chunk_pages * lay->page_tokens;
    char nsx[2 * KV_DISK_HASH_BYTES + 1];
    hex(ns, KV_DISK_HASH_BYTES, nsx);
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
    if (mkdir_p(d->dir)) {
        kv_disk_free(d);
        return -1;
    }
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/.probe.%ld", d->dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        int e = errno;
        kv_disk_free(d);
        return cd_fail("--cache-dir: %s is not writable: %s", dir, strerror(e));
    }
    close(fd);
    unlink(probe);
    uint64_t bytes = (uint64_t)chunk_pages * lay->page_bytes;
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
    free(d->dir);
    free(d->tokens);
    free(d->slot_ids);
    free(d->known);
    memset(d, 0, sizeof *d);
}

/* ---- reading ---- */

static int read_full(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void make_header(const kv_disk_tier *d, uint32_t k, const uint8_t *prev, const uint8_t *h, uint8_t *hd) {
    memset(hd, 0, KV_DISK_HEADER_BYTES);
    memcpy(hd, magic, 8);
    put32(hd + 8, KV_DISK_VERSION);
    put32(hd + 12, KV_DISK_HEADER_BYTES);
    memcpy(hd + 16, d->ns, KV_DISK_HASH_BYTES);
    put32(hd + 48, d->lay.n_layer);
    put32(hd + 52, d->lay.n_head_kv);
    put32(hd + 56, d->lay.head_dim);
    put32(hd + 60, d->lay.page_tokens);
    put32(hd + 64, DTYPE_F16);
    put32(hd + 68, d->chunk_pages);
    put64(hd + 72, d->lay.page_bytes);
    put32(hd + 80, k);
    put32(hd + 84, d->chunk_tokens);
    memcpy(hd + 88, prev, KV_DISK_HASH_BYTES);
    memcpy(hd + 120, h, KV_DISK_HASH_BYTES);
}

/* The header's problem, or NULL: checked field by field before anything is sized from it. */
static const char *check_header(const kv_disk_tier *d, const uint8_t *hd, uint32_t k, char *why, size_t cap) {
    if (memcmp(hd, magic, 8)) return "bad header (not a cinder KV chunk: wrong magic)";
    if (get32(hd + 8) != KV_DISK_VERSION) {
        snprintf(why, cap, "bad header (format version %u, this build reads %u)", get32(hd + 8), KV_DISK_VERSION);
        return why;
    }
    if (get32(hd + 12) != KV_DISK_HEADER_BYTES) return "bad header (header size)";
    if (memcmp(hd + 16, d->ns, KV_DISK_HASH_BYTES)) {
        char theirs[17], ours[17];
        hex(hd + 16, 8, theirs);
        hex(d->ns, 8, ours);
        snprintf(why, cap, "written for another model or config (namespace %s..., ours %s...), ignored", theirs, ours);
        return why;
    }
    if (get32(hd + 48) != d->lay.n_layer || get32(hd + 52) != d->lay.n_head_kv || get32(hd + 56) != d->lay.head_dim ||
        get32(hd + 60) != d->lay.page_tokens || get32(hd + 64) != DTYPE_F16 || get32(hd + 68) != d->chunk_pages ||
        get64(hd + 72) != d->lay.page_bytes || get32(hd + 84) != d->chunk_tokens) {
        snprintf(why, cap,
                 "bad header (KV layout %u layers, %u kv heads, head_dim %u, %u tokens/page, dtype %u, %u pages/chunk, "
                 "%llu bytes/page, %u tokens; ours %u, %u, %u, %u, %u, %u, %llu, %u)",
                 get32(hd + 48), get32(hd + 52), get32(hd + 56), get32(hd + 60), get32(hd + 64), get32(hd + 68),
                 (unsigned long long)get64(hd + 72), get32(hd + 84), d->lay.n_layer, d->lay.n_head_kv, d->lay.head_dim,
                 d->lay.page_tokens, DTYPE_F16, d->chunk_pages, (unsigned long long)d->lay.page_bytes, d->chunk_tokens);
        return why;
    }
    if (get32(hd + 80) != k) {
        snprintf(why, cap, "bad header (chunk %u, expected %u)", get32(hd + 80), k);
        return why;
    }
    for (int i = 152; i < (int)KV_DISK_HEADER_BYTES; i++)
        if (hd[i]) return "bad header (reserved bytes not zero)";
    return NULL;
}

static void reject(kv_disk_tier *d, const char *path, const uint8_t h[KV_DISK_HASH_BYTES], const char *why) {
    say(d, "%s: %s; removed, recomputing", path, why);
    unlink(path);
    known_remove(d, h);
    d->rejected++;
}

int kv_disk_read(kv_disk_tier *d, const int32_t *tokens, uint32_t k, const uint8_t prev[KV_DISK_HASH_BYTES],
                 const uint8_t h[KV_DISK_HASH_BYTES]) {
    char path[4096], why[512];
    kv_disk_path(d, h, path, sizeof path);
    double t0 = cd_now_ms();
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        if (errno != ENOENT) say(d, "%s: cannot open: %s", path, strerror(errno));
        known_remove(d, h);
        return 0;
    }
    const char *bad = NULL;
    uint8_t hd[KV_DISK_HEADER_BYTES], sum[TRAILER_BYTES];
    struct stat st;
    uint64_t pb = d->lay.page_bytes;
    uint64_t want = KV_DISK_HEADER_BYTES + (uint64_t)d->chunk_tokens * 4 + d->chunk_pages * pb + TRAILER_BYTES;
    XXH3_state_t *x = XXH3_createState();
    if (!x) {
        close(fd);
        return cd_fail("disk tier: out of memory");
    }
    XXH3_128bits_reset(x);
    if (fstat(fd, &st)) bad = "cannot stat";
    else if ((uint64_t)st.st_size < KV_DISK_HEADER_BYTES || read_full(fd, hd, sizeof hd)) bad = "truncated (no whole header)";
    else if ((bad = check_header(d, hd, k, why, sizeof why))) {
    } else if ((uint64_t)st.st_size != want) {
        snprintf(why, sizeof why, "%s (%llu bytes, a chunk of this layout is %llu)",
                 (uint64_t)st.st_size < want ? "truncated" : "bad size", (unsigned long long)st.st_size,
                 (unsigned long long)want);
        bad = why;
    } else {
        /* sizes are ours from here on: the header matched our layout field by field */
        XXH3_128bits_update(x, hd, sizeof hd);
        uint8_t *le = (uint8_t *)d->tokens; /* read as bytes, decoded in place below */
        if (read_full(fd, le, (size_t)d->chunk_tokens * 4)) bad = "truncated (read failed)";
        else XXH3_128bits_update(x, le, (size_t)d->chunk_tokens * 4);
        for (uint32_t i = 0; !bad && i < d->chunk_pages; i++) {
            void *p = kv_slot_ptr(&d->stage, pb, i);
            if (!p || read_full(fd, p, pb)) bad = "truncated (read failed)";
            else XXH3_128bits_update(x, p, pb);
        }
        if (!bad && read_full(fd, sum, sizeof sum)) bad = "truncated (no checksum)";
        if (!bad) {
            XXH128_hash_t c = XXH3_128bits_digest(x);
            if (get64(sum) != c.low64 || get64(sum + 8) != c.high64) bad = "corrupt (checksum mismatch)";
        }
        if (!bad) {
            for (uint32_t i = 0; i < d->chunk_tokens; i++) d->tokens[i] = (int32_t)get32(le + 4 * i);
            if (memcmp(d->tokens, tokens, (size_t)d->chunk_tokens * sizeof *tokens))
                bad = "its tokens differ from the prompt's (a hash collision or a forged file)";
            else if (memcmp(hd + 88, prev, KV_DISK_HASH_BYTES) || memcmp(hd + 120, h, KV_DISK_HASH_BYTES))
                bad = "bad header (chain hash differs from its name)";
        }
    }
    XXH3_freeState(x);
    close(fd);
    if (bad) {
        reject(d, path, h, bad);
        return 0;
    }
    known_add(d, h);
    d->ms_read += cd_now_ms() - t0;
    d->bytes_read += want;
    return 1;
}

int kv_disk_upload(kv_disk_tier *d, uint32_t first, const uint32_t *gpu_pages, uint32_t n) {
    if ((uint64_t)first + n > d->chunk_pages) return cd_fail("disk tier: pages %u + %u of a %u-page chunk", first, n, d->chunk_pages);
    double t0 = cd_now_ms();
    if (kv_copy_pages(&d->cmd, d->pool, &d->stage, d->lay.page_bytes, gpu_pages, d->slot_ids + first, n, KV_HOST_RESTORE))
        return cd_fail_ctx("disk tier: ");
    d->ms_read += cd_now_ms() - t0;
    d->chunks_read++;
    return 0;
}

/* ---- writing ---- */

static int write_full(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int kv_disk_store(kv_disk_tier *d, const int32_t *tokens, uint32_t k, const uint8_t prev[KV_DISK_HASH_BYTES],
                  const uint8_t h[KV_DISK_HASH_BYTES], const uint32_t *gpu_pages) {
    if (kv_disk_known(d, h)) return 0;
    char path[4096], tmp[4200];
    kv_disk_path(d, h, path, sizeof path);
    struct stat st;
    if (stat(path, &st) == 0) { /* written earlier (this process or another): checked when read */
        known_add(d, h);
        return 0;
    }
    double t0 = cd_now_ms();
    uint32_t C = d->chunk_pages;
    uint64_t pb = d->lay.page_bytes;
    if (kv_copy_pages(&d->cmd, d->pool, &d->stage, pb, gpu_pages, d->slot_ids, C, KV_HOST_DEMOTE))
        return cd_fail_ctx("disk tier: ");
    uint8_t hd[KV_DISK_HEADER_BYTES], sum[TRAILER_BYTES];
    make_header(d, k, prev, h, hd);
    uint8_t *le = (uint8_t *)d->tokens;
    for (uint32_t i = 0; i < d->chunk_tokens; i++) put32(le + 4 * i, (uint32_t)tokens[i]);
    XXH3_state_t *x = XXH3_createState();
    if (!x) return cd_fail("disk tier: out of memory");
    XXH3_128bits_reset(x);
    XXH3_128bits_update(x, hd, sizeof hd);
    XXH3_128bits_update(x, le, (size_t)d->chunk_tokens * 4);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    bool ok = fd >= 0 && !write_full(fd, hd, sizeof hd) && !write_full(fd, le, (size_t)d->chunk_tokens * 4);
    for (uint32_t i = 0; ok && i < C; i++) {
        const void *p = kv_slot_ptr(&d->stage, pb, i);
        ok = p && !write_full(fd, p, pb);
        if (ok) XXH3_128bits_update(x, p, pb);
    }
    if (ok) {
        XXH128_hash_t c = XXH3_128bits_digest(x);
        put64(sum, c.low64);
        put64(sum + 8, c.high64);
        ok = !write_full(fd, sum, sizeof sum);
    }
    int e = errno;
    XXH3_freeState(x);
    if (fd >= 0 && close(fd) && ok) ok = false, e = errno;
    if (ok && rename(tmp, path)) ok = false, e = errno;
    if (!ok) {
        if (fd >= 0) unlink(tmp);
        say(d, "%s: cannot write: %s; the chunk stays uncached on disk", path, strerror(e));
        d->write_errors++;
        return 0;
    }
    known_add(d, h);
    d->chunks_written++;
    d->bytes_written += KV_DISK_HEADER_BYTES + (uint64_t)d->chunk_tokens * 4 + C * pb + TRAILER_BYTES;
    d->ms_write += cd_now_ms() - t0;
    return 1;
}

int kv_disk_store_chunks(kv_disk_tier *d, const int32_t *ids, uint32_t n_chunks,
                         uint8_t (*h)[KV_DISK_HASH_BYTES], const uint32_t *gpu_pages) {
    static const uint8_t zero[KV_DISK_HASH_BYTES]; /* h_-1 */
    uint64_t err0 = d->write_errors;
    for (uint32_t c = 0; c < n_chunks && d->write_errors == err0; c++)
        if (kv_disk_store(d, ids + (size_t)c * d->chunk_tokens, c, c ? h[c - 1] : zero, h[c],
                          gpu_pages + (size_t)c * d->chunk_pages) < 0)
            return -1;
    return 0;
}
