/* cinder bench --restore-bench: restoring an N-token prefix from the host tier and from disk
 * files vs recomputing it (prefill), for N = 512, 4800 and 16000 tokens (those the model's
 * context allows).
 *
 * Per N, through the engine's own prefix cache, host tier and disk tier:
 *   recompute  the forward passes over N seeded random ids from an empty context, in chunks
 *              of the engine's pass size (the KV a miss costs)
 *   write      the whole 256-token chunks of the sequence to disk files (kv_disk_store: GPU ->
 *              staging -> file, atomic rename), first round only (later rounds find them known)
 *   cache      kv_cache_insert of that sequence, then kv_cache_reclaim of the whole pool: every
 *              page is demoted (the device->host batch is timed too, to completion: the
 *              reclaim plus kv_host_sync, as the copies are asynchronous)
 *   restore    kv_cache_match + kv_cache_restore: allocate the GPU pages, copy the slots back,
 *              radix_restore (what attach_prefix does on a host hit), plus kv_host_sync: the
 *              time until the pages are on the GPU (the engine instead lets the prefill wait)
 *   disk       from empty tiers: chain hashes, then per chunk kv_disk_read (read + validate:
 *              header, size, HMAC-SHA-256, tokens, chain) + allocate + kv_disk_upload (what
 *              attach_prefix does on a disk hit). The files were just written, so they are in the
 *              OS page cache: this is the warm case.
 *   disk cold  the same after fdatasync + posix_fadvise(DONTNEED) on every file, which asks the
 *              kernel to drop its cached pages (honoured on ext4/xfs; overlay file systems may
 *              ignore it, then this reads the page cache again)
 * The disk serves whole chunks only: N = 4800 is 18 chunks (4608 tokens), 16000 is 62 (15872).
 * Each of --repeat rounds starts from empty tiers (kv_cache_clear); medians are reported. The host
 * tier's copies are asynchronous where the device has timeline semaphores; the demote and restore
 * times include a kv_host_sync, so all times are wall times to completion. */
#include "tools/bench_restore.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "tools/cli.h"

typedef struct restore_row {
    uint32_t n, pages;
    uint64_t bytes;
    double recompute_ms, demote_ms, restore_ms;
    uint32_t disk_tokens;  /* whole chunks of n */
    uint64_t disk_bytes;   /* file bytes read (headers, tokens, pages, checksums) */
    double write_ms, disk_ms, cold_ms;
} restore_row;

/* Asks the kernel to drop the page cache of every chunk file (see the top comment). */
static void drop_page_cache(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    char path[4352];
    for (struct dirent *de; (de = readdir(dp));) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".kv")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    closedir(dp);
}

/* Removes the chunk files and the namespace directory of a temporary cache dir, then the dir. */
static void remove_cache_dir(const char *ns_dir, const char *dir) {
    DIR *dp = opendir(ns_dir);
    char path[4352];
    for (struct dirent *de; dp && (de = readdir(dp));) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", ns_dir, de->d_name);
        unlink(path);
    }
    if (dp) closedir(dp);
    rmdir(ns_dir);
    snprintf(path, sizeof path, "%s/key", dir); /* the tier's HMAC key */
    unlink(path);
    rmdir(dir);
}

/* Every chunk of ids[0 .. n_chunks * chunk_tokens) from disk into fresh GPU pages, as
 * attach_prefix does on a disk hit (timed, pages given back after). */
static int disk_load_all(engine *e, const int32_t *ids, uint32_t n_chunks, double *ms, uint64_t *bytes) {
    kv_disk_tier *d = &e->disk;
    uint32_t C = d->chunk_pages, *pg = malloc(((size_t)n_chunks * C + 1) * sizeof *pg);
    uint8_t(*h)[KV_DISK_HASH_BYTES] = malloc(((size_t)n_chunks + 1) * KV_DISK_HASH_BYTES);
    static const uint8_t zero[KV_DISK_HASH_BYTES];
    if (!pg || !h) { free(pg); free(h); return cd_fail("out of memory"); }
    uint64_t b0 = d->bytes_read, rej0 = d->rejected;
    uint32_t got = 0;
    double t0 = cd_now_ms();
    int rc = kv_disk_chain(d, ids, n_chunks, h);
    for (uint32_t c = 0; !rc && c < n_chunks; c++) {
        int r = kv_disk_read(d, ids + (size_t)c * d->chunk_tokens, c, c ? h[c - 1] : zero, h[c]);
        if (r <= 0) {
            rc = r < 0 ? -1 : cd_fail("restore bench: chunk %u was not read back (%s)", c,
                                      d->rejected > rej0 ? d->last_msg : "no file");
            break;
        }
        for (uint32_t i = 0; i < C; i++)
            if (kv_page_alloc(&e->pool.pages, &pg[got + i])) { rc = -1; break; }
        if (!rc) got += C;
        if (!rc) rc = kv_disk_upload(d, 0, pg + got - C, C);
    }
    *ms = cd_now_ms() - t0;
    *bytes = d->bytes_read - b0;
    for (uint32_t i = 0; i < got; i++) kv_page_release(&e->pool.pages, pg[i]);
    free(pg);
    free(h);
    return rc;
}

