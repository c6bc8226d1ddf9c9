/* The disk tier's budget: the index of every chunk file under DIR (every namespace's, least
 * recently used first, rebuilt by a scan), eviction to make room, and the budget itself. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kv/disk_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/error.h"

typedef struct scanned {
    uint8_t h[KV_DISK_HASH_BYTES];
    uint64_t bytes;
    int64_t mtime_ns;
    uint32_t ns, version;
} scanned;

static int by_mtime(const void *pa, const void *pb) {
    const scanned *a = pa, *b = pb;
    if (a->mtime_ns != b->mtime_ns) return a->mtime_ns < b->mtime_ns ? -1 : 1;
    if (a->ns != b->ns) return a->ns < b->ns ? -1 : 1;
    if (a->version != b->version) return a->version < b->version ? -1 : 1;
    return memcmp(a->h, b->h, KV_DISK_HASH_BYTES);
}

/* The chunk files of one namespace directory into *v (grown; *n of *cap); -1: out of memory. */
static int scan_ns(int dfd, uint32_t ns, scanned **v, size_t *n, size_t *cap) {
    int fd = dup(dfd);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0) close(fd);
        return 0; /* unreadable: nothing counted */
    }
    int rc = 0;
    for (struct dirent *de; !rc && (de = readdir(dp));) {
        scanned f = {.ns = ns};
        struct stat st;
        if (!kv_disk_parse_chunk_name(de->d_name, f.h, &f.version) ||
            fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue; /* gone already, or not a chunk file */
        f.bytes = (uint64_t)st.st_size;
        f.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 256;
            scanned *p = realloc(*v, c * sizeof *p);
            if (!p) {
                rc = -1;
                break;
            }
            *v = p;
            *cap = c;
        }
        (*v)[(*n)++] = f;
    }
    closedir(dp);
    return rc;
}

int kv_disk_rescan(kv_disk_tier *d) {
    int fd = openat(d->top_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0) close(fd);
        return 0; /* DIR unreadable now: keep what we know */
    }
    scanned *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *de; !rc && (de = readdir(dp));) {
        if (strlen(de->d_name) != 2 * KV_DISK_HASH_BYTES || !kv_disk_parse_hash(de->d_name, NULL)) continue;
        int sub = openat(d->top_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) continue;
        uint32_t ns = kv_disk_index_ns(&d->index, de->d_name);
        rc = ns == KV_DISK_NONE ? -1 : scan_ns(sub, ns, &v, &n, &cap);
        close(sub);
    }
    closedir(dp);
    if (rc) {
        free(v);
        return cd_fail("disk tier: out of memory (the index of %s)", d->dir);
    }
    if (n) qsort(v, n, sizeof *v, by_mtime); /* v is NULL for an empty directory */
    /* our stamps survive (a write-through's own prefix stays kept) */
    uint64_t *stamps = malloc((n ? n : 1) * sizeof *stamps);
    if (!stamps) {
        free(v);
        return cd_fail("disk tier: out of memory (the index of %s)", d->dir);
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t j =
            v[i].ns == 0 && v[i].version == KV_DISK_VERSION ? kv_disk_index_find(&d->index, v[i].h) : KV_DISK_NONE;
        stamps[i] = j != KV_DISK_NONE ? d->index.files[j].stamp : 0;
    }
    kv_disk_index_clear(&d->index);
    for (size_t i = 0; i < n; i++)
        kv_disk_index_add(&d->index, v[i].ns, v[i].version, v[i].h, v[i].bytes, v[i].mtime_ns, stamps[i]);
    free(stamps);
    free(v);
    d->scans++;
    d->scan_ms = cd_now_ms();
    return 0;
}

/* Unlinks least recently used files until `bytes` more fit the budget: 1; 0 when only kept
 * files (the write-through's own prefix) are left; -1 when a file cannot be removed (said; it
 * stays in the index, so the budget still counts it, at the newest end: later writes try the
 * others first). A file gone already just
 * leaves the index; one whose mtime is newer than its entry (another process used it since our
 * scan) is moved to the newest end instead. */
int kv_disk_make_room(kv_disk_tier *d, uint64_t bytes) {
    kv_disk_index *x = &d->index;
    while (x->bytes + bytes > d->max_bytes) {
        uint32_t i = x->oldest;
        if (i == KV_DISK_NONE || x->files[i].stamp >= d->keep_from) return 0;
        kv_disk_file f = x->files[i];
        char name[NAME_CAP];
        kv_disk_file_name(f.h, f.version, name);
        int dfd = f.ns == 0 ? d->dir_fd
                            : openat(d->top_fd, x->ns_names[f.ns], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        int64_t mtime = 0;
        bool there = dfd >= 0 && !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
        if (there) mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        kv_disk_index_remove(x, i);
        if (there && mtime > f.used_ns) {
            kv_disk_index_add(x, f.ns, f.version, f.h, (uint64_t)st.st_size, mtime, f.stamp);
        } else if (there &&
                   (kv_disk_fault_next(d, KV_FAULT_UNLINK) >= 0 ? (errno = EIO, -1) : unlinkat(dfd, name, 0)) &&
                   errno != ENOENT) {
            int e = errno;
            kv_disk_index_add(x, f.ns, f.version, f.h, f.bytes, f.used_ns, f.stamp); /* still there: still counted */
            if (dfd >= 0 && dfd != d->dir_fd) close(dfd);
            kv_disk_say(
                d,
                "%s/%s: cannot remove it to keep within the budget: %s; the chunk being written stays uncached on "
                "disk",
                f.ns == 0 ? d->dir : x->ns_names[f.ns], name, strerror(e));
            return -1;
        } else if (there) {
            d->evicted_chunks++;
            d->evicted_bytes += f.bytes;
        }
        if (dfd >= 0 && dfd != d->dir_fd) close(dfd);
    }
    return 1;
}

/* The budget: max_bytes, or 10% of the free space of DIR's file system, at least the floor. */
int kv_disk_set_budget(kv_disk_tier *d, uint64_t max_bytes) {
    if (max_bytes) {
        d->max_bytes = max_bytes;
        return 0;
    }
    struct statvfs sv;
    if (fstatvfs(d->top_fd, &sv))
        return cd_fail("--cache-dir: cannot measure the free space under %s (%s): give --cache-dir-max-mb", d->dir,
                       strerror(errno));
    uint64_t free_bytes = (uint64_t)sv.f_bavail * (sv.f_frsize ? sv.f_frsize : sv.f_bsize);
    d->max_bytes = free_bytes / 10 > KV_DISK_MIN_DEFAULT_BYTES ? free_bytes / 10 : KV_DISK_MIN_DEFAULT_BYTES;
    return 0;
}
