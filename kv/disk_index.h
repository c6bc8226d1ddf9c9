/* The disk tier's in-memory bookkeeping: a set of chain hashes and the budget's index of the
 * chunk files under DIR (kv/disk_index.c). Included by kv/disk_tier.h, which defines the hash
 * size and the format version they key on. */
#ifndef CINDER_KV_DISK_INDEX_H
#define CINDER_KV_DISK_INDEX_H

#include <stdbool.h>
#include <stdint.h>

/* An open-addressed set of chain hashes; zero = empty slot. */
typedef struct kv_disk_set {
    uint8_t (*tab)[KV_DISK_HASH_BYTES];
    uint32_t n, cap; /* cap a power of two, at most half full */
} kv_disk_set;

/* One chunk file under DIR, in the budget's index. */
typedef struct kv_disk_file {
    uint8_t h[KV_DISK_HASH_BYTES]; /* the chain hash its name holds */
    uint64_t bytes;                /* its size (st_size) */
    int64_t used_ns;               /* last use, CLOCK_REALTIME ns: its mtime at the scan, then
                                            our reads and writes (which set its mtime to the same) */
    uint64_t stamp;                /* the tier's use counter at its last use by this process */
    uint32_t ns;                   /* its namespace directory: ns_names[ns] (0: ours) */
    uint32_t version;              /* the format version in its name (1: "<hash>.kv") */
    uint32_t older, newer;         /* the LRU list (KV_DISK_NONE at the ends); a free
                                            entry's older is the next free one */
} kv_disk_file;

/* Every chunk file under DIR, least recently used first, and ours by chain hash. */
typedef struct kv_disk_index {
    kv_disk_file *files;                          /* [cap] entries, in use or free */
    uint32_t cap, n;                              /* n in use */
    uint32_t oldest, newest, free;                /* list ends; the free list's head */
    uint32_t *map, map_cap;                       /* linear probing: entry of our namespace and version by
                                            chain hash (KV_DISK_NONE = empty); at most half full */
    char (*ns_names)[2 * KV_DISK_HASH_BYTES + 1]; /* namespace directories seen; [0] is ours */
    uint32_t n_ns;
    uint64_t bytes; /* the files' sizes summed */
} kv_disk_index;

/* The set: whether h is in it; add (an all-zero hash is never kept; out of memory, the set
 * stays as it was); remove; free (zeroed after). */
bool kv_disk_set_has(const kv_disk_set *s, const uint8_t h[KV_DISK_HASH_BYTES]);
void kv_disk_set_add(kv_disk_set *s, const uint8_t h[KV_DISK_HASH_BYTES]);
void kv_disk_set_remove(kv_disk_set *s, const uint8_t h[KV_DISK_HASH_BYTES]);
void kv_disk_set_free(kv_disk_set *s);

/* The index. Our entry (namespace 0, this format version) for chain hash h, or KV_DISK_NONE. */
uint32_t kv_disk_index_find(const kv_disk_index *x, const uint8_t *h);
/* Adds a file as the newest (one of ours already there is replaced). The entry, or KV_DISK_NONE
 * when memory ran out: the file is then not counted (the budget is checked again at a rescan). */
uint32_t kv_disk_index_add(kv_disk_index *x, uint32_t ns, uint32_t version, const uint8_t *h, uint64_t bytes,
                           int64_t used_ns, uint64_t stamp);
void kv_disk_index_remove(kv_disk_index *x, uint32_t i);
/* Entry i was used now: the newest, with this use time and stamp. */
void kv_disk_index_touch(kv_disk_index *x, uint32_t i, int64_t used_ns, uint64_t stamp);
/* Empties the index (keeps its memory and the namespace names). */
void kv_disk_index_clear(kv_disk_index *x);
void kv_disk_index_free(kv_disk_index *x);
/* The id of namespace directory name (interned; 0 is ours), or KV_DISK_NONE out of memory. */
uint32_t kv_disk_index_ns(kv_disk_index *x, const char *name);

#endif
