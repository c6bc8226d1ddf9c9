#include "runtime/vk/vk_check.h"

#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"

const char *cvk_result_name(VkResult r) {
    switch (r) {
        /* a table: one name after another */
        // clang-format off
#define N(x) case x: return #x;
    N(VK_SUCCESS) N(VK_NOT_READY) N(VK_TIMEOUT) N(VK_EVENT_SET) N(VK_EVENT_RESET) N(VK_INCOMPLETE)
    N(VK_ERROR_OUT_OF_HOST_MEMORY) N(VK_ERROR_OUT_OF_DEVICE_MEMORY) N(VK_ERROR_INITIALIZATION_FAILED)
    N(VK_ERROR_DEVICE_LOST) N(VK_ERROR_MEMORY_MAP_FAILED) N(VK_ERROR_LAYER_NOT_PRESENT)
    N(VK_ERROR_EXTENSION_NOT_PRESENT) N(VK_ERROR_FEATURE_NOT_PRESENT) N(VK_ERROR_INCOMPATIBLE_DRIVER)
    N(VK_ERROR_TOO_MANY_OBJECTS) N(VK_ERROR_FORMAT_NOT_SUPPORTED) N(VK_ERROR_FRAGMENTED_POOL)
    N(VK_ERROR_UNKNOWN) N(VK_ERROR_OUT_OF_POOL_MEMORY) N(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    N(VK_ERROR_FRAGMENTATION) N(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS) N(VK_PIPELINE_COMPILE_REQUIRED)
    N(VK_ERROR_VALIDATION_FAILED_EXT) N(VK_ERROR_INVALID_SHADER_NV)
#undef N
            // clang-format on
            default : break;
    }
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "VkResult(%d)", (int)r);
    return buf;
}

/* __FILE__ is absolute under CMake; keep the part from the module directory on. */
static const char *short_path(const char *file) {
    const char *p = strstr(file, "runtime/");
    if (!p) p = strstr(file, "tests/");
    return p ? p : file;
}

int cvk_check_result(VkResult r, const char *call, const char *file, int line) {
    if (r >= 0) return 0;
    return cd_fail("%s: %s (%s:%d)", call, cvk_result_name(r), short_path(file), line);
}
