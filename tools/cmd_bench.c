/* cinder bench: prefill and decode throughput of the Vulkan engine, llama-bench style.
 *
 *   prefill: --prompt-tokens seeded random ids in one gpu_prefill from an empty context;
 *   decode:  --gen greedy steps after it (each step's token chosen on the GPU).
 * Each repeat runs both on a fresh sequence (the context is rewound, the pipelines and weights
 * stay); the first repeat is preceded by a short warm-up so pipeline compilation and first-
 * touch costs stay out of the numbers. Reports medians of the repeats. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "engine/engine.h"
#include "runtime/model/model.h"
#include "runtime/text/chat_template.h"
#include "tools/bench_agents.h"
#include "tools/bench_restore.h"
#include "tools/bench_trace.h"
#include "tools/cli.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

typedef struct bench_opts {
    const char *model;
    uint32_t n_prompt, n_gen, repeat;
    uint64_t seed;
    bool json, restore;
    engine_opts eo;           /* the engine's flags (tools/cli_engine.h) and --chunk-tokens */
    bench_trace_opts trace;   /* --trace / --scenario: replay a request trace instead */
    bench_agents_opts agents; /* --agents N: agent loops through the scheduler instead */
    bool gen_given;
    int gate_up_pairs;            /* engine_opts.gate_up_pairs (prefill/decode mode) */
    int int_dot;                  /* engine_opts.int_dot */
    bool json_object;             /* the reply held to one JSON object (engine_request.json_object) */
    const char *json_schema_file; /* --json-schema FILE: the reply held to its schema */
    json_schema *schema;          /* compiled from it */
    int32_t logprobs;             /* -1: none; else each token's log-probability and this many alternatives */
    int32_t prompt_logprobs;      /* -1: none; else every prompt position's, with this many alternatives */
    const char *prompt_text;      /* the prompt as text (tokenized) instead of --prompt-tokens random ids */
    rope_override rope;           /* --rope-scaling ... over the file's */
} bench_opts;

