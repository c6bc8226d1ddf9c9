/* What the disk tier's files share inside kv/ (disk_tier.c: the chunk format, reads and writes;
 * disk_budget.c: the index of the files, eviction, the budget; disk_names.c: file names;
 * disk_dir.c: the directory, the key and temp files; disk_index.c: the LRU index itself;
 * disk_fault.c: the injected faults). Not for other layers: kv/disk_tier.h is the tier's
 * interface. */
#pragma once
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "kv/disk_tier.h"
#include "runtime/base/error.h"

enum { NAME_CAP = 128 }; /* a chunk or temp file's name, with room */
/* Every file below DIR: never through a symlink, never blocking on a FIFO, not inherited. */
#define OPEN_READ (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
#define OPEN_NEW (O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)

/* disk_dir.c: DIR (created, checked), its key, DIR/<nsx> (created, checked, opened into
 * d->dir_fd, DIR into d->top_fd), a write probe; -1 with a message naming the problem. */
int kv_disk_open_dirs(kv_disk_tier *d, const char *dir, const char *nsx);
/* A new temp file for base (O_EXCL, 0600) in the directory fd dir; a name taken by anything (a
 * stale file, a planted symlink) is passed over for the next number. The fd, or -1 with errno. */
int kv_disk_open_tmp(kv_disk_tier *d, int dir, const char *base, char *name, size_t cap);
/* Removes the temp files a crashed process left in the namespace directory (counted in
 * d->tmp_removed). */
void kv_disk_remove_stale_tmp(kv_disk_tier *d);

#ifdef CINDER_FAULT_INJECTION
/* disk_fault.c (a test build's): CINDER_FAULT_DISK's faults armed (init); counts one operation
 * of op: the kind of the fault it must suffer, or -1. */
int kv_disk_fault_env(kv_disk_tier *d);
int kv_disk_fault_next(kv_disk_tier *d, enum kv_disk_fault_op op);
/* Arms the chunk read or written next: its fault, if any, strikes at byte `at`; disarms it. */
void kv_disk_fault_arm(kv_disk_tier *d, enum kv_disk_fault_op op, uint64_t at);
void kv_disk_fault_disarm(kv_disk_tier *d);
/* write() and read() of chunk bytes, through the armed fault. */
ssize_t kv_disk_io_write(kv_disk_tier *d, int fd, const void *p, size_t n);
ssize_t kv_disk_io_read(kv_disk_tier *d, int fd, void *p, size_t n);
#else /* without the hooks: nothing read from the environment, the plain calls */
#include <unistd.h>
static inline int kv_disk_fault_env(kv_disk_tier *d) { return 0; }
static inline int kv_disk_fault_next(kv_disk_tier *d, enum kv_disk_fault_op op) { return -1; }
static inline void kv_disk_fault_arm(kv_disk_tier *d, enum kv_disk_fault_op op, uint64_t at) {}
static inline void kv_disk_fault_disarm(kv_disk_tier *d) {}
static inline ssize_t kv_disk_io_write(kv_disk_tier *d, int fd, const void *p, size_t n) { return write(fd, p, n); }
static inline ssize_t kv_disk_io_read(kv_disk_tier *d, int fd, void *p, size_t n) { return read(fd, p, n); }
#endif

/* disk_tier.c: a message about a file, on stderr (unless quiet) and in d->last_msg. */
void kv_disk_say(kv_disk_tier *d, const char *fmt, ...) CD_PRINTF(2, 3);

/* disk_names.c: n bytes as lower-case hex (2n digits and a NUL); the file name of chain hash h
 * in format version v, and in the current format; 64 hex digits into h (NULL: only checked),
 * the characters consumed or 0; a chunk file's name parsed into its hash and version. */
void kv_disk_hex(const uint8_t *b, size_t n, char *out);
void kv_disk_file_name(const uint8_t h[KV_DISK_HASH_BYTES], uint32_t v, char name[NAME_CAP]);
void kv_disk_chunk_name(const uint8_t h[KV_DISK_HASH_BYTES], char name[NAME_CAP]);
int kv_disk_parse_hash(const char *s, uint8_t *h);
bool kv_disk_parse_chunk_name(const char *s, uint8_t *h, uint32_t *v);

/* disk_budget.c: unlinks least recently used files until `bytes` more fit the budget (1; 0 when
 * only kept files are left; -1 when one cannot be removed, said); sets d->max_bytes from
 * max_bytes, or 10% of the file system's free space (at least the floor). */
int kv_disk_make_room(kv_disk_tier *d, uint64_t bytes);
int kv_disk_set_budget(kv_disk_tier *d, uint64_t max_bytes);
