/* cinder run: generate from a prompt and report timings. The Vulkan engine
 * (runtime/model/gpu_model.h) is the default: batched prefill, then the recorded decode step
 * with the next token chosen on the GPU, so only its id crosses back per step. --cpu runs
 * the CPU reference (the oracle) through the same loop. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/gpu_model.h"
#include "runtime/model/model.h"
#include "runtime/model/sampler.h"
#include "tools/cli.h"
#include "tools/commands.h"

typedef struct run_opts {
    const char *model, *prompt, *tokens, *logits_file;
    uint32_t n_gen, n_ctx;
    sampler_params sp;
    bool json, ignore_eos, gpu;
    uint32_t n_logits;
} run_opts;

typedef struct run_result {
    int32_t *prompt;
    size_t n_prompt;
    int32_t *gen;
    size_t n_gen;
    char *text;
    double prefill_ms, decode_ms, ttft_ms;
    uint32_t n_ctx;
    bool eog;      /* stopped at an end-of-generation token (finish_reason "stop"), else "length" */
    int32_t top_ids[256];
    float top_vals[256];
    int32_t n_top;
} run_result;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder run [--model M] (--prompt TEXT | --tokens 1,2,3) [--n N] [--ctx N]\n"
            "                  [--temp T] [--top-k K] [--top-p P] [--seed S] [--ignore-eos]\n"
            "                  [--json] [--logits K] [--logits-file PATH] [--cpu | --gpu]\n"
            "  --prompt is raw text (special tokens like <|im_start|> are parsed); sampling is greedy\n"
            "  unless --temp > 0. --ctx holds the prompt and the generated tokens (default prompt + --n,\n"
            "  at most what the model was trained for): generation stops at its end (finish_reason\n"
            "  \"length\", as at --n; \"stop\" at an end-of-generation token).\n"
            "  --json prints one object; --logits K adds the top-K [id, value]\n"
            "  pairs at the last prompt position. --logits-file writes all last-prompt-position\n"
            "  logits to PATH as raw float32 (n_vocab values, host byte order).\n"
            "  --gpu (the default) runs the Vulkan engine (CINDER_DEVICE picks the device), --cpu the\n"
            "  CPU reference.\n");
}

static int parse(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.n_gen = 32, .gpu = true, .sp = {.temperature = 0, .top_k = 40, .top_p = 0.95f, .seed = 42}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_flag(argv, i, "--help")) { usage(stdout); exit(0); }
        if (cli_flag(argv, i, "--json")) { o->json = true; continue; }
        if (cli_flag(argv, i, "--cpu")) { o->gpu = false; continue; }
        if (cli_flag(argv, i, "--gpu")) { o->gpu = true; continue; }
        if (cli_flag(argv, i, "--ignore-eos")) { o->ignore_eos = true; continue; }
        if (cli_value(argc, argv, &i, "--model", &v)) o->model = v;
        else if (cli_value(argc, argv, &i, "--prompt", &v)) o->prompt = v;
        else if (cli_value(argc, argv, &i, "--tokens", &v)) o->tokens = v;
        else if (cli_value(argc, argv, &i, "--n", &v)) { if (cli_u32("--n", v, &o->n_gen)) return -1; }
        else if (cli_value(argc, argv, &i, "--ctx", &v)) { if (cli_u32("--ctx", v, &o->n_ctx)) return -1; }
        else if (cli_value(argc, argv, &i, "--temp", &v)) { if (cli_f32("--temp", v, &o->sp.temperature)) return -1; }
        else if (cli_value(argc, argv, &i, "--top-k", &v)) { if (cli_i32("--top-k", v, &o->sp.top_k)) return -1; }
        else if (cli_value(argc, argv, &i, "--top-p", &v)) { if (cli_f32("--top-p", v, &o->sp.top_p)) return -1; }
        else if (cli_value(argc, argv, &i, "--seed", &v)) { if (cli_u64("--seed", v, &o->sp.seed)) return -1; }
        else if (cli_value(argc, argv, &i, "--logits-file", &v)) o->logits_file = v;
        else if (cli_value(argc, argv, &i, "--logits", &v)) { if (cli_u32("--logits", v, &o->n_logits)) return -1; }
        else return cli_unknown("run", a), -1;
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

