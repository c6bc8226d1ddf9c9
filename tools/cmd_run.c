/* cinder run: generate from a prompt and report timings. The Vulkan engine (one request through
 * engine/engine.h, the prefix cache off) is the default; --cpu runs the CPU reference
 * (the oracle) token by token into the same sink. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/model/fingerprint.h"
#include "engine/engine.h"
#include "runtime/model/model.h"
#include "runtime/model/sampler.h"
#include "tools/cli.h"
#include "tools/commands.h"

typedef struct run_opts {
    const char *model, *prompt, *tokens, *logits_file;
    uint32_t n_gen, n_ctx;
    sampler_params sp;
    bool json, ignore_eos, gpu;
    int draw;           /* engine_opts.draw */
    engine_opts memory; /* device_memory_mb and the experts' placement (cli_memory), for the engine */
    uint32_t n_logits;
    rope_override rope;
} run_opts;

typedef struct run_result {
    int32_t *prompt;
    size_t n_prompt;
    int32_t *gen;
    size_t n_gen;
    char *text;
    double prefill_ms, decode_ms, ttft_ms;
    uint32_t n_ctx;
    bool eog; /* stopped at an end-of-generation token (finish_reason "stop"), else "length" */
    int32_t top_ids[256];
    float top_vals[256];
    int32_t n_top;
} run_result;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder run [--model M] (--prompt TEXT | --tokens 1,2,3) [--n N] [--ctx N]\n"
            "                  [--temp T] [--top-k K] [--top-p P] [--seed S] [--ignore-eos]\n"
            "                  [--json] [--logits K] [--logits-file PATH] [--cpu | --gpu]\n"
            "                  [--draw auto|device|host] " CLI_MEMORY_FLAGS "\n"
            "                  " CLI_ROPE_USAGE "\n"
            "  --prompt is raw text (special tokens like <|im_start|> are parsed); sampling is greedy\n"
            "  unless --temp > 0. --ctx holds the prompt and the generated tokens (default prompt + --n,\n"
            "  at most what the model was trained for): generation stops at its end (finish_reason\n"
            "  \"length\", as at --n; \"stop\" at an end-of-generation token).\n"
            "  --json prints one object; --logits K adds the top-K [id, value]\n"
            "  pairs at the last prompt position. --logits-file writes all last-prompt-position\n"
            "  logits to PATH as raw float32 (n_vocab values, host byte order).\n"
            "  --gpu (the default) runs the Vulkan engine (CINDER_DEVICE picks the device), --cpu the\n"
            "  CPU reference. --draw: where a sampled token is drawn (auto: on the device when it is a\n"
            "  GPU, on the host for a CPU device; top_k 0, \"all\", always on the host).\n"
            "  The RoPE flags override the file's (YaRN: docs/GGUF.md, \"RoPE\"). " CLI_DEVICE_MEMORY_USAGE "\n");
}

static int parse(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.n_gen = 32, .gpu = true, .sp = {.temperature = 0, .top_k = 40, .top_p = 0.95f, .seed = 42}};
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
        if (cli_flag(argv, i, "--cpu")) {
            o->gpu = false;
            continue;
        }
        if (cli_flag(argv, i, "--gpu")) {
            o->gpu = true;
            continue;
        }
        if (cli_flag(argv, i, "--ignore-eos")) {
            o->ignore_eos = true;
            continue;
        }
        int rope = cli_rope(argc, argv, &i, &o->rope), mem = rope ? 0 : cli_memory(argc, argv, &i, &o->memory);
        if (rope < 0 || mem < 0) return -1;
        if (rope || mem) continue;
        if (cli_value(argc, argv, &i, "--model", &v)) o->model = v;
        else if (cli_value(argc, argv, &i, "--prompt", &v)) o->prompt = v;
        else if (cli_value(argc, argv, &i, "--tokens", &v)) o->tokens = v;
        else if (cli_value(argc, argv, &i, "--n", &v)) {
            if (cli_u32("--n", v, &o->n_gen)) return -1;
        } else if (cli_value(argc, argv, &i, "--ctx", &v)) {
            if (cli_u32("--ctx", v, &o->n_ctx)) return -1;
        } else if (cli_value(argc, argv, &i, "--temp", &v)) {
            if (cli_f32("--temp", v, &o->sp.temperature)) return -1;
        } else if (cli_value(argc, argv, &i, "--top-k", &v)) {
            if (cli_i32("--top-k", v, &o->sp.top_k)) return -1;
        } else if (cli_value(argc, argv, &i, "--top-p", &v)) {
            if (cli_f32("--top-p", v, &o->sp.top_p)) return -1;
        } else if (cli_value(argc, argv, &i, "--seed", &v)) {
            if (cli_u64("--seed", v, &o->sp.seed)) return -1;
        } else if (cli_value(argc, argv, &i, "--draw", &v)) {
            if (!strcmp(v, "auto")) o->draw = ENGINE_DRAW_AUTO;
            else if (!strcmp(v, "device")) o->draw = ENGINE_DRAW_DEVICE;
            else if (!strcmp(v, "host")) o->draw = ENGINE_DRAW_HOST;
            else return cli_error("run", "--draw %s: auto, device or host", v);
        } else if (cli_value(argc, argv, &i, "--logits-file", &v)) o->logits_file = v;
        else if (cli_value(argc, argv, &i, "--logits", &v)) {
            if (cli_u32("--logits", v, &o->n_logits)) return -1;
        } else return cli_unknown("run", a), -1;
        if (!v) return cli_error("run", "%s needs a value", a), -1;
    }
    if (!o->prompt == !o->tokens) return cli_error("run", "give exactly one of --prompt TEXT or --tokens 1,2,3"), -1;
    if (o->n_logits > 256) return cli_error("run", "--logits is at most 256"), -1;
    return 0;
}

