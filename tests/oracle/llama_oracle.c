/* llama_oracle: llama.cpp (the prebuilt libraries node-llama-cpp ships) as an independent
 * oracle for cinder's tokenizer and forward pass, and later as the Vulkan performance peer.
 *
 *   llama_oracle MODEL.gguf --info
 *       loads the whole model (weights too) and prints one JSON line describing it;
 *       exit 0 means llama.cpp accepts the file.
 *   llama_oracle MODEL.gguf --tokenize FILE [--json]
 *       one string per line of FILE, with the escapes \n \r \t \\ (everything else is raw
 *       UTF-8); tokenized with parse_special = true, add_special = false. Prints one line of
 *       comma-separated ids per input line, or with --json one array of arrays.
 *   llama_oracle MODEL.gguf --logits 1,2,3 | --logits @FILE  [--top K] [--full] [--out F]
 *       evaluates each id list (FILE: one comma-separated list per line) in one batch from
 *       an empty KV cache and prints one JSON line per list with the top-K last-position
 *       logits ("top": [[id, logit], ...]); --full adds every logit ("logits": [...]);
 *       --out F writes all last-position logits of all lists as raw float32, list after list.
 *       --trace-experts adds "experts": per layer, per position, the expert ids it was routed
 *       to (the last layer computes the last position only, so it lists just that one).
 *   llama_oracle MODEL.gguf --quantize PRESET --out OUT.gguf [--threads N]
 *       MODEL quantized by llama.cpp's own llama_model_quantize (llama-quantize's whole
 *       per-tensor policy) to PRESET, named as llama-quantize names it (Q4_K_M, IQ4_XS,
 *       MXFP4_MOE, ...). The presets that need an importance matrix (IQ1_*, IQ2_*, IQ3_XXS,
 *       IQ3_XS, Q2_K_S) get a flat one: every column of every matrix (each expert's) weighs 1,
 *       which is what llama-imatrix would measure from activations of equal energy.
 *   llama_oracle MODEL.gguf --dequantize OUT.gguf
 *       writes a copy of MODEL (same metadata) with every tensor converted to F32 by ggml's
 *       own dequantizers: the same weights, evaluated without activation quantization.
 *   llama_oracle MODEL.gguf --bench [--pp 512] [--tg 128] [--repeat 3] [--vulkan] [--threads N]
 *       llama.cpp as the performance peer, like llama-bench's pp/tg tests: prefill is pp
 *       seeded-random token ids in one llama_decode (n_batch = n_ubatch >= pp) from an empty
 *       KV cache; decode is tg single-token llama_decode steps after a 16-token prompt (the
 *       prompt is not timed). One untimed warm-up round first; median over the repeats.
 *       Serving settings, not the oracle's: llama.cpp's defaults (F16 K/V cache, flash
 *       attention auto, weight repacking on the CPU), every layer offloaded with --vulkan.
 *       --parallel N (N >= 1): the decode steps advance N sequences together, one llama_batch
 *       of N tokens per step (each sequence its own BENCH_PROMPT-token prompt first, one
 *       batch); decode_tok_s counts all N tokens of a step: the aggregate, like llama-server's
 *       parallel slots. Prefill is not run then.
 *       --sample: each decode step's token is chosen from its logits by a greedy sampler chain
 *       (instead of a random id), --grammar FILE.gbnf: by the grammar then greedy (llama.cpp's
 *       grammars/json.gbnf: what llama-server's response_format json_object uses): what
 *       choosing on the host, and holding the reply to JSON, cost per token.
 *       --score: the prefill asks for the logits of every position (llama-cpp-python's
 *       logits_all, which its echo + logprobs needs) and each position's log-probability of
 *       the next token and its most likely token are computed on the host (timed): the peer
 *       of `cinder bench --prompt-logprobs 1`.
 *       Which device really ran is measured, not assumed: an untimed probe decode records
 *       the device of every matmul's output buffer (llama.cpp silently keeps layers on the
 *       CPU when it has no usable Vulkan device). Prints one JSON line.
 *   llama_oracle MODEL.gguf --replay FILE [--ctx N] [--no-cache] [--ignore-eos] [--vulkan]
 *       llama.cpp's prefix reuse on a request trace, as llama-server's per-slot prompt cache
 *       (cache_prompt) does it: one context, one sequence that keeps the previous request's
 *       tokens in its KV. FILE has one request per line, "max_tokens:id,id,..." (what
 *       `cinder bench --scenario NAME --dump-prompts FILE` writes). For each request: the
 *       longest common prefix with the tokens in the KV stays (when it is the whole prompt,
 *       the last prompt token is decoded again for its logits, as llama-server does), the
 *       KV after it is removed (llama_memory_seq_rm), the rest of the prompt is decoded in
 *       batches of 512, then greedy generation of max_tokens tokens (stopping at an
 *       end-of-generation token unless --ignore-eos); the generated tokens stay in the KV
 *       for the next request (all but the last one, which is never decoded). --no-cache
 *       clears the KV before every request (a full prefill each time). TTFT is the wall
 *       time from the request's start to its first token chosen (the prefix match, the
 *       prefill and the sampling); decode tok/s counts the tokens after the first. The
 *       context is --ctx tokens, or the largest prompt + max_tokens rounded up to 256.
 *       Same serving settings and device probe as --bench, and an untimed warm-up (a full
 *       batch, then batches of every size class the backend picks kernels by) before the
 *       first request. Prints one JSON object: "backend", "device", "requests" (per request
 *       prompt_tokens, cached_tokens, prefilled_tokens, ttft_ms, decode_tok_s, generated)
 *       and "totals" (prompt_tokens, cached_tokens, prefilled_tokens, hit_rate, ttft_ms_sum,
 *       wall_ms: the whole replay after the warm-up).
 *
 * Options: --vulkan (offload every layer to the Vulkan backend; default is CPU only),
 *   --threads N (default 2), --libdir DIR (where libllama*.so lives), --verbose,
 *   --flash-attn auto|on|off (--bench and --replay; default auto).
 *
 * The CPU configuration is chosen for plain float32 math: F32 K and V caches, flash
 * attention off, no weight repacking (use_extra_bufts = false), no GPU layers. Quantized
 * weights still meet 8-bit-quantized activations inside ggml's CPU matmuls; that is how
 * llama.cpp works and docs/CONFORMANCE.md explains what it costs.
 *
 * libllama is dlopen()ed rather than linked: the CPU and Vulkan builds ship the same API
 * under different sonames (libllama.v0.5.0.so, libllama.vulkan.v0.5.0.so), so one binary
 * serves both. The prototypes come from the matching llama.h. ggml loads its backends
 * (libggml-cpu-<variant>.so, libggml-vulkan.so) from the same directory at run time.
 * llama.cpp skips Vulkan devices of CPU type (lavapipe) unless GGML_VK_VISIBLE_DEVICES
 * names them, e.g. GGML_VK_VISIBLE_DEVICES=0. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

#ifndef ORACLE_CPU_LIBDIR
#define ORACLE_CPU_LIBDIR ""
#endif
#ifndef ORACLE_VULKAN_LIBDIR
#define ORACLE_VULKAN_LIBDIR ""
#endif

/* ---- the llama.cpp entry points, resolved with dlsym ---- */