/* The write-through of every whole chunk of the sequence (timed). */
static int disk_store_all(engine *e, const kv_seq *s, const int32_t *ids, uint32_t n_chunks, double *ms) {
    kv_disk_tier *d = &e->disk;
    uint8_t(*h)[KV_DISK_HASH_BYTES] = malloc(((size_t)n_chunks + 1) * KV_DISK_HASH_BYTES);
    if (!h) return cd_fail("out of memory");
    uint64_t err0 = d->write_errors, over0 = d->over_budget;
    double t0 = cd_now_ms();
    int rc = kv_disk_chain(d, ids, n_chunks, h);
    if (!rc) rc = kv_disk_store_chunks(d, ids, n_chunks, h, s->pages);
    *ms = cd_now_ms() - t0;
    free(h);
    if (!rc && (d->write_errors > err0 || d->over_budget > over0)) rc = cd_fail("restore bench: %s", d->last_msg);
    return rc;
}

/* The K/V of ids[0 .. n) into fresh pages of s, as the scheduler prefills a prompt: pages
 * reserved in the pool, then passes of up to n_batch tokens on block-table row 0, no head. */
static int prefill_seq(engine *e, kv_seq *s, const int32_t *ids, uint32_t n) {
    gpu_model *g = &e->g;
    if (kv_pool_extend(&e->pool, s, n) || gpu_model_set_table(g, 0, s->pages, s->n_pages)) return -1;
    uint32_t *row = calloc(g->n_batch, sizeof *row), *pos = malloc(g->n_batch * sizeof *pos);
    int rc = row && pos ? 0 : cd_fail("out of memory");
    for (uint32_t at = 0; !rc && at < n;) {
        uint32_t t = n - at < g->n_batch ? n - at : g->n_batch;
        for (uint32_t i = 0; i < t; i++) pos[i] = at + i;
        gpu_batch b = {.n = t, .ids = ids + at, .row = row, .pos = pos};
        rc = gpu_forward_batch(g, &b, NULL);
        at += t;
    }
    free(row);
    free(pos);
    return rc;
}

/* One N: recompute (timed), cache, then repeat x (demote, restore timed). */
static int bench_n(engine *e, uint32_t n, uint32_t repeat, uint64_t seed, restore_row *row) {
    uint32_t pt = e->pool.lay.page_tokens;
    kv_seq s;
    kv_seq_init(&s);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    double *rec = calloc(repeat, sizeof *rec), *dem = calloc(repeat, sizeof *dem), *res = calloc(repeat, sizeof *res);
    double *dsk = calloc(repeat, sizeof *dsk), *cold = calloc(repeat, sizeof *cold);
    if (!ids || !rec || !dem || !res || !dsk || !cold) {
        free(ids); free(rec); free(dem); free(res); free(dsk); free(cold);
        return cd_fail("out of memory");
    }
    uint32_t n_chunks = n / e->disk.chunk_tokens;
    rng r;
    rng_seed(&r, seed + n);
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)rng_below(&r, e->m->cfg.n_vocab);
    int rc = 0;
    *row = (restore_row){.n = n};
    for (uint32_t k = 0; !rc && k < repeat; k++) {
        kv_seq_free(&e->pool.pages, &s);
        kv_cache_clear(&e->cache); /* each round from empty tiers: the prefill never reclaims */
        double t0 = cd_now_ms();
        if (prefill_seq(e, &s, ids, n)) { rc = -1; break; }
        rec[k] = cd_now_ms() - t0;
        if (kv_cache_insert(&e->cache, NULL, ids, &s, false)) { rc = -1; break; }
        double wms = 0;
        if (disk_store_all(e, &s, ids, n_chunks, &wms)) { rc = -1; break; }
        if (k == 0) row->write_ms = wms; /* later rounds find the chunks known: nothing to write */
        kv_seq_free(&e->pool.pages, &s);
        /* the copies are asynchronous: time them to completion (kv_host_sync) */
        t0 = cd_now_ms();
        kv_cache_reclaim(&e->cache, e->pool.pages.n_pages); /* everything cached goes to the host */
        if (kv_host_sync(&e->host)) { rc = -1; break; }
        dem[k] = cd_now_ms() - t0;
        radix_match m;
        if (kv_cache_match(&e->cache, NULL, ids, n, &m)) { rc = -1; break; }
        uint32_t want = n / pt, taken = 0;
        if (m.n_gpu_pages != 0 || m.n_restore != want) {
            rc = cd_fail("restore bench: %u tokens: the host tier holds %u of %u pages (%u still on the GPU); "
                         "the tier or the pool is too small", n, m.n_restore, want, m.n_gpu_pages);
            kv_cache_release(&e->cache, &m);
            break;
        }
        t0 = cd_now_ms();
        int got = kv_cache_restore(&e->cache, &m, &taken);
        if (got == 0 && kv_host_sync(&e->host)) got = -1;
        res[k] = cd_now_ms() - t0;
        kv_cache_release(&e->cache, &m);
        if (got < 0) { rc = -1; break; }
        if (got > 0 || taken != want) { rc = cd_fail("restore bench: %u tokens: not restored", n); break; }
        row->pages = want;
        row->bytes = (uint64_t)want * e->pool.lay.page_bytes;
        /* the disk: from empty tiers, warm (page cache) then cold (dropped) */
        kv_cache_clear(&e->cache);
        if (disk_load_all(e, ids, n_chunks, &dsk[k], &row->disk_bytes)) { rc = -1; break; }
        drop_page_cache(e->disk.dir);
        if (disk_load_all(e, ids, n_chunks, &cold[k], &row->disk_bytes)) { rc = -1; break; }
        row->disk_tokens = n_chunks * e->disk.chunk_tokens;
    }
    if (!rc) {
        row->recompute_ms = cli_median(rec, repeat);
        row->demote_ms = cli_median(dem, repeat);
        row->restore_ms = cli_median(res, repeat);
        row->disk_ms = cli_median(dsk, repeat);
        row->cold_ms = cli_median(cold, repeat);
    }
    kv_seq_free(&e->pool.pages, &s);
    kv_cache_clear(&e->cache);
    free(ids); free(rec); free(dem); free(res); free(dsk); free(cold);
    return rc;
}

