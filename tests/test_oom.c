/* Out of memory everywhere, as SQLite's tests do it: an operation runs again and again with its
 * N-th allocation failing (N = 1, 2, ... or, for long operations, a spread of N), and each run
 * must fail with a message, or succeed, and leave no allocation of ours behind.
 *
 * Our code's malloc, calloc, realloc, strdup and free are wrapped at link time (-Wl,--wrap,
 * tests/CMakeLists.txt): allocations made inside shared libraries (jansson, the Vulkan driver)
 * are not counted or failed, ours are. A set of live pointers tells ours from theirs at free
 * and counts what an operation leaves behind.
 *
 * Covered: loading a model (GGUF, config, tokenizer), opening a split model's shards, tokenizing and detokenizing, rendering the
 * chat template, the radix index (insert, match, release, with radix_check after each
 * failure), the engine (device, pipelines, weights, pool, cache; one request), and the engine
 * over all three cache tiers (eviction to the host tier, restore from it, write-through to
 * disk, a second engine served from disk; after each failure the cache passes radix_check,
 * its pages add up, and the prompt asked again gives the uncached tokens), and the disk tier on
 * its own (init with its key and scan, writes past the budget that evict, reads, a rescan, a
 * second tier on the same directory; after each failure no temp file is left and every chunk
 * file there is served whole to a fresh tier): every allocation of the small operations, a
 * spread of the engine's (CINDER_OOM_ALL=1: every allocation of those too; long;
 * CINDER_OOM_AT=N: the N-th alone).
 * CINDER_OOM_BACKTRACE=1 prints the stack of every allocation made to fail (to find the one a
 * leak or a crash follows). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <execinfo.h>
#include <unistd.h>

#include "kv/disk_tier.h"

#include "radix/radix.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "runtime/model/model.h"
#include "runtime/text/chat.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/toolcall.h"
#include "runtime/vk/vk_fault.h"
#include "tests/test_util.h"

/* ---- the wrapped allocator ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

enum { SET_BITS = 22, SET_CAP = 1u << SET_BITS };
static void **live; /* open addressing; NULL empty, TOMB removed */
static char tomb;
#define TOMB ((void *)&tomb)
static size_t n_live;
static long countdown = -1;    /* the allocation that fails when it reaches 0; < 0: none */
static unsigned long n_allocs; /* allocations asked for since the last reset */
static bool failed;            /* the injected failure happened */
static bool paused;            /* the test's own checks run: their allocations neither fail nor count */

static size_t slot_of(const void *p) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> (64 - SET_BITS); }

static void remember(void *p) {
    if (!live || !p) return;
    size_t i = slot_of(p);
    while (live[i] && live[i] != TOMB) i = (i + 1) & (SET_CAP - 1);
    live[i] = p;
    n_live++;
}

static bool forget(void *p) {
    if (!live || !p) return false;
    for (size_t i = slot_of(p); live[i]; i = (i + 1) & (SET_CAP - 1))
        if (live[i] == p) {
            live[i] = TOMB;
            n_live--;
            return true;
        }
    return false;
}

static bool fail_now(void) {
    if (paused) return false;
    n_allocs++;
    if (countdown < 0) return false;
    if (countdown-- == 0) {
        failed = true;
        if (getenv("CINDER_OOM_BACKTRACE")) { /* where: addr2line -f -e tests/test_oom +OFFSET */
            void *bt[32];
            backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
        }
        return true;
    }
    return false;
}

void *__wrap_malloc(size_t n) {
    if (fail_now()) return NULL;
    void *p = __real_malloc(n);
    remember(p);
    return p;
}

void *__wrap_calloc(size_t k, size_t n) {
    if (fail_now()) return NULL;
    void *p = __real_calloc(k, n);
    remember(p);
    return p;
}

void *__wrap_realloc(void *p, size_t n) {
    if (fail_now()) return NULL;
    bool ours = forget(p);
    void *q = __real_realloc(p, n);
    if (q) remember(q);
    else if (ours) remember(p); /* still alive */
    return q;
}

char *__wrap_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = __wrap_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

void __wrap_free(void *p) {
    forget(p);
    __real_free(p);
}

/* What fails: our heap allocations, the device's memory allocations, or queue submissions
 * (runtime/vk/vk_fault.h). */
enum fault { HEAP, DEVICE_MEMORY, SUBMIT };
static enum fault fault = HEAP;

