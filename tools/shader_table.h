/* cinder profile --shaders: what the device's compiler made of every pipeline of the device
 * plan (runtime/vk/vk_shader_stats.h) — registers, spills, LDS, occupancy, instructions, load
 * widths — for this device, or with --family for an RDNA family compiled by RADV's null device
 * (no such card needed; nothing runs). docs/PROFILE.md, "Shaders". */
#pragma once
#include <stdbool.h>

#include "runtime/model/model.h"

typedef struct shader_table_opts {
    const char *family; /* RADV_FORCE_FAMILY (gfx1100, navi21, ...); NULL: the device as chosen */
    int device;         /* --device-index; -1 the automatic choice */
    bool json;
    const char *isa_dir; /* --isa DIR: each pipeline's disassembly as DIR/NN-name.s */
} shader_table_opts;

/* Sets up the process for --family (before any Vulkan call): RADV's ICD alone, its null device
 * for that family. -1 with a message when Mesa's RADV is not installed. */
int shader_table_family_env(const char *family);
/* Compiles m's pipelines (gpu_model_compile) on a compile-only device and prints the table. */
int shader_table_run(const shader_table_opts *o, const model *m);
