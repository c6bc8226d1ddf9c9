/* The one key encoding of every hash cinder keys caches by: the model fingerprint
 * (runtime/model/fingerprint.c), the prefix cache's namespaces (kv/prefix_cache.c), the disk
 * tier's chunk chain (kv/disk_tier.c) and the device code id (runtime/vk/vk_code_id.c).
 *
 * Length-prefixed and domain-separated, so no two different field lists encode to the same
 * byte string (SGLang and vLLM both shipped key-aliasing bugs from plain concatenation): a
 * field is its tag then its bytes, each preceded by its length as 8 little-endian bytes; numbers
 * are little-endian whatever the host. The hash is whatever `put` feeds (SHA-256, XXH3). Changing
 * what any key encodes must change its domain string's version, so old caches miss. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*cd_key_sink)(void *hash, const void *p, size_t n);

/* n as 8 little-endian bytes, no prefix (a raw number inside a field's own layout) */
static inline void cd_key_le64(cd_key_sink put, void *h, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(h, b, 8);
}

static inline void cd_key_le32(cd_key_sink put, void *h, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(h, b, 4);
}

/* n bytes, preceded by n */
static inline void cd_key_bytes(cd_key_sink put, void *h, const void *p, size_t n) {
    cd_key_le64(put, h, n);
    if (n) put(h, p, n);
}

/* a tagged field: the tag's bytes, then the value's */
static inline void cd_key_field(cd_key_sink put, void *h, const char *tag, const void *p, size_t n) {
    cd_key_bytes(put, h, tag, strlen(tag));
    cd_key_bytes(put, h, p, n);
}

static inline void cd_key_u64(cd_key_sink put, void *h, const char *tag, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    cd_key_field(put, h, tag, b, 8);
}

static inline void cd_key_u32(cd_key_sink put, void *h, const char *tag, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    cd_key_field(put, h, tag, b, 4);
}

/* a double as its IEEE-754 bits */
static inline void cd_key_f64(cd_key_sink put, void *h, const char *tag, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    cd_key_u64(put, h, tag, u);
}
