/* The Vulkan foundation on a real device (lavapipe in CI): device choice rules and creation,
 * a clean error with no driver at all, the big-buffer split (plan and data through several
 * parts, staged and direct), block suballocation, pipeline creation checks, the on-disk
 * pipeline cache (round trip, corrupt and foreign files ignored), and timestamps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/vk/op_eltwise.h"
#include "runtime/vk/op_moe_combine.h"
#include "runtime/vk/op_rmsnorm.h"
#include "runtime/vk/vk_barrier.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_spirv.h"
#include "shaders/shaders.h"
#include "tests/test_util.h"
#include "tests/vk_fixture.h"

/* --- no driver: a clean error, in a child so the environment change stays there --- */

static void test_no_driver_is_a_clean_error(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json", 1);
        setenv("VK_DRIVER_FILES", "/nonexistent/icd.json", 1);
        cvk_device d;
        int ok = cvk_device_init(&d, -1) == -1 && strstr(cd_errmsg(), "no Vulkan") != NULL;
        if (!ok) fprintf(stderr, "child: %s\n", cd_errmsg());
        FILE *f = tmpfile();
        ok = ok && f && cvk_print_devices(f, -1) == -1;
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* --- validation: required when asked for, and a message fails the run (children again) --- */

static int child_status(pid_t pid) {
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_validation_is_required(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("CINDER_VK_VALIDATION", "1", 1);
        setenv("VK_LAYER_PATH", "/nonexistent", 1); /* the loader finds no explicit layer */
        cvk_device d;
        int ok = cvk_device_init(&d, -1) == -1 && strstr(cd_errmsg(), "vulkan-validationlayers") != NULL;
        if (!ok) fprintf(stderr, "child: %s\n", cd_errmsg());
        _exit(ok ? 0 : 1);
    }
    assert_int_equal(child_status(pid), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("CINDER_VK_VALIDATION", "on", 1);
        cvk_device d;
        _exit(cvk_device_init(&d, -1) == -1 && strstr(cd_errmsg(), "expected 0, 1 or sync") ? 0 : 1);
    }
    assert_int_equal(child_status(pid), 0);
}

/* A buffer of size 0 breaks VUID-VkBufferCreateInfo-size-00912: the layer reports it, the count
 * goes up and tu_status turns a run with no failed test into a failure. */
static void test_validation_message_fails(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("CINDER_VK_VALIDATION", "1", 1);
        cvk_device d;
        if (cvk_device_init(&d, -1)) {
            fprintf(stderr, "child: %s\n", cd_errmsg());
            _exit(2);
        }
        VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                 .size = 0,
                                 .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                 .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
        VkBuffer b = VK_NULL_HANDLE;
        uint64_t before = cvk_validation_errors();
        /* the expected message stays out of the test's output (ctest fails a test that prints one) */
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        if (vkCreateBuffer(d.dev, &bi, NULL, &b) == VK_SUCCESS) vkDestroyBuffer(d.dev, b, NULL);
        uint64_t after = cvk_validation_errors();
        cvk_device_free(&d);
        _exit(before == 0 && after > 0 && tu_status(0) == 1 ? 0 : 1);
    }
    assert_int_equal(child_status(pid), 0);
}

/* --- choice rules on made-up device lists --- */

static cvk_phys_info fake(VkPhysicalDeviceType t, bool usable) {
    cvk_phys_info p;
    memset(&p, 0, sizeof p);
    p.props.deviceType = t;
    p.usable = usable;
    snprintf(p.props.deviceName, sizeof p.props.deviceName, "%s", cvk_phys_type_name(t));
    if (!usable) snprintf(p.why_not, sizeof p.why_not, "made up");
    return p;
}