/* a table of names, one after another */
// clang-format off
#define LLAMA_FNS(X)                                                                              \
    X(ggml_backend_load_all_from_path) X(llama_backend_init) X(llama_backend_free) X(llama_log_set) \
    X(llama_model_default_params) X(llama_context_default_params) X(llama_model_load_from_file)    \
    X(llama_model_free) X(llama_init_from_model) X(llama_free) X(llama_model_get_vocab)            \
    X(llama_vocab_n_tokens) X(llama_tokenize) X(llama_batch_get_one) X(llama_decode)               \
    X(llama_get_logits_ith) X(llama_get_memory) X(llama_memory_clear) X(llama_model_desc)          \
    X(llama_model_n_params) X(llama_model_size) X(llama_print_system_info) X(ggml_backend_tensor_get)  \
    X(gguf_init_from_file) X(gguf_init_empty) X(gguf_set_kv) X(gguf_get_n_tensors)                 \
    X(gguf_get_tensor_name) X(gguf_add_tensor) X(gguf_write_to_file) X(gguf_free) X(ggml_init)     \
    X(ggml_free) X(ggml_get_tensor) X(ggml_new_tensor) X(ggml_set_name) X(ggml_nelements)          \
    X(ggml_get_type_traits) X(ggml_tensor_overhead) X(ggml_n_dims) X(llama_synchronize)            \
    X(llama_model_n_layer) X(ggml_backend_dev_count) X(ggml_backend_dev_get) X(ggml_backend_dev_name) \
    X(ggml_backend_dev_description) X(ggml_backend_dev_type) X(ggml_backend_dev_backend_reg)        \
    X(ggml_backend_reg_name) X(ggml_backend_buffer_get_type) X(ggml_backend_buft_get_device) \
    X(ggml_backend_dev_by_type) X(llama_memory_seq_rm) X(llama_memory_seq_pos_max) X(llama_vocab_is_eog)           \
    X(llama_batch_init) X(llama_batch_free) X(llama_sampler_chain_default_params) X(llama_sampler_chain_init) \
    X(llama_sampler_chain_add) X(llama_sampler_init_greedy) X(llama_sampler_init_grammar) X(llama_sampler_sample) \
    X(llama_sampler_free) X(llama_model_quantize_default_params) X(llama_model_quantize)
// clang-format on

static struct {
#define X(f) __typeof__(&f) f;
    LLAMA_FNS(X)
#undef X
} L;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("llama_oracle: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* The libllama*.so in dir (there is exactly one in each node-llama-cpp bins folder). */
static void find_libllama(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) die("cannot open library directory %s: %s (run scripts/setup.sh)", dir, strerror(errno));
    struct dirent *e;
    out[0] = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (!strncmp(e->d_name, "libllama.", 9) && n > 3 && !strcmp(e->d_name + n - 3, ".so")) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            break;
        }
    }
    closedir(d);
    if (!out[0]) die("no libllama.*.so in %s (run scripts/setup.sh)", dir);
}

static void load_llama(const char *dir) {
    char path[4096];
    find_libllama(dir, path, sizeof path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) die("dlopen %s: %s", path, dlerror());
#define X(f)                                                                                                           \
    if (!(*(void **)&L.f = dlsym(h, #f))) die("%s has no symbol %s: headers and library disagree", path, #f);
    LLAMA_FNS(X)
#undef X
}

/* ---- logging: warnings and errors always, the rest with --verbose ---- */

static bool verbose;
static enum ggml_log_level last_level;
static char log_text[1 << 18]; /* everything llama.cpp logged (the start of it): --bench reads it */
static size_t log_len;

static void log_cb(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level != GGML_LOG_LEVEL_CONT) last_level = level;
    if (verbose || last_level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
    size_t n = strlen(text);
    if (log_len + n < sizeof log_text) memcpy(log_text + log_len, text, n + 1), log_len += n;
}

/* ---- input parsing ---- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += got) + 1 == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    if (!buf) die("out of memory reading %s", path);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Decodes \n \r \t \\ in place; returns the new length. */
static size_t unescape(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            s[o++] = s[i];
            continue;
        }
        char c = s[++i];
        if (c == 'n') s[o++] = '\n';
        else if (c == 'r') s[o++] = '\r';
        else if (c == 't') s[o++] = '\t';
        else if (c == '\\') s[o++] = '\\';
        else {
            s[o++] = '\\';
            s[o++] = c;
        } /* not an escape: kept as written */
    }
    return o;
}

static int32_t *parse_ids(const char *s, int32_t *n_out) {
    int32_t cap = 64, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    while (*s && *s != '\n') {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX) die("bad token id list near '%.20s'", s);
        if (n == cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
        ids[n++] = (int32_t)v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    if (n == 0) die("empty token id list");
    *n_out = n;
    return ids;
}

/* ---- the commands ---- */

typedef struct opts {
    const char *model, *tokenize, *logits, *out, *libdir, *dequantize, *replay, *grammar, *quantize;
    bool sample; /* --bench: decode steps choose greedily (or --grammar) */
    bool score;  /* --bench --score: the prefill's every position scored */
    bool info, json, full, vulkan, trace_experts, bench, no_cache, ignore_eos;
    int top, threads, pp, tg, repeat, flash_attn; /* flash_attn: -1 auto, 0 off, 1 on */
    int ctx;                                      /* --replay --ctx: 0 = from the requests */
    int parallel;                                 /* --bench --parallel: sequences decoded together */
} opts;

static void usage(void) {
    fputs("usage: llama_oracle MODEL.gguf (--info | --tokenize FILE [--json] |\n"
          "                    --logits IDS|@FILE [--top K] [--full] [--out FILE] [--trace-experts] |\n"
          "                    --dequantize OUT.gguf | --quantize PRESET --out OUT.gguf |\n"
          "                    --bench [--pp N] [--tg N] [--repeat N] [--parallel N] [--flash-attn auto|on|off]\n"
          "                            [--sample | --grammar FILE.gbnf] [--score] |\n"
          "                    --replay FILE [--ctx N] [--no-cache] [--ignore-eos] [--flash-attn auto|on|off])\n"
          "                    [--vulkan] [--threads N] [--libdir DIR] [--verbose]\n",
          stderr);
    exit(2);
}

static int cmd_tokenize(const opts *o, const struct llama_vocab *vocab) {
    size_t len;
    char *text = read_file(o->tokenize, &len);
    int32_t cap = 1 << 16;
    llama_token *toks = malloc(cap * sizeof *toks);
    if (o->json) fputs("[", stdout);
    size_t line_no = 0;
    for (char *line = text; line < text + len; line_no++) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
        char *next = nl ? nl + 1 : text + len;
        n = unescape(line, n);
        int32_t k = L.llama_tokenize(vocab, line, (int32_t)n, toks, cap, false, true);
        if (k < 0) {
            if (k == INT32_MIN) die("line %zu: tokenization overflow", line_no + 1);
            toks = realloc(toks, (size_t)(cap = -k) * sizeof *toks);
            k = L.llama_tokenize(vocab, line, (int32_t)n, toks, cap, false, true);
            if (k < 0) die("line %zu: llama_tokenize failed (%d)", line_no + 1, k);
        }
        if (o->json) fputs(line_no ? ",\n[" : "\n[", stdout);
        for (int32_t i = 0; i < k; i++) printf("%s%d", i ? (o->json ? ", " : ",") : "", toks[i]);
        fputs(o->json ? "]" : "\n", stdout);
        line = next;
    }
    if (o->json) fputs("\n]\n", stdout);
    free(toks);
    free(text);
    return 0;
}

static void print_top(const float *logits, int32_t n_vocab, int k) {
    /* selection of the k largest, ties to the lower id; k is small */
    bool *taken = calloc((size_t)n_vocab, 1);
    fputs("[", stdout);
    for (int j = 0; j < k && j < n_vocab; j++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n_vocab; i++)
            if (!taken[i] && (best < 0 || logits[i] > logits[best])) best = i;
        taken[best] = true;
        printf("%s[%d, %.9g]", j ? ", " : "", best, (double)logits[best]);
    }
    fputs("]", stdout);
    free(taken);
}

/* --trace-experts: the eval callback copies out "ffn_moe_topk-<layer>", the chosen expert
 * ids (I32, n_expert_used x n_tokens, a view whose rows are n_expert apart). */
