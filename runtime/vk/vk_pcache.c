#include "runtime/vk/vk_pcache.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_pipeline.h"
#include "runtime/base/le_bytes.h"
#include "runtime/vk/vk_check.h"

#define HEADER 24

/* Reads the whole file; NULL (note set) when missing or unreadable. */
static uint8_t *slurp(cvk_pcache *c, size_t *len) {
    FILE *f = fopen(c->path, "rb");
    if (!f) {
        if (errno != ENOENT) snprintf(c->note, sizeof c->note, "cannot open: %s", strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 && n < (1l << 30) &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        snprintf(c->note, sizeof c->note, "unreadable");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* The payload when the file is intact and was written for this device and driver. */
static const uint8_t *validate(cvk_pcache *c, const uint8_t *buf, size_t len, size_t *n) {
    const VkPhysicalDeviceProperties *p = &c->dev->info.props;
    if (len < HEADER || memcmp(buf, "CDPC", 4) || cd_get_le32(buf + 4) != 1) {
        snprintf(c->note, sizeof c->note, "not a cinder pipeline cache");
        return NULL;
    }
    uint64_t size = cd_get_le64(buf + 8);
    if (size != len - HEADER || XXH64(buf + HEADER, size, 0) != cd_get_le64(buf + 16)) {
        snprintf(c->note, sizeof c->note, "corrupt (length or checksum mismatch)");
        return NULL;
    }
    const uint8_t *v = buf + HEADER;
    if (size < 16 + VK_UUID_SIZE || cd_get_le32(v) < 16 + VK_UUID_SIZE ||
        cd_get_le32(v + 4) != VK_PIPELINE_CACHE_HEADER_VERSION_ONE || cd_get_le32(v + 8) != p->vendorID ||
        cd_get_le32(v + 12) != p->deviceID || memcmp(v + 16, p->pipelineCacheUUID, VK_UUID_SIZE)) {
        snprintf(c->note, sizeof c->note, "written for another device or driver");
        return NULL;
    }
    *n = size;
    return v;
}

int cvk_pcache_open(cvk_pcache *c, cvk_device *d, const char *path) {
    memset(c, 0, sizeof *c);
    c->dev = d;
    if (path && !(c->path = strdup(path))) return cd_fail("out of memory");
    size_t len = 0, n = 0;
    uint8_t *buf = c->path ? slurp(c, &len) : NULL;
    const uint8_t *data = buf ? validate(c, buf, len, &n) : NULL;
    VkPipelineCacheCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, .initialDataSize = data ? n : 0, .pInitialData = data};
    VkResult r = vkCreatePipelineCache(d->dev, &ci, NULL, &c->cache);
    if (r < 0 && data) { /* the driver refused our data after all: start empty */
        snprintf(c->note, sizeof c->note, "rejected by the driver (%s)", cvk_result_name(r));
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        data = NULL;
        r = vkCreatePipelineCache(d->dev, &ci, NULL, &c->cache);
    }
    c->loaded = data != NULL;
    free(buf);
    if (CVK_CHECK(r)) {
        free(c->path);
        c->path = NULL;
        return -1;
    }
    return 0;
}

int cvk_make_parent_dirs(const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return cd_fail("path too long: %s", path);
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return cd_fail("mkdir %s: %s", tmp, strerror(errno));
        *s = '/';
    }
    return 0;
}

static int write_file(const char *path, const uint8_t *head, const void *data, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return cd_fail("%s: %s", tmp, strerror(errno));
    bool ok =
        fwrite(head, 1, HEADER, f) == HEADER && fwrite(data, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return cd_fail("writing %s: %s", path, strerror(e));
    }
    return 0;
}

int cvk_pcache_save(cvk_pcache *c) {
    if (!c->path) return 0;
    size_t n = 0;
    if (CVK_CHECK(vkGetPipelineCacheData(c->dev->dev, c->cache, &n, NULL))) return -1;
    uint8_t *data = malloc(n ? n : 1);
    if (!data) return cd_fail("out of memory");
    if (CVK_CHECK(vkGetPipelineCacheData(c->dev->dev, c->cache, &n, data))) {
        free(data);
        return -1;
    }
    uint8_t head[HEADER];
    memcpy(head, "CDPC", 4);
    cd_put_le32(head + 4, 1);
    cd_put_le64(head + 8, n);
    cd_put_le64(head + 16, XXH64(data, n, 0));
    int rc = cvk_make_parent_dirs(c->path) ? -1 : write_file(c->path, head, data, n);
    free(data);
    if (!rc) c->saved_built = cvk_pipeline_memo_built(c->dev);
    return rc;
}

void cvk_pcache_close(cvk_pcache *c) {
    if (c->cache) vkDestroyPipelineCache(c->dev->dev, c->cache, NULL);
    free(c->path);
    memset(c, 0, sizeof *c);
}

int cvk_cache_dir(char *buf, size_t n) {
    const char *dir = getenv("CINDER_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int w;
    if (dir && *dir) w = snprintf(buf, n, "%s", dir);
    else if (xdg && *xdg) w = snprintf(buf, n, "%s/cinder", xdg);
    else if (home && *home) w = snprintf(buf, n, "%s/.cache/cinder", home);
    else return cd_fail("no cache directory: set CINDER_CACHE_DIR or HOME");
    if (w < 0 || (size_t)w >= n) return cd_fail("cache directory path too long");
    return 0;
}

int cvk_pcache_default_path(const cvk_device *d, char *buf, size_t n) {
    char base[4096];
    if (cvk_cache_dir(base, sizeof base)) return -1;
    int w = snprintf(buf, n, "%s/pipelines-%04x-%04x.bin", base, d->info.props.vendorID, d->info.props.deviceID);
    if (w < 0 || (size_t)w >= n) return cd_fail("cache path too long");
    return 0;
}
