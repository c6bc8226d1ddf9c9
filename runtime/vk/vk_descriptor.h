/* Descriptor sets: a growing list of pools, sets written from buffer views.
 *
 * A set is allocated and written once when a step is recorded and stays valid until its
 * pool is reset, so a recorded decode step can be replayed with no descriptor work. Each
 * binding gets one view, which must lie inside one part of its buffer (see vk_memory.h) and
 * start at a multiple of minStorageBufferOffsetAlignment. The bound range is rounded up to a
 * multiple of 4 bytes where the part allows, so kernels may read the tail through uint[].
 * Not thread-safe. */
#pragma once
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_device.h"
#include "runtime/vk/vk_memory.h"
#include "runtime/vk/vk_pipeline.h"

typedef struct cvk_descpool {
    cvk_device *dev;
    VkDescriptorPool *pools;
    uint32_t n, cap, cur; /* pools[cur] is where allocation goes next */
    uint32_t sets_per_pool;
} cvk_descpool;

int cvk_descpool_init(cvk_descpool *p, cvk_device *d, uint32_t sets_per_pool);
void cvk_descpool_free(cvk_descpool *p);
/* Frees every set allocated so far (they must no longer be in use by the device). */
int cvk_descpool_reset(cvk_descpool *p);
/* A set for pipeline p with views[i] bound at binding i, i < p->n_bindings. */
int cvk_descset(cvk_descpool *dp, const cvk_pipeline *p, const cvk_view *views, VkDescriptorSet *out);
/* For a view bound to a texel binding (cvk_pipeline_desc.texel_bindings): the 16-byte texel of
 * its part where it starts, for the kernel's push constants; fails unless that is a whole texel. */
int cvk_texel_offset(const cvk_view *v, uint32_t *texel);

/* The part a view lies in and its offset there; -1 when it straddles parts or overruns. */
int cvk_view_locate(const cvk_view *v, uint32_t *part, uint64_t *off);
/* The whole of part k. */
static inline cvk_view cvk_view_part(const cvk_buffer *b, uint32_t k) {
    return (cvk_view){b, (uint64_t)k * b->part_bytes, b->parts[k].size};
}