static int prompt_ids(const run_opts *o, const model *m, run_result *r) {
    if (o->tokens) {
        if (cli_ids("--tokens", o->tokens, &r->prompt, &r->n_prompt)) return -1;
        for (size_t i = 0; i < r->n_prompt; i++)
            if ((uint32_t)r->prompt[i] >= m->cfg.n_vocab)
                return cli_error("run", "token id %d out of range (vocabulary %u)", r->prompt[i], m->cfg.n_vocab), -1;
        return 0;
    }
    if (tok_encode(m->tok, o->prompt, strlen(o->prompt), true, &r->prompt, &r->n_prompt))
        return cli_error("run", "%s", cd_errmsg()), -1;
    if (r->n_prompt == 0) return cli_error("run", "the prompt is empty"), -1;
    return 0;
}

static int write_logits(const char *path, const float *logits, uint32_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return cli_error("run", "%s: cannot create", path);
    size_t put = fwrite(logits, sizeof *logits, n, f);
    if (fclose(f) || put != n) return cli_error("run", "%s: write failed", path);
    return 0;
}

/* Where generated tokens go: the result, the text (streamed to stdout unless --json), and the
 * logits at the last prompt position when asked for. One sink for both backends. */
typedef struct run_sink {
    const run_opts *o;
    const model *m;
    run_result *r;
    uint32_t n_gen;  /* tokens wanted */
    size_t len, cap; /* of r->text */
    tok_stream ts;
    double t0;     /* the prompt's start */
    float *logits; /* GPU: the engine writes each chosen token's logits here (NULL: not wanted) */
    int rc;
} run_sink;

static int sink_logits(run_sink *k, const float *lg) {
    const run_opts *o = k->o;
    run_result *r = k->r;
    if (o->logits_file && write_logits(o->logits_file, lg, k->m->cfg.n_vocab)) return -1;
    if (o->n_logits)
        r->n_top = sampler_top_k(lg, (int32_t)k->m->cfg.n_vocab, (int32_t)o->n_logits, r->top_ids, r->top_vals);
    return 0;
}

/* One generated token; false once no more are wanted (or it ended the generation). */
static bool sink_token(void *ctx, int32_t id) {
    run_sink *k = ctx;
    run_result *r = k->r;
    if (r->n_gen == 0 && k->logits && k->o->gpu) k->rc = sink_logits(k, k->logits); /* the first token's logits */
    if (k->rc || r->n_gen >= k->n_gen) return false;
    if (r->n_gen == 0) r->ttft_ms = cd_now_ms() - k->t0;
    r->gen[r->n_gen++] = id;
    char piece[256];
    int n = tok_stream_push(k->m->tok, &k->ts, id, piece, sizeof piece);
    if (n > 0) {
        if (k->len + (size_t)n + 1 > k->cap) {
            char *t = realloc(r->text, k->cap = 2 * (k->len + (size_t)n + 1));
            if (!t) return k->rc = cli_error("run", "out of memory"), false;
            r->text = t;
        }
        memcpy(r->text + k->len, piece, (size_t)n);
        k->len += (size_t)n;
        if (!k->o->json) {
            fwrite(piece, 1, (size_t)n, stdout);
            fflush(stdout);
        }
    }
    if (!k->o->ignore_eos && tok_is_eog(k->m->tok, id)) {
        r->eog = true;
        return false;
    }
    return r->n_gen < k->n_gen;
}

