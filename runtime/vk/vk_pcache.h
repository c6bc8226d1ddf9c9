/* The VkPipelineCache, kept on disk between runs so pipelines are not recompiled each start.
 *
 * File layout (little-endian):
 *   0  "CDPC"            magic
 *   4  u32 version = 1
 *   8  u64 n             payload bytes
 *   16 u64 xxh64         XXH64(payload, seed 0)
 *   24 payload           vkGetPipelineCacheData's bytes (header: length, version, vendorID,
 *                        deviceID, pipelineCacheUUID)
 * A file that is missing, truncated, corrupt (hash mismatch) or from another device or driver
 * (Vulkan header mismatch) is ignored: the cache starts empty and `note` says why. It is never
 * an error and never reaches the driver. Saving writes a temporary file and renames it over
 * the old one, so readers never see a half-written cache. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <volk.h>

#include "runtime/vk/vk_device.h"

typedef struct cvk_pcache {
    cvk_device *dev;
    VkPipelineCache cache;
    char *path;         /* NULL: in memory only */
    bool loaded;        /* a valid file seeded the cache */
    char note[160];     /* why a file was not loaded ("" when loaded or absent) */
    size_t saved_built; /* the device's compiled pipelines at the last save (cvk_ctx_free saves again when more) */
} cvk_pcache;

/* Opens the cache, seeded from path when that file is valid (path NULL: memory only). */
int cvk_pcache_open(cvk_pcache *c, cvk_device *d, const char *path);
/* Writes the cache to its path (creating directories). No-op without a path. */
int cvk_pcache_save(cvk_pcache *c);
void cvk_pcache_close(cvk_pcache *c); /* does not save */
/* cinder's cache directory: $CINDER_CACHE_DIR, else $XDG_CACHE_HOME/cinder, else
 * $HOME/.cache/cinder (not created here). Also home to the device card (tools/device_card.h). */
int cvk_cache_dir(char *buf, size_t n);
/* mkdir -p of path's directory (0755): where cache files go (the pipeline cache, the device card). */
int cvk_make_parent_dirs(const char *path);
/* cvk_cache_dir() + /pipelines-<vendor>-<device>.bin. */
int cvk_pcache_default_path(const cvk_device *d, char *buf, size_t n);
