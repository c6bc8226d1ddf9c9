/* The device probes (runtime/vk/vk_probe.h) and the device card (tools/device_card.h):
 * every figure measured on this device is non-zero where the device has the feature and
 * plausible (the streaming read and the copy within 10x of a host memcpy of the same size,
 * measured here; on a CPU device such as lavapipe also no more than 10x above it); the push
 * blocks match the shaders; the card's cache round-trips exactly, a corrupt, foreign-version,
 * foreign-device or implausible file is refused and a corrupt one re-measured and rewritten;
 * overrides replace the peaks without reaching the cache; bad CLI flags fail clearly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/vk/vk_probe.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"
#include "tools/device_card.h"

static char cache_dir[4096];

static void check_push(const uint32_t *spv, size_t size, uint32_t n_bindings, const uint32_t *offs, uint32_t n,
                       uint32_t push_size) {
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(spv, size, &si), 0);
    assert_int_equal(si.n_bindings, n_bindings);
    assert_int_equal(si.n_push, n);
    for (uint32_t i = 0; i < n; i++) assert_int_equal(si.push_offset[i], offs[i]);
    assert_int_equal(si.push_size, push_size);
}

static void test_push_layouts_match_glsl(void **state) {
    (void)state;
    const uint32_t mem[] = {offsetof(cvk_probe_mem_push, n)};
    const uint32_t alu[] = {offsetof(cvk_probe_alu_push, iters), offsetof(cvk_probe_alu_push, m),
                            offsetof(cvk_probe_alu_push, c)};
    const uint32_t dot[] = {offsetof(cvk_probe_dot_push, iters), offsetof(cvk_probe_dot_push, b)};
    check_push(cinder_spv_probe_copy, cinder_spv_probe_copy_size, 2, mem, 1, sizeof(cvk_probe_mem_push));
    check_push(cinder_spv_probe_read, cinder_spv_probe_read_size, 2, mem, 1, sizeof(cvk_probe_mem_push));
    check_push(cinder_spv_probe_fma32, cinder_spv_probe_fma32_size, 1, alu, 3, sizeof(cvk_probe_alu_push));
    check_push(cinder_spv_probe_fma16, cinder_spv_probe_fma16_size, 1, alu, 3, sizeof(cvk_probe_alu_push));
    check_push(cinder_spv_probe_dot8, cinder_spv_probe_dot8_size, 1, dot, 2, sizeof(cvk_probe_dot_push));
}

/* The host's memcpy bandwidth over `bytes`, best of 3 after a warm-up: the yardstick. */
static double host_memcpy_gbps(uint64_t bytes) {
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 0;
    for (int i = 0; i < 4; i++) {
        double t0 = cd_now_ms();
        memcpy(b, a, bytes);
        double ms = cd_now_ms() - t0;
        if (i > 0 && (best == 0 || ms < best)) best = ms;
    }
    assert_int_equal(b[bytes / 2], 1);
    free(a);
    free(b);
    return (double)bytes / ((best > 0 ? best : 1e-3) * 1e6);
}

static void check_figure(const char *what, double x, bool supported) {
    if (!isfinite(x) || x < 0 || x >= 1e7 || (supported && x == 0) || (!supported && x != 0))
        fail_msg("%s = %g (%s on this device)", what, x, supported ? "supported" : "not supported");
}

/* within 100x of the host's memcpy; and on a CPU device, where device memory is host memory,
 * not more than 10x above it either. The figures catch a wrong unit or size (1,000x), not a slow
 * device: on a 2-core machine busy with a build, lavapipe's streaming read measured 13x below
 * the memcpy (0.70 vs 9.02 GB/s, 2026-11-26), where a quiet run gives ~4x. */
static void check_bandwidth(const char *what, double gbps, double host) {
    bool cpu = vk->dev.info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (gbps * 100 < host || (cpu && gbps > 10 * host))
        fail_msg("%s: %.2f GB/s, host memcpy %.2f GB/s", what, gbps, host);
}

