/* The disk tier's fault injection, compiled into a test build only (CINDER_TESTS,
 * CMakeLists.txt): CINDER_FAULT_DISK's list of op:N[:kind] faults, each making the N-th
 * operation of its kind fail or come up short (kv/disk_tier.h), and the read() and write() of
 * chunk bytes through the armed fault. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/disk_internal.h"
#include "runtime/base/error.h"

#ifdef CINDER_FAULT_INJECTION /* a test build's (CMakeLists.txt, CINDER_TESTS) */
int kv_disk_fault_env(kv_disk_tier *d) { return kv_disk_fault_set(d, getenv("CINDER_FAULT_DISK")); }

int kv_disk_fault_set(kv_disk_tier *d, const char *spec) {
    d->n_faults = 0;
    memset(d->n_ops, 0, sizeof d->n_ops);
    d->io_fault = 0;
    for (const char *p = spec; p && *p;) {
        static const char *ops[] = {"write", "fsync", "read", "rename", "dirsync", "unlink"},
                          *kinds[] = {"eio", "enospc", "short"};
        size_t len = strcspn(p, ",");
        char item[64];
        if (len >= sizeof item) return cd_fail("CINDER_FAULT_DISK: '%.*s' is too long", (int)len, p);
        memcpy(item, p, len);
        item[len] = 0;
        p += len + (p[len] == ',');
        char op[16] = "", kind[16] = "eio";
        unsigned nth = 0;
        int end = 0;
        if (sscanf(item, "%15[a-z]:%u%n", op, &nth, &end) != 2 ||
            (item[end] && sscanf(item + end, ":%15[a-z]", kind) != 1))
            return cd_fail("CINDER_FAULT_DISK: cannot read '%s' (op:N[:kind], op write, fsync, read, rename, dirsync "
                           "or unlink)",
                           item);
        kv_disk_fault f = {.nth = nth};
        int o = -1, k = -1;
        for (int i = 0; i < 6; i++)
            if (!strcmp(op, ops[i])) o = i;
        for (int i = 0; i < 3; i++)
            if (!strcmp(kind, kinds[i])) k = i;
        if (o < 0 || k < 0 || !nth || (o != KV_FAULT_WRITE && o != KV_FAULT_READ && k != KV_FAULT_EIO) ||
            (o == KV_FAULT_READ && k == KV_FAULT_ENOSPC))
            return cd_fail(
                "CINDER_FAULT_DISK: '%s': write:N[:eio|enospc|short], fsync:N, read:N[:eio|short], rename:N, "
                "dirsync:N or unlink:N, N >= 1",
                item);
        if (d->n_faults == KV_DISK_MAX_FAULTS)
            return cd_fail("CINDER_FAULT_DISK: at most %d faults", KV_DISK_MAX_FAULTS);
        f.op = (uint8_t)o;
        f.kind = (uint8_t)k;
        d->faults[d->n_faults++] = f;
    }
    return 0;
}

/* Counts one operation of op: the kind of the fault it must suffer, or -1. */
int kv_disk_fault_next(kv_disk_tier *d, enum kv_disk_fault_op op) {
    if (!d->n_faults) return -1;
    uint32_t n = ++d->n_ops[op];
    for (uint32_t i = 0; i < d->n_faults; i++) {
        kv_disk_fault *f = &d->faults[i];
        if (f->op == op && f->nth == n && !f->fired) {
            f->fired = true;
            return f->kind;
        }
    }
    return -1;
}

/* Arms the chunk read or written next: its fault, if any, strikes at byte `at`. */
void kv_disk_fault_arm(kv_disk_tier *d, enum kv_disk_fault_op op, uint64_t at) {
    d->io_fault = kv_disk_fault_next(d, op) + 1;
    d->io_done = 0;
    d->io_at = at;
}

void kv_disk_fault_disarm(kv_disk_tier *d) { d->io_fault = 0; }

/* write() and read() of chunk bytes, through the armed fault. */
ssize_t kv_disk_io_write(kv_disk_tier *d, int fd, const void *p, size_t n) {
    if (d->io_fault && d->io_done + n > d->io_at) {
        if (d->io_fault - 1 == KV_FAULT_SHORT && d->io_done < d->io_at) n = (size_t)(d->io_at - d->io_done);
        else return errno = d->io_fault - 1 == KV_FAULT_EIO ? EIO : ENOSPC, -1;
    }
    ssize_t w = write(fd, p, n);
    if (w > 0) d->io_done += (uint64_t)w;
    return w;
}

ssize_t kv_disk_io_read(kv_disk_tier *d, int fd, void *p, size_t n) {
    if (d->io_fault && d->io_done + n > d->io_at) {
        if (d->io_fault - 1 == KV_FAULT_EIO) return errno = EIO, -1;
        if (d->io_done >= d->io_at) return 0; /* the file ends here: truncated under us */
        n = (size_t)(d->io_at - d->io_done);
    }
    ssize_t r = read(fd, p, n);
    if (r > 0) d->io_done += (uint64_t)r;
    return r;
}
#endif
