#include "tools/bench_agents.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "tools/cli.h"

#define USER_TOKENS 32u /* each agent's own task message after the shared system prompt */

typedef struct agent {
    int32_t *conv; /* the conversation so far */
    uint32_t n, cap;
    uint32_t round; /* rounds done */
    uint32_t handle;
    bool in_flight;
    double last_token_ms;
    struct run *run;
} agent;

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

typedef struct run {
    const bench_agents_opts *o;
    engine e;
    agent *agents;
    rng r;
    samples ttft, itl;
    uint64_t prompt, cached, generated, requests;
} run;

static int push(samples *s, double v) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        double *p = realloc(s->v, cap * sizeof *p);
        if (!p) return cd_fail("out of memory");
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = v;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank) of s; sorts it. */
static double percentile(samples *s, double p) {
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_double);
    size_t k = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (k < 1) k = 1;
    if (k > s->n) k = s->n;
    return s->v[k - 1];
}

static void append_random(rng *r, agent *a, uint32_t n, uint32_t vocab) {
    for (uint32_t i = 0; i < n; i++) a->conv[a->n++] = (int32_t)rng_below(r, vocab);
}

static bool on_token(void *ctx, int32_t id) {
    (void)id;
    agent *a = ctx;
    double t = cd_now_ms();
    if (a->last_token_ms > 0) push(&a->run->itl, t - a->last_token_ms); /* out of memory: a sample less */
    a->last_token_ms = t;
    return true;
}

/* The agent's next request: a tool result appended, the conversation sent. */
static int send_round(run *rn, agent *a) {
    append_random(&rn->r, a, rn->o->tool_tokens, engine_model(&rn->e)->cfg.n_vocab);
    engine_request rq = {.ids = a->conv,
                         .n = a->n,
                         .max_tokens = rn->o->gen,
                         .ignore_eos = true,
                         .on_token = on_token,
                         .ctx = a,
                         .json_object = rn->o->json_object};
    a->last_token_ms = 0;
    if (engine_submit(&rn->e, &rq, &a->handle)) return -1;
    a->in_flight = true;
    return 0;
}

/* A finished reply joins the conversation. */
static int collect(run *rn, agent *a, engine_reply *r) {
    memcpy(a->conv + a->n, r->ids, r->n * sizeof *r->ids);
    a->n += r->n;
    a->round++;
    a->in_flight = false;
    rn->prompt += r->prompt_tokens;
    rn->cached += r->cached_tokens;
    rn->generated += r->n;
    rn->requests++;
    int rc = push(&rn->ttft, r->ttft_ms);
    if (r->finish == ENGINE_ERROR) rc = cd_fail("agent request failed");
    engine_reply_free(r);
    return rc;
}

