/* The one checked-call macro. CVK_CHECK(call) evaluates a Vulkan call and yields 0 when the
 * VkResult is not an error (VK_SUCCESS and the positive status codes such as VK_INCOMPLETE),
 * or -1 after setting cd_errmsg() to the call's text, the result's name, file and line:
 *
 *   if (CVK_CHECK(vkCreateBuffer(d->dev, &ci, NULL, &buf))) goto fail;
 *   -> "vkCreateBuffer(d->dev, &ci, NULL, &buf): VK_ERROR_OUT_OF_DEVICE_MEMORY (runtime/vk/vk_memory.c:120)"
 *
 * Callers that must treat a positive code as failure (VK_TIMEOUT from a bounded wait) test
 * for it themselves. */
#pragma once
#include <volk.h>

/* "VK_ERROR_DEVICE_LOST", or "VkResult(-1000001004)" for codes this build does not name. */
const char *cvk_result_name(VkResult r);
/* The body of CVK_CHECK; returns 0 for r >= 0, else sets the message and returns -1. */
int cvk_check_result(VkResult r, const char *call, const char *file, int line);

#define CVK_CHECK(call) cvk_check_result((call), #call, __FILE__, __LINE__)
