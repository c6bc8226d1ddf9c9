/* The disk tier (kv/disk_tier.h) through the engine: a prefix written by one engine is served
 * from disk by a fresh one (a restart) with the greedy tokens and logits of an engine without
 * any cache; and every kind of bad file is rejected with a message, removed, counted and
 * recomputed (output still equal), never served: a flipped payload byte, a truncated file, a
 * file written by a model with one different weight byte, hostile header counts, a wrong chunk
 * index, trailing bytes, a file of a few bytes. Page sizes 16 and 4; with and without the host
 * tier. Also: the chain keys, the options, a failed write.
 * The directory as a trust boundary: a chunk written under another directory's key, or changed
 * and re-MACed with a guessed key, is rejected; a symlink planted at a chunk or a temp name is
 * never followed (its target unchanged); a FIFO at a chunk name is skipped without blocking; a
 * directory writable by group or others, or owned by another user (when run as root), and a key
 * file others can read are refused; two processes racing to create the key end with one; stale
 * temp files of dead processes are removed, nothing else; a full disk (RLIMIT_FSIZE) ends the
 * write-through before any GPU copy. Runs under ASan in scripts/test.sh (a hostile file must
 * not read out of bounds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/engine/engine.h"
#include "tests/test_status.h"
#include "tests/test_util.h"

#define N_CTX 512

static model *tiny(void) {
    static model *m;
    if (!m && model_load(&m, tu_make_model("dk_tiny.gguf", "tiny", NULL, 7, NULL), (model_load_opts){0}))
        fail_msg("%s", cd_errmsg());
    return m;
}

/* A fresh, empty directory under the scratch dir (chunk files of earlier runs removed). */
static const char *fresh_dir(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp_path(name));
    DIR *d = opendir(path);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        DIR *s = opendir(sub);
        for (struct dirent *f; s && (f = readdir(s));) {
            char file[4700];
            snprintf(file, sizeof file, "%s/%s", sub, f->d_name);
            if (f->d_name[0] != '.' || strlen(f->d_name) > 2) unlink(file);
        }
        if (s) closedir(s);
        rmdir(sub);
    }
    if (d) closedir(d);
    chmod(path, 0700); /* a directory left by an older build may be group-writable */
    return path;
}

static void init(engine *e, model *m, uint32_t page, uint32_t chunk_pages, const char *dir, uint32_t host_mb) {
    engine_opts o = {.n_ctx = N_CTX, .page_tokens = page, .cache_dir = dir, .disk_chunk_pages = chunk_pages,
                     .host_cache_mb = host_mb, .no_prefix_cache = dir == NULL && host_mb == 0};
    if (engine_init(e, m, &o)) fail_msg("%s", cd_errmsg());
}

typedef struct outcome {
    engine_reply r;
    float *logits;
} outcome;

static void run(engine *e, const int32_t *ids, uint32_t n, outcome *o) {
    o->logits = malloc(e->m->cfg.n_vocab * sizeof *o->logits);
    engine_request rq = {.ids = ids, .n = n, .max_tokens = 4, .ignore_eos = true, .logits_out = o->logits};
    if (engine_generate(e, &rq, &o->r)) fail_msg("%s", cd_errmsg());
    assert_int_equal(o->r.cached_tokens + o->r.prefilled_tokens, n);
}

static void outcome_free(outcome *o) {
    engine_reply_free(&o->r);
    free(o->logits);
}

/* The same greedy tokens and the same logits, bit for bit, as the uncached engine's. */
static void same_as_plain(engine *plain, engine *e, const int32_t *ids, uint32_t n, outcome *got) {
    outcome want;
    run(plain, ids, n, &want);
    assert_int_equal(want.r.cached_tokens, 0);
    assert_int_equal(got->r.n, want.r.n);
    for (uint32_t i = 0; i < got->r.n; i++)
        if (got->r.ids[i] != want.r.ids[i])
            fail_msg("%u tokens (%u cached, %u from disk): token %u is %d, %d without a cache", n, got->r.cached_tokens,
                     got->r.disk_tokens, i, got->r.ids[i], want.r.ids[i]);
    if (memcmp(got->logits, want.logits, e->m->cfg.n_vocab * sizeof *got->logits))
        fail_msg("%u tokens (%u from disk): logits differ from the uncached engine's (rel L2 %.3g)", n,
                 got->r.disk_tokens, tu_rel_l2(got->logits, want.logits, e->m->cfg.n_vocab));
    outcome_free(&want);
}