static void test_choice_rules(void **state) {
    (void)state;
    unsetenv("CINDER_DEVICE");
    cvk_phys_info l[4] = {fake(VK_PHYSICAL_DEVICE_TYPE_CPU, true), fake(VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, true),
                          fake(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, true),
                          fake(VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, true)};
    int c;
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), 0);
    assert_int_equal(c, 2); /* discrete first */
    l[2].usable = false;
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), 0);
    assert_int_equal(c, 1); /* then integrated */
    l[1].usable = false;
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), 0);
    assert_int_equal(c, 3); /* then virtual */
    l[3].usable = false;
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), 0);
    assert_int_equal(c, 0); /* then CPU */
    l[0].usable = false;
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), -1);
    assert_non_null(strstr(cd_errmsg(), "can be used"));
    l[0].usable = l[1].usable = l[2].usable = l[3].usable = true;
    assert_int_equal(cvk_phys_choose(l, 4, 0, &c), 0); /* explicit index wins */
    assert_int_equal(c, 0);
    assert_int_equal(cvk_phys_choose(l, 4, 4, &c), -1);
    assert_non_null(strstr(cd_errmsg(), "does not exist"));
    l[1].usable = false;
    assert_int_equal(cvk_phys_choose(l, 4, 1, &c), -1); /* never a silent fallback */
    assert_non_null(strstr(cd_errmsg(), "cannot be used"));
    setenv("CINDER_DEVICE", "3", 1);
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), 0);
    assert_int_equal(c, 3);
    assert_int_equal(cvk_phys_choose(l, 4, 0, &c), 0); /* the argument beats the environment */
    assert_int_equal(c, 0);
    setenv("CINDER_DEVICE", "gpu", 1);
    assert_int_equal(cvk_phys_choose(l, 4, -1, &c), -1);
    assert_non_null(strstr(cd_errmsg(), "CINDER_DEVICE"));
    unsetenv("CINDER_DEVICE");
    assert_int_equal(cvk_phys_choose(l, 0, -1, &c), -1);
    assert_non_null(strstr(cd_errmsg(), "no Vulkan device"));
}

/* --- the real device --- */

static void test_device_and_print(void **state) {
    (void)state;
    const cvk_caps *c = &vk->dev.info.caps;
    assert_true(c->api >= VK_API_VERSION_1_2);
    assert_true(c->subgroup_size > 0);
    assert_true(c->min_subgroup_size <= c->subgroup_size && c->subgroup_size <= c->max_subgroup_size);
    assert_true(c->max_storage_range >= 1 << 20);
    assert_non_null(vk->dev.compute_queue);
    assert_non_null(vk->dev.transfer_queue);
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(cvk_print_devices(f, -1), 0);
    long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    const char *want[] = {vk->dev.info.props.deviceName,
                          "maxStorageBufferRange",
                          "maxMemoryAllocation",
                          "shared memory",
                          "subgroup size",
                          "memory heap 0",
                          "timestamps",
                          "fp16"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i])) fail_msg("devices listing lacks '%s':\n%s", want[i], text);
    free(text);
    /* a second device on the same instance, chosen through the environment */
    setenv("CINDER_DEVICE", "0", 1);
    cvk_device d2;
    assert_int_equal(cvk_device_init(&d2, -1), 0);
    cvk_device_free(&d2);
    setenv("CINDER_DEVICE", "99", 1);
    assert_int_equal(cvk_device_init(&d2, -1), -1);
    assert_non_null(strstr(cd_errmsg(), "does not exist"));
    unsetenv("CINDER_DEVICE");
}

/* Memory types as a discrete AMD card lists them with VK_AMD_device_coherent_memory, the
 * device-coherent (uncached) twins first: each kind gets the ordinary type, the coherent one only
 * when nothing else is allowed; protected and lazily allocated types never. */
static void test_mem_pick_type(void **state) {
    (void)state;
    const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                AMD = VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD |
        VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD;
    const VkMemoryPropertyFlags flags[] = {DL | AMD,
                                           DL,
                                           HV | HC | AMD,
                                           HV | HC,
                                           HV | HC | CA | AMD,
                                           HV | HC | CA,
                                           DL | HV | HC | AMD,
                                           DL | HV | HC,
                                           DL | VK_MEMORY_PROPERTY_PROTECTED_BIT};
    VkPhysicalDeviceMemoryProperties mp = {.memoryTypeCount = 9};
    for (uint32_t i = 0; i < 9; i++) mp.memoryTypes[i].propertyFlags = flags[i];
    assert_int_equal(cvk_mem_pick_type(&mp, 0x1ff, CVK_MEM_DEVICE), 1);
    assert_int_equal(cvk_mem_pick_type(&mp, 0x1ff, CVK_MEM_UPLOAD), 3);
    assert_int_equal(cvk_mem_pick_type(&mp, 0x1ff, CVK_MEM_READBACK), 5);
    assert_int_equal(cvk_mem_pick_type(&mp, 1u << 0 | 1u << 8, CVK_MEM_DEVICE), 0);  /* the last resort */
    assert_int_equal(cvk_mem_pick_type(&mp, 1u << 8, CVK_MEM_DEVICE), -1);           /* protected: never */
    assert_int_equal(cvk_mem_pick_type(&mp, 1u << 0 | 1u << 1, CVK_MEM_UPLOAD), -1); /* not host-visible */
}

