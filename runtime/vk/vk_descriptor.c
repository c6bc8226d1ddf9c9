#include "runtime/vk/vk_descriptor.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_spirv.h"

#define DESCRIPTORS_PER_SET 8 /* pool sizing: average storage buffers per set */
#define TEXELS_PER_SET 2      /* and uniform texel buffers (few kernels read any) */

int cvk_descpool_init(cvk_descpool *p, cvk_device *d, uint32_t sets_per_pool) {
    memset(p, 0, sizeof *p);
    p->dev = d;
    p->sets_per_pool = sets_per_pool ? sets_per_pool : 256;
    return 0;
}

void cvk_descpool_free(cvk_descpool *p) {
    for (uint32_t i = 0; i < p->n; i++) vkDestroyDescriptorPool(p->dev->dev, p->pools[i], NULL);
    free(p->pools);
    memset(p, 0, sizeof *p);
}

int cvk_descpool_reset(cvk_descpool *p) {
    for (uint32_t i = 0; i < p->n; i++)
        if (CVK_CHECK(vkResetDescriptorPool(p->dev->dev, p->pools[i], 0))) return -1;
    p->cur = 0;
    return 0;
}

static int add_pool(cvk_descpool *p) {
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? 2 * p->cap : 4;
        VkDescriptorPool *np = realloc(p->pools, cap * sizeof *np);
        if (!np) return cd_fail("out of memory (descriptor pools)");
        p->pools = np;
        p->cap = cap;
    }
    VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, p->sets_per_pool * DESCRIPTORS_PER_SET},
                                     {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, p->sets_per_pool * TEXELS_PER_SET}};
    VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = p->sets_per_pool,
                                     .poolSizeCount = 2,
                                     .pPoolSizes = sizes};
    if (CVK_CHECK(vkCreateDescriptorPool(p->dev->dev, &ci, NULL, &p->pools[p->n]))) return -1;
    p->n++;
    return 0;
}

/* Allocates from the current pool, moving on to the next (or a new) one when it is full. */
static int alloc_set(cvk_descpool *p, VkDescriptorSetLayout layout, VkDescriptorSet *out) {
    for (;;) {
        bool fresh = p->cur == p->n;
        if (fresh && add_pool(p)) return -1;
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = p->pools[p->cur],
                                          .descriptorSetCount = 1,
                                          .pSetLayouts = &layout};
        VkResult r = vkAllocateDescriptorSets(p->dev->dev, &ai, out);
        if (r == VK_SUCCESS) return 0;
        if (fresh || (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)) return CVK_CHECK(r);
        p->cur++;
    }
}

int cvk_view_locate(const cvk_view *v, uint32_t *part, uint64_t *off) {
    const cvk_buffer *b = v->buf;
    if (!b || !b->n_parts || v->size == 0 || v->off >= b->size || b->size - v->off < v->size)
        return cd_fail("view [%llu, +%llu) outside its buffer", (unsigned long long)v->off,
                       (unsigned long long)v->size);
    uint32_t k = (uint32_t)(v->off / b->part_bytes);
    uint64_t o = v->off - (uint64_t)k * b->part_bytes;
    if (o + v->size > b->parts[k].size)
        return cd_fail("view [%llu, +%llu) straddles parts of %llu bytes", (unsigned long long)v->off,
                       (unsigned long long)v->size, (unsigned long long)b->part_bytes);
    *part = k;
    *off = o;
    return 0;
}

static int buffer_info(const cvk_device *d, const cvk_view *v, VkDescriptorBufferInfo *bi) {
    uint32_t k;
    uint64_t off;
    if (cvk_view_locate(v, &k, &off)) return -1;
    if (off % d->info.caps.storage_align)
        return cd_fail("view offset %llu is not a multiple of minStorageBufferOffsetAlignment (%llu)",
                       (unsigned long long)off, (unsigned long long)d->info.caps.storage_align);
    uint64_t room = ((v->buf->parts[k].size + 15) & ~15ull) - off; /* the VkBuffer is rounded to 16 */
    uint64_t range = (v->size + 3) & ~3ull;
    *bi = (VkDescriptorBufferInfo){v->buf->parts[k].buf, off, range <= room ? range : v->size};
    return 0;
}

/* A texel binding sees the view's whole part (cvk_part.texels); the kernel is told where the
 * view starts (cvk_texel_offset), so that must be a whole texel. */
static int texel_info(const cvk_view *v, VkBufferView *tv) {
    uint32_t k;
    uint64_t off;
    if (cvk_view_locate(v, &k, &off)) return -1;
    if (off % 16) return cd_fail("view offset %llu is not a whole 16-byte texel", (unsigned long long)off);
    if (!v->buf->parts[k].texels)
        return cd_fail("a part of %llu bytes has more texels than one texel-buffer view may",
                       (unsigned long long)v->buf->parts[k].size);
    *tv = v->buf->parts[k].texels;
    return 0;
}

int cvk_texel_offset(const cvk_view *v, uint32_t *texel) {
    uint32_t k;
    uint64_t off;
    if (cvk_view_locate(v, &k, &off)) return -1;
    if (off % 16) return cd_fail("view offset %llu is not a whole 16-byte texel", (unsigned long long)off);
    *texel = (uint32_t)(off / 16);
    return 0;
}

int cvk_descset(cvk_descpool *dp, const cvk_pipeline *p, const cvk_view *views, VkDescriptorSet *out) {
    VkDescriptorBufferInfo bi[CVK_SPIRV_MAX];
    VkBufferView tv[CVK_SPIRV_MAX];
    VkWriteDescriptorSet w[CVK_SPIRV_MAX];
    for (uint32_t i = 0; i < p->n_bindings; i++) {
        if (p->texel_bindings >> i & 1) {
            if (texel_info(&views[i], &tv[i])) return cd_fail_ctx("pipeline %s, binding %u: ", p->name, i);
            w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                          .dstBinding = i,
                                          .descriptorCount = 1,
                                          .descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER,
                                          .pTexelBufferView = &tv[i]};
            continue;
        }
        if (buffer_info(dp->dev, &views[i], &bi[i])) return cd_fail_ctx("pipeline %s, binding %u: ", p->name, i);
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    if (alloc_set(dp, p->dsl, out)) return -1;
    for (uint32_t i = 0; i < p->n_bindings; i++) w[i].dstSet = *out;
    vkUpdateDescriptorSets(dp->dev->dev, p->n_bindings, w, 0, NULL);
    return 0;
}
