#version 450
// Prefill paged attention for CPU (SIMD-lane) devices, the pool read through a uniform texel
// buffer (16-byte texels: gathers on llvmpipe, not per-lane load loops). The kernel is
// attn_prefill_lanes.glsl.
#extension GL_EXT_samplerless_texture_functions : require
#define WIDE 0
#define TEXEL 1
#include "attn_prefill_lanes.glsl"