static void test_split_plan(void **state) {
    (void)state;
    uint64_t pb;
    uint32_t n;
    assert_int_equal(cvk_split_plan(1000, 1, 4096, &pb, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(cvk_split_plan(10000, 100, 4096, &pb, &n), 0);
    assert_int_equal(pb, 4000); /* lcm(100, 16) = 400; 10 of them */
    assert_int_equal(n, 3);
    assert_int_equal(cvk_split_plan(8192, 1, 4096, &pb, &n), 0);
    assert_int_equal(pb, 4096);
    assert_int_equal(n, 2);
    assert_int_equal(cvk_split_plan(100, 5000, 4096, &pb, &n), -1); /* a row wider than a binding */
    assert_int_equal(cvk_split_plan(0, 1, 4096, &pb, &n), -1);
    rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 10000; i++) {
        uint64_t g = 1 + rng_below(&r, 3000), max = 16 + rng_below(&r, 1 << 20), size = 1 + rng_below(&r, 1u << 30);
        uint64_t unit = g;
        while (unit % 16) unit += g; /* lcm(g, 16) */
        int rc = cvk_split_plan(size, g, max, &pb, &n);
        assert_int_equal(rc, unit > max ? -1 : 0);
        if (rc) continue;
        assert_int_equal(pb % unit, 0);
        assert_true(pb <= max && pb + unit > max); /* the largest such multiple */
        assert_true((uint64_t)n * pb >= size && (uint64_t)(n - 1) * pb < size);
    }
}

/* Bytes i*7+seed through a buffer split into parts: staged or direct, in and out. */
static void round_trip(cvk_buffer *b, bool staged, uint8_t seed) {
    uint8_t *src = malloc(b->size), *dst = calloc(1, b->size);
    for (uint64_t i = 0; i < b->size; i++) src[i] = (uint8_t)(i * 7 + seed);
    vk->stager.force_staging = staged;
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(b), src), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(b), dst), 0);
    assert_memory_equal(src, dst, b->size);
    /* an unaligned sub-range crossing a part boundary */
    uint64_t off = b->part_bytes - 13, len = b->size - off - 5;
    memset(dst, 0, b->size);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_range(b, off, len), dst), 0);
    assert_memory_equal(src + off, dst, len);
    vk->stager.force_staging = false;
    free(src);
    free(dst);
}

static void test_big_buffer_split(void **state) {
    (void)state;
    cvk_mem *m = &vk->mem;
    uint64_t saved = m->max_part;
    m->max_part = 4096; /* pretend maxStorageBufferRange is 4 KiB */
    cvk_buffer a, b;
    assert_int_equal(cvk_buffer_create(m, &a, 10003, 100, CVK_MEM_DEVICE), 0);
    assert_int_equal(a.n_parts, 3);
    assert_int_equal(a.part_bytes, 4000);
    assert_int_equal(a.parts[2].size, 2003);
    uint64_t row0, rows;
    cvk_buffer_part_rows(&a, 1, &row0, &rows);
    assert_int_equal(row0, 40);
    assert_int_equal(rows, 40);
    round_trip(&a, true, 1);
    round_trip(&a, false, 2);
    /* copy into a buffer split differently (granule 1: 4096-byte parts), through a command */
    assert_int_equal(cvk_buffer_create(m, &b, 10003, 1, CVK_MEM_DEVICE), 0);
    assert_int_equal(b.n_parts, 3);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_copy(&vk->cmd, cvk_view_whole(&a), cvk_view_whole(&b)), 0);
    cvk_barrier_transfer_to_transfer(vk->cmd.cb);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_range(&b, 4000, 200), 0x01010101u), 0);
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    uint8_t *out = malloc(b.size);
    vk->stager.force_staging = true;
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&b), out), 0);
    vk->stager.force_staging = false;
    for (uint64_t i = 0; i < b.size; i++) assert_int_equal(out[i], i >= 4000 && i < 4200 ? 1 : (uint8_t)(i * 7 + 2));
    free(out);
    /* views for a binding must stay inside one part */
    uint32_t k;
    uint64_t off;
    cvk_view v = cvk_view_range(&a, 3990, 20);
    assert_int_equal(cvk_view_locate(&v, &k, &off), -1);
    assert_non_null(strstr(cd_errmsg(), "straddles"));
    v = cvk_view_range(&a, 4016, 64);
    assert_int_equal(cvk_view_locate(&v, &k, &off), 0);
    assert_int_equal(k, 1);
    assert_int_equal(off, 16);
    cvk_buffer_destroy(m, &a);
    cvk_buffer_destroy(m, &b);
    m->max_part = saved;
}

