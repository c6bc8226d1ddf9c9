/* cinder bench --restore-bench: restoring an N-token prefix from the host tier and from disk
 * files vs recomputing it (prefill), for N = 512, 4800 and 16000 tokens (those the model's
 * context allows). Each of --repeat rounds (engine/tier_probe.h says what one times) starts from
 * empty tiers; medians are reported. All times are wall times to completion. */
#include "tools/bench_restore.h"

#include <dirent.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "engine/tier_probe.h"
#include "tools/cli.h"

typedef struct restore_row {
    uint32_t n;
    engine_tier_round med; /* medians of the rounds (write_ms: the first round's) */
} restore_row;

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

/* The median over the rounds of the double at offset field; v has room for n. */
static double median_of(const engine_tier_round *r, uint32_t n, size_t field, double *v) {
    for (uint32_t k = 0; k < n; k++) memcpy(&v[k], (const char *)&r[k] + field, sizeof v[k]);
    return cli_median(v, n);
}

/* One N: --repeat rounds over the same seeded ids, medians. */
static int bench_n(engine *e, uint32_t n, uint32_t repeat, uint64_t seed, restore_row *row) {
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    engine_tier_round *r = calloc(repeat, sizeof *r);
    double *v = malloc(repeat * sizeof *v);
    if (!ids || !r || !v) {
        free(ids);
        free(r);
        free(v);
        return cd_fail("out of memory");
    }
    rng g;
    rng_seed(&g, seed + n);
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)rng_below(&g, engine_model(e)->cfg.n_vocab);
    int rc = 0;
    for (uint32_t k = 0; !rc && k < repeat; k++) rc = engine_tier_round_run(e, ids, n, &r[k]);
    if (!rc) {
        row->n = n, row->med = r[0]; /* sizes, and the write: later rounds find the chunks known */
        row->med.recompute_ms = median_of(r, repeat, offsetof(engine_tier_round, recompute_ms), v);
        row->med.demote_ms = median_of(r, repeat, offsetof(engine_tier_round, demote_ms), v);
        row->med.restore_ms = median_of(r, repeat, offsetof(engine_tier_round, restore_ms), v);
        row->med.disk_ms = median_of(r, repeat, offsetof(engine_tier_round, disk_ms), v);
        row->med.disk_cold_ms = median_of(r, repeat, offsetof(engine_tier_round, disk_cold_ms), v);
    }
    free(ids), free(r), free(v);
    return rc;
}

static double per_s(uint64_t bytes, double ms) { return ms > 0 ? bytes / (ms / 1e3) : 0.0; }

