#include "runtime/model/rope.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"

static const char *const names[] = {
    [ROPE_SCALING_NONE] = "none", [ROPE_SCALING_LINEAR] = "linear", [ROPE_SCALING_YARN] = "yarn"};

const char *rope_scaling_name(enum rope_scaling s) { return names[s]; }

int rope_scaling_parse(const char *name, size_t len, enum rope_scaling *out) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == len && !memcmp(names[i], name, len)) {
            *out = (enum rope_scaling)i;
            return 0;
        }
    return cd_fail("RoPE scaling '%.*s' is not supported (cinder runs none, linear and yarn)", (int)len, name);
}

/* YaRN's and llama.cpp's defaults for a scaling type. */
static void set_defaults(rope_config *r) {
    r->ext_factor = r->scaling == ROPE_SCALING_YARN ? 1.0f : 0.0f;
    r->beta_fast = 32.0f;
    r->beta_slow = 1.0f;
    if (r->scaling == ROPE_SCALING_NONE) r->factor = 1.0f; /* llama.cpp: never scale with none */
}

rope_config rope_config_plain(float freq_base, uint32_t n_ctx_train) {
    rope_config r = {.scaling = ROPE_SCALING_NONE, .freq_base = freq_base, .orig_ctx = n_ctx_train, .attn_factor = 1};
    set_defaults(&r);
    return r;
}

rope_config rope_config_yarn(float freq_base, float factor, uint32_t orig_ctx) {
    rope_config r = {
        .scaling = ROPE_SCALING_YARN, .freq_base = freq_base, .factor = factor, .orig_ctx = orig_ctx, .attn_factor = 1};
    set_defaults(&r);
    return r;
}

static int read_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, int *found) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    *found = gguf_find_kv(f, key) != NULL;
    return *found ? gguf_get_f32(f, key, out) : 0;
}

int rope_config_read(const gguf_file *f, const char *arch, uint32_t n_ctx_train, rope_config *r) {
    *r = (rope_config){.scaling = ROPE_SCALING_LINEAR,
                       .freq_base = 10000.0f,
                       .factor = 0.0f,
                       .orig_ctx = n_ctx_train,
                       .attn_factor = 1.0f};
    char key[128];
    int found;
    if (read_f32(f, arch, "rope.freq_base", &r->freq_base, &found)) return -1;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find_kv(f, key)) { /* absent: llama.cpp's "linear", a no-op without a factor */
        gguf_str type;
        if (gguf_get_str(f, key, &type) || rope_scaling_parse(type.ptr, (size_t)type.len, &r->scaling)) return -1;
    }
    if (read_f32(f, arch, "rope.scaling.factor", &r->factor, &found)) return -1;
    if (!found && read_f32(f, arch, "rope.scale_linear", &r->factor, &found)) return -1;
    if (r->factor == 0.0f) r->factor = 1.0f; /* llama.cpp: 0 or absent is no scaling */
    if (r->scaling == ROPE_SCALING_LINEAR && r->factor == 1.0f) r->scaling = ROPE_SCALING_NONE;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if (gguf_find_kv(f, key) && gguf_get_u32(f, key, &r->orig_ctx)) return -1;
    if (read_f32(f, arch, "rope.scaling.attn_factor", &r->attn_factor, &found)) return -1;
    set_defaults(r);
    return rope_config_check(r);
}

int rope_config_override(rope_config *r, const rope_override *o, uint32_t *n_ctx_train) {
    float file_factor = r->factor;
    enum rope_scaling file_scaling = r->scaling;
    if (o->scaling && rope_scaling_parse(o->scaling, strlen(o->scaling), &r->scaling))
        return cd_fail_ctx("--rope-scaling: ");
    if (o->factor != 0.0f) r->factor = o->factor;
    /* --rope-scale alone on a file without scaling is linear, as llama.cpp reads such a file */
    if (o->factor != 0.0f && !o->scaling && r->scaling == ROPE_SCALING_NONE) r->scaling = ROPE_SCALING_LINEAR;
    if (o->orig_ctx) r->orig_ctx = o->orig_ctx;
    if (o->freq_base != 0.0f) r->freq_base = o->freq_base;
    if (r->scaling != file_scaling || r->scaling == ROPE_SCALING_NONE) set_defaults(r);
    if (rope_config_check(r)) return -1;
    bool changed = r->scaling != file_scaling || r->factor != file_factor;
    if (changed && r->scaling != ROPE_SCALING_NONE) {
        double n = (double)r->orig_ctx * r->factor;
        *n_ctx_train = n >= UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    }
    return 0;
}

