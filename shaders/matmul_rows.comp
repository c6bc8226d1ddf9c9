#version 450
// The rows kernel, weights and x through storage buffers: shaders/matmul_rows.glsl.
#include "matmul_rows.glsl"