static void chunk_path(engine *e, const int32_t *ids, uint32_t k, char *path, size_t cap) {
    uint8_t(*h)[KV_DISK_HASH_BYTES] = malloc((k + 1) * KV_DISK_HASH_BYTES);
    assert_int_equal(kv_disk_chain(&e->disk, ids, k + 1, h), 0);
    kv_disk_path(&e->disk, h[k], path, cap);
    free(h);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static uint8_t *slurp(const char *path, size_t *len) {
    uint8_t *b = (uint8_t *)tu_read_file(path, len);
    if (!b) fail_msg("cannot read %s", path);
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t len) {
    if (tu_write_file(path, b, len)) fail_msg("cannot write %s", path);
}

/* Drops the GPU (and host) tiers so the next request must go to disk for its prefix. */
static void forget(engine *e) { kv_cache_clear(&e->cache); }

/* After a bad file was put in place of chunk 0: the request rejects it with a message holding
 * `want`, computes everything (same output as plain), and writes a good file back, which the
 * next request (tiers dropped again) serves. */
static void expect_rejected(engine *plain, engine *e, const int32_t *ids, uint32_t n, const char *want) {
    char path[4096];
    chunk_path(e, ids, 0, path, sizeof path);
    uint64_t rej0 = e->stats.disk_rejected;
    forget(e);
    outcome o;
    run(e, ids, n, &o);
    assert_int_equal(o.r.disk_rejected, 1);
    assert_int_equal(o.r.disk_tokens, 0);
    assert_int_equal(o.r.cached_tokens, 0);
    assert_int_equal(e->stats.disk_rejected, rej0 + 1);
    if (!strstr(e->disk.last_msg, want)) fail_msg("message \"%s\" does not say \"%s\"", e->disk.last_msg, want);
    if (!strstr(e->disk.last_msg, path)) fail_msg("message \"%s\" does not name %s", e->disk.last_msg, path);
    same_as_plain(plain, e, ids, n, &o);
    assert_true(o.r.disk_chunks_written >= 1); /* the good chunk written again */
    assert_true(exists(path));
    outcome_free(&o);
    forget(e);
    run(e, ids, n, &o);
    assert_int_equal(o.r.disk_rejected, 0);
    assert_true(o.r.disk_tokens > 0);
    same_as_plain(plain, e, ids, n, &o);
    outcome_free(&o);
}


static void patch32(const char *path, size_t at, uint32_t v) {
    size_t len;
    uint8_t *b = slurp(path, &len);
    assert_true(at + 4 <= len);
    for (int i = 0; i < 4; i++) b[at + i] = (uint8_t)(v >> (8 * i));
    spit(path, b, len);
    free(b);
}

/* hostile: the header cases; other_model: the file of another namespace. */
static void restart(uint32_t page, uint32_t chunk_pages, uint32_t host_mb, uint32_t n, uint64_t seed, bool hostile,
                    bool other_model) {
    char name[64];
    snprintf(name, sizeof name, "disk_p%u_h%u", page, host_mb);
    const char *dir = fresh_dir(name);
    model *m = tiny();
    engine plain, a, b;
    init(&plain, m, page, 0, NULL, 0);
    int32_t ids[N_CTX];
    rng r;
    rng_seed(&r, seed);
    for (uint32_t i = 0; i < N_CTX; i++) ids[i] = (int32_t)(100 + rng_below(&r, 20000));
    uint32_t ct = page * chunk_pages, whole = (n - 1) / ct * ct; /* one prompt token is always prefilled */

    /* engine A computes the prompt and writes its whole chunks through */
    init(&a, m, page, chunk_pages, dir, host_mb);
    outcome o;
    run(&a, ids, n, &o);
    assert_int_equal(o.r.cached_tokens, 0);
    assert_int_equal(o.r.disk_tokens, 0);
    assert_int_equal(o.r.disk_chunks_written, (n + o.r.n - 1) / ct); /* prompt + generated KV */
    assert_true(o.r.disk_bytes_written > o.r.disk_chunks_written * ct * 4ull);
    same_as_plain(&plain, &a, ids, n, &o);
    int32_t cont[N_CTX]; /* the next turn: prompt + reply + a new message */
    memcpy(cont, ids, n * sizeof *ids);
    memcpy(cont + n, o.r.ids, o.r.n * sizeof *ids);
    uint32_t n2 = n + o.r.n + 9;
    for (uint32_t i = n + o.r.n; i < n2; i++) cont[i] = (int32_t)(100 + rng_below(&r, 20000));
    outcome_free(&o);
    engine_free(&a);

    /* engine B, fresh (a restart): the prompt's whole chunks come from disk */
    init(&b, m, page, chunk_pages, dir, host_mb);
    run(&b, ids, n, &o);
    print_message("page %u, chunks of %u tokens: %u of %u prompt tokens from disk, %u chunks (%.1f KiB) in %.2f ms\n",
                  page, ct, o.r.disk_tokens, n, o.r.disk_chunks_read, o.r.disk_bytes_read / 1024.0, o.r.disk_read_ms);
    assert_int_equal(o.r.disk_tokens, whole);
    assert_int_equal(o.r.cached_tokens, whole);
    assert_int_equal(o.r.disk_chunks_read, whole / ct);
    assert_int_equal(o.r.disk_rejected, 0);
    assert_int_equal(o.r.disk_chunks_written, 0); /* the chunks it would write are the ones it read */
    same_as_plain(&plain, &b, ids, n, &o);
    outcome_free(&o);
    /* the continuation: the tree serves what B holds now, the disk nothing more than it has */
    run(&b, cont, n2, &o);
    assert_true(o.r.cached_tokens >= whole);
    same_as_plain(&plain, &b, cont, n2, &o);
    outcome_free(&o);
    if (radix_check(&b.cache.tree) || kv_pages_check(&b.g.pages)) fail_msg("%s", cd_errmsg());

    /* a match that ends inside a chunk (and inside a page): the disk fills the rest of it */
    forget(&b);
    int32_t q[N_CTX];
    uint32_t cut = ct + ct / 2 + (page > 1 ? 1 : 0);
    memcpy(q, ids, N_CTX * sizeof *q);
    q[cut] = 7; /* diverges at token cut */
    run(&b, q, n, &o);
    same_as_plain(&plain, &b, q, n, &o);
    outcome_free(&o);
    run(&b, ids, n, &o); /* tree: cut tokens; disk: the rest of chunk 1 onwards */
    assert_int_equal(o.r.cached_tokens, whole);
    assert_true(o.r.disk_tokens > 0 && o.r.disk_tokens <= whole - cut);
    same_as_plain(&plain, &b, ids, n, &o);
    outcome_free(&o);
    if (radix_check(&b.cache.tree) || kv_pages_check(&b.g.pages)) fail_msg("%s", cd_errmsg());

    char path[4096];
    chunk_path(&b, ids, 0, path, sizeof path);
    size_t len;
    uint8_t *good = slurp(path, &len);
    uint8_t *bad = malloc(len + 64);
    /* one payload byte flipped */
    memcpy(bad, good, len);
    bad[176 + ct * 4 + (len - 176 - ct * 4 - KV_DISK_MAC_BYTES) / 3] ^= 0x10;
    spit(path, bad, len);
    expect_rejected(&plain, &b, ids, n, "corrupt or forged (MAC mismatch");
    /* truncated */
    spit(path, good, len - 100);
    expect_rejected(&plain, &b, ids, n, "truncated");
    if (hostile) {
        /* a few bytes */
        spit(path, good, 10);
        expect_rejected(&plain, &b, ids, n, "truncated (no whole header)");
        /* trailing bytes */
        memcpy(bad, good, len);
        memset(bad + len, 0, 64);
        spit(path, bad, len + 64);
        expect_rejected(&plain, &b, ids, n, "bad size");
        /* hostile counts: a huge token count, page bytes and chunk pages that do not match */
        spit(path, good, len);
        patch32(path, 84, 0xfffffff0u);
        expect_rejected(&plain, &b, ids, n, "bad header (KV layout");
        patch32(path, 72, 0x7fffffffu);
        expect_rejected(&plain, &b, ids, n, "bad header (KV layout");
        patch32(path, 68, 1u << 30);
        expect_rejected(&plain, &b, ids, n, "bad header (KV layout");
        /* another chunk index, another version, another magic */
        patch32(path, 80, 3);
        expect_rejected(&plain, &b, ids, n, "bad header (chunk 3");
        patch32(path, 8, 99); /* skipped, not removed: replaced by the write-through */
        expect_rejected(&plain, &b, ids, n, "format version 99, this build reads 2); skipped");
        patch32(path, 0, 0x12345678u);
        expect_rejected(&plain, &b, ids, n, "wrong magic");
        /* another chunk's file under this chunk's name (a valid file, wrong tokens and chain) */
        char path1[4096];
        chunk_path(&b, ids, 1, path1, sizeof path1);
        size_t len1;
        uint8_t *other = slurp(path1, &len1);
        spit(path, other, len1);
        free(other);
        expect_rejected(&plain, &b, ids, n, "bad header (chunk 1");
    }
    free(good);
    free(bad);

    /* a file written by a model with one different weight byte (another namespace), renamed
     * into our directory under our chunk's name */
    if (other_model) {
        model *m2;
        const char *m2_path = tu_one_weight_changed(tu_tmp_path("dk_tiny.gguf"), "dk_tiny_b.gguf");
        assert_non_null(m2_path);
        if (model_load(&m2, m2_path, (model_load_opts){0})) fail_msg("%s", cd_errmsg());
        engine c;
        init(&c, m2, page, chunk_pages, dir, 0);
        assert_memory_not_equal(c.disk.ns, b.disk.ns, KV_DISK_HASH_BYTES);
        run(&c, ids, n, &o);
        assert_int_equal(o.r.disk_tokens, 0); /* nothing of ours is served to it either */
        assert_true(o.r.disk_chunks_written > 0);
        outcome_free(&o);
        char theirs[4096];
        chunk_path(&c, ids, 0, theirs, sizeof theirs);
        assert_true(exists(theirs));
        assert_int_equal(rename(theirs, path), 0);
        engine_free(&c);
        model_free(m2);
        expect_rejected(&plain, &b, ids, n, "written for another model or config");
    }
    engine_free(&b);
    engine_free(&plain);
}

static void test_restart_page16(void **st) { (void)st; restart(16, 2, 0, 96, 1, true, true); }
static void test_restart_page4(void **st) { (void)st; restart(4, 4, 0, 70, 2, false, true); }
/* With the host tier as well. */
static void test_restart_page4_host_tier(void **st) { (void)st; restart(4, 4, 1, 70, 3, false, false); }

/* The options: a tier with the cache off is an error; an unwritable directory is one too. */
/* A salted request skips the disk tier (kv/prefix_cache.h): it writes no chunk through and is
 * served nothing from the files, while an unsalted request of a restarted engine is; the
 * tokens are the same in every case. */
static void test_salted_skips_disk(void **st) {
    (void)st;
    const char *dir = fresh_dir("disk_salted");
    model *m = tiny();
    int32_t ids[96];
    rng r;
    rng_seed(&r, 12);
    for (uint32_t i = 0; i < 96; i++) ids[i] = (int32_t)(100 + rng_below(&r, 20000));
    engine a, b;
    init(&a, m, 16, 2, dir, 0); /* chunks of 32 tokens */
    engine_request rq = {.ids = ids, .n = 96, .max_tokens = 4, .ignore_eos = true, .cache_salt = "s"};
    engine_reply want, got;
    if (engine_generate(&a, &rq, &want)) fail_msg("%s", cd_errmsg());
    assert_int_equal(want.disk_chunks_written, 0);
    rq.cache_salt = NULL;
    if (engine_generate(&a, &rq, &got)) fail_msg("%s", cd_errmsg());
    assert_int_equal(got.cached_tokens, 0); /* the salted KV is not the default namespace's */
    assert_int_equal(got.disk_chunks_written, 3); /* (96 + 4 - 1) / 32: prompt + generated KV */
    assert_memory_equal(got.ids, want.ids, want.n * sizeof *want.ids);
    engine_reply_free(&got);
    engine_free(&a);

    init(&b, m, 16, 2, dir, 0); /* a restart: only the disk tier holds the prompt */
    rq.cache_salt = "s";
    if (engine_generate(&b, &rq, &got)) fail_msg("%s", cd_errmsg());
    assert_int_equal(got.cached_tokens, 0);
    assert_int_equal(got.disk_chunks_read + got.disk_rejected + got.disk_chunks_written, 0);
    assert_memory_equal(got.ids, want.ids, want.n * sizeof *want.ids);
    engine_reply_free(&got);
    rq.cache_salt = NULL;
    if (engine_generate(&b, &rq, &got)) fail_msg("%s", cd_errmsg());
    assert_int_equal(got.disk_tokens, 64);
    assert_int_equal(got.cached_tokens, 64);
    assert_memory_equal(got.ids, want.ids, want.n * sizeof *want.ids);
    engine_reply_free(&got);
    engine_reply_free(&want);
    engine_free(&b);
}

static void test_options(void **st) {
    (void)st;
    engine e;
    engine_opts o = {.n_ctx = 64, .no_prefix_cache = true, .cache_dir = tu_tmp_path("disk_opts")};
    assert_int_equal(engine_init(&e, tiny(), &o), -1);
    assert_non_null(strstr(cd_errmsg(), "needs the prefix cache"));
    engine_free(&e);
    o = (engine_opts){.n_ctx = 64, .no_prefix_cache = true, .host_cache_mb = 1};
    assert_int_equal(engine_init(&e, tiny(), &o), -1);
    assert_non_null(strstr(cd_errmsg(), "needs the prefix cache"));
    engine_free(&e);
    const char *file = tu_tmp_path("disk_not_a_dir");
    spit(file, (const uint8_t *)"x", 1);
    o = (engine_opts){.n_ctx = 64, .cache_dir = file};
    assert_int_equal(engine_init(&e, tiny(), &o), -1);
    assert_non_null(strstr(cd_errmsg(), "--cache-dir"));
    engine_free(&e);
}

/* The chain keys: equal prefixes, equal keys; a token of chunk 0 changes every key after it
 * (h_k covers the whole prefix), a token of chunk 1 leaves h_0; another namespace changes all. */
static void test_chain_keys(void **st) {
    (void)st;
    kv_disk_tier d = {.chunk_pages = 2, .chunk_tokens = 8};
    memset(d.ns, 1, sizeof d.ns);
    int32_t a[24], b[24];
    for (int i = 0; i < 24; i++) a[i] = b[i] = 1000 + i;
    uint8_t ha[3][KV_DISK_HASH_BYTES], hb[3][KV_DISK_HASH_BYTES];
    assert_int_equal(kv_disk_chain(&d, a, 3, ha), 0);
    assert_int_equal(kv_disk_chain(&d, b, 3, hb), 0);
    assert_memory_equal(ha, hb, sizeof ha);
    assert_memory_not_equal(ha[0], ha[1], KV_DISK_HASH_BYTES);
    b[3] = 7; /* chunk 0 */
    assert_int_equal(kv_disk_chain(&d, b, 3, hb), 0);
    for (int k = 0; k < 3; k++) assert_memory_not_equal(ha[k], hb[k], KV_DISK_HASH_BYTES);
    b[3] = a[3];
    b[12] = 7; /* chunk 1 */
    assert_int_equal(kv_disk_chain(&d, b, 3, hb), 0);
    assert_memory_equal(ha[0], hb[0], KV_DISK_HASH_BYTES);
    assert_memory_not_equal(ha[1], hb[1], KV_DISK_HASH_BYTES);
    assert_memory_not_equal(ha[2], hb[2], KV_DISK_HASH_BYTES);
    b[12] = a[12];
    d.ns[31] ^= 1;
    assert_int_equal(kv_disk_chain(&d, b, 3, hb), 0);
    for (int k = 0; k < 3; k++) assert_memory_not_equal(ha[k], hb[k], KV_DISK_HASH_BYTES);
}

/* A write that fails (the directory vanished) is a line on stderr and a count, not a failed
 * request; the output is still the uncached engine's. */
static void test_write_failure(void **st) {
    (void)st;
    const char *dir = fresh_dir("disk_gone");
    engine plain, e;
    init(&plain, tiny(), 4, 0, NULL, 0);
    init(&e, tiny(), 4, 2, dir, 0);
    assert_int_equal(rmdir(e.disk.dir), 0);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 300 + 7 * i;
    outcome o;
    run(&e, ids, 40, &o);
    assert_int_equal(o.r.disk_chunks_written, 0);
    assert_int_equal(e.disk.write_errors, 1); /* one message per request, not one per chunk */
    assert_non_null(strstr(e.disk.last_msg, "cannot write"));
    same_as_plain(&plain, &e, ids, 40, &o);
    outcome_free(&o);
    engine_free(&e);
    engine_free(&plain);
}

/* ---- the directory as a trust boundary ---- */

/* A prompt of 96 random tokens: three whole 32-token chunks at page 16, chunk_pages 2. */
static void prompt96(int32_t *ids, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    for (uint32_t i = 0; i < 96; i++) ids[i] = (int32_t)(100 + rng_below(&r, 20000));
}

/* The file of chunk 0 of ids under engine e's directory, relative name too. */
static void chunk0(engine *e, const int32_t *ids, char *path, size_t cap) { chunk_path(e, ids, 0, path, cap); }

/* e writes ids' chunks (first run), then everything but the disk is dropped. */
static void write_through(engine *e, const int32_t *ids) {
    outcome o;
    run(e, ids, 96, &o);
    assert_true(o.r.disk_chunks_written >= 2);
    outcome_free(&o);
    forget(e);
}

/* A chunk written under another directory's key (a valid file for the same model: what someone
 * who can write our directory but not read our key can make), and a chunk changed and re-MACed
 * with that key, are rejected; the output equals the uncached one. */
static void test_forged_chunk(void **st) {
    (void)st;
    static char dir1[4096], dir2[4096];
    snprintf(dir1, sizeof dir1, "%s", fresh_dir("disk_key1"));
    snprintf(dir2, sizeof dir2, "%s", fresh_dir("disk_key2"));
    engine plain, a, c;
    init(&plain, tiny(), 16, 0, NULL, 0);
    init(&a, tiny(), 16, 2, dir1, 0);
    init(&c, tiny(), 16, 2, dir2, 0);
    assert_memory_not_equal(a.disk.key, c.disk.key, KV_DISK_KEY_BYTES);
    int32_t ids[96];
    prompt96(ids, 21);
    write_through(&a, ids);
    write_through(&c, ids);
    char mine[4096], theirs[4096];
    chunk0(&a, ids, mine, sizeof mine);
    chunk0(&c, ids, theirs, sizeof theirs);
    size_t len;
    uint8_t *forged = slurp(theirs, &len);
    spit(mine, forged, len);
    expect_rejected(&plain, &a, ids, 96, "corrupt or forged (MAC mismatch");
    /* an attacker who knows the public model and a key, not ours: a payload byte changed and
     * the MAC recomputed */
    forged[KV_DISK_HEADER_BYTES + 32 * 4 + 100] ^= 0x40;
    unsigned mlen = 0;
    assert_non_null(HMAC(EVP_sha256(), c.disk.key, KV_DISK_KEY_BYTES, forged, len - KV_DISK_MAC_BYTES,
                         forged + len - KV_DISK_MAC_BYTES, &mlen));
    assert_int_equal(mlen, KV_DISK_MAC_BYTES);
    spit(theirs, forged, len); /* valid under c's key: c serves it (what a forgery would do) */
    forget(&c);
    outcome o;
    run(&c, ids, 96, &o);
    assert_int_equal(o.r.disk_rejected, 0);
    assert_true(o.r.disk_tokens > 0);
    outcome_free(&o);
    spit(mine, forged, len); /* under ours: rejected */
    expect_rejected(&plain, &a, ids, 96, "corrupt or forged (MAC mismatch");
    free(forged);
    engine_free(&a);
    engine_free(&c);
    engine_free(&plain);
}

static void make_victim(const char *victim) { spit(victim, (const uint8_t *)"victim", 6); }

static void victim_unchanged(const char *victim) {
    size_t len;
    uint8_t *b = slurp(victim, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(b, "victim", 6);
    free(b);
}

/* A symlink at a chunk name is not followed (not even to a valid chunk): skipped, recomputed,
 * replaced by a regular file; its target unchanged. Symlinks planted at the next temp names are
 * passed over (O_EXCL); their target unchanged too. */
static void test_symlinks_not_followed(void **st) {
    (void)st;
    const char *dir = fresh_dir("disk_symlink");
    engine plain, e;
    init(&plain, tiny(), 16, 0, NULL, 0);
    init(&e, tiny(), 16, 2, dir, 0);
    int32_t ids[96];
    prompt96(ids, 22);
    write_through(&e, ids);
    char path[4096], victim[4200];
    chunk0(&e, ids, path, sizeof path);
    snprintf(victim, sizeof victim, "%s.victim", dir);
    /* a valid chunk as the target: following the link would serve it */
    assert_int_equal(rename(path, victim), 0);
    assert_int_equal(symlink(victim, path), 0);
    size_t vlen;
    uint8_t *vbytes = slurp(victim, &vlen);
    forget(&e);
    outcome o;
    run(&e, ids, 96, &o);
    assert_int_equal(o.r.disk_rejected, 1);
    assert_int_equal(o.r.disk_tokens, 0);
    assert_non_null(strstr(e.disk.last_msg, "a symbolic link, not followed; skipped"));
    same_as_plain(&plain, &e, ids, 96, &o);
    outcome_free(&o);
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode)); /* the write-through replaced the link */
    assert_int_equal(sb.st_mode & 0777, 0600);
    size_t len2;
    uint8_t *after = slurp(victim, &len2);
    assert_int_equal(len2, vlen);
    assert_memory_equal(after, vbytes, vlen);
    free(after);
    free(vbytes);

    /* symlinks at the next three temp names of chunk 0, all to a victim */
    make_victim(victim);
    assert_int_equal(unlink(path), 0);
    char name[256], tmp[4400];
    snprintf(name, sizeof name, "%s", strrchr(path, '/') + 1);
    for (uint32_t i = 0; i < 3; i++) {
        snprintf(tmp, sizeof tmp, "%s/%s.%ld.%u.tmp", e.disk.dir, name, (long)getpid(), e.disk.tmp_seq + i);
        assert_int_equal(symlink(victim, tmp), 0);
    }
    forget(&e);
    run(&e, ids, 96, &o);
    assert_int_equal(o.r.disk_tokens, 0);
    assert_true(o.r.disk_chunks_written >= 1);
    assert_int_equal(e.disk.write_errors, 0);
    same_as_plain(&plain, &e, ids, 96, &o);
    outcome_free(&o);
    victim_unchanged(victim);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    forget(&e);
    run(&e, ids, 96, &o); /* the chunk written past the links is good */
    assert_true(o.r.disk_tokens > 0);
    same_as_plain(&plain, &e, ids, 96, &o);
    outcome_free(&o);
    engine_free(&e);
    engine_free(&plain);
    unlink(victim);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_disk_tier: a FIFO blocked the reader\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(1);
}

