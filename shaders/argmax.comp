#version 450
// Greedy argmax, logits through a storage buffer: shaders/argmax.glsl.
#include "argmax.glsl"
