#version 450
// Greedy argmax, logits through a uniform texel buffer (CPU devices): shaders/argmax.glsl.
#define TEXEL 1
#include "argmax.glsl"
