/* Vulkan device: physical device choice, logical device, queues, capabilities.
 *
 * Choice rules (cvk_device_init with index < 0):
 *   1. an explicit index wins: the `index` argument (CLI --device N), else CINDER_DEVICE=N;
 *      an explicit index naming a device cinder cannot use is an error, never a fallback;
 *   2. otherwise the first usable device by type: discrete GPU, then integrated GPU, then
 *      virtual GPU, then CPU (lavapipe), then anything else; ties go to the lower index.
 * A device is usable when it speaks Vulkan 1.2+, has a compute queue and subgroup arithmetic
 * in compute shaders.
 *
 * Queues: one compute queue (a compute-only family is preferred, as on AMD's ACE queues) and,
 * when the device has a transfer-only family (AMD SDMA, NVIDIA copy engines), one queue of it
 * for uploads; otherwise uploads share the compute queue. Buffers are created CONCURRENT over
 * both families, so no ownership transfers are needed. Queues are not thread-safe: record and
 * submit from one thread (or lock around it).
 *
 * Enabled when present: shaderFloat16, shaderInt8, shaderInt16, shaderInt64, 8- and 16-bit
 * storage buffer access, subgroup extended types, subgroup size control + full subgroups,
 * integer dot product, timeline semaphores, the Vulkan memory model. `caps` says what was
 * enabled.
 *
 * Asynchronous copies (caps.timeline only): two timeline semaphores order the copies that the
 * host does not wait for (the host tier's, kv/host_tier.h) against everything else, on the GPU:
 *
 *   compute queue:  ... submit ──signal compute=7──► ... submit(waits copies>=3) ──► ...
 *                                        │                      ▲
 *                                        ▼ (waits compute>=7)   │ (signal copies=3)
 *   transfer queue:            async copy batch ────────────────┘
 *
 * A cvk_cmd marked `async` waits for the newest compute value its queue has not waited for yet
 * and signals copies = ++copies.value; every other submit (compute, stager) waits for the
 * newest copies value its queue has not waited for yet, and a compute-queue submit signals
 * compute = ++compute.value. A wait covers every later submission on that queue, so each queue
 * remembers the newest value it waited for and adds no wait when nothing newer is pending.
 * With one queue (lavapipe) compute_queue == transfer_queue: the waits are legal and order
 * nothing that submission order and barriers would not, and nothing overlaps. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <volk.h>

typedef struct cvk_caps {
    uint32_t api;               /* effective API version: min(instance, device) */
    bool fp16, int8, int16;     /* shaderFloat16, shaderInt8, shaderInt16 */
    bool int64;                 /* shaderInt64 */
    bool storage8, storage16;   /* storageBuffer8BitAccess, storageBuffer16BitAccess */
    bool subgroup_arith;        /* subgroup arithmetic ops in compute shaders */
    bool subgroup_shuffle;      /* subgroupShuffle / subgroupShuffleXor in compute shaders */
    bool subgroup_ext_types;    /* subgroup ops on 8/16-bit types */
    bool subgroup_size_control; /* requiredSubgroupSize works for compute */
    bool full_subgroups;        /* computeFullSubgroups */
    bool int_dot;               /* shaderIntegerDotProduct (1.3) */
    bool timeline;              /* timelineSemaphore */
    bool memory_model;          /* vulkanMemoryModel */
    bool timestamps;            /* the compute queue family writes timestamps */
    uint32_t subgroup_size, min_subgroup_size, max_subgroup_size;
    uint64_t max_storage_range; /* maxStorageBufferRange: the most bytes one binding sees */
    uint64_t max_alloc;         /* maxMemoryAllocationSize */
    uint64_t max_buffer;        /* maxBufferSize (1.3), else max_alloc */
    uint32_t max_shared;        /* maxComputeSharedMemorySize */
    uint32_t max_wg_size[3], max_wg_invocations, max_wg_count[3];
    uint32_t max_push;       /* maxPushConstantsSize */
    uint64_t storage_align;  /* minStorageBufferOffsetAlignment */
    uint64_t max_texels;     /* maxTexelBufferElements: the most texels one texel-buffer view sees */
    float timestamp_period;  /* ns per timestamp tick */
    uint32_t timestamp_bits; /* timestampValidBits of the compute family */
} cvk_caps;

/* Whether a one-dimensional workgroup of wg invocations fits the device: both its x extent
 * (maxComputeWorkGroupSize[0]) and its invocations (maxComputeWorkGroupInvocations, which may
 * be smaller) bound it. */
static inline bool cvk_wg_fits(const cvk_caps *c, uint32_t wg) {
    return wg >= 1 && wg <= c->max_wg_size[0] && wg <= c->max_wg_invocations;
}

