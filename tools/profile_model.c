#include "tools/profile_model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/model/gpu_model.h"
#include "runtime/vk/vk_ctx.h"
#include "tools/bench_trace.h"
#include "tools/cli.h"
#include "tools/device_card.h"
#include "tools/svg_plot.h"

#define TIMER_SPANS 32768u

enum { PREFILL, DECODE, N_PHASES };
static const char *const phase_name[N_PHASES] = {"prefill", "decode"};

/* One timed span of one recording, placed on the host clock for the trace. */
typedef struct span {
    cvk_timing t;
    uint32_t step;    /* index into prof.steps */
    double at_us;     /* start: the step's submit time on the host clock + the GPU offset */
    bool op;          /* a group span with no group inside it: one op (a kernel call) */
    const char *part; /* attention, moe, ffn, head, embed: from the enclosing layer span */
    char label[32];   /* t.label copied: a dispatch's label is its pipeline's name, which goes with
                       * the model (a replay reports after the engine is freed) */
} span;

/* One gpu_forward_batch call. */
typedef struct step {
    uint8_t phase;
    uint32_t tokens;
    double gpu_ms;  /* first timestamp to last */
    double wall_ms; /* the call, on the host */
    gpu_host_times host;
} step;

typedef struct prof {
    span *s;
    size_t n, cap;
    step *steps;
    uint32_t n_steps, cap_steps;
    uint64_t dispatches, copies, dropped; /* as the timer counted them, over all steps */
    double origin_ms;                     /* host clock at the start */
    cvk_timing *read;                     /* TIMER_SPANS: one recording's spans */
    const char *replay;                   /* the trace or scenario replayed, NULL: prefill + decode */
    json_t *requests;                     /* replay: per request, its cache work and latencies */
    double untimed_ms[N_PHASES];          /* the same work without timestamps, wall, per step */
    uint32_t untimed_steps[N_PHASES];
} prof;

/* ---- collecting ---- */

static int grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * size);
    if (!q) return cd_fail("out of memory (profile)");
    *p = q;
    *cap = c;
    return 0;
}

/* The part of the model a span belongs to, from its enclosing layer or head span. */
static const char *part_of(const cvk_timing *all, const cvk_timing *t, bool moe) {
    for (uint32_t i = t->parent; i != UINT32_MAX; i = all[i].parent) {
        if (!strcmp(all[i].label, "layer.attention")) return "attention";
        if (!strcmp(all[i].label, "layer.ffn")) return moe ? "moe" : "ffn";
        if (!strcmp(all[i].label, "head")) return "head";
    }
    return "embed";
}

static int collect(prof *p, cvk_timer *t, const model_config *cfg, const gpu_host_times *host, uint8_t phase,
                   uint32_t tokens, double wall_ms) {
    cvk_timing *buf = p->read;
    uint32_t n;
    CD_TRY(cvk_timer_read(t, buf, TIMER_SPANS, &n));
    size_t cs = p->cap_steps;
    CD_TRY(grow((void **)&p->steps, &cs, p->n_steps + 1, sizeof *p->steps));
    p->cap_steps = (uint32_t)cs;
    CD_TRY(grow((void **)&p->s, &p->cap, p->n + n, sizeof *p->s));
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (buf[i].start_ns < t0) t0 = buf[i].start_ns;
        if (buf[i].end_ns > t1) t1 = buf[i].end_ns;
    }
    bool moe = cfg->arch == ARCH_QWEN3MOE;
    double base_us = (host->submit_at_ms - p->origin_ms) * 1e3;
    for (uint32_t i = 0; i < n; i++) {
        span *s = &p->s[p->n + i];
        *s = (span){.t = buf[i],
                    .step = p->n_steps,
                    .at_us = base_us + (buf[i].start_ns - t0) / 1e3,
                    .op = buf[i].kind == CVK_SPAN_GROUP,
                    .part = part_of(buf, &buf[i], moe)};
        snprintf(s->label, sizeof s->label, "%s", buf[i].label ? buf[i].label : "?");
        s->t.label = NULL; /* not to be read past the model's life: s->label */
    }
    for (uint32_t i = 0; i < n; i++) /* a group inside a group: the outer one is not an op */
        if (buf[i].kind == CVK_SPAN_GROUP && buf[i].parent != UINT32_MAX) p->s[p->n + buf[i].parent].op = false;
    p->n += n;
    p->steps[p->n_steps++] =
        (step){.phase = phase, .tokens = tokens, .gpu_ms = n ? (t1 - t0) / 1e6 : 0, .wall_ms = wall_ms, .host = *host};
    p->dispatches += t->dispatches;
    p->copies += t->copies;
    p->dropped += t->dropped;
    return 0;
}

/* ---- running ---- */

typedef struct run {
    const profile_opts *o;
    gpu_model *g;
    kv_pool *pool; /* the rows' pages */
    cvk_timer *t;
    prof *p;
    kv_seq *seqs;   /* one per batch row */
    int32_t *ids;   /* context + prompt tokens */
    int32_t *tok;   /* decode: the next token of each row */
    int32_t *first; /* decode: each row's first token (run_all) */
} run;

