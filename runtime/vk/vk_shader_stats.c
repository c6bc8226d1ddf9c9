#include "runtime/vk/vk_shader_stats.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"

static int64_t stat_value(const VkPipelineExecutableStatisticKHR *st) {
    switch (st->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: return st->value.b32;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: return st->value.i64;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: return (int64_t)st->value.u64;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: return (int64_t)st->value.f64;
    default: return -1;
    }
}

/* RADV's statistic names (radv_pipeline.c, aco_statistics). */
static void take_stat(cvk_shader_stats *s, const char *name, int64_t v) {
    static const struct {
        const char *name;
        size_t off;
    } map[] = {
        {"VGPRs", offsetof(cvk_shader_stats, vgprs)},
        {"SGPRs", offsetof(cvk_shader_stats, sgprs)},
        {"Spilled VGPRs", offsetof(cvk_shader_stats, spilled_vgprs)},
        {"Spilled SGPRs", offsetof(cvk_shader_stats, spilled_sgprs)},
        {"LDS size", offsetof(cvk_shader_stats, lds_bytes)},
        {"Scratch size", offsetof(cvk_shader_stats, scratch_bytes)},
        {"Subgroups per SIMD", offsetof(cvk_shader_stats, waves_per_simd)},
        {"Instructions", offsetof(cvk_shader_stats, instructions)},
        {"Code size", offsetof(cvk_shader_stats, code_bytes)},
        {"Latency", offsetof(cvk_shader_stats, latency)},
        {"Inverse Throughput", offsetof(cvk_shader_stats, inv_throughput)},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(name, map[i].name)) *(int64_t *)((char *)s + map[i].off) = v;
}

static int read_statistics(const cvk_device *d, const VkPipelineExecutableInfoKHR *ei, cvk_shader_stats *s) {
    uint32_t n = 0;
    if (CVK_CHECK(vkGetPipelineExecutableStatisticsKHR(d->dev, ei, &n, NULL))) return -1;
    VkPipelineExecutableStatisticKHR *st = calloc(n ? n : 1, sizeof *st);
    if (!st) return cd_fail("out of memory");
    for (uint32_t i = 0; i < n; i++) st[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
    int rc = CVK_CHECK(vkGetPipelineExecutableStatisticsKHR(d->dev, ei, &n, st));
    for (uint32_t i = 0; !rc && i < n; i++) take_stat(s, st[i].name, stat_value(&st[i]));
    free(st);
    return rc;
}

/* The disassembly, when the driver gives one ("Assembly" on RADV): loads and dot products. */
static int read_isa(const cvk_device *d, const VkPipelineExecutableInfoKHR *ei, cvk_shader_stats *s) {
    uint32_t n = 0;
    if (CVK_CHECK(vkGetPipelineExecutableInternalRepresentationsKHR(d->dev, ei, &n, NULL))) return -1;
    VkPipelineExecutableInternalRepresentationKHR *ir = calloc(n ? n : 1, sizeof *ir);
    if (!ir) return cd_fail("out of memory");
    for (uint32_t i = 0; i < n; i++) ir[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR;
    int rc = CVK_CHECK(vkGetPipelineExecutableInternalRepresentationsKHR(d->dev, ei, &n, ir));
    for (uint32_t i = 0; !rc && i < n; i++) {
        if (!ir[i].isText || !strstr(ir[i].name, "Assembly")) continue;
        char *text = malloc(ir[i].dataSize + 1);
        if (!text) {
            rc = cd_fail("out of memory");
            break;
        }
        ir[i].pData = text;
        VkResult r = vkGetPipelineExecutableInternalRepresentationsKHR(d->dev, ei, &n, ir);
        ir[i].pData = NULL;
        if (r == VK_SUCCESS || r == VK_INCOMPLETE) {
            text[ir[i].dataSize] = 0;
            cvk_shader_count_isa(text, s);
            s->has_isa = true;
            s->isa = text;
        } else {
            free(text);
        }
        break;
    }
    free(ir);
    return rc;
}

int cvk_shader_stats_read(const cvk_device *d, const cvk_pipeline *p, cvk_shader_stats *s) {
    memset(s, 0, sizeof *s);
    int64_t *f[] = {&s->vgprs,      &s->sgprs,         &s->spilled_vgprs,  &s->spilled_sgprs,
                    &s->lds_bytes,  &s->scratch_bytes, &s->waves_per_simd, &s->instructions,
                    &s->code_bytes, &s->latency,       &s->inv_throughput};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = -1;
    snprintf(s->name, sizeof s->name, "%s", p->name);
    s->n_spec = p->n_spec;
    memcpy(s->spec, p->spec, sizeof s->spec);
    s->required_subgroup = p->subgroup_size;
    if (!d->pipeline_stats) return cd_fail("the device does not report pipeline statistics");
    VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = p->pipe};
    uint32_t n = 0;
    if (CVK_CHECK(vkGetPipelineExecutablePropertiesKHR(d->dev, &pi, &n, NULL))) return -1;
    if (n == 0) return cd_fail("pipeline %s has no executable", p->name);
    VkPipelineExecutablePropertiesKHR props[4];
    if (n > 4) n = 4;
    for (uint32_t i = 0; i < n; i++)
        props[i] = (VkPipelineExecutablePropertiesKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR};
    VkResult r = vkGetPipelineExecutablePropertiesKHR(d->dev, &pi, &n, props);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE && CVK_CHECK(r)) return -1;
    s->subgroup_size = props[0].subgroupSize;
    VkPipelineExecutableInfoKHR ei = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = p->pipe, .executableIndex = 0};
    if (read_statistics(d, &ei, s) || read_isa(d, &ei, s)) return cd_fail_ctx("pipeline %s: ", p->name), -1;
    return 0;
}