static void check_probe(const cvk_probe *p) {
    const cvk_caps *c = &vk->dev.info.caps;
    check_figure("copy_gbps", p->copy_gbps, true);
    check_figure("read_gbps", p->read_gbps, true);
    check_figure("h2d_staged_gbps", p->h2d_staged_gbps, true);
    check_figure("d2h_staged_gbps", p->d2h_staged_gbps, true);
    check_figure("h2d_mapped_gbps", p->h2d_mapped_gbps, true);
    check_figure("d2h_mapped_gbps", p->d2h_mapped_gbps, true);
    check_figure("fp32_gflops", p->fp32_gflops, true);
    check_figure("fp16_gflops", p->fp16_gflops, c->fp16);
    check_figure("int8_gops", p->int8_gops, c->int_dot);
    assert_true(p->bytes > 0);
    assert_int_equal(p->gpu_timed, c->timestamps);
}

static void test_probe_figures(void **state) {
    (void)state;
    cvk_probe p;
    /* 32 MiB: quick; the card's tests below measure at the default size */
    cvk_probe_opts o = {.bytes = 32u << 20, .repeats = 3};
    if (cvk_probe_run(vk, &o, &p)) fail_msg("%s", cd_errmsg());
    check_probe(&p);
    assert_int_equal(p.bytes, o.bytes);
    double host = host_memcpy_gbps(p.bytes);
    fprintf(stderr,
            "probe on %s, %llu MiB: copy %.2f GB/s, read %.2f GB/s (host memcpy %.2f GB/s); staged "
            "h2d %.2f d2h %.2f, mapped h2d %.2f d2h %.2f GB/s; fp32 %.2f GFLOP/s, fp16 %.2f GFLOP/s, int8 %.2f GOP/s\n",
            vk->dev.info.props.deviceName, (unsigned long long)(p.bytes >> 20), p.copy_gbps, p.read_gbps, host,
            p.h2d_staged_gbps, p.d2h_staged_gbps, p.h2d_mapped_gbps, p.d2h_mapped_gbps, p.fp32_gflops, p.fp16_gflops,
            p.int8_gops);
    /* lavapipe shares this machine's cores with whatever else runs: one second chance, the
     * best of two runs, before a bandwidth counts as implausible */
    if (p.read_gbps * 10 < host || p.copy_gbps * 10 < host) {
        cvk_probe q;
        if (cvk_probe_memory(vk, &o, &q)) fail_msg("%s", cd_errmsg());
        p.read_gbps = fmax(p.read_gbps, q.read_gbps);
        p.copy_gbps = fmax(p.copy_gbps, q.copy_gbps);
    }
    check_bandwidth("streaming read", p.read_gbps, host);
    check_bandwidth("device copy", p.copy_gbps, host);
}

static void test_probe_bad_args(void **state) {
    (void)state;
    cvk_probe p;
    cvk_probe_opts o = {.bytes = 1000};
    assert_int_equal(cvk_probe_memory(vk, &o, &p), -1);
    assert_non_null(strstr(cd_errmsg(), "multiple of 16"));
    o.bytes = (vk->dev.info.caps.max_storage_range & ~15ull) + 16; /* more than one binding sees (NVIDIA's
                                                                     * range is 2^32 - 1: not a multiple of 16) */
    assert_int_equal(cvk_probe_memory(vk, &o, &p), -1);
    assert_non_null(strstr(cd_errmsg(), "one storage binding"));
}

/* ---- the card and its cache ---- */

static void card_path(const device_card *c, char *buf, size_t n) {
    assert_int_equal(device_card_cache_path(c, buf, n), 0);
    assert_non_null(strstr(buf, cache_dir));
    assert_non_null(strstr(buf, c->uuid));
}

static void assert_same_figures(const cvk_probe *a, const cvk_probe *b) {
    /* the JSON keeps 17 significant digits: doubles come back exactly */
    assert_true(a->copy_gbps == b->copy_gbps && a->read_gbps == b->read_gbps);
    assert_true(a->h2d_staged_gbps == b->h2d_staged_gbps && a->d2h_staged_gbps == b->d2h_staged_gbps);
    assert_true(a->h2d_mapped_gbps == b->h2d_mapped_gbps && a->d2h_mapped_gbps == b->d2h_mapped_gbps);
    assert_true(a->fp32_gflops == b->fp32_gflops && a->fp16_gflops == b->fp16_gflops && a->int8_gops == b->int8_gops);
    assert_true(a->bytes == b->bytes && a->gpu_timed == b->gpu_timed);
}

