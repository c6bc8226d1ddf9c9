/* cinder profile: where a step's time goes on this device (tools/profile_model.h) and what the
 * device can do (cinder profile --device). docs/PROFILE.md explains the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/device_card.h"
#include "tools/profile_model.h"
#include "tools/shader_table.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder profile [--model M] [--prompt-tokens P] [--gen D] [--context C] [--batch B]\n"
            "                      [--trace OUT.json] [--plot OUT.svg] [--json] [--seed S] [--device-index N]\n"
            "                      [--peak-gbps X] [--peak-tflops Y] [--scenario NAME | --trace-file F]\n"
            "                      [--gate-up-pairs auto|on|off] [--int-dot auto|on|off] [--few-shape BN,BM,KL[,TM]]\n"
            "                      [--one-shape BM,KL[,TM]] [--head-shape BN,BM,KL[,TM]] [--big-tile BM,BN,BK,TM,TN]\n"
            "                      " CLI_ROPE_USAGE "\n"
            "  one prefill of P prompt tokens (default 512) after C tokens of context (default 0), then\n"
            "  D decode steps (default 16) of B sequences (default 1), through the engine's batched\n"
            "  forward pass, with a GPU timestamp around every op, dispatch and copy. Prints per op:\n"
            "  calls, time, share, bytes and FLOPs per call (from the shapes and weight types; MoE:\n"
            "  the experts selected), GB/s, GFLOP/s and the fraction of the device's peak; time per\n"
            "  part (attention, moe, head) and per layer; the decode roofline (bytes per step over the\n"
            "  peak bandwidth vs the achieved step); the host side of a step; the timestamps' own\n"
            "  overhead. --trace writes a Chrome/Perfetto trace (ui.perfetto.dev), --plot an SVG bar\n"
            "  chart of each op's share of the GPU time. The peaks come from\n"
            "  the device card (measured once per device and driver, then cached); --peak-gbps and\n"
            "  --peak-tflops replace them (read bandwidth, fp32 FMA rate). --scenario NAME (one of\n"
            "  scripts/scenarios/) or --trace-file F replays those requests through the engine\n"
            "  instead, B of them in flight (--batch), timing every pass, and adds per request its\n"
            "  wait, its prefix-cache work (match, host restore, disk reads) and its TTFT.\n"
            "  --gate-up-pairs: the FFN's gate and up of one type as one matmul with the SwiGLU\n"
            "  (auto: on a GPU, not on a CPU device). --int-dot: the integer family (x as int8 blocks,\n"
            "  8-bit dot products: docs/kernels/xq8.md; auto: off for now).\n"
            "  --few-shape / --one-shape: a GPU's 2-16-token / one-token matmul kernel with BN tokens\n"
            "  per workgroup column, BM rows per workgroup, KL lanes splitting k and TM rows per lane\n"
            "  (each x load feeds them; 1 if not given) (0: the default; the same results, other\n"
            "  speeds: docs/kernels/matmul.md). Not the lm_head's; a CPU device's kernels ignore them. --big-tile: the "
            "tiled kernel (prefill, busy experts) with\n"
            "  BM weight rows x BN tokens x BK k per shared-memory tile and a TM x TN register block\n"
            "  per invocation (TM, TN multiples of 4, TM * TN <= 64, BK dividing 256; default\n"
            "  64,64,32,4,4). --head-shape: a GPU's lm_head over 2-16 tokens, as --few-shape.\n"
            "  The RoPE flags override the file's, as for `cinder run` (YaRN: docs/GGUF.md, \"RoPE\"): a\n"
            "  profile at contexts past the file's own.\n"
            "\n"
            "usage: cinder profile --device [--json] [--refresh] [--peak-gbps X] [--peak-tflops Y]\n"
            "                      [--device-index N]\n"
            "  the device card: identity, limits, queues, heaps and measured bandwidth, transfer and\n"
            "  arithmetic rates (docs/PROFILE.md); --refresh measures again instead of the cache.\n"
            "\n"
            "usage: cinder profile --shaders [--model M] [--family gfx1100|navi21|...] [--json] [--isa DIR]\n"
            "                      [--device-index N]\n"
            "  what the device's compiler made of every pipeline the model would use on it: VGPRs,\n"
            "  SGPRs, spills, LDS, subgroup size (pin: asked for), waves and lanes resident per SIMD,\n"
            "  instructions, the compiler's inverse-throughput estimate, vector loads by width and\n"
            "  integer dot products (VK_KHR_pipeline_executable_properties; RADV reports it). --family F\n"
            "  compiles for that RDNA family on RADV's null device: no such card needed, nothing runs.\n"
            "  --isa DIR writes each pipeline's disassembly to DIR/NN-name.s.\n");
}

/* BN,BM,KL[,TM] (one token: BM,KL[,TM]) of the rows kernel */
static int rows_shape(const char *opt, const char *v, bool one, gpu_rows_shape *out) {
    size_t n = one ? 2 : 3, commas = 0;
    for (const char *p = v; *p; p++) commas += *p == ',';
    if (commas == n) n++; /* TM given too */
    else if (commas + 1 != n)
        return cli_error("profile", "%s %s: %zu or %zu comma-separated numbers", opt, v, n, n + 1), -1;
    uint32_t s[4] = {0};
    if (cli_u32s("profile", opt, v, s, n)) return -1;
    *out = one ? (gpu_rows_shape){.bm = s[0], .kl = s[1], .tm = s[2]}
               : (gpu_rows_shape){.bn = s[0], .bm = s[1], .kl = s[2], .tm = s[3]};
    return 0;
}

