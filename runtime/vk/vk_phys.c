/* Physical devices: what each one supports, and which one cinder uses. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_device.h"

int cvk_phys_type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

const char *cvk_phys_type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

static bool has_device_ext(VkPhysicalDevice p, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    bool found = false;
    if (e && vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(e[i].extensionName, name) == 0;
    free(e);
    return found;
}

/* Compute family (compute-only preferred) and transfer-only family; timestamp bits. */
static void query_queues(cvk_phys_info *o) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(o->phys, &n, NULL);
    VkQueueFamilyProperties *q = calloc(n ? n : 1, sizeof *q);
    o->compute_family = o->transfer_family = UINT32_MAX;
    if (!q) return;
    vkGetPhysicalDeviceQueueFamilyProperties(o->phys, &n, q);
    const VkQueueFlags gfx = VK_QUEUE_GRAPHICS_BIT, comp = VK_QUEUE_COMPUTE_BIT, xfer = VK_QUEUE_TRANSFER_BIT;
    for (uint32_t i = 0; i < n; i++) {
        if (!q[i].queueCount) continue;
        if ((q[i].queueFlags & comp) && !(q[i].queueFlags & gfx) && o->compute_family == UINT32_MAX)
            o->compute_family = i;
        if ((q[i].queueFlags & xfer) && !(q[i].queueFlags & (comp | gfx)) && o->transfer_family == UINT32_MAX)
            o->transfer_family = i;
    }
    for (uint32_t i = 0; i < n && o->compute_family == UINT32_MAX; i++)
        if (q[i].queueCount && (q[i].queueFlags & comp)) o->compute_family = i;
    if (o->compute_family != UINT32_MAX) {
        o->caps.timestamp_bits = q[o->compute_family].timestampValidBits;
        o->caps.timestamps = o->caps.timestamp_bits > 0;
    }
    free(q);
}

static void query_limits(cvk_phys_info *o) {
    const VkPhysicalDeviceLimits *l = &o->props.limits;
    cvk_caps *c = &o->caps;
    c->max_storage_range = l->maxStorageBufferRange;
    c->max_shared = l->maxComputeSharedMemorySize;
    for (int i = 0; i < 3; i++) {
        c->max_wg_size[i] = l->maxComputeWorkGroupSize[i];
        c->max_wg_count[i] = l->maxComputeWorkGroupCount[i];
    }
    c->max_wg_invocations = l->maxComputeWorkGroupInvocations;
    c->max_push = l->maxPushConstantsSize;
    c->storage_align = l->minStorageBufferOffsetAlignment;
    c->max_texels = l->maxTexelBufferElements;
    c->timestamp_period = l->timestampPeriod;
}