/* Runs op with the `at`-th call of the fault's kind failing (< 0: none); returns op's status and
 * how many such calls it made. *leaked: heap allocations of ours still live afterwards (op's
 * own cleanup included). */
static int run_failing(long at, int (*op)(void *), void *ctx, long *leaked, unsigned long *calls, bool *hit) {
    size_t before = n_live;
    countdown = fault == HEAP ? at : -1;
    cvk_fault = (cvk_faults){.alloc_at = fault == DEVICE_MEMORY ? at : -1, .submit_at = fault == SUBMIT ? at : -1};
    failed = false;
    paused = false; /* a check that failed left it on */
    n_allocs = 0;
    int rc = op(ctx);
    countdown = -1;
    cvk_fault.alloc_at = cvk_fault.submit_at = -1;
    *leaked = (long)n_live - (long)before;
    *calls = fault == HEAP ? n_allocs : fault == DEVICE_MEMORY ? cvk_fault.allocs : cvk_fault.submits;
    *hit = fault == HEAP ? failed : cvk_fault.hit;
    return rc;
}

/* The loop: counts the allocations of a clean run, then fails each of the first `all` of them
 * and `spread` more spread over the rest. Every run must succeed or fail with a message, and
 * leak nothing. */
static void oom_loop(const char *what, int (*op)(void *), void *ctx, unsigned long all, unsigned long spread) {
    long leaked;
    unsigned long total, calls, tried = 0, failures = 0;
    bool hit;
    cd_errclear();
    if (run_failing(-1, op, ctx, &leaked, &total, &hit))
        fail_msg("%s: failed with nothing failing: %s", what, cd_errmsg());
    assert_int_equal(leaked, 0);
    if (getenv("CINDER_OOM_ALL")) all = total, spread = 0;
    const char *only = getenv("CINDER_OOM_AT"); /* one failure to study (with CINDER_OOM_BACKTRACE) */
    rng r;
    rng_seed(&r, total);
    for (unsigned long k = 0; k < (only ? 1 : all + spread); k++) {
        long at = only ? atol(only) : k < all ? (long)k : (long)(all + rng_below(&r, total > all ? total - all : 1));
        if ((unsigned long)at >= total) continue;
        cd_errclear();
        int rc = run_failing(at, op, ctx, &leaked, &calls, &hit);
        tried++;
        if (rc) {
            failures++;
            if (!*cd_errmsg()) fail_msg("%s: allocation %ld failed without a message", what, at);
        }
        if (leaked) fail_msg("%s: allocation %ld failed, %ld allocations leaked", what, at, leaked);
        if (rc && !hit) fail_msg("%s: failed though no allocation did (at %ld): %s", what, at, cd_errmsg());
    }
    print_message("%s: %lu %s; %lu runs with one failing, %lu of them failed cleanly\n", what, total,
                  fault == HEAP                ? "allocations"
                      : fault == DEVICE_MEMORY ? "device-memory allocations"
                                               : "submissions",
                  tried, failures);
    if (!only) assert_true(failures > 0);
}

/* ---- the operations ---- */

static const char *model_path;
static model *loaded; /* for the operations that need a tokenizer */

static int op_load(void *ctx) {
    (void)ctx;
    model *m;
    if (model_load(&m, model_path, (model_load_opts){.skip_weight_hash = true})) return -1;
    model_free(m);
    return 0;
}

static int op_tokenize(void *ctx) {
    const char *text = ctx;
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    int rc = tok_encode(loaded->tok, text, strlen(text), true, &ids, &n) || tok_decode(loaded->tok, ids, n, &back);
    if (!rc && strcmp(back, text)) rc = cd_fail("round trip differs");
    free(ids);
    free(back);
    return rc ? -1 : 0;
}

