#include "tools/bench_trace.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/text/conversation.h"
#include "engine/engine.h"
#include "tools/cli.h"
#include "tools/reply_json.h"
#include "tools/svg_plot.h"
#include "tools/trace.h"

/* ---- the replay ---- */

/* A request in flight (--concurrency): its trace line and its chat session, if any. */
typedef struct flight {
    size_t no; /* trace line, from 1 */
    uint32_t handle;
    double submit_ms;  /* cd_now_ms() at submit (hooks) */
    double prepare_ms; /* rendering and tokenizing its prompt before that */
    conversation *c;   /* chat traces: the session the reply joins */
} flight;

typedef struct replay {
    const bench_trace_opts *o;
    FILE *dump; /* --dump-prompts */
    trace t;
    engine e;
    json_t *requests; /* per-request results, in trace order (filled as requests finish) */
    flight *fl;       /* [concurrency] */
    uint32_t n_fl;
    double wall_ms;
    bool quiet; /* nothing printed (the comparison run of --plot) */
} replay;

static json_t *request_json(const engine_reply *r) {
    json_t *gen = json_array();
    for (uint32_t i = 0; i < r->n; i++) json_array_append_new(gen, json_integer(r->ids[i]));
    double dec = r->n > 1 && r->decode_ms > 0 ? (r->n - 1) / (r->decode_ms / 1e3) : 0;
    return json_pack("{s:i, s:i, s:i, s:f, s:i, s:i, s:i, s:f, s:f, s:f, s:o, s:s}", "prompt_tokens", r->prompt_tokens,
                     "cached_tokens", r->cached_tokens, "prefilled_tokens", r->prefilled_tokens, "hit_rate",
                     r->prompt_tokens ? (double)r->cached_tokens / r->prompt_tokens : 0.0, "evicted_pages",
                     (json_int_t)r->evicted_pages, "restored_tokens", r->restored_tokens, "demoted_pages",
                     (json_int_t)r->demoted_pages, "restore_ms", r->restore_ms, "ttft_ms", r->ttft_ms, "decode_tok_s",
                     dec, "generated", gen, "finish_reason", reply_finish_name(r));
}

/* Renders / reads trace line `no`, submits it, and puts it in flight. */
static int submit_line(replay *rp, trace_sessions *ss, size_t no) {
    double t0 = cd_now_ms();
    const json_t *req = json_array_get(rp->t.lines, no - 1);
    const tokenizer *tok = engine_tokenizer(&rp->e);
    uint32_t max_tokens;
    int32_t *ids = NULL;
    size_t n = 0;
    conversation *c = NULL;
    if (trace_max_tokens(req, no, &max_tokens)) return -1;
    if (rp->t.chat ? trace_chat_ids(ss, req, no, tok, &c, &ids, &n)
                   : trace_request_ids(req, no, engine_model(&rp->e)->cfg.n_vocab, &ids, &n))
        return -1;
    if (rp->dump) { /* "max_tokens:id,id,..." per request */
        fprintf(rp->dump, "%u:", max_tokens);
        for (size_t i = 0; i < n; i++) fprintf(rp->dump, i ? ",%d" : "%d", ids[i]);
        fputc('\n', rp->dump);
    }
    engine_request rq = {.ids = ids, .n = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n, .max_tokens = max_tokens};
    flight *f = &rp->fl[rp->n_fl];
    double t1 = cd_now_ms();
    int rc = engine_submit(&rp->e, &rq, &f->handle);
    free(ids);
    if (rc) return cd_fail_ctx("request %zu: ", no);
    f->no = no;
    f->c = c;
    f->submit_ms = t1;
    f->prepare_ms = t1 - t0;
    rp->n_fl++;
    return 0;
}

