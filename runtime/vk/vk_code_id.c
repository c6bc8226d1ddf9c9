#include "runtime/vk/vk_code_id.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "shaders/shaders.h"

/* a length-prefixed field, so no two field lists hash alike */
static void put(XXH3_state_t *s, const void *p, size_t n) {
    uint64_t len = n;
    XXH3_128bits_update(s, &len, sizeof len);
    XXH3_128bits_update(s, p, n);
}

void cvk_code_id(const cvk_phys_info *d, uint8_t out[CVK_CODE_ID_BYTES]) {
    XXH3_state_t s; /* on the stack: nothing to allocate, nothing to fail */
    XXH3_128bits_reset(&s);
    const VkPhysicalDeviceProperties *p = &d->props;
    static const char domain[] = "cinder.code-id.v1";
    put(&s, domain, sizeof domain - 1);
    put(&s, &p->vendorID, sizeof p->vendorID);
    put(&s, &p->deviceID, sizeof p->deviceID);
    put(&s, &p->driverVersion, sizeof p->driverVersion);
    put(&s, p->pipelineCacheUUID, VK_UUID_SIZE);
    for (size_t i = 0; i < cinder_spv_all_count; i++) {
        const cinder_spv_module *m = &cinder_spv_all[i];
        put(&s, m->name, strlen(m->name));
        put(&s, m->code, *m->size);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s));
    memcpy(out, c.digest, CVK_CODE_ID_BYTES);
}