/* ctx NULL: the qwen3 template; else the qwen3-coder one, then its reply parsed (typed values). */
static int op_chat(void *ctx) {
    json_t *msgs =
        json_loads("[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"weather?\"},"
                   "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                   "\"function\":{\"name\":\"w\",\"arguments\":{\"city\":\"Paris\",\"n\":[1,2.5]}}}]},"
                   "{\"role\":\"tool\",\"content\":\"18 C\"},{\"role\":\"user\",\"content\":\"thanks\"}]",
                   0, NULL);
    json_t *tools =
        json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"description\":\" d \",\"parameters\":"
                   "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"array\",\"minItems\":1},\"d\":"
                   "{\"type\":\"integer\"}},\"required\":[\"n\"]}}}]",
                   0, NULL);
    char *out = NULL;
    chat_options o = {.template = ctx ? CHAT_TEMPLATE_QWEN3_CODER : CHAT_TEMPLATE_QWEN3,
                      .add_generation_prompt = true,
                      .as_generated = true};
    int rc = msgs && tools ? chat_render(msgs, tools, o, &out) : cd_fail("test data");
    free(out);
    static const char reply[] = "Looking.\n\n<tool_call>\n<function=w>\n<parameter=n>\n[1, 2]\n</parameter>\n"
                                "<parameter=d>\n7\n</parameter>\n</function>\n</tool_call>";
    json_t *msg = NULL;
    toolcall_format f = {.template = CHAT_TEMPLATE_QWEN3_CODER, .tools = tools};
    if (rc == 0 && ctx) rc = toolcall_parse_as(reply, sizeof reply - 1, f, &msg);
    if (rc == 0 && ctx && !json_object_get(msg, "tool_calls"))
        rc = cd_fail("the reply parsed without its call (out of memory)");
    json_decref(msg);
    json_decref(msgs);
    json_decref(tools);
    return rc;
}

/* A tree with two sequences, a third inserted beside them (a split), a tail, a match and its
 * release, then freed: on any failure the tree passes radix_check and frees cleanly. */
static int op_radix(void *ctx) {
    (void)ctx;
    uint8_t ns[RADIX_NS_BYTES] = {7};
    int32_t ids[3][96];
    uint32_t pages[3][24], first_new;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 96; i++) ids[k][i] = i < 20 * (k + 1) ? i : 1000 * (k + 1) + i;
        for (int i = 0; i < 24; i++) pages[k][i] = (uint32_t)(24 * k + i);
    }
    radix_tree t;
    if (radix_init(&t, 4)) return -1;
    radix_match m = {0};
    int rc = radix_insert(&t, ns, ids[0], 96, pages[0], &first_new) ||
        radix_insert(&t, ns, ids[1], 96, pages[1], &first_new) ||
        radix_insert_tail(&t, ns, ids[2], 94, pages[2], &first_new, NULL, NULL) ||
        radix_match_prefix(&t, ns, ids[2], 90, &m);
    radix_release(&t, &m);
    paused = true; /* the checker's own allocations are not under test */
    if (radix_check(&t)) fail_msg("the tree is broken after a failed allocation: %s", cd_errmsg());
    paused = false;
    radix_free(&t);
    return rc ? -1 : 0;
}

/* The engine (device, pipelines, weights, KV pool, cache) set up and one request run. */
static int op_engine(void *ctx) {
    (void)ctx;
    engine e;
    engine_opts o = {.n_ctx = 64, .pool_tokens = 128, .page_tokens = 4, .max_seqs = 2};
    int32_t ids[12] = {11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133};
    engine_request rq = {.ids = ids, .n = 12, .max_tokens = 3};
    engine_reply r = {0};
    int rc = engine_init(&e, loaded, &o) || engine_generate(&e, &rq, &r);
    if (!rc && r.finish == ENGINE_ERROR) rc = cd_fail("the request failed");
    engine_reply_free(&r);
    engine_free(&e);
    return rc ? -1 : 0;
}

/* ---- the engine over all three tiers ---- */

static int32_t tier_ref[8]; /* the prompt's tokens, uncached (the clean run's first request) */
static uint32_t tier_ref_n;
static unsigned tier_run;
static uint32_t tier_restored, tier_from_disk; /* tokens the host tier / the disk gave back */

/* One request for ids; with `want`, its tokens must be tier_ref's. Allocation failures are
 * off while it runs when `unfailing` (the checks after a failure are not under test). */
static int tier_request(engine *e, const int32_t *ids, uint32_t n, bool want) {
    engine_request rq = {.ids = ids, .n = n, .max_tokens = 4, .ignore_eos = true};
    engine_reply r = {0};
    int rc = engine_generate(e, &rq, &r);
    if (!rc && r.finish == ENGINE_ERROR) rc = cd_fail("the request failed");
    tier_restored += r.restored_tokens, tier_from_disk += r.disk_tokens;
    if (!rc && want) {
        if (!tier_ref_n) memcpy(tier_ref, r.ids, (tier_ref_n = r.n) * sizeof *r.ids);
        else if (r.n != tier_ref_n || memcmp(r.ids, tier_ref, r.n * sizeof *r.ids))
            fail_msg("a request served over the tiers gave other tokens than uncached");
    }
    engine_reply_free(&r);
    return rc;
}