/* A finished request: its reply joins the session's history; its line and JSON. */
static int finish_line(replay *rp, const flight *f, engine_reply *r) {
    const tokenizer *tok = engine_tokenizer(&rp->e);
    int rc = 0;
    if (r->finish == ENGINE_ERROR) return cd_fail("request %zu failed", f->no);
    if (f->c) { /* the reply joins the session's history, its text without the end-of-turn token */
        char *text = NULL;
        rc = tok_decode(tok, r->ids, r->eog ? r->n - 1 : r->n, &text) || conv_reply(f->c, tok, text, r->ids, r->n);
        free(text);
    }
    if (!rp->o->json && !rp->quiet) {
        printf("%4zu %8u %8u %9u %6.1f%% %7llu %8u %10.1f %9.2f", f->no, r->prompt_tokens, r->cached_tokens,
               r->prefilled_tokens, r->prompt_tokens ? 100.0 * r->cached_tokens / r->prompt_tokens : 0,
               (unsigned long long)r->evicted_pages, r->restored_tokens, r->ttft_ms,
               r->n > 1 && r->decode_ms > 0 ? (r->n - 1) / (r->decode_ms / 1e3) : 0);
        if (engine_disk_on(&rp->e))
            printf(" %7u %6u %7u %8.1f %8.1f", r->disk_tokens, r->disk_chunks_read, r->disk_chunks_written,
                   r->disk_read_ms, r->disk_write_ms);
        putchar('\n');
    }
    const bench_trace_hooks *h = rp->o->hooks;
    if (!rc && h && h->reply && h->reply(h->ctx, f->no, r, f->submit_ms, f->prepare_ms)) rc = -1;
    json_t *rj = request_json(r);
    if (engine_disk_on(&rp->e)) reply_json_disk(rj, r);
    json_array_set_new(rp->requests, f->no - 1, rj);
    return rc;
}

/* Whether trace line `no` may start now: a chat line waits for its session's request in flight. */
static bool may_start(const replay *rp, size_t no) {
    if (!rp->t.chat) return true;
    const char *name = json_string_value(json_object_get(json_array_get(rp->t.lines, no - 1), "session"));
    for (uint32_t k = 0; name && k < rp->n_fl; k++) {
        const char *other =
            json_string_value(json_object_get(json_array_get(rp->t.lines, rp->fl[k].no - 1), "session"));
        if (other && !strcmp(other, name)) return false;
    }
    return true;
}

/* The trace in order with up to `concurrency` requests in flight: lines start in trace order
 * (a chat line after its session's previous reply), the scheduler runs them together. */
static int run_trace(replay *rp, trace_sessions *ss, uint32_t concurrency) {
    size_t next = 1, n_lines = json_array_size(rp->t.lines);
    for (size_t i = 0; i < n_lines; i++) json_array_append_new(rp->requests, json_null());
    while (next <= n_lines || rp->n_fl) {
        while (next <= n_lines && rp->n_fl < concurrency && may_start(rp, next))
            if (submit_line(rp, ss, next++)) return -1;
        if (engine_step(&rp->e, NULL)) return -1;
        const bench_trace_hooks *h = rp->o->hooks;
        if (h && h->step && h->step(h->ctx, &rp->e)) return -1;
        for (uint32_t k = 0; k < rp->n_fl;) {
            engine_reply r;
            int got = engine_poll(&rp->e, rp->fl[k].handle, &r);
            if (got < 0) return -1;
            if (!got) {
                k++;
                continue;
            }
            flight f = rp->fl[k];
            rp->fl[k] = rp->fl[--rp->n_fl];
            int rc = finish_line(rp, &f, &r);
            engine_reply_free(&r);
            if (rc) return -1;
        }
    }
    return 0;
}

/* The context one request may need: the longest token prompt + its max_tokens, or 8192 for
 * chat traces (their prompts are known only when rendered). */
static uint32_t context_needed(const replay *rp) {
    if (rp->o->eo.n_ctx) return rp->o->eo.n_ctx;
    if (rp->t.chat) return 8192;
    uint32_t need = 16;
    size_t i;
    json_t *req;
    json_array_foreach(rp->t.lines, i, req) {
        uint32_t mt = 16;
        trace_max_tokens(req, i + 1, &mt);
        size_t n = json_array_size(json_object_get(req, "prompt_tokens")) + mt + 1;
        if (n > need) need = n < UINT32_MAX ? (uint32_t)n : UINT32_MAX;
    }
    return need;
}