static void test_suballocation(void **state) {
    (void)state;
    cvk_mem *m = &vk->mem;
    uint64_t allocs0 = m->n_allocations;
    uint32_t blocks0 = m->n_blocks;
    enum { N = 300 };
    cvk_buffer *b = calloc(N, sizeof *b);
    rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < N; i++)
        assert_int_equal(cvk_buffer_create(m, &b[i], 1 + rng_below(&r, 20000), 1, CVK_MEM_DEVICE), 0);
    assert_true(m->n_allocations - allocs0 <= 1); /* 300 buffers, <= 6 MB: one 32 MiB block */
    for (int i = 0; i < N; i += 2) cvk_buffer_destroy(m, &b[i]);
    cvk_buffer big;
    assert_int_equal(cvk_buffer_create(m, &big, 40ull << 20, 1, CVK_MEM_DEVICE), 0); /* its own block */
    assert_true(m->n_allocations - allocs0 <= 2);
    cvk_buffer_destroy(m, &big);
    for (int i = 1; i < N; i += 2) cvk_buffer_destroy(m, &b[i]);
    assert_int_equal(m->n_blocks, blocks0); /* empty blocks go back to the driver */
    free(b);
}

/* A recording an error left unfinished (begin, commands, then a failure: no end, no submit) is
 * discarded by the next begin: its commands never run, the new recording does (a failed forward
 * pass once left its reusable command buffer recording, and every later pass failed). */
static void test_abandoned_recording(void **state) {
    (void)state;
    cvk_buffer b;
    uint32_t zero[16] = {0}, got[16];
    assert_int_equal(cvk_buffer_create(&vk->mem, &b, sizeof zero, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&b), zero), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_range(&b, 0, 32), 0x11111111u), 0); /* then "fails" */
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_range(&b, 32, 32), 0x22222222u), 0);
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&b), got), 0);
    for (int i = 0; i < 16; i++) assert_int_equal(got[i], i < 8 ? 0u : 0x22222222u);
    cvk_buffer_destroy(&vk->mem, &b);
}

static void test_pipeline_interface_checks(void **state) {
    (void)state;
    cvk_spirv_info si;
    assert_int_equal(cvk_spirv_reflect(cinder_spv_rmsnorm, cinder_spv_rmsnorm_size, &si), 0);
    assert_int_equal(si.n_bindings, 3);
    assert_true(si.has_push);
    assert_int_equal(si.push_size, sizeof(cvk_rmsnorm_push));
    uint32_t spec = 64;
    cvk_pipeline p;
    cvk_pipeline_desc d = {.name = "rmsnorm",
                           .spv = cinder_spv_rmsnorm,
                           .spv_size = cinder_spv_rmsnorm_size,
                           .n_bindings = 2,
                           .push_size = sizeof(cvk_rmsnorm_push),
                           .spec = &spec,
                           .n_spec = 1};
    assert_int_equal(cvk_pipeline_create(&p, &vk->dev, VK_NULL_HANDLE, &d), -1);
    assert_non_null(strstr(cd_errmsg(), "binding 2"));
    d.n_bindings = 3;
    d.push_size = 8;
    assert_int_equal(cvk_pipeline_create(&p, &vk->dev, VK_NULL_HANDLE, &d), -1);
    assert_non_null(strstr(cd_errmsg(), "push constants"));
    assert_int_equal(cvk_spirv_reflect(&spec, 4, &si), -1);
    /* a required subgroup size is honoured when the device can, ignored when it cannot */
    d.push_size = sizeof(cvk_rmsnorm_push);
    d.subgroup_size = vk->dev.info.caps.max_subgroup_size;
    assert_int_equal(cvk_pipeline_create(&p, &vk->dev, VK_NULL_HANDLE, &d), 0);
    assert_int_equal(p.subgroup_size, vk->dev.info.caps.subgroup_size_control ? d.subgroup_size : 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    /* a workgroup within maxComputeWorkGroupSize[0] but over maxComputeWorkGroupInvocations
     * (smaller on some devices) is refused before the driver sees it */
    cvk_caps *caps = &vk->dev.info.caps;
    uint32_t saved = caps->max_wg_invocations;
    caps->max_wg_invocations = 128;
    assert_true(caps->max_wg_size[0] >= 256);
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 256), -1);
    assert_int_equal(cvk_moe_combine_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 256), -1);
    assert_int_equal(cvk_swiglu_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 256), -1);
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 128), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    caps->max_wg_invocations = saved;
}

