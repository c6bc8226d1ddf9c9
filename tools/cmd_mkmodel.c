/* cinder mkmodel: write a synthetic qwen3moe GGUF. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/synth.h"
#include "tools/cli.h"
#include "tools/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder mkmodel --out PATH [--preset tiny|small|qwen3-30b-a3b] [--quant MIX] [--seed N]\n"
            "                      [--layers N] [--embd N] [--heads N] [--kv-heads N] [--head-dim N]\n"
            "                      [--experts N] [--experts-used N] [--ff N] [--dense] [--vocab N]\n"
            "                      [--ctx N] [--rope-theta F] [--logit-scale F] [--threads N]\n"
            "                      [--rope-scaling none|linear|yarn] [--rope-scale N] [--yarn-orig-ctx N]\n"
            "                      [--tokenizer-dir DIR] [--script TEXT] [--chat-template-file F]\n"
            "                      [--split-max-tensors N] [--dry-run]\n"
            "  MIX: f32, f16, bf16, q8_0, q4_k_m, mix (the 4-8-bit types; tiny's default), q3_k_m, q2_k,\n"
            "       iq4_xs, iq4_nl, mxfp4_moe, mix-lowbit (Q2_K, Q3_K, Q4_0 .. Q5_1, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, "
            "IQ2_*, IQ1_*, MXFP4;\n"
            "       three layers unless --layers says: one of each of its 16 types)\n"
            "  --dense writes a dense qwen3 model whose FFN width is --ff\n"
            "  --script TEXT writes a model whose greedy continuation is TEXT: after TEXT's token i\n"
            "    comes its token i+1, whatever came before (special tokens parsed; every token but\n"
            "    the last distinct, at most --embd + 1 tokens). End the prompt with TEXT's first token.\n"
            "  --chat-template-file F stores F's text as tokenizer.chat_template (by default the\n"
            "    tokenizer directory's, the Qwen3 hybrid template); any text, recognised or not\n"
            "  --split-max-tensors N writes a split model as llama.cpp's gguf-split does: N tensors a\n"
            "    shard, PATH less .gguf + -00001-of-0000K.gguf ...; prints the first, which opens them all\n"
            "  --rope-scaling yarn --rope-scale N [--yarn-orig-ctx C] writes a YaRN model as unsloth's\n"
            "    -128K files are (rope.scaling.*): original context C (default --ctx), context\n"
            "    C x N unless --ctx says; linear writes linear scaling. --rope-freq-base = --rope-theta\n"
            "  --dry-run prints the size the model would have and writes nothing\n");
}

static void progress(void *user, uint64_t done, uint64_t total) {
    (void)user;
    fprintf(stderr, "\rwriting: %5.1f%% of %.1f MiB", total ? 100.0 * done / total : 100.0, total / 1048576.0);
    if (done == total) fputc('\n', stderr);
}

/* Dimension overrides: one table instead of a chain of ifs. */
static int parse_dim(const char *opt, const char *v, synth_spec *s, bool *handled) {
    struct {
        const char *name;
        uint32_t *field;
    } dims[] = {
        {"--layers", &s->cfg.n_layer},
        {"--embd", &s->cfg.n_embd},
        {"--heads", &s->cfg.n_head},
        {"--kv-heads", &s->cfg.n_head_kv},
        {"--head-dim", &s->cfg.head_dim},
        {"--experts", &s->cfg.n_expert},
        {"--experts-used", &s->cfg.n_expert_used},
        {"--ff", &s->cfg.n_ff_exp},
        {"--vocab", &s->cfg.n_vocab},
        {"--ctx", &s->cfg.n_ctx_train},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (strcmp(opt, dims[i].name)) continue;
        *handled = true;
        return cli_u32(opt, v, dims[i].field);
    }
    *handled = false;
    return 0;
}

/* --rope-scaling: the original context is --yarn-orig-ctx (else --ctx), the context the file
 * states is original x factor unless --ctx says otherwise, as a long-context release has them. */