#define MAX_TRACE 512
typedef struct expert_trace {
    int32_t n_layer;
    int32_t k[MAX_TRACE], n_tokens[MAX_TRACE];
    int32_t *ids[MAX_TRACE]; /* (n_tokens, k) */
} expert_trace;

static bool trace_cb(struct ggml_tensor *t, bool ask, void *user) {
    int il;
    if (strncmp(t->name, "ffn_moe_topk-", 13) || sscanf(t->name + 13, "%d", &il) != 1 || il < 0 || il >= MAX_TRACE)
        return !ask; /* not wanted; when observing, keep computing */
    if (ask) return true;
    expert_trace *tr = user;
    int32_t k = (int32_t)t->ne[0], n = (int32_t)t->ne[1];
    if (t->type != GGML_TYPE_I32 || t->nb[0] != sizeof(int32_t)) die("unexpected layout of %s", t->name);
    free(tr->ids[il]);
    if (!(tr->ids[il] = malloc((size_t)k * n * sizeof(int32_t)))) die("out of memory");
    for (int32_t i = 0; i < n; i++) /* a view into the argsort: rows are n_expert apart */
        L.ggml_backend_tensor_get(t, tr->ids[il] + (size_t)i * k, (size_t)i * t->nb[1], (size_t)k * sizeof(int32_t));
    tr->k[il] = k;
    tr->n_tokens[il] = n;
    if (il + 1 > tr->n_layer) tr->n_layer = il + 1;
    return true;
}

static void print_trace(const expert_trace *tr) {
    fputs(", \"experts\": [", stdout);
    for (int32_t il = 0; il < tr->n_layer; il++) {
        fputs(il ? ", [" : "[", stdout);
        for (int32_t t = 0; t < tr->n_tokens[il]; t++) {
            fputs(t ? ", [" : "[", stdout);
            for (int32_t j = 0; j < tr->k[il]; j++) printf("%s%d", j ? ", " : "", tr->ids[il][t * tr->k[il] + j]);
            fputs("]", stdout);
        }
        fputs("]", stdout);
    }
    fputs("]", stdout);
}