/* A pipeline is compiled once per device: the same description again shares the first's
 * VkPipeline; other specialization constants are another; destroying a shared one leaves the
 * others working (the validation layer fails a use of a destroyed handle), and a failed
 * creation keeps nothing. */
static void test_pipelines_compiled_once(void **state) {
    (void)state;
    size_t n0 = cvk_pipeline_memo_count(&vk->dev);
    cvk_pipeline a, b, c;
    assert_int_equal(cvk_rmsnorm_pipeline(&a, &vk->dev, VK_NULL_HANDLE, 32), 0);
    assert_int_equal(cvk_pipeline_memo_count(&vk->dev), n0 + 1);
    assert_int_equal(cvk_rmsnorm_pipeline(&b, &vk->dev, VK_NULL_HANDLE, 32), 0);
    assert_true(a.shared && a.shared == b.shared && a.layout == b.layout);
    assert_int_equal(cvk_pipeline_memo_count(&vk->dev), n0 + 1);
    assert_int_equal(cvk_rmsnorm_pipeline(&c, &vk->dev, VK_NULL_HANDLE, 16), 0);
    assert_true(c.shared != a.shared);
    assert_int_equal(cvk_pipeline_memo_count(&vk->dev), n0 + 2);
    cvk_pipeline_destroy(&vk->dev, &a);
    assert_null(a.shared);
    float x[48], w[16], y[48];
    for (int i = 0; i < 48; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 16; i++) w[i] = 1.0f;
    cvk_buffer bx, bw, by;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, sizeof x, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, sizeof w, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, sizeof y, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), w), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_rmsnorm_args ra = {
        .x = cvk_view_whole(&bx), .w = cvk_view_whole(&bw), .y = cvk_view_whole(&by), .n = 16, .rows = 3, .eps = 1e-6f};
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_rmsnorm(&vk->cmd, &vk->dpool, &b, &ra), 0); /* b: shared with a, which is gone */
    cvk_barrier_device_to_host(vk->cmd.cb);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), y), 0);
    for (int r = 0; r < 3; r++) {
        double ss = 0;
        for (int i = 0; i < 16; i++) ss += (double)x[16 * r + i] * x[16 * r + i];
        for (int i = 0; i < 16; i++) assert_true(fabs(y[16 * r + i] - x[16 * r + i] / sqrt(ss / 16 + 1e-6)) < 1e-5);
    }
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &b);
    cvk_pipeline_destroy(&vk->dev, &c);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &by);
    uint32_t spec = 64; /* refused by the interface check: nothing kept */
    cvk_pipeline_desc d = {.name = "rmsnorm",
                           .spv = cinder_spv_rmsnorm,
                           .spv_size = cinder_spv_rmsnorm_size,
                           .n_bindings = 2,
                           .push_size = sizeof(cvk_rmsnorm_push),
                           .spec = &spec,
                           .n_spec = 1};
    assert_int_equal(cvk_pipeline_create(&a, &vk->dev, VK_NULL_HANDLE, &d), -1);
    assert_int_equal(cvk_pipeline_memo_count(&vk->dev), n0 + 2);
}

/* A describing device (describe_pipelines: the memory plan's) makes a pipeline's layouts and keeps
 * its constants, builds no VkPipeline and memoizes nothing; a bad description is still refused;
 * the same description on the device building again is built. */
