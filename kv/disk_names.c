/* The disk tier's file names: a chunk file is its chain hash in lower-case hex, then its
 * format's suffix ("<64 hex>.v<N>.kv"; format 1 had none), in its namespace's directory. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kv/disk_internal.h"

void kv_disk_hex(const uint8_t *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = digits[b[i] >> 4], out[2 * i + 1] = digits[b[i] & 15];
    out[2 * n] = 0;
}

/* The file name of chain hash h in format version v inside a namespace directory. */
void kv_disk_file_name(const uint8_t h[KV_DISK_HASH_BYTES], uint32_t v, char name[NAME_CAP]) {
    char hx[2 * KV_DISK_HASH_BYTES + 1];
    kv_disk_hex(h, KV_DISK_HASH_BYTES, hx);
    if (v == 1) snprintf(name, NAME_CAP, "%s.kv", hx);
    else snprintf(name, NAME_CAP, "%s.v%u.kv", hx, v);
}

void kv_disk_chunk_name(const uint8_t h[KV_DISK_HASH_BYTES], char name[NAME_CAP]) {
    kv_disk_file_name(h, KV_DISK_VERSION, name);
}

static int unhex(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* 64 lower-case hex digits into h (NULL: only checked); the characters consumed, or 0. */
int kv_disk_parse_hash(const char *s, uint8_t *h) {
    for (int i = 0; i < 2 * KV_DISK_HASH_BYTES; i++) {
        int v = unhex(s[i]);
        if (v < 0) return 0;
        if (h) h[i / 2] = (uint8_t)(i % 2 ? h[i / 2] | v : v << 4);
    }
    return 2 * KV_DISK_HASH_BYTES;
}

/* A chunk file's name: "<64 hex>.v<N>.kv" (format N >= 2) or "<64 hex>.kv" (format 1). */
bool kv_disk_parse_chunk_name(const char *s, uint8_t *h, uint32_t *v) {
    if (!kv_disk_parse_hash(s, h)) return false;
    s += 2 * KV_DISK_HASH_BYTES;
    if (!strcmp(s, ".kv")) return *v = 1, true;
    unsigned n;
    int end = 0;
    if (strncmp(s, ".v", 2) || s[2] < '1' || s[2] > '9') return false;
    return sscanf(s, ".v%u.kv%n", &n, &end) == 1 && end && !s[end] && n >= 2 && (*v = n, true);
}

void kv_disk_path(const kv_disk_tier *d, const uint8_t h[KV_DISK_HASH_BYTES], char *path, size_t cap) {
    char name[NAME_CAP];
    kv_disk_chunk_name(h, name);
    snprintf(path, cap, "%s/%s", d->dir, name);
}