/* llama-quantize's preset names and their llama_ftype (llama.h; ids are append-only there). */
static const struct {
    const char *name;
    enum llama_ftype ftype;
} presets[] = {
    {"F16", LLAMA_FTYPE_MOSTLY_F16},         {"BF16", LLAMA_FTYPE_MOSTLY_BF16},
    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},       {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},   {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
    {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},   {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
    {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L},   {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S},   {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},
    {"Q2_K_S", LLAMA_FTYPE_MOSTLY_Q2_K_S},   {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
    {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},       {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},       {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL},   {"IQ3_M", LLAMA_FTYPE_MOSTLY_IQ3_M},
    {"IQ3_S", LLAMA_FTYPE_MOSTLY_IQ3_S},     {"IQ3_XS", LLAMA_FTYPE_MOSTLY_IQ3_XS},
    {"IQ3_XXS", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"IQ2_M", LLAMA_FTYPE_MOSTLY_IQ2_M},
    {"IQ2_S", LLAMA_FTYPE_MOSTLY_IQ2_S},     {"IQ2_XS", LLAMA_FTYPE_MOSTLY_IQ2_XS},
    {"IQ2_XXS", LLAMA_FTYPE_MOSTLY_IQ2_XXS}, {"IQ1_M", LLAMA_FTYPE_MOSTLY_IQ1_M},
    {"IQ1_S", LLAMA_FTYPE_MOSTLY_IQ1_S},     {"TQ2_0", LLAMA_FTYPE_MOSTLY_TQ2_0},
    {"TQ1_0", LLAMA_FTYPE_MOSTLY_TQ1_0},     {"MXFP4_MOE", LLAMA_FTYPE_MOSTLY_MXFP4_MOE},
};

/* A flat importance matrix for every matrix of MODEL: ne[0] x ne[2] ones (one row per expert),
 * as llama_model_quantize takes it (a list ended by a NULL name); kept until exit. */
static const struct llama_model_imatrix_data *flat_imatrix(const char *model) {
    struct ggml_context *meta = NULL;
    struct gguf_context *g = L.gguf_init_from_file(model, (struct gguf_init_params){.no_alloc = true, .ctx = &meta});
    if (!g) die("cannot read %s", model);
    int64_t n = L.gguf_get_n_tensors(g), most = 1;
    struct llama_model_imatrix_data *m = calloc((size_t)n + 1, sizeof *m);
    if (!m) die("out of memory");
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct ggml_tensor *t = L.ggml_get_tensor(meta, L.gguf_get_tensor_name(g, i));
        if (t->ne[1] <= 1) continue; /* norms: not quantized */
        int64_t size = t->ne[0] * t->ne[2];
        most = size > most ? size : most;
        m[k].name = strdup(L.gguf_get_tensor_name(g, i)), m[k].size = (size_t)size, k++;
    }
    float *ones = malloc((size_t)most * sizeof *ones);
    if (!ones) die("out of memory");
    for (int64_t i = 0; i < most; i++) ones[i] = 1.0f;
    for (size_t i = 0; i < k; i++) m[i].data = ones;
    L.gguf_free(g);
    L.ggml_free(meta);
    return m;
}

static int cmd_quantize(const opts *o) {
    struct llama_model_quantize_params qp = L.llama_model_quantize_default_params();
    static const char *const needs_imatrix[] = {"IQ1_S", "IQ1_M",   "IQ2_XXS", "IQ2_XS", "IQ2_S",
                                                "IQ2_M", "IQ3_XXS", "IQ3_XS",  "Q2_K_S"};
    for (size_t j = 0; j < sizeof needs_imatrix / sizeof *needs_imatrix; j++)
        if (!strcmp(o->quantize, needs_imatrix[j])) qp.imatrix = flat_imatrix(o->model);
    size_t i = 0;
    while (i < sizeof presets / sizeof *presets && strcmp(presets[i].name, o->quantize)) i++;
    if (i == sizeof presets / sizeof *presets)
        die("unknown preset %s (llama-quantize's names: Q4_K_M, IQ4_XS, ...)", o->quantize);
    qp.ftype = presets[i].ftype;
    qp.nthread = o->threads;
    if (L.llama_model_quantize(o->model, o->out, &qp))
        die("llama_model_quantize %s to %s failed (--verbose: its log)", o->model, o->quantize);
    return 0;
}

static int cmd_dequantize(const opts *o) {
    struct ggml_context *in_data = NULL;
    struct gguf_context *in =
        L.gguf_init_from_file(o->model, (struct gguf_init_params){.no_alloc = false, .ctx = &in_data});
    if (!in) die("ggml cannot read %s", o->model);
    int64_t n = L.gguf_get_n_tensors(in);
    size_t bytes = 0;
    for (int64_t i = 0; i < n; i++)
        bytes +=
            (size_t)L.ggml_nelements(L.ggml_get_tensor(in_data, L.gguf_get_tensor_name(in, i))) * sizeof(float) + 64;
    struct ggml_context *out_data = L.ggml_init((struct ggml_init_params){
        .mem_size = bytes + (size_t)(n + 1) * L.ggml_tensor_overhead(), .mem_buffer = NULL, .no_alloc = false});
    if (!out_data) die("out of memory");
    struct gguf_context *out = L.gguf_init_empty();
    L.gguf_set_kv(out, in);
    for (int64_t i = 0; i < n; i++) {
        const char *name = L.gguf_get_tensor_name(in, i);
        struct ggml_tensor *src = L.ggml_get_tensor(in_data, name);
        struct ggml_tensor *dst = L.ggml_new_tensor(out_data, GGML_TYPE_F32, L.ggml_n_dims(src), src->ne);
        L.ggml_set_name(dst, name);
        if (src->type == GGML_TYPE_F32) memcpy(dst->data, src->data, (size_t)L.ggml_nelements(src) * sizeof(float));
        else {
            const struct ggml_type_traits *tt = L.ggml_get_type_traits(src->type);
            if (!tt->to_float) die("%s: ggml has no dequantizer for type %s", name, tt->type_name);
            tt->to_float(src->data, dst->data, L.ggml_nelements(src));
        }
        L.gguf_add_tensor(out, dst);
    }
    if (!L.gguf_write_to_file(out, o->dequantize, false)) die("cannot write %s", o->dequantize);
    L.gguf_free(out);
    L.gguf_free(in);
    L.ggml_free(out_data);
    L.ggml_free(in_data);
    return 0;
}

static int cmd_logits(const opts *o, struct llama_model *model, const struct llama_vocab *vocab) {
    /* the id lists: one inline, or one per non-empty line of a file */
    size_t len = strlen(o->logits);
    char *src = o->logits[0] == '@' ? read_file(o->logits + 1, &len) : strdup(o->logits);
    int32_t n_vocab = L.llama_vocab_n_tokens(vocab), max_tokens = 0, n_lists = 0, cap_lists = 16;
    int32_t **lists = malloc(cap_lists * sizeof *lists), *lens = malloc(cap_lists * sizeof *lens);
    for (char *p = src; *p;) {
        if (*p == '\n') {
            p++;
            continue;
        }
        if (n_lists == cap_lists) {
            lists = realloc(lists, (cap_lists *= 2) * sizeof *lists);
            lens = realloc(lens, cap_lists * sizeof *lens);
        }
        lists[n_lists] = parse_ids(p, &lens[n_lists]);
        for (int32_t i = 0; i < lens[n_lists]; i++)
            if (lists[n_lists][i] >= n_vocab)
                die("token id %d out of range (vocabulary %d)", lists[n_lists][i], n_vocab);
        if (lens[n_lists] > max_tokens) max_tokens = lens[n_lists];
        n_lists++;
        char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    if (n_lists == 0) die("no token id lists given");

    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = (uint32_t)(max_tokens + 16 + 255) / 256 * 256;
    cp.n_batch = cp.n_ubatch = (uint32_t)max_tokens; /* one batch, one ubatch: no split */
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.offload_kqv = o->vulkan;
    cp.op_offload = o->vulkan;
    cp.no_perf = true;
    expert_trace trace = {0};
    if (o->trace_experts) {
        cp.cb_eval = trace_cb;
        cp.cb_eval_user_data = &trace;
    }
    struct llama_context *ctx = L.llama_init_from_model(model, cp);
    if (!ctx) die("llama_init_from_model failed");

    FILE *out = NULL;
    if (o->out && !(out = fopen(o->out, "wb"))) die("%s: %s", o->out, strerror(errno));
    for (int32_t l = 0; l < n_lists; l++) {
        L.llama_memory_clear(L.llama_get_memory(ctx), true);
        trace.n_layer = 0;
        int32_t rc = L.llama_decode(ctx, L.llama_batch_get_one(lists[l], lens[l]));
        if (rc) die("llama_decode failed (%d) on list %d", rc, l + 1);
        const float *logits = L.llama_get_logits_ith(ctx, -1);
        if (!logits) die("no logits for list %d", l + 1);
        if (out && fwrite(logits, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab)
            die("%s: write failed", o->out);
        printf("{\"n_tokens\": %d, \"n_vocab\": %d, \"top\": ", lens[l], n_vocab);
        print_top(logits, n_vocab, o->top);
        if (o->trace_experts) print_trace(&trace);
        if (o->full) {
            fputs(", \"logits\": [", stdout);
            for (int32_t i = 0; i < n_vocab; i++) printf("%s%.9g", i ? ", " : "", (double)logits[i]);
            fputs("]", stdout);
        }
        puts("}");
        free(lists[l]);
    }
    if (out && fclose(out)) die("%s: %s", o->out, strerror(errno));
    for (int32_t il = 0; il < MAX_TRACE; il++) free(trace.ids[il]);
    free(lists);
    free(lens);
    free(src);
    L.llama_free(ctx);
    return 0;
}

/* ---- --bench: llama.cpp as the performance peer ---- */

/* The probe's tally: how many matmul nodes (MUL_MAT, MUL_MAT_ID) wrote their output into a
 * buffer of each device, i.e. ran there. */
#define MAX_DEVS 16
typedef struct dev_tally {
    int n;
    ggml_backend_dev_t dev[MAX_DEVS];
    long count[MAX_DEVS];
    long unknown;
} dev_tally;

static bool tally_cb(struct ggml_tensor *t, bool ask, void *user) {
    if (t->op != GGML_OP_MUL_MAT && t->op != GGML_OP_MUL_MAT_ID) return !ask;
    if (ask) return true;
    dev_tally *d = user;
    /* where the weight (src 0) lives: the scheduler runs a matmul on its weight's backend (the
     * result's buffer can name another: a CPU-placed weight's result on the device's side) */
    const struct ggml_tensor *w = t->src[0] && t->src[0]->buffer ? t->src[0] : t;
    if (!w->buffer) {
        d->unknown++;
        return true;
    }
    ggml_backend_dev_t dev = L.ggml_backend_buft_get_device(L.ggml_backend_buffer_get_type(w->buffer));
    /* ggml's plain CPU buffer type names no device (a FIXME in ggml-backend.cpp): host memory */
    if (!dev && !(dev = L.ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))) {
        d->unknown++;
        return true;
    }
    int i = 0;
    while (i < d->n && d->dev[i] != dev) i++;
    if (i == d->n) {
        if (d->n == MAX_DEVS) {
            d->unknown++;
            return true;
        }
        d->dev[d->n++] = dev;
    }
    d->count[i]++;
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static uint64_t rng_state;
static llama_token random_token(int32_t n_vocab) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17; /* xorshift64 */
    return (llama_token)(rng_state % (uint64_t)n_vocab);
}

static void decode_or_die(struct llama_context *ctx, llama_token *ids, int32_t n, const char *what) {
    int32_t rc = L.llama_decode(ctx, L.llama_batch_get_one(ids, n));
    if (rc) die("llama_decode failed (%d) in %s", rc, what);
    L.llama_synchronize(ctx);
}

/* --score: position i's log-probability of token next and the most likely token, from the
 * logits llama.cpp computed there (a log-softmax on the host, as an echo server does). */
static volatile double score_sink;
static void score_row(const float *row, int32_t n_vocab, llama_token next) {
    int32_t best = 0;
    for (int32_t v = 1; v < n_vocab; v++) best = row[v] > row[best] ? v : best;
    double sum = 0;
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)row[v] - row[best]);
    score_sink = row[next] - row[best] - log(sum) + best;
}

/* One prefill of pp tokens from an empty cache; returns seconds. score: with logits at every
 * position, each scored (llama-cpp-python's logits_all, what echo + logprobs needs). */
static double bench_prefill(struct llama_context *ctx, llama_token *ids, int32_t pp, int32_t n_vocab, bool score) {
    for (int32_t i = 0; i < pp; i++) ids[i] = random_token(n_vocab);
    L.llama_memory_clear(L.llama_get_memory(ctx), true);
    if (!score) {
        double t0 = now_s();
        decode_or_die(ctx, ids, pp, "prefill");
        return now_s() - t0;
    }
    struct llama_batch b = L.llama_batch_init(pp, 0, 1);
    for (int32_t i = 0; i < pp; i++)
        b.token[i] = ids[i], b.pos[i] = i, b.n_seq_id[i] = 1, b.seq_id[i][0] = 0, b.logits[i] = 1;
    b.n_tokens = pp;
    double t0 = now_s();
    if (L.llama_decode(ctx, b)) die("llama_decode failed in the scored prefill");
    L.llama_synchronize(ctx);
    for (int32_t i = 0; i + 1 < pp; i++) score_row(L.llama_get_logits_ith(ctx, i), n_vocab, ids[i + 1]);
    double t = now_s() - t0;
    L.llama_batch_free(b);
    return t;
}