typedef struct bench_run {
    double prefill_ms, decode_ms;
    uint32_t draft_tokens, accepted_tokens; /* speculative decoding's guesses, and those kept */
} bench_run;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder bench [--model M] [--prompt-tokens N] [--gen N] [--repeat N] [--seed S] [--ctx N]\n"
            "                    [--gate-up-pairs auto|on|off] [--int-dot auto|on|off]\n"
            "                    [--json-object | --json-schema FILE]\n"
            "                    [--logprobs N] [--prompt-logprobs N] [--spec-tokens N] [--prompt-text TEXT]\n"
            "                    [--json] " CLI_ROPE_USAGE "\n"
            "  prefill tok/s over N prompt tokens (default 512, one batched pass) and decode tok/s over\n"
            "  --gen greedy steps (default 128), medians of --repeat runs (default 3), on the Vulkan\n"
            "  device (CINDER_DEVICE picks it). --ctx N: the engine's context (default: prompt + gen\n"
            "  + 1; speed should not depend on it). --gate-up-pairs: the FFN's gate and up of one type\n"
            "  as one matmul with the SwiGLU (auto: on a GPU, not on a CPU device). --int-dot: the\n"
            "  integer family (x as int8 blocks, 8-bit dot products: docs/kernels/xq8.md; auto: off\n"
            "  for now; on needs the device's integer dot product). --json prints one\n"
            "  object with prefill_tok_s and decode_tok_s (medians) and prefill_runs / decode_runs (each\n"
            "  repeat, in run order). Where the time goes: cinder profile. --json-object holds the\n"
            "  reply to one JSON object (the server's response_format json_object: a mask over the\n"
            "  vocabulary per token, on the host); --json-schema FILE to an instance of the JSON Schema\n"
            "  in FILE (response_format json_schema, strict: docs/STRUCTURED.md); --logprobs N computes\n"
            "  each token's log-probability\n"
            "  and N alternatives (0-20, the server's logprobs / top_logprobs): what they cost.\n"
            "  --prompt-logprobs N: the prefill gives every prompt position's log-probability and N\n"
            "  alternatives (0-20; the server's echo + logprobs: scoring, as evaluation harnesses do).\n"
            "  --spec-tokens N: speculative decoding by prompt lookup (serve --spec-tokens; the guessed\n"
            "  and kept tokens are reported). --prompt-text TEXT: the prompt is TEXT, tokenized (special\n"
            "  tokens parsed), instead of --prompt-tokens random ids (a scripted model's reply needs it).\n"
            "\n"
            "usage: cinder bench [--model M] (--trace FILE | --scenario NAME) [--page-size N]\n"
            "                    [--kv-pool-tokens N] [--ctx N] [--no-prefix-cache] [--json]\n"
            "                    [--dump-prompts FILE] [--host-cache-mb N] [--cache-dir DIR] [--concurrency N]\n"
            "                    [--cache-dir-max-mb N] [--plot OUT.svg] [--chat-template NAME]\n"
            "  replays a request trace (scripts/scenarios/README.md; NAME is one of the traces in\n"
            "  scripts/scenarios/) through the prefix cache: per request and in total, prompt,\n"
            "  cached and prefilled tokens, hit rate, evicted pages, TTFT and decode tok/s.\n"
            "  --kv-pool-tokens overrides the trace header's pool size; --json prints one object\n"
            "  with a \"requests\" array and a \"totals\" object. --dump-prompts writes each request\n"
            "  as a line \"max_tokens:id,id,...\" (what a peer replays: scripts/bench_prefix.sh).\n"
            "  --chat-template NAME (qwen3, qwen3-coder) renders a chat trace with that template instead of\n"
            "  the model file's.\n"
            "  --host-cache-mb N gives the cache a host tier of N MiB (0, the default: none): evicted\n"
            "  pages are demoted to host memory and restored on a hit (column \"restored\").\n"
            "  --cache-dir DIR gives it a disk tier in DIR (created if missing): whole 256-token\n"
            "  chunks are written through and served from there, also by a later process (column\n"
            "  \"disk\"); --cache-dir-max-mb N keeps its chunk files within N MiB (N >= 1; default 10%% of\n"
            "  the free space at start, at least 256 MiB), least recently used deleted first (JSON:\n"
            "  disk_evicted_chunks, disk_evicted_bytes, disk_over_budget, disk_budget_bytes,\n"
            "  disk_used_bytes). Neither tier goes with --no-prefix-cache. --concurrency N keeps up to N requests\n"
            "  in flight in the continuous-batching scheduler (trace order; a chat session's next\n"
            "  request after its previous reply); rows print as requests finish, JSON in trace order.\n"
            "  --plot replays the trace a second time with the prefix cache the other way and writes\n"
            "  an SVG chart of TTFT per request, cache on and off.\n"
            "\n"
            "usage: cinder bench [--model M] --agents N [--rounds R] [--system-tokens S] [--tool-tokens T]\n"
            "                    [--gen G] [--concurrency C] [--chunk-tokens K] [--no-prefix-cache]\n"
            "                    [--page-size N] [--kv-pool-tokens N] [--ctx N] [--seed S] [--json-object] [--json]\n"
            "  N agents sharing an S-token system prompt (default 1024), each R rounds (default 4) of:\n"
            "  append a T-token tool result (default 64), send the conversation, generate G tokens\n"
            "  (default 32). At most C requests in flight (default N; 1 = one at a time, the comparison\n"
            "  point), run together by the continuous-batching scheduler (prompt chunks of K tokens,\n"
            "  default 512). Prints aggregate generated tok/s, TTFT and inter-token p50/p99, cache hit\n"
            "  rate and the prefill tokens saved by dedup; --json: decode_tok_s_total, ttft_ms_p50,\n"
            "  ttft_ms_p99, itl_ms_p50, itl_ms_p99, cached_tokens, prompt_tokens, ...\n"
            "\n"
            "usage: cinder bench [--model M] --restore-bench [--repeat N] [--seed S] [--json] [--cache-dir DIR]\n"
            "                    [--cache-dir-max-mb N]\n"
            "  time to restore an N-token prefix from the host tier and from disk files vs recomputing\n"
            "  it (prefill), for N = 512, 4800, 16000 (those below the model's context), with bytes/s;\n"
            "  medians. The files go to --cache-dir (default: a fresh directory under $TMPDIR or /tmp,\n"
            "  removed after; its budget, unless given, holds the largest prefix).\n"
            "\n"
            "  Every form takes " CLI_MEMORY_FLAGS ". " CLI_DEVICE_MEMORY_USAGE "\n");
}

