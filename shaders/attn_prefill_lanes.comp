#version 450
// Prefill paged attention for CPU (SIMD-lane) devices, 32-bit loads (up to 8 halves per load).
// The kernel is attn_prefill_lanes.glsl; attn_prefill_lanes_i64.comp is the same with 64-bit
// loads where the device has shaderInt64.
#define WIDE 0
#define TEXEL 0
#include "attn_prefill_lanes.glsl"