/* A FIFO at a chunk name: opened without blocking, skipped (not a regular file), recomputed,
 * replaced by the write-through. An alarm fails the test if anything blocks. */
static void test_fifo_skipped(void **st) {
    (void)st;
    const char *dir = fresh_dir("disk_fifo");
    engine plain, e;
    init(&plain, tiny(), 16, 0, NULL, 0);
    init(&e, tiny(), 16, 2, dir, 0);
    int32_t ids[96];
    prompt96(ids, 23);
    write_through(&e, ids);
    char path[4096];
    chunk0(&e, ids, path, sizeof path);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    signal(SIGALRM, on_alarm);
    alarm(300); /* one 96-token request takes seconds, even under ASan on a loaded machine */
    outcome o;
    run(&e, ids, 96, &o);
    alarm(0);
    assert_int_equal(o.r.disk_rejected, 1);
    assert_int_equal(o.r.disk_tokens, 0);
    assert_non_null(strstr(e.disk.last_msg, "not a regular file; skipped"));
    same_as_plain(&plain, &e, ids, 96, &o);
    outcome_free(&o);
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    engine_free(&e);
    engine_free(&plain);
}

/* engine_init on cache_dir fails with an error that names `named` and says `want`. */
static void refused(const char *cache_dir, const char *named, const char *want) {
    engine e;
    engine_opts o = {.n_ctx = 64, .cache_dir = cache_dir};
    assert_int_equal(engine_init(&e, tiny(), &o), -1);
    if (!strstr(cd_errmsg(), want) || !strstr(cd_errmsg(), named))
        fail_msg("error \"%s\" does not name %s and say \"%s\"", cd_errmsg(), named, want);
    engine_free(&e);
}

