/* cinder bench --restore-bench: restoring an N-token prefix from the host tier vs recomputing
 * it (prefill), for N = 512, 4800 and 16000 tokens (those the model's context allows).
 *
 * Per N, through the engine's own prefix cache and host tier:
 *   recompute  gpu_prefill of N seeded random ids from an empty context (the KV a miss costs)
 *   cache      kv_cache_insert of that sequence, then kv_cache_reclaim of the whole pool: every
 *              page is demoted (the device->host batch is timed too)
 *   restore    kv_cache_match + kv_cache_restore: allocate the GPU pages, copy the slots back,
 *              radix_restore (what attach_prefix does on a host hit)
 * Each of --repeat rounds starts from empty tiers (kv_cache_clear); medians are reported. The copies are
 * synchronous (one command buffer per batch, waited on), so the times are wall times. */
#include "tools/bench_restore.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/engine/engine.h"
#include "tools/cli.h"

typedef struct restore_row {
    uint32_t n, pages;
    uint64_t bytes;
    double recompute_ms, demote_ms, restore_ms;
} restore_row;

/* One N: recompute (timed), cache, then repeat x (demote, restore timed). */
static int bench_n(engine *e, uint32_t n, uint32_t repeat, uint64_t seed, restore_row *row) {
    gpu_model *g = &e->g;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    double *rec = calloc(repeat, sizeof *rec), *dem = calloc(repeat, sizeof *dem), *res = calloc(repeat, sizeof *res);
    if (!ids || !rec || !dem || !res) { free(ids); free(rec); free(dem); free(res); return cd_fail("out of memory"); }
    rng r;
    rng_seed(&r, seed + n);
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)rng_below(&r, e->m->cfg.n_vocab);
    int rc = 0;
    *row = (restore_row){.n = n};
    for (uint32_t k = 0; !rc && k < repeat; k++) {
        kv_seq_free(&g->pages, &g->seq);
        kv_cache_clear(&e->cache); /* each round from empty tiers: the prefill never reclaims */
        double t0 = cli_now_ms();
        if (gpu_prefill(g, ids, n, 0, false)) { rc = -1; break; }
        rec[k] = cli_now_ms() - t0;
        if (kv_cache_insert(&e->cache, ids, &g->seq)) { rc = -1; break; }
        kv_seq_free(&g->pages, &g->seq);
        double h0 = e->host.ms_to_host;
        kv_cache_reclaim(&e->cache, g->pages.n_pages); /* everything cached goes to the host */
        dem[k] = e->host.ms_to_host - h0;
        radix_match m;
        if (kv_cache_match(&e->cache, ids, n, &m)) { rc = -1; break; }
        uint32_t want = n / g->page_tokens, taken = 0;
        if (m.n_gpu_pages != 0 || m.n_restore != want) {
            rc = cd_fail("restore bench: %u tokens: the host tier holds %u of %u pages (%u still on the GPU); "
                         "the tier or the pool is too small", n, m.n_restore, want, m.n_gpu_pages);
            radix_release(&e->cache.tree, &m);
            break;
        }
        t0 = cli_now_ms();
        int got = kv_cache_restore(&e->cache, &m, &taken);
        res[k] = cli_now_ms() - t0;
        radix_release(&e->cache.tree, &m);
        if (got < 0) { rc = -1; break; }
        if (got > 0 || taken != want) { rc = cd_fail("restore bench: %u tokens: not restored", n); break; }
        row->pages = want;
        row->bytes = (uint64_t)want * g->lay.page_bytes;
    }
    if (!rc) {
        row->recompute_ms = cli_median(rec, repeat);
        row->demote_ms = cli_median(dem, repeat);
        row->restore_ms = cli_median(res, repeat);
    }
    kv_cache_clear(&e->cache);
    free(ids); free(rec); free(dem); free(res);
    return rc;
}

int bench_restore(const char *model_path, model *m, uint32_t repeat, uint64_t seed, bool json) {
    static const uint32_t sizes[] = {512, 4800, 16000};
    uint32_t max_n = 0, n_sizes = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] < m->cfg.n_ctx_train) max_n = sizes[i], n_sizes++;
    if (!n_sizes) return cli_error("bench", "the model's context (%u) is shorter than 512 tokens", m->cfg.n_ctx_train);
    engine e;
    engine_opts eo = {.n_ctx = max_n + 1, .pool_tokens = max_n + 64, .page_tokens = 16};
    /* the host tier: the largest N, from the page size the engine will use */
    kv_layout lay = {0};
    if (kv_layout_init(&lay, m->cfg.n_layer, m->cfg.n_head_kv, m->cfg.head_dim, 16))
        return cli_error("bench", "%s", cd_errmsg());
    uint64_t need = (uint64_t)(max_n / 16 + 1) * lay.page_bytes;
    eo.host_cache_mb = (uint32_t)(need / (1u << 20) + 2);
    if (engine_init(&e, m, &eo) || engine_warm_up(&e)) {
        engine_free(&e);
        return cli_error("bench", "%s", cd_errmsg());
    }
    /* one small round first: the copy path's first use stays out of the numbers */
    restore_row rows[3], warm;
    int rc = bench_n(&e, 64, 1, seed, &warm);
    for (uint32_t i = 0; !rc && i < n_sizes; i++) {
        rc = bench_n(&e, sizes[i], repeat, seed, &rows[i]);
        if (!rc && !json) /* progress: a 16000-token prefill takes minutes on lavapipe */
            fprintf(stderr, "%u tokens: recompute %.1f ms, restore %.2f ms\n", sizes[i], rows[i].recompute_ms,
                    rows[i].restore_ms);
    }
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
            json_array_append_new(
                a, json_pack("{s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:f}", "tokens", w->n, "pages", w->pages,
                             "bytes", (json_int_t)w->bytes, "recompute_ms", w->recompute_ms, "demote_ms",
                             w->demote_ms, "restore_ms", w->restore_ms, "restore_bytes_per_s",
                             w->restore_ms > 0 ? w->bytes / (w->restore_ms / 1e3) : 0.0, "speedup",
                             w->restore_ms > 0 ? w->recompute_ms / w->restore_ms : 0.0));
        }
        json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:o}", "model", model_path, "device", dev, "page_size", 16,
                              "repeat", repeat, "sizes", a);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s);
        free(s);
        json_decref(j);
    } else {
        printf("model   %s\ndevice  %s\npage 16 tokens, %.1f KiB per page; medians of %u; copies synchronous\n",
               model_path, dev, e.g.lay.page_bytes / 1024.0, repeat);
        printf("%8s %7s %10s %13s %11s %11s %12s %9s\n", "tokens", "pages", "MiB", "recompute ms", "demote ms",
               "restore ms", "restore GB/s", "speedup");
        for (uint32_t i = 0; i < n_sizes; i++) {
            restore_row *w = &rows[i];
            printf("%8u %7u %10.2f %13.1f %11.2f %11.2f %12.2f %8.1fx\n", w->n, w->pages, w->bytes / 1048576.0,
                   w->recompute_ms, w->demote_ms, w->restore_ms,
                   w->restore_ms > 0 ? w->bytes / (w->restore_ms / 1e3) / 1e9 : 0,
                   w->restore_ms > 0 ? w->recompute_ms / w->restore_ms : 0);
        }
        if (n_sizes < sizeof sizes / sizeof sizes[0])
            printf("(sizes from %u tokens up skipped: the model's context is %u)\n", sizes[n_sizes], m->cfg.n_ctx_train);
    }
    engine_free(&e);
    return 0;
}
