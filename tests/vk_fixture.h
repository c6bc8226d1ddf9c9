/* The Vulkan context shared by the tests of one test binary: cmocka group setup/teardown.
 * Teardown fails the group when the validation layer (CINDER_VK_VALIDATION=1) reported
 * anything, so API misuse fails tests even where lavapipe tolerates it. */
#pragma once
#include "tests/test_status.h" /* main returns tu_status(...): validation messages fail the binary */
#include "runtime/vk/vk_ctx.h"

extern cvk_ctx *vk;
int vk_setup(void **state);
int vk_teardown(void **state);