/* Directories and key files that are not ours alone are refused with a message naming them;
 * the ones init creates are 0700 (directories) and 0600 (key, chunks). */
static void test_dir_permissions(void **st) {
    (void)st;
    char name[64], dir[4096], sub[4200], key[4400];
    snprintf(name, sizeof name, "disk_perm_%ld", (long)getpid()); /* fresh: the parents are created here */
    snprintf(dir, sizeof dir, "%s", tu_tmp_path(name));
    snprintf(sub, sizeof sub, "%s/new/deeper", dir);
    engine e;
    engine_opts o = {.n_ctx = 64, .cache_dir = sub};
    if (engine_init(&e, tiny(), &o)) fail_msg("%s", cd_errmsg());
    struct stat sb;
    assert_int_equal(stat(sub, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_int_equal(stat(e.disk.dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    snprintf(key, sizeof key, "%s/key", sub);
    assert_int_equal(stat(key, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(sb.st_size, KV_DISK_KEY_BYTES);
    char ns_dir[4400];
    snprintf(ns_dir, sizeof ns_dir, "%s", e.disk.dir);
    engine_free(&e);

    assert_int_equal(chmod(sub, 0770), 0);
    refused(sub, sub, "is writable by its group (mode 0770): refusing to use it");
    assert_int_equal(chmod(sub, 0703), 0);
    refused(sub, sub, "is writable by others (mode 0703): refusing to use it");
    assert_int_equal(chmod(sub, 0700), 0);
    assert_int_equal(chmod(ns_dir, 0720), 0);
    refused(sub, ns_dir, "is writable by its group");
    assert_int_equal(chmod(ns_dir, 0700), 0);
    assert_int_equal(chmod(key, 0644), 0);
    refused(sub, key, "can be read or written by others (mode 0644)");
    assert_int_equal(chmod(key, 0600), 0);
    spit(key, (const uint8_t *)"short", 5);
    chmod(key, 0600);
    refused(sub, key, "is 5 bytes, not 32");
    assert_int_equal(unlink(key), 0);
    assert_int_equal(symlink("/etc/hostname", key), 0);
    refused(sub, key, "is a symbolic link");
    assert_int_equal(unlink(key), 0);
    if (geteuid() == 0) { /* only root can give a directory to another user */
        assert_int_equal(chown(sub, 12345, (gid_t)-1), 0);
        refused(sub, sub, "is owned by uid 12345, not by this user (uid 0): refusing to use it");
        assert_int_equal(chown(sub, 0, (gid_t)-1), 0);
        assert_int_equal(chown(ns_dir, 12345, (gid_t)-1), 0);
        refused(sub, ns_dir, "is owned by uid 12345");
        assert_int_equal(chown(ns_dir, 0, (gid_t)-1), 0);
    } else {
        print_message("not root: the foreign-owned directory case is skipped\n");
    }
    if (engine_init(&e, tiny(), &o)) fail_msg("%s", cd_errmsg()); /* all fixed: accepted, a new key */
    engine_free(&e);
    unlink(key);
    rmdir(ns_dir);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/new", dir);
    rmdir(sub);
    rmdir(dir);
}

/* Eight processes racing to create the key of one fresh directory end with one key. */
static void test_key_race(void **st) {
    (void)st;
    char dir[4096], key[4200];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("disk_race"));
    for (int round = 0; round < 4; round++) {
        snprintf(key, sizeof key, "%s/key", dir);
        unlink(key);
        rmdir(dir);
        int fds[8][2];
        pid_t pids[8];
        for (int i = 0; i < 8; i++) {
            assert_int_equal(pipe(fds[i]), 0);
            pids[i] = fork();
            assert_true(pids[i] >= 0);
            if (pids[i] == 0) {
                uint8_t k[KV_DISK_KEY_BYTES];
                int ok = kv_disk_key(dir, k) == 0 && write(fds[i][1], k, sizeof k) == (ssize_t)sizeof k;
                _exit(ok ? 0 : 1);
            }
            close(fds[i][1]);
        }
        uint8_t keys[8][KV_DISK_KEY_BYTES];
        for (int i = 0; i < 8; i++) {
            int status;
            assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            assert_int_equal(read(fds[i][0], keys[i], KV_DISK_KEY_BYTES), KV_DISK_KEY_BYTES);
            close(fds[i][0]);
            assert_memory_equal(keys[i], keys[0], KV_DISK_KEY_BYTES);
        }
        uint8_t k[KV_DISK_KEY_BYTES];
        assert_int_equal(kv_disk_key(dir, k), 0);
        assert_memory_equal(k, keys[0], KV_DISK_KEY_BYTES);
        DIR *d = opendir(dir); /* no temp file left behind */
        int n = 0;
        for (struct dirent *de; d && (de = readdir(d));) n += de->d_name[0] != '.';
        closedir(d);
        assert_int_equal(n, 1);
    }
}

static void touch_age(const char *path, time_t age) {
    struct timespec t[2] = {{.tv_sec = time(NULL) - age}, {.tv_sec = time(NULL) - age}};
    assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

/* Init removes the temp files a crashed process left (ours by name, regular, the process gone
 * and a minute old, or an hour old) and nothing else: not a live process's fresh one, not a
 * symlink (nor its target), not another name. */
static void test_stale_tmp(void **st) {
    (void)st;
    const char *dir = fresh_dir("disk_stale");
    engine e;
    init(&e, tiny(), 16, 2, dir, 0);
    char ns_dir[4400];
    snprintf(ns_dir, sizeof ns_dir, "%s", e.disk.dir);
    engine_free(&e);
    long dead = 1L << 30; /* above any pid_max (at most 2^22): no such process, ever */
    const char *h = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    char gone_old[4600], gone_new[4600], live_old[4600], live_ancient[4600], v1[4600], link[4600], other[4600], victim[4600];
    snprintf(gone_old, sizeof gone_old, "%s/%s.v2.kv.%ld.0.tmp", ns_dir, h, (long)dead);
    snprintf(gone_new, sizeof gone_new, "%s/%s.v2.kv.%ld.1.tmp", ns_dir, h, (long)dead);
    snprintf(live_old, sizeof live_old, "%s/%s.v2.kv.%ld.2.tmp", ns_dir, h, (long)getpid());
    snprintf(live_ancient, sizeof live_ancient, "%s/%s.v2.kv.%ld.3.tmp", ns_dir, h, (long)getpid());
    snprintf(v1, sizeof v1, "%s/%s.kv.tmp.%ld", ns_dir, h, (long)dead);
    snprintf(link, sizeof link, "%s/%s.v2.kv.%ld.4.tmp", ns_dir, h, (long)dead);
    snprintf(other, sizeof other, "%s/notes.v2.kv.%ld.0.tmp", ns_dir, (long)dead);
    snprintf(victim, sizeof victim, "%s.victim", dir);
    const char *files[] = {gone_old, gone_new, live_old, live_ancient, v1, other};
    for (int i = 0; i < 6; i++) spit(files[i], (const uint8_t *)"x", 1);
    make_victim(victim);
    assert_int_equal(symlink(victim, link), 0);
    touch_age(gone_old, 120);
    touch_age(live_old, 120);
    touch_age(live_ancient, 7200);
    touch_age(v1, 120);
    touch_age(link, 7200);
    touch_age(other, 7200);
    init(&e, tiny(), 16, 2, dir, 0);
    assert_int_equal(e.disk.tmp_removed, 3);
    engine_free(&e);
    assert_false(exists(gone_old));
    assert_true(exists(gone_new));
    assert_true(exists(live_old));
    assert_false(exists(live_ancient));
    assert_false(exists(v1));
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_true(exists(other));
    victim_unchanged(victim);
    unlink(gone_new), unlink(live_old), unlink(link), unlink(other), unlink(victim);
}

/* A full disk (here: the file size limit) ends the write-through at the temp file's space,
 * before any GPU -> host copy; one message, one count, the request unharmed. */
static void test_full_disk(void **st) {
    (void)st;
    const char *dir = fresh_dir("disk_full");
    engine plain, e;
    init(&plain, tiny(), 16, 0, NULL, 0);
    init(&e, tiny(), 16, 2, dir, 0);
    int32_t ids[96];
    prompt96(ids, 24);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096; /* a chunk is larger */
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    outcome o;
    run(&e, ids, 96, &o);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(o.r.disk_chunks_written, 0);
    assert_int_equal(e.disk.write_errors, 1);
    assert_int_equal(e.disk.downloads, 0); /* no GPU copy for nothing */
    assert_non_null(strstr(e.disk.last_msg, "cannot write: File too large"));
    same_as_plain(&plain, &e, ids, 96, &o);
    outcome_free(&o);
    DIR *d = opendir(e.disk.dir); /* no temp file left */
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.') fail_msg("%s left in %s", de->d_name, e.disk.dir);
    closedir(d);
    engine_free(&e);
    engine_free(&plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_keys),
        cmocka_unit_test(test_key_race),
        cmocka_unit_test(test_dir_permissions),
        cmocka_unit_test(test_stale_tmp),
        cmocka_unit_test(test_forged_chunk),
        cmocka_unit_test(test_symlinks_not_followed),
        cmocka_unit_test(test_fifo_skipped),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_write_failure),
        cmocka_unit_test(test_salted_skips_disk),
        cmocka_unit_test(test_restart_page16),
        cmocka_unit_test(test_restart_page4),
        cmocka_unit_test(test_restart_page4_host_tier),
    };
    if (getenv("CINDER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINDER_TEST_FILTER"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    model_free(tiny());
    return tu_status(rc);
}
