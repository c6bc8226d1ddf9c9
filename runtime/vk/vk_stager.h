/* Uploads and downloads through host-visible staging memory.
 *
 * Uploads are batched: cvk_stager_upload copies the bytes into one of two staging slots and
 * records a vkCmdCopyBuffer; a full slot is submitted on the transfer queue (the dedicated
 * DMA queue when the device has one) while the host fills the other, so memcpy and DMA
 * overlap. cvk_stager_flush submits what is left and waits for both slots; after it returns
 * the data is on the device (the fence wait orders it before any later submission).
 *
 *   cvk_stager st;  cvk_stager_init(&st, &dev, &mem, 64 << 20);
 *   for each tensor: cvk_stager_upload(&st, cvk_view_whole(&buf[i]), mapped_file + off[i]);
 *   cvk_stager_flush(&st);
 *
 * When the destination is itself host-visible (lavapipe, integrated GPUs, ReBAR) the bytes
 * are written straight into it unless force_staging is set (tests set it to exercise the DMA
 * path everywhere); such a direct write or read first waits on the host for the device's
 * asynchronous copies (vk_device.h), which may still be reading or writing that buffer.
 * Downloads wait for the copy; they read device results only after the
 * work producing them has completed (its cvk_cmd waited for, with a device_to_host barrier
 * recorded last when the buffer is host-visible). Not thread-safe. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_memory.h"

typedef struct cvk_stage_slot {
    cvk_buffer buf;
    uint8_t *map;
    cvk_cmd cmd;
    uint64_t fill; /* bytes staged in the open recording */
    bool open;     /* recording copies */
} cvk_stage_slot;

typedef struct cvk_stager {
    cvk_device *dev;
    cvk_mem *mem;
    uint64_t slot_bytes;
    cvk_stage_slot slot[2];
    uint32_t cur;
    cvk_buffer readback; /* created on the first staged download */
    bool force_staging;
    uint64_t bytes_staged, bytes_direct; /* statistics */
} cvk_stager;

int cvk_stager_init(cvk_stager *s, cvk_device *d, cvk_mem *m, uint64_t slot_bytes);
void cvk_stager_free(cvk_stager *s); /* waits for pending copies; does not flush open ones */
/* Queues dst.size bytes from src into dst. src may be reused once this returns. */
int cvk_stager_upload(cvk_stager *s, cvk_view dst, const void *src);
int cvk_stager_flush(cvk_stager *s);
/* Flushes uploads, then copies src.size bytes of src into dst (synchronous). */
int cvk_stager_download(cvk_stager *s, cvk_view src, void *dst);