static void test_pipelines_described(void **state) {
    (void)state;
    size_t n0 = cvk_pipeline_memo_count(&vk->dev);
    cvk_pipeline p;
    vk->dev.describe_pipelines = true;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 8), 0);
    assert_null(p.pipe);
    assert_non_null(p.layout);
    assert_non_null(p.dsl);
    assert_true(p.n_spec == 1 && p.spec[0] == 8 && p.n_bindings > 0);
    assert_int_equal(cvk_pipeline_memo_count(&vk->dev), n0);
    cvk_pipeline_destroy(&vk->dev, &p);
    uint32_t spec = 64;
    cvk_pipeline_desc d = {.name = "rmsnorm",
                           .spv = cinder_spv_rmsnorm,
                           .spv_size = cinder_spv_rmsnorm_size,
                           .n_bindings = 2, /* the shader has more: refused by the interface check */
                           .push_size = sizeof(cvk_rmsnorm_push),
                           .spec = &spec,
                           .n_spec = 1};
    assert_int_equal(cvk_pipeline_create(&p, &vk->dev, VK_NULL_HANDLE, &d), -1);
    vk->dev.describe_pipelines = false;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, VK_NULL_HANDLE, 8), 0);
    assert_non_null(p.shared);
    assert_int_equal(cvk_pipeline_memo_count(&vk->dev), n0 + 1);
    cvk_pipeline_destroy(&vk->dev, &p);
}

/* A pipeline is compiled when it is first recorded, not when it is made: made, the device holds
 * it uncompiled; recording it compiles it once (a second recording, or a second pipeline sharing
 * it, compiles nothing more) and the dispatch computes; cvk_pipeline_build_all compiles every one
 * left. */
static void test_pipelines_compiled_on_use(void **state) {
    (void)state;
    cvk_pipeline a, b, c;
    assert_int_equal(cvk_rmsnorm_pipeline(&a, &vk->dev, VK_NULL_HANDLE, 4), 0);
    assert_int_equal(cvk_rmsnorm_pipeline(&c, &vk->dev, VK_NULL_HANDLE, 2), 0);
    size_t built = cvk_pipeline_memo_built(&vk->dev), all = cvk_pipeline_memo_count(&vk->dev);
    assert_true(built < all); /* a and c at least wait for a use */
    assert_null(a.pipe);
    float x[8] = {1, -2, 3, -4, 5, -6, 7, -8}, w[4] = {1, 1, 1, 1}, y[8];
    cvk_buffer bx, bw, by;
    assert_int_equal(cvk_buffer_create(&vk->mem, &bx, sizeof x, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &bw, sizeof w, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &by, sizeof y, 4, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bx), x), 0);
    assert_int_equal(cvk_stager_upload(&vk->stager, cvk_view_whole(&bw), w), 0);
    assert_int_equal(cvk_stager_flush(&vk->stager), 0);
    cvk_rmsnorm_args ra = {
        .x = cvk_view_whole(&bx), .w = cvk_view_whole(&bw), .y = cvk_view_whole(&by), .n = 4, .rows = 2, .eps = 1e-6f};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
        assert_int_equal(cvk_rmsnorm(&vk->cmd, &vk->dpool, &a, &ra), 0);
        cvk_barrier_device_to_host(vk->cmd.cb);
        assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
        assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
        assert_int_equal(cvk_pipeline_memo_built(&vk->dev), built + 1); /* once, on the first */
    }
    assert_int_equal(cvk_rmsnorm_pipeline(&b, &vk->dev, VK_NULL_HANDLE, 4), 0);
    VkPipeline pa, pb;
    assert_int_equal(cvk_pipeline_handle(&vk->dev, &a, &pa), 0);
    assert_int_equal(cvk_pipeline_handle(&vk->dev, &b, &pb), 0);
    assert_true(pa && pa == pb);
    assert_int_equal(cvk_pipeline_memo_built(&vk->dev), built + 1);
    assert_int_equal(cvk_stager_download(&vk->stager, cvk_view_whole(&by), y), 0);
    for (int r = 0; r < 2; r++) {
        double ss = 0;
        for (int i = 0; i < 4; i++) ss += (double)x[4 * r + i] * x[4 * r + i];
        for (int i = 0; i < 4; i++) assert_true(fabs(y[4 * r + i] - x[4 * r + i] / sqrt(ss / 4 + 1e-6)) < 1e-5);
    }
    assert_int_equal(cvk_pipeline_build_all(&vk->dev), 0);
    assert_int_equal(cvk_pipeline_memo_built(&vk->dev), all);
    VkPipeline pc;
    assert_int_equal(cvk_pipeline_handle(&vk->dev, &c, &pc), 0);
    assert_true(pc && pc != pa);
    cvk_pipeline_destroy(&vk->dev, &a), cvk_pipeline_destroy(&vk->dev, &b), cvk_pipeline_destroy(&vk->dev, &c);
    cvk_buffer_destroy(&vk->mem, &bx);
    cvk_buffer_destroy(&vk->mem, &bw);
    cvk_buffer_destroy(&vk->mem, &by);
}

