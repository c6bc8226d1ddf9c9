/* Just enough SPIR-V reflection to check a shader against its host side: which descriptor
 * bindings it declares, and the layout of its push-constant block. cvk_pipeline_create
 * uses it to reject a binding-count or push-size mismatch with a clear error, and the kernel
 * tests use it to pin each C push-constant struct to the GLSL block, offset by offset. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shaders/shaders.h"

#define CVK_SPIRV_MAX 32

typedef struct cvk_spirv_info {
    uint32_t n_bindings;                   /* 1 + highest binding used in set 0; 0 when none */
    uint32_t binding_count[CVK_SPIRV_MAX]; /* descriptors per binding (array size), 0 = unused */
    bool other_sets;                       /* a binding lives in a set other than 0 */
    bool has_push;
    uint32_t n_push;                     /* members of the push-constant block */
    uint32_t push_offset[CVK_SPIRV_MAX]; /* byte offset of each member */
    uint32_t push_size;                  /* end of the last member; 0 if its type is unknown */
} cvk_spirv_info;

int cvk_spirv_reflect(const uint32_t *words, size_t bytes, cvk_spirv_info *out);

/* The embedded module of shaders/<shader>.comp built for weight type qtype (enum qtype), or of
 * a shader built once for every type when qtype is CINDER_SPV_UNTYPED (cmake/shaders.cmake);
 * NULL, with an error naming both, when the build made none. */
const cinder_spv_module *cvk_spirv_module(const char *shader, uint32_t qtype);
