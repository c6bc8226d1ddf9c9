/* What the driver's compiler made of each pipeline: registers, spills, LDS, occupancy, the
 * instructions and the widths of their memory loads (VK_KHR_pipeline_executable_properties).
 *
 * RADV reports these from ACO, the compiler real RDNA cards use, and does so even for a null
 * device (RADV_FORCE_FAMILY=gfx1100 with no hardware: compile only, cinder profile --shaders
 * --family), so kernels are shaped against RDNA's own compiler on any machine:
 *
 *   cvk_ctx_opts o = {.device = -1, .compile_only = true};   (the device records a log)
 *   cvk_ctx_init(vk, &o);  ... create pipelines ...  vk->dev.shader_log->v[i]
 *
 * Statistics a driver does not report stay -1. Lanes resident per SIMD, the figure decode
 * kernels are held to, is waves per SIMD x subgroup size x the share of a wave the workgroup
 * fills (a 32-invocation workgroup compiled as wave64 leaves half of each wave idle). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_pipeline.h"

typedef struct cvk_shader_stats {
    char name[32];                       /* the pipeline's (cvk_pipeline_desc.name) */
    uint32_t spec[CVK_MAX_SPEC], n_spec; /* its specialization constants; spec[0] = workgroup size */
    uint32_t required_subgroup;          /* requiredSubgroupSize in force, 0 = the driver's choice */
    uint32_t subgroup_size;              /* the executable's, as compiled */
    int64_t vgprs, sgprs, spilled_vgprs, spilled_sgprs;
    int64_t lds_bytes, scratch_bytes;
    int64_t waves_per_simd; /* RADV's "Subgroups per SIMD" */
    int64_t instructions, code_bytes;
    int64_t latency, inv_throughput; /* ACO's static estimates (cycles), -1 when not reported */
    /* from the disassembly (has_isa): vector memory loads by width, and the integer dot products */
    bool has_isa;
    uint32_t loads_sub32, loads_b32, loads_b64, loads_b96, loads_b128;
    uint32_t dot4; /* v_dot4* instructions */
    uint32_t fma;  /* fused multiply-adds (v_fma*, v_fmac*, v_fmamk/ak, v_pk_fma*) */
    char *isa;     /* the disassembly (malloc'd; in a log, freed with it), or NULL */
} cvk_shader_stats;

typedef struct cvk_shader_log {
    cvk_shader_stats *v;
    uint32_t n, cap;
} cvk_shader_log;

/* The statistics of p's one compute executable, and its disassembly in s->isa (free it). p must
 * have been created with the capture flags (cvk_device.shader_log set at creation); -1 with
 * cd_errmsg() when the device cannot. */
int cvk_shader_stats_read(const cvk_device *d, const cvk_pipeline *p, cvk_shader_stats *s);
/* Appends p's statistics to the log; -1 on a driver error or out of memory. */
int cvk_shader_log_add(cvk_shader_log *log, const cvk_device *d, const cvk_pipeline *p);
void cvk_shader_log_free(cvk_shader_log *log); /* and every entry's isa */

/* waves x subgroup size x min(1, workgroup / subgroup); -1 when waves are not reported. */
int64_t cvk_shader_lanes_per_simd(const cvk_shader_stats *s);
/* Counts the vector memory loads by width in one disassembly (gfx10: buffer_load_dwordx4,
 * global_load_dwordx2, ...; gfx11: buffer_load_b128, ...), the v_dot4 instructions and the
 * fused multiply-adds. */
void cvk_shader_count_isa(const char *isa, cvk_shader_stats *s);