/* How a pass counts: a warm-up (first touches of weights and pipelines, not counted), untimed
 * (wall time, the overhead's reference) or timed (spans collected). */
enum mode { WARM, UNTIMED, TIMED };

static int pass(run *r, const gpu_batch *b, int32_t *next, uint8_t phase, enum mode mode) {
    CD_TRY(cvk_timer_enable(r->t, mode == TIMED));
    double w0 = cd_now_ms();
    CD_TRY(gpu_forward_batch(r->g, b, next));
    double wall = cd_now_ms() - w0;
    if (mode == TIMED) return collect(r->p, r->t, &r->g->m->cfg, &r->g->host, phase, b->n, wall);
    if (mode == UNTIMED) {
        r->p->untimed_ms[phase] += wall - r->g->host.record_ms; /* recording apart: see overhead_pct */
        r->p->untimed_steps[phase]++;
    }
    return 0;
}

/* Tokens [from, to) of row 0 in chunks of n_batch; the last chunk asks for its last token's
 * logits (as the scheduler's prefill does). */
static int prefill(run *r, uint32_t from, uint32_t to, enum mode mode) {
    uint32_t nb = r->g->n_batch, *row = calloc(nb, sizeof *row), *pos = malloc(nb * sizeof *pos);
    int rc = row && pos ? 0 : cd_fail("out of memory (profile)");
    for (uint32_t at = from; !rc && at < to;) {
        uint32_t n = to - at < nb ? to - at : nb, last = n - 1;
        for (uint32_t i = 0; i < n; i++) pos[i] = at + i;
        bool end = at + n == to;
        gpu_batch b = {.n = n, .ids = r->ids + at, .row = row, .pos = pos, .n_out = end, .out = &last};
        int32_t next;
        rc = pass(r, &b, &next, PREFILL, mode);
        if (!rc && end) r->tok[0] = next;
        at += n;
    }
    free(row);
    free(pos);
    return rc;
}

/* `steps` steps of one token per row at positions at.. (every row the same length), row i
 * starting from r->first[i]. Measuring, each step runs untimed and then timed at the same
 * positions (the same work twice), so a change in machine load hits both alike. */
static int decode(run *r, uint32_t at, uint32_t steps, bool warm) {
    uint32_t B = r->o->batch, row[256], pos[256], out[256];
    int32_t next[256];
    for (uint32_t i = 0; i < B; i++) {
        row[i] = out[i] = i;
        r->tok[i] = r->first[i];
    }
    for (uint32_t s = 0; s < steps; s++) {
        for (uint32_t i = 0; i < B; i++) pos[i] = at + s;
        gpu_batch b = {.n = B, .ids = r->tok, .row = row, .pos = pos, .n_out = B, .out = out};
        if (warm) CD_TRY(pass(r, &b, next, DECODE, WARM));
        else CD_TRY(pass(r, &b, next, DECODE, UNTIMED) || pass(r, &b, next, DECODE, TIMED));
        memcpy(r->tok, next, B * sizeof *next);
    }
    return 0;
}

/* Every row gets its own pages for the whole length; rows past 0 decode over pages whose
 * contents were never computed (their K/V is read all the same, which is what is timed). */
static int make_rows(run *r, uint32_t len) {
    for (uint32_t i = 0; i < r->o->batch; i++)
        CD_TRY(kv_pool_extend(r->pool, &r->seqs[i], len) ||
               gpu_model_set_table(r->g, i, r->seqs[i].pages, r->seqs[i].n_pages));
    return 0;
}

static int run_all(run *r) {
    const profile_opts *o = r->o;
    uint32_t C = o->context, P = o->prompt, D = o->gen, len = C + P + D;
    CD_TRY(make_rows(r, len));
    if (C) CD_TRY(prefill(r, 0, C, WARM));
    /* each phase warmed up, then untimed and timed (decode: step by step): the overhead is
     * timed - untimed */
    CD_TRY(prefill(r, C, C + P, WARM) || prefill(r, C, C + P, UNTIMED) || prefill(r, C, C + P, TIMED));
    /* Row 0 goes on from the prompt; the others start from tokens of their own, as real
     * sequences do: rows fed one token route alike step after step, and an MoE step of B rows
     * then reads a few experts, hot in cache, instead of the ~52 of 128 that 8 real sequences
     * touch (such a step took 2x less expert time than the same rows replayed from a trace).
     * The others' first tokens are drawn with the prompt (main). */
    r->first[0] = r->tok[0];
    return decode(r, C + P, D < 2 ? D : 2, true) || decode(r, C + P, D, false);
}

/* ---- reporting ---- */

typedef struct row {
    const char *name, *kernel, *part;
    uint32_t calls;
    double ms;
    uint64_t bytes, flops;
} row;

typedef struct table {
    row r[96];
    uint32_t n;
    double gpu_ms, wall_ms, part_ms[5];
    double record_ms; /* of wall_ms, recording the passes on the host */
    double busy_ms;   /* inside a dispatch or copy span; the rest of gpu_ms: barriers, timestamps, idle */
    uint32_t steps, tokens;
    double *layer_ms; /* per layer */
    uint64_t bytes, flops;
} table;