/* What cinder knows about one physical device, before any VkDevice exists. */
typedef struct cvk_phys_info {
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    char driver_name[VK_MAX_DRIVER_NAME_SIZE];
    char driver_info[VK_MAX_DRIVER_INFO_SIZE];
    cvk_caps caps;                  /* supported (== enabled once the device exists) */
    uint32_t compute_family;        /* UINT32_MAX when none */
    uint32_t transfer_family;       /* transfer-only family, UINT32_MAX when none */
    bool ext_subgroup_size_control; /* VK_EXT_subgroup_size_control needed (1.2 device) */
    bool ext_portability_subset;    /* VK_KHR_portability_subset must be enabled */
    bool ext_pipeline_exec;         /* VK_KHR_pipeline_executable_properties (compiler statistics) */
    bool ext_memory_budget;         /* VK_EXT_memory_budget (what a heap has left, cvk_mem_heap_room) */
    bool usable;
    char why_not[96]; /* reason when !usable */
} cvk_phys_info;

/* A timeline semaphore and the last value a submission was given to signal. */
typedef struct cvk_timeline {
    VkSemaphore sem; /* VK_NULL_HANDLE without caps.timeline */
    uint64_t value;
} cvk_timeline;

typedef struct cvk_device {
    VkInstance instance;
    cvk_phys_info info;
    int index; /* position in vkEnumeratePhysicalDevices */
    VkDevice dev;
    VkQueue compute_queue;
    VkQueue transfer_queue;                   /* == compute_queue without a dedicated transfer family */
    uint32_t compute_family, transfer_family; /* equal without a dedicated transfer family */
    bool dedicated_transfer;
    /* asynchronous copies (see above; sem == VK_NULL_HANDLE without caps.timeline) */
    cvk_timeline copies;           /* signalled by async submits */
    cvk_timeline compute;          /* signalled by every compute-queue submit */
    uint64_t compute_saw_copies;   /* newest copies value the compute queue waited for */
    uint64_t transfer_saw_copies;  /* the same for the transfer queue (unused with one queue) */
    uint64_t transfer_saw_compute; /* newest compute value the transfer queue waited for */
    uint64_t host_saw_copies;      /* newest copies value the host waited for */
    uint64_t copy_waits;           /* submits that waited for copies (tests, stats) */
    /* compile only (CVK_DEVICE_COMPILE_ONLY): pipelines are compiled and measured, nothing runs */
    bool compile_only;
    bool pipeline_stats;                 /* VK_KHR_pipeline_executable_properties enabled */
    struct cvk_shader_log *shader_log;   /* every pipeline created, with its statistics (compile only) */
    struct cvk_pipeline_memo *pipelines; /* compiled pipelines, each made once (vk_pipeline.h) */
    /* pipelines are described (layouts, constants, subgroup size), not compiled: a memory plan's
     * (gpu_model_init), which needs their shapes and none of their code (vk_pipeline.h) */
    bool describe_pipelines;
    /* the pipeline cache pipelines compiled on first use go through (vk_pipeline.h): the
     * context's (cvk_ctx_init), VK_NULL_HANDLE for none */
    VkPipelineCache pcache;
} cvk_device;

/* Chooses a device (index < 0: CINDER_DEVICE, then the rules above) and creates it.
 * Fails cleanly (-1, cd_errmsg) without a loader, a driver, or any usable device. */
int cvk_device_init(cvk_device *d, int index);
/* The same with flags. CVK_DEVICE_COMPILE_ONLY: a device to compile pipelines on and read what
 * the compiler made of them (vk_shader_stats.h), e.g. RADV's null device for an RDNA family
 * that is not installed (RADV_FORCE_FAMILY): no timeline semaphores (a null device has none),
 * VK_KHR_pipeline_executable_properties enabled where present, and every pipeline created
 * with its statistics captured into shader_log. Nothing may be submitted on it. */
#define CVK_DEVICE_COMPILE_ONLY 1u
int cvk_device_open(cvk_device *d, int index, uint32_t flags);
void cvk_device_free(cvk_device *d); /* waits for the device to go idle first; NULL-safe */
/* Waits on the host until copies has reached value (no-op without caps.timeline, or when the
 * host already waited for it). Anything the CPU reads or writes in device buffers an async
 * copy may touch (host slots, a host-visible pool) needs this first. */
int cvk_device_wait_copies(cvk_device *d, uint64_t value);

/* Lists all devices, marks the chosen one and prints its details: name, type, driver, API,
 * subgroup sizes, memory heaps, limits, fp16/int8 support, timestamp period. */
int cvk_print_devices(FILE *out, int index);

/* --- building blocks (used by the above, exposed for tests and tools) --- */

/* All physical devices with their info; *list is malloc'd (free it). Needs an instance. */
int cvk_phys_list(VkInstance inst, uint32_t inst_api, cvk_phys_info **list, uint32_t *n);
/* Resolves the device to use among n: requested >= 0, else CINDER_DEVICE, else by type. */
int cvk_phys_choose(const cvk_phys_info *list, uint32_t n, int requested, int *chosen);
/* Rank of a device type for the automatic choice: lower is better. */
int cvk_phys_type_rank(VkPhysicalDeviceType t);
const char *cvk_phys_type_name(VkPhysicalDeviceType t); /* "discrete GPU", "CPU", ... */
