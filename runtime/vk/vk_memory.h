/* Device memory: a few large VkDeviceMemory blocks per memory kind, suballocated, and
 * buffers that may be larger than one binding can see.
 *
 * Blocks. Each kind (device-local, upload staging, readback) has its own blocks, created on
 * demand: the first is 32 MiB, each next one twice the last, up to 1 GiB (a request larger
 * than that gets a block of its own size). A block is a cvk_arena (first fit, merging free
 * ranges); a block that becomes empty is returned to the driver. Host-visible blocks stay
 * mapped. A 30B model's ~17 GB of weights thus take ~20 vkAllocateMemory calls, not one per
 * tensor. Not thread-safe: one thread creates and destroys buffers.
 *
 * Big buffers. One descriptor binding sees at most maxStorageBufferRange bytes (128 MiB on
 * lavapipe, 4 GiB on RDNA). A cvk_buffer is therefore a list of parts, each its own VkBuffer
 * (so each starts at offset 0 and may live in a different block):
 *
 *   granule = bytes of one row (a tensor row, a KV page): a row never straddles two parts
 *   part_bytes = the largest multiple of lcm(granule, 16) <= max_part (maxStorageBufferRange)
 *   part k holds bytes [k*part_bytes, min(size, (k+1)*part_bytes)) = rows [k*rpp, (k+1)*rpp),
 *   rpp = part_bytes / granule rows per part.
 *
 * How a kernel sees it: one binding, one part at a time. The host records one dispatch per
 * part, binding that part and passing its first row (row0) and row count in push constants;
 * the kernel handles the rows in [row0, row0 + rows) and skips others (see op_get_rows.c).
 * Most buffers have one part (always on RDNA for any tensor under 4 GiB), so this is one
 * dispatch. Descriptor arrays indexed per workgroup would need non-uniform indexing, which
 * lavapipe lacks; one dispatch per part is plain Vulkan 1.2. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <volk.h>

#include "runtime/vk/vk_arena.h"
#include "runtime/vk/vk_device.h"

enum cvk_mem_kind {
    CVK_MEM_DEVICE,   /* device-local: weights, KV pages, activations */
    CVK_MEM_UPLOAD,   /* host-visible + coherent, preferably not device-local: upload staging */
    CVK_MEM_READBACK, /* host-visible + coherent, preferably cached: downloads */
    CVK_MEM_KINDS
};

typedef struct cvk_block {
    VkDeviceMemory mem;
    uint32_t type; /* memory type index */
    enum cvk_mem_kind kind;
    uint8_t *map; /* persistently mapped when host-visible, else NULL */
    cvk_arena arena;
} cvk_block;

typedef struct cvk_mem {
    cvk_device *dev;
    cvk_block **blocks;
    uint32_t n_blocks, cap_blocks;
    uint64_t block_min, block_max;            /* block growth: min, 2*min, ... max */
    uint64_t max_part;                        /* bytes one part (binding) may hold; tests lower it */
    uint64_t n_allocations;                   /* vkAllocateMemory calls so far */
    uint64_t heap_bytes[VK_MAX_MEMORY_HEAPS]; /* bytes allocated per heap now */
} cvk_mem;

typedef struct cvk_part {
    VkBuffer buf;  /* its own VkBuffer: offsets in a part start at 0 */
    uint64_t size; /* bytes of data (the VkBuffer is rounded up to 16) */
    cvk_block *block;
    uint64_t mem_off, mem_size;
    VkBufferView texels; /* the whole part as 16-byte R32G32B32A32_UINT texels, for kernels that
                                read it as a uniform texel buffer; null when the part has more
                                texels than one view may (maxTexelBufferElements) */
} cvk_part;

typedef struct cvk_buffer {
    uint64_t size;       /* bytes */
    uint64_t granule;    /* bytes per row; rows never straddle parts */
    uint64_t part_bytes; /* capacity of each part; all but the last are full */
    uint32_t n_parts;
    cvk_part *parts;
    enum cvk_mem_kind kind;
    bool host_visible; /* every part is mapped (UMA, lavapipe, staging) */
} cvk_buffer;

/* A byte range of a buffer, as bound to a kernel or copied. */
typedef struct cvk_view {
    const cvk_buffer *buf;
    uint64_t off, size;
} cvk_view;

int cvk_mem_init(cvk_mem *m, cvk_device *d);
void cvk_mem_free(cvk_mem *m); /* all buffers must have been destroyed */

/* A buffer of `size` bytes whose parts never split a `granule`-byte row (0 or 1: bytes).
 * Usable as storage buffer, copy source and destination, and indirect dispatch arguments. */
int cvk_buffer_create(cvk_mem *m, cvk_buffer *b, uint64_t size, uint64_t granule, enum cvk_mem_kind kind);
void cvk_buffer_destroy(cvk_mem *m, cvk_buffer *b); /* zeroed buffers are fine */

/* Host pointer to part k's first byte; NULL unless host-visible. */
void *cvk_buffer_host_ptr(const cvk_buffer *b, uint32_t k);
/* Rows held by part k: [*row0, *row0 + *rows). */
void cvk_buffer_part_rows(const cvk_buffer *b, uint32_t k, uint64_t *row0, uint64_t *rows);
static inline cvk_view cvk_view_whole(const cvk_buffer *b) { return (cvk_view){b, 0, b->size}; }
static inline cvk_view cvk_view_range(const cvk_buffer *b, uint64_t off, uint64_t size) {
    return (cvk_view){b, off, size};
}

/* The split rule above, on its own: part capacity and count for size bytes. */
int cvk_split_plan(uint64_t size, uint64_t granule, uint64_t max_part, uint64_t *part_bytes, uint32_t *n_parts);
/* Memory type for a kind among the allowed type bits; -1 when none fits. Protected and lazily
 * allocated types never; AMD's device-coherent/uncached types only when nothing else fits. */
int cvk_mem_pick_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t type_bits, enum cvk_mem_kind kind);

/* Bytes of memory still free to this process on the heap that `kind` buffers go to (*heap: its
 * index; *used: the bytes cinder's buffers hold on it): the room left in cinder's own blocks
 * there, plus the driver's budget less its usage (VK_EXT_memory_budget, which counts other
 * processes' use), else plus 90% of the heap less cinder's blocks. With size (a memory size to
 * plan against instead of the device's, e.g. a smaller card simulated) nonzero: size less
 * *used. */
uint64_t cvk_mem_heap_room(const cvk_mem *m, enum cvk_mem_kind kind, uint64_t size, uint32_t *heap, uint64_t *used);

/* The suballocator under cvk_buffer_create: a range of `size` bytes aligned to `align` in a
 * block of the kind's memory type (among type_bits), creating a block when none has room. */
int cvk_mem_suballoc(cvk_mem *m, enum cvk_mem_kind kind, uint32_t type_bits, uint64_t size, uint64_t align,
                     cvk_block **block, uint64_t *off);
void cvk_mem_subfree(cvk_mem *m, cvk_block *block, uint64_t off, uint64_t size);
