/* The prefix cache's tiers timed against recomputing (cinder bench --restore-bench,
 * tools/bench_restore.c, which repeats rounds and reports medians): one round restores an N-token
 * prefix from the host tier and from disk files and recomputes it, through the engine's own
 * cache, host tier and disk tier, from empty tiers:
 *   recompute  the forward passes over the ids from an empty context, in chunks of the engine's
 *              pass size (the KV a miss costs)
 *   write      the whole chunks of the sequence to disk files (kv_disk_store: GPU -> staging ->
 *              file, atomic rename); a later round finds them known and writes nothing
 *   demote     kv_cache_insert of that sequence, then kv_cache_reclaim of the whole pool: every
 *              page is demoted, the device->host batch timed to completion (kv_host_sync: the
 *              copies may be asynchronous)
 *   restore    kv_cache_match + kv_cache_restore: the GPU pages allocated, the slots copied back,
 *              radix_restore (what a host hit does), plus kv_host_sync
 *   disk       from empty tiers: chain hashes, then per chunk kv_disk_read (read + validate:
 *              header, size, HMAC-SHA-256, tokens, chain) + allocate + kv_disk_upload (what a
 *              disk hit does); the files were just written, so in the OS page cache (warm)
 *   disk cold  the same after fdatasync + posix_fadvise(DONTNEED) on every file (honoured on
 *              ext4/xfs; overlay file systems may ignore it and read the page cache again)
 * The disk serves whole chunks only (N = 4800 is 18 chunks of 256, 4608 tokens). */
#pragma once
#include <stdint.h>

#include "engine/engine.h"

typedef struct engine_tier_round {
    uint32_t pages;       /* GPU pages of the prefix, all restored */
    uint64_t bytes;       /* their bytes */
    uint32_t disk_tokens; /* whole chunks of it */
    uint64_t disk_bytes;  /* file bytes read (headers, tokens, pages, checksums) */
    double recompute_ms, write_ms, demote_ms, restore_ms, disk_ms, disk_cold_ms;
} engine_tier_round;

/* The engine options a probe of prefixes up to max_n tokens needs: a context and pool of max_n,
 * 16-token pages, a host tier that holds it all, and (where *eo has none) a disk budget for its
 * chunks; the disk tier's directory stays the caller's (eo->cache_dir). */
int engine_tier_probe_opts(const model *m, uint32_t max_n, engine_opts *eo);
/* One round over ids[0..n) on an engine made with those options; -1 with a message (a tier too
 * small, a chunk not read back). */
int engine_tier_round_run(engine *e, const int32_t *ids, uint32_t n, engine_tier_round *out);

/* What a report says about the tiers: page and chunk sizes, the chunk files' directory, whether
 * the host tier's copies are asynchronous. */
typedef struct engine_tier_info {
    uint32_t page_tokens, chunk_tokens;
    uint64_t page_bytes;
    const char *disk_dir; /* the namespace's directory of chunk files; NULL: no disk tier */
    bool async_copies;
} engine_tier_info;
void engine_tier_info_get(const engine *e, engine_tier_info *out);