/* --- pipeline cache on disk --- */

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void open_expect(const char *path, bool loaded, const char *note) {
    cvk_pcache c;
    assert_int_equal(cvk_pcache_open(&c, &vk->dev, path), 0);
    if (c.loaded != loaded) fail_msg("%s: loaded=%d note='%s'", path, c.loaded, c.note);
    if (note && !strstr(c.note, note)) fail_msg("note '%s' lacks '%s'", c.note, note);
    cvk_pipeline p;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, c.cache, 64), 0); /* the cache works */
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_pcache_close(&c);
}

static void test_pipeline_cache_round_trip(void **state) {
    (void)state;
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/vk-pcache-%d", tu_tmp_dir(), (int)getpid());
    snprintf(path, sizeof path, "%s/sub/pipelines.bin", dir);
    open_expect(path, false, NULL); /* missing: silently empty */
    cvk_pcache c;
    assert_int_equal(cvk_pcache_open(&c, &vk->dev, path), 0);
    cvk_pipeline p;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, c.cache, 128), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    assert_int_equal(cvk_pcache_save(&c), 0); /* creates dir/sub */
    cvk_pcache_close(&c);
    open_expect(path, true, NULL);
    size_t n;
    uint8_t *good = (uint8_t *)tu_read_file(path, &n);
    assert_non_null(good);
    assert_true(n >= 24 + 32); /* lavapipe's cache data is the 32-byte header alone */
    uint8_t *bad = malloc(n);
    memcpy(bad, good, n);
    bad[n - 1] ^= 0x40; /* payload bit flip */
    write_bytes(path, bad, n);
    open_expect(path, false, "corrupt");
    write_bytes(path, good, n / 2); /* truncated */
    open_expect(path, false, "corrupt");
    write_bytes(path, "garbage!", 8);
    open_expect(path, false, "not a cinder");
    memcpy(bad, good, n);
    bad[24 + 16] ^= 1; /* pipelineCacheUUID of another driver, checksum fixed up */
    uint64_t h = XXH64(bad + 24, n - 24, 0);
    for (int i = 0; i < 8; i++) bad[16 + i] = (uint8_t)(h >> (8 * i));
    write_bytes(path, bad, n);
    open_expect(path, false, "another device");
    write_bytes(path, good, n);
    open_expect(path, true, NULL);
    free(good);
    free(bad);
    char def[4096];
    assert_int_equal(cvk_pcache_default_path(&vk->dev, def, sizeof def), 0);
    assert_non_null(strstr(def, "pipelines-"));
    unlink(path);
    snprintf(path, sizeof path, "%s/sub", dir);
    rmdir(path);
    rmdir(dir);
}

/* --- timestamps --- */