/* The backend behind generate(): the CPU reference or the Vulkan forward pass, token by token
 * through one loop so the two compare exactly (the prefix-cached request loop for chat, bench
 * traces and serving is runtime/engine/engine.c). */
typedef struct backend {
    bool gpu;
    cpu_state cpu;
    sampler smp;   /* the CPU's sampler, and the GPU's when the kernel cannot sample */
    cvk_ctx *vk;
    gpu_model g;
    float *logits; /* the GPU's last logits, downloaded only when someone reads them */
} backend;

/* The GPU path reads the weights once, for the upload, and completes the fingerprint from
 * the digest made on the way (model_load skipped its own hash pass). */
static int backend_init(backend *e, model *m, uint32_t n_ctx, bool gpu, const sampler_params *sp) {
    *e = (backend){.gpu = gpu};
    if (sampler_init(&e->smp, *sp, (int32_t)m->cfg.n_vocab)) return -1;
    if (!gpu) return cpu_state_init(&e->cpu, m, n_ctx);
    e->vk = calloc(1, sizeof *e->vk);
    e->logits = malloc(m->cfg.n_vocab * sizeof *e->logits);
    if (!e->vk || !e->logits) return cd_fail("out of memory");
    cvk_ctx_opts o = {.device = -1, .pipeline_cache = ""};
    if (cvk_ctx_init(e->vk, &o)) { free(e->vk); e->vk = NULL; return -1; }
    if (gpu_model_init(&e->g, e->vk, m, n_ctx) || gpu_model_set_sampler(&e->g, sp)) return -1;
    return model_set_weights_digest(m, e->g.w.digest);
}

static void backend_free(backend *e) {
    if (e->gpu) {
        gpu_model_free(&e->g);
        if (e->vk) cvk_ctx_free(e->vk);
        free(e->vk);
        free(e->logits);
    } else cpu_state_free(&e->cpu);
    sampler_free(&e->smp);
}

/* The prompt: one batched pass on the GPU, token by token on the CPU reference. */
static int backend_prefill(backend *e, const int32_t *ids, size_t n) {
    if (e->gpu) return gpu_prefill(&e->g, ids, (uint32_t)n, 0, true);
    for (size_t i = 0; i < n; i++)
        if (cpu_forward(&e->cpu, ids[i], (uint32_t)i, i + 1 == n)) return -1;
    return 0;
}

static int backend_forward(backend *e, int32_t token, uint32_t pos) {
    return e->gpu ? gpu_forward(&e->g, token, pos, true) : cpu_forward(&e->cpu, token, pos, true);
}

/* The last position's logits (downloaded from the GPU on demand). */
static const float *backend_logits(backend *e) {
    if (!e->gpu) return e->cpu.logits;
    return gpu_model_logits(&e->g, e->logits) ? NULL : e->logits;
}