#define BENCH_PROMPT 16
/* An untimed BENCH_PROMPT-token prompt, then tg single-token steps; returns their seconds. Each
 * step's token is random, or with a sampler (--sample, --grammar) the one it chooses from the
 * step's logits: what choosing on the host costs (a grammar: from a fresh copy of the chain). */
static double bench_decode(struct llama_context *ctx, int32_t tg, int32_t n_vocab,
                           struct llama_sampler *(*make)(void)) {
    llama_token prompt[BENCH_PROMPT];
    for (int32_t i = 0; i < BENCH_PROMPT; i++) prompt[i] = random_token(n_vocab);
    L.llama_memory_clear(L.llama_get_memory(ctx), true);
    decode_or_die(ctx, prompt, BENCH_PROMPT, "the decode prompt");
    struct llama_sampler *s = make ? make() : NULL;
    double t0 = now_s();
    for (int32_t i = 0; i < tg; i++) {
        llama_token t = s ? L.llama_sampler_sample(s, ctx, -1) : random_token(n_vocab);
        decode_or_die(ctx, &t, 1, "decode");
    }
    double dt = now_s() - t0;
    if (s) L.llama_sampler_free(s);
    return dt;
}

/* --sample / --grammar FILE: the chain the decode steps choose with (the grammar's text, read
 * once, then greedy). */
static const struct llama_vocab *sampler_vocab;
static char *sampler_grammar;
static struct llama_sampler *make_sampler(void) {
    struct llama_sampler *c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params());
    if (sampler_grammar) {
        struct llama_sampler *g = L.llama_sampler_init_grammar(sampler_vocab, sampler_grammar, "root");
        if (!g) die("llama.cpp refused the grammar");
        L.llama_sampler_chain_add(c, g);
    }
    L.llama_sampler_chain_add(c, L.llama_sampler_init_greedy());
    return c;
}

/* --parallel: n sequences, each an untimed BENCH_PROMPT-token prompt (one batch), then tg
 * steps of one token per sequence in one batch; returns the steps' seconds. */
static double bench_decode_parallel(struct llama_context *ctx, int32_t tg, int32_t n, int32_t n_vocab) {
    int32_t cap = n * BENCH_PROMPT;
    struct llama_batch b = L.llama_batch_init(cap, 0, 1);
    L.llama_memory_clear(L.llama_get_memory(ctx), true);
    b.n_tokens = 0;
    for (int32_t s = 0; s < n; s++)
        for (int32_t i = 0; i < BENCH_PROMPT; i++) {
            int32_t k = b.n_tokens++;
            b.token[k] = random_token(n_vocab);
            b.pos[k] = i;
            b.n_seq_id[k] = 1;
            b.seq_id[k][0] = s;
            b.logits[k] = i == BENCH_PROMPT - 1;
        }
    if (L.llama_decode(ctx, b)) die("llama_decode failed in the parallel prompts");
    L.llama_synchronize(ctx);
    double t0 = now_s();
    for (int32_t step = 0; step < tg; step++) {
        b.n_tokens = n;
        for (int32_t s = 0; s < n; s++) {
            b.token[s] = random_token(n_vocab);
            b.pos[s] = BENCH_PROMPT + step;
            b.n_seq_id[s] = 1;
            b.seq_id[s][0] = s;
            b.logits[s] = 1;
        }
        if (L.llama_decode(ctx, b)) die("llama_decode failed in a parallel decode step");
        L.llama_synchronize(ctx);
    }
    double t = now_s() - t0;
    L.llama_batch_free(b);
    return t;
}