static json_t *totals_json(const replay *rp) {
    const engine_stats st = engine_stats_get(&rp->e), *s = &st;
    engine_cache_info ci;
    engine_cache_info_get(&rp->e, &ci);
    uint64_t pages = (uint64_t)ci.gpu_cached + ci.gpu_pinned, pt = ci.page_tokens;
    json_t *j = json_pack(
        "{s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:I, s:I, s:I, s:f}", "requests", (json_int_t)s->requests, "prompt_tokens",
        (json_int_t)s->prompt_tokens, "cached_tokens", (json_int_t)s->cached_tokens, "hit_rate",
        s->prompt_tokens ? (double)s->cached_tokens / s->prompt_tokens : 0.0, "prefilled_tokens",
        (json_int_t)s->prefilled_tokens, "evicted_pages", (json_int_t)s->evicted_pages, "wall_ms", rp->wall_ms,
        "tree_nodes", (json_int_t)ci.nodes, "tree_pages", (json_int_t)pages, "tree_bytes", (json_int_t)ci.index_bytes,
        "tree_bytes_per_cached_token", pages ? (double)ci.index_bytes / ((double)pages * pt) : 0.0);
    uint32_t opt = trace_header_u32(&rp->t, "optimal_cached_tokens");
    if (json_object_get(rp->t.header, "optimal_cached_tokens"))
        json_object_set_new(j, "optimal_cached_tokens", json_integer(opt));
    double ttft = 0;
    size_t i;
    json_t *r;
    json_array_foreach(rp->requests, i, r) ttft += json_real_value(json_object_get(r, "ttft_ms"));
    json_object_set_new(j, "ttft_ms_sum", json_real(ttft));
    json_object_set_new(j, "restored_tokens", json_integer((json_int_t)s->restored_tokens));
    json_object_set_new(j, "restored_pages", json_integer((json_int_t)s->restored_pages));
    json_object_set_new(j, "demoted_pages", json_integer((json_int_t)s->demoted_pages));
    json_object_set_new(j, "gpu_pages", json_integer((json_int_t)pages));
    json_object_set_new(j, "host_slots", json_integer((json_int_t)(ci.host_slots - ci.host_free)));
    json_object_set_new(j, "host_slots_total", json_integer((json_int_t)ci.host_slots));
    json_object_set_new(j, "bytes_to_host", json_integer((json_int_t)ci.host_bytes_to_host));
    json_object_set_new(j, "bytes_to_gpu", json_integer((json_int_t)ci.host_bytes_to_gpu));
    json_object_set_new(j, "restore_ms", json_real(s->restore_ms));
    if (engine_disk_on(&rp->e)) {
        json_object_set_new(j, "disk_tokens", json_integer((json_int_t)s->disk_tokens));
        json_object_set_new(j, "disk_chunks_read", json_integer((json_int_t)s->disk_chunks_read));
        json_object_set_new(j, "disk_chunks_written", json_integer((json_int_t)s->disk_chunks_written));
        json_object_set_new(j, "disk_bytes_read", json_integer((json_int_t)s->disk_bytes_read));
        json_object_set_new(j, "disk_bytes_written", json_integer((json_int_t)s->disk_bytes_written));
        json_object_set_new(j, "disk_rejected", json_integer((json_int_t)s->disk_rejected));
        json_object_set_new(j, "disk_evicted_chunks", json_integer((json_int_t)s->disk_evicted_chunks));
        json_object_set_new(j, "disk_evicted_bytes", json_integer((json_int_t)s->disk_evicted_bytes));
        json_object_set_new(j, "disk_over_budget", json_integer((json_int_t)s->disk_over_budget));
        json_object_set_new(j, "disk_budget_bytes", json_integer((json_int_t)ci.disk_budget_bytes));
        json_object_set_new(j, "disk_used_bytes", json_integer((json_int_t)ci.disk_bytes));
        json_object_set_new(j, "disk_read_ms", json_real(s->disk_read_ms));
        json_object_set_new(j, "disk_write_ms", json_real(s->disk_write_ms));
    }
    return j;
}

