/* libFuzzer target for the disk tier's chunk files (kv/disk_tier.c, the format in kv/disk_tier.h):
 * each input is the whole content of the file a request would read for chunk 0 of a fixed
 * prompt. It is written under the file's name in a scratch cache directory and read back with
 * kv_disk_read, the function requests use: the header checked field by field, the size, tokens
 * and pages, the HMAC-SHA-256, the tokens against the prompt's, the chain hashes.
 *
 * The property: an input is served (kv_disk_read returns 1) only when it is exactly a chunk the
 * tier's writer would make for that prompt: the expected size, the HMAC of every byte before the
 * trailer under the directory's key (recomputed here with libcrypto's one-shot HMAC), the
 * header's fixed fields and chain hashes, the prompt's tokens; and the staged pages are then the
 * file's page bytes. Anything else is rejected (the file removed) or skipped (another format
 * version: left), never served; no crash, leak, out-of-bounds read or large allocation (ASan).
 *
 * The tier runs without a device (kv_disk_init with vk NULL: host staging slots), on a small
 * layout (1 layer, 1 KV head, head_dim 4, 4 tokens a page: 64-byte pages; 2 pages a chunk), so a
 * chunk file is 176 + 32 + 128 + 32 = 368 bytes. The key is fixed, so seeds stay valid: the seeds
 * (tests/fuzz/corpus_kv) were written by the tier's own writer, kv_disk_store, and cut or edited
 * from there (FUZZ_KV_WRITE_SEEDS=DIR makes them again). */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/disk_tier.h"
#include "kv/host_tier.h"
#include "runtime/base/error.h"
#include "tests/fuzz/fuzz_util.h"

#define CHECK(cond) FUZZ_CHECK("fuzz_kv_chunk", cond)

/* The device side of the tier is never reached without a device (vk NULL): these stand in for
 * runtime/vk and kv/host_tier.c so the target links without Vulkan; reaching one aborts. */
int cvk_buffer_create(cvk_mem *m, cvk_buffer *b, uint64_t size, uint64_t granule, enum cvk_mem_kind kind) {
    (void)m, (void)b, (void)size, (void)granule, (void)kind;
    abort();
}
void cvk_buffer_destroy(cvk_mem *m, cvk_buffer *b) { (void)m, (void)b; }
int cvk_cmd_init(cvk_cmd *c, cvk_device *d, bool transfer) {
    (void)c, (void)d, (void)transfer;
    abort();
}
void cvk_cmd_free(cvk_cmd *c) { (void)c; }
void *kv_slot_ptr(const cvk_buffer *buf, uint64_t page_bytes, uint32_t id) {
    (void)buf, (void)page_bytes, (void)id;
    abort();
}
int kv_copy_pages(cvk_cmd *c, const cvk_buffer *pool, const cvk_buffer *buf, uint64_t page_bytes, const uint32_t *pages,
                  const uint32_t *slots, uint32_t n, enum kv_host_dir dir) {
    (void)c, (void)pool, (void)buf, (void)page_bytes, (void)pages, (void)slots, (void)n, (void)dir;
    abort();
}

#define CHUNK_PAGES 2u

static kv_disk_tier tier;
static int32_t tokens[64];
static uint8_t zero[KV_DISK_HASH_BYTES], h0[KV_DISK_HASH_BYTES];
static char path[4096], dir[4096];
static uint64_t served, runs;

/* At exit: what happened, and the scratch directory removed. */
static void done(void) {
    fprintf(stderr, "fuzz_kv_chunk: %llu of %llu inputs served\n", (unsigned long long)served,
            (unsigned long long)runs);
    kv_disk_free(&tier);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "fuzz_kv_chunk: could not remove %s\n", dir);
}
static const uint8_t key[KV_DISK_KEY_BYTES] = {0x63, 0x69, 0x6e, 0x64, 0x65, 0x72, 0x2d, 0x66, 0x75, 0x7a, 0x7a,
                                               0x2d, 0x6b, 0x76, 0x2d, 0x6b, 0x65, 0x79, 0x2d, 0x6e, 0x6f, 0x74,
                                               0x2d, 0x61, 0x2d, 0x73, 0x65, 0x63, 0x72, 0x65, 0x74, 0x21};

static int write_bytes(const char *p, const uint8_t *data, size_t size) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    close(fd);
    return done == size ? 0 : -1;
}

/* The seeds: a chunk written by kv_disk_store (staging slots filled with a pattern), and copies
 * cut or edited at the places the reader checks. */