/* The CPU reference, token by token: the oracle the engine is compared with. */
static int generate_cpu(run_sink *k, uint32_t n_ctx) {
    run_result *r = k->r;
    cpu_state st;
    sampler smp;
    if (sampler_init(&smp, k->o->sp, (int32_t)k->m->cfg.n_vocab)) return cli_error("run", "%s", cd_errmsg());
    int rc = cpu_state_init(&st, k->m, n_ctx) ? cli_error("run", "%s", cd_errmsg()) : 0;
    for (size_t i = 0; !rc && i < r->n_prompt; i++)
        if (cpu_forward(&st, r->prompt[i], (uint32_t)i, i + 1 == r->n_prompt)) rc = cli_error("run", "%s", cd_errmsg());
    r->prefill_ms = cd_now_ms() - k->t0;
    if (!rc && (k->o->logits_file || k->o->n_logits)) rc = sink_logits(k, st.logits);
    double t1 = cd_now_ms();
    for (uint32_t i = 0; !rc && i < k->n_gen; i++) {
        bool more = sink_token(k, sampler_sample(&smp, st.logits));
        if ((rc = k->rc) || !more) break;
        if (cpu_forward(&st, r->gen[i], (uint32_t)(r->n_prompt + i), true)) rc = cli_error("run", "%s", cd_errmsg());
    }
    r->decode_ms = cd_now_ms() - t1;
    cpu_state_free(&st);
    sampler_free(&smp);
    return rc;
}

/* The Vulkan engine (engine/engine.h), one request, the prefix cache off: the path the
 * server and chat serve, seeded sampling where --draw says. */
static int generate_gpu(run_sink *k, model *m, uint32_t n_ctx) {
    run_result *r = k->r;
    engine e;
    engine_opts eo = {.n_ctx = n_ctx,
                      .pool_tokens = n_ctx,
                      .no_prefix_cache = true,
                      .draw = k->o->draw,
                      .device_memory_mb = k->o->memory.device_memory_mb,
                      .host_expert_layers = k->o->memory.host_expert_layers,
                      .host_experts_fixed = k->o->memory.host_experts_fixed};
    int rc = engine_init(&e, m, &eo) ? cli_error("run", "%s", cd_errmsg()) : 0;
    if (!rc && (k->o->logits_file || k->o->n_logits) && !(k->logits = malloc(m->cfg.n_vocab * sizeof *k->logits)))
        rc = cli_error("run", "out of memory");
    engine_request rq = {.ids = r->prompt,
                         .n = (uint32_t)r->n_prompt,
                         .max_tokens = k->n_gen ? k->n_gen : 1,
                         .ignore_eos = true, /* the sink stops at an end-of-generation token itself */
                         .on_token = sink_token,
                         .ctx = k,
                         .sp = &k->o->sp,
                         .logits_out = k->logits};
    engine_reply rep = {0};
    if (!rc && engine_generate(&e, &rq, &rep)) rc = cli_error("run", "%s", cd_errmsg());
    if (!rc) rc = k->rc;
    r->prefill_ms = rep.ttft_ms; /* the prompt's pass ends with the first token chosen */
    r->decode_ms = rep.decode_ms;
    engine_reply_free(&rep);
    engine_free(&e);
    free(k->logits);
    return rc;
}

/* Prefill the prompt, then decode one token at a time, streaming text unless --json. The
 * context (--ctx, else prompt + --n up to what the model was trained for) holds the prompt and
 * every generated token: a prompt that leaves no room fails naming both lengths; decoding that
 * reaches the end stops there (finish_reason "length", a line on stderr). */
