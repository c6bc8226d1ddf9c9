#include "tools/cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "runtime/base/error.h"
#include "runtime/model/synth.h"

bool cli_value(int argc, char **argv, int *i, const char *name, const char **value) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n)) return false;
    if (a[n] == '=') {
        *value = a + n + 1;
        return true;
    }
    if (a[n] != 0) return false;
    if (*i + 1 >= argc) {
        *value = NULL;
        return true;
    }
    *value = argv[++*i];
    return true;
}

bool cli_flag(char **argv, int i, const char *name) { return !strcmp(argv[i], name); }

int cli_u64(const char *opt, const char *s, uint64_t *out) {
    if (!s) return fprintf(stderr, "cinder: %s needs a value\n", opt), -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return fprintf(stderr, "cinder: %s: '%s' is not a non-negative integer\n", opt, s), -1;
    *out = v;
    return 0;
}

int cli_u32(const char *opt, const char *s, uint32_t *out) {
    uint64_t v;
    if (cli_u64(opt, s, &v)) return -1;
    if (v > UINT32_MAX) return fprintf(stderr, "cinder: %s: %s is too large\n", opt, s), -1;
    *out = (uint32_t)v;
    return 0;
}

int cli_cache_dir_max_mb(const char *cmd, const char *s, uint32_t *mb) {
    if (cli_u32("--cache-dir-max-mb", s, mb)) return -1;
    if (!*mb)
        return cli_error(cmd,
                         "--cache-dir-max-mb 0: the disk tier's budget is at least 1 MiB (there is no unlimited "
                         "budget); leave the flag out for the default (10%% of the file system's free space at start, "
                         "at least 256 MiB), or leave out --cache-dir for no disk tier"),
               -1;
    return 0;
}

int cli_auto_on_off(const char *cmd, const char *flag, const char *s, int *out) {
    if (!strcmp(s, "auto")) *out = 0;
    else if (!strcmp(s, "on")) *out = 1;
    else if (!strcmp(s, "off")) *out = -1;
    else return cli_error(cmd, "%s %s: auto, on or off", flag, s), -1;
    return 0;
}

int cli_i32(const char *opt, const char *s, int32_t *out) {
    if (!s) return fprintf(stderr, "cinder: %s needs a value\n", opt), -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < INT32_MIN || v > INT32_MAX)
        return fprintf(stderr, "cinder: %s: '%s' is not an integer\n", opt, s), -1;
    *out = (int32_t)v;
    return 0;
}

int cli_f32(const char *opt, const char *s, float *out) {
    if (!s) return fprintf(stderr, "cinder: %s needs a value\n", opt), -1;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return fprintf(stderr, "cinder: %s: '%s' is not a number\n", opt, s), -1;
    *out = v;
    return 0;
}

int cli_u32s(const char *cmd, const char *opt, const char *s, uint32_t *out, size_t n) {
    if (!s) return cli_error(cmd, "%s needs a value", opt), -1;
    const char *p = s;
    for (size_t k = 0; k < n; k++) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || end == p || *p == '-' || *p == '+' || v > UINT32_MAX || (k + 1 < n ? *end != ',' : *end))
            return cli_error(cmd, "%s %s: %zu comma-separated numbers", opt, s, n), -1;
        out[k] = (uint32_t)v;
        p = end + 1;
    }
    return 0;
}

int cli_ids(const char *opt, const char *s, int32_t **ids, size_t *n) {
    if (!s) return fprintf(stderr, "cinder: %s needs a value\n", opt), -1;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) return fprintf(stderr, "cinder: out of memory\n"), -1;
    size_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return fprintf(stderr, "cinder: %s: '%s' is not a comma-separated list of token ids\n", opt, s), -1;
        }
        out[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(out);
        return fprintf(stderr, "cinder: %s: empty token list\n", opt), -1;
    }
    *ids = out;
    *n = k;
    return 0;
}

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cinder %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_unknown(const char *cmd, const char *arg) {
    return cli_error(cmd, "unknown option '%s' (see 'cinder %s --help')", arg, cmd);
}

const char *cli_default_model(void) {
    const char *env = getenv("CINDER_MODEL");
    return env ? env : CINDER_SOURCE_DIR "/models/small-q4_k_m.gguf";
}

static void progress_line(void *user, uint64_t done, uint64_t total) {
    (void)user;
    fprintf(stderr, "\rcinder: writing the default model: %3.0f%%", total ? 100.0 * done / total : 100.0);
    if (done == total) fputc('\n', stderr);
}

int cli_ensure_default_model(void) {
    const char *path = cli_default_model();
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        mkdir(dir, 0755);
    }
    synth_spec spec;
    synth_preset("small", &spec);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    spec.n_threads = cores > 0 ? (int)cores : 1;
    fprintf(stderr, "cinder: generating the default model (preset small, q4_k_m) at %s\n", path);
    if (synth_write(&spec, path, isatty(2) ? progress_line : NULL, NULL))
        return fprintf(stderr, "cinder: %s\n", cd_errmsg()), -1;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, uint32_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int cli_memory(int argc, char **argv, int *i, engine_opts *eo) {
    const char *v = NULL;
    if (cli_flag(argv, *i, "--cpu-moe")) {
        eo->host_expert_layers = UINT32_MAX, eo->host_experts_fixed = true;
        return 1;
    }
    if (cli_value(argc, argv, i, "--n-cpu-moe", &v)) {
        if (!v) return fprintf(stderr, "cinder: --n-cpu-moe needs a value\n"), -1;
        if (cli_u32("--n-cpu-moe", v, &eo->host_expert_layers)) return -1;
        eo->host_experts_fixed = true;
        return 1;
    }
    if (cli_value(argc, argv, i, "--device-memory-mb", &v)) {
        if (!v) return fprintf(stderr, "cinder: --device-memory-mb needs a value\n"), -1;
        return cli_u32("--device-memory-mb", v, &eo->device_memory_mb) ? -1 : 1;
    }
    return 0;
}

int cli_rope(int argc, char **argv, int *i, rope_override *o) {
    const char *v = NULL;
    if (cli_value(argc, argv, i, "--rope-scaling", &v)) {
        enum rope_scaling type;
        if (!v) return fprintf(stderr, "cinder: --rope-scaling needs a value\n"), -1;
        if (rope_scaling_parse(v, strlen(v), &type))
            return fprintf(stderr, "cinder: --rope-scaling: %s\n", cd_errmsg()), -1;
        o->scaling = v;
        return 1;
    }
    if (cli_value(argc, argv, i, "--rope-scale", &v)) {
        if (cli_f32("--rope-scale", v, &o->factor)) return -1;
        if (!(o->factor > 0)) return fprintf(stderr, "cinder: --rope-scale: %s must be positive\n", v), -1;
        return 1;
    }
    if (cli_value(argc, argv, i, "--yarn-orig-ctx", &v)) {
        if (cli_u32("--yarn-orig-ctx", v, &o->orig_ctx)) return -1;
        if (!o->orig_ctx) return fprintf(stderr, "cinder: --yarn-orig-ctx must be at least 1\n"), -1;
        return 1;
    }
    if (cli_value(argc, argv, i, "--rope-freq-base", &v)) {
        if (cli_f32("--rope-freq-base", v, &o->freq_base)) return -1;
        if (!(o->freq_base > 0)) return fprintf(stderr, "cinder: --rope-freq-base: %s must be positive\n", v), -1;
        return 1;
    }
    return 0;
}