static int scaled_rope(model_config *c, uint32_t orig_ctx, bool ctx_given) {
    rope_config *r = &c->rope;
    if (r->scaling == ROPE_SCALING_NONE) {
        if (r->factor != 1.0f || orig_ctx)
            return cli_error("mkmodel", "--rope-scale and --yarn-orig-ctx need --rope-scaling");
        return 0;
    }
    r->orig_ctx = orig_ctx ? orig_ctx : c->n_ctx_train;
    r->ext_factor = r->scaling == ROPE_SCALING_YARN ? 1.0f : 0.0f;
    if (rope_config_check(r)) return cli_error("mkmodel", "%s", cd_errmsg());
    double n = (double)r->orig_ctx * r->factor;
    if (!ctx_given) c->n_ctx_train = n >= UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    return 0;
}

/* The whole file, NUL-terminated; a NUL inside would cut the GGUF string short, so it is refused. */
static int read_template(const char *path, char **out) {
    if (!path) return cli_error("mkmodel", "--chat-template-file needs a value");
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error("mkmodel", "--chat-template-file %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap = 2 * cap + 4096 + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return cli_error("mkmodel", "out of memory");
            }
            buf = nb;
        }
        got = fread(buf + len, 1, 4096, f);
        len += got;
    } while (got > 0);
    bool bad = ferror(f) != 0;
    fclose(f);
    buf[len] = 0;
    if (bad || memchr(buf, 0, len)) {
        free(buf);
        return cli_error("mkmodel", "--chat-template-file %s: %s", path, bad ? "read error" : "contains a NUL byte");
    }
    free(*out);
    *out = buf;
    return 0;
}

/* --split-max-tensors: the shards are named from --out less its .gguf, as gguf-split names
 * them from its output prefix. */
static int write_split(const synth_spec *s, const char *out, uint64_t max, const char *preset, double t0) {
    size_t n = strlen(out);
    char prefix[4096], first[4096 + 32];
    if (n >= sizeof prefix) return cli_error("mkmodel", "--out is too long");
    snprintf(prefix, sizeof prefix, "%.*s", (int)(n > 5 && !strcmp(out + n - 5, ".gguf") ? n - 5 : n), out);
    uint32_t shards = 0;
    if (synth_write_split(s, prefix, max, &shards, isatty(2) ? progress : NULL, NULL) ||
        gguf_split_path(first, sizeof first, prefix, 0, shards))
        return cli_error("mkmodel", "%s", cd_errmsg());
    fprintf(stderr, "wrote %s and %u more shard(s) (%s, %s, seed %llu) in %.1f s\n", first, shards - 1, preset,
            synth_quant_name(s->quant), (unsigned long long)s->seed, (cd_now_ms() - t0) / 1e3);
    printf("%s\n", first);
    return 0;
}