static int parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.n_prompt = 512, .n_gen = 128, .repeat = 3, .seed = 1, .logprobs = -1, .prompt_logprobs = -1};
    o->eo.build_pipelines = true; /* no compile inside a timed pass (vk_pipeline.h) */
    bench_agents_opts *ag = &o->agents;
    *ag = (bench_agents_opts){.rounds = 4, .system_tokens = 1024, .tool_tokens = 64, .gen = 32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_flag(argv, i, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (cli_flag(argv, i, "--json")) {
            o->json = true;
            continue;
        }
        if (cli_flag(argv, i, "--profile"))
            return cli_error("bench", "--profile is now 'cinder profile' (per op time, bytes, roofline, trace)"), -1;
        if (cli_flag(argv, i, "--restore-bench")) {
            o->restore = true;
            continue;
        }
        if (cli_flag(argv, i, "--json-object")) {
            o->json_object = ag->json_object = true;
            continue;
        }
        int rope = cli_rope(argc, argv, &i, &o->rope),
            eng = rope ? 0 : cli_engine_flag("bench", argc, argv, &i, &o->eo);
        if (rope < 0 || eng < 0) return -1;
        if (rope || eng) continue;
        if (cli_value(argc, argv, &i, "--model", &v)) o->model = v;
        else if (cli_value(argc, argv, &i, "--json-schema", &v)) o->json_schema_file = v;
        else if (cli_value(argc, argv, &i, "--prompt-text", &v)) o->prompt_text = v;
        else if (cli_value(argc, argv, &i, "--trace", &v)) o->trace.trace = v;
        else if (cli_value(argc, argv, &i, "--chat-template", &v)) o->trace.chat_template = v;
        else if (cli_value(argc, argv, &i, "--scenario", &v)) o->trace.scenario = v;
        else if (cli_value(argc, argv, &i, "--gate-up-pairs", &v)) {
            if (cli_auto_on_off("bench", "--gate-up-pairs", v, &o->gate_up_pairs)) return -1;
        } else if (cli_value(argc, argv, &i, "--int-dot", &v)) {
            if (cli_auto_on_off("bench", "--int-dot", v, &o->int_dot)) return -1;
        } else if (cli_value(argc, argv, &i, "--dump-prompts", &v)) o->trace.dump_prompts = v;
        else if (cli_value(argc, argv, &i, "--plot", &v)) o->trace.plot = v;
        else if (cli_value(argc, argv, &i, "--prompt-tokens", &v)) {
            if (cli_u32("--prompt-tokens", v, &o->n_prompt)) return -1;
        } else if (cli_value(argc, argv, &i, "--gen", &v)) {
            if (cli_u32("--gen", v, &o->n_gen)) return -1;
            o->gen_given = true;
        } else if (cli_value(argc, argv, &i, "--agents", &v)) {
            if (cli_u32("--agents", v, &ag->agents)) return -1;
        } else if (cli_value(argc, argv, &i, "--rounds", &v)) {
            if (cli_u32("--rounds", v, &ag->rounds)) return -1;
        } else if (cli_value(argc, argv, &i, "--system-tokens", &v)) {
            if (cli_u32("--system-tokens", v, &ag->system_tokens)) return -1;
        } else if (cli_value(argc, argv, &i, "--tool-tokens", &v)) {
            if (cli_u32("--tool-tokens", v, &ag->tool_tokens)) return -1;
        } else if (cli_value(argc, argv, &i, "--concurrency", &v)) {
            if (cli_u32("--concurrency", v, &ag->concurrency)) return -1;
            o->trace.concurrency = ag->concurrency;
        } else if (cli_value(argc, argv, &i, "--chunk-tokens", &v)) {
            if (cli_u32("--chunk-tokens", v, &o->eo.chunk_tokens)) return -1;
        } else if (cli_value(argc, argv, &i, "--repeat", &v)) {
            if (cli_u32("--repeat", v, &o->repeat)) return -1;
        } else if (cli_value(argc, argv, &i, "--seed", &v)) {
            if (cli_u64("--seed", v, &o->seed)) return -1;
        } else if (cli_value(argc, argv, &i, "--logprobs", &v)) {
            uint32_t n;
            if (cli_u32("--logprobs", v, &n)) return -1;
            if (n > TOP_LOGPROBS_MAX) return cli_error("bench", "--logprobs is at most %d", TOP_LOGPROBS_MAX), -1;
            o->logprobs = (int32_t)n;
        } else if (cli_value(argc, argv, &i, "--prompt-logprobs", &v)) {
            uint32_t n;
            if (cli_u32("--prompt-logprobs", v, &n)) return -1;
            if (n > TOP_LOGPROBS_MAX)
                return cli_error("bench", "--prompt-logprobs is at most %d", TOP_LOGPROBS_MAX), -1;
            o->prompt_logprobs = (int32_t)n;
        } else return cli_unknown("bench", a), -1;
        if (!v) return cli_error("bench", "%s needs a value", a), -1;
    }
    if (o->n_prompt == 0) return cli_error("bench", "--prompt-tokens must be at least 1"), -1;
    if (ag->agents) {
        if (o->gen_given) ag->gen = o->n_gen;
        if (ag->concurrency > ag->agents) ag->concurrency = ag->agents;
        if (ag->concurrency > 256 || (!ag->concurrency && ag->agents > 256))
            return cli_error("bench", "--concurrency is at most 256"), -1;
        if (o->trace.trace || o->trace.scenario || o->restore)
            return cli_error("bench", "--agents does not go with --trace, --scenario or --restore-bench"), -1;
        ag->eo = o->eo;
        ag->seed = o->seed;
    }
    if (o->repeat == 0) return cli_error("bench", "--repeat must be at least 1"), -1;
    if (o->trace.trace && o->trace.scenario) return cli_error("bench", "give --trace or --scenario, not both"), -1;
    chat_template_id tmpl;
    if (o->trace.chat_template && chat_template_from_name(o->trace.chat_template, &tmpl))
        return cli_error("bench", "--chat-template: %s", cd_errmsg()), -1;
    if (o->trace.concurrency > 256) return cli_error("bench", "--concurrency is at most 256"), -1;
    if (cli_engine_check("bench", &o->eo)) return -1;
    o->trace.eo = o->eo;
    if (o->eo.cache_dir_max_bytes && !o->trace.trace && !o->trace.scenario && !o->restore)
        return cli_error("bench", "--cache-dir-max-mb goes with --trace, --scenario or --restore-bench"), -1;
    return 0;
}