static void test_timestamps_increase(void **state) {
    (void)state;
    if (!vk->dev.info.caps.timestamps) tu_skip("the device has no timestamp queries: the timer is not tested");
    enum { N = 4096, ROWS = 64 };
    cvk_buffer x, w;
    assert_int_equal(cvk_buffer_create(&vk->mem, &x, N * ROWS * 4, 1, CVK_MEM_DEVICE), 0);
    assert_int_equal(cvk_buffer_create(&vk->mem, &w, N * 4, 1, CVK_MEM_DEVICE), 0);
    cvk_pipeline p;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, vk->pcache.cache, 256), 0);
    cvk_rmsnorm_args a = {
        .x = cvk_view_whole(&x), .w = cvk_view_whole(&w), .y = cvk_view_whole(&x), .n = N, .rows = ROWS, .eps = 1e-6f};
    assert_int_equal(cvk_timer_enable(&vk->timer, true), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&x), 0x3f800000u), 0);
    assert_int_equal(cvk_cmd_fill(&vk->cmd, cvk_view_whole(&w), 0x3f800000u), 0);
    cvk_barrier_transfer_to_compute(vk->cmd.cb);
    cvk_cmd_label_begin(&vk->cmd, "outer");
    for (int i = 0; i < 3; i++) {
        cvk_timer_layer(&vk->timer, i);
        cvk_timer_work(&vk->timer, &(cvk_work){.role = "norm", .bytes = 100u + i, .flops = 7});
        assert_int_equal(cvk_rmsnorm(&vk->cmd, &vk->dpool, &p, &a), 0);
        cvk_barrier_compute_to_compute(vk->cmd.cb);
    }
    cvk_cmd_label_end(&vk->cmd);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    /* outer, then per rmsnorm call its group span and, inside it, the dispatch's own span */
    cvk_timing t[8];
    uint32_t n;
    assert_int_equal(cvk_timer_read(&vk->timer, t, 8, &n), 0);
    assert_int_equal(n, 7);
    assert_int_equal(vk->timer.dispatches, 3);
    assert_int_equal(vk->timer.copies, 0);
    assert_string_equal(t[0].label, "outer");
    assert_int_equal(t[0].kind, CVK_SPAN_GROUP);
    assert_int_equal(t[0].parent, UINT32_MAX);
    assert_int_equal(t[0].layer, -1);
    assert_null(t[0].work.role); /* described work goes to the next group begun after it */
    for (uint32_t c = 0; c < 3; c++) {
        const cvk_timing *g = &t[1 + 2 * c], *d = &t[2 + 2 * c];
        assert_string_equal(g->label, "rmsnorm");
        assert_int_equal(g->kind, CVK_SPAN_GROUP);
        assert_int_equal(g->depth, 1);
        assert_int_equal(g->parent, 0);
        assert_int_equal(g->layer, (int32_t)c);
        assert_string_equal(g->work.role, "norm");
        assert_int_equal(g->work.bytes, 100 + c);
        assert_int_equal(d->kind, CVK_SPAN_DISPATCH);
        assert_string_equal(d->label, p.name);
        assert_int_equal(d->depth, 2);
        assert_int_equal(d->parent, 1 + 2 * c);
        assert_null(d->work.role);
        assert_true(d->start_ns >= g->start_ns && d->end_ns <= g->end_ns);
    }
    for (uint32_t i = 1; i < n; i++) {
        assert_true(t[i].start_ns <= t[i].end_ns);
        assert_true(t[i].end_ns > t[i].start_ns || vk->dev.info.caps.timestamp_period > 100);
        if (i > 2 && t[i].kind == CVK_SPAN_GROUP) assert_true(t[i].start_ns >= t[i - 1].end_ns);
        assert_true(t[i].start_ns >= t[0].start_ns && t[i].end_ns <= t[0].end_ns);
    }
    printf("rmsnorm %ux%u: %.1f us per dispatch (timestamps)\n", ROWS, N,
           (double)(t[6].end_ns - t[6].start_ns) / 1000.0);
    /* switched off at run time: the next recording has no spans */
    assert_int_equal(cvk_timer_enable(&vk->timer, false), 0);
    assert_int_equal(cvk_cmd_begin(&vk->cmd), 0);
    cvk_cmd_label_begin(&vk->cmd, "ignored");
    assert_int_equal(cvk_rmsnorm(&vk->cmd, &vk->dpool, &p, &a), 0);
    cvk_cmd_label_end(&vk->cmd);
    assert_int_equal(cvk_cmd_run(&vk->cmd), 0);
    assert_int_equal(cvk_timer_read(&vk->timer, t, 8, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cvk_descpool_reset(&vk->dpool), 0);
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_buffer_destroy(&vk->mem, &x);
    cvk_buffer_destroy(&vk->mem, &w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_driver_is_a_clean_error),
        cmocka_unit_test(test_validation_is_required),
        cmocka_unit_test(test_validation_message_fails),
        cmocka_unit_test(test_choice_rules),
        cmocka_unit_test(test_split_plan),
        cmocka_unit_test(test_mem_pick_type),
    };
    const struct CMUnitTest device_tests[] = {
        cmocka_unit_test(test_device_and_print),
        cmocka_unit_test(test_big_buffer_split),
        cmocka_unit_test(test_suballocation),
        cmocka_unit_test(test_abandoned_recording),
        cmocka_unit_test(test_pipeline_interface_checks),
        cmocka_unit_test(test_pipelines_compiled_once),
        cmocka_unit_test(test_pipelines_described),
        cmocka_unit_test(test_pipelines_compiled_on_use),
        cmocka_unit_test(test_pipeline_cache_round_trip),
        cmocka_unit_test(test_timestamps_increase),
    };
    int rc = cmocka_run_group_tests_name("vk_host", tests, NULL, NULL);
    return tu_status(rc + cmocka_run_group_tests_name("vk_device", device_tests, vk_setup, vk_teardown));
}