static void json_str(const char *s) {
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static const char *dev_backend(ggml_backend_dev_t dev) {
    return L.ggml_backend_reg_name(L.ggml_backend_dev_backend_reg(dev));
}

/* llama.cpp's serving defaults (F16 K and V, flash attention as --flash-attn says, ops
 * offloaded with --vulkan) for a one-sequence context of n_ctx tokens and n_batch-token
 * batches (n_ubatch = n_batch). */
static struct llama_context_params serving_params(const opts *o, uint32_t n_ctx, int32_t n_batch) {
    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.offload_kqv = o->vulkan;
    cp.flash_attn_type = o->flash_attn < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO
        : o->flash_attn                    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                           : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    return cp;
}

/* What the probe found, and what the serving context's log says. */
typedef struct probe_result {
    dev_tally tally;
    int main_dev;           /* index into tally.dev of the device that ran the most matmuls, or -1 */
    char backend[64];       /* "cpu", "vulkan", "mixed" or "unknown" */
    int offloaded;          /* layers llama.cpp offloaded (-1: the log did not say) */
    const char *flash_attn; /* "off", "on", "auto->enabled", ... */
} probe_result;

/* The probe: where do the matmuls really run, for an n_probe-token batch and a one-token
 * batch? An untimed throw-away context with cp. Then creates the serving context with cp
 * (its log tells the flash-attention choice) and returns it. */
static struct llama_context *probe_and_init(const opts *o, struct llama_model *model, struct llama_context_params cp,
                                            int32_t n_probe, int32_t n_vocab, probe_result *pr) {
    *pr = (probe_result){.main_dev = -1, .backend = "unknown", .offloaded = -1};
    dev_tally *tally = &pr->tally;
    struct llama_context_params probe_cp = cp;
    probe_cp.cb_eval = tally_cb;
    probe_cp.cb_eval_user_data = tally;
    struct llama_context *probe = L.llama_init_from_model(model, probe_cp);
    if (!probe) die("llama_init_from_model failed");
    llama_token *ids = malloc((size_t)n_probe * sizeof *ids);
    if (!ids) die("out of memory");
    for (int32_t i = 0; i < n_probe; i++) ids[i] = random_token(n_vocab);
    decode_or_die(probe, ids, n_probe, "the probe");
    decode_or_die(probe, ids, 1, "the probe");
    L.llama_free(probe);
    free(ids);

    size_t log_mark = log_len; /* the serving context's own log follows */
    struct llama_context *ctx = L.llama_init_from_model(model, cp);
    if (!ctx) die("llama_init_from_model failed");

    long total = tally->unknown;
    for (int i = 0; i < tally->n; i++) {
        total += tally->count[i];
        if (pr->main_dev < 0 || tally->count[i] > tally->count[pr->main_dev]) pr->main_dev = i;
    }
    bool all_on_main = pr->main_dev >= 0 && tally->count[pr->main_dev] == total;
    if (pr->main_dev >= 0) {
        snprintf(pr->backend, sizeof pr->backend, "%s", all_on_main ? dev_backend(tally->dev[pr->main_dev]) : "mixed");
        for (char *c = pr->backend; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
    }
    if (o->vulkan && !strcmp(pr->backend, "mixed"))
        fprintf(stderr,
                "llama_oracle: --vulkan asked for, but some matmuls ran on the CPU: llama.cpp kept their weights "
                "there (e.g. tensors over the device's maxStorageBufferRange); see matmuls_by_device\n");
    else if (o->vulkan && strcmp(pr->backend, "vulkan"))
        fprintf(stderr,
                "llama_oracle: --vulkan asked for, but the matmuls ran on %s: llama.cpp fell back "
                "(lavapipe is only used with GGML_VK_VISIBLE_DEVICES=0)\n",
                pr->backend);

    int offloadable = -1;
    const char *off = strstr(log_text, "offloaded ");
    if (off) sscanf(off, "offloaded %d/%d", &pr->offloaded, &offloadable);
    pr->flash_attn = o->flash_attn == 0                                ? "off"
        : o->flash_attn == 1                                           ? "on"
        : strstr(log_text + log_mark, "Flash Attention enabled")       ? "auto->enabled"
        : strstr(log_text + log_mark, "Flash Attention not supported") ? "auto->disabled"
                                                                       : "auto->unknown";
    return ctx;
}

static void print_device(const probe_result *pr) {
    if (pr->main_dev >= 0) {
        char dn[512];
        snprintf(dn, sizeof dn, "%s (%s)", L.ggml_backend_dev_name(pr->tally.dev[pr->main_dev]),
                 L.ggml_backend_dev_description(pr->tally.dev[pr->main_dev]));
        json_str(dn);
    } else json_str("unknown");
}

static int cmd_bench(const opts *o, struct llama_model *model, const struct llama_vocab *vocab) {
    int32_t n_vocab = L.llama_vocab_n_tokens(vocab), pp = o->pp, tg = o->tg;
    int32_t n_batch = pp > BENCH_PROMPT ? pp : BENCH_PROMPT;

    /* the prefill is one batch, one ubatch */
    int32_t par = o->parallel > 1 ? o->parallel : 1;
    bool batched = o->parallel > 0;                    /* --parallel N, N >= 1: the batched decode steps, no prefill */
    if (batched) pp = 0, n_batch = par * BENCH_PROMPT; /* the prompts of every sequence in one batch */
    struct llama_context_params cp =
        serving_params(o, (uint32_t)(par * (pp + BENCH_PROMPT + tg + 16) + 255) / 256 * 256, n_batch);
    cp.n_seq_max = (uint32_t)par;
    llama_token *ids = malloc((size_t)n_batch * sizeof *ids);
    rng_state = 0x9E3779B97F4A7C15ull;
    int32_t n_probe = pp > 64 ? 64 : pp > 0 ? pp : BENCH_PROMPT; /* a split per matmul is slow */
    probe_result pr;
    struct llama_context *ctx = probe_and_init(o, model, cp, n_probe, n_vocab, &pr);
    const dev_tally tally = pr.tally;
    const char *backend = pr.backend, *fa = pr.flash_attn;
    int offloaded = pr.offloaded;

    /* warm-up: one of each, untimed (pipeline creation, first-touch of the weights) */
    if (pp > 0) bench_prefill(ctx, ids, pp, n_vocab, o->score);
    struct llama_sampler *(*make)(void) = NULL;
    if (o->sample) {
        if (batched) die("--sample and --grammar go without --parallel");
        sampler_vocab = vocab, make = make_sampler;
        if (o->grammar) {
            FILE *f = fopen(o->grammar, "rb");
            if (!f) die("cannot open %s", o->grammar);
            static char text[1 << 16];
            size_t n = fread(text, 1, sizeof text - 1, f);
            fclose(f);
            text[n] = 0;
            sampler_grammar = text;
        }
    }
    if (tg > 0 && batched) bench_decode_parallel(ctx, tg < 4 ? tg : 4, par, n_vocab);
    else if (tg > 0) bench_decode(ctx, tg < 4 ? tg : 4, n_vocab, make);

    double *pre = calloc((size_t)o->repeat, sizeof *pre), *dec = calloc((size_t)o->repeat, sizeof *dec);
    for (int r = 0; r < o->repeat; r++) {
        if (pp > 0) pre[r] = pp / bench_prefill(ctx, ids, pp, n_vocab, o->score);
        if (tg > 0)
            dec[r] = batched ? (double)par * tg / bench_decode_parallel(ctx, tg, par, n_vocab)
                             : tg / bench_decode(ctx, tg, n_vocab, make);
        if (verbose)
            fprintf(stderr, "llama_oracle: repeat %d: prefill %.2f tok/s, decode %.2f tok/s\n", r + 1, pre[r], dec[r]);
    }

    char desc[256];
    L.llama_model_desc(model, desc, sizeof desc);
    printf("{\"backend\": ");
    json_str(backend);
    printf(", \"device\": ");
    print_device(&pr);
    printf(", \"pp\": %d, \"tg\": %d, \"parallel\": %d, \"score\": %s", pp, tg, par, o->score ? "true" : "false");
    fputs(", \"prefill_tok_s\": ", stdout);
    if (pp > 0) printf("%.3f", median(pre, o->repeat));
    else fputs("null", stdout);
    fputs(", \"decode_tok_s\": ", stdout);
    if (tg > 0) printf("%.3f", median(dec, o->repeat));
    else fputs("null", stdout);
    printf(", \"n_gpu_layers\": %d, \"threads\": %d, \"repeat\": %d", offloaded < 0 ? 0 : offloaded, o->threads,
           o->repeat);
    printf(", \"n_layer\": %d, \"model\": ", L.llama_model_n_layer(model));
    json_str(desc);
    printf(", \"flash_attn\": \"%s\", \"kv_type\": \"f16\", \"n_ubatch\": %d, \"n_ctx\": %u", fa, n_batch, cp.n_ctx);
    fputs(", \"matmuls_by_device\": {", stdout);
    for (int i = 0; i < tally.n; i++) {
        if (i) fputs(", ", stdout);
        json_str(L.ggml_backend_dev_name(tally.dev[i]));
        printf(": %ld", tally.count[i]);
    }
    if (tally.unknown) printf("%s\"unknown\": %ld", tally.n ? ", " : "", tally.unknown);
    fputs("}, \"devices\": [", stdout);
    for (size_t i = 0; i < L.ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = L.ggml_backend_dev_get(i);
        char dn[512];
        snprintf(dn, sizeof dn, "%s: %s", L.ggml_backend_dev_name(d), L.ggml_backend_dev_description(d));
        if (i) fputs(", ", stdout);
        json_str(dn);
    }
    fputs("], \"prefill_runs\": [", stdout);
    for (int r = 0; pp > 0 && r < o->repeat; r++) printf("%s%.3f", r ? ", " : "", pre[r]);
    fputs("], \"decode_runs\": [", stdout);
    for (int r = 0; tg > 0 && r < o->repeat; r++) printf("%s%.3f", r ? ", " : "", dec[r]);
    puts("]}");
    fflush(stdout);
    if (verbose) fprintf(stderr, "%s\n", L.llama_print_system_info());
    free(pre);
    free(dec);
    free(ids);
    L.llama_free(ctx);
    return 0;
}

/* ---- --replay: llama-server's per-slot prompt cache on a request trace ---- */

typedef struct replay_req {
    size_t line;           /* in FILE, for messages */
    int32_t max_tokens, n; /* n: prompt tokens */
    llama_token *ids;
    /* the results */
    int32_t cached, n_gen;
    llama_token *gen;
    double ttft_ms, decode_ms;
} replay_req;

/* A decimal number at *p (before end), at most max; advances *p. false when there is none or it is too large. */
static bool parse_num(const char **p, const char *end, long long max, long long *v) {
    const char *s = *p;
    long long x = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        x = 10 * x + (*s++ - '0');
        if (x > max) return false;
    }
    if (s == *p) return false;
    *p = s;
    *v = x;
    return true;
}

static const char *skip_blanks(const char *s, const char *end) {
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    return s;
}

/* FILE: one request per non-empty line, "max_tokens:id,id,..." (cinder bench --dump-prompts). */
static replay_req *read_requests(const char *path, int32_t n_vocab, int32_t *n_out) {
    size_t len;
    char *text = read_file(path, &len);
    int32_t n = 0, cap = 16;
    replay_req *reqs = malloc((size_t)cap * sizeof *reqs);
    if (!reqs) die("out of memory");
    size_t line_no = 0;
    for (const char *line = text, *end = text + len; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *start = line, *eol = nl ? nl : end, *p = skip_blanks(line, eol);
        line_no++;
        line = nl ? nl + 1 : end;
        if (p == eol) continue; /* an empty line */
        long long v;
        if (!parse_num(&p, eol, 1 << 20, &v) || v < 1 || (p = skip_blanks(p, eol)) == eol || *p != ':')
            die("%s:%zu: expected \"max_tokens:id,id,...\" with max_tokens from 1 to 2^20", path, line_no);
        replay_req r = {.line = line_no, .max_tokens = (int32_t)v};
        int32_t id_cap = 256;
        if (!(r.ids = malloc((size_t)id_cap * sizeof *r.ids))) die("out of memory");
        for (p++;;) {
            if ((p = skip_blanks(p, eol)) == eol) break;
            const char *at = p;
            if (!parse_num(&p, eol, INT32_MAX, &v))
                die("%s:%zu: column %zu: expected a token id, found '%.*s'", path, line_no, (size_t)(at - start) + 1,
                    (int)(eol - at < 12 ? eol - at : 12), at);
            if (v >= n_vocab) die("%s:%zu: token id %lld out of range (vocabulary %d)", path, line_no, v, n_vocab);
            if (r.n == id_cap && !(r.ids = realloc(r.ids, (size_t)(id_cap *= 2) * sizeof *r.ids))) die("out of memory");
            r.ids[r.n++] = (llama_token)v;
            if ((p = skip_blanks(p, eol)) == eol) break;
            if (*p != ',')
                die("%s:%zu: column %zu: expected ',' after a token id, found '%.*s'", path, line_no,
                    (size_t)(p - start) + 1, (int)(eol - p < 12 ? eol - p : 12), p);
            p++;
        }
        if (r.n == 0) die("%s:%zu: no token ids after \"%d:\"", path, line_no, r.max_tokens);
        if (n == cap && !(reqs = realloc(reqs, (size_t)(cap *= 2) * sizeof *reqs))) die("out of memory");
        reqs[n++] = r;
    }
    free(text);
    if (n == 0) die("%s: no requests (expected lines \"max_tokens:id,id,...\")", path);
    *n_out = n;
    return reqs;
}

/* Greedy: the largest logit of the last output, ties to the lower id. */
static llama_token argmax_last(struct llama_context *ctx, int32_t n_vocab) {
    const float *logits = L.llama_get_logits_ith(ctx, -1);
    if (!logits) die("no logits after llama_decode");
    llama_token best = 0;
    for (llama_token i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Decodes ids[0..n) in batches of at most n_batch tokens (positions continue the sequence). */
static void decode_batches(struct llama_context *ctx, llama_token *ids, int32_t n, int32_t n_batch, const char *what) {
    for (int32_t i = 0; i < n; i += n_batch) decode_or_die(ctx, ids + i, n - i < n_batch ? n - i : n_batch, what);
}

#define REPLAY_BATCH 512

static int cmd_replay(const opts *o, struct llama_model *model, const struct llama_vocab *vocab) {
    int32_t n_vocab = L.llama_vocab_n_tokens(vocab), n_req;
    replay_req *reqs = read_requests(o->replay, n_vocab, &n_req);

    /* the context: --ctx, or the largest prompt + max_tokens rounded up */
    int64_t need = 0;
    for (int32_t r = 0; r < n_req; r++)
        if ((int64_t)reqs[r].n + reqs[r].max_tokens > need) need = (int64_t)reqs[r].n + reqs[r].max_tokens;
    if (!o->ctx && need > (1 << 24)) die("%s: a request needs %lld tokens of context", o->replay, (long long)need);
    uint32_t n_ctx = o->ctx ? (uint32_t)o->ctx : (uint32_t)(need + 255) / 256 * 256;
    for (int32_t r = 0; r < n_req; r++) /* the KV holds the prompt and all but the last generated token */
        if ((int64_t)reqs[r].n + reqs[r].max_tokens - 1 > (int64_t)n_ctx)
            die("%s:%zu: %d prompt tokens + max_tokens %d do not fit the context of %u tokens (--ctx)", o->replay,
                reqs[r].line, reqs[r].n, reqs[r].max_tokens, n_ctx);
    int32_t n_batch = n_ctx < REPLAY_BATCH ? (int32_t)n_ctx : REPLAY_BATCH;

    struct llama_context_params cp = serving_params(o, n_ctx, n_batch);
    rng_state = 0x9E3779B97F4A7C15ull;
    probe_result pr;
    struct llama_context *ctx = probe_and_init(o, model, cp, n_batch < 64 ? n_batch : 64, n_vocab, &pr);
    llama_memory_t mem = L.llama_get_memory(ctx);

    /* warm-up, untimed: a full batch from an empty cache, then, each on top of the first half
     * of it, a batch of every size class the backend picks its kernels by (llama.cpp's Vulkan
     * backend builds a pipeline on first use: its own matrix-vector kernel for 1 to 8 tokens,
     * small, medium and large matmul tiles above; a first use inside a request costs seconds
     * on lavapipe) */
    llama_token *kv = malloc((size_t)n_ctx * sizeof *kv); /* the tokens the KV holds, position by position */
    if (!kv) die("out of memory");
    for (uint32_t i = 0; i < n_ctx; i++) kv[i] = random_token(n_vocab);
    int32_t w = n_batch, base = w / 2;
    static const int32_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 20, 48};
    L.llama_memory_clear(mem, true);
    decode_or_die(ctx, kv, w, "the warm-up");
    argmax_last(ctx, n_vocab);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int32_t n = sizes[i] < (int32_t)n_ctx - base ? sizes[i] : (int32_t)n_ctx - base;
        if (!L.llama_memory_seq_rm(mem, 0, base, -1)) die("llama_memory_seq_rm cannot remove part of a sequence here");
        decode_or_die(ctx, kv + base, n, "the warm-up");
        argmax_last(ctx, n_vocab);
    }
    L.llama_memory_clear(mem, true);

    int32_t n_kv = 0;
    double t_start = now_s();
    for (int32_t ri = 0; ri < n_req; ri++) {
        replay_req *r = &reqs[ri];
        if (!(r->gen = malloc((size_t)r->max_tokens * sizeof *r->gen))) die("out of memory");
        double t0 = now_s();
        int32_t n_common = 0;
        if (!o->no_cache) { /* llama-server: the longest common prefix with the slot's tokens */
            while (n_common < n_kv && n_common < r->n && kv[n_common] == r->ids[n_common]) n_common++;
            if (n_common == r->n) n_common--; /* re-decode the last prompt token for its logits */
            if (!L.llama_memory_seq_rm(mem, 0, n_common, -1)) {
                L.llama_memory_clear(mem, false);
                n_common = 0;
            }
        } else L.llama_memory_clear(mem, false);
        r->cached = n_common;
        decode_batches(ctx, r->ids + n_common, r->n - n_common, n_batch, "the prefill");
        llama_token tok = argmax_last(ctx, n_vocab);
        double t1 = now_s();
        r->ttft_ms = 1e3 * (t1 - t0);
        memcpy(kv, r->ids, (size_t)r->n * sizeof *kv);
        n_kv = r->n;
        r->gen[r->n_gen++] = tok;
        while (r->n_gen < r->max_tokens && (o->ignore_eos || !L.llama_vocab_is_eog(vocab, tok))) {
            kv[n_kv++] = tok;
            decode_or_die(ctx, &tok, 1, "decode");
            tok = argmax_last(ctx, n_vocab);
            r->gen[r->n_gen++] = tok;
        }
        r->decode_ms = 1e3 * (now_s() - t1);
        llama_pos held = L.llama_memory_seq_pos_max(mem, 0) + 1;
        if (held != n_kv)
            die("request %d (line %zu): the KV holds %d positions, expected %d", ri + 1, r->line, held, n_kv);
        if (verbose)
            fprintf(stderr, "llama_oracle: request %d: %d prompt, %d cached, TTFT %.1f ms, %d generated\n", ri + 1,
                    r->n, r->cached, r->ttft_ms, r->n_gen);
    }
    double wall_ms = 1e3 * (now_s() - t_start);

    char desc[256];
    L.llama_model_desc(model, desc, sizeof desc);
    printf("{\"backend\": ");
    json_str(pr.backend);
    printf(", \"device\": ");
    print_device(&pr);
    printf(", \"model\": ");
    json_str(desc);
    printf(", \"prefix_cache\": %s, \"ignore_eos\": %s, \"n_ctx\": %u, \"n_batch\": %d, \"flash_attn\": \"%s\"",
           o->no_cache ? "false" : "true", o->ignore_eos ? "true" : "false", n_ctx, n_batch, pr.flash_attn);
    printf(", \"n_gpu_layers\": %d, \"threads\": %d, \"requests\": [", pr.offloaded < 0 ? 0 : pr.offloaded, o->threads);
    long long tot_prompt = 0, tot_cached = 0;
    double ttft_sum = 0;
    for (int32_t ri = 0; ri < n_req; ri++) {
        const replay_req *r = &reqs[ri];
        tot_prompt += r->n;
        tot_cached += r->cached;
        ttft_sum += r->ttft_ms;
        printf("%s{\"prompt_tokens\": %d, \"cached_tokens\": %d, \"prefilled_tokens\": %d, \"ttft_ms\": %.3f, "
               "\"decode_tok_s\": %.3f, \"generated\": [",
               ri ? ", " : "", r->n, r->cached, r->n - r->cached, r->ttft_ms,
               r->n_gen > 1 && r->decode_ms > 0 ? (r->n_gen - 1) / (r->decode_ms / 1e3) : 0.0);
        for (int32_t i = 0; i < r->n_gen; i++) printf("%s%d", i ? ", " : "", r->gen[i]);
        fputs("]}", stdout);
    }
    printf("], \"totals\": {\"requests\": %d, \"prompt_tokens\": %lld, \"cached_tokens\": %lld, \"prefilled_tokens\": "
           "%lld, "
           "\"hit_rate\": %.6f, \"ttft_ms_sum\": %.3f, \"wall_ms\": %.3f}}\n",
           n_req, tot_prompt, tot_cached, tot_prompt - tot_cached, tot_prompt ? (double)tot_cached / tot_prompt : 0.0,
           ttft_sum, wall_ms);
    fflush(stdout);
    for (int32_t ri = 0; ri < n_req; ri++) free(reqs[ri].ids), free(reqs[ri].gen);
    free(reqs);
    free(kv);
    L.llama_free(ctx);
    return 0;
}

static void parse_args(int argc, char **argv, opts *o) {
    *o = (opts){.top = 10, .threads = 2, .pp = 512, .tg = 128, .repeat = 3, .flash_attn = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--info")) o->info = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--full")) o->full = true;
        else if (!strcmp(a, "--vulkan")) o->vulkan = true;
        else if (!strcmp(a, "--verbose")) verbose = true;
        else if (!strcmp(a, "--trace-experts")) o->trace_experts = true;
        else if (!strcmp(a, "--dequantize") && has) o->dequantize = argv[++i];
        else if (!strcmp(a, "--quantize") && has) o->quantize = argv[++i];
        else if (!strcmp(a, "--tokenize") && has) o->tokenize = argv[++i];
        else if (!strcmp(a, "--logits") && has) o->logits = argv[++i];
        else if (!strcmp(a, "--out") && has) o->out = argv[++i];
        else if (!strcmp(a, "--libdir") && has) o->libdir = argv[++i];
        else if (!strcmp(a, "--top") && has) o->top = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && has) o->threads = atoi(argv[++i]);
        else if (!strcmp(a, "--bench")) o->bench = true;
        else if (!strcmp(a, "--pp") && has) o->pp = atoi(argv[++i]);
        else if (!strcmp(a, "--tg") && has) o->tg = atoi(argv[++i]);
        else if (!strcmp(a, "--repeat") && has) o->repeat = atoi(argv[++i]);
        else if (!strcmp(a, "--parallel") && has) o->parallel = atoi(argv[++i]);
        else if (!strcmp(a, "--replay") && has) o->replay = argv[++i];
        else if (!strcmp(a, "--ctx") && has) o->ctx = atoi(argv[++i]);
        else if (!strcmp(a, "--no-cache")) o->no_cache = true;
        else if (!strcmp(a, "--sample")) o->sample = true;
        else if (!strcmp(a, "--score")) o->score = true;
        else if (!strcmp(a, "--grammar") && has) o->grammar = argv[++i], o->sample = true;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--flash-attn") && has) {
            const char *v = argv[++i];
            o->flash_attn = !strcmp(v, "auto") ? -1 : !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -2;
            if (o->flash_attn == -2) usage();
        } else if (a[0] == '-') usage();
        else if (!o->model) o->model = a;
        else usage();
    }
    if (!o->model ||
        (!!o->info + !!o->tokenize + !!o->logits + !!o->dequantize + !!o->quantize + !!o->bench + !!o->replay) != 1 ||
        (o->quantize && !o->out) || o->top < 0 || o->threads < 1 || o->pp < 0 || o->tg < 0 || o->pp + o->tg == 0 ||
        o->repeat < 1 || (o->ctx && (o->ctx < 64 || o->ctx > (1 << 24))) ||
        ((o->ctx || o->no_cache || o->ignore_eos) && !o->replay) || o->parallel < 0 || o->parallel > 256 ||
        (o->parallel && !o->bench))
        usage();
}