static int mkmodel(int argc, char **argv, char **tmpl) {
    synth_spec s;
    const char *out = NULL, *preset = "tiny";
    for (int i = 1; i < argc; i++) /* the preset first: other options override it */
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[i + 1];
        else if (!strncmp(argv[i], "--preset=", 9)) preset = argv[i] + 9;
    if (synth_preset(preset, &s)) return cli_error("mkmodel", "%s", cd_errmsg());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s.n_threads = cores > 0 ? (int)cores : 1;
    bool dense = false, dry_run = false, ctx_given = false, layers_given = false;
    uint64_t split_max = 0;
    uint32_t orig_ctx = 0; /* --yarn-orig-ctx */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char opt[64];
        snprintf(opt, sizeof opt, "%.*s", (int)strcspn(a, "="), a);
        if (cli_flag(argv, i, "--help")) {
            usage(stdout);
            return 0;
        }
        if (cli_flag(argv, i, "--dense")) {
            dense = true;
            continue;
        }
        if (cli_flag(argv, i, "--dry-run")) {
            dry_run = true;
            continue;
        }
        if (a[0] != '-' || !cli_value(argc, argv, &i, opt, &v)) return cli_unknown("mkmodel", a);
        bool handled;
        if (parse_dim(opt, v, &s, &handled)) return 1;
        if (handled) {
            ctx_given |= !strcmp(opt, "--ctx"), layers_given |= !strcmp(opt, "--layers");
            continue;
        }
        if (!strcmp(opt, "--preset")) continue;
        else if (!strcmp(opt, "--out")) out = v;
        else if (!strcmp(opt, "--quant")) {
            if (!v || synth_quant_from_name(v, &s.quant))
                return cli_error("mkmodel", "%s", v ? cd_errmsg() : "--quant needs a value");
        } else if (!strcmp(opt, "--seed")) {
            if (cli_u64(opt, v, &s.seed)) return 1;
        } else if (!strcmp(opt, "--split-max-tensors")) {
            if (cli_u64(opt, v, &split_max)) return 1;
            if (split_max == 0) return cli_error("mkmodel", "--split-max-tensors must be at least 1");
        } else if (!strcmp(opt, "--rope-theta") || !strcmp(opt, "--rope-freq-base")) {
            if (cli_f32(opt, v, &s.cfg.rope.freq_base)) return 1;
        } else if (!strcmp(opt, "--rope-scaling")) {
            if (!v || rope_scaling_parse(v, strlen(v), &s.cfg.rope.scaling))
                return cli_error("mkmodel", "--rope-scaling: %s", v ? cd_errmsg() : "needs a value");
        } else if (!strcmp(opt, "--rope-scale")) {
            if (cli_f32(opt, v, &s.cfg.rope.factor)) return 1;
        } else if (!strcmp(opt, "--yarn-orig-ctx")) {
            if (cli_u32(opt, v, &orig_ctx)) return 1;
        } else if (!strcmp(opt, "--logit-scale")) {
            if (cli_f32(opt, v, &s.logit_scale)) return 1;
        } else if (!strcmp(opt, "--threads")) {
            uint32_t n;
            if (cli_u32(opt, v, &n)) return 1;
            s.n_threads = (int)n;
        } else if (!strcmp(opt, "--tokenizer-dir")) s.tokenizer_dir = v;
        else if (!strcmp(opt, "--chat-template-file")) {
            if (read_template(v, tmpl)) return 1;
            s.chat_template = *tmpl;
        } else if (!strcmp(opt, "--script")) {
            if (!v) return cli_error("mkmodel", "--script needs a value");
            s.script = v;
        } else return cli_unknown("mkmodel", a);
    }
    if (!out && !dry_run) return cli_error("mkmodel", "--out PATH is required");
    if (!layers_given && s.cfg.n_layer < synth_quant_layers(s.quant)) s.cfg.n_layer = synth_quant_layers(s.quant);
    if (scaled_rope(&s.cfg, orig_ctx, ctx_given)) return 1;
    if (dense) {
        s.cfg.arch = ARCH_QWEN3;
        s.cfg.n_ff = s.cfg.n_ff_exp;
        s.cfg.n_expert = s.cfg.n_expert_used = s.cfg.n_ff_exp = 0;
    }
    if (dry_run) {
        uint64_t bytes;
        if (synth_weight_bytes(&s, &bytes)) return cli_error("mkmodel", "%s", cd_errmsg());
        printf("%s, %s: %llu bytes of weights (%.2f GiB)\n", preset, synth_quant_name(s.quant),
               (unsigned long long)bytes, bytes / 1073741824.0);
        return 0;
    }
    double t0 = cd_now_ms();
    if (split_max) return write_split(&s, out, split_max, preset, t0);
    if (synth_write(&s, out, isatty(2) ? progress : NULL, NULL)) return cli_error("mkmodel", "%s", cd_errmsg());
    fprintf(stderr, "wrote %s (%s, %s, seed %llu) in %.1f s\n", out, preset, synth_quant_name(s.quant),
            (unsigned long long)s.seed, (cd_now_ms() - t0) / 1e3);
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    char *tmpl = NULL; /* --chat-template-file's text */
    int rc = mkmodel(argc, argv, &tmpl);
    free(tmpl);
    return rc;
}
