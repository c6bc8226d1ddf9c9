#include "runtime/vk/vk_instance.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static VkInstance shared_instance;
static cvk_instance_info shared_info;
static int refs;
static bool volk_ready;
static VkDebugUtilsMessengerEXT messenger;
static atomic_ullong validation_errors;

static bool have_instance_ext(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    bool found = false;
    if (e && vkEnumerateInstanceExtensionProperties(NULL, &n, e) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(e[i].extensionName, name) == 0;
    free(e);
    return found;
}

static bool have_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties *l = calloc(n, sizeof *l);
    bool found = false;
    if (l && vkEnumerateInstanceLayerProperties(&n, l) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(l[i].layerName, name) == 0;
    free(l);
    return found;
}

static int load_volk(void) {
    if (volk_ready) return 0;
    if (volkInitialize() != VK_SUCCESS)
        return cd_fail("no Vulkan loader (libvulkan.so.1) found; install one and a driver "
                       "(e.g. mesa-vulkan-drivers for the CPU driver lavapipe)");
    volk_ready = true;
    return 0;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                    VkDebugUtilsMessageTypeFlagsEXT type,
                                                    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)type, (void)user;
    atomic_fetch_add(&validation_errors, 1);
    fprintf(stderr, "cinder: Vulkan validation %s: %s\n",
            severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning", data->pMessage);
    return VK_FALSE;
}

uint64_t cvk_validation_errors(void) { return atomic_load(&validation_errors); }

/* The validation layer and its messenger, when CINDER_VK_VALIDATION asks and they exist. */
typedef struct validation {
    const char *layer;
    VkDebugUtilsMessengerCreateInfoEXT messenger;
    VkValidationFeaturesEXT features;
    VkValidationFeatureEnableEXT sync;
} validation;

/* 0 with validation off (CINDER_VK_VALIDATION unset, empty or 0), 1 with it set up in v, -1 when
 * it was asked for and cannot be had: a run that asks for validation never goes on without it. */
static int want_validation(validation *v) {
    const char *env = getenv("CINDER_VK_VALIDATION");
    if (!env || !*env || strcmp(env, "0") == 0) return 0;
    if (strcmp(env, "1") != 0 && strcmp(env, "sync") != 0)
        return cd_fail("CINDER_VK_VALIDATION=%s: expected 0, 1 or sync", env);
    if (!have_layer("VK_LAYER_KHRONOS_validation"))
        return cd_fail("CINDER_VK_VALIDATION=%s asks for the Vulkan validation layer (VK_LAYER_KHRONOS_validation), "
                       "which is not installed (Debian: vulkan-validationlayers; scripts/setup.sh installs it)",
                       env);
    if (!have_instance_ext(VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
        return cd_fail("CINDER_VK_VALIDATION=%s: the Vulkan loader has no %s to report validation messages", env,
                       VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    v->layer = "VK_LAYER_KHRONOS_validation";
    v->messenger =
        (VkDebugUtilsMessengerCreateInfoEXT){.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                                             .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                                 VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                                             .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
                                             .pfnUserCallback = on_validation};
    v->sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    v->features = (VkValidationFeaturesEXT){.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                            .pNext = &v->messenger,
                                            .enabledValidationFeatureCount = 1,
                                            .pEnabledValidationFeatures = &v->sync};
    if (strcmp(env, "sync") != 0) v->features.enabledValidationFeatureCount = 0;
    return 1;
}

static int create_instance(void) {
    cvk_instance_info info = {0};
    info.loader_api = volkGetInstanceVersion();
    if (info.loader_api < VK_API_VERSION_1_2)
        return cd_fail("the Vulkan loader supports API %u.%u; cinder needs 1.2 or newer",
                       VK_API_VERSION_MAJOR(info.loader_api), VK_API_VERSION_MINOR(info.loader_api));
    info.api = info.loader_api >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
    const char *exts[2];
    uint32_t n_ext = 0;
    VkInstanceCreateFlags flags = 0;
    if (have_instance_ext(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts[n_ext++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
        info.portability = true;
    }
    validation v = {0};
    int want = want_validation(&v);
    if (want < 0) return -1;
    info.validation = want == 1;
    if (info.validation) exts[n_ext++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "cinder",
                             .pEngineName = "cinder",
                             .apiVersion = info.api};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pNext = info.validation ? &v.features : NULL,
                               .flags = flags,
                               .pApplicationInfo = &app,
                               .enabledLayerCount = info.validation ? 1 : 0,
                               .ppEnabledLayerNames = &v.layer,
                               .enabledExtensionCount = n_ext,
                               .ppEnabledExtensionNames = exts};
    VkInstance inst = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ci, NULL, &inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return cd_fail("no Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER)");
    if (CVK_CHECK(r)) return -1;
    volkLoadInstance(inst);
    if (info.validation && CVK_CHECK(vkCreateDebugUtilsMessengerEXT(inst, &v.messenger, NULL, &messenger))) {
        vkDestroyInstance(inst, NULL);
        return -1;
    }
    shared_instance = inst;
    shared_info = info;
    return 0;
}

/* A forked child does not use its parent's instance (Vulkan objects do not survive a fork): it
 * makes its own on its first acquire. The lock is held across the fork, so the child's is free. */
static void lock_for_fork(void) { pthread_mutex_lock(&lock); }
static void unlock_in_parent(void) { pthread_mutex_unlock(&lock); }
static void forget_in_child(void) {
    shared_instance = VK_NULL_HANDLE;
    messenger = VK_NULL_HANDLE;
    refs = 0;
    pthread_mutex_unlock(&lock);
}

/* At exit (atexit, registered with the first instance: it runs before the destructors of the
 * driver libraries loaded for it), when no device holds the instance. */
static void destroy_at_exit(void) {
    pthread_mutex_lock(&lock);
    if (shared_instance && refs == 0) {
        if (messenger) vkDestroyDebugUtilsMessengerEXT(shared_instance, messenger, NULL);
        messenger = VK_NULL_HANDLE;
        vkDestroyInstance(shared_instance, NULL);
        shared_instance = VK_NULL_HANDLE;
    }
    pthread_mutex_unlock(&lock);
}

int cvk_instance_acquire(VkInstance *out, cvk_instance_info *info) {
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (!shared_instance) {
        rc = load_volk() ? -1 : create_instance();
        static bool registered; /* once: a failure to register only loses the cleanup */
        if (rc == 0 && !registered) {
            registered = true;
            atexit(destroy_at_exit);
            pthread_atfork(lock_for_fork, unlock_in_parent, forget_in_child);
        }
    }
    if (rc == 0) {
        refs++;
        *out = shared_instance;
        if (info) *info = shared_info;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void cvk_instance_release(void) {
    pthread_mutex_lock(&lock);
    if (refs > 0) refs--;
    pthread_mutex_unlock(&lock);
}
