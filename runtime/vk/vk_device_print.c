/* `cinder info --device`: every Vulkan device, and the details of the one cinder would use. */
#include <stdlib.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_code_id.h"
#include "runtime/vk/vk_device.h"
#include "runtime/vk/vk_instance.h"

static void print_version(FILE *out, uint32_t v) {
    fprintf(out, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

static const char *yes(bool b) { return b ? "yes" : "no"; }

static void print_heaps(FILE *out, const VkPhysicalDeviceMemoryProperties *m) {
    for (uint32_t h = 0; h < m->memoryHeapCount; h++) {
        bool host_visible = false;
        for (uint32_t t = 0; t < m->memoryTypeCount; t++)
            if (m->memoryTypes[t].heapIndex == h &&
                (m->memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
                host_visible = true;
        fprintf(out, "  memory heap %u         %.1f MiB%s%s\n", h, (double)m->memoryHeaps[h].size / 1048576.0,
                (m->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) ? ", device-local" : "",
                host_visible ? ", host-visible" : "");
    }
}

static void print_details(FILE *out, const cvk_phys_info *d) {
    const cvk_caps *c = &d->caps;
    fprintf(out, "  name                  %s\n", d->props.deviceName);
    fprintf(out, "  type                  %s\n", cvk_phys_type_name(d->props.deviceType));
    fprintf(out, "  vendor:device         %04x:%04x\n", d->props.vendorID, d->props.deviceID);
    fprintf(out, "  driver                %s (%s)\n", d->driver_name, d->driver_info);
    fprintf(out, "  API version           ");
    print_version(out, d->props.apiVersion);
    fprintf(out, " (using %u.%u)\n", VK_API_VERSION_MAJOR(c->api), VK_API_VERSION_MINOR(c->api));
    fprintf(out, "  subgroup size         %u (range %u..%u, size control %s, full subgroups %s)\n", c->subgroup_size,
            c->min_subgroup_size, c->max_subgroup_size, yes(c->subgroup_size_control), yes(c->full_subgroups));
    print_heaps(out, &d->mem);
    fprintf(out, "  maxStorageBufferRange %llu\n", (unsigned long long)c->max_storage_range);
    fprintf(out, "  maxMemoryAllocation   %llu\n", (unsigned long long)c->max_alloc);
    fprintf(out, "  maxBufferSize         %llu\n", (unsigned long long)c->max_buffer);
    fprintf(out, "  shared memory         %u bytes\n", c->max_shared);
    fprintf(out, "  workgroup size        %u x %u x %u (%u invocations)\n", c->max_wg_size[0], c->max_wg_size[1],
            c->max_wg_size[2], c->max_wg_invocations);
    fprintf(out, "  workgroup count       %u x %u x %u\n", c->max_wg_count[0], c->max_wg_count[1], c->max_wg_count[2]);
    fprintf(out, "  push constants        %u bytes\n", c->max_push);
    fprintf(out, "  fp16 %s, int8 %s, int16 %s, int64 %s, 8-bit storage %s, 16-bit storage %s, int dot %s\n",
            yes(c->fp16), yes(c->int8), yes(c->int16), yes(c->int64), yes(c->storage8), yes(c->storage16),
            yes(c->int_dot));
    fprintf(out, "  timestamps            %s, period %g ns, %u valid bits\n", yes(c->timestamps),
            (double)c->timestamp_period, c->timestamp_bits);
    fprintf(out, "  queues                compute family %u", d->compute_family);
    if (d->transfer_family != UINT32_MAX) fprintf(out, ", transfer-only family %u\n", d->transfer_family);
    else fprintf(out, ", no transfer-only family\n");
    /* two machines whose shared --cache-dir never hits: do their code ids differ? */
    uint8_t id[CVK_CODE_ID_BYTES];
    cvk_code_id(d, id);
    fprintf(out, "  code id               ");
    for (int i = 0; i < CVK_CODE_ID_BYTES; i++) fprintf(out, "%02x", id[i]);
    fprintf(out, " (device, driver, kernels%s: part of the prefix cache's namespace)\n",
            d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? ", host CPU" : "");
}

int cvk_print_devices(FILE *out, int index) {
    VkInstance inst;
    cvk_instance_info ii;
    if (cvk_instance_acquire(&inst, &ii)) return -1;
    cvk_phys_info *list = NULL;
    uint32_t n = 0;
    int chosen = -1, rc = cvk_phys_list(inst, ii.api, &list, &n);
    if (rc == 0) rc = cvk_phys_choose(list, n, index, &chosen);
    if (rc == 0) {
        fprintf(out, "Vulkan loader ");
        print_version(out, ii.loader_api);
        fprintf(out, "%s; %u device%s:\n", ii.validation ? ", validation layer on" : "", n, n == 1 ? "" : "s");
        for (uint32_t i = 0; i < n; i++) {
            fprintf(out, "%c %u: %s (%s", (int)i == chosen ? '*' : ' ', i, list[i].props.deviceName,
                    cvk_phys_type_name(list[i].props.deviceType));
            if (list[i].usable) fprintf(out, ")\n");
            else fprintf(out, "; unusable: %s)\n", list[i].why_not);
        }
        fprintf(out, "\ndevice %d:\n", chosen);
        print_details(out, &list[chosen]);
    }
    free(list);
    cvk_instance_release();
    return rc;
}
