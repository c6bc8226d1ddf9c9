#include "runtime/vk/vk_code_id.h"

#include <stdbool.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "runtime/base/key_encode.h"
#include "shaders/shaders.h"

/* a length-prefixed field (runtime/base/key_encode.h), so no two field lists hash alike */
static void xxh_put(void *s, const void *p, size_t n) { XXH3_128bits_update(s, p, n); }
static void put(XXH3_state_t *s, const void *p, size_t n) { cd_key_bytes(xxh_put, s, p, n); }

/* /proc/cpuinfo keys that say what code a compiler for this host emits: x86, Arm, RISC-V */
static bool host_key(const char *line) {
    static const char *const keys[] = {
        "vendor_id",       "cpu family",       "model",       "model name", "flags", "Features",
        "CPU implementer", "CPU architecture", "CPU variant", "CPU part",   "isa",   "uarch"};
    size_t n = strcspn(line, ":");
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strlen(keys[i]) == n && !memcmp(line, keys[i], n)) return true;
    return false;
}

/* Hashes the first processor's kept lines, in file order (a line longer than the buffer is
 * hashed in pieces, kept or not as its first piece decides); stops at the block's blank line. */
static void put_host(XXH3_state_t *s, FILE *f) {
    char line[4096];
    bool start = true, keep = false;
    while (fgets(line, sizeof line, f)) {
        if (start && line[0] == '\n') break;
        if (start) keep = host_key(line);
        if (keep) XXH3_128bits_update(s, line, strlen(line));
        start = strchr(line, '\n') != NULL;
    }
}

void cvk_code_id(const cvk_phys_info *d, uint8_t out[CVK_CODE_ID_BYTES]) {
    FILE *f = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? fopen("/proc/cpuinfo", "r") : NULL;
    cvk_code_id_from(d, f, out);
    if (f) fclose(f);
}

void cvk_code_id_from(const cvk_phys_info *d, FILE *cpuinfo, uint8_t out[CVK_CODE_ID_BYTES]) {
    XXH3_state_t s; /* on the stack: nothing to allocate, nothing to fail */
    XXH3_128bits_reset(&s);
    const VkPhysicalDeviceProperties *p = &d->props;
    static const char domain[] = "cinder.code-id.v1";
    put(&s, domain, sizeof domain - 1);
    put(&s, &p->vendorID, sizeof p->vendorID);
    put(&s, &p->deviceID, sizeof p->deviceID);
    put(&s, &p->driverVersion, sizeof p->driverVersion);
    put(&s, p->pipelineCacheUUID, VK_UUID_SIZE);
    if (p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
        /* llvmpipe's name says its LLVM and vector width ("llvmpipe (LLVM 15.0.6, 256 bits)",
         * LP_NATIVE_VECTOR_WIDTH changes it), which its driverVersion (Mesa's) does not */
        put(&s, p->deviceName, strnlen(p->deviceName, sizeof p->deviceName));
        put(&s, d->driver_info, strnlen(d->driver_info, sizeof d->driver_info));
        put(&s, &d->caps.subgroup_size, sizeof d->caps.subgroup_size);
        if (cpuinfo) {
            static const char host[] = "host-cpu";
            put(&s, host, sizeof host - 1);
            put_host(&s, cpuinfo);
        }
    }
    for (size_t i = 0; i < cinder_spv_all_count; i++) {
        const cinder_spv_module *m = &cinder_spv_all[i];
        put(&s, m->name, strlen(m->name));
        put(&s, m->code, *m->size);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s));
    memcpy(out, c.digest, CVK_CODE_ID_BYTES);
}

void cvk_code_id_variant(uint8_t id[CVK_CODE_ID_BYTES], const char *variant) {
    XXH3_state_t s;
    XXH3_128bits_reset(&s);
    static const char domain[] = "cinder.code-id.variant.v1";
    put(&s, domain, sizeof domain - 1);
    put(&s, id, CVK_CODE_ID_BYTES);
    put(&s, variant, strlen(variant));
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s));
    memcpy(id, c.digest, CVK_CODE_ID_BYTES);
}
