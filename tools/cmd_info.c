/* cinder info MODEL: what the file is (tools/info_file.c: names, file type, shards, bytes,
 * context, RoPE, chat template, tensor types; printed before loading, so a file cinder cannot
 * load is still described), then the model cinder loads from it: hyperparameters, tensor
 * table, total size, fingerprint; then the memory plan on this device (engine_plan_memory:
 * the weights, KV pool and work buffers against the device's memory, before a weight is read,
 * with the engine flags that change it). */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/base/size_text.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/model.h"
#include "runtime/vk/vk_device.h"
#include "tools/cli.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"
#include "tools/info_file.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder info [MODEL] " CLI_ROPE_USAGE " [--no-plan] [--parallel N] [ENGINE FLAGS]\n"
            "       cinder info --device [N]\n"
            "  MODEL        a GGUF file (default: the Quick start model)\n"
            "  --no-plan    skip the memory plan (which opens the device; it builds no pipeline)\n"
            "  ENGINE FLAGS as cinder chat and serve take them (--ctx, --kv-pool-tokens,\n"
            "               --device-memory-mb, --n-cpu-moe, ...): the plan is the one cinder chat makes\n"
            "               with them (one sequence at a time)\n"
            "  --parallel N the plan for N sequences at once, as cinder serve --parallel N (serve's\n"
            "               default is 8)\n"
            "  --device [N] list Vulkan devices and describe the one cinder would use (or device N;\n"
            "               CINDER_DEVICE=N chooses too)\n");
}

static void print_config(const model *m) {
    const model_config *c = &m->cfg;
    printf("architecture      %s\n", model_arch_name(c->arch));
    printf("layers            %u\n", c->n_layer);
    printf("embedding         %u\n", c->n_embd);
    printf("heads / kv heads  %u / %u (head_dim %u)\n", c->n_head, c->n_head_kv, c->head_dim);
    if (c->arch == ARCH_QWEN3MOE)
        printf("experts           %u, %u active, ffn %u\n", c->n_expert, c->n_expert_used, c->n_ff_exp);
    else printf("ffn               %u\n", c->n_ff);
    printf("vocabulary        %u (tokenizer %d)\n", c->n_vocab, tok_n_vocab(m->tok));
    printf("rms eps           %g\n", c->rms_eps);
    char rope[160];
    rope_describe(&c->rope, rope, sizeof rope);
    printf("rope as run       theta %g, %s\n", c->rope.freq_base, rope);
    printf("context           %u\n", c->n_ctx_train);
}

static void print_tensors(const model *m) {
    /* type names up to 7 characters (IQ2_XXS) */
    printf("\n%-32s %-7s %-28s %14s\n", "tensor", "type", "shape", "bytes");
    for (uint64_t i = 0; i < m->file->n_tensors; i++) {
        const gguf_tensor *t = &m->file->tensors[i];
        char shape[64] = "";
        for (uint32_t d = 0; d < t->n_dims; d++) {
            size_t n = strlen(shape);
            snprintf(shape + n, sizeof shape - n, "%s%lld", d ? " x " : "", (long long)t->ne[d]);
        }
        printf("%-32.*s %-7s %-28s %14llu\n", (int)t->name.len, t->name.ptr, qtype_name(t->type), shape,
               (unsigned long long)t->nbytes);
    }
}

/* The memory plan `cinder run`/`serve` would make with eo here: what fits, or the refusal. */
static void print_plan(model *m, const engine_opts *eo) {
    engine_plan p;
    printf("\n");
    fflush(stdout);
    if (engine_plan_memory(m, eo, &p)) {
        printf("memory plan       none: %s\n", cd_errmsg());
        return;
    }
    char a[32], b[32], c[32], d[32];
    const gpu_memory_plan *q = &p.mem;
    printf("memory plan       %s: %s %s\n", p.device, cd_size_text(q->device, a),
           eo->device_memory_mb ? "(as asked: --device-memory-mb)" : "free to cinder");
    printf("  weights         %s on the device", cd_size_text(q->weights, a));
    if (q->host_experts) printf(", %s of experts in host memory", cd_size_text(q->host_experts, b));
    printf("\n  KV pool         %u tokens, %s (context %u)\n", p.pool_tokens, cd_size_text(q->kv, c), p.n_ctx);
    printf("  work buffers    %s\n", cd_size_text(q->work, d));
    uint64_t total = q->weights + q->kv + q->work;
    if (!p.refusal[0])
        printf("  total           %s of %s: fits%s\n", cd_size_text(total, a), cd_size_text(q->device, b),
               q->host_experts ? " with those experts in host memory (--n-cpu-moe sets how many)" : "");
    else
        printf("  total           %s of %s: does not fit\n  cinder says     %s\n", cd_size_text(total, a),
               cd_size_text(q->device, b), p.refusal);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    rope_override rope = {0};
    engine_opts eo = {0};
    bool plan = true;
    for (int i = 1; i < argc; i++) {
        if (cli_flag(argv, i, "--help")) {
            usage(stdout);
            return 0;
        }
        if (cli_flag(argv, i, "--no-plan")) {
            plan = false;
            continue;
        }
        const char *v = NULL;
        if (cli_value(argc, argv, &i, "--parallel", &v)) {
            if (!v || cli_u32("--parallel", v, &eo.max_seqs))
                return v ? 1 : cli_error("info", "--parallel needs a value");
            continue;
        }
        int r = cli_rope(argc, argv, &i, &rope);
        if (r < 0) return 1;
        if (r) continue;
        int e = cli_engine_flag("info", argc, argv, &i, &eo);
        if (e < 0) return 1;
        if (e) continue;
        if (cli_flag(argv, i, "--device")) {
            uint32_t index = 0;
            bool given = i + 1 < argc && argv[i + 1][0] != '-';
            if (given && cli_u32("--device", argv[i + 1], &index)) return 1;
            return cvk_print_devices(stdout, given ? (int)index : -1) ? cli_error("info", "%s", cd_errmsg()) : 0;
        }
        if (argv[i][0] == '-') return cli_unknown("info", argv[i]);
        path = argv[i];
    }
    if (!path) {
        if (cli_ensure_default_model()) return 1;
        path = cli_default_model();
    }
    gguf_file *f;
    if (gguf_open(&f, path)) return cli_error("info", "%s: %s", path, cd_errmsg());
    info_print_file(stdout, f, path);
    gguf_close(f);
    fflush(stdout);
    model *m;
    double t0 = cd_now_ms();
    if (model_load(&m, path, (model_load_opts){.rope = rope})) return cli_error("info", "%s", cd_errmsg());
    double load_ms = cd_now_ms() - t0;
    char fp[65];
    fp_hex(m->fingerprint, 32, fp);
    print_config(m);
    print_tensors(m);
    printf("\ntotal             %llu parameters, %.1f MiB of weights (file %.1f MiB)\n",
           (unsigned long long)model_param_count(m), model_weight_bytes(m) / 1048576.0,
           m->file->disk_bytes / 1048576.0);
    printf("fingerprint       %s\n", fp);
    printf("load + hash       %.0f ms\n", load_ms);
    int rc = plan && cli_engine_check("info", &eo) ? 1 : 0;
    if (plan && !rc) print_plan(m, &eo);
    model_free(m);
    return rc;
}
