/* The code id: what decides the bits a device computes from given inputs. Vulkan leaves the
 * precision of exp, inversesqrt, division and the like to the implementation, and the driver's
 * compiler turns cinder's SPIR-V into the device's instructions; so the same kernels on another
 * device, driver or build of cinder may round differently, while one device, driver and build
 * always compute the same bits (the cache and batch invariants rest on that).
 *
 *   code id = XXH3-128( vendorID, deviceID, driverVersion, pipelineCacheUUID (the driver's
 *                       compiler), [CPU device: deviceName, driverInfo, subgroup size, host
 *                       CPU], and every embedded SPIR-V module by name and words )
 *
 * For a device of CPU type (lavapipe) the name, driverInfo and subgroup size carry llvmpipe's
 * LLVM version and vector width, and the host CPU is the first processor of /proc/cpuinfo: its
 * vendor, family, model, model name and instruction-set flags (not its stepping, clock or count).
 *
 * A CPU driver compiles for the CPU it runs on (llvmpipe asks LLVM for the host's features), so
 * one Mesa build on two CPUs may pick other instructions (an approximate reciprocal square root
 * of another precision, say) and round differently; a GPU's code does not depend on the host.
 *
 * The prefix cache's namespace includes it (kv_cache_namespace), so KV that another device,
 * driver, host CPU or build wrote into a shared --cache-dir misses instead of being served: a
 * request served from cached pages gives the tokens it would give computed from scratch here. */
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "runtime/vk/vk_device.h"

#define CVK_CODE_ID_BYTES 16

/* Reads /proc/cpuinfo for a CPU device (where it cannot be read, the host adds nothing). */
void cvk_code_id(const cvk_phys_info *d, uint8_t out[CVK_CODE_ID_BYTES]);
/* The same with the host's cpuinfo text from a stream (NULL: none), for tests. */
void cvk_code_id_from(const cvk_phys_info *d, FILE *cpuinfo, uint8_t out[CVK_CODE_ID_BYTES]);
/* The code id of the same device running another choice among the embedded kernels (the
 * integer family of matrix-vector products, say): XXH3-128 over the id and the variant's name,
 * in a domain of its own. The caller keeps its default choice's id unchanged, so caches written
 * before a variant existed stay valid while KV the variant computed misses them. */
void cvk_code_id_variant(uint8_t id[CVK_CODE_ID_BYTES], const char *variant);
