#version 450
// weight types: all
// The rows kernel, weights and x through storage buffers: shaders/matmul_rows.glsl.
#include "matmul_rows.glsl"