static int generate(const run_opts *o, model *m, run_result *r) {
    uint64_t want = r->n_prompt + (uint64_t)o->n_gen;
    uint32_t n_ctx = o->n_ctx ? o->n_ctx : want < m->cfg.n_ctx_train ? (uint32_t)want : m->cfg.n_ctx_train;
    if (n_ctx > m->cfg.n_ctx_train)
        return cli_error("run", "--ctx %u is more than the model was trained for (%u)", n_ctx, m->cfg.n_ctx_train), -1;
    if (r->n_prompt >= n_ctx)
        return cli_error("run", "the prompt has %zu tokens; the context holds %u (%s): no room to generate",
                         r->n_prompt, n_ctx, o->n_ctx ? "--ctx" : "what the model was trained for"),
               -1;
    r->n_ctx = n_ctx;
    uint32_t n_gen = want > n_ctx ? n_ctx - (uint32_t)r->n_prompt : o->n_gen;
    run_sink k = {.o = o, .m = m, .r = r, .n_gen = n_gen, .cap = 256, .t0 = cd_now_ms()};
    r->gen = malloc((n_gen ? n_gen : 1) * sizeof *r->gen);
    r->text = malloc(k.cap);
    int rc = r->gen && r->text ? 0 : cli_error("run", "out of memory");
    if (!rc) rc = o->gpu ? generate_gpu(&k, m, n_ctx) : generate_cpu(&k, n_ctx);
    char tail[16]; /* an incomplete UTF-8 sequence left at the end comes out as U+FFFD */
    int n_tail = rc ? 0 : tok_stream_flush(&k.ts, tail, sizeof tail);
    if (n_tail > 0 && r->text) {
        if (k.len + (size_t)n_tail + 1 > k.cap) r->text = realloc(r->text, k.cap = k.len + (size_t)n_tail + 1);
        memcpy(r->text + k.len, tail, (size_t)n_tail);
        k.len += (size_t)n_tail;
        if (!o->json) fwrite(tail, 1, (size_t)n_tail, stdout);
    }
    if (r->text) r->text[k.len] = 0;
    if (!rc && !r->eog && n_gen < o->n_gen)
        fprintf(stderr, "%srun: stopped at the end of the context (%u tokens): %zu of --n %u tokens generated\n",
                o->json ? "" : "\n", n_ctx, r->n_gen, o->n_gen);
    return rc;
}

static void print_json(const run_opts *o, const run_result *r, const model *m) {
    json_t *j = json_object(), *toks = json_array();
    for (size_t i = 0; i < r->n_gen; i++) json_array_append_new(toks, json_integer(r->gen[i]));
    json_object_set_new(j, "tokens", toks);
    json_object_set_new(j, "text", json_string(r->text ? r->text : ""));
    json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)r->n_prompt));
    json_object_set_new(j, "generated_tokens", json_integer((json_int_t)r->n_gen));
    json_object_set_new(j, "finish_reason", json_string(r->eog ? "stop" : "length"));
    json_object_set_new(j, "context_full", json_boolean(r->n_prompt + r->n_gen >= r->n_ctx));
    json_object_set_new(j, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(j, "ttft_ms", json_real(r->ttft_ms));
    json_object_set_new(j, "prefill_ms", json_real(r->prefill_ms));
    json_object_set_new(j, "prefill_tok_s", json_real(r->prefill_ms > 0 ? r->n_prompt / (r->prefill_ms / 1e3) : 0));
    double dec = r->n_gen > 1 ? (r->n_gen - 1) / (r->decode_ms / 1e3) : 0;
    json_object_set_new(j, "decode_tok_s", json_real(dec));
    json_object_set_new(j, "backend", json_string(o->gpu ? "vulkan" : "cpu"));
    char fp[65];
    fp_hex(m->fingerprint, 32, fp);
    json_object_set_new(j, "fingerprint", json_string(fp));
    if (o->n_logits) {
        json_t *l = json_array();
        for (int32_t i = 0; i < r->n_top; i++)
            json_array_append_new(l, json_pack("[if]", r->top_ids[i], (double)r->top_vals[i]));
        json_object_set_new(j, "logits", l);
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    puts(s);
    free(s);
    json_decref(j);
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    if (parse(argc, argv, &o)) return 1;
    if (!o.model) {
        if (cli_ensure_default_model()) return 1;
        o.model = cli_default_model();
    }
    model *m;
    if (model_load(&m, o.model, (model_load_opts){.skip_weight_hash = o.gpu, .rope = o.rope}))
        return cli_error("run", "%s", cd_errmsg());
    run_result r = {0};
    int rc = prompt_ids(&o, m, &r) || generate(&o, m, &r);
    if (!rc && o.json) print_json(&o, &r, m);
    else if (!rc) {
        double dec = r.n_gen > 1 ? (r.n_gen - 1) / (r.decode_ms / 1e3) : 0;
        fprintf(stderr,
                "\n\nprompt %zu tokens | TTFT %.1f ms | prefill %.1f tok/s | decode %.2f tok/s (%zu tokens, %s) | %s\n",
                r.n_prompt, r.ttft_ms, r.n_prompt / (r.prefill_ms / 1e3), dec, r.n_gen, r.eog ? "stop" : "length",
                o.gpu ? "vulkan" : "cpu reference");
    }
    free(r.prompt);
    free(r.gen);
    free(r.text);
    model_free(m);
    return rc ? 1 : 0;
}