static void drop_logprob(void *ctx, const token_logprob *lp) { (void)ctx, (void)lp; }
static void drop_prompt_logprob(void *ctx, uint32_t pos, const token_logprob *lp) { (void)ctx, (void)pos, (void)lp; }

/* One request through the engine (the path chat and the server serve, the prefix cache off):
 * the prompt's passes end with the first token (prefill), then n_gen greedy decode steps. */
static int bench_once(engine *e, const bench_opts *o, const int32_t *ids, uint32_t n_prompt, uint32_t n_gen,
                      bench_run *out) {
    engine_request rq = {.ids = ids,
                         .n = n_prompt,
                         .max_tokens = n_gen + 1,
                         .ignore_eos = true,
                         .json_object = o->json_object,
                         .json_schema = o->schema,
                         .on_logprob = o->logprobs >= 0 ? drop_logprob : NULL,
                         .top_logprobs = o->logprobs > 0 ? (uint32_t)o->logprobs : 0,
                         .on_prompt_logprob = o->prompt_logprobs >= 0 ? drop_prompt_logprob : NULL,
                         .prompt_top_logprobs = o->prompt_logprobs > 0 ? (uint32_t)o->prompt_logprobs : 0};
    engine_reply r;
    if (engine_generate(e, &rq, &r)) return -1;
    out->prefill_ms = r.ttft_ms;
    out->decode_ms = r.decode_ms;
    out->draft_tokens = r.draft_tokens, out->accepted_tokens = r.accepted_tokens;
    int rc = r.n == n_gen + 1 ? 0 : cd_fail("bench: %u of %u tokens generated", r.n, n_gen + 1);
    engine_reply_free(&r);
    return rc;
}

static json_t *json_runs(const double *v, uint32_t n) {
    json_t *a = json_array();
    for (uint32_t k = 0; k < n; k++) json_array_append_new(a, json_real(v[k]));
    return a;
}

/* Medians of the repeats; with --json also every repeat's figures in run order (prefill_runs,
 * decode_runs, as llama_oracle --bench writes them): a GPU's first runs can differ from the rest.
 * The medians sort pps and tgs. */