int rope_config_check(const rope_config *r) {
    if (!(r->freq_base > 0) || !isfinite(r->freq_base))
        return cd_fail("rope.freq_base %g must be positive", r->freq_base);
    if (!(r->factor > 0) || !isfinite(r->factor) || r->factor > 1024)
        return cd_fail("rope.scaling.factor %g must be in (0, 1024]", r->factor);
    if (r->scaling == ROPE_SCALING_YARN && r->factor < 1)
        return cd_fail("rope.scaling.factor %g: YaRN extends the context, its factor must be at least 1", r->factor);
    if (r->scaling == ROPE_SCALING_YARN && r->orig_ctx == 0)
        return cd_fail("rope.scaling.original_context_length is 0: YaRN needs the context it extends");
    if (!(r->attn_factor > 0) || !isfinite(r->attn_factor))
        return cd_fail("rope.scaling.attn_factor %g must be positive", r->attn_factor);
    return 0;
}

/* The pair index where pairs turn n_rot times over the original context: computed in float,
 * as ggml does, so that its floor and ceil fall on the same integers as llama.cpp's. */
static float corr_dim(uint32_t d, uint32_t orig_ctx, float n_rot, float base) {
    return (float)d * logf((float)orig_ctx / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

/* YaRN's share of the extrapolated frequency for pair i: 1 below lo, 0 above hi. */
static double yarn_mix(const rope_config *r, uint32_t d, uint32_t i) {
    float lo = floorf(corr_dim(d, r->orig_ctx, r->beta_fast, r->freq_base));
    float hi = ceilf(corr_dim(d, r->orig_ctx, r->beta_slow, r->freq_base));
    lo = lo > 0 ? lo : 0;
    hi = hi < (float)(d - 1) ? hi : (float)(d - 1);
    double y = ((double)i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
    y = y < 0 ? 0 : y > 1 ? 1 : y;
    return (1 - y) * r->ext_factor;
}

void rope_freqs(const rope_config *r, uint32_t d, double *freq, double *mscale) {
    double scale = r->scaling == ROPE_SCALING_NONE ? 1.0 : 1.0 / r->factor; /* llama.cpp's freq_scale */
    *mscale = r->attn_factor;
    if (r->ext_factor != 0) *mscale *= 1.0 + 0.1 * log(r->factor);
    for (uint32_t i = 0; i < d / 2; i++) {
        double f0 = pow((double)r->freq_base, -2.0 * i / d);
        double mix = r->ext_factor != 0 ? yarn_mix(r, d, i) : 0.0;
        freq[i] = f0 * (scale * (1 - mix) + mix);
    }
}

void rope_describe(const rope_config *r, char *out, size_t cap) {
    int n = snprintf(out, cap, "%s", rope_scaling_name(r->scaling));
    if (r->scaling != ROPE_SCALING_NONE && n >= 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - n, ", factor %g", r->factor);
    if (r->scaling == ROPE_SCALING_YARN && n >= 0 && (size_t)n < cap) {
        double f[1], ms;
        rope_freqs(r, 2, f, &ms);
        n += snprintf(out + n, cap - n, ", original context %u, attention factor %.4f", r->orig_ctx, ms);
    }
    if (r->attn_factor != 1.0f && r->scaling != ROPE_SCALING_YARN && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - n, ", attention factor %g", r->attn_factor);
}
