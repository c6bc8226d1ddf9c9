/* The code id: what decides the bits a device computes from given inputs. Vulkan leaves the
 * precision of exp, inversesqrt, division and the like to the implementation, and the driver's
 * compiler turns cinder's SPIR-V into the device's instructions; so the same kernels on another
 * device, driver or build of cinder may round differently, while one device, driver and build
 * always compute the same bits (the cache and batch invariants rest on that).
 *
 *   code id = XXH3-128( vendorID, deviceID, driverVersion, pipelineCacheUUID (the driver's
 *                       compiler), and every embedded SPIR-V module by name and words )
 *
 * The prefix cache's namespace includes it (kv_cache_namespace), so KV that another device,
 * driver or build wrote into a shared --cache-dir misses instead of being served: a request
 * served from cached pages gives the tokens it would give computed from scratch here. */
#pragma once
#include <stdint.h>

#include "runtime/vk/vk_device.h"

#define CVK_CODE_ID_BYTES 16

void cvk_code_id(const cvk_phys_info *d, uint8_t out[CVK_CODE_ID_BYTES]);