/* Properties through the 1.1/1.2/1.3 property structs (or the EXT one on a 1.2 device). */
static void query_props(cvk_phys_info *o, bool sgc_ext) {
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT sgc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceVulkan13Properties p13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
    VkPhysicalDeviceVulkan12Properties p12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES,
                                              .pNext = &p12};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                 .pNext = &p11};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    bool v13 = o->caps.api >= VK_API_VERSION_1_3;
    if (v13) p12.pNext = &p13;
    else if (sgc_ext) p12.pNext = &sgc;
    vkGetPhysicalDeviceProperties2(o->phys, &p2);
    cvk_caps *c = &o->caps;
    snprintf(o->driver_name, sizeof o->driver_name, "%s", p12.driverName);
    snprintf(o->driver_info, sizeof o->driver_info, "%s", p12.driverInfo);
    c->subgroup_size = p11.subgroupSize;
    c->subgroup_arith = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
        (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c->subgroup_shuffle = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
        (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    c->max_alloc = m3.maxMemoryAllocationSize;
    c->max_buffer = v13 ? p13.maxBufferSize : c->max_alloc;
    c->min_subgroup_size = c->max_subgroup_size = c->subgroup_size;
    uint32_t min = v13 ? p13.minSubgroupSize : sgc.minSubgroupSize;
    uint32_t max = v13 ? p13.maxSubgroupSize : sgc.maxSubgroupSize;
    VkShaderStageFlags stages = v13 ? p13.requiredSubgroupSizeStages : sgc.requiredSubgroupSizeStages;
    if ((v13 || sgc_ext) && min && max) {
        c->min_subgroup_size = min;
        c->max_subgroup_size = max;
    }
    if (!(stages & VK_SHADER_STAGE_COMPUTE_BIT)) c->subgroup_size_control = false;
}

static void query_features(cvk_phys_info *o, bool sgc_ext) {
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT sgc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    bool v13 = o->caps.api >= VK_API_VERSION_1_3;
    if (v13) f12.pNext = &f13;
    else if (sgc_ext) f12.pNext = &sgc;
    vkGetPhysicalDeviceFeatures2(o->phys, &f2);
    cvk_caps *c = &o->caps;
    c->int16 = f2.features.shaderInt16;
    c->int64 = f2.features.shaderInt64;
    c->storage16 = f11.storageBuffer16BitAccess;
    c->fp16 = f12.shaderFloat16;
    c->int8 = f12.shaderInt8;
    c->storage8 = f12.storageBuffer8BitAccess;
    c->subgroup_ext_types = f12.shaderSubgroupExtendedTypes;
    c->timeline = f12.timelineSemaphore;
    c->memory_model = f12.vulkanMemoryModel;
    c->subgroup_size_control = v13 ? f13.subgroupSizeControl : sgc.subgroupSizeControl;
    c->full_subgroups = v13 ? f13.computeFullSubgroups : sgc.computeFullSubgroups;
    c->int_dot = v13 && f13.shaderIntegerDotProduct;
}

static void judge(cvk_phys_info *o) {
    o->usable = false;
    if (o->caps.api < VK_API_VERSION_1_2)
        snprintf(o->why_not, sizeof o->why_not, "Vulkan %u.%u (needs 1.2)", VK_API_VERSION_MAJOR(o->caps.api),
                 VK_API_VERSION_MINOR(o->caps.api));
    else if (o->compute_family == UINT32_MAX) snprintf(o->why_not, sizeof o->why_not, "no compute queue");
    else if (!o->caps.subgroup_arith)
        snprintf(o->why_not, sizeof o->why_not, "no subgroup arithmetic in compute shaders");
    else o->usable = true;
}

static void phys_query(VkPhysicalDevice p, uint32_t inst_api, cvk_phys_info *o) {
    memset(o, 0, sizeof *o);
    o->phys = p;
    vkGetPhysicalDeviceProperties(p, &o->props);
    vkGetPhysicalDeviceMemoryProperties(p, &o->mem);
    o->caps.api = o->props.apiVersion < inst_api ? o->props.apiVersion : inst_api;
    query_limits(o);
    query_queues(o);
    if (o->caps.api >= VK_API_VERSION_1_2) {
        bool sgc_ext =
            o->caps.api < VK_API_VERSION_1_3 && has_device_ext(p, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
        o->ext_subgroup_size_control = sgc_ext;
        o->ext_portability_subset = has_device_ext(p, "VK_KHR_portability_subset");
        o->ext_pipeline_exec = has_device_ext(p, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
        o->ext_memory_budget = has_device_ext(p, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
        query_features(o, sgc_ext);
        query_props(o, sgc_ext);
    }
    judge(o);
}

int cvk_phys_list(VkInstance inst, uint32_t inst_api, cvk_phys_info **list, uint32_t *n) {
    *list = NULL;
    *n = 0;
    uint32_t count = 0;
    if (CVK_CHECK(vkEnumeratePhysicalDevices(inst, &count, NULL))) return -1;
    if (count == 0) return 0;
    VkPhysicalDevice *p = calloc(count, sizeof *p);
    cvk_phys_info *out = calloc(count, sizeof *out);
    if (!p || !out) {
        free(p);
        free(out);
        return cd_fail("out of memory listing Vulkan devices");
    }
    if (CVK_CHECK(vkEnumeratePhysicalDevices(inst, &count, p))) {
        free(p);
        free(out);
        return -1;
    }
    for (uint32_t i = 0; i < count; i++) phys_query(p[i], inst_api, &out[i]);
    free(p);
    *list = out;
    *n = count;
    return 0;
}

static int env_index(int *out) {
    const char *s = getenv("CINDER_DEVICE");
    *out = -1;
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 1000000)
        return cd_fail("CINDER_DEVICE=%s: expected a device index (see `cinder info --device`)", s);
    *out = (int)v;
    return 0;
}

int cvk_phys_choose(const cvk_phys_info *list, uint32_t n, int requested, int *chosen) {
    *chosen = -1;
    if (n == 0) return cd_fail("no Vulkan device found");
    if (requested < 0 && env_index(&requested)) return -1;
    if (requested >= 0) {
        if ((uint32_t)requested >= n)
            return cd_fail("Vulkan device %d does not exist (%u device%s: 0..%u)", requested, n, n == 1 ? "" : "s",
                           n - 1);
        if (!list[requested].usable)
            return cd_fail("Vulkan device %d (%s) cannot be used: %s", requested, list[requested].props.deviceName,
                           list[requested].why_not);
        *chosen = requested;
        return 0;
    }
    int best = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!list[i].usable) continue;
        if (best < 0 || cvk_phys_type_rank(list[i].props.deviceType) < cvk_phys_type_rank(list[best].props.deviceType))
            best = (int)i;
    }
    if (best < 0)
        return cd_fail("none of the %u Vulkan device%s can be used (device 0: %s)", n, n == 1 ? "" : "s",
                       list[0].why_not);
    *chosen = best;
    return 0;
}
