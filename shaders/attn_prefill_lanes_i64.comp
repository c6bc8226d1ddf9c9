#version 450
// Prefill paged attention for CPU (SIMD-lane) devices, 64-bit loads (16 halves per load; needs
// shaderInt64). The kernel is attn_prefill_lanes.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define WIDE 1
#define TEXEL 0
#include "attn_prefill_lanes.glsl"