int bench_restore(const char *model_path, model *m, uint32_t repeat, uint64_t seed, bool json,
                  const engine_opts *flags) {
    const char *cache_dir = flags->cache_dir;
    static const uint32_t sizes[] = {512, 4800, 16000};
    uint32_t max_n = 0, n_sizes = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] < m->cfg.n_ctx_train) max_n = sizes[i], n_sizes++;
    if (!n_sizes) return cli_error("bench", "the model's context (%u) is shorter than 512 tokens", m->cfg.n_ctx_train);
    engine e;
    engine_opts eo = {.build_pipelines = true,
                      .device_memory_mb = flags->device_memory_mb,
                      .host_expert_layers = flags->host_expert_layers,
                      .host_experts_fixed = flags->host_experts_fixed,
                      .cache_dir_max_bytes = flags->cache_dir_max_bytes};
    if (engine_tier_probe_opts(m, max_n, &eo)) return cli_error("bench", "%s", cd_errmsg());
    char tmp_dir[4096] = "";
    if (!cache_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof tmp_dir, "%s/cinder-restore-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmp_dir)) return cli_error("bench", "cannot create a temporary directory %s", tmp_dir);
        cache_dir = tmp_dir;
    }
    eo.cache_dir = cache_dir;
    engine_tier_info ti;
    if (engine_init(&e, m, &eo) || engine_warm_up(&e)) {
        cli_error("bench", "%s", cd_errmsg());
        engine_tier_info_get(&e, &ti);
        if (*tmp_dir) remove_cache_dir(ti.disk_dir ? ti.disk_dir : tmp_dir, tmp_dir);
        engine_free(&e);
        return -1;
    }
    engine_tier_info_get(&e, &ti);
    /* one small round first: the copy path's first use stays out of the numbers */
    restore_row rows[3], warm;
    int rc = bench_n(&e, 64, 1, seed, &warm);
    for (uint32_t i = 0; !rc && i < n_sizes; i++) {
        rc = bench_n(&e, sizes[i], repeat, seed, &rows[i]);
        if (!rc && !json) /* progress: a 16000-token prefill takes minutes on lavapipe */
            fprintf(stderr, "%u tokens: recompute %.1f ms, restore %.2f ms, disk %.2f ms (cold %.2f ms)\n", sizes[i],
                    rows[i].med.recompute_ms, rows[i].med.restore_ms, rows[i].med.disk_ms, rows[i].med.disk_cold_ms);
    }
    if (*tmp_dir) remove_cache_dir(ti.disk_dir, tmp_dir);
    if (rc) {
        cli_error("bench", "%s", cd_errmsg());
        engine_free(&e);
        return -1;
    }
    const char *dev = engine_device(&e)->dev.info.props.deviceName;
    if (json) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < n_sizes; i++) {
            const engine_tier_round *w = &rows[i].med;
            json_t *o =
                json_pack("{s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:f}", "tokens", rows[i].n, "pages", w->pages, "bytes",
                          (json_int_t)w->bytes, "recompute_ms", w->recompute_ms, "demote_ms", w->demote_ms,
                          "restore_ms", w->restore_ms, "restore_bytes_per_s", per_s(w->bytes, w->restore_ms), "speedup",
                          w->restore_ms > 0 ? w->recompute_ms / w->restore_ms : 0.0);
            json_object_set_new(o, "disk_tokens", json_integer(w->disk_tokens));
            json_object_set_new(o, "disk_bytes", json_integer((json_int_t)w->disk_bytes));
            json_object_set_new(o, "disk_write_ms", json_real(w->write_ms));
            json_object_set_new(o, "disk_ms", json_real(w->disk_ms));
            json_object_set_new(o, "disk_bytes_per_s", json_real(per_s(w->disk_bytes, w->disk_ms)));
            json_object_set_new(o, "disk_cold_ms", json_real(w->disk_cold_ms));
            json_object_set_new(o, "disk_cold_bytes_per_s", json_real(per_s(w->disk_bytes, w->disk_cold_ms)));
            json_array_append_new(a, o);
        }
        json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:o}", "model", model_path, "device", dev, "page_size", 16,
                              "repeat", repeat, "sizes", a);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s);
        free(s);
        json_decref(j);
    } else {
        printf(
            "model   %s\ndevice  %s\npage 16 tokens, %.1f KiB per page; disk chunks of %u tokens in %s; medians of %u;"
            " host-tier copies timed to completion (%s)\n",
            model_path, dev, ti.page_bytes / 1024.0, ti.chunk_tokens, *tmp_dir ? "a temporary dir" : cache_dir, repeat,
            ti.async_copies ? "asynchronous, + kv_host_sync" : "synchronous");
        printf("%8s %7s %10s %13s %11s %11s %12s %9s\n", "tokens", "pages", "MiB", "recompute ms", "demote ms",
               "restore ms", "restore GB/s", "speedup");
        for (uint32_t i = 0; i < n_sizes; i++) {
            const engine_tier_round *w = &rows[i].med;
            printf("%8u %7u %10.2f %13.1f %11.2f %11.2f %12.2f %8.1fx\n", rows[i].n, w->pages, w->bytes / 1048576.0,
                   w->recompute_ms, w->demote_ms, w->restore_ms, per_s(w->bytes, w->restore_ms) / 1e9,
                   w->restore_ms > 0 ? w->recompute_ms / w->restore_ms : 0);
        }
        printf("\ndisk tier (read + validate + upload of the whole 256-token chunks; warm = files in the OS page\n"
               "cache, just written; cold = after fdatasync + posix_fadvise(DONTNEED), if the file system honours\n"
               "it; speedup = recompute ms x disk tokens / N, over cold ms)\n");
        printf("%8s %11s %10s %9s %9s %10s %10s %11s %9s\n", "tokens", "disk tokens", "file MiB", "write ms", "warm ms",
               "warm GB/s", "cold ms", "cold GB/s", "speedup");
        for (uint32_t i = 0; i < n_sizes; i++) {
            const engine_tier_round *w = &rows[i].med;
            double rec =
                rows[i].n ? w->recompute_ms * w->disk_tokens / rows[i].n : 0; /* recompute of the same tokens */
            printf("%8u %11u %10.2f %9.2f %9.2f %10.2f %10.2f %11.2f %8.1fx\n", rows[i].n, w->disk_tokens,
                   w->disk_bytes / 1048576.0, w->write_ms, w->disk_ms, per_s(w->disk_bytes, w->disk_ms) / 1e9,
                   w->disk_cold_ms, per_s(w->disk_bytes, w->disk_cold_ms) / 1e9,
                   w->disk_cold_ms > 0 ? rec / w->disk_cold_ms : 0);
        }
        if (n_sizes < sizeof sizes / sizeof sizes[0])
            printf("(sizes from %u tokens up skipped: the model's context is %u)\n", sizes[n_sizes],
                   m->cfg.n_ctx_train);
    }
    engine_free(&e);
    return 0;
}
