#include "tools/device_card.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_pcache.h"
#include "tools/cli.h"

/* ---- what the device is ---- */

static void describe_identity(const cvk_device *d, device_card *c) {
    const cvk_phys_info *i = &d->info;
    snprintf(c->name, sizeof c->name, "%s", i->props.deviceName);
    c->type = cvk_phys_type_name(i->props.deviceType);
    c->vendor_id = i->props.vendorID;
    c->device_id = i->props.deviceID;
    snprintf(c->driver_name, sizeof c->driver_name, "%s", i->driver_name);
    snprintf(c->driver_info, sizeof c->driver_info, "%s", i->driver_info);
    c->driver_version = i->props.driverVersion;
    c->api_version = i->props.apiVersion;
    VkPhysicalDeviceIDProperties id = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id};
    vkGetPhysicalDeviceProperties2(i->phys, &p2);
    for (uint32_t k = 0; k < VK_UUID_SIZE; k++) snprintf(c->uuid + 2 * k, 3, "%02x", id.deviceUUID[k]);
}

static void describe_queues(const cvk_device *d, device_card *c) {
    uint32_t n = DEVICE_CARD_MAX_QUEUES;
    VkQueueFamilyProperties q[DEVICE_CARD_MAX_QUEUES];
    vkGetPhysicalDeviceQueueFamilyProperties(d->info.phys, &n, q); /* the first 16 at most */
    c->n_queues = n;
    for (uint32_t k = 0; k < n; k++) {
        c->queues[k] = (device_card_queue){q[k].queueCount, q[k].queueFlags, q[k].timestampValidBits};
        if ((q[k].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
            !(q[k].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)))
            c->transfer_only_family = true;
    }
}