static uint32_t context_needed(const bench_agents_opts *o) {
    uint64_t n = (uint64_t)o->system_tokens + USER_TOKENS + (uint64_t)o->rounds * (o->tool_tokens + o->gen) + 16;
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static int setup(run *rn, const bench_agents_opts *o, model *m) {
    uint32_t n_ctx = o->eo.n_ctx ? o->eo.n_ctx : context_needed(o);
    if (n_ctx > m->cfg.n_ctx_train)
        return cd_fail("the agents' conversations reach %u tokens; the model's context is %u", n_ctx,
                       m->cfg.n_ctx_train);
    uint32_t c = o->concurrency ? o->concurrency : o->agents;
    /* the pool: every running conversation at its longest, plus room for the cache */
    uint64_t pool = o->eo.pool_tokens ? o->eo.pool_tokens : (uint64_t)n_ctx * (c + 2);
    if (pool > UINT32_MAX) return cd_fail("a KV pool of %llu tokens is too large", (unsigned long long)pool);
    engine_opts eo = o->eo;
    eo.n_ctx = n_ctx, eo.pool_tokens = (uint32_t)pool, eo.max_seqs = c;
    if (engine_init(&rn->e, m, &eo) || engine_warm_up(&rn->e)) return -1;
    rng_seed(&rn->r, o->seed);
    int32_t *sys = malloc((o->system_tokens + 1) * sizeof *sys);
    rn->agents = calloc(o->agents, sizeof *rn->agents);
    if (!sys || !rn->agents) {
        free(sys);
        return cd_fail("out of memory");
    }
    for (uint32_t i = 0; i < o->system_tokens; i++) sys[i] = (int32_t)rng_below(&rn->r, m->cfg.n_vocab);
    for (uint32_t k = 0; k < o->agents; k++) {
        agent *a = &rn->agents[k];
        a->cap = n_ctx + o->gen;
        a->run = rn;
        if (!(a->conv = malloc(a->cap * sizeof *a->conv))) {
            free(sys);
            return cd_fail("out of memory");
        }
        memcpy(a->conv, sys, o->system_tokens * sizeof *sys);
        a->n = o->system_tokens;
        append_random(&rn->r, a, USER_TOKENS, m->cfg.n_vocab);
    }
    free(sys);
    return 0;
}

/* Keeps up to C agents in flight (lowest agent first), steps, collects. */
static int drive(run *rn, double *wall_ms) {
    const bench_agents_opts *o = rn->o;
    uint32_t c = o->concurrency ? o->concurrency : o->agents, done = 0;
    double t0 = cd_now_ms();
    while (done < o->agents) {
        uint32_t flying = 0;
        for (uint32_t k = 0; k < o->agents; k++) flying += rn->agents[k].in_flight;
        for (uint32_t k = 0; k < o->agents && flying < c; k++) {
            agent *a = &rn->agents[k];
            if (a->in_flight || a->round == o->rounds) continue;
            if (send_round(rn, a)) return -1;
            flying++;
        }
        if (engine_step(&rn->e, NULL)) return -1;
        for (uint32_t k = 0; k < o->agents; k++) {
            agent *a = &rn->agents[k];
            engine_reply r;
            if (!a->in_flight) continue;
            int got = engine_poll(&rn->e, a->handle, &r);
            if (got < 0 || (got && collect(rn, a, &r))) return -1;
            if (got && a->round == o->rounds) done++;
        }
    }
    *wall_ms = cd_now_ms() - t0;
    return 0;
}

static void report(run *rn, double wall_ms) {
    const bench_agents_opts *o = rn->o;
    const engine_stats st = engine_stats_get(&rn->e), *s = &st;
    double tok_s = wall_ms > 0 ? rn->generated / (wall_ms / 1e3) : 0;
    double hit = rn->prompt ? (double)rn->cached / rn->prompt : 0;
    double t50 = percentile(&rn->ttft, 50), t99 = percentile(&rn->ttft, 99);
    double i50 = percentile(&rn->itl, 50), i99 = percentile(&rn->itl, 99);
    uint32_t c = o->concurrency ? o->concurrency : o->agents;
    /* with every agent decoding, a step gives each a token: c tokens per inter-token gap */
    double steady = i50 > 0 ? c * 1e3 / i50 : 0;
    if (!o->json) {
        printf("agents %u x %u rounds (system %u, tool %u, gen %u tokens), concurrency %u, prefix cache %s\n",
               o->agents, o->rounds, o->system_tokens, o->tool_tokens, o->gen, c, o->eo.no_prefix_cache ? "off" : "on");
        printf("device %s\n", engine_device(&rn->e)->dev.info.props.deviceName);
        printf("requests %llu, %.1f s wall, %llu steps, %llu preempted\n", (unsigned long long)rn->requests,
               wall_ms / 1e3, (unsigned long long)s->steps, (unsigned long long)s->preempted);
        printf("generated %llu tokens: %.2f tok/s aggregate\n", (unsigned long long)rn->generated, tok_s);
        printf("TTFT ms: p50 %.1f, p99 %.1f   inter-token ms: p50 %.1f, p99 %.1f\n", t50, t99, i50, i99);
        printf("steady decode %.2f tok/s (concurrency / inter-token p50)\n", steady);
        printf("prompt %llu tokens, cached %llu (%.1f%%), prefilled %llu, dedup saved %llu\n",
               (unsigned long long)rn->prompt, (unsigned long long)rn->cached, 100 * hit,
               (unsigned long long)s->prefilled_tokens, (unsigned long long)s->dedup_tokens);
        return;
    }
    json_t *j =
        json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:I, "
                  "s:I, s:f, s:I, s:I, s:I, s:I, s:f}",
                  "model", o->model ? o->model : "", "device", engine_device(&rn->e)->dev.info.props.deviceName,
                  "agents", o->agents, "rounds", o->rounds, "system_tokens", o->system_tokens, "tool_tokens",
                  o->tool_tokens, "gen", o->gen, "concurrency", c, "prefix_cache", !o->eo.no_prefix_cache, "requests",
                  (json_int_t)rn->requests, "wall_ms", wall_ms, "generated_tokens", (json_int_t)rn->generated,
                  "decode_tok_s_total", tok_s, "ttft_ms_p50", t50, "ttft_ms_p99", t99, "itl_ms_p50", i50, "itl_ms_p99",
                  i99, "prompt_tokens", (json_int_t)rn->prompt, "cached_tokens", (json_int_t)rn->cached, "hit_rate",
                  hit, "prefilled_tokens", (json_int_t)s->prefilled_tokens, "dedup_tokens", (json_int_t)s->dedup_tokens,
                  "steps", (json_int_t)s->steps, "preempted", (json_int_t)s->preempted, "decode_tok_s_steady", steady);
    char *out = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (out) puts(out);
    free(out);
    json_decref(j);
}

int bench_agents(const bench_agents_opts *o, model *m) {
    if (!o->agents || !o->rounds || !o->gen)
        return cli_error("bench", "--agents, --rounds and --gen must be at least 1");
    run rn = {.o = o};
    double wall_ms = 0;
    int rc = setup(&rn, o, m) || drive(&rn, &wall_ms);
    if (rc) cli_error("bench", "%s", cd_errmsg());
    else report(&rn, wall_ms);
    for (uint32_t k = 0; rn.agents && k < o->agents; k++) free(rn.agents[k].conv);
    free(rn.agents);
    free(rn.ttft.v);
    free(rn.itl.v);
    engine_free(&rn.e);
    return rc ? 1 : 0;
}