static void report(const bench_opts *o, const model *m, const cvk_ctx *vk, double *pps, double *tgs, double load_ms,
                   const bench_run *spec) {
    uint64_t guessed = spec->draft_tokens, kept = spec->accepted_tokens; /* the repeats' */
    json_t *pr = o->json ? json_runs(pps, o->repeat) : NULL, *tr = o->json ? json_runs(tgs, o->repeat) : NULL;
    double pp = cli_median(pps, o->repeat), tg = cli_median(tgs, o->repeat);
    if (!o->json) {
        printf("model   %s (%s, %u layers, %u experts)\n", o->model, model_arch_name(m->cfg.arch), m->cfg.n_layer,
               m->cfg.n_expert);
        printf("device  %s\n", vk->dev.info.props.deviceName);
        printf("pp%-5u %10.2f tok/s   (median of %u%s)\n", o->n_prompt, pp, o->repeat,
               o->prompt_logprobs >= 0 ? "; every position's log-probabilities" : "");
        if (o->n_gen) printf("tg%-5u %10.2f tok/s   (median of %u)\n", o->n_gen, tg, o->repeat);
        printf("load    %10.1f ms (weights to the device, pipelines)\n", load_ms);
        if (o->eo.spec_tokens)
            printf("spec    %llu of %llu guessed tokens kept (up to %u a pass)\n", (unsigned long long)kept,
                   (unsigned long long)guessed, o->eo.spec_tokens);
        return;
    }
    json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f}", "model", o->model, "device",
                          vk->dev.info.props.deviceName, "prompt_tokens", (json_int_t)o->n_prompt, "gen_tokens",
                          (json_int_t)o->n_gen, "repeat", (json_int_t)o->repeat, "prefill_tok_s", pp, "decode_tok_s",
                          tg, "load_ms", load_ms);
    json_object_set_new(j, "spec_tokens", json_integer(o->eo.spec_tokens));
    json_object_set_new(j, "prompt_logprobs", o->prompt_logprobs >= 0 ? json_integer(o->prompt_logprobs) : json_null());
    json_object_set_new(j, "draft_tokens", json_integer((json_int_t)guessed));
    json_object_set_new(j, "accepted_tokens", json_integer((json_int_t)kept));
    json_object_set_new(j, "prefill_runs", pr);
    json_object_set_new(j, "decode_runs", tr);
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    puts(s);
    free(s);
    json_decref(j);
}

/* The prompt: --prompt-text's tokens (o->n_prompt set to their count), or seeded random ids. */
static int32_t *bench_prompt(bench_opts *o, const model *m) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (o->prompt_text) {
        if (tok_encode(m->tok, o->prompt_text, strlen(o->prompt_text), true, &ids, &n)) return NULL;
        if (!n) return free(ids), cd_fail("--prompt-text has no tokens"), NULL;
        o->n_prompt = (uint32_t)n;
        return ids;
    }
    if (!(ids = malloc(o->n_prompt * sizeof *ids))) return cd_fail("out of memory"), NULL;
    rng r;
    rng_seed(&r, o->seed);
    for (uint32_t i = 0; i < o->n_prompt; i++) ids[i] = (int32_t)rng_below(&r, m->cfg.n_vocab);
    return ids;
}