static const char *const parts[5] = {"embed", "attention", "moe", "ffn", "head"};

static int part_index(const char *p) {
    for (int i = 0; i < 5; i++)
        if (!strcmp(parts[i], p)) return i;
    return 0;
}

static void tabulate(const prof *p, uint8_t phase, uint32_t n_layer, table *tb) {
    for (uint32_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].phase == phase) {
            tb->steps++;
            tb->tokens += p->steps[i].tokens;
            tb->gpu_ms += p->steps[i].gpu_ms;
            tb->wall_ms += p->steps[i].wall_ms;
            tb->record_ms += p->steps[i].host.record_ms;
        }
    for (size_t i = 0; i < p->n; i++) {
        const span *s = &p->s[i];
        if (p->steps[s->step].phase != phase) continue;
        if (s->t.kind != CVK_SPAN_GROUP) tb->busy_ms += (s->t.end_ns - s->t.start_ns) / 1e6;
        if (!s->op) continue;
        const char *name = s->t.work.role ? s->t.work.role : s->label;
        uint32_t k = 0;
        while (k < tb->n && (strcmp(tb->r[k].name, name) || strcmp(tb->r[k].kernel, s->label))) k++;
        if (k == tb->n) {
            if (tb->n == sizeof tb->r / sizeof tb->r[0]) continue;
            tb->r[tb->n++] = (row){.name = name, .kernel = s->label, .part = s->part};
        }
        double ms = (s->t.end_ns - s->t.start_ns) / 1e6;
        tb->r[k].calls++;
        tb->r[k].ms += ms;
        tb->r[k].bytes += s->t.work.bytes;
        tb->r[k].flops += s->t.work.flops;
        tb->bytes += s->t.work.bytes;
        tb->flops += s->t.work.flops;
        tb->part_ms[part_index(s->part)] += ms;
        if (s->t.layer >= 0 && (uint32_t)s->t.layer < n_layer) tb->layer_ms[s->t.layer] += ms;
    }
}

static double pct(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }
static double per(double x, uint32_t steps) { return steps ? x / steps : 0; }

static void print_table(const table *tb, const char *what, const profile_opts *o, uint32_t n_layer) {
    printf("\n%s: %u step%s, %u tokens, %.3f ms of GPU time per step (%.3f ms wall)\n", what, tb->steps,
           tb->steps == 1 ? "" : "s", tb->tokens, tb->gpu_ms / tb->steps, tb->wall_ms / tb->steps);
    printf("  %-16s %-12s %-9s %6s %10s %9s %6s %10s %10s %9s %9s %6s %6s\n", "op", "kernel", "part", "calls",
           "total ms", "mean us", "share", "MB/call", "MFLOP/call", "GB/s", "GFLOP/s", "%bw", "%flop");
    for (uint32_t k = 0; k < tb->n; k++) {
        const row *r = &tb->r[k];
        double s = r->ms / 1e3, gbs = s > 0 ? r->bytes / s / 1e9 : 0, gfs = s > 0 ? r->flops / s / 1e9 : 0;
        printf("  %-16s %-12s %-9s %6u %10.3f %9.1f %5.1f%% %10.3f %10.3f %9.2f %9.2f", r->name, r->kernel, r->part,
               r->calls, r->ms, 1e3 * r->ms / r->calls, pct(r->ms, tb->gpu_ms), r->bytes / 1e6 / r->calls,
               r->flops / 1e6 / r->calls, gbs, gfs);
        if (o->peak_gbps > 0) printf(" %5.1f%%", pct(gbs, o->peak_gbps));
        else printf(" %6s", "-");
        if (o->peak_tflops > 0) printf(" %5.1f%%\n", pct(gfs, o->peak_tflops * 1e3));
        else printf(" %6s\n", "-");
    }
    printf("  by part:");
    for (int i = 0; i < 5; i++)
        if (tb->part_ms[i] > 0)
            printf("  %s %.3f ms (%.1f%%)", parts[i], tb->part_ms[i] / tb->steps, pct(tb->part_ms[i], tb->gpu_ms));
    printf(
        "   (per step)\n  dispatches and copies cover %.1f%% of the step span (the rest: barriers, timestamps, idle)\n",
        pct(tb->busy_ms, tb->gpu_ms));
    printf("  by layer (ms per step):");
    for (uint32_t l = 0; l < n_layer; l++) printf("%s%.3f", l ? " " : " ", tb->layer_ms[l] / tb->steps);
    printf("\n");
}

/* The decode roofline: bytes a step must move (every active weight once, the K/V read,
 * activations) over the device's bandwidth, against the achieved step time. */
static double roofline_ms(const table *d, const profile_opts *o) {
    return o->peak_gbps > 0 && d->steps ? (double)d->bytes / d->steps / (o->peak_gbps * 1e9) * 1e3 : 0;
}

static void host_means(const prof *p, gpu_host_times *h) {
    *h = (gpu_host_times){0};
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].phase == DECODE) {
            h->record_ms += p->steps[i].host.record_ms;
            h->submit_ms += p->steps[i].host.submit_ms;
            h->wait_ms += p->steps[i].host.wait_ms;
            h->read_ms += p->steps[i].host.read_ms;
            n++;
        }
    if (n) {
        h->record_ms /= n;
        h->submit_ms /= n;
        h->wait_ms /= n;
        h->read_ms /= n;
    }
}

