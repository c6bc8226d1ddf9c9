/* Memory blocks: type choice, growth, suballocation, release of empty blocks. */
#include "runtime/vk/vk_memory.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_fault.h"

#define MIB (1ull << 20)

int cvk_mem_init(cvk_mem *m, cvk_device *d) {
    memset(m, 0, sizeof *m);
    m->dev = d;
    const cvk_caps *c = &d->info.caps;
    m->block_max = 1ull << 30;
    if (m->block_max > c->max_alloc) m->block_max = c->max_alloc;
    m->block_min = 32 * MIB < m->block_max ? 32 * MIB : m->block_max;
    uint64_t part = c->max_storage_range;
    if (part > c->max_buffer) part = c->max_buffer;
    if (part > c->max_alloc) part = c->max_alloc;
    m->max_part = part & ~15ull;
    return 0;
}

void cvk_mem_free(cvk_mem *m) {
    for (uint32_t i = 0; i < m->n_blocks; i++) {
        cvk_block *b = m->blocks[i];
        vkFreeMemory(m->dev->dev, b->mem, NULL); /* unmaps implicitly */
        cvk_arena_free_all(&b->arena);
        free(b);
    }
    free(m->blocks);
    memset(m, 0, sizeof *m);
}

int cvk_mem_pick_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t type_bits, enum cvk_mem_kind kind) {
    const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                BAD = VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT,
                                /* AMD's device-coherent / uncached types (VK_AMD_device_coherent_memory):
                                   every access bypasses the GPU caches; a last resort, never a match */
        SLOW = VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD | VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD;
    int best = -1, best_score = -1000;
    for (uint32_t t = 0; t < mp->memoryTypeCount; t++) {
        VkMemoryPropertyFlags f = mp->memoryTypes[t].propertyFlags;
        if (!(type_bits & (1u << t)) || (f & BAD)) continue;
        int score = 0;
        if (kind == CVK_MEM_DEVICE) {
            score = ((f & DL) ? 4 : 0) - ((f & HV) ? 1 : 0); /* keep the small BAR heap free */
        } else {
            if ((f & (HV | HC)) != (HV | HC)) continue;
            if (kind == CVK_MEM_UPLOAD) score = (f & DL) ? -1 : 0;
            else score = ((f & CA) ? 2 : 0) - ((f & DL) ? 1 : 0);
        }
        if (f & SLOW) score -= 100;
        if (score > best_score) {
            best = (int)t;
            best_score = score;
        }
    }
    return best;
}

static uint64_t next_block_size(const cvk_mem *m, enum cvk_mem_kind kind, uint64_t need) {
    uint32_t have = 0;
    for (uint32_t i = 0; i < m->n_blocks; i++) have += m->blocks[i]->kind == kind;
    uint64_t size = m->block_min;
    for (uint32_t i = 0; i < have && size < m->block_max; i++) size *= 2;
    if (size > m->block_max) size = m->block_max;
    uint64_t need_rounded = (need + MIB - 1) & ~(MIB - 1);
    return need_rounded > size ? need_rounded : size;
}

static int track_block(cvk_mem *m, cvk_block *b) {
    if (m->n_blocks == m->cap_blocks) {
        uint32_t cap = m->cap_blocks ? 2 * m->cap_blocks : 16;
        cvk_block **nb = realloc(m->blocks, cap * sizeof *nb);
        if (!nb) return cd_fail("out of memory (block list)");
        m->blocks = nb;
        m->cap_blocks = cap;
    }
    m->blocks[m->n_blocks++] = b;
    return 0;
}

/* vkAllocateMemory of *size bytes, falling back to exactly `need` when the device refuses. */
static int allocate(cvk_mem *m, uint32_t type, uint64_t *size, uint64_t need, VkDeviceMemory *out) {
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = *size, .memoryTypeIndex = type};
    VkResult r = cvk_fault_alloc() ? VK_ERROR_OUT_OF_DEVICE_MEMORY : vkAllocateMemory(m->dev->dev, &ai, NULL, out);
    if ((r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) && need < *size) {
        ai.allocationSize = *size = need;
        r = vkAllocateMemory(m->dev->dev, &ai, NULL, out);
    }
    if (CVK_CHECK(r)) return cd_fail_ctx("allocating %.1f MiB of device memory (type %u): ", (double)need / MIB, type);
    m->n_allocations++;
    return 0;
}

