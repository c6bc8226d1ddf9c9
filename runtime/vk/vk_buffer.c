/* Buffers: the split into parts, one VkBuffer per part, each suballocated from a block. */
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_memory.h"

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int cvk_split_plan(uint64_t size, uint64_t granule, uint64_t max_part, uint64_t *part_bytes, uint32_t *n_parts) {
    if (granule == 0) granule = 1;
    if (size == 0) return cd_fail("zero-sized buffer");
    uint64_t unit = granule / gcd64(granule, 16) * 16; /* lcm(granule, 16) */
    if (unit < granule || unit > max_part)
        return cd_fail("a row of %llu bytes does not fit one binding (max %llu bytes)", (unsigned long long)granule,
                       (unsigned long long)max_part);
    uint64_t pb = max_part / unit * unit;
    uint64_t n = (size + pb - 1) / pb;
    if (n > UINT32_MAX) return cd_fail("buffer of %llu bytes needs too many parts", (unsigned long long)size);
    *part_bytes = pb;
    *n_parts = (uint32_t)n;
    return 0;
}

static int create_part(cvk_mem *m, cvk_part *p, uint64_t size, enum cvk_mem_kind kind) {
    const cvk_device *d = m->dev;
    uint32_t families[2] = {d->compute_family, d->transfer_family};
    VkBufferCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = (size + 15) & ~15ull,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
            VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT,
        .sharingMode = d->dedicated_transfer ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE,
        .queueFamilyIndexCount = d->dedicated_transfer ? 2 : 0,
        .pQueueFamilyIndices = families};
    p->size = size;
    if (CVK_CHECK(vkCreateBuffer(d->dev, &ci, NULL, &p->buf))) return -1;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, p->buf, &req);
    p->mem_size = req.size;
    if (cvk_mem_suballoc(m, kind, req.memoryTypeBits, req.size, req.alignment, &p->block, &p->mem_off)) return -1;
    if (CVK_CHECK(vkBindBufferMemory(d->dev, p->buf, p->block->mem, p->mem_off))) return -1;
    if (ci.size / 16 > d->info.caps.max_texels) return 0; /* no view: kernels that need one say so */
    /* R32G32B32A32_UINT must support uniform texel buffers on every Vulkan device */
    VkBufferViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                                 .buffer = p->buf,
                                 .format = VK_FORMAT_R32G32B32A32_UINT,
                                 .range = ci.size};
    return CVK_CHECK(vkCreateBufferView(d->dev, &vi, NULL, &p->texels));
}

int cvk_buffer_create(cvk_mem *m, cvk_buffer *b, uint64_t size, uint64_t granule, enum cvk_mem_kind kind) {
    memset(b, 0, sizeof *b);
    b->size = size;
    b->granule = granule ? granule : 1;
    b->kind = kind;
    if (cvk_split_plan(size, b->granule, m->max_part, &b->part_bytes, &b->n_parts)) return -1;
    b->parts = calloc(b->n_parts, sizeof *b->parts);
    if (!b->parts) return cd_fail("out of memory (buffer parts)");
    b->host_visible = true;
    for (uint32_t k = 0; k < b->n_parts; k++) {
        uint64_t left = size - (uint64_t)k * b->part_bytes;
        if (create_part(m, &b->parts[k], left < b->part_bytes ? left : b->part_bytes, kind)) {
            cd_fail_ctx("buffer of %llu bytes, part %u of %u: ", (unsigned long long)size, k, b->n_parts);
            cvk_buffer_destroy(m, b);
            return -1;
        }
        b->host_visible = b->host_visible && b->parts[k].block->map;
    }
    return 0;
}

void cvk_buffer_destroy(cvk_mem *m, cvk_buffer *b) {
    for (uint32_t k = 0; b->parts && k < b->n_parts; k++) {
        cvk_part *p = &b->parts[k];
        if (p->texels) vkDestroyBufferView(m->dev->dev, p->texels, NULL);
        if (p->buf) vkDestroyBuffer(m->dev->dev, p->buf, NULL);
        if (p->block) cvk_mem_subfree(m, p->block, p->mem_off, p->mem_size);
    }
    free(b->parts);
    memset(b, 0, sizeof *b);
}

void *cvk_buffer_host_ptr(const cvk_buffer *b, uint32_t k) {
    if (k >= b->n_parts || !b->parts[k].block || !b->parts[k].block->map) return NULL;
    return b->parts[k].block->map + b->parts[k].mem_off;
}

void cvk_buffer_part_rows(const cvk_buffer *b, uint32_t k, uint64_t *row0, uint64_t *rows) {
    uint64_t rpp = b->part_bytes / b->granule;
    *row0 = (uint64_t)k * rpp;
    *rows = (b->parts[k].size + b->granule - 1) / b->granule;
}
