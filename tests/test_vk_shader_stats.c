/* What the compiler made of a pipeline (runtime/vk/vk_shader_stats.h): the disassembly counts
 * (load widths in RDNA2's and RDNA3's mnemonics, integer dot products, fused multiply-adds) on
 * hand-written listings, the lanes-per-SIMD figure, and a compile-only device on this machine's
 * device: pipelines still compile, and a driver without the statistics says so by name. The
 * statistics themselves, from RADV's null RDNA devices: tests/shaders_rdna.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/op_rmsnorm.h"
#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_shader_stats.h"
#include "tests/test_status.h"

static void test_count_gfx11(void **state) {
    (void)state;
    const char *isa = "main:\n"
                      "\tbuffer_load_b128 v[0:3], v4, s[0:3], 0 offen ; e0570000\n"
                      "  buffer_load_b128 v[4:7], v4, s[0:3], 0 offen offset:16\n"
                      "\tglobal_load_b64 v[8:9], v[10:11], off\n"
                      "\tbuffer_load_b32 v12, v4, s[0:3], 0 offen\n"
                      "\tbuffer_load_u16 v13, v4, s[0:3], 0 offen\n"
                      "\tbuffer_load_d16_b16 v14, v4, s[0:3], 0 offen\n"
                      "\tbuffer_store_b128 v[0:3], v4, s[0:3], 0 offen\n" /* a store: not a load */
                      "\ts_load_b128 s[4:7], s[0:1], 0x0\n"               /* scalar: not a vector load */
                      "\tv_dot4_i32_iu8 v1, v2, v3, v1\n"
                      "\tv_fmac_f32_e32 v1, v2, v3\n"
                      "\tv_fma_f32 v45, v42, v45, -v43\n"
                      "\tv_pk_fma_f32 v[0:1], v[2:3], v[4:5], v[6:7]\n"
                      "\tv_mul_f32_e32 v1, v2, v3\n"
                      "\ts_endpgm";
    cvk_shader_stats s = {0};
    cvk_shader_count_isa(isa, &s);
    assert_int_equal(s.loads_b128, 2);
    assert_int_equal(s.loads_b64, 1);
    assert_int_equal(s.loads_b32, 1);
    assert_int_equal(s.loads_b96, 0);
    assert_int_equal(s.loads_sub32, 2);
    assert_int_equal(s.dot4, 1);
    assert_int_equal(s.fma, 3);
}

static void test_count_gfx10(void **state) {
    (void)state;
    const char *isa = "\tbuffer_load_dwordx4 v[0:3], v4, s[0:3], 0 offen\n"
                      "\tbuffer_load_dwordx3 v[0:2], v4, s[0:3], 0 offen\n"
                      "\tglobal_load_dwordx2 v[8:9], v[10:11], off\n"
                      "\tbuffer_load_dword v12, v4, s[0:3], 0 offen\n"
                      "\tbuffer_load_ubyte v13, v4, s[0:3], 0 offen\n"
                      "\tbuffer_load_dwordx5 v[0:4], v4, s[0:3], 0 offen\n" /* no such width */
                      "\tv_dot4c_i32_i8_e32 v1, v2, v3\n"
                      "\tds_read_b128 v[0:3], v4\n"; /* LDS: not a memory load here */
    cvk_shader_stats s = {0};
    cvk_shader_count_isa(isa, &s);
    assert_int_equal(s.loads_b128, 1);
    assert_int_equal(s.loads_b96, 1);
    assert_int_equal(s.loads_b64, 1);
    assert_int_equal(s.loads_b32, 1);
    assert_int_equal(s.loads_sub32, 1);
    assert_int_equal(s.dot4, 1);
    cvk_shader_count_isa("", &s); /* nothing more */
    assert_int_equal(s.loads_b128, 1);
}

static void test_lanes(void **state) {
    (void)state;
    /* a 32-invocation workgroup compiled as wave64 fills half of each wave */
    cvk_shader_stats s = {.waves_per_simd = 24, .subgroup_size = 64, .n_spec = 1, .spec = {32}};
    assert_int_equal(cvk_shader_lanes_per_simd(&s), 24 * 32);
    s.subgroup_size = 32;
    assert_int_equal(cvk_shader_lanes_per_simd(&s), 24 * 32);
    s.spec[0] = 256, s.subgroup_size = 64;
    assert_int_equal(cvk_shader_lanes_per_simd(&s), 24 * 64);
    s.waves_per_simd = -1; /* not reported */
    assert_int_equal(cvk_shader_lanes_per_simd(&s), -1);
}

/* A compile-only context on the test device: only the device and the pipeline cache, and a
 * pipeline compiles; lavapipe reports no executable statistics, so none are logged and reading
 * one fails naming the reason. */
static void test_compile_only_device(void **state) {
    (void)state;
    cvk_ctx *vk = calloc(1, sizeof *vk);
    assert_non_null(vk);
    assert_int_equal(cvk_ctx_init(vk, &(cvk_ctx_opts){.device = -1, .compile_only = true}), 0);
    assert_true(vk->dev.compile_only);
    assert_false(vk->dev.info.caps.timeline);
    assert_null(vk->dev.copies.sem);
    assert_null(vk->stager.dev);
    assert_non_null(vk->dev.shader_log);
    cvk_pipeline p;
    assert_int_equal(cvk_rmsnorm_pipeline(&p, &vk->dev, vk->pcache.cache, 0), 0);
    if (vk->dev.pipeline_stats) {
        assert_int_equal(vk->dev.shader_log->n, 1);
        assert_string_equal(vk->dev.shader_log->v[0].name, "rmsnorm");
    } else {
        assert_int_equal(vk->dev.shader_log->n, 0);
        cvk_shader_stats s;
        assert_int_equal(cvk_shader_stats_read(&vk->dev, &p, &s), -1);
        assert_non_null(strstr(cd_errmsg(), "does not report pipeline statistics"));
    }
    cvk_pipeline_destroy(&vk->dev, &p);
    cvk_ctx_free(vk);
    free(vk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_gfx11),
        cmocka_unit_test(test_count_gfx10),
        cmocka_unit_test(test_lanes),
        cmocka_unit_test(test_compile_only_device),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
