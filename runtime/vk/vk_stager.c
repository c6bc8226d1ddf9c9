#include "runtime/vk/vk_stager.h"

#include <string.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"

int cvk_stager_init(cvk_stager *s, cvk_device *d, cvk_mem *m, uint64_t slot_bytes) {
    memset(s, 0, sizeof *s);
    s->dev = d;
    s->mem = m;
    slot_bytes = (slot_bytes ? slot_bytes : 64ull << 20) & ~15ull;
    if (slot_bytes > m->max_part) slot_bytes = m->max_part;
    if (slot_bytes < 16) slot_bytes = 16;
    s->slot_bytes = slot_bytes;
    for (int i = 0; i < 2; i++) {
        cvk_stage_slot *sl = &s->slot[i];
        if (cvk_buffer_create(m, &sl->buf, slot_bytes, 1, CVK_MEM_UPLOAD) || cvk_cmd_init(&sl->cmd, d, true)) {
            cvk_stager_free(s);
            return cd_fail_ctx("staging buffers: ");
        }
        sl->map = cvk_buffer_host_ptr(&sl->buf, 0);
    }
    return 0;
}

void cvk_stager_free(cvk_stager *s) {
    for (int i = 0; i < 2; i++) {
        cvk_cmd_free(&s->slot[i].cmd);
        if (s->mem) cvk_buffer_destroy(s->mem, &s->slot[i].buf);
    }
    if (s->mem) cvk_buffer_destroy(s->mem, &s->readback);
    memset(s, 0, sizeof *s);
}

/* Direct writes into host-visible destination memory, part by part. */
static void write_direct(cvk_view dst, const uint8_t *src) {
    const cvk_buffer *b = dst.buf;
    for (uint64_t at = 0; at < dst.size;) {
        uint64_t abs = dst.off + at;
        uint32_t k = (uint32_t)(abs / b->part_bytes);
        uint64_t off = abs - (uint64_t)k * b->part_bytes, n = b->parts[k].size - off;
        if (n > dst.size - at) n = dst.size - at;
        memcpy((uint8_t *)cvk_buffer_host_ptr(b, k) + off, src + at, n);
        at += n;
    }
}

static int submit_slot(cvk_stager *s) {
    cvk_stage_slot *sl = &s->slot[s->cur];
    if (!sl->open) return 0;
    sl->open = false;
    if (cvk_cmd_submit(&sl->cmd)) return -1;
    s->cur ^= 1;
    return 0;
}

static int open_slot(cvk_stager *s) {
    cvk_stage_slot *sl = &s->slot[s->cur];
    if (sl->open) return 0;
    if (cvk_cmd_begin(&sl->cmd)) return -1; /* waits for this slot's previous copies */
    sl->fill = 0;
    sl->open = true;
    return 0;
}

int cvk_stager_upload(cvk_stager *s, cvk_view dst, const void *src) {
    if (!dst.buf || dst.off > dst.buf->size || dst.buf->size - dst.off < dst.size)
        return cd_fail("upload of %llu bytes at %llu outside a buffer of %llu", (unsigned long long)dst.size,
                       (unsigned long long)dst.off, dst.buf ? (unsigned long long)dst.buf->size : 0ull);
    if (dst.buf->host_visible && !s->force_staging) {
        if (cvk_device_wait_copies(s->dev, s->dev->copies.value)) return -1; /* no async copy touches it now */
        write_direct(dst, src);
        s->bytes_direct += dst.size;
        return 0;
    }
    const uint8_t *p = src;
    for (uint64_t at = 0; at < dst.size;) {
        if (open_slot(s)) return -1;
        cvk_stage_slot *sl = &s->slot[s->cur];
        uint64_t n = s->slot_bytes - sl->fill;
        if (n > dst.size - at) n = dst.size - at;
        memcpy(sl->map + sl->fill, p + at, n);
        if (cvk_cmd_copy(&sl->cmd, cvk_view_range(&sl->buf, sl->fill, n), cvk_view_range(dst.buf, dst.off + at, n)))
            return -1;
        sl->fill = (sl->fill + n + 15) & ~15ull;
        at += n;
        if (sl->fill >= s->slot_bytes && submit_slot(s)) return -1;
    }
    s->bytes_staged += dst.size;
    return 0;
}

int cvk_stager_flush(cvk_stager *s) {
    if (submit_slot(s)) return -1;
    return cvk_cmd_wait(&s->slot[0].cmd) || cvk_cmd_wait(&s->slot[1].cmd) ? -1 : 0;
}

static void read_direct(cvk_view src, uint8_t *dst) {
    const cvk_buffer *b = src.buf;
    for (uint64_t at = 0; at < src.size;) {
        uint64_t abs = src.off + at;
        uint32_t k = (uint32_t)(abs / b->part_bytes);
        uint64_t off = abs - (uint64_t)k * b->part_bytes, n = b->parts[k].size - off;
        if (n > src.size - at) n = src.size - at;
        memcpy(dst + at, (const uint8_t *)cvk_buffer_host_ptr(b, k) + off, n);
        at += n;
    }
}

int cvk_stager_download(cvk_stager *s, cvk_view src, void *dst) {
    if (!src.buf || src.off > src.buf->size || src.buf->size - src.off < src.size)
        return cd_fail("download of %llu bytes at %llu outside its buffer", (unsigned long long)src.size,
                       (unsigned long long)src.off);
    if (cvk_stager_flush(s)) return -1;
    if (src.buf->host_visible && !s->force_staging) {
        if (cvk_device_wait_copies(s->dev, s->dev->copies.value)) return -1;
        read_direct(src, dst);
        return 0;
    }
    if (!s->readback.parts && cvk_buffer_create(s->mem, &s->readback, s->slot_bytes, 1, CVK_MEM_READBACK)) return -1;
    const uint8_t *rb = cvk_buffer_host_ptr(&s->readback, 0);
    cvk_cmd *c = &s->slot[0].cmd;
    for (uint64_t at = 0; at < src.size;) {
        uint64_t n = src.size - at < s->slot_bytes ? src.size - at : s->slot_bytes;
        if (cvk_cmd_begin(c) ||
            cvk_cmd_copy(c, cvk_view_range(src.buf, src.off + at, n), cvk_view_range(&s->readback, 0, n)))
            return -1;
        cvk_barrier_transfer_to_host(c->cb);
        if (cvk_cmd_run(c)) return -1;
        memcpy((uint8_t *)dst + at, rb, n);
        at += n;
    }
    return 0;
}