/* The timestamps' cost: timed vs untimed wall per step, host recording left out of both (an
 * untimed pass reuses its recording, a timed one is recorded afresh with its spans). */
static double overhead_pct(const prof *p, const table *tb, uint8_t phase) {
    if (!p->untimed_steps[phase] || !tb->steps) return 0;
    double off = p->untimed_ms[phase] / p->untimed_steps[phase], on = (tb->wall_ms - tb->record_ms) / tb->steps;
    return off > 0 ? 100 * (on - off) / off : 0;
}

static void print_summary(const prof *p, const table tb[N_PHASES], const profile_opts *o) {
    const table *d = &tb[DECODE];
    double step = d->steps ? d->gpu_ms / d->steps : 0, ideal = roofline_ms(d, o);
    gpu_host_times h;
    host_means(p, &h);
    printf("\ndecode roofline (batch %.3g): %.2f MB per step", per(d->tokens, d->steps), per(d->bytes / 1e6, d->steps));
    if (ideal > 0)
        printf(" / %.1f GB/s (%s) = %.3f ms; achieved %.3f ms GPU: %.1f%% of the roofline\n", o->peak_gbps,
               o->peak_source, ideal, step, pct(ideal, step));
    else printf("; no peak bandwidth known (cinder profile --device, or --peak-gbps)\n");
    printf("decode host side per step: record %.3f ms, submit %.3f ms, wait %.3f ms, read-back %.3f ms (GPU %.3f ms)\n",
           h.record_ms, h.submit_ms, h.wait_ms, h.read_ms, step);
    printf("timestamps: %llu dispatches and %llu copies timed%s", (unsigned long long)p->dispatches,
           (unsigned long long)p->copies, p->dropped ? " (some spans dropped)" : "");
    if (p->replay) printf(" (a replay runs once: its overhead is not measured)\n");
    else
        printf("; overhead vs the same steps untimed: prefill %+.1f%%, decode %+.1f%% (wall)\n",
               overhead_pct(p, &tb[PREFILL], PREFILL), overhead_pct(p, d, DECODE));
}

static void print_requests(json_t *reqs) {
    printf("\nrequests (host side; the cache's work is part of the TTFT)\n"
           "     #   prompt   cached tokenize ms  queued ms  acquire ms  restore ms  disk read ms  disk write ms    "
           "TTFT ms     e2e ms\n");
    size_t i;
    json_t *r;
    json_array_foreach(reqs, i, r) {
#define F(k) json_real_value(json_object_get(r, k))
#define I(k) (long long)json_integer_value(json_object_get(r, k))
        printf("  %4lld %8lld %8lld %11.3f %10.3f %11.3f %11.3f %13.3f %14.3f %10.2f %10.2f\n", I("request"),
               I("prompt_tokens"), I("cached_tokens"), F("tokenize_ms"), F("queued_ms"), F("acquire_ms"),
               F("restore_ms"), F("disk_read_ms"), F("disk_write_ms"), F("ttft_ms"), F("e2e_ms"));
#undef F
#undef I
    }
}

static json_t *table_json(const table *tb, const profile_opts *o, uint32_t n_layer) {
    json_t *rows = json_array(), *layers = json_array(), *by_part = json_object();
    for (uint32_t k = 0; k < tb->n; k++) {
        const row *r = &tb->r[k];
        double s = r->ms / 1e3, gbs = s > 0 ? r->bytes / s / 1e9 : 0, gfs = s > 0 ? r->flops / s / 1e9 : 0;
        json_array_append_new(rows,
                              json_pack("{s:s, s:s, s:s, s:I, s:f, s:f, s:I, s:I, s:f, s:f, s:f, s:f}", "op", r->name,
                                        "kernel", r->kernel, "part", r->part, "calls", (json_int_t)r->calls, "total_ms",
                                        r->ms, "share", tb->gpu_ms > 0 ? r->ms / tb->gpu_ms : 0, "bytes",
                                        (json_int_t)r->bytes, "flops", (json_int_t)r->flops, "gb_s", gbs, "gflop_s",
                                        gfs, "bw_frac", o->peak_gbps > 0 ? gbs / o->peak_gbps : 0, "flop_frac",
                                        o->peak_tflops > 0 ? gfs / (o->peak_tflops * 1e3) : 0));
    }
    for (uint32_t l = 0; l < n_layer; l++) json_array_append_new(layers, json_real(per(tb->layer_ms[l], tb->steps)));
    for (int i = 0; i < 5; i++)
        if (tb->part_ms[i] > 0) json_object_set_new(by_part, parts[i], json_real(per(tb->part_ms[i], tb->steps)));
    return json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:o, s:o, s:o}", "steps", (json_int_t)tb->steps, "tokens",
                     (json_int_t)tb->tokens, "gpu_ms_per_step", per(tb->gpu_ms, tb->steps), "wall_ms_per_step",
                     per(tb->wall_ms, tb->steps), "busy_fraction", tb->gpu_ms > 0 ? tb->busy_ms / tb->gpu_ms : 0,
                     "bytes", (json_int_t)tb->bytes, "flops", (json_int_t)tb->flops, "ops", rows, "part_ms_per_step",
                     by_part, "layer_ms_per_step", layers);
}

