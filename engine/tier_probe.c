#include "engine/tier_probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"

int engine_tier_probe_opts(const model *m, uint32_t max_n, engine_opts *eo) {
    kv_layout lay = {0};
    if (kv_layout_init(&lay, m->cfg.n_layer, m->cfg.n_head_kv, m->cfg.head_dim, 16)) return -1;
    eo->n_ctx = max_n + 1, eo->pool_tokens = max_n + 64, eo->page_tokens = 16;
    eo->host_cache_mb = (uint32_t)((uint64_t)(max_n / 16 + 1) * lay.page_bytes / (1u << 20) + 2);
    /* room for the largest prefix's chunks (a smaller one's are evicted) */
    uint64_t chunk = KV_DISK_HEADER_BYTES + KV_DISK_CHUNK_TOKENS_DEFAULT * 4ull +
        (KV_DISK_CHUNK_TOKENS_DEFAULT / 16) * lay.page_bytes + KV_DISK_MAC_BYTES;
    if (!eo->cache_dir_max_bytes) eo->cache_dir_max_bytes = (max_n / KV_DISK_CHUNK_TOKENS_DEFAULT + 1) * chunk;
    return 0;
}

void engine_tier_info_get(const engine *e, engine_tier_info *o) {
    *o = (engine_tier_info){.page_tokens = e->pool.lay.page_tokens,
                            .chunk_tokens = e->disk.chunk_tokens,
                            .page_bytes = e->pool.lay.page_bytes,
                            .disk_dir = e->disk.dir,
                            .async_copies = e->vk && e->vk->dev.copies.sem};
}

/* Asks the kernel to drop the page cache of every chunk file (the cold read). */
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

/* Every chunk of ids[0 .. n_chunks * chunk_tokens) from disk into fresh GPU pages, as a disk
 * hit does (timed, pages given back after). */
static int disk_load_all(engine *e, const int32_t *ids, uint32_t n_chunks, double *ms, uint64_t *bytes) {
    kv_disk_tier *d = &e->disk;
    uint32_t C = d->chunk_pages, *pg = malloc(((size_t)n_chunks * C + 1) * sizeof *pg);
    uint8_t(*h)[KV_DISK_HASH_BYTES] = malloc(((size_t)n_chunks + 1) * KV_DISK_HASH_BYTES);
    static const uint8_t zero[KV_DISK_HASH_BYTES];
    if (!pg || !h) {
        free(pg);
        free(h);
        return cd_fail("out of memory");
    }
    uint64_t b0 = d->bytes_read, rej0 = d->rejected;
    uint32_t got = 0;
    double t0 = cd_now_ms();
    int rc = kv_disk_chain(d, ids, n_chunks, h);
    for (uint32_t c = 0; !rc && c < n_chunks; c++) {
        int r = kv_disk_read(d, ids + (size_t)c * d->chunk_tokens, c, c ? h[c - 1] : zero, h[c]);
        if (r <= 0) {
            rc = r < 0 ? -1
                       : cd_fail("restore bench: chunk %u was not read back (%s)", c,
                                 d->rejected > rej0 ? d->last_msg : "no file");
            break;
        }
        for (uint32_t i = 0; i < C; i++)
            if (kv_page_alloc(&e->pool.pages, &pg[got + i])) {
                rc = -1;
                break;
            }
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

/* Demotes every cached page to the host tier and restores the prefix from there (both timed). */
static int host_round(engine *e, const int32_t *ids, uint32_t n, engine_tier_round *o) {
    double t0 = cd_now_ms();
    kv_cache_reclaim(&e->cache, e->pool.pages.n_pages); /* everything cached goes to the host */
    if (kv_host_sync(&e->host)) return -1;
    o->demote_ms = cd_now_ms() - t0;
    radix_match m;
    if (kv_cache_match(&e->cache, NULL, ids, n, &m)) return -1;
    uint32_t want = n / e->pool.lay.page_tokens, taken = 0;
    if (m.n_gpu_pages != 0 || m.n_restore != want) {
        kv_cache_release(&e->cache, &m);
        return cd_fail("restore bench: %u tokens: the host tier holds %u of %u pages (%u still on the GPU); "
                       "the tier or the pool is too small",
                       n, m.n_restore, want, m.n_gpu_pages);
    }
    t0 = cd_now_ms();
    int got = kv_cache_restore(&e->cache, &m, &taken);
    if (got == 0 && kv_host_sync(&e->host)) got = -1;
    o->restore_ms = cd_now_ms() - t0;
    kv_cache_release(&e->cache, &m);
    if (got < 0) return -1;
    if (got > 0 || taken != want) return cd_fail("restore bench: %u tokens: not restored", n);
    o->pages = want, o->bytes = (uint64_t)want * e->pool.lay.page_bytes;
    return 0;
}

int engine_tier_round_run(engine *e, const int32_t *ids, uint32_t n, engine_tier_round *o) {
    *o = (engine_tier_round){0};
    uint32_t n_chunks = n / e->disk.chunk_tokens;
    kv_seq s;
    kv_seq_init(&s);
    kv_cache_clear(&e->cache); /* from empty tiers: the prefill never reclaims */
    double t0 = cd_now_ms();
    int rc = prefill_seq(e, &s, ids, n);
    o->recompute_ms = cd_now_ms() - t0;
    if (!rc)
        rc = kv_cache_insert(&e->cache, NULL, ids, &s, false) || disk_store_all(e, &s, ids, n_chunks, &o->write_ms);
    kv_seq_free(&e->pool.pages, &s);
    if (!rc) rc = host_round(e, ids, n, o);
    /* the disk: from empty tiers, warm (page cache) then cold (dropped) */
    if (!rc) {
        kv_cache_clear(&e->cache);
        rc = disk_load_all(e, ids, n_chunks, &o->disk_ms, &o->disk_bytes);
    }
    if (!rc) {
        drop_page_cache(e->disk.dir);
        rc = disk_load_all(e, ids, n_chunks, &o->disk_cold_ms, &o->disk_bytes);
    }
    o->disk_tokens = n_chunks * e->disk.chunk_tokens;
    kv_cache_clear(&e->cache);
    return rc ? -1 : 0;
}