static int parse(int argc, char **argv, profile_opts *o) {
    *o = (profile_opts){.prompt = 512, .gen = 16, .batch = 1, .seed = 1, .device = -1};
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_flag(argv, i, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (cli_flag(argv, i, "--json")) {
            o->json = true;
            continue;
        }
        int rope = cli_rope(argc, argv, &i, &o->rope);
        if (rope < 0) return -1;
        if (rope) continue;
        if (cli_value(argc, argv, &i, "--model", &v)) o->model = v;
        else if (cli_value(argc, argv, &i, "--trace", &v)) o->trace = v;
        else if (cli_value(argc, argv, &i, "--plot", &v)) o->plot = v;
        else if (cli_value(argc, argv, &i, "--scenario", &v)) o->scenario = v;
        else if (cli_value(argc, argv, &i, "--trace-file", &v)) o->trace_file = v;
        else if (cli_value(argc, argv, &i, "--prompt-tokens", &v)) {
            if (cli_u32("--prompt-tokens", v, &o->prompt)) return -1;
        } else if (cli_value(argc, argv, &i, "--gen", &v)) {
            if (cli_u32("--gen", v, &o->gen)) return -1;
        } else if (cli_value(argc, argv, &i, "--context", &v)) {
            if (cli_u32("--context", v, &o->context)) return -1;
        } else if (cli_value(argc, argv, &i, "--batch", &v)) {
            if (cli_u32("--batch", v, &o->batch)) return -1;
        } else if (cli_value(argc, argv, &i, "--seed", &v)) {
            if (cli_u32("--seed", v, &o->seed)) return -1;
        } else if (cli_value(argc, argv, &i, "--gate-up-pairs", &v)) {
            if (cli_auto_on_off("profile", "--gate-up-pairs", v, &o->gate_up_pairs)) return -1;
        } else if (cli_value(argc, argv, &i, "--int-dot", &v)) {
            if (cli_auto_on_off("profile", "--int-dot", v, &o->int_dot)) return -1;
        } else if (cli_value(argc, argv, &i, "--few-shape", &v)) {
            if (rows_shape("--few-shape", v, false, &o->few_shape)) return -1;
        } else if (cli_value(argc, argv, &i, "--one-shape", &v)) {
            if (rows_shape("--one-shape", v, true, &o->one_shape)) return -1;
        } else if (cli_value(argc, argv, &i, "--head-shape", &v)) {
            if (rows_shape("--head-shape", v, false, &o->head_shape)) return -1;
        } else if (cli_value(argc, argv, &i, "--big-tile", &v)) {
            uint32_t s[5];
            if (cli_u32s("profile", "--big-tile", v, s, 5)) return -1;
            o->big_tile = (gpu_tile_shape){.bm = s[0], .bn = s[1], .bk = s[2], .tm = s[3], .tn = s[4]};
        } else if (cli_value(argc, argv, &i, "--device-index", &v)) {
            if (cli_i32("--device-index", v, &o->device)) return -1;
        } else if (cli_value(argc, argv, &i, "--peak-gbps", &v)) {
            float f;
            if (cli_f32("--peak-gbps", v, &f)) return -1;
            o->peak_gbps = f;
        } else if (cli_value(argc, argv, &i, "--peak-tflops", &v)) {
            float f;
            if (cli_f32("--peak-tflops", v, &f)) return -1;
            o->peak_tflops = f;
        } else {
            cli_unknown("profile", argv[i]);
            usage(stderr);
            return -1;
        }
        if (!v) return cli_error("profile", "%s needs a value", argv[i]), -1;
    }
    if (o->peak_gbps < 0 || o->peak_tflops < 0) return cli_error("profile", "peaks must not be negative"), -1;
    if (o->scenario && o->trace_file) return cli_error("profile", "--scenario and --trace-file: one or the other"), -1;
    return 0;
}

/* cinder profile --shaders [--model M] [--family F] [--json] [--device-index N] */
static int shaders_cli(int argc, char **argv) {
    shader_table_opts o = {.device = -1};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_flag(argv, i, "--shaders")) continue;
        if (cli_flag(argv, i, "--json")) {
            o.json = true;
            continue;
        }
        if (cli_value(argc, argv, &i, "--model", &v)) path = v;
        else if (cli_value(argc, argv, &i, "--family", &v)) o.family = v;
        else if (cli_value(argc, argv, &i, "--isa", &v)) o.isa_dir = v;
        else if (cli_value(argc, argv, &i, "--device-index", &v)) {
            if (cli_i32("--device-index", v, &o.device)) return 2;
        } else {
            cli_unknown("profile", argv[i]);
            usage(stderr);
            return 2;
        }
        if (!v) return cli_error("profile", "%s needs a value", argv[i]), 2;
    }
    if (o.family && shader_table_family_env(o.family)) return 1;
    if (!path) {
        if (cli_ensure_default_model()) return 1;
        path = cli_default_model();
    }
    model *m;
    if (model_load(&m, path, (model_load_opts){.skip_weight_hash = true}))
        return cli_error("profile", "%s", cd_errmsg());
    int rc = shader_table_run(&o, m);
    model_free(m);
    return rc;
}

int cmd_profile(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device")) return device_card_cli(argc, argv);
        if (!strcmp(argv[i], "--shaders")) return shaders_cli(argc, argv);
    }
    profile_opts o;
    if (parse(argc, argv, &o)) return 2;
    if (!o.model) {
        if (cli_ensure_default_model()) return 1;
        o.model = cli_default_model();
    }
    model *m;
    if (model_load(&m, o.model, (model_load_opts){.skip_weight_hash = true, .rope = o.rope}))
        return cli_error("profile", "%s", cd_errmsg());
    int rc = profile_model(&o, m);
    model_free(m);
    return rc;
}