static void report(const replay *rp, const char *name) {
    json_t *tot = totals_json(rp);
    engine_cache_info ci;
    engine_cache_info_get(&rp->e, &ci);
    if (rp->o->json) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:b, s:O, s:o}", "scenario", name, "kind",
                              rp->t.chat ? "chat" : "tokens", "model", rp->o->model, "device",
                              engine_device(&rp->e)->dev.info.props.deviceName, "page_size", ci.page_tokens,
                              "kv_pool_tokens", ci.gpu_pages * ci.page_tokens, "prefix_cache", engine_cache_on(&rp->e),
                              "requests", rp->requests, "totals", tot);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s);
        free(s);
        json_decref(j);
        return;
    }
    const engine_stats st = engine_stats_get(&rp->e), *s = &st;
    printf("total %8llu %8llu %9llu %6.1f%% %7llu   (TTFT sum %.1f ms, wall %.1f ms)\n",
           (unsigned long long)s->prompt_tokens, (unsigned long long)s->cached_tokens,
           (unsigned long long)s->prefilled_tokens, s->prompt_tokens ? 100.0 * s->cached_tokens / s->prompt_tokens : 0,
           (unsigned long long)s->evicted_pages, json_real_value(json_object_get(tot, "ttft_ms_sum")), rp->wall_ms);
    if (json_object_get(tot, "optimal_cached_tokens"))
        printf("optimal cached tokens %lld: %s\n",
               (long long)json_integer_value(json_object_get(tot, "optimal_cached_tokens")),
               (json_int_t)s->cached_tokens == json_integer_value(json_object_get(tot, "optimal_cached_tokens"))
                   ? "reached"
                   : "NOT reached");
    printf("index: %lld nodes, %lld pages, %.1f bytes per cached token\n",
           (long long)json_integer_value(json_object_get(tot, "tree_nodes")),
           (long long)json_integer_value(json_object_get(tot, "tree_pages")),
           json_real_value(json_object_get(tot, "tree_bytes_per_cached_token")));
    if (ci.host_slots) {
        printf("host tier: %u of %u slots in use, %llu GPU pages | %llu pages demoted, %llu restored (%llu tokens) | "
               "%.2f MiB to host, %.2f MiB to GPU | restore %.1f ms\n",
               ci.host_slots - ci.host_free, ci.host_slots, (unsigned long long)ci.gpu_cached + ci.gpu_pinned,
               (unsigned long long)s->demoted_pages, (unsigned long long)s->restored_pages,
               (unsigned long long)s->restored_tokens, ci.host_bytes_to_host / 1048576.0,
               ci.host_bytes_to_gpu / 1048576.0, s->restore_ms);
    }
    if (engine_disk_on(&rp->e))
        printf(
            "disk tier %s: %llu tokens served | %llu chunks read (%.2f MiB, %.1f ms), %llu written (%.2f MiB, %.1f ms) "
            "| %llu files rejected | budget %.1f MiB, %.2f MiB used, %llu chunks (%.2f MiB) evicted, %llu over "
            "budget\n",
            ci.disk_dir, (unsigned long long)s->disk_tokens, (unsigned long long)s->disk_chunks_read,
            s->disk_bytes_read / 1048576.0, s->disk_read_ms, (unsigned long long)s->disk_chunks_written,
            s->disk_bytes_written / 1048576.0, s->disk_write_ms, (unsigned long long)s->disk_rejected,
            ci.disk_budget_bytes / 1048576.0, ci.disk_bytes / 1048576.0, (unsigned long long)s->disk_evicted_chunks,
            s->disk_evicted_bytes / 1048576.0, (unsigned long long)s->disk_over_budget);
    json_decref(tot);
}

