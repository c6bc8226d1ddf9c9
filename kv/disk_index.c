/* The disk tier's in-memory bookkeeping (kv/disk_tier.c uses it): a set of chain hashes (the
 * names whose files a read skipped) and the budget's index of every chunk file under DIR, least
 * recently used first, ours found by chain hash. Plain memory: no file is touched here. */
#include "kv/disk_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the set ---- */

static uint32_t slot_of(const uint8_t h[KV_DISK_HASH_BYTES], uint32_t cap) {
    uint64_t v;
    memcpy(&v, h, sizeof v); /* a SHA-256: any 8 bytes are uniform */
    return (uint32_t)(v & (cap - 1));
}

static bool is_zero(const uint8_t *h) {
    for (int i = 0; i < KV_DISK_HASH_BYTES; i++)
        if (h[i]) return false;
    return true;
}

bool kv_disk_set_has(const kv_disk_set *s, const uint8_t h[KV_DISK_HASH_BYTES]) {
    if (!s->cap) return false;
    for (uint32_t i = slot_of(h, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (is_zero(s->tab[i])) return false;
        if (!memcmp(s->tab[i], h, KV_DISK_HASH_BYTES)) return true;
    }
}

static void set_put(uint8_t (*tab)[KV_DISK_HASH_BYTES], uint32_t cap, const uint8_t *h) {
    uint32_t i = slot_of(h, cap);
    while (!is_zero(tab[i]) && memcmp(tab[i], h, KV_DISK_HASH_BYTES)) i = (i + 1) & (cap - 1);
    memcpy(tab[i], h, KV_DISK_HASH_BYTES);
}

/* Adds h (an all-zero hash is never a SHA-256 output worth keeping). Out of memory: the set
 * stays as it is (a skipped name is trusted by write-through: the next read skips it again). */
void kv_disk_set_add(kv_disk_set *s, const uint8_t h[KV_DISK_HASH_BYTES]) {
    if (is_zero(h) || kv_disk_set_has(s, h)) return;
    if (2 * (s->n + 1) > s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 256;
        uint8_t(*tab)[KV_DISK_HASH_BYTES] = calloc(cap, KV_DISK_HASH_BYTES);
        if (!tab) return;
        for (uint32_t i = 0; i < s->cap; i++)
            if (!is_zero(s->tab[i])) set_put(tab, cap, s->tab[i]);
        free(s->tab);
        s->tab = tab;
        s->cap = cap;
    }
    set_put(s->tab, s->cap, h);
    s->n++;
}

void kv_disk_set_remove(kv_disk_set *s, const uint8_t h[KV_DISK_HASH_BYTES]) {
    if (!kv_disk_set_has(s, h)) return;
    /* rebuild without h (rare: only after a rejected or skipped file) */
    uint8_t(*tab)[KV_DISK_HASH_BYTES] = calloc(s->cap, KV_DISK_HASH_BYTES);
    if (!tab) return;
    for (uint32_t i = 0; i < s->cap; i++)
        if (!is_zero(s->tab[i]) && memcmp(s->tab[i], h, KV_DISK_HASH_BYTES)) set_put(tab, s->cap, s->tab[i]);
    free(s->tab);
    s->tab = tab;
    s->n--;
}

void kv_disk_set_free(kv_disk_set *s) {
    free(s->tab);
    *s = (kv_disk_set){0};
}

/* Our entry for chain hash h: its slot in the map (the entry, or the empty slot where it would go). */
static uint32_t map_slot(const kv_disk_index *x, const uint8_t *h) {
    for (uint32_t i = slot_of(h, x->map_cap);; i = (i + 1) & (x->map_cap - 1))
        if (x->map[i] == KV_DISK_NONE || !memcmp(x->files[x->map[i]].h, h, KV_DISK_HASH_BYTES)) return i;
}

uint32_t kv_disk_index_find(const kv_disk_index *x, const uint8_t *h) {
    return x->map_cap ? x->map[map_slot(x, h)] : KV_DISK_NONE;
}

static int map_grow(kv_disk_index *x) {
    uint32_t cap = x->map_cap ? 2 * x->map_cap : 256;
    uint32_t *m = malloc((size_t)cap * sizeof *m);
    if (!m) return -1;
    for (uint32_t i = 0; i < cap; i++) m[i] = KV_DISK_NONE;
    uint32_t *old = x->map, old_cap = x->map_cap;
    x->map = m;
    x->map_cap = cap;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i] != KV_DISK_NONE) x->map[map_slot(x, x->files[old[i]].h)] = old[i];
    free(old);
    return 0;
}