static int print_json(const prof *p, const table tb[N_PHASES], const profile_opts *o, const char *device,
                      const char *rope, uint32_t n_layer) {
    const table *d = &tb[DECODE];
    gpu_host_times h;
    host_means(p, &h);
    double step = d->steps ? d->gpu_ms / d->steps : 0, ideal = roofline_ms(d, o);
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:s, s:o, s:o, s:{s:f, s:f, s:f}, s:{s:f, s:f, s:f, s:f},"
        " s:{s:I, s:I, s:I, s:f, s:f}}",
        "model", o->model, "device", device, "rope", rope, "prompt_tokens", (json_int_t)o->prompt, "gen",
        (json_int_t)o->gen, "context", (json_int_t)o->context, "batch", (json_int_t)o->batch, "peak_gbps", o->peak_gbps,
        "peak_tflops", o->peak_tflops, "peak_source", o->peak_source, "prefill", table_json(&tb[PREFILL], o, n_layer),
        "decode", table_json(d, o, n_layer), "roofline", "ideal_ms", ideal, "achieved_ms", step, "fraction",
        step > 0 ? ideal / step : 0, "host_ms_per_step", "record", h.record_ms, "submit", h.submit_ms, "wait",
        h.wait_ms, "read", h.read_ms, "timestamps", "dispatches", (json_int_t)p->dispatches, "copies",
        (json_int_t)p->copies, "dropped", (json_int_t)p->dropped, "overhead_prefill_pct",
        overhead_pct(p, &tb[PREFILL], PREFILL), "overhead_decode_pct", overhead_pct(p, d, DECODE));
    if (j && p->requests) json_object_set(j, "requests", p->requests);
    if (j && p->replay) json_object_set_new(j, "replay", json_string(p->replay));
    if (!j) return cd_fail("profile: building the JSON report failed");
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(j);
    if (!s) return cd_fail("out of memory (profile)");
    puts(s);
    free(s);
    return 0;
}

/* ---- the trace (Chrome trace-event JSON: ui.perfetto.dev, chrome://tracing) ---- */

enum { TID_STEP = 1, TID_GPU = 2, TID_COPY = 3, TID_HOST = 4, TID_REQ = 5 };

static json_t *slice(const char *name, int tid, double ts_us, double dur_us) {
    return json_pack("{s:s, s:s, s:i, s:i, s:f, s:f}", "name", name, "ph", "X", "pid", 1, "tid", tid, "ts", ts_us,
                     "dur", dur_us);
}

static json_t *thread_name(int tid, const char *name) {
    return json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid", tid, "args",
                     "name", name);
}

static json_t *span_args(const span *s) {
    json_t *a = json_pack("{s:s, s:s, s:I, s:I}", "kernel", s->label, "part", s->part, "layer", (json_int_t)s->t.layer,
                          "depth", (json_int_t)s->t.depth);
    if (s->t.work.role) {
        json_object_set_new(a, "bytes", json_integer((json_int_t)s->t.work.bytes));
        json_object_set_new(a, "flops", json_integer((json_int_t)s->t.work.flops));
        json_object_set_new(
            a, "shape",
            json_pack("[I, I, I]", (json_int_t)s->t.work.m, (json_int_t)s->t.work.n, (json_int_t)s->t.work.k));
    }
    return a;
}

static int add_step_slices(json_t *ev, const prof *p) {
    for (uint32_t i = 0; i < p->n_steps; i++) {
        const step *st = &p->steps[i];
        double submit = (st->host.submit_at_ms - p->origin_ms) * 1e3;
        char name[48];
        snprintf(name, sizeof name, "%s step %u (%u tokens)", phase_name[st->phase], i, st->tokens);
        json_t *s = slice(name, TID_STEP, submit, st->gpu_ms * 1e3);
        json_object_set_new(s, "args",
                            json_pack("{s:s, s:I, s:f}", "phase", phase_name[st->phase], "tokens",
                                      (json_int_t)st->tokens, "gpu_ms", st->gpu_ms));
        json_array_append_new(ev, s);
        const gpu_host_times *h = &st->host;
        double rec = submit - h->record_ms * 1e3;
        json_array_append_new(ev, slice("record", TID_HOST, rec, h->record_ms * 1e3));
        json_array_append_new(ev, slice("submit", TID_HOST, submit, h->submit_ms * 1e3));
        json_array_append_new(ev, slice("wait", TID_HOST, submit + h->submit_ms * 1e3, h->wait_ms * 1e3));
        json_array_append_new(
            ev, slice("read-back", TID_HOST, submit + (h->submit_ms + h->wait_ms) * 1e3, h->read_ms * 1e3));
    }
    return 0;
}

/* Replays: each request from submit to its last token, with its wait, its cache work (match,
 * host restore, disk chunks) and its time to the first token inside. */
