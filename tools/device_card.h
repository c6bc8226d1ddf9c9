/* The device card (`cinder profile --device`): what a Vulkan device is (identity, limits,
 * subgroup sizes, queues, memory heaps) and what it achieves (runtime/vk/vk_probe.h:
 * bandwidth, transfers, fp32/fp16 FMA and int8-dot rates), measured once and cached.
 *
 *   device_card card;
 *   if (device_card_get(vk, false, &card)) fail(cd_errmsg());  loads the cache or measures + saves
 *   device_card_override(&card, peak_gbps, peak_tflops);       the user's figures, if given
 *   double bw = device_card_peak_gbps(&card);                  what a roofline divides by
 *
 * The cache. One JSON file per device and driver under the pipeline cache's directory
 * (cvk_cache_dir: $CINDER_CACHE_DIR, else $XDG_CACHE_HOME/cinder, else ~/.cache/cinder):
 *   device-<device UUID hex>-<driverVersion hex>.json
 * holding device_card_json's object. Only the measurements are taken from it; everything
 * else is read from the live device each time. A file is used only when its format and
 * version are ours, its identity (name, vendor/device ids, UUID, driver name, info and
 * version) equals the device's, and every figure is a finite number in range (a zero where
 * the device has the feature is implausible); otherwise it is ignored (`cache_note` says
 * why), the device is measured again and the file rewritten. Files are written to a
 * temporary name and renamed, so a reader never sees half a file.
 *
 * Overrides (--peak-gbps, --peak-tflops) replace the peak read bandwidth and the fp32 rate
 * the accessors return and the card shows; the measured figures stay in `m` and only they
 * are cached. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/vk/vk_ctx.h"
#include "runtime/vk/vk_probe.h"

#define DEVICE_CARD_FORMAT "cinder.device_card"
#define DEVICE_CARD_VERSION 1
enum { DEVICE_CARD_MAX_QUEUES = 16, DEVICE_CARD_MAX_HEAPS = VK_MAX_MEMORY_HEAPS };

typedef struct device_card_queue {
    uint32_t count;          /* queues in the family */
    VkQueueFlags flags;      /* VK_QUEUE_*_BIT */
    uint32_t timestamp_bits; /* 0: no timestamps on this family */
} device_card_queue;

typedef struct device_card_heap {
    uint64_t size;     /* bytes */
    bool device_local; /* VK_MEMORY_HEAP_DEVICE_LOCAL_BIT */
    bool host_visible; /* some memory type of the heap is host-visible */
} device_card_heap;

typedef struct device_card {
    /* identity: the cache key */
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    const char *type; /* "discrete GPU", "CPU", ... (static) */
    uint32_t vendor_id, device_id;
    char driver_name[VK_MAX_DRIVER_NAME_SIZE], driver_info[VK_MAX_DRIVER_INFO_SIZE];
    uint32_t driver_version;         /* VkPhysicalDeviceProperties.driverVersion, vendor-encoded */
    char uuid[2 * VK_UUID_SIZE + 1]; /* deviceUUID, hex */
    uint32_t api_version;            /* the device's Vulkan version */
    /* measured (cached) */
    cvk_probe m;
    bool measured; /* m holds figures (measured now or loaded) */
    bool cached;   /* m was loaded from the cache file */
    /* the user's overrides; 0 = none */
    double peak_gbps_override, peak_tflops_override;
    /* features and limits */
    bool fp16, int_dot, timestamps;
    uint32_t subgroup_min, subgroup_max, subgroup_default;
    uint64_t max_storage_range; /* maxStorageBufferRange, bytes */
    uint32_t max_shared;        /* maxComputeSharedMemorySize, bytes */
    uint32_t max_wg_size[3], max_wg_invocations;
    uint32_t n_queues;
    device_card_queue queues[DEVICE_CARD_MAX_QUEUES];
    bool transfer_only_family; /* a family with transfer but neither compute nor graphics */
    uint32_t n_heaps;
    device_card_heap heaps[DEVICE_CARD_MAX_HEAPS];
    /* the cache, as device_card_get found it */
    char cache_path[4096]; /* "" when there is no cache directory */
    char cache_note[192];  /* why the file was not used or not written; "" when fine */
} device_card;

/* Identity, features, limits, queues and heaps of d; no measurement (m zeroed). */
void device_card_describe(const cvk_device *d, device_card *c);
/* device_card_describe + every probe on x's device (a second or two on lavapipe). */
int device_card_measure(cvk_ctx *x, device_card *c);
/* The probe options every later measurement uses (NULL: the defaults, as at start). For tests:
 * a card measured with a 32 MiB buffer takes a fraction of the default 256 MiB's time. */
void device_card_set_probe(const cvk_probe_opts *o);
/* The cache if it is valid for this device and refresh is false, else measures and writes
 * it (a failed write is noted in cache_note, not an error). -1 only when measuring fails. */
int device_card_get(cvk_ctx *x, bool refresh, device_card *c);

/* The cache file of c's device: <cache dir>/device-<uuid>-<driver version>.json. */
int device_card_cache_path(const device_card *c, char *buf, size_t n);
/* Loads the measurements of a described card from path: 0, or -1 with the reason in
 * cd_errmsg (missing, unreadable, not ours, another device or driver, implausible). */
int device_card_load(const char *path, device_card *c);
/* Writes c (measured) to path atomically, creating directories. */
int device_card_save(const char *path, const device_card *c);

/* The user's peaks replace the measured ones (values <= 0 leave them). */
void device_card_override(device_card *c, double peak_gbps, double peak_tflops);
/* What profiles divide by: streaming-read GB/s (or --peak-gbps); fp32 or fp16 TFLOP/s
 * (fp32: or --peak-tflops; fp16: 0 when the device has no fp16 arithmetic). */
double device_card_peak_gbps(const device_card *c);
double device_card_peak_tflops(const device_card *c, bool fp16);

/* An aligned two-column table. */
void device_card_print(FILE *out, const device_card *c);
/* The card as one JSON object (new reference; NULL when out of memory). */
json_t *device_card_json(const device_card *c);

/* `cinder profile --device [--json] [--refresh] [--peak-gbps X] [--peak-tflops Y]
 * [--device-index N]`; argv[0] is the command's name ("profile"), --device may appear
 * anywhere. Returns the exit status (1 on bad flags, after a message, as every subcommand). */
int device_card_cli(int argc, char **argv);
