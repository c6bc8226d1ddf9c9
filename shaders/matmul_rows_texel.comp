#version 450
// The rows kernel, weights and x through uniform texel buffers (CPU devices; block types):
// shaders/matmul_rows.glsl.
#define TEXEL 1
#include "matmul_rows.glsl"
