/* Logical device creation: the chosen physical device, its queues and enabled features. */
#include "runtime/vk/vk_device.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_instance.h"
#include "runtime/vk/vk_pipeline.h"
#include "runtime/vk/vk_shader_stats.h"

/* The feature structs we enable, chained as the effective API version allows. */
typedef struct feature_chain {
    VkPhysicalDeviceFeatures2 f2;
    VkPhysicalDeviceVulkan11Features f11;
    VkPhysicalDeviceVulkan12Features f12;
    VkPhysicalDeviceVulkan13Features f13;
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT sgc;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec;
} feature_chain;

static void build_features(feature_chain *f, const cvk_phys_info *info, bool stats) {
    const cvk_caps *c = &info->caps;
    memset(f, 0, sizeof *f);
    f->exec.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    f->exec.pipelineExecutableInfo = VK_TRUE;
    f->f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f->f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    f->f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    f->f13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
    f->sgc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES;
    f->f2.pNext = &f->f11;
    f->f11.pNext = &f->f12;
    if (c->api >= VK_API_VERSION_1_3) f->f12.pNext = &f->f13;
    else if (info->ext_subgroup_size_control) f->f12.pNext = &f->sgc;
    f->f2.features.shaderInt16 = c->int16;
    f->f2.features.shaderInt64 = c->int64;
    f->f11.storageBuffer16BitAccess = c->storage16;
    f->f12.shaderFloat16 = c->fp16;
    f->f12.shaderInt8 = c->int8;
    f->f12.storageBuffer8BitAccess = c->storage8;
    f->f12.shaderSubgroupExtendedTypes = c->subgroup_ext_types;
    f->f12.timelineSemaphore = c->timeline;
    f->f12.vulkanMemoryModel = c->memory_model;
    f->f13.subgroupSizeControl = f->sgc.subgroupSizeControl = c->subgroup_size_control;
    f->f13.computeFullSubgroups = f->sgc.computeFullSubgroups = c->full_subgroups;
    f->f13.shaderIntegerDotProduct = c->int_dot;
    if (stats) { /* at the chain's head: the rest keeps its order */
        f->exec.pNext = f->f2.pNext;
        f->f2.pNext = &f->exec;
    }
}

static int create_device(cvk_device *d) {
    const cvk_phys_info *info = &d->info;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo q[2] = {{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = info->compute_family,
                                     .queueCount = 1,
                                     .pQueuePriorities = &prio},
                                    {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = info->transfer_family,
                                     .queueCount = 1,
                                     .pQueuePriorities = &prio}};
    const char *exts[3];
    uint32_t n_ext = 0;
    if (info->ext_subgroup_size_control) exts[n_ext++] = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
    if (info->ext_portability_subset) exts[n_ext++] = "VK_KHR_portability_subset";
    if (d->pipeline_stats) exts[n_ext++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    feature_chain f;
    build_features(&f, info, d->pipeline_stats);
    VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = &f.f2,
                             .queueCreateInfoCount = d->dedicated_transfer ? 2 : 1,
                             .pQueueCreateInfos = q,
                             .enabledExtensionCount = n_ext,
                             .ppEnabledExtensionNames = exts};
    if (CVK_CHECK(vkCreateDevice(info->phys, &ci, NULL, &d->dev))) return -1;
    vkGetDeviceQueue(d->dev, d->compute_family, 0, &d->compute_queue);
    d->transfer_queue = d->compute_queue;
    if (d->dedicated_transfer) vkGetDeviceQueue(d->dev, d->transfer_family, 0, &d->transfer_queue);
    if (!info->caps.timeline) return 0;
    VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                    .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                    .initialValue = 0};
    VkSemaphoreCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
    if (CVK_CHECK(vkCreateSemaphore(d->dev, &si, NULL, &d->copies.sem)) ||
        CVK_CHECK(vkCreateSemaphore(d->dev, &si, NULL, &d->compute.sem)))
        return -1;
    return 0;
}

int cvk_device_wait_copies(cvk_device *d, uint64_t value) {
    if (!d->copies.sem || value <= d->host_saw_copies) return 0;
    VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                              .semaphoreCount = 1,
                              .pSemaphores = &d->copies.sem,
                              .pValues = &value};
    VkResult r = vkWaitSemaphores(d->dev, &wi, 600ull * 1000000000ull);
    if (r == VK_TIMEOUT) return cd_fail("the GPU did not finish its copies within 600 s (hung?)");
    if (CVK_CHECK(r)) return -1;
    d->host_saw_copies = value;
    return 0;
}

static int pick(cvk_device *d, int index, uint32_t inst_api) {
    cvk_phys_info *list;
    uint32_t n;
    if (cvk_phys_list(d->instance, inst_api, &list, &n)) return -1;
    int chosen;
    int rc = cvk_phys_choose(list, n, index, &chosen);
    if (rc == 0) {
        d->info = list[chosen];
        d->index = chosen;
    }
    free(list);
    return rc;
}

int cvk_device_init(cvk_device *d, int index) { return cvk_device_open(d, index, 0); }

/* A compile-only device: statistics where the driver has them, a log for them, no semaphores. */
static int compile_only(cvk_device *d) {
    d->compile_only = true;
    d->info.caps.timeline = false;
    d->pipeline_stats = d->info.ext_pipeline_exec;
    d->shader_log = calloc(1, sizeof *d->shader_log);
    return d->shader_log ? 0 : cd_fail("out of memory");
}

int cvk_device_open(cvk_device *d, int index, uint32_t flags) {
    memset(d, 0, sizeof *d);
    cvk_instance_info ii;
    if (cvk_instance_acquire(&d->instance, &ii)) return -1;
    if (pick(d, index, ii.api)) goto fail;
    if ((flags & CVK_DEVICE_COMPILE_ONLY) && compile_only(d)) goto fail;
    d->compute_family = d->transfer_family = d->info.compute_family;
    d->dedicated_transfer = d->info.transfer_family != UINT32_MAX;
    if (d->dedicated_transfer) d->transfer_family = d->info.transfer_family;
    if (create_device(d)) goto fail;
    if (!d->pipeline_stats && cvk_pipeline_memo_init(d)) goto fail;
    return 0;
fail:
    if (d->dev) { /* a semaphore or the pipeline keeper could not be made */
        if (d->copies.sem) vkDestroySemaphore(d->dev, d->copies.sem, NULL);
        if (d->compute.sem) vkDestroySemaphore(d->dev, d->compute.sem, NULL);
        vkDestroyDevice(d->dev, NULL);
    }
    free(d->shader_log);
    cvk_instance_release();
    memset(d, 0, sizeof *d);
    return -1;
}

void cvk_device_free(cvk_device *d) {
    if (!d || !d->instance) return;
    if (d->dev) {
        if (!d->compile_only)
            vkDeviceWaitIdle(d->dev); /* nothing ran on a compile-only one (a null device crashes here) */
        if (d->copies.sem) vkDestroySemaphore(d->dev, d->copies.sem, NULL);
        if (d->compute.sem) vkDestroySemaphore(d->dev, d->compute.sem, NULL);
        cvk_pipeline_memo_free(d);
        vkDestroyDevice(d->dev, NULL);
    }
    if (d->shader_log) cvk_shader_log_free(d->shader_log);
    free(d->shader_log);
    cvk_instance_release();
    memset(d, 0, sizeof *d);
}
