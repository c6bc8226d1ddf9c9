#include "tools/shader_table.h"

#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/base/error.h"
#include "runtime/gguf/quant.h"
#include "runtime/model/gpu_model.h"
#include "runtime/vk/op_xq8.h"
#include "runtime/vk/vk_shader_stats.h"
#include "tools/cli.h"

/* The RDNA families Mesa's RADV knows by these names (Debian 12's Mesa 22.3: RDNA1-3; it aborts
 * the process on a name it does not know, so the name is checked here first). */
static const char *const rdna_families[] = {"navi10",  "navi12",  "navi14",  "navi21",    "navi22",
                                            "navi23",  "navi24",  "vangogh", "rembrandt", "gfx1036",
                                            "gfx1037", "gfx1100", "gfx1101", "gfx1102",   "gfx1103"};

int shader_table_family_env(const char *family) {
    size_t n = sizeof rdna_families / sizeof rdna_families[0];
    bool known = false;
    for (size_t i = 0; i < n && !known; i++) known = !strcmp(family, rdna_families[i]);
    if (!known) {
        char list[256] = "";
        for (size_t i = 0, len = 0; i < n; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", rdna_families[i]);
        return cli_error("profile", "--family %s: not an RDNA family RADV compiles for (%s)", family, list), -1;
    }
    glob_t g;
    if (glob("/usr/share/vulkan/icd.d/radeon_icd.*.json", 0, NULL, &g) || g.gl_pathc == 0) {
        globfree(&g);
        return cli_error("profile",
                         "--family %s needs Mesa's RADV driver (Debian: mesa-vulkan-drivers): no "
                         "/usr/share/vulkan/icd.d/radeon_icd.*.json",
                         family),
               -1;
    }
    setenv("VK_ICD_FILENAMES", g.gl_pathv[0], 1);
    globfree(&g);
    setenv("RADV_FORCE_FAMILY", family, 1);
    if (!getenv("XDG_RUNTIME_DIR")) { /* the driver's disk cache wants one */
        const char *dir = "/tmp/cinder-xdg";
        mkdir(dir, 0700);
        setenv("XDG_RUNTIME_DIR", dir, 1);
    }
    return 0;
}

/* The matmul kernels' specialization constants {wg, type, bm, bn, bk, tm, tn, glu} as words;
 * others as their raw values. */
static void describe(const cvk_shader_stats *s, char *out, size_t n) {
    if (!strncmp(s->name, "matmul", 6) && s->n_spec >= 8) {
        const uint32_t *v = s->spec;
        const char *type = v[1] < QTYPE_COUNT ? qtype_name((enum qtype)v[1]) : "?";
        if (v[4]) /* tiled: rows x tokens x k per tile, the register block */
            snprintf(out, n, "%s%s %ux%ux%u/%ux%u", type, v[7] ? " glu" : "", v[2], v[3], v[4], v[5], v[6]);
        else /* rows kernel: rows x tokens per workgroup, rows per lane, lanes per row */
            snprintf(out, n, "%s%s %ur %ut tm%u kl%u", type, v[7] ? " glu" : "", v[2], v[3], v[5], v[6]);
        return;
    }
    size_t len = 0;
    out[0] = 0;
    for (uint32_t i = 1; i < s->n_spec && len + 12 < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%u", i > 1 ? "," : "", s->spec[i]);
}

/* The same pipeline (name, constants, subgroup size) created twice is listed once. */
static bool seen_before(const cvk_shader_log *log, uint32_t i) {
    for (uint32_t j = 0; j < i; j++)
        if (!strcmp(log->v[j].name, log->v[i].name) && log->v[j].n_spec == log->v[i].n_spec &&
            !memcmp(log->v[j].spec, log->v[i].spec, log->v[i].n_spec * sizeof(uint32_t)) &&
            log->v[j].required_subgroup == log->v[i].required_subgroup)
            return true;
    return false;
}

static void print_text(const cvk_device *d, const cvk_shader_log *log) {
    printf("%s (%s), compile only: %u pipelines\n", d->info.props.deviceName, d->info.driver_info, log->n);
    printf("%-18s %-26s %5s %7s %5s %5s %6s %6s %6s %7s %7s %6s %8s %s\n", "pipeline", "shape", "wg", "sg", "vgpr",
           "sgpr", "spill", "lds", "waves", "lanes", "instr", "invtp", "b128/64/32/sub", "dot4");
    for (uint32_t i = 0; i < log->n; i++) {
        if (seen_before(log, i)) continue;
        const cvk_shader_stats *s = &log->v[i];
        char shape[64], sg[16], loads[32] = "-";
        describe(s, shape, sizeof shape);
        snprintf(sg, sizeof sg, "%u%s", s->subgroup_size, s->required_subgroup ? " pin" : "");
        if (s->has_isa)
            snprintf(loads, sizeof loads, "%u/%u/%u/%u", s->loads_b128, s->loads_b64, s->loads_b32 + s->loads_b96,
                     s->loads_sub32);
        printf("%-18s %-26s %5u %7s %5lld %5lld %6lld %6lld %6lld %7lld %7lld %6lld %14s %u\n", s->name, shape,
               s->n_spec ? s->spec[0] : 0, sg, (long long)s->vgprs, (long long)s->sgprs,
               (long long)(s->spilled_vgprs + s->spilled_sgprs), (long long)s->lds_bytes, (long long)s->waves_per_simd,
               (long long)cvk_shader_lanes_per_simd(s), (long long)s->instructions, (long long)s->inv_throughput, loads,
               s->dot4);
    }
}

static json_t *stats_json(const cvk_shader_stats *s) {
    char shape[64];
    describe(s, shape, sizeof shape);
    json_t *spec = json_array();
    for (uint32_t k = 0; k < s->n_spec; k++) json_array_append_new(spec, json_integer(s->spec[k]));
    json_t *o = json_pack("{s:s, s:s, s:o, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                          "name", s->name, "shape", shape, "spec", spec, "workgroup", (int)(s->n_spec ? s->spec[0] : 0),
                          "required_subgroup", (int)s->required_subgroup, "subgroup", (int)s->subgroup_size, "vgprs",
                          (json_int_t)s->vgprs, "sgprs", (json_int_t)s->sgprs, "spilled_vgprs",
                          (json_int_t)s->spilled_vgprs, "spilled_sgprs", (json_int_t)s->spilled_sgprs, "lds_bytes",
                          (json_int_t)s->lds_bytes, "scratch_bytes", (json_int_t)s->scratch_bytes, "waves_per_simd",
                          (json_int_t)s->waves_per_simd, "lanes_per_simd", (json_int_t)cvk_shader_lanes_per_simd(s),
                          "instructions", (json_int_t)s->instructions, "code_bytes", (json_int_t)s->code_bytes,
                          "latency", (json_int_t)s->latency, "inv_throughput", (json_int_t)s->inv_throughput);
    if (s->has_isa)
        json_object_set_new(o, "loads",
                            json_pack("{s:i, s:i, s:i, s:i, s:i}", "b128", (int)s->loads_b128, "b96", (int)s->loads_b96,
                                      "b64", (int)s->loads_b64, "b32", (int)s->loads_b32, "sub32",
                                      (int)s->loads_sub32));
    json_object_set_new(o, "dot4", json_integer(s->dot4));
    json_object_set_new(o, "fma", json_integer(s->fma));
    return o;
}

static int print_json(const cvk_device *d, const cvk_shader_log *log) {
    json_t *list = json_array();
    for (uint32_t i = 0; i < log->n; i++)
        if (!seen_before(log, i)) json_array_append_new(list, stats_json(&log->v[i]));
    json_t *o = json_pack("{s:s, s:s, s:s, s:o}", "device", d->info.props.deviceName, "driver", d->info.driver_name,
                          "driver_info", d->info.driver_info, "pipelines", list);
    int rc = o && json_dumpf(o, stdout, JSON_INDENT(1)) == 0 ? 0 : -1;
    printf("\n");
    json_decref(o);
    return rc;
}

/* DIR/NN-name.s for each pipeline listed (NN its place in the table). */
static int write_isa(const char *dir, const cvk_shader_log *log) {
    if (mkdir(dir, 0755) && errno != EEXIST) return cli_error("profile", "--isa %s: %s", dir, strerror(errno)), -1;
    for (uint32_t i = 0, k = 0; i < log->n; i++) {
        if (seen_before(log, i)) continue;
        const cvk_shader_stats *s = &log->v[i];
        char path[4096];
        snprintf(path, sizeof path, "%s/%02u-%s.s", dir, k++, s->name);
        FILE *f = fopen(path, "w");
        char shape[64];
        describe(s, shape, sizeof shape);
        bool ok =
            f && fprintf(f, "; %s %s, subgroup %u\n%s", s->name, shape, s->subgroup_size, s->isa ? s->isa : "") > 0;
        if (f && fclose(f)) ok = false;
        if (!ok) return cli_error("profile", "--isa: cannot write %s: %s", path, strerror(errno)), -1;
    }
    return 0;
}

/* The integer family's kernels (runtime/vk/op_xq8.h), compiled into the log beside the plan:
 * not in the device plan yet, listed so their registers and dot4 counts can be read. */
static int xq8_pipelines(cvk_ctx *vk) {
    const enum qtype types[] = {QTYPE_Q8_0, QTYPE_Q4_K, QTYPE_Q6_K};
    cvk_pipeline p = {0};
    CD_TRY(cvk_xq8_quantize_pipeline(&p, &vk->dev, VK_NULL_HANDLE));
    cvk_pipeline_destroy(&vk->dev, &p);
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        CD_TRY(cvk_xq8_matvec_pipeline(&p, &vk->dev, VK_NULL_HANDLE, types[i], NULL));
        cvk_pipeline_destroy(&vk->dev, &p);
    }
    return 0;
}

int shader_table_run(const shader_table_opts *o, const model *m) {
    cvk_ctx *vk = calloc(1, sizeof *vk);
    if (!vk) return cli_error("profile", "out of memory");
    int rc = 1;
    if (cvk_ctx_init(vk, &(cvk_ctx_opts){.device = o->device, .compile_only = true})) {
        cli_error("profile", "%s", cd_errmsg());
        free(vk);
        return 1;
    }
    if (!vk->dev.pipeline_stats) {
        cli_error("profile",
                  "%s does not report what its compiler made (no VK_KHR_pipeline_executable_properties): "
                  "try --family gfx1100 (RADV's null device)",
                  vk->dev.info.props.deviceName);
        goto done;
    }
    if (o->family && !strstr(vk->dev.info.props.deviceName, "RADV")) {
        cli_error("profile", "--family %s: the device is %s, not RADV's", o->family, vk->dev.info.props.deviceName);
        goto done;
    }
    gpu_model g;
    gpu_model_opts go = {.n_ctx = 4096, .n_batch = 512, .max_seqs = 16, .max_out = 16};
    if (gpu_model_compile(&g, vk, m, &go)) {
        cli_error("profile", "%s", cd_errmsg());
        goto done;
    }
    if (vk->dev.info.caps.int_dot && xq8_pipelines(vk)) {
        cli_error("profile", "%s", cd_errmsg());
        gpu_model_free(&g);
        goto done;
    }
    rc = (o->json ? print_json(&vk->dev, vk->dev.shader_log) : (print_text(&vk->dev, vk->dev.shader_log), 0)) ? 1 : 0;
    if (!rc && o->isa_dir && write_isa(o->isa_dir, vk->dev.shader_log)) rc = 1;
    gpu_model_free(&g);
done:
    cvk_ctx_free(vk);
    free(vk);
    return rc;
}
