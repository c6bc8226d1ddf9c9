/* What the disk tier's files share inside kv/ (disk_tier.c reads, writes and keeps the budget;
 * disk_dir.c owns the directory, the key and temp files; disk_fault.c the injected faults).
 * Not for other layers: kv/disk_tier.h is the tier's interface. */
#pragma once
#include <fcntl.h>
#include <stddef.h>
#include <sys/types.h>

#include "kv/disk_tier.h"

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

/* disk_fault.c: counts one operation of op: the kind of the fault it must suffer, or -1. */
int kv_disk_fault_next(kv_disk_tier *d, enum kv_disk_fault_op op);
/* Arms the chunk read or written next: its fault, if any, strikes at byte `at`. */
void kv_disk_fault_arm(kv_disk_tier *d, enum kv_disk_fault_op op, uint64_t at);
/* write() and read() of chunk bytes, through the armed fault. */
ssize_t kv_disk_io_write(kv_disk_tier *d, int fd, const void *p, size_t n);
ssize_t kv_disk_io_read(kv_disk_tier *d, int fd, void *p, size_t n);