static void describe_heaps(const cvk_device *d, device_card *c) {
    const VkPhysicalDeviceMemoryProperties *m = &d->info.mem;
    c->n_heaps = m->memoryHeapCount < DEVICE_CARD_MAX_HEAPS ? m->memoryHeapCount : DEVICE_CARD_MAX_HEAPS;
    for (uint32_t h = 0; h < c->n_heaps; h++) {
        device_card_heap *o = &c->heaps[h];
        o->size = m->memoryHeaps[h].size;
        o->device_local = m->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
        for (uint32_t t = 0; t < m->memoryTypeCount; t++)
            if (m->memoryTypes[t].heapIndex == h &&
                (m->memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
                o->host_visible = true;
    }
}

void device_card_describe(const cvk_device *d, device_card *c) {
    memset(c, 0, sizeof *c);
    describe_identity(d, c);
    const cvk_caps *k = &d->info.caps;
    c->fp16 = k->fp16;
    c->int_dot = k->int_dot;
    c->timestamps = k->timestamps;
    c->subgroup_min = k->min_subgroup_size;
    c->subgroup_max = k->max_subgroup_size;
    c->subgroup_default = k->subgroup_size;
    c->max_storage_range = k->max_storage_range;
    c->max_shared = k->max_shared;
    memcpy(c->max_wg_size, k->max_wg_size, sizeof c->max_wg_size);
    c->max_wg_invocations = k->max_wg_invocations;
    describe_queues(d, c);
    describe_heaps(d, c);
}

static cvk_probe_opts probe_opts; /* zero: the probe's defaults */

void device_card_set_probe(const cvk_probe_opts *o) { probe_opts = o ? *o : (cvk_probe_opts){0}; }

int device_card_measure(cvk_ctx *x, device_card *c) {
    device_card_describe(&x->dev, c);
    if (cvk_probe_run(x, &probe_opts, &c->m)) return -1;
    c->measured = true;
    return 0;
}

/* ---- accessors, overrides ---- */

void device_card_override(device_card *c, double peak_gbps, double peak_tflops) {
    if (peak_gbps > 0) c->peak_gbps_override = peak_gbps;
    if (peak_tflops > 0) c->peak_tflops_override = peak_tflops;
}

double device_card_peak_gbps(const device_card *c) {
    return c->peak_gbps_override > 0 ? c->peak_gbps_override : c->m.read_gbps;
}

double device_card_peak_tflops(const device_card *c, bool fp16) {
    if (fp16) return c->m.fp16_gflops / 1e3;
    return c->peak_tflops_override > 0 ? c->peak_tflops_override : c->m.fp32_gflops / 1e3;
}

/* ---- JSON ---- */

/* The measured figures by name: one table for writing, reading and printing. */
typedef struct figure {
    const char *key, *label, *unit;
    size_t off; /* of a double in cvk_probe */
    int needs;  /* 0: every device; 1: caps.fp16; 2: caps.int_dot */
} figure;

#define FIG(f, label, unit, needs)                                                                                     \
    { #f, label, unit, offsetof(cvk_probe, f), needs }
static const figure figures[] = {
    FIG(copy_gbps, "device copy (read+write)", "GB/s", 0),
    FIG(read_gbps, "device streaming read", "GB/s", 0),
    FIG(h2d_staged_gbps, "host->device, staged copy", "GB/s", 0),
    FIG(d2h_staged_gbps, "device->host, staged copy", "GB/s", 0),
    FIG(h2d_mapped_gbps, "host->device, mapped memcpy", "GB/s", 0),
    FIG(d2h_mapped_gbps, "device->host, mapped memcpy", "GB/s", 0),
    FIG(fp32_gflops, "fp32 FMA", "GFLOP/s", 0),
    FIG(fp16_gflops, "fp16 FMA", "GFLOP/s", 1),
    FIG(int8_gops, "int8 dot (dot4)", "GOP/s", 2),
};
#undef FIG
enum { N_FIGURES = sizeof figures / sizeof figures[0] };

static double *fig(cvk_probe *m, const figure *f) { return (double *)((char *)m + f->off); }
static double fig_get(const cvk_probe *m, const figure *f) { return *(const double *)((const char *)m + f->off); }
static bool fig_supported(const device_card *c, const figure *f) {
    return f->needs == 0 || (f->needs == 1 && c->fp16) || (f->needs == 2 && c->int_dot);
}

static void api_string(uint32_t v, char *buf, size_t n) {
    snprintf(buf, n, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

static json_t *identity_json(const device_card *c) {
    char api[32];
    api_string(c->api_version, api, sizeof api);
    return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:I, s:s}", "name", c->name, "type", c->type, "vendor_id",
                     (json_int_t)c->vendor_id, "device_id", (json_int_t)c->device_id, "uuid", c->uuid, "driver_name",
                     c->driver_name, "driver_info", c->driver_info, "driver_version", (json_int_t)c->driver_version,
                     "api_version", api);
}

static json_t *measured_json(const device_card *c) {
    json_t *o = json_pack("{s:I, s:b}", "bytes", (json_int_t)c->m.bytes, "gpu_timed", c->m.gpu_timed);
    for (int k = 0; o && k < N_FIGURES; k++)
        if (json_object_set_new(o, figures[k].key, json_real(fig_get(&c->m, &figures[k])))) {
            json_decref(o);
            o = NULL;
        }
    return o;
}

static json_t *limits_json(const device_card *c) {
    return json_pack("{s:{s:i, s:i, s:i}, s:I, s:I, s:[i,i,i], s:I, s:{s:b, s:b, s:b}}", "subgroup_size", "min",
                     (int)c->subgroup_min, "max", (int)c->subgroup_max, "default", (int)c->subgroup_default,
                     "max_storage_buffer_range", (json_int_t)c->max_storage_range, "max_shared_memory",
                     (json_int_t)c->max_shared, "max_workgroup_size", (int)c->max_wg_size[0], (int)c->max_wg_size[1],
                     (int)c->max_wg_size[2], "max_workgroup_invocations", (json_int_t)c->max_wg_invocations, "features",
                     "fp16", c->fp16, "int_dot", c->int_dot, "timestamps", c->timestamps);
}

static json_t *queues_json(const device_card *c) {
    json_t *a = json_array();
    for (uint32_t k = 0; a && k < c->n_queues; k++) {
        const device_card_queue *q = &c->queues[k];
        json_t *o =
            json_pack("{s:i, s:i, s:b, s:b, s:b, s:i}", "family", (int)k, "count", (int)q->count, "graphics",
                      (q->flags & VK_QUEUE_GRAPHICS_BIT) != 0, "compute", (q->flags & VK_QUEUE_COMPUTE_BIT) != 0,
                      "transfer", (q->flags & VK_QUEUE_TRANSFER_BIT) != 0, "timestamp_bits", (int)q->timestamp_bits);
        if (json_array_append_new(a, o)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *heaps_json(const device_card *c) {
    json_t *a = json_array();
    for (uint32_t k = 0; a && k < c->n_heaps; k++) {
        const device_card_heap *h = &c->heaps[k];
        json_t *o = json_pack("{s:i, s:I, s:b, s:b}", "heap", (int)k, "bytes", (json_int_t)h->size, "device_local",
                              h->device_local, "host_visible", h->host_visible);
        if (json_array_append_new(a, o)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *peak_json(const device_card *c) {
    return json_pack("{s:f, s:s, s:f, s:s, s:f}", "gbps", device_card_peak_gbps(c), "gbps_source",
                     c->peak_gbps_override > 0 ? "--peak-gbps" : "read_gbps", "fp32_tflops",
                     device_card_peak_tflops(c, false), "fp32_source",
                     c->peak_tflops_override > 0 ? "--peak-tflops" : "fp32_gflops", "fp16_tflops",
                     device_card_peak_tflops(c, true));
}

json_t *device_card_json(const device_card *c) {
    /* "o" steals each part; a NULL part (out of memory) makes json_pack fail as a whole */
    return json_pack("{s:s, s:i, s:o, s:o, s:b, s:o, s:o, s:o, s:b, s:o}", "format", DEVICE_CARD_FORMAT, "version",
                     DEVICE_CARD_VERSION, "device", identity_json(c), "measured", measured_json(c), "cached", c->cached,
                     "peak", peak_json(c), "limits", limits_json(c), "queue_families", queues_json(c),
                     "transfer_only_family", c->transfer_only_family, "memory_heaps", heaps_json(c));
}

/* ---- the cache ---- */

int device_card_cache_path(const device_card *c, char *buf, size_t n) {
    char dir[4096];
    if (cvk_cache_dir(dir, sizeof dir)) return -1;
    int w = snprintf(buf, n, "%s/device-%s-%08x.json", dir, c->uuid, c->driver_version);
    if (w < 0 || (size_t)w >= n) return cd_fail("device card cache path too long");
    return 0;
}

/* The cached identity must be this device's, field for field. */
static int check_identity(const json_t *d, const device_card *c) {
    char api[32];
    api_string(c->api_version, api, sizeof api);
    const char *s_keys[] = {"name", "uuid", "driver_name", "driver_info", "api_version"};
    const char *s_vals[] = {c->name, c->uuid, c->driver_name, c->driver_info, api};
    for (int k = 0; k < 5; k++) {
        const char *v = json_string_value(json_object_get(d, s_keys[k]));
        if (!v || strcmp(v, s_vals[k])) return cd_fail("written for another device or driver (%s)", s_keys[k]);
    }
    const char *i_keys[] = {"vendor_id", "device_id", "driver_version"};
    const uint32_t i_vals[] = {c->vendor_id, c->device_id, c->driver_version};
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(d, i_keys[k]);
        if (!json_is_integer(v) || json_integer_value(v) != (json_int_t)i_vals[k])
            return cd_fail("written for another device or driver (%s)", i_keys[k]);
    }
    return 0;
}

/* Every figure a finite number below 1e7 (10 PB/s, 10 PFLOP/s: no device is near), non-zero
 * exactly when the device has what it measures. */
static int read_measured(const json_t *o, const device_card *c, cvk_probe *m) {
    if (!json_is_object(o)) return cd_fail("no \"measured\" object");
    json_t *bytes = json_object_get(o, "bytes"), *timed = json_object_get(o, "gpu_timed");
    if (!json_is_integer(bytes) || json_integer_value(bytes) <= 0 || !json_is_boolean(timed))
        return cd_fail("\"measured\": bad \"bytes\" or \"gpu_timed\"");
    m->bytes = (uint64_t)json_integer_value(bytes);
    m->gpu_timed = json_is_true(timed);
    for (int k = 0; k < N_FIGURES; k++) {
        const figure *f = &figures[k];
        json_t *v = json_object_get(o, f->key);
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        bool want = fig_supported(c, f);
        if (!isfinite(x) || x < 0 || x >= 1e7 || (want && x == 0) || (!want && x != 0))
            return cd_fail("implausible or missing \"%s\"", f->key);
        *fig(m, f) = x;
    }
    return 0;
}

int device_card_load(const char *path, device_card *c) {
    struct stat st;
    if (stat(path, &st)) return errno == ENOENT ? cd_fail("no cached card") : cd_fail("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size > (1 << 20)) return cd_fail("not a regular file under 1 MiB");
    json_error_t e;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!j) return cd_fail("not valid JSON: %s (line %d)", e.text, e.line);
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *ver = json_object_get(j, "version");
    cvk_probe m = {0};
    int rc = -1;
    if (!fmt || strcmp(fmt, DEVICE_CARD_FORMAT)) cd_fail("not a cinder device card");
    else if (!json_is_integer(ver) || json_integer_value(ver) != DEVICE_CARD_VERSION)
        cd_fail("card format version %lld, expected %d", (long long)json_integer_value(ver), DEVICE_CARD_VERSION);
    else if (!check_identity(json_object_get(j, "device"), c) && !read_measured(json_object_get(j, "measured"), c, &m))
        rc = 0;
    json_decref(j);
    if (rc) return -1;
    c->m = m;
    c->measured = c->cached = true;
    return 0;
}

int device_card_save(const char *path, const device_card *c) {
    if (!c->measured) return cd_fail("device card: nothing measured to save");
    device_card plain = *c; /* the cache holds measurements, never the user's overrides */
    plain.peak_gbps_override = plain.peak_tflops_override = 0;
    plain.cached = false;
    json_t *j = device_card_json(&plain);
    if (!j) return cd_fail("out of memory (device card)");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = cvk_make_parent_dirs(path);
    if (!rc && json_dump_file(j, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(17)))
        rc = cd_fail("writing %s: %s", tmp, strerror(errno));
    json_decref(j);
    if (rc) {
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return cd_fail("renaming %s: %s", tmp, strerror(e));
    }
    return 0;
}

int device_card_get(cvk_ctx *x, bool refresh, device_card *c) {
    device_card_describe(&x->dev, c);
    bool have_path = device_card_cache_path(c, c->cache_path, sizeof c->cache_path) == 0;
    if (!have_path) {
        snprintf(c->cache_note, sizeof c->cache_note, "not cached: %s", cd_errmsg());
        c->cache_path[0] = 0;
    } else if (!refresh) {
        if (device_card_load(c->cache_path, c) == 0) return 0;
        if (strcmp(cd_errmsg(), "no cached card"))
            snprintf(c->cache_note, sizeof c->cache_note, "cache ignored: %s", cd_errmsg());
    }
    char note[sizeof c->cache_note], path[sizeof c->cache_path];
    memcpy(note, c->cache_note, sizeof note);
    memcpy(path, c->cache_path, sizeof path);
    if (device_card_measure(x, c)) return -1; /* describes afresh: the note and path come back below */
    memcpy(c->cache_note, note, sizeof note);
    memcpy(c->cache_path, path, sizeof path);
    if (have_path && device_card_save(path, c))
        snprintf(c->cache_note, sizeof c->cache_note, "not cached: %s", cd_errmsg());
    return 0;
}

/* ---- printing ---- */

static void print_size(FILE *out, const char *label, uint64_t bytes) {
    if (bytes >= (1ull << 30)) fprintf(out, "  %-30s %.1f GiB\n", label, (double)bytes / (1ull << 30));
    else if (bytes >= (1ull << 20)) fprintf(out, "  %-30s %.1f MiB\n", label, (double)bytes / (1ull << 20));
    else fprintf(out, "  %-30s %.1f KiB\n", label, (double)bytes / 1024);
}

static void print_identity(FILE *out, const device_card *c) {
    char api[32];
    api_string(c->api_version, api, sizeof api);
    fprintf(out, "device card\n");
    fprintf(out, "  %-30s %s (%s, %04x:%04x)\n", "device", c->name, c->type, c->vendor_id, c->device_id);
    fprintf(out, "  %-30s %s, %s (driverVersion 0x%08x)\n", "driver", c->driver_name, c->driver_info,
            c->driver_version);
    fprintf(out, "  %-30s %s\n", "device UUID", c->uuid);
    fprintf(out, "  %-30s %s\n", "Vulkan", api);
}

static void print_measured(FILE *out, const device_card *c) {
    fprintf(out, "measured%s (%.0f MiB buffers, kernels timed by %s)\n", c->cached ? ", from the cache" : "",
            (double)c->m.bytes / (1 << 20), c->m.gpu_timed ? "GPU timestamps" : "host clock");
    for (int k = 0; k < N_FIGURES; k++) {
        const figure *f = &figures[k];
        if (!fig_supported(c, f)) {
            fprintf(out, "  %-30s not supported\n", f->label);
            continue;
        }
        fprintf(out, "  %-30s %10.2f %s\n", f->label, fig_get(&c->m, f), f->unit);
    }
    fprintf(out, "peaks used by profiles\n");
    fprintf(out, "  %-30s %10.2f GB/s%s\n", "memory bandwidth", device_card_peak_gbps(c),
            c->peak_gbps_override > 0 ? " (--peak-gbps)" : " (streaming read)");
    fprintf(out, "  %-30s %10.4f TFLOP/s%s\n", "fp32", device_card_peak_tflops(c, false),
            c->peak_tflops_override > 0 ? " (--peak-tflops)" : " (fp32 FMA)");
    if (c->fp16) fprintf(out, "  %-30s %10.4f TFLOP/s (fp16 FMA)\n", "fp16", device_card_peak_tflops(c, true));
}

static void print_limits(FILE *out, const device_card *c) {
    fprintf(out, "limits\n");
    fprintf(out, "  %-30s %u (min %u, max %u)\n", "subgroup size", c->subgroup_default, c->subgroup_min,
            c->subgroup_max);
    print_size(out, "max storage buffer range", c->max_storage_range);
    print_size(out, "max shared memory", c->max_shared);
    fprintf(out, "  %-30s %u x %u x %u, %u invocations\n", "max workgroup", c->max_wg_size[0], c->max_wg_size[1],
            c->max_wg_size[2], c->max_wg_invocations);
    fprintf(out, "  %-30s fp16 %s, int8 dot %s, timestamps %s\n", "features", c->fp16 ? "yes" : "no",
            c->int_dot ? "yes" : "no", c->timestamps ? "yes" : "no");
}

static void print_queues_heaps(FILE *out, const device_card *c) {
    fprintf(out, "queue families%s\n",
            c->transfer_only_family ? " (a transfer-only family: uploads overlap compute)"
                                    : " (no transfer-only family)");
    for (uint32_t k = 0; k < c->n_queues; k++) {
        const device_card_queue *q = &c->queues[k];
        char label[32];
        snprintf(label, sizeof label, "family %u", k);
        fprintf(out, "  %-30s %u queue%s:%s%s%s, timestamps %s\n", label, q->count, q->count == 1 ? "" : "s",
                q->flags & VK_QUEUE_GRAPHICS_BIT ? " graphics" : "", q->flags & VK_QUEUE_COMPUTE_BIT ? " compute" : "",
                q->flags & VK_QUEUE_TRANSFER_BIT ? " transfer" : "", q->timestamp_bits ? "yes" : "no");
    }
    fprintf(out, "memory heaps\n");
    for (uint32_t k = 0; k < c->n_heaps; k++) {
        const device_card_heap *h = &c->heaps[k];
        char label[32];
        snprintf(label, sizeof label, "heap %u", k);
        fprintf(out, "  %-30s %.1f GiB%s%s\n", label, (double)h->size / (1ull << 30),
                h->device_local ? ", device-local" : "", h->host_visible ? ", host-visible" : "");
    }
}

void device_card_print(FILE *out, const device_card *c) {
    print_identity(out, c);
    if (c->measured) print_measured(out, c);
    print_limits(out, c);
    print_queues_heaps(out, c);
}

/* ---- cinder profile --device ---- */

typedef struct card_opts {
    bool json, refresh;
    float peak_gbps, peak_tflops;
    int32_t device;
} card_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder profile --device [--json] [--refresh] [--peak-gbps X] [--peak-tflops Y] [--device-index N]\n"
            "  the device card: identity, limits, subgroup sizes, queues and memory heaps, and what the\n"
            "  device achieves (docs/PROFILE.md): device copy and streaming-read bandwidth, host<->device\n"
            "  transfers (staged copy and mapped memcpy), the fp32 and fp16 FMA and int8-dot rates.\n"
            "  Measured once per device and driver, then read from the cache (device-*.json in the\n"
            "  pipeline cache's directory: $CINDER_CACHE_DIR, $XDG_CACHE_HOME/cinder or ~/.cache/cinder);\n"
            "  --refresh measures again. --peak-gbps / --peak-tflops replace the measured peak read\n"
            "  bandwidth (GB/s) and fp32 rate (TFLOP/s) that profiles compare against (not cached).\n"
            "  --device-index N picks the Vulkan device (default: CINDER_DEVICE, then the automatic\n"
            "  choice). --json prints one object.\n");
}

static int parse_peak(const char *opt, const char *v, float *out) {
    if (cli_f32(opt, v, out)) return -1;
    if (!(*out > 0)) return cli_error("profile", "%s must be a positive number, not '%s'", opt, v), -1;
    return 0;
}

/* 0 ok, 1 bad flags (after a message), -2 --help printed */
static int parse(int argc, char **argv, card_opts *o) {
    *o = (card_opts){.device = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_flag(argv, i, "--help") || cli_flag(argv, i, "-h")) {
            usage(stdout);
            return -2;
        }
        if (cli_flag(argv, i, "--device")) continue;
        if (cli_flag(argv, i, "--json")) {
            o->json = true;
            continue;
        }
        if (cli_flag(argv, i, "--refresh")) {
            o->refresh = true;
            continue;
        }
        if (cli_value(argc, argv, &i, "--peak-gbps", &v)) {
            if (parse_peak("--peak-gbps", v, &o->peak_gbps)) return 1;
        } else if (cli_value(argc, argv, &i, "--peak-tflops", &v)) {
            if (parse_peak("--peak-tflops", v, &o->peak_tflops)) return 1;
        } else if (cli_value(argc, argv, &i, "--device-index", &v)) {
            if (cli_i32("--device-index", v, &o->device)) return 1;
            if (o->device < 0) return cli_error("profile", "--device-index must be 0 or more, not %d", o->device);
        } else return cli_unknown("profile", a);
    }
    return 0;
}

static int emit(const card_opts *o, const device_card *c) {
    if (c->cache_note[0]) fprintf(stderr, "cinder profile: %s\n", c->cache_note);
    if (!o->json) {
        device_card_print(stdout, c);
        return 0;
    }
    json_t *j = device_card_json(c);
    if (!j) return cli_error("profile", "out of memory");
    int rc = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(j);
    fputc('\n', stdout);
    return rc ? cli_error("profile", "cannot write the JSON") : 0;
}

int device_card_cli(int argc, char **argv) {
    card_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == -2 ? 0 : rc;
    cvk_ctx *vk = calloc(1, sizeof *vk);
    if (!vk) return cli_error("profile", "out of memory");
    cvk_ctx_opts co = {.device = o.device, .pipeline_cache = ""};
    device_card card;
    if (cvk_ctx_init(vk, &co)) {
        free(vk);
        return cli_error("profile", "%s", cd_errmsg());
    }
    if (device_card_get(vk, o.refresh, &card)) rc = cli_error("profile", "%s", cd_errmsg());
    else if (!card.cached) cvk_pcache_save(&vk->pcache); /* new pipelines compiled; a failed save costs only time */
    cvk_ctx_free(vk);
    free(vk);
    if (rc) return rc;
    device_card_override(&card, o.peak_gbps, o.peak_tflops);
    return emit(&o, &card);
}