/* Rewrites the cache file with `from` replaced by `to` (the first occurrence). */
static void edit_cache(const char *path, const char *from, const char *to) {
    size_t len;
    char *s = tu_read_file(path, &len);
    assert_non_null(s);
    char *at = strstr(s, from);
    if (!at) fail_msg("'%s' not in %s", from, path);
    size_t n = strlen(s) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    assert_int_equal(tu_write_file(path, out, strlen(out)), 0);
    free(out);
    free(s);
}

static void expect_refused(const char *path, const char *reason) {
    device_card c;
    device_card_describe(&vk->dev, &c);
    assert_int_equal(device_card_load(path, &c), -1);
    if (!strstr(cd_errmsg(), reason)) fail_msg("refused for '%s', expected '%s'", cd_errmsg(), reason);
    assert_false(c.cached);
}

static void test_card_cache(void **state) {
    (void)state;
    device_card a, b;
    /* first run: measured and written */
    if (device_card_get(vk, false, &a)) fail_msg("%s", cd_errmsg());
    assert_true(a.measured);
    assert_false(a.cached);
    assert_string_equal(a.cache_note, "");
    check_probe(&a.m);
    char path[4096];
    card_path(&a, path, sizeof path);
    assert_string_equal(a.cache_path, path);
    /* second run: the same figures from the file */
    if (device_card_get(vk, false, &b)) fail_msg("%s", cd_errmsg());
    assert_true(b.cached);
    assert_same_figures(&a.m, &b.m);
    assert_string_equal(a.uuid, b.uuid);

    /* refused: another format version, another device or driver, implausible figures */
    size_t len;
    char *good = tu_read_file(path, &len);
    assert_non_null(good);
    edit_cache(path, "\"version\": 1", "\"version\": 99");
    expect_refused(path, "format version 99");
    assert_int_equal(tu_write_file(path, good, len), 0);
    edit_cache(path, a.uuid, "00112233445566778899aabbccddeeff");
    expect_refused(path, "another device or driver (uuid)");
    assert_int_equal(tu_write_file(path, good, len), 0);
    edit_cache(path, "\"read_gbps\": ", "\"read_gbps\": -");
    expect_refused(path, "implausible or missing \"read_gbps\"");
    assert_int_equal(tu_write_file(path, good, len), 0);
    edit_cache(path, "\"fp32_gflops\"", "\"fp32_gflopz\"");
    expect_refused(path, "\"fp32_gflops\"");
    free(good);

    /* corrupt: ignored, measured again, rewritten whole */
    assert_int_equal(tu_write_file(path, "{\"format\": \"cinder.dev", 22), 0);
    expect_refused(path, "not valid JSON");
    device_card c;
    if (device_card_get(vk, false, &c)) fail_msg("%s", cd_errmsg());
    assert_false(c.cached);
    assert_non_null(strstr(c.cache_note, "cache ignored: not valid JSON"));
    check_probe(&c.m);
    device_card d;
    device_card_describe(&vk->dev, &d);
    if (device_card_load(path, &d)) fail_msg("rewritten cache refused: %s", cd_errmsg());
    assert_same_figures(&c.m, &d.m);
    /* --refresh measures even with a valid file */
    if (device_card_get(vk, true, &d)) fail_msg("%s", cd_errmsg());
    assert_false(d.cached);
}

static void test_card_overrides(void **state) {
    (void)state;
    device_card c;
    if (device_card_get(vk, false, &c)) fail_msg("%s", cd_errmsg());
    assert_true(c.cached); /* written by test_card_cache */
    double read = c.m.read_gbps, fp32 = c.m.fp32_gflops;
    assert_true(device_card_peak_gbps(&c) == read);
    assert_true(device_card_peak_tflops(&c, false) == fp32 / 1e3);
    assert_true(device_card_peak_tflops(&c, true) == c.m.fp16_gflops / 1e3);
    device_card_override(&c, 1234.5, 0);
    assert_true(device_card_peak_gbps(&c) == 1234.5);
    assert_true(device_card_peak_tflops(&c, false) == fp32 / 1e3);
    device_card_override(&c, 0, 77.25);
    assert_true(device_card_peak_gbps(&c) == 1234.5);
    assert_true(device_card_peak_tflops(&c, false) == 77.25);
    assert_true(c.m.read_gbps == read && c.m.fp32_gflops == fp32); /* the measurements stay */
    json_t *j = device_card_json(&c);
    assert_non_null(j);
    assert_true(json_real_value(json_object_get(json_object_get(j, "peak"), "gbps")) == 1234.5);
    assert_true(json_real_value(json_object_get(json_object_get(j, "peak"), "fp32_tflops")) == 77.25);
    assert_true(json_real_value(json_object_get(json_object_get(j, "measured"), "read_gbps")) == read);
    json_decref(j);
    /* saving never writes the overrides */
    char path[4200];
    snprintf(path, sizeof path, "%s/overridden.json", cache_dir);
    assert_int_equal(device_card_save(path, &c), 0);
    device_card d;
    device_card_describe(&vk->dev, &d);
    assert_int_equal(device_card_load(path, &d), 0);
    assert_true(device_card_peak_gbps(&d) == read && device_card_peak_tflops(&d, false) == fp32 / 1e3);
    /* printing shows both */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    device_card_print(f, &c);
    fclose(f);
    assert_non_null(strstr(text, "(--peak-gbps)"));
    assert_non_null(strstr(text, "(--peak-tflops)"));
    assert_non_null(strstr(text, "device streaming read"));
    free(text);
}

