/* Compute pipelines from embedded SPIR-V.
 *
 * Conventions every cinder kernel follows, so one description fits all:
 *   - storage buffers only, at bindings 0..n_bindings-1 of set 0, one descriptor each;
 *   - one push-constant block (≤ 128 bytes, the guaranteed minimum), mirrored by a C struct;
 *   - uint32 specialization constants with constant_id 0..n_spec-1; by convention id 0 is the
 *     workgroup size x (`layout(local_size_x_id = 0) in;`), so one SPIR-V serves any size.
 * The SPIR-V is reflected at creation: a binding outside 0..n_bindings-1, a descriptor array,
 * or a push block larger than push_size is an error naming the pipeline.
 *
 * Subgroup size: desc.subgroup_size != 0 asks for requiredSubgroupSize (wave32 or wave64 on
 * RDNA) when the device supports subgroup size control for compute and the size is in range;
 * otherwise the driver chooses. cvk_pipeline.subgroup_size says which happened.
 *
 * Each distinct pipeline (the same SPIR-V bytes, specialization constants, bindings, push size
 * and subgroup request) is compiled once per device: a second cvk_pipeline_create of it shares
 * the first's VkPipeline and layouts, and cvk_pipeline_destroy of a shared one only forgets it;
 * the device keeps them to cvk_device_free. A model or kernel made again on the same device (the
 * test fixtures' gpu_model, every test_vk_* case) compiles nothing; on lavapipe each compile is
 * LLVM's and costs tenths of a second to seconds. An engine opens its own device unless given
 * one (engine_opts.device); engines on one device share its pipelines. A device capturing
 * compiler statistics (pipeline_stats: cinder profile --shaders) compiles every pipeline afresh
 * and at once, as its log needs.
 *
 * Compiled on first use: cvk_pipeline_create checks the description and makes the layouts; the
 * VkPipeline is compiled when a command buffer first records it (cvk_cmd_dispatch, through
 * cvk_pipeline_handle), with the device's pipeline cache (cvk_device.pcache). A model makes
 * every kernel variant it might choose (per type, token count and shape), and a short run uses
 * a few of them: compiling them all was most of a process's start on lavapipe (the figures are
 * in docs/RELIABILITY.md, "The test suite's time"). Where a
 * compile inside a pass would be measured or felt (bench, profile, serve), cvk_pipeline_build_all
 * compiles every one first (gpu_model_opts.build_pipelines). So desc.spv must stay valid for the
 * device's life (the embedded modules are). A failed compile on first use fails the recording
 * (cvk_cmd_end, naming the pipeline); the description was checked at creation.
 *
 * A device with describe_pipelines set makes pipelines without code: the layouts, constants and
 * subgroup size are there (what a dispatch's shape and a buffer's size are computed from), the
 * VkPipeline is not (VK_NULL_HANDLE: nothing may record it). gpu_model_init plans memory on
 * such pipelines before it builds any, so a refusal or `cinder info` builds none. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_device.h"

#define CVK_MAX_SPEC 16

typedef struct cvk_pipeline_desc {
    const char *name;        /* for errors and profiles */
    const uint32_t *spv;     /* cinder_spv_<name> */
    size_t spv_size;         /* cinder_spv_<name>_size, bytes */
    uint32_t n_bindings;     /* storage buffers at bindings 0..n-1 */
    uint32_t texel_bindings; /* bit i: binding i is a uniform texel buffer instead, the bound
                                    view's part as 16-byte uint texels (cvk_part.texels) */
    uint32_t push_size;      /* bytes of the push-constant struct; 0 = none */
    const uint32_t *spec;    /* specialization constants, ids 0..n_spec-1 */
    uint32_t n_spec;
    uint32_t subgroup_size; /* 0 = the driver's choice */
    bool full_subgroups;    /* all subgroups full (needs local_size_x % subgroup size == 0) */
} cvk_pipeline_desc;

typedef struct cvk_pipeline {
    char name[32];
    VkPipeline pipe;
    VkPipelineLayout layout;
    VkDescriptorSetLayout dsl;
    uint32_t n_bindings, push_size, texel_bindings;
    uint32_t subgroup_size; /* required size in force; 0 = the driver's choice */
    uint32_t spec[CVK_MAX_SPEC], n_spec;
    /* the device's entry this pipeline shares (NULL: its own objects); pipe stays VK_NULL_HANDLE
     * when the entry was not built at creation, and cvk_pipeline_handle gives the entry's */
    struct cvk_pipeline_shared *shared;
} cvk_pipeline;

/* cache may be VK_NULL_HANDLE. */
int cvk_pipeline_create(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, const cvk_pipeline_desc *desc);
void cvk_pipeline_destroy(cvk_device *d, cvk_pipeline *p); /* zeroed pipelines are fine */
/* p's VkPipeline, compiled now if it is not yet (what recording it needs); -1 with cd_errmsg
 * when the compile fails or p was only described. */
int cvk_pipeline_handle(cvk_device *d, const cvk_pipeline *p, VkPipeline *out);
/* Compiles every pipeline the device holds that is not compiled yet. */
int cvk_pipeline_build_all(cvk_device *d);
/* The device's keeper of compiled pipelines (cvk_device_open; not on a device capturing
 * statistics), and its end (cvk_device_free, before the VkDevice goes). */
int cvk_pipeline_memo_init(cvk_device *d);
void cvk_pipeline_memo_free(cvk_device *d);
/* How many distinct pipelines the device holds, and how many of them are compiled (tests). */
size_t cvk_pipeline_memo_count(const cvk_device *d);
size_t cvk_pipeline_memo_built(const cvk_device *d);