/* After a failure: the index and the pages consistent, and the prompt gives its tokens. */
static void tier_check(engine *e, const int32_t *a, uint32_t n) {
    paused = true;
    if (radix_check(&e->cache.tree)) fail_msg("the cache's index is broken after a failed allocation: %s", cd_errmsg());
    engine_cache_info ci;
    engine_cache_info_get(e, &ci);
    if (ci.gpu_free + ci.gpu_cached + ci.gpu_pinned + ci.gpu_private != ci.gpu_pages || ci.gpu_pinned || ci.gpu_private)
        fail_msg("pages: %u free + %u cached + %u pinned + %u private of %u", ci.gpu_free, ci.gpu_cached, ci.gpu_pinned,
                 ci.gpu_private, ci.gpu_pages);
    if (tier_request(e, a, n, true)) fail_msg("the prompt failed after a failed allocation: %s", cd_errmsg());
    paused = false;
}

/* A small pool (8 pages of 4 tokens), a host tier and a disk tier in a fresh directory: prompt
 * A, then B (its pages evict A's: demoted to the host tier, written through to disk), then A
 * (restored from the host tier); then a second engine on the same directory without a host
 * tier: A (read from disk). */
static int op_engine_tiers(void *ctx) {
    (void)ctx;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/oom_tiers_%d_%u", tu_tmp_dir(), (int)getpid(), tier_run++);
    int32_t a[18], b[18];
    for (int i = 0; i < 18; i++) a[i] = 100 + 7 * i, b[i] = 5000 + 11 * i;
    engine_opts o = {.n_ctx = 32,
                     .pool_tokens = 32,
                     .page_tokens = 4,
                     .max_seqs = 1,
                     .host_cache_mb = 1,
                     .cache_dir = dir,
                     .disk_chunk_pages = 2,
                     .cache_dir_max_bytes = 64u << 20};
    engine e; /* engine_free after a failed engine_init too: it frees what init made */
    int rc = engine_init(&e, loaded, &o);
    if (!rc) {
        int r1 = tier_request(&e, a, 18, true), r2 = tier_request(&e, b, 18, false), r3 = tier_request(&e, a, 18, true);
        rc = r1 || r2 || r3;
        if (rc) tier_check(&e, a, 18);
    }
    engine_free(&e);
    o.host_cache_mb = 0;
    if (!rc) {
        if (!(rc = engine_init(&e, loaded, &o)) && (rc = tier_request(&e, a, 18, true))) tier_check(&e, a, 18);
        engine_free(&e);
    }
    paused = true;
    if (tu_remove_tree(dir)) fail_msg("cannot remove %s", dir);
    paused = false;
    return rc ? -1 : 0;
}

/* ---- the disk tier alone ---- */

#define DISK_PROMPTS 3
#define DISK_CHUNKS 2 /* whole chunks per prompt */
#define DISK_CT 8     /* tokens a chunk: 2 pages of 4 tokens */
static unsigned disk_run;
static uint8_t disk_ns[KV_DISK_HASH_BYTES] = {0x5a, 0x17};

static void disk_prompt(uint32_t p, int32_t *ids) {
    for (uint32_t i = 0; i < DISK_CHUNKS * DISK_CT; i++) ids[i] = (int32_t)(300 * (p + 1) + 7 * i);
}
static uint8_t disk_byte(uint32_t p, uint32_t k, uint32_t slot, uint64_t b) {
    return (uint8_t)(b * 7 + slot * 31 + k * 57 + p * 101);
}

/* A tier without a device on dir (chunk 2 pages of a 64-byte-page layout, a budget of
 * `budget` chunks). */
static int disk_open(kv_disk_tier *d, const char *dir, uint32_t budget) {
    kv_layout lay;
    if (kv_layout_init(&lay, 1, 1, 4, 4)) return -1;
    uint64_t chunk = KV_DISK_HEADER_BYTES + 4 * DISK_CT + 2 * lay.page_bytes + KV_DISK_MAC_BYTES;
    if (kv_disk_init(d, NULL, NULL, &lay, disk_ns, dir, 2, budget * chunk)) return -1;
    d->quiet = true; /* a failed write's line would repeat in every run; last_msg keeps it */
    return 0;
}