int cvk_shader_log_add(cvk_shader_log *log, const cvk_device *d, const cvk_pipeline *p) {
    if (log->n == log->cap) {
        uint32_t cap = log->cap ? 2 * log->cap : 32;
        cvk_shader_stats *v = realloc(log->v, cap * sizeof *v);
        if (!v) return cd_fail("out of memory");
        log->v = v, log->cap = cap;
    }
    if (cvk_shader_stats_read(d, p, &log->v[log->n])) return -1;
    log->n++;
    return 0;
}

void cvk_shader_log_free(cvk_shader_log *log) {
    for (uint32_t i = 0; i < log->n; i++) free(log->v[i].isa);
    free(log->v);
    memset(log, 0, sizeof *log);
}

int64_t cvk_shader_lanes_per_simd(const cvk_shader_stats *s) {
    if (s->waves_per_simd < 0 || !s->subgroup_size) return -1;
    uint32_t wg = s->n_spec ? s->spec[0] : s->subgroup_size;
    uint32_t filled = wg < s->subgroup_size ? wg : s->subgroup_size;
    return s->waves_per_simd * filled;
}

/* The width in bits of a load mnemonic's data, 0 when it is no vector memory load:
 * buffer_load_dword[xN], global_load_dword[xN] (gfx10), buffer_load_b32..b128 (gfx11), the
 * sub-dword forms (ubyte, sbyte, ushort, sshort, u8, i8, u16, i16, d16) as 16. */
static unsigned load_bits(const char *m, size_t len) {
    static const char *kinds[] = {"buffer_load_", "global_load_", "flat_load_", "scratch_load_"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t kl = strlen(kinds[k]);
        if (len <= kl || strncmp(m, kinds[k], kl)) continue;
        const char *w = m + kl;
        size_t wl = len - kl;
        if (wl >= 5 && !strncmp(w, "dword", 5)) {
            if (wl == 5) return 32;
            if (wl == 7 && w[5] == 'x' && w[6] >= '2' && w[6] <= '4') return 32u * (unsigned)(w[6] - '0');
            return 0;
        }
        if (w[0] == 'b' && wl >= 3 && isdigit((unsigned char)w[1])) {
            unsigned bits = (unsigned)strtoul(w + 1, NULL, 10);
            return bits == 32 || bits == 64 || bits == 96 || bits == 128 ? bits : 0;
        }
        return 16; /* ubyte, ushort, u8, d16_..., format loads */
    }
    return 0;
}

void cvk_shader_count_isa(const char *isa, cvk_shader_stats *s) {
    for (const char *line = isa; *line;) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        const char *m = line;
        while (m < end && isspace((unsigned char)*m)) m++;
        size_t len = 0;
        while (m + len < end && (isalnum((unsigned char)m[len]) || m[len] == '_')) len++;
        switch (load_bits(m, len)) {
        case 16: s->loads_sub32++; break;
        case 32: s->loads_b32++; break;
        case 64: s->loads_b64++; break;
        case 96: s->loads_b96++; break;
        case 128: s->loads_b128++; break;
        default: break;
        }
        if (len >= 6 && !strncmp(m, "v_dot4", 6)) s->dot4++;
        if ((len >= 5 && !strncmp(m, "v_fma", 5)) || (len >= 8 && !strncmp(m, "v_pk_fma", 8))) s->fma++;
        line = *end ? end + 1 : end;
    }
}