static int resolve(const bench_trace_opts *o, char *path, size_t cap, const char **name) {
    if (o->trace) {
        snprintf(path, cap, "%s", o->trace);
        const char *slash = strrchr(o->trace, '/');
        *name = slash ? slash + 1 : o->trace;
        return 0;
    }
    for (const char *p = o->scenario; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return cd_fail("scenario names are lower-case letters, digits and '_' (see scripts/scenarios/)");
    snprintf(path, cap, "%s/scripts/scenarios/%s.jsonl", CINDER_SOURCE_DIR, o->scenario);
    *name = o->scenario;
    return 0;
}

/* TTFT of every request, in trace order (*ttft malloc'd, n_requests of them). */
static int ttfts(const replay *rp, double **ttft, size_t *n) {
    *n = json_array_size(rp->requests);
    if (!(*ttft = calloc(*n ? *n : 1, sizeof **ttft))) return cd_fail("out of memory");
    for (size_t i = 0; i < *n; i++)
        (*ttft)[i] = json_real_value(json_object_get(json_array_get(rp->requests, i), "ttft_ms"));
    return 0;
}

/* One replay; with ttft set, the requests' TTFTs come back and nothing is printed when quiet. */
static int replay_trace(const bench_trace_opts *o, model *m, bool quiet, double **ttft, size_t *n_ttft) {
    char path[4096];
    const char *name = "";
    replay rp = {.o = o, .requests = json_array(), .quiet = quiet || o->quiet};
    trace_sessions ss = {0};
    uint32_t concurrency = o->concurrency ? o->concurrency : 1;
    int rc = resolve(o, path, sizeof path, &name) || trace_load(path, &rp.t);
    chat_template_match how;
    if (!rc && rp.t.chat &&
        chat_template_resolve(m->chat_template.ptr, (size_t)m->chat_template.len, o->chat_template, &ss.template, &how))
        rc = -1;
    if (!rc && o->dump_prompts && !(rp.dump = fopen(o->dump_prompts, "w")))
        rc = cd_fail("%s: cannot create", o->dump_prompts);
    if (!rc) {
        uint32_t n_ctx = context_needed(&rp),
                 pool = o->eo.pool_tokens ? o->eo.pool_tokens : trace_header_u32(&rp.t, "kv_pool_tokens");
        if (!pool) pool = n_ctx < 1024 ? 4096 : 4 * n_ctx; /* no header size: room for the whole trace */
        engine_opts eo = o->eo;
        eo.n_ctx = n_ctx, eo.pool_tokens = pool, eo.max_seqs = concurrency;
        if (!(rp.fl = calloc(concurrency, sizeof *rp.fl))) rc = cd_fail("out of memory");
        rc = rc || engine_init(&rp.e, m, &eo) || engine_warm_up(&rp.e);
    }
    if (!rc && o->hooks && o->hooks->start && o->hooks->start(o->hooks->ctx, &rp.e)) rc = -1;
    engine_cache_info ci = {0};
    if (!rc) engine_cache_info_get(&rp.e, &ci);
    if (!rc && !o->json && !rp.quiet)
        printf("scenario %s (%s, %zu requests) | page %u tokens | KV pool %u tokens | prefix cache %s | host tier %u "
               "MiB%s%s\n"
               "   #   prompt   cached prefilled    hit evicted restored    TTFT ms  decode t/s%s\n",
               name, rp.t.chat ? "chat" : "tokens", json_array_size(rp.t.lines), ci.page_tokens,
               ci.gpu_pages * ci.page_tokens, engine_cache_on(&rp.e) ? "on" : "off", o->eo.host_cache_mb,
               engine_disk_on(&rp.e) ? " | disk tier " : "", engine_disk_on(&rp.e) ? o->eo.cache_dir : "",
               engine_disk_on(&rp.e) ? "    disk chunks written  read ms write ms" : "");
    double t0 = cd_now_ms();
    if (!rc) rc = run_trace(&rp, &ss, concurrency);
    rp.wall_ms = cd_now_ms() - t0;
    if (!rc && !rp.quiet) report(&rp, name);
    if (!rc && ttft) rc = ttfts(&rp, ttft, n_ttft);
    if (rc) cli_error("bench", "%s", cd_errmsg());
    if (rp.dump && fclose(rp.dump) && !rc) rc = cli_error("bench", "%s: write failed", o->dump_prompts);
    trace_sessions_free(&ss);
    if (o->hooks && o->hooks->finish) o->hooks->finish(o->hooks->ctx, &rp.e);
    engine_free(&rp.e);
    free(rp.fl);
    trace_free(&rp.t);
    json_decref(rp.requests);
    return rc;
}

int bench_trace(const bench_trace_opts *o, model *m) {
    if (!o->plot) return replay_trace(o, m, false, NULL, NULL);
    /* --plot: the replay as asked, then again with the prefix cache the other way, TTFT per request of both */
    bench_trace_opts other = *o;
    other.eo.no_prefix_cache = !o->eo.no_prefix_cache;
    other.dump_prompts = NULL;
    other.eo.cache_dir = NULL; /* the comparison reads no disk tier the first run wrote */
    other.eo.cache_dir_max_bytes = 0;
    double *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = replay_trace(o, m, false, &a, &na);
    if (!rc) {
        if (!o->json)
            printf("plot: replaying again with the prefix cache %s\n", other.eo.no_prefix_cache ? "off" : "on");
        rc = replay_trace(&other, m, true, &b, &nb);
    }
    if (!rc) {
        const double *on = o->eo.no_prefix_cache ? b : a, *off = o->eo.no_prefix_cache ? a : b;
        svg_series s[2] = {{"prefix cache on", on}, {"prefix cache off", off}};
        char title[256];
        snprintf(title, sizeof title, "TTFT per request: %s (%s)", o->scenario ? o->scenario : o->trace, o->model);
        rc = svg_grouped(o->plot, title, "request", " ms", na < nb ? na : nb, s, 2);
        if (rc) rc = cli_error("bench", "%s", cd_errmsg());
        else if (!o->json) printf("plot: %s\n", o->plot);
    }
    free(a);
    free(b);
    return rc;
}