static int new_block(cvk_mem *m, enum cvk_mem_kind kind, uint32_t type, uint64_t need, cvk_block **out) {
    const VkPhysicalDeviceMemoryProperties *mp = &m->dev->info.mem;
    if (need > m->dev->info.caps.max_alloc)
        return cd_fail("%llu bytes exceed maxMemoryAllocationSize (%llu)", (unsigned long long)need,
                       (unsigned long long)m->dev->info.caps.max_alloc);
    cvk_block *b = calloc(1, sizeof *b);
    if (!b) return cd_fail("out of memory (block)");
    b->kind = kind;
    b->type = type;
    uint64_t size = next_block_size(m, kind, need);
    if (allocate(m, type, &size, need, &b->mem)) {
        free(b);
        return -1;
    }
    if (mp->memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
        void *p;
        if (CVK_CHECK(vkMapMemory(m->dev->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &p))) goto fail;
        b->map = p;
    }
    if (cvk_arena_init(&b->arena, size) || track_block(m, b)) goto fail;
    m->heap_bytes[mp->memoryTypes[type].heapIndex] += size;
    *out = b;
    return 0;
fail:
    vkFreeMemory(m->dev->dev, b->mem, NULL);
    cvk_arena_free_all(&b->arena);
    free(b);
    return -1;
}

uint64_t cvk_mem_heap_room(const cvk_mem *m, enum cvk_mem_kind kind, uint64_t size, uint32_t *heap, uint64_t *used) {
    const cvk_phys_info *info = &m->dev->info;
    int type = cvk_mem_pick_type(&info->mem, UINT32_MAX, kind);
    *heap = 0, *used = 0;
    if (type < 0) return 0;
    uint32_t h = *heap = info->mem.memoryTypes[type].heapIndex;
    for (uint32_t i = 0; i < m->n_blocks; i++)
        if (info->mem.memoryTypes[m->blocks[i]->type].heapIndex == h) *used += m->blocks[i]->arena.used;
    uint64_t blocks = m->heap_bytes[h], spare = blocks - *used; /* room in cinder's own blocks */
    if (size) return size > *used ? size - *used : 0;
    if (info->ext_memory_budget && !m->dev->compile_only) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                               .pNext = &b};
        vkGetPhysicalDeviceMemoryProperties2(info->phys, &p);
        if (b.heapBudget[h]) return spare + (b.heapBudget[h] > b.heapUsage[h] ? b.heapBudget[h] - b.heapUsage[h] : 0);
    }
    uint64_t usable = info->mem.memoryHeaps[h].size / 10 * 9;
    return spare + (usable > blocks ? usable - blocks : 0);
}

int cvk_mem_suballoc(cvk_mem *m, enum cvk_mem_kind kind, uint32_t type_bits, uint64_t size, uint64_t align,
                     cvk_block **block, uint64_t *off) {
    int type = cvk_mem_pick_type(&m->dev->info.mem, type_bits, kind);
    if (type < 0) return cd_fail("no memory type for %s buffers", kind == CVK_MEM_DEVICE ? "device" : "host");
    for (uint32_t i = 0; i < m->n_blocks; i++) {
        cvk_block *b = m->blocks[i];
        if (b->kind != kind || b->type != (uint32_t)type) continue;
        if (cvk_arena_alloc(&b->arena, size, align, off) == 0) {
            *block = b;
            return 0;
        }
    }
    cvk_block *b = NULL;
    if (new_block(m, kind, (uint32_t)type, size, &b)) return -1;
    if (cvk_arena_alloc(&b->arena, size, align, off)) return -1; /* cannot fail: fresh block >= size */
    *block = b;
    return 0;
}

void cvk_mem_subfree(cvk_mem *m, cvk_block *b, uint64_t off, uint64_t size) {
    if (!b) return;
    cvk_arena_release(&b->arena, off, size);
    if (!cvk_arena_empty(&b->arena)) return;
    for (uint32_t i = 0; i < m->n_blocks; i++) {
        if (m->blocks[i] != b) continue;
        m->blocks[i] = m->blocks[--m->n_blocks];
        break;
    }
    m->heap_bytes[m->dev->info.mem.memoryTypes[b->type].heapIndex] -= b->arena.capacity;
    vkFreeMemory(m->dev->dev, b->mem, NULL);
    cvk_arena_free_all(&b->arena);
    free(b);
}
