/* The process-wide VkInstance, shared and reference-counted.
 *
 * volk loads the Vulkan loader once; the instance is created on the first acquire and lives
 * until the process exits (destroyed then if no device holds it), not destroyed and made again
 * whenever the count reaches 0: NVIDIA's driver (580, on an H200) refused the 22nd
 * vkCreateInstance of a process with VK_ERROR_INCOMPATIBLE_DRIVER (test_oom makes ~50 engines
 * one after another), and others report it misbehaving after repeated instance cycles (e.g.
 * Genesis-Embodied-AI/quadrants#465). All Vulkan entry points (device-level ones included) are
 * loaded through the instance with volkLoadInstance, so they dispatch through the loader and
 * work for any number of VkDevices at once (we never call volkLoadDevice, which would bind the
 * global pointers to one device).
 *
 * Environment:
 *   CINDER_VK_VALIDATION=1     enable VK_LAYER_KHRONOS_validation (Debian: vulkan-validationlayers);
 *                              without the layer, acquiring the instance fails (never silently
 *                              off). Each error or warning goes to stderr and is counted
 *                              (cvk_validation_errors): the tests and the cinder CLI fail on it
 *   CINDER_VK_VALIDATION=sync  the same plus synchronization validation (missing barriers)
 * Thread-safe. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <volk.h>

typedef struct cvk_instance_info {
    uint32_t loader_api; /* vkEnumerateInstanceVersion */
    uint32_t api;        /* the apiVersion the instance was created with (1.2 or 1.3) */
    bool validation;     /* the validation layer is enabled */
    bool portability;    /* VK_KHR_portability_enumeration is enabled (MoltenVK and such) */
} cvk_instance_info;

/* Returns the shared instance (creating it on first use) and bumps its reference count.
 * Fails cleanly when no Vulkan loader or no driver is installed. The count is what the exit
 * checks: the instance is destroyed at exit only when no device still holds it. */
int cvk_instance_acquire(VkInstance *out, cvk_instance_info *info);
void cvk_instance_release(void);
/* Validation errors and warnings reported since the process started (0 without the layer). */
uint64_t cvk_validation_errors(void);