static void add_request_slices(json_t *ev, const prof *p) {
    json_array_append_new(ev, thread_name(TID_REQ, "requests (host: queued, cache acquire, TTFT)"));
    size_t i;
    json_t *r;
    json_array_foreach(p->requests, i, r) {
        double at = (json_real_value(json_object_get(r, "submit_ms")) - p->origin_ms) * 1e3;
        double q = json_real_value(json_object_get(r, "queued_ms")) * 1e3;
        double a = json_real_value(json_object_get(r, "acquire_ms")) * 1e3;
        char name[96];
        snprintf(name, sizeof name, "request %lld (%lld prompt, %lld cached)",
                 (long long)json_integer_value(json_object_get(r, "request")),
                 (long long)json_integer_value(json_object_get(r, "prompt_tokens")),
                 (long long)json_integer_value(json_object_get(r, "cached_tokens")));
        json_t *whole = slice(name, TID_REQ, at, json_real_value(json_object_get(r, "e2e_ms")) * 1e3);
        json_object_set_new(whole, "args", json_deep_copy(r));
        json_array_append_new(ev, whole);
        double tok = json_real_value(json_object_get(r, "tokenize_ms")) * 1e3;
        json_array_append_new(ev, slice("tokenize", TID_HOST, at - tok, tok));
        json_array_append_new(ev, slice("ttft", TID_REQ, at, json_real_value(json_object_get(r, "ttft_ms")) * 1e3));
        json_array_append_new(ev, slice("queued", TID_REQ, at, q));
        json_array_append_new(ev, slice("cache acquire (match, restore, disk)", TID_REQ, at + q, a));
    }
}

static int write_trace(const prof *p, const char *path) {
    json_t *ev = json_array();
    json_array_append_new(ev,
                          json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", 1, "args",
                                    "name", "cinder profile"));
    json_array_append_new(ev, thread_name(TID_STEP, "GPU steps"));
    json_array_append_new(ev, thread_name(TID_GPU, "GPU compute (ops, dispatches)"));
    json_array_append_new(ev, thread_name(TID_COPY, "GPU copies"));
    json_array_append_new(ev, thread_name(TID_HOST, "CPU (record, submit, wait, read-back)"));
    add_step_slices(ev, p);
    if (p->requests) add_request_slices(ev, p);
    for (size_t i = 0; i < p->n; i++) {
        const span *s = &p->s[i];
        char name[96];
        const char *base = s->t.work.role ? s->t.work.role : s->label;
        if (s->t.layer >= 0) snprintf(name, sizeof name, "%s L%d", base, s->t.layer);
        else snprintf(name, sizeof name, "%s", base);
        int tid = s->t.kind == CVK_SPAN_COPY ? TID_COPY : TID_GPU;
        json_t *e = slice(name, tid, s->at_us, (s->t.end_ns - s->t.start_ns) / 1e3);
        json_object_set_new(e, "cat",
                            json_string(s->t.kind == CVK_SPAN_DISPATCH   ? "dispatch"
                                            : s->t.kind == CVK_SPAN_COPY ? "copy"
                                            : s->op                      ? "op"
                                                                         : "group"));
        if (!e || json_object_set_new(e, "args", span_args(s)) || json_array_append_new(ev, e)) {
            json_decref(ev);
            return cd_fail("profile: a trace event could not be encoded (span %zu, %s)", i, s->label);
        }
    }
    json_t *root = json_pack("{s:o, s:s}", "traceEvents", ev, "displayTimeUnit", "ns");
    int rc = root && !json_dump_file(root, path, JSON_COMPACT) ? 0 : cd_fail("cannot write the trace to %s", path);
    json_decref(root);
    return rc;
}

/* ---- the plot: each phase's ops by share of its GPU time ---- */

static int write_plot(const table tb[N_PHASES], const profile_opts *o, const char *device) {
    enum { MAX = 2 * 96 };
    const char *labels[MAX];
    char names[MAX][48];
    double v[MAX];
    size_t n = 0;
    for (int ph = 0; ph < N_PHASES; ph++) {
        const table *t = &tb[ph];
        bool used[96] = {0};
        for (uint32_t j = 0; j < t->n; j++) { /* largest share first */
            uint32_t best = UINT32_MAX;
            for (uint32_t k = 0; k < t->n; k++)
                if (!used[k] && (best == UINT32_MAX || t->r[k].ms > t->r[best].ms)) best = k;
            used[best] = true;
            snprintf(names[n], sizeof names[n], "%s %s", phase_name[ph], t->r[best].name);
            labels[n] = names[n];
            v[n++] = pct(t->r[best].ms, t->gpu_ms);
        }
    }
    char title[256];
    snprintf(title, sizeof title, "cinder profile: share of GPU time per op (%s, %s; prefill %u, decode batch %u)",
             o->model, device, o->prompt, o->batch);
    return svg_bars(o->plot, title, "%", labels, v, n);
}

/* ---- the whole run ---- */

