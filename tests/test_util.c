#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *tu_source_dir(void) {
    const char *s = getenv("CINDER_SOURCE_DIR");
    return s ? s : ".";
}

const char *tu_tmp_dir(void) {
    const char *s = getenv("CINDER_TEST_TMP");
    return s ? s : "/tmp";
}

static const char *rotate(const char *a, const char *b) {
    static _Thread_local char bufs[8][4096];
    static _Thread_local int i;
    char *p = bufs[i++ & 7];
    snprintf(p, 4096, "%s/%s", a, b);
    return p;
}

const char *tu_src_path(const char *rel) { return rotate(tu_source_dir(), rel); }
const char *tu_tmp_path(const char *rel) { return rotate(tu_tmp_dir(), rel); }

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; if (len) *len = (size_t)n; }
    return buf;
}

double tu_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#include "runtime/base/error.h"

const char *tu_make_model(const char *file, const char *preset, const char *quant, uint64_t seed,
                          void (*tweak)(synth_spec *)) {
    synth_spec s;
    if (synth_preset(preset, &s)) { fprintf(stderr, "%s\n", cd_errmsg()); abort(); }
    if (quant && synth_quant_from_name(quant, &s.quant)) { fprintf(stderr, "%s\n", cd_errmsg()); abort(); }
    s.seed = seed;
    if (tweak) tweak(&s);
    const char *path = tu_tmp_path(file);
    if (synth_write(&s, path, NULL, NULL)) {
        fprintf(stderr, "tu_make_model: %s\n", cd_errmsg());
        abort();
    }
    return path;
}