/* Writes prompt p's chunks from staging slots filled with its pattern; reads them back when
 * `read`: 1 each served with the pattern, 0 each missing; -1 on error. */
static int disk_prompt_io(kv_disk_tier *d, uint32_t p, bool write, bool read, uint32_t *served) {
    int32_t ids[DISK_CHUNKS * DISK_CT];
    uint8_t h[DISK_CHUNKS][KV_DISK_HASH_BYTES], zero[KV_DISK_HASH_BYTES] = {0};
    disk_prompt(p, ids);
    if (kv_disk_chain(d, ids, DISK_CHUNKS, h)) return -1;
    for (uint32_t k = 0; k < DISK_CHUNKS; k++) {
        const uint8_t *prev = k ? h[k - 1] : zero;
        if (write) {
            for (uint32_t s = 0; s < d->chunk_pages; s++)
                for (uint64_t b = 0; b < d->lay.page_bytes; b++)
                    ((uint8_t *)kv_disk_stage_ptr(d, s))[b] = disk_byte(p, k, s, b);
            if (kv_disk_store(d, ids + k * DISK_CT, k, prev, h[k], NULL) < 0) return -1;
        }
        if (read) {
            int got = kv_disk_read(d, ids + k * DISK_CT, k, prev, h[k]);
            if (got < 0) return -1;
            if (got == 0) continue;
            ++*served;
            for (uint32_t s = 0; s < d->chunk_pages; s++)
                for (uint64_t b = 0; b < d->lay.page_bytes; b++)
                    if (((uint8_t *)kv_disk_stage_ptr(d, s))[b] != disk_byte(p, k, s, b))
                        fail_msg("disk tier: chunk %u of prompt %u served with other bytes", k, p);
        }
    }
    return 0;
}

/* After a run, allocations unfailing: no temp file under dir, and a fresh tier serves every
 * chunk file there whole (none rejected). */
static void disk_check(const char *dir) {
    paused = true;
    DIR *top = opendir(dir);
    struct dirent *e;
    uint32_t files = 0;
    while (top && (e = readdir(top))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "key")) continue;
        char nsdir[900];
        snprintf(nsdir, sizeof nsdir, "%s/%s", dir, e->d_name);
        DIR *in = opendir(nsdir);
        struct dirent *f;
        while (in && (f = readdir(in))) {
            if (strstr(f->d_name, ".tmp"))
                fail_msg("disk tier: a temp file left after a failed allocation: %s", f->d_name);
            if (strstr(f->d_name, ".kv")) files++;
        }
        if (in) closedir(in);
    }
    if (top) closedir(top);
    kv_disk_tier d = {0};
    uint32_t served = 0;
    if (disk_open(&d, dir, 16)) fail_msg("disk tier: cannot open the directory again: %s", cd_errmsg());
    for (uint32_t p = 0; p < DISK_PROMPTS; p++)
        if (disk_prompt_io(&d, p, false, true, &served)) fail_msg("disk tier: a read failed: %s", cd_errmsg());
    if (d.rejected || served != files)
        fail_msg("disk tier: %llu files rejected, %u served of %u chunk files", (unsigned long long)d.rejected, served,
                 files);
    kv_disk_free(&d);
    paused = false;
}

/* Init (the directory, its key, the scan), three prompts written with room for three chunks
 * (the third evicts the first's), the last two read, a rescan, then a second tier on the same
 * directory reading everything. */
static int op_disk(void *ctx) {
    (void)ctx;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/oom_disk_%d_%u", tu_tmp_dir(), (int)getpid(), disk_run++);
    kv_disk_tier d = {0}, d2 = {0};
    uint32_t served = 0, served2 = 0;
    int rc = disk_open(&d, dir, 3);
    for (uint32_t p = 0; !rc && p < DISK_PROMPTS; p++) rc = disk_prompt_io(&d, p, true, p > 0, &served);
    if (!rc) rc = kv_disk_rescan(&d);
    kv_disk_free(&d);
    if (!rc) rc = disk_open(&d2, dir, 3);
    for (uint32_t p = 0; !rc && p < DISK_PROMPTS; p++) rc = disk_prompt_io(&d2, p, false, true, &served2);
    kv_disk_free(&d2);
    if (!rc && (served < 2 || !served2)) rc = cd_fail("disk tier: %u and %u chunks served", served, served2);
    disk_check(dir);
    paused = true;
    if (tu_remove_tree(dir)) fail_msg("cannot remove %s", dir);
    paused = false;
    return rc ? -1 : 0;
}