/* Runs device_card_cli with stdout in a file; the exit status, and what it printed. */
static int run_cli(int argc, char **argv, char **out) {
    const char *file = tu_tmp_path("vk_probe_cli.out");
    fflush(stdout);
    int saved = dup(1), fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    int rc = device_card_cli(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    size_t len;
    *out = tu_read_file(file, &len);
    return rc;
}

static void test_card_cli(void **state) {
    (void)state;
    char *out;
    char *ok[] = {"profile", "--device", "--json", "--peak-gbps", "250.5", "--peak-tflops=3"};
    assert_int_equal(run_cli(6, ok, &out), 0);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    if (!j) fail_msg("not JSON (%s): %s", e.text, out);
    json_t *peak = json_object_get(j, "peak");
    assert_true(json_real_value(json_object_get(peak, "gbps")) == 250.5);
    assert_true(json_real_value(json_object_get(peak, "fp32_tflops")) == 3.0);
    assert_string_equal(json_string_value(json_object_get(peak, "gbps_source")), "--peak-gbps");
    assert_true(json_is_true(json_object_get(j, "cached")));
    assert_string_equal(json_string_value(json_object_get(j, "format")), DEVICE_CARD_FORMAT);
    assert_true(json_is_array(json_object_get(j, "memory_heaps")) &&
                json_array_size(json_object_get(j, "memory_heaps")) > 0);
    assert_true(json_is_array(json_object_get(j, "queue_families")));
    json_decref(j);
    free(out);
    char *table[] = {"profile", "--device"};
    assert_int_equal(run_cli(2, table, &out), 0);
    assert_non_null(strstr(out, "device card"));
    assert_non_null(strstr(out, "memory heaps"));
    free(out);
    /* bad flags: exit 1 before touching the device, a message naming the flag */
    char *bad[][3] = {{"profile", "--peak-gbps", "-5"},   {"profile", "--peak-gbps", "fast"},
                      {"profile", "--peak-tflops", "0"},  {"profile", "--device-index", "-1"},
                      {"profile", "--device-index", "x"}, {"profile", "--frobnicate", "1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(run_cli(3, bad[i], &out), 1);
        assert_string_equal(out, ""); /* nothing on stdout */
        free(out);
    }
    char *missing[] = {"profile", "--peak-gbps"};
    assert_int_equal(run_cli(2, missing, &out), 1);
    free(out);
}

static int group_setup(void **state) {
    /* the card's cache in a fresh scratch directory, never the user's */
    snprintf(cache_dir, sizeof cache_dir, "%s", tu_tmp_path("vk_probe_cache"));
    if (tu_remove_tree(cache_dir)) return -1;
    setenv("CINDER_CACHE_DIR", cache_dir, 1);
    /* the card is measured three times below (first run, corrupt cache, --refresh): what is
     * checked is the cache and the figures' plausibility, not the size, so a small buffer */
    device_card_set_probe(&(cvk_probe_opts){.bytes = 32u << 20, .repeats = 3});
    return vk_setup(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_layouts_match_glsl), cmocka_unit_test(test_probe_figures),
        cmocka_unit_test(test_probe_bad_args),          cmocka_unit_test(test_card_cache),
        cmocka_unit_test(test_card_overrides),          cmocka_unit_test(test_card_cli),
    };
    return tu_status(cmocka_run_group_tests(tests, group_setup, vk_teardown));
}
