/* The disk tier's directory and its trust: DIR and DIR/<namespace> created 0700 and checked
 * (ours, nobody else may write there), the HMAC key made or read (ours, 0600, whole), temp files
 * made O_EXCL, and the stale ones a crashed process left removed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kv/disk_internal.h"
#include "runtime/base/error.h"

static int mkdir_p(const char *path) {
    char *p = strdup(path);
    if (!p) return cd_fail("out of memory");
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        /* 0700: only this user may list the chunks (their tokens are in clear) or add one */
        if (mkdir(p, 0700) && errno != EEXIST) {
            rc = cd_fail("--cache-dir: cannot create %s: %s", p, strerror(errno));
            break;
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}

/* A directory we may trust: ours, and nobody else can add, replace or remove files in it. */
static int check_dir(int fd, const char *path) {
    struct stat st;
    if (fstat(fd, &st)) return cd_fail("--cache-dir: cannot stat %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return cd_fail("--cache-dir: %s is not a directory", path);
    if (st.st_uid != geteuid())
        return cd_fail("--cache-dir: %s is owned by uid %u, not by this user (uid %u): refusing to use it (its owner "
                       "could plant chunks that change what the model says); use a directory of your own",
                       path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return cd_fail("--cache-dir: %s is writable by %s (mode %04o): refusing to use it (they could plant or "
                       "replace chunks); chmod go-w it or use a directory of your own",
                       path, st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777));
    return 0;
}

/* Opens name under at (a directory fd, or AT_FDCWD with a path the user gave: a symlink there
 * is followed, the user named it) as a checked directory; the fd, or -1. */
static int open_dir(int at, const char *name, const char *shown, bool nofollow) {
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) {
        int e = errno;
        if (e == ENOTDIR || e == ELOOP)
            return cd_fail("--cache-dir: %s is not a directory%s", shown, e == ELOOP ? " (a symbolic link)" : "");
        return cd_fail("--cache-dir: cannot open %s: %s", shown, strerror(e));
    }
    if (check_dir(fd, shown)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A unique temp name in the namespace directory (the caller opens it O_EXCL). */
static void tmp_name(kv_disk_tier *d, const char *base, char *out, size_t cap) {
    snprintf(out, cap, "%s.%ld.%u.tmp", base, (long)getpid(), d->tmp_seq++);
}

/* Opens a new temp file for base (O_EXCL, 0600) in dir; a name taken by anything (a stale
 * file, a planted symlink) is passed over for the next number. The fd, or -1 with errno. */
int kv_disk_open_tmp(kv_disk_tier *d, int dir, const char *base, char *name, size_t cap) {
    for (int tries = 0; tries < 16; tries++) {
        tmp_name(d, base, name, cap);
        int fd = openat(dir, name, OPEN_NEW, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1; /* errno is EEXIST */
}

/* The key in fd: a regular file of ours, 0600 or stricter, exactly KV_DISK_KEY_BYTES bytes. */
static int read_key(kv_disk_tier *d, int fd, const char *path) {
    struct stat st;
    if (fstat(fd, &st)) return cd_fail("--cache-dir: cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cd_fail("--cache-dir: %s is not a regular file: refusing to use it", path);
    if (st.st_uid != geteuid())
        return cd_fail("--cache-dir: %s is owned by uid %u, not by this user (uid %u): refusing to use it", path,
                       (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return cd_fail("--cache-dir: %s can be read or written by others (mode %04o): anyone who can read it can forge "
                       "chunks; chmod 600 it (or remove it: a new key is made and old chunks are rewritten)",
                       path, (unsigned)(st.st_mode & 07777));
    if (st.st_size != KV_DISK_KEY_BYTES)
        return cd_fail(
            "--cache-dir: %s is %lld bytes, not %d: remove it (a new key is made and old chunks are rewritten)", path,
            (long long)st.st_size, KV_DISK_KEY_BYTES);
    ssize_t r;
    while ((r = read(fd, d->key, sizeof d->key)) < 0 && errno == EINTR) {}
    if (r != (ssize_t)sizeof d->key) return cd_fail("--cache-dir: cannot read %s", path);
    return 0;
}

/* A fresh key from the CSPRNG into top/key: written under a temp name, then hard-linked into
 * place, which fails with EEXIST when another process got there first (a reader never sees a
 * half-written key). 0: ours is in place; 1: theirs is (read it); -1: error. */
static int make_key(kv_disk_tier *d, int top, const char *path) {
    uint8_t k[KV_DISK_KEY_BYTES];
    if (RAND_bytes(k, sizeof k) != 1) return cd_fail("--cache-dir: no random bytes for a new key %s", path);
    char tmp[NAME_CAP];
    int fd = kv_disk_open_tmp(d, top, "key", tmp, sizeof tmp);
    if (fd < 0) return cd_fail("--cache-dir: cannot create %s: %s", path, strerror(errno));
    int e = 0;
    if (write(fd, k, sizeof k) != (ssize_t)sizeof k || fsync(fd)) e = errno ? errno : EIO;
    if (close(fd) && !e) e = errno;
    int rc = 0;
    if (!e && linkat(top, tmp, top, "key", 0)) e = errno;
    unlinkat(top, tmp, 0);
    if (e == EEXIST) rc = 1;
    else if (e) rc = cd_fail("--cache-dir: cannot create %s: %s", path, strerror(e));
    else {
        memcpy(d->key, k, sizeof k);
        fsync(top);
    }
    OPENSSL_cleanse(k, sizeof k);
    return rc;
}

static int load_key(kv_disk_tier *d, int top, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/key", dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = openat(top, "key", OPEN_READ);
        if (fd >= 0) {
            int rc = read_key(d, fd, path);
            close(fd);
            return rc;
        }
        if (errno == ELOOP) return cd_fail("--cache-dir: %s is a symbolic link: refusing to follow it", path);
        if (errno != ENOENT) return cd_fail("--cache-dir: cannot open %s: %s", path, strerror(errno));
        int rc = make_key(d, top, path);
        if (rc <= 0) return rc;
    }
    return cd_fail("--cache-dir: %s keeps appearing and disappearing", path);
}

int kv_disk_key(const char *dir, uint8_t key[KV_DISK_KEY_BYTES]) {
    kv_disk_tier d = {0};
    if (mkdir_p(dir)) return -1;
    int top = open_dir(AT_FDCWD, dir, dir, false);
    if (top < 0) return -1;
    int rc = load_key(&d, top, dir);
    close(top);
    memcpy(key, d.key, sizeof d.key);
    OPENSSL_cleanse(d.key, sizeof d.key);
    return rc;
}

/* The pid in a temp file name of ours ("<64 hex>.v<N>.kv.<pid>.<n>.tmp", or format 1's
 * "<64 hex>.kv.tmp.<pid>"), or 0 when the name is not one. */
static long tmp_pid(const char *s) {
    for (int i = 0; i < 2 * KV_DISK_HASH_BYTES; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    s += 2 * KV_DISK_HASH_BYTES;
    unsigned v;
    long pid;
    int end = 0;
    if (sscanf(s, ".v%u.kv.%ld.%*u.tmp%n", &v, &pid, &end) == 2 && end && !s[end]) return pid > 0 ? pid : 0;
    end = 0;
    if (sscanf(s, ".kv.tmp.%ld%n", &pid, &end) == 1 && end && !s[end]) return pid > 0 ? pid : 0;
    return 0;
}

/* Removes the temp files a crashed process left: ours by name, regular files of ours (a
 * symlink is never followed: unlinkat removes a name), whose process is gone and which are a
 * minute old, or which are an hour old (a live writer renames its file within seconds). */
void kv_disk_remove_stale_tmp(kv_disk_tier *d) {
    int fd = openat(d->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0) close(fd);
        return;
    }
    time_t now = time(NULL);
    for (struct dirent *de; (de = readdir(dp));) {
        long pid = tmp_pid(de->d_name);
        struct stat st;
        if (!pid || fstatat(d->dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        double age = difftime(now, st.st_mtime);
        bool gone = kill((pid_t)pid, 0) && errno == ESRCH;
        if (((gone && age > 60) || age > 3600) && !unlinkat(d->dir_fd, de->d_name, 0)) d->tmp_removed++;
    }
    closedir(dp);
}

/* DIR (created, checked), its key, DIR/<namespace hex> (created, checked, opened), a probe. */
int kv_disk_open_dirs(kv_disk_tier *d, const char *dir, const char *nsx) {
    if (mkdir_p(dir)) return -1;
    int top = open_dir(AT_FDCWD, dir, dir, false);
    if (top < 0) return -1;
    if (load_key(d, top, dir) ||
        (mkdirat(top, nsx, 0700) && errno != EEXIST &&
         cd_fail("--cache-dir: cannot create %s: %s", d->dir, strerror(errno)))) {
        close(top);
        return -1;
    }
    int fd = open_dir(top, nsx, d->dir, true);
    if (fd < 0) {
        close(top);
        return -1;
    }
    char probe[NAME_CAP];
    int p = kv_disk_open_tmp(d, fd, ".probe", probe, sizeof probe);
    if (p < 0) {
        int e = errno;
        close(fd);
        close(top);
        return cd_fail("--cache-dir: %s is not writable: %s", d->dir, strerror(e));
    }
    close(p);
    unlinkat(fd, probe, 0);
    d->dir_fd = fd;
    d->top_fd = top;
    return 0;
}