int main(int argc, char **argv) {
    opts o;
    parse_args(argc, argv, &o);
    const char *dir = o.libdir ? o.libdir : getenv(o.vulkan ? "CINDER_LLAMA_VULKAN_LIBDIR" : "CINDER_LLAMA_LIBDIR");
    if (!dir || !dir[0]) dir = o.vulkan ? ORACLE_VULKAN_LIBDIR : ORACLE_CPU_LIBDIR;
    if (!dir[0]) die("no llama.cpp library directory: pass --libdir or rebuild with tests/oracle/build.sh");
    load_llama(dir);
    L.llama_log_set(log_cb, NULL);
    L.ggml_backend_load_all_from_path(dir);
    L.llama_backend_init();
    if (o.dequantize || o.quantize) {
        int rc = o.quantize ? cmd_quantize(&o) : cmd_dequantize(&o);
        L.llama_backend_free();
        return rc;
    }

    struct llama_model_params mp = L.llama_model_default_params();
    mp.n_gpu_layers = o.vulkan ? -1 : 0;
    mp.use_extra_bufts = o.bench || o.replay; /* the oracle: no repacked weight layouts, the plain ggml kernels */
    mp.vocab_only = o.tokenize != NULL;
    mp.check_tensors = o.info;
    struct llama_model *model = L.llama_model_load_from_file(o.model, mp);
    if (!model) die("llama.cpp could not load %s (run with --verbose for its log)", o.model);
    const struct llama_vocab *vocab = L.llama_model_get_vocab(model);

    int rc = 0;
    if (o.info) {
        char desc[256];
        L.llama_model_desc(model, desc, sizeof desc);
        printf("{\"desc\": \"%s\", \"n_params\": %llu, \"size\": %llu, \"n_vocab\": %d, \"backend\": \"%s\"}\n", desc,
               (unsigned long long)L.llama_model_n_params(model), (unsigned long long)L.llama_model_size(model),
               L.llama_vocab_n_tokens(vocab), o.vulkan ? "vulkan" : "cpu");
        if (verbose) fprintf(stderr, "%s\n", L.llama_print_system_info());
    } else if (o.tokenize) rc = cmd_tokenize(&o, vocab);
    else if (o.bench) rc = cmd_bench(&o, model, vocab);
    else if (o.replay) rc = cmd_replay(&o, model, vocab);
    else rc = cmd_logits(&o, model, vocab);
    L.llama_model_free(model);
    L.llama_backend_free();
    return rc;
}