/* The next token: chosen on the GPU when it can, else sampled here from the logits. */
static int32_t backend_next(backend *e) {
    if (e->gpu && gpu_model_samples_on_device(&e->g)) return gpu_model_next(&e->g);
    const float *l = backend_logits(e);
    return l ? sampler_sample(&e->smp, l) : -1;
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
                         r->n_prompt, n_ctx, o->n_ctx ? "--ctx" : "what the model was trained for"), -1;
    r->n_ctx = n_ctx;
    uint32_t n_gen = want > n_ctx ? n_ctx - (uint32_t)r->n_prompt : o->n_gen;
    backend st;
    if (backend_init(&st, m, n_ctx, o->gpu, &o->sp)) { backend_free(&st); return cli_error("run", "%s", cd_errmsg()), -1; }
    r->gen = malloc((n_gen ? n_gen : 1) * sizeof *r->gen);
    size_t cap = 256, len = 0;
    r->text = malloc(cap);
    int rc = r->gen && r->text ? 0 : cli_error("run", "out of memory");
    tok_stream ts = {0};
    double t0 = cd_now_ms();
    if (!rc && backend_prefill(&st, r->prompt, r->n_prompt)) rc = cli_error("run", "%s", cd_errmsg());
    r->prefill_ms = cd_now_ms() - t0;
    if (!rc && (o->logits_file || o->n_logits)) {
        const float *lg = backend_logits(&st);
        if (!lg) rc = cli_error("run", "%s", cd_errmsg());
        if (!rc && o->logits_file) rc = write_logits(o->logits_file, lg, m->cfg.n_vocab);
        if (!rc && o->n_logits) r->n_top = sampler_top_k(lg, (int32_t)m->cfg.n_vocab, (int32_t)o->n_logits, r->top_ids, r->top_vals);
    }
    double t1 = cd_now_ms();
    for (uint32_t i = 0; !rc && i < n_gen; i++) {
        int32_t id = backend_next(&st);
        if (id < 0) { rc = cli_error("run", "%s", cd_errmsg()); break; }
        if (i == 0) r->ttft_ms = cd_now_ms() - t0;
        r->gen[r->n_gen++] = id;
        char piece[256];
        int n = tok_stream_push(m->tok, &ts, id, piece, sizeof piece);
        if (n > 0) {
            if (len + (size_t)n + 1 > cap) r->text = realloc(r->text, cap = 2 * (len + (size_t)n + 1));
            memcpy(r->text + len, piece, (size_t)n);
            len += (size_t)n;
            if (!o->json) { fwrite(piece, 1, (size_t)n, stdout); fflush(stdout); }
        }
        if (!o->ignore_eos && tok_is_eog(m->tok, id)) { r->eog = true; break; }
        if (i + 1 < n_gen && backend_forward(&st, id, (uint32_t)(r->n_prompt + i))) rc = cli_error("run", "%s", cd_errmsg());
    }
    r->decode_ms = cd_now_ms() - t1;
    char tail[16]; /* an incomplete UTF-8 sequence left at the end comes out as U+FFFD */
    int n_tail = rc ? 0 : tok_stream_flush(&ts, tail, sizeof tail);
    if (n_tail > 0 && r->text) {
        if (len + (size_t)n_tail + 1 > cap) r->text = realloc(r->text, cap = len + (size_t)n_tail + 1);
        memcpy(r->text + len, tail, (size_t)n_tail);
        len += (size_t)n_tail;
        if (!o->json) fwrite(tail, 1, (size_t)n_tail, stdout);
    }
    if (r->text) r->text[len] = 0;
    backend_free(&st);
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
    if (model_load(&m, o.model, (model_load_opts){.skip_weight_hash = o.gpu})) return cli_error("run", "%s", cd_errmsg());
    run_result r = {0};
    int rc = prompt_ids(&o, m, &r) || generate(&o, m, &r);
    if (!rc && o.json) print_json(&o, &r, m);
    else if (!rc) {
        double dec = r.n_gen > 1 ? (r.n_gen - 1) / (r.decode_ms / 1e3) : 0;
        fprintf(stderr, "\n\nprompt %zu tokens | TTFT %.1f ms | prefill %.1f tok/s | decode %.2f tok/s (%zu tokens, %s) | %s\n",
                r.n_prompt, r.ttft_ms, r.n_prompt / (r.prefill_ms / 1e3), dec, r.n_gen, r.eog ? "stop" : "length",
                o.gpu ? "vulkan" : "cpu reference");
    }
    free(r.prompt);
    free(r.gen);
    free(r.text);
    model_free(m);
    return rc ? 1 : 0;
}