/* ---- tests ---- */

static void test_engine(void **state) {
    (void)state;
    oom_loop("engine_init + generate", op_engine, NULL, 8, 12);
}

static void test_engine_tiers(void **state) {
    (void)state;
    tier_ref_n = tier_restored = tier_from_disk = 0;
    assert_int_equal(op_engine_tiers(NULL), 0); /* the reference tokens, and the tiers really used */
    if (!tier_restored || !tier_from_disk)
        fail_msg("the run did not reach the tiers: %u tokens restored from the host, %u read from disk", tier_restored,
                 tier_from_disk);
    oom_loop("engine over GPU, host and disk tiers", op_engine_tiers, NULL, 0, 8); /* ~4 s a run */
}

/* Vulkan faults in the runtime layer: every device-memory allocation of the engine's set-up
 * and every queue submission of set-up and a request, failing in turn (as
 * VK_ERROR_OUT_OF_DEVICE_MEMORY / VK_ERROR_DEVICE_LOST): a message, no crash, no leak. */
static void test_vulkan_faults(void **state) {
    (void)state;
    fault = DEVICE_MEMORY;
    oom_loop("engine with a device allocation failing", op_engine, NULL, 64, 0);
    fault = SUBMIT;
    oom_loop("engine with a submission failing", op_engine, NULL, 64, 0);
    fault = HEAP;
}

static void test_disk_tier(void **state) {
    (void)state;
    oom_loop("disk tier: init, writes, eviction, reads, rescan, reopen", op_disk, NULL, 1000, 0);
}

static void test_model_load(void **state) {
    (void)state;
    oom_loop("model_load", op_load, NULL, 40, 60);
}

/* A split model's shards: found, opened, checked and joined (runtime/gguf/gguf_split.c). */
static int op_open_split(void *ctx) {
    gguf_file *f;
    if (gguf_open(&f, ctx)) return -1;
    int rc = f->n_shards == 3 && f->n_tensors == 5 && gguf_find_tensor(f, "t4") ? 0 : cd_fail("wrong model");
    gguf_close(f);
    return rc;
}

static void test_open_split(void **state) {
    (void)state;
    static float data[8];
    char prefix[512], name[8];
    static char first[600];
    snprintf(prefix, sizeof prefix, "%s/oom_split", tu_tmp_dir());
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const[]){"a", "b"}, 2);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "t%d", i);
        assert_int_equal(gguf_writer_add_tensor(w, name, QTYPE_F32, 1, (int64_t[]){8}, data, NULL, NULL), 0);
    }
    uint32_t n;
    if (gguf_writer_write_split(w, prefix, 2, &n)) fail_msg("%s", cd_errmsg());
    gguf_writer_free(w);
    gguf_split_path(first, sizeof first, prefix, 0, n);
    oom_loop("gguf_open of a split model", op_open_split, first, 1000, 0);
}

static void test_tokenizer(void **state) {
    (void)state;
    oom_loop("tok_encode + tok_decode", op_tokenize, "Hello, world! <|im_start|>user\nÜber 123 tokens\t😀 done", 400, 0);
}

static void test_chat_template(void **state) {
    (void)state;
    oom_loop("chat_render", op_chat, NULL, 400, 0);
    static int coder = 1;
    oom_loop("chat_render qwen3-coder + toolcall_parse_as", op_chat, &coder, 400, 0);
}

static void test_radix(void **state) {
    (void)state;
    oom_loop("radix insert + tail + match", op_radix, NULL, 400, 0);
}

static int setup(void **state) {
    (void)state;
    live = __real_calloc(SET_CAP, sizeof *live);
    model_path = tu_make_model("oom_tiny.gguf", "tiny", NULL, 3, NULL);
    if (!live || !model_path) return -1;
    return model_load(&loaded, model_path, (model_load_opts){.skip_weight_hash = true});
}

static int teardown(void **state) {
    (void)state;
    model_free(loaded);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_load),    cmocka_unit_test(test_open_split),   cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_chat_template), cmocka_unit_test(test_radix),        cmocka_unit_test(test_disk_tier),
        cmocka_unit_test(test_engine),        cmocka_unit_test(test_engine_tiers), cmocka_unit_test(test_vulkan_faults),
    };
    return tu_status(cmocka_run_group_tests(tests, setup, teardown));
}