/* Removes the map slot i and moves later entries of its probe run back (no tombstones). */
static void map_delete(kv_disk_index *x, uint32_t i) {
    uint32_t mask = x->map_cap - 1;
    x->map[i] = KV_DISK_NONE;
    for (uint32_t j = (i + 1) & mask; x->map[j] != KV_DISK_NONE; j = (j + 1) & mask) {
        uint32_t home = slot_of(x->files[x->map[j]].h, x->map_cap);
        /* j's entry may fill the hole at i unless its home lies cyclically in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            x->map[i] = x->map[j];
            x->map[j] = KV_DISK_NONE;
            i = j;
        }
    }
}

static bool ours(const kv_disk_file *f) { return f->ns == 0 && f->version == KV_DISK_VERSION; }

static void list_unlink(kv_disk_index *x, uint32_t i) {
    kv_disk_file *f = &x->files[i];
    if (f->older != KV_DISK_NONE) x->files[f->older].newer = f->newer;
    else x->oldest = f->newer;
    if (f->newer != KV_DISK_NONE) x->files[f->newer].older = f->older;
    else x->newest = f->older;
}

static void list_push_newest(kv_disk_index *x, uint32_t i) {
    kv_disk_file *f = &x->files[i];
    f->older = x->newest;
    f->newer = KV_DISK_NONE;
    if (x->newest != KV_DISK_NONE) x->files[x->newest].newer = i;
    else x->oldest = i;
    x->newest = i;
}

void kv_disk_index_remove(kv_disk_index *x, uint32_t i) {
    kv_disk_file *f = &x->files[i];
    if (ours(f)) map_delete(x, map_slot(x, f->h));
    list_unlink(x, i);
    x->bytes -= f->bytes;
    x->n--;
    f->older = x->free;
    x->free = i;
}

/* Adds a file as the newest (one of ours already there is replaced). The entry, or KV_DISK_NONE
 * when memory ran out: the file is then not counted (the budget is checked again at a rescan). */
uint32_t kv_disk_index_add(kv_disk_index *x, uint32_t ns, uint32_t version, const uint8_t *h, uint64_t bytes,
                           int64_t used_ns, uint64_t stamp) {
    bool mine = ns == 0 && version == KV_DISK_VERSION;
    if (mine) {
        uint32_t old = kv_disk_index_find(x, h);
        if (old != KV_DISK_NONE) kv_disk_index_remove(x, old);
        if (2 * (x->n + 1) > x->map_cap && map_grow(x)) return KV_DISK_NONE;
    }
    if (x->free == KV_DISK_NONE) {
        uint32_t cap = x->cap ? 2 * x->cap : 256;
        kv_disk_file *f = realloc(x->files, (size_t)cap * sizeof *f);
        if (!f) return KV_DISK_NONE;
        x->files = f;
        for (uint32_t i = cap; i-- > x->cap;) {
            f[i].older = x->free;
            x->free = i;
        }
        x->cap = cap;
    }
    uint32_t i = x->free;
    kv_disk_file *f = &x->files[i];
    x->free = f->older;
    *f = (kv_disk_file){.bytes = bytes, .used_ns = used_ns, .stamp = stamp, .ns = ns, .version = version};
    memcpy(f->h, h, KV_DISK_HASH_BYTES);
    list_push_newest(x, i);
    if (mine) x->map[map_slot(x, h)] = i;
    x->bytes += bytes;
    x->n++;
    return i;
}

void kv_disk_index_touch(kv_disk_index *x, uint32_t i, int64_t used_ns, uint64_t stamp) {
    list_unlink(x, i);
    list_push_newest(x, i);
    x->files[i].used_ns = used_ns;
    x->files[i].stamp = stamp;
}

/* Empties the index (keeps its memory and the namespace names). */
void kv_disk_index_clear(kv_disk_index *x) {
    x->n = 0;
    x->bytes = 0;
    x->oldest = x->newest = x->free = KV_DISK_NONE;
    for (uint32_t i = x->cap; i-- > 0;) {
        x->files[i].older = x->free;
        x->free = i;
    }
    for (uint32_t i = 0; i < x->map_cap; i++) x->map[i] = KV_DISK_NONE;
}

void kv_disk_index_free(kv_disk_index *x) {
    free(x->files);
    free(x->map);
    free(x->ns_names);
    *x = (kv_disk_index){.oldest = KV_DISK_NONE, .newest = KV_DISK_NONE, .free = KV_DISK_NONE};
}

/* The id of namespace directory name (interned; 0 is ours), or KV_DISK_NONE. */
uint32_t kv_disk_index_ns(kv_disk_index *x, const char *name) {
    for (uint32_t i = 0; i < x->n_ns; i++)
        if (!strcmp(x->ns_names[i], name)) return i;
    if (!x->n_ns || (x->n_ns >= 4 && !(x->n_ns & (x->n_ns - 1)))) { /* room for 4, 8, 16, ... */
        uint32_t cap = x->n_ns ? 2 * x->n_ns : 4;
        void *p = realloc(x->ns_names, (size_t)cap * sizeof *x->ns_names);
        if (!p) return KV_DISK_NONE;
        x->ns_names = p;
    }
    snprintf(x->ns_names[x->n_ns], sizeof x->ns_names[0], "%s", name);
    return x->n_ns++;
}
