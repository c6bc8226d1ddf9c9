/* Little-endian integers in byte buffers, whatever the host: the on-disk formats cinder writes
 * (the disk tier's chunk files, the pipeline cache file) and the ggml block fields stored as
 * bytes. The key encoding (key_encode.h) feeds its numbers through a hash instead. */
#pragma once
#include <stdint.h>

static inline void cd_put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void cd_put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t cd_get_le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t cd_get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