static double per_s(uint64_t bytes, double ms) { return ms > 0 ? bytes / (ms / 1e3) : 0.0; }

int bench_restore(const char *model_path, model *m, uint32_t repeat, uint64_t seed, bool json, const engine_opts *flags) {
    const char *cache_dir = flags->cache_dir;
    static const uint32_t sizes[] = {512, 4800, 16000};
    uint32_t max_n = 0, n_sizes = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] < m->cfg.n_ctx_train) max_n = sizes[i], n_sizes++;
    if (!n_sizes) return cli_error("bench", "the model's context (%u) is shorter than 512 tokens", m->cfg.n_ctx_train);
    engine e;
    engine_opts eo = {.n_ctx = max_n + 1, .pool_tokens = max_n + 64, .page_tokens = 16,
                      .device_memory_mb = flags->device_memory_mb, .host_expert_layers = flags->host_expert_layers,
                      .host_experts_fixed = flags->host_experts_fixed};
    /* the host tier: the largest N, from the page size the engine will use */
    kv_layout lay = {0};
    if (kv_layout_init(&lay, m->cfg.n_layer, m->cfg.n_head_kv, m->cfg.head_dim, 16))
        return cli_error("bench", "%s", cd_errmsg());
    uint64_t need = (uint64_t)(max_n / 16 + 1) * lay.page_bytes;
    eo.host_cache_mb = (uint32_t)(need / (1u << 20) + 2);
    char tmp_dir[4096] = "";
    if (!cache_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof tmp_dir, "%s/cinder-restore-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmp_dir)) return cli_error("bench", "cannot create a temporary directory %s", tmp_dir);
        cache_dir = tmp_dir;
    }
    eo.cache_dir = cache_dir;
    /* the disk budget: the user's, else room for the largest N's chunks (older Ns are evicted) */
    uint64_t chunk = KV_DISK_HEADER_BYTES + KV_DISK_CHUNK_TOKENS_DEFAULT * 4ull + (KV_DISK_CHUNK_TOKENS_DEFAULT / 16) * lay.page_bytes + KV_DISK_MAC_BYTES;
    eo.cache_dir_max_bytes = flags->cache_dir_max_bytes ? flags->cache_dir_max_bytes : (max_n / KV_DISK_CHUNK_TOKENS_DEFAULT + 1) * chunk;
    if (engine_init(&e, m, &eo) || engine_warm_up(&e)) {
        cli_error("bench", "%s", cd_errmsg());
        if (*tmp_dir) remove_cache_dir(e.disk.dir ? e.disk.dir : tmp_dir, tmp_dir);
        engine_free(&e);
        return -1;
    }
    /* one small round first: the copy path's first use stays out of the numbers */
    restore_row rows[3], warm;
    int rc = bench_n(&e, 64, 1, seed, &warm);
    for (uint32_t i = 0; !rc && i < n_sizes; i++) {
        rc = bench_n(&e, sizes[i], repeat, seed, &rows[i]);
        if (!rc && !json) /* progress: a 16000-token prefill takes minutes on lavapipe */
            fprintf(stderr, "%u tokens: recompute %.1f ms, restore %.2f ms, disk %.2f ms (cold %.2f ms)\n", sizes[i],
                    rows[i].recompute_ms, rows[i].restore_ms, rows[i].disk_ms, rows[i].cold_ms);
    }
    if (*tmp_dir) remove_cache_dir(e.disk.dir, tmp_dir);
    if (rc) {
        cli_error("bench", "%s", cd_errmsg());
        engine_free(&e);
        return -1;
    }
    const char *dev = e.vk->dev.info.props.deviceName;
    if (json) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < n_sizes; i++) {
            restore_row *w = &rows[i];
            json_t *o = json_pack("{s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:f}", "tokens", w->n, "pages", w->pages,
                                  "bytes", (json_int_t)w->bytes, "recompute_ms", w->recompute_ms, "demote_ms",
                                  w->demote_ms, "restore_ms", w->restore_ms, "restore_bytes_per_s",
                                  per_s(w->bytes, w->restore_ms), "speedup",
                                  w->restore_ms > 0 ? w->recompute_ms / w->restore_ms : 0.0);
            json_object_set_new(o, "disk_tokens", json_integer(w->disk_tokens));
            json_object_set_new(o, "disk_bytes", json_integer((json_int_t)w->disk_bytes));
            json_object_set_new(o, "disk_write_ms", json_real(w->write_ms));
            json_object_set_new(o, "disk_ms", json_real(w->disk_ms));
            json_object_set_new(o, "disk_bytes_per_s", json_real(per_s(w->disk_bytes, w->disk_ms)));
            json_object_set_new(o, "disk_cold_ms", json_real(w->cold_ms));
            json_object_set_new(o, "disk_cold_bytes_per_s", json_real(per_s(w->disk_bytes, w->cold_ms)));
            json_array_append_new(a, o);
        }
        json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:o}", "model", model_path, "device", dev, "page_size", 16,
                              "repeat", repeat, "sizes", a);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s);
        free(s);
        json_decref(j);
    } else {
        printf("model   %s\ndevice  %s\npage 16 tokens, %.1f KiB per page; disk chunks of %u tokens in %s; medians of %u;"
               " host-tier copies timed to completion (%s)\n",
               model_path, dev, e.pool.lay.page_bytes / 1024.0, e.disk.chunk_tokens, *tmp_dir ? "a temporary dir" : cache_dir,
               repeat, e.vk->dev.copies.sem ? "asynchronous, + kv_host_sync" : "synchronous");
        printf("%8s %7s %10s %13s %11s %11s %12s %9s\n", "tokens", "pages", "MiB", "recompute ms", "demote ms",
               "restore ms", "restore GB/s", "speedup");
        for (uint32_t i = 0; i < n_sizes; i++) {
            restore_row *w = &rows[i];
            printf("%8u %7u %10.2f %13.1f %11.2f %11.2f %12.2f %8.1fx\n", w->n, w->pages, w->bytes / 1048576.0,
                   w->recompute_ms, w->demote_ms, w->restore_ms, per_s(w->bytes, w->restore_ms) / 1e9,
                   w->restore_ms > 0 ? w->recompute_ms / w->restore_ms : 0);
        }
        printf("\ndisk tier (read + validate + upload of the whole 256-token chunks; warm = files in the OS page\n"
               "cache, just written; cold = after fdatasync + posix_fadvise(DONTNEED), if the file system honours\n"
               "it; speedup = recompute ms x disk tokens / N, over cold ms)\n");
        printf("%8s %11s %10s %9s %9s %10s %10s %11s %9s\n", "tokens", "disk tokens", "file MiB", "write ms",
               "warm ms", "warm GB/s", "cold ms", "cold GB/s", "speedup");
        for (uint32_t i = 0; i < n_sizes; i++) {
            restore_row *w = &rows[i];
            double rec = w->n ? w->recompute_ms * w->disk_tokens / w->n : 0; /* recompute of the same tokens */
            printf("%8u %11u %10.2f %9.2f %9.2f %10.2f %10.2f %11.2f %8.1fx\n", w->n, w->disk_tokens,
                   w->disk_bytes / 1048576.0, w->write_ms, w->disk_ms, per_s(w->disk_bytes, w->disk_ms) / 1e9, w->cold_ms,
                   per_s(w->disk_bytes, w->cold_ms) / 1e9, w->cold_ms > 0 ? rec / w->cold_ms : 0);
        }
        if (n_sizes < sizeof sizes / sizeof sizes[0])
            printf("(sizes from %u tokens up skipped: the model's context is %u)\n", sizes[n_sizes], m->cfg.n_ctx_train);
    }
    engine_free(&e);
    return 0;
}