static int report(const prof *p, const profile_opts *o, const model_config *cf, const char *device) {
    uint32_t L = cf->n_layer;
    table *tb = calloc(N_PHASES, sizeof *tb);
    double *lm = calloc(2 * (size_t)L + 2, sizeof *lm);
    if (!tb || !lm) {
        free(tb);
        free(lm);
        return cd_fail("out of memory (profile)");
    }
    int rc = 0;
    for (int ph = 0; ph < N_PHASES; ph++) {
        tb[ph].layer_ms = lm + ph * (L + 1);
        tabulate(p, (uint8_t)ph, L, &tb[ph]);
    }
    char rope[160], described[128];
    rope_describe(&cf->rope, described, sizeof described);
    snprintf(rope, sizeof rope, "theta %g, %s", cf->rope.freq_base, described); /* as `cinder info` says it */
    if (o->json) rc = print_json(p, tb, o, device, rope, L);
    else {
        printf("model   %s (%u layers, %u experts, %u used)\nrope    %s\ndevice  %s\n", o->model, L, cf->n_expert,
               cf->n_expert_used, rope, device);
        if (p->replay)
            printf("run     the requests of %s through the engine (passes with prompt tokens: \"prefill\", "
                   "decode-only passes: \"decode\")\n",
                   p->replay);
        else
            printf("run     prefill %u tokens after %u of context; %u decode steps of batch %u\n", o->prompt,
                   o->context, o->gen, o->batch);
        if (tb[PREFILL].steps) print_table(&tb[PREFILL], "prefill", o, L);
        if (tb[DECODE].steps) print_table(&tb[DECODE], "decode", o, L);
        print_summary(p, tb, o);
        if (p->requests) print_requests(p->requests);
    }
    if (!rc && o->trace) rc = write_trace(p, o->trace);
    if (!rc && o->plot) rc = write_plot(tb, o, device);
    free(tb);
    free(lm);
    return rc;
}

/* The peaks not given on the command line, from the device card (cached, or measured now). */
static int fill_peaks(profile_opts *o, cvk_ctx *vk) {
    if (o->peak_gbps > 0 && o->peak_tflops > 0) {
        o->peak_source = "--peak-gbps";
        return 0;
    }
    device_card card;
    CD_TRY(device_card_get(vk, false, &card));
    if (!o->json && !card.cached)
        fprintf(stderr, "profile: measured the device card (cached at %s)\n", card.cache_path);
    if (o->peak_gbps > 0) o->peak_source = "--peak-gbps";
    else {
        o->peak_gbps = device_card_peak_gbps(&card);
        o->peak_source = card.cached ? "device card, cached" : "device card, measured";
    }
    if (o->peak_tflops <= 0) o->peak_tflops = device_card_peak_tflops(&card, false);
    return 0;
}

/* ---- replaying a trace through the engine (--scenario / --trace-file) ---- */

typedef struct replay_prof {
    profile_opts *o;
    prof p;
    cvk_timer t;
    bool timer_up;
    double last_submit; /* the pass last collected (a step without a pass leaves it) */
    char device[256];
} replay_prof;

static int rp_start(void *ctx, engine *e) {
    replay_prof *r = ctx;
    snprintf(r->device, sizeof r->device, "%s", engine_device(e)->dev.info.props.deviceName);
    CD_TRY(fill_peaks(r->o, engine_device(e)) || cvk_timer_init(&r->t, &engine_device(e)->dev, TIMER_SPANS));
    r->timer_up = true;
    if (cvk_timer_enable(&r->t, true)) return -1;
    engine_set_timer(e, &r->t);
    return 0;
}

static int rp_step(void *ctx, engine *e) {
    replay_prof *r = ctx;
    const gpu_host_times *h = engine_last_pass(e);
    if (h->submit_at_ms == r->last_submit) return 0;
    r->last_submit = h->submit_at_ms;
    uint8_t phase = h->tokens == h->n_out ? DECODE : PREFILL;
    return collect(&r->p, &r->t, &engine_model(e)->cfg, h, phase, h->tokens,
                   h->record_ms + h->submit_ms + h->wait_ms + h->read_ms);
}

static int rp_reply(void *ctx, size_t no, const engine_reply *q, double submit_ms, double prepare_ms) {
    replay_prof *r = ctx;
    json_t *j = json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "request", (json_int_t)no,
                          "prompt_tokens", (json_int_t)q->prompt_tokens, "cached_tokens", (json_int_t)q->cached_tokens,
                          "submit_ms", submit_ms, "tokenize_ms", prepare_ms, "queued_ms", q->queued_ms, "acquire_ms",
                          q->acquire_ms, "restore_ms", q->restore_ms, "disk_read_ms", q->disk_read_ms, "disk_write_ms",
                          q->disk_write_ms, "ttft_ms", q->ttft_ms, "e2e_ms", q->ttft_ms + q->decode_ms);
    return j ? json_array_append_new(r->p.requests, j) : cd_fail("out of memory (profile)");
}

static void rp_finish(void *ctx, engine *e) {
    replay_prof *r = ctx;
    if (!r->timer_up) return;
    engine_set_timer(e, NULL);
    cvk_timer_free(&r->t);
    r->timer_up = false;
}

