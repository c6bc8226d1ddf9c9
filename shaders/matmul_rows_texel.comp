#version 450
// weight types: Q8_0 Q4_K Q5_K Q6_K
// The rows kernel, weights and x through uniform texel buffers (CPU devices; block types):
// shaders/matmul_rows.glsl.
#define TEXEL 1
#include "matmul_rows.glsl"
