#include "runtime/vk/vk_arena.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

int cvk_arena_init(cvk_arena *a, uint64_t capacity) {
    memset(a, 0, sizeof *a);
    a->capacity = capacity;
    a->cap_free = 8;
    a->free = malloc(a->cap_free * sizeof *a->free);
    if (!a->free) return cd_fail("out of memory (arena)");
    a->free[0] = (cvk_range){0, capacity};
    a->n_free = capacity ? 1 : 0;
    return 0;
}

void cvk_arena_free_all(cvk_arena *a) {
    free(a->free);
    memset(a, 0, sizeof *a);
}

/* Makes room for one more entry, so that splitting cannot fail half-way. */
static int reserve(cvk_arena *a) {
    if (a->n_free < a->cap_free) return 0;
    uint32_t cap = a->cap_free * 2;
    cvk_range *r = realloc(a->free, cap * sizeof *r);
    if (!r) return cd_fail("out of memory (arena)");
    a->free = r;
    a->cap_free = cap;
    return 0;
}

static void remove_at(cvk_arena *a, uint32_t i) {
    memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof *a->free);
    a->n_free--;
}

static void insert_at(cvk_arena *a, uint32_t i, cvk_range r) {
    memmove(&a->free[i + 1], &a->free[i], (a->n_free - i) * sizeof *a->free);
    a->free[i] = r;
    a->n_free++;
}

int cvk_arena_alloc(cvk_arena *a, uint64_t size, uint64_t align, uint64_t *off) {
    if (size == 0) return cd_fail("arena: zero-sized allocation");
    if (align < 1) align = 1;
    if (align & (align - 1)) return cd_fail("arena: alignment %llu is not a power of two", (unsigned long long)align);
    if (reserve(a)) return -1;
    for (uint32_t i = 0; i < a->n_free; i++) {
        cvk_range f = a->free[i];
        uint64_t start = (f.off + align - 1) & ~(align - 1);
        if (start < f.off || start - f.off > f.size || f.size - (start - f.off) < size) continue;
        uint64_t end = start + size, f_end = f.off + f.size;
        /* [f.off, start) stays free as a front pad, [end, f_end) as the tail. */
        remove_at(a, i);
        if (end < f_end) insert_at(a, i, (cvk_range){end, f_end - end});
        if (start > f.off) insert_at(a, i, (cvk_range){f.off, start - f.off});
        a->used += size;
        *off = start;
        return 0;
    }
    return cd_fail("arena: no free range of %llu bytes", (unsigned long long)size);
}

int cvk_arena_release(cvk_arena *a, uint64_t off, uint64_t size) {
    if (size == 0 || off > a->capacity || a->capacity - off < size)
        return cd_fail("arena: release of [%llu, +%llu) outside the arena", (unsigned long long)off,
                       (unsigned long long)size);
    if (reserve(a)) return -1;
    uint32_t i = 0; /* first free range after off */
    while (i < a->n_free && a->free[i].off < off) i++;
    bool prev_touch = i > 0 && a->free[i - 1].off + a->free[i - 1].size == off;
    bool next_touch = i < a->n_free && off + size == a->free[i].off;
    if ((i > 0 && a->free[i - 1].off + a->free[i - 1].size > off) || (i < a->n_free && off + size > a->free[i].off))
        return cd_fail("arena: release of [%llu, +%llu) overlaps free space", (unsigned long long)off,
                       (unsigned long long)size);
    if (prev_touch && next_touch) {
        a->free[i - 1].size += size + a->free[i].size;
        remove_at(a, i);
    } else if (prev_touch) {
        a->free[i - 1].size += size;
    } else if (next_touch) {
        a->free[i].off = off;
        a->free[i].size += size;
    } else {
        insert_at(a, i, (cvk_range){off, size});
    }
    a->used -= size;
    return 0;
}

int cvk_arena_check(const cvk_arena *a) {
    uint64_t free_bytes = 0;
    for (uint32_t i = 0; i < a->n_free; i++) {
        const cvk_range *r = &a->free[i];
        if (r->size == 0) return cd_fail("arena: empty free range at %u", i);
        if (r->off > a->capacity || a->capacity - r->off < r->size) return cd_fail("arena: range %u out of bounds", i);
        if (i > 0 && a->free[i - 1].off + a->free[i - 1].size >= r->off)
            return cd_fail("arena: ranges %u and %u overlap or touch", i - 1, i);
        free_bytes += r->size;
    }
    if (free_bytes + a->used != a->capacity) return cd_fail("arena: free + used != capacity");
    return 0;
}
