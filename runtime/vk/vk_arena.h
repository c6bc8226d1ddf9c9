/* A first-fit range allocator over [0, capacity): the bookkeeping behind each device memory
 * block (no Vulkan here, so it is tested on its own against a naive byte map).
 *
 * The free ranges are kept sorted by offset, never overlapping and never touching (a freed
 * range merges with its neighbours):
 *
 *   capacity 100, alloc 30 -> [0,30) used      free: {30..100}
 *   alloc 20 (align 16)    -> [32,52) used     free: {30..32} {52..100}   (front pad stays free)
 *   free [0,30)            ->                  free: {0..32} {52..100}    (merged with the pad)
 *
 * The caller remembers each allocation's (offset, size) and hands both back to free. A failed
 * allocation (no room, or no memory for the free list) returns -1 and changes nothing. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

typedef struct cvk_range {
    uint64_t off, size;
} cvk_range;

typedef struct cvk_arena {
    uint64_t capacity;
    uint64_t used;   /* bytes handed out (front pads not counted) */
    cvk_range *free; /* sorted by off */
    uint32_t n_free, cap_free;
} cvk_arena;

int cvk_arena_init(cvk_arena *a, uint64_t capacity);
void cvk_arena_free_all(cvk_arena *a); /* releases the bookkeeping */
/* align must be a power of two (0 or 1: none). size 0 is rejected. */
int cvk_arena_alloc(cvk_arena *a, uint64_t size, uint64_t align, uint64_t *off);
/* Returns a range handed out by cvk_arena_alloc. -1 when it overlaps free space (a bug). */
int cvk_arena_release(cvk_arena *a, uint64_t off, uint64_t size);
static inline bool cvk_arena_empty(const cvk_arena *a) { return a->used == 0; }
/* Checks the invariants (sorted, disjoint, merged, inside capacity); 0 or -1 with a reason. */
int cvk_arena_check(const cvk_arena *a);