static void write_seeds(const char *out) {
    for (uint32_t i = 0; i < CHUNK_PAGES; i++) {
        uint8_t *p = kv_disk_stage_ptr(&tier, i);
        for (uint64_t b = 0; b < tier.lay.page_bytes; b++) p[b] = (uint8_t)(b * 7 + i * 31);
    }
    if (kv_disk_store(&tier, tokens, 0, zero, h0, NULL) != 1) {
        fprintf(stderr, "fuzz_kv_chunk: kv_disk_store: %s\n", cd_errmsg());
        exit(1);
    }
    size_t n = (size_t)kv_disk_chunk_bytes(&tier);
    uint8_t *good = malloc(n), *b = malloc(n);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && read(fd, good, n) == (ssize_t)n);
    close(fd);
    char name[4200];
    struct {
        const char *name;
        size_t at, len; /* overwrite len bytes at `at` with 0xff; len 0: keep */
        size_t keep;    /* bytes kept (a cut), 0: all */
    } seeds[] = {
        {"valid", 0, 0, 0},         {"truncated-trailer", 0, 0, 368 - 40},
        {"header-only", 0, 0, 176}, {"bad-magic", 0, 1, 0},
        {"version", 8, 1, 0},       {"header-size", 12, 1, 0},
        {"namespace", 16, 1, 0},    {"layout", 52, 1, 0},
        {"chunk-index", 80, 1, 0},  {"prev-hash", 88, 1, 0},
        {"reserved", 160, 1, 0},    {"token", 180, 1, 0},
        {"page-byte", 300, 1, 0},   {"mac", 360, 1, 0},
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        memcpy(b, good, n);
        if (seeds[i].len) memset(b + seeds[i].at, 0xff, seeds[i].len);
        snprintf(name, sizeof name, "%s/%s", out, seeds[i].name);
        CHECK(write_bytes(name, b, seeds[i].keep ? seeds[i].keep : n) == 0);
    }
    free(good);
    free(b);
    fprintf(stderr, "fuzz_kv_chunk: wrote %zu seeds to %s\n", sizeof seeds / sizeof seeds[0], out);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/cinder-fuzz-kv-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    char keyp[4200];
    snprintf(keyp, sizeof keyp, "%s/key", dir);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return fprintf(stderr, "fuzz_kv_chunk: mkdir %s failed\n", dir), exit(1), 0;
    CHECK(write_bytes(keyp, key, sizeof key) == 0);
    kv_layout lay;
    uint8_t ns[KV_DISK_HASH_BYTES];
    for (int i = 0; i < KV_DISK_HASH_BYTES; i++) ns[i] = (uint8_t)(0xa0 + i);
    if (kv_layout_init(&lay, 1, 1, 4, 4) || kv_disk_init(&tier, NULL, NULL, &lay, ns, dir, CHUNK_PAGES, 1u << 20)) {
        fprintf(stderr, "fuzz_kv_chunk: %s\n", cd_errmsg());
        exit(1);
    }
    tier.quiet = true; /* a line per rejected input would flood the log; last_msg keeps it */
    CHECK(tier.chunk_tokens == 8 && kv_disk_chunk_bytes(&tier) == 368);
    for (uint32_t i = 0; i < tier.chunk_tokens; i++) tokens[i] = (int32_t)(1000 + 17 * i);
    CHECK(kv_disk_chain(&tier, tokens, 1, &h0) == 0);
    kv_disk_path(&tier, h0, path, sizeof path);
    const char *seeds = getenv("FUZZ_KV_WRITE_SEEDS");
    if (seeds && *seeds) write_seeds(seeds), unlink(path);
    atexit(done);
    return 0;
}

static uint32_t get32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 16)) return 0;
    CHECK(write_bytes(path, data, size) == 0);
    uint64_t rejected = tier.rejected;
    int got = kv_disk_read(&tier, tokens, 0, zero, h0);
    CHECK(got == 0 || got == 1);
    runs++;
    if (got == 1) {
        served++;
        /* served: exactly a chunk of ours for this prompt */
        size_t n = (size_t)kv_disk_chunk_bytes(&tier), body = n - KV_DISK_MAC_BYTES;
        CHECK(size == n && tier.rejected == rejected);
        uint8_t mac[EVP_MAX_MD_SIZE];
        unsigned mac_len = 0;
        CHECK(HMAC(EVP_sha256(), key, sizeof key, data, body, mac, &mac_len) && mac_len == KV_DISK_MAC_BYTES);
        CHECK(memcmp(mac, data + body, KV_DISK_MAC_BYTES) == 0);
        CHECK(memcmp(data, "CINDERKV", 8) == 0 && get32(data + 8) == KV_DISK_VERSION &&
              get32(data + 12) == KV_DISK_HEADER_BYTES && get32(data + 80) == 0);
        CHECK(memcmp(data + 16, tier.ns, KV_DISK_HASH_BYTES) == 0);
        CHECK(memcmp(data + 88, zero, KV_DISK_HASH_BYTES) == 0 && memcmp(data + 120, h0, KV_DISK_HASH_BYTES) == 0);
        for (uint32_t i = 0; i < tier.chunk_tokens; i++)
            CHECK((int32_t)get32(data + KV_DISK_HEADER_BYTES + 4 * i) == tokens[i]);
        const uint8_t *pages = data + KV_DISK_HEADER_BYTES + 4 * (size_t)tier.chunk_tokens;
        for (uint32_t i = 0; i < CHUNK_PAGES; i++)
            CHECK(memcmp(kv_disk_stage_ptr(&tier, i), pages + i * tier.lay.page_bytes, tier.lay.page_bytes) == 0);
    } else {
        CHECK(tier.rejected == rejected + 1 && tier.last_msg[0]);
    }
    unlink(path); /* a skipped file stays; the next input starts from none */
    return 0;
}