static int bench(bench_opts *o, model *m) {
    int32_t *ids = bench_prompt(o, m);
    if (!ids) return cli_error("bench", "%s", cd_errmsg());
    uint32_t need = o->n_prompt + o->n_gen + 1, n_ctx = need; /* the last token chosen is not fed */
    if (need > m->cfg.n_ctx_train) {
        free(ids);
        return cli_error("bench", "%u prompt + %u generated tokens exceed the model's context (%u)", o->n_prompt,
                         o->n_gen, m->cfg.n_ctx_train);
    }
    if (o->eo.n_ctx) { /* a larger context than the run needs (the speed must not depend on it) */
        const char *bad = o->eo.n_ctx < need   ? "is below the prompt + generated tokens"
            : o->eo.n_ctx > m->cfg.n_ctx_train ? "exceeds the model's context"
                                               : NULL;
        if (bad) {
            free(ids);
            return cli_error("bench", "--ctx %u %s (%u + %u; the model's %u)", o->eo.n_ctx, bad, o->n_prompt, o->n_gen,
                             m->cfg.n_ctx_train);
        }
        n_ctx = o->eo.n_ctx;
    }
    double *pp = calloc(o->repeat, sizeof *pp), *tg = calloc(o->repeat, sizeof *tg);
    engine e = {0};
    if (!pp || !tg) {
        free(ids);
        free(pp);
        free(tg);
        return cli_error("bench", "out of memory");
    }

    int rc = 0;
    double t0 = cd_now_ms();
    /* the flags' memory plan and speculation; one request, no prefix cache (each repeat from scratch) */
    engine_opts eo = {.n_ctx = n_ctx,
                      .build_pipelines = true,
                      .pool_tokens = need,
                      .no_prefix_cache = true,
                      .gate_up_pairs = o->gate_up_pairs,
                      .int_dot = o->int_dot,
                      .spec_tokens = o->eo.spec_tokens,
                      .chunk_tokens = o->eo.chunk_tokens,
                      .device_memory_mb = o->eo.device_memory_mb,
                      .host_expert_layers = o->eo.host_expert_layers,
                      .host_experts_fixed = o->eo.host_experts_fixed};
    if (engine_init(&e, m, &eo)) rc = -1;
    double load_ms = cd_now_ms() - t0;
    bench_run warm, spec = {0};
    uint32_t n_warm = o->n_prompt < 8 ? o->n_prompt : 8;
    if (!rc && bench_once(&e, o, ids, n_warm, o->n_gen < 2 ? o->n_gen : 2, &warm)) rc = -1;
    for (uint32_t k = 0; !rc && k < o->repeat; k++) {
        bench_run b;
        if (bench_once(&e, o, ids, o->n_prompt, o->n_gen, &b)) {
            rc = -1;
            break;
        }
        spec.draft_tokens += b.draft_tokens, spec.accepted_tokens += b.accepted_tokens;
        pp[k] = o->n_prompt / (b.prefill_ms / 1e3);
        tg[k] = o->n_gen ? o->n_gen / (b.decode_ms / 1e3) : 0;
        if (!o->json)
            fprintf(stderr, "repeat %u: prefill %.1f ms (%.2f tok/s), decode %.1f ms (%.2f tok/s)\n", k + 1,
                    b.prefill_ms, pp[k], b.decode_ms, tg[k]);
    }
    if (rc) cli_error("bench", "%s", cd_errmsg());
    else report(o, m, engine_device(&e), pp, tg, load_ms, &spec);
    engine_free(&e);
    free(ids);
    free(pp);
    free(tg);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    if (parse(argc, argv, &o)) return 1;
    if (o.json_schema_file && (o.json_object || o.agents.agents || o.trace.trace || o.trace.scenario || o.restore))
        return cli_error("bench", "--json-schema goes with the single-request bench only, not with --json-object");
    if (o.json_schema_file) {
        json_error_t je;
        json_t *doc = json_load_file(o.json_schema_file, JSON_DECODE_ANY, &je);
        if (!doc) return cli_error("bench", "%s: %s (line %d)", o.json_schema_file, je.text, je.line);
        o.schema = json_schema_compile(doc, true);
        json_decref(doc);
        if (!o.schema) return cli_error("bench", "%s: %s", o.json_schema_file, cd_errmsg());
    }
    if (!o.model) {
        if (cli_ensure_default_model()) return 1;
        o.model = cli_default_model();
    }
    model *m;
    if (model_load(&m, o.model, (model_load_opts){.skip_weight_hash = true, .rope = o.rope}))
        return cli_error("bench", "%s", cd_errmsg());
    o.trace.model = o.model;
    o.trace.json = o.json;
    o.agents.model = o.model;
    o.agents.json = o.json;
    if (o.agents.agents) {
        int rc = bench_agents(&o.agents, m);
        model_free(m);
        return rc;
    }
    if (o.trace.plot && !o.trace.trace && !o.trace.scenario) {
        model_free(m);
        return cli_error("bench", "--plot goes with --trace or --scenario (TTFT per request, cache on and off)");
    }
    int rc = o.restore                      ? bench_restore(o.model, m, o.repeat, o.seed, o.json, &o.eo)
        : o.trace.trace || o.trace.scenario ? bench_trace(&o.trace, m)
                                            : bench(&o, m);
    model_free(m);
    json_schema_unref(o.schema);
    return rc ? 1 : 0;
}