static int profile_replay(profile_opts *o, const model *m) {
    replay_prof r = {.o = o, .last_submit = -1};
    r.p = (prof){.origin_ms = cd_now_ms(),
                 .read = malloc(TIMER_SPANS * sizeof(cvk_timing)),
                 .requests = json_array(),
                 .replay = o->scenario ? o->scenario : o->trace_file};
    bench_trace_hooks hooks = {.ctx = &r, .start = rp_start, .step = rp_step, .reply = rp_reply, .finish = rp_finish};
    bench_trace_opts bo = {.model = o->model,
                           .trace = o->trace_file,
                           .scenario = o->scenario,
                           .concurrency = o->batch,
                           .quiet = true,
                           .hooks = &hooks};
    int rc = r.p.read && r.p.requests ? 0 : cli_error("profile", "out of memory");
    if (!rc) rc = bench_trace(&bo, (model *)m) ? 1 : 0; /* reports its own errors */
    if (!rc && report(&r.p, o, &m->cfg, r.device)) rc = cli_error("profile", "%s", cd_errmsg());
    free(r.p.read);
    free(r.p.s);
    free(r.p.steps);
    json_decref(r.p.requests);
    return rc;
}

int profile_model(profile_opts *o, const model *m) {
    if (o->scenario || o->trace_file) return profile_replay(o, m);
    const model_config *c = &m->cfg;
    uint32_t len = o->context + o->prompt + o->gen;
    if (!o->prompt || !o->gen || !o->batch)
        return cli_error("profile", "--prompt-tokens, --gen and --batch must be >= 1");
    if (o->batch > 256) return cli_error("profile", "--batch %u: at most 256", o->batch);
    if (len > c->n_ctx_train)
        return cli_error("profile", "%u context + %u prompt + %u generated tokens exceed the model's context (%u)",
                         o->context, o->prompt, o->gen, c->n_ctx_train);
    cvk_ctx *vk = calloc(1, sizeof *vk);
    gpu_model *g = calloc(1, sizeof *g);
    prof p = {.origin_ms = cd_now_ms(), .read = malloc(TIMER_SPANS * sizeof(cvk_timing))};
    cvk_timer t = {0};
    kv_pool pool = {0};
    run r = {.o = o,
             .g = g,
             .pool = &pool,
             .t = &t,
             .p = &p,
             .seqs = calloc(o->batch, sizeof(kv_seq)),
             .ids = malloc(((size_t)o->context + o->prompt) * sizeof(int32_t)),
             .tok = calloc(o->batch, sizeof(int32_t)),
             .first = calloc(o->batch, sizeof(int32_t))};
    int rc = vk && g && p.read && r.seqs && r.ids && r.tok && r.first ? 0 : cd_fail("out of memory (profile)");
    rng rn;
    rng_seed(&rn, o->seed);
    for (uint32_t i = 0; !rc && i < o->context + o->prompt; i++) r.ids[i] = (int32_t)rng_below(&rn, c->n_vocab);
    for (uint32_t i = 1; !rc && i < o->batch; i++) r.first[i] = (int32_t)rng_below(&rn, c->n_vocab);
    cvk_ctx_opts co = {.device = o->device, .pipeline_cache = ""};
    bool vk_up = false;
    if (!rc) rc = cvk_ctx_init(vk, &co);
    vk_up = !rc;
    uint32_t pt = KV_PAGE_TOKENS_DEFAULT;
    kv_layout lay;
    if (!rc)
        rc = kv_layout_init(&lay, c->n_layer, c->n_head_kv, c->head_dim, pt) ||
            kv_pool_init(&pool, vk, &lay, o->batch * ((len + pt - 1) / pt) * pt);
    gpu_model_opts go = {.n_ctx = len,
                         .build_pipelines = true,
                         .max_seqs = o->batch,
                         .kv = &pool.buf,
                         .lay = &pool.lay,
                         .n_batch = o->prompt > o->batch ? (o->prompt < 512 ? o->prompt : 512) : o->batch,
                         .gate_up_pairs = o->gate_up_pairs,
                         .int_dot = o->int_dot,
                         .few_shape = o->few_shape,
                         .one_shape = o->one_shape,
                         .big_tile = o->big_tile,
                         .head_shape = o->head_shape};
    if (!rc) rc = fill_peaks(o, vk);
    if (!rc) rc = gpu_model_init(g, vk, m, &go);
    if (!rc) rc = cvk_timer_init(&t, &vk->dev, TIMER_SPANS);
    if (!rc) gpu_model_set_timer(g, &t);
    if (!rc) rc = run_all(&r);
    if (!rc) rc = report(&p, o, &m->cfg, vk->dev.info.props.deviceName);
    if (rc) cli_error("profile", "%s", cd_errmsg());
    for (uint32_t i = 0; r.seqs && i < o->batch; i++) kv_seq_free(&pool.pages, &r.seqs[i]);
    if (g) gpu_model_free(g);
    kv_pool_free(&pool);
    if (t.spans) cvk_timer_free(&t);
    if (vk_up) cvk_ctx_free(vk);
    free(vk);
    free(g);
    free(r.seqs);
    free(r.ids);
    free(r.tok);
    free(r.first);
    free(p.s);
    free(p.steps);
    free(p.read);
    return rc ? 1 : 0;
}
