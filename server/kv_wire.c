#include "server/kv_wire.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* Grows *p (of *cap elements of size sz) to hold need; false when out of memory. */
static bool grow(void **p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * sz);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

void kv_wire_append(kv_wire_batch *b, const kv_event *ev) {
    if (b->lost) return;
    size_t n_tok = ev->kind == KV_EVENT_STORED ? (size_t)ev->n * ev->page_tokens : 0;
    size_t cap_ev = b->cap_ev;
    bool ok = grow((void **)&b->ev, &cap_ev, (size_t)b->n_ev + 1, sizeof *b->ev) &&
        grow((void **)&b->hash, &b->cap_hash, b->n_hash + ev->n, sizeof *b->hash) &&
        grow((void **)&b->tok, &b->cap_tok, b->n_tok + n_tok, sizeof *b->tok);
    b->cap_ev = (uint32_t)cap_ev;
    if (!ok) {
        b->lost = true;
        return;
    }
    b->page_tokens = ev->page_tokens;
    b->ev[b->n_ev++] = (kv_wire_event){.kind = (uint8_t)ev->kind,
                                       .medium = (uint8_t)ev->medium,
                                       .n = ev->n,
                                       .parent = ev->parent,
                                       .hash_at = b->n_hash,
                                       .tok_at = b->n_tok};
    if (ev->n) memcpy(b->hash + b->n_hash, ev->hashes, ev->n * sizeof *b->hash);
    if (n_tok) memcpy(b->tok + b->n_tok, ev->tokens, n_tok * sizeof *b->tok);
    b->n_hash += ev->n;
    b->n_tok += n_tok;
}

void kv_wire_reset(kv_wire_batch *b) {
    b->n_ev = 0;
    b->n_hash = b->n_tok = 0;
    b->lost = false;
    b->next = NULL;
}

void kv_wire_free(kv_wire_batch *b) {
    free(b->ev);
    free(b->hash);
    free(b->tok);
    *b = (kv_wire_batch){0};
}

size_t kv_wire_bytes(const kv_wire_batch *b) {
    return sizeof *b + b->cap_ev * sizeof *b->ev + b->cap_hash * sizeof *b->hash + b->cap_tok * sizeof *b->tok;
}

static int pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static int pack_hashes(msgpack_packer *pk, const uint64_t *h, uint32_t n) {
    int rc = msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n && !rc; i++) rc = msgpack_pack_uint64(pk, h[i]);
    return rc;
}

/* A field of an event: its name first in the map encoding, nothing in the array one. */
static int pack_key(msgpack_packer *pk, bool map, const char *name) { return map ? pack_str(pk, name) : 0; }

/* The event's head: [tag, ...] of n fields (the tag counted), or {"type": tag, ...}. */
static int pack_head(msgpack_packer *pk, bool map, uint32_t n, const char *tag) {
    return (map ? msgpack_pack_map(pk, n) || pack_str(pk, "type") : msgpack_pack_array(pk, n)) || pack_str(pk, tag);
}

static int pack_event(msgpack_packer *pk, const kv_wire_batch *b, const kv_wire_event *e, bool map) {
    const char *medium = e->medium == KV_MEDIUM_CPU ? "CPU" : "GPU";
    const uint64_t *h = b->hash + e->hash_at;
    switch (e->kind) {
    case KV_EVENT_STORED: {
        uint32_t n_tok = e->n * b->page_tokens;
        int rc = pack_head(pk, map, 7, "BlockStored") || pack_key(pk, map, "block_hashes") ||
            pack_hashes(pk, h, e->n) || pack_key(pk, map, "parent_block_hash") ||
            (e->parent ? msgpack_pack_uint64(pk, e->parent) : msgpack_pack_nil(pk)) || pack_key(pk, map, "token_ids") ||
            msgpack_pack_array(pk, n_tok);
        for (uint32_t i = 0; i < n_tok && !rc; i++) rc = msgpack_pack_int32(pk, b->tok[e->tok_at + i]);
        return rc || pack_key(pk, map, "block_size") || msgpack_pack_uint32(pk, b->page_tokens) ||
            pack_key(pk, map, "lora_id") || msgpack_pack_nil(pk) || pack_key(pk, map, "medium") || pack_str(pk, medium);
    }
    case KV_EVENT_REMOVED:
        return pack_head(pk, map, 3, "BlockRemoved") || pack_key(pk, map, "block_hashes") || pack_hashes(pk, h, e->n) ||
            pack_key(pk, map, "medium") || pack_str(pk, medium);
    default: return pack_head(pk, map, 1, "AllBlocksCleared");
    }
}

int kv_wire_encode(const kv_wire_batch *b, bool map, msgpack_sbuffer *out) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    int rc = msgpack_pack_array(&pk, 3) || msgpack_pack_double(&pk, b->ts) || msgpack_pack_array(&pk, b->n_ev);
    for (uint32_t i = 0; i < b->n_ev && !rc; i++) rc = pack_event(&pk, b, &b->ev[i], map);
    rc = rc || msgpack_pack_int(&pk, 0); /* data_parallel_rank: one engine */
    return rc ? cd_fail("out of memory encoding a KV event batch") : 0;
}

/* HOST of tcp://HOST:PORT: [v6], *, or letters, digits, '.', '-', '_' */
static bool host_ok(const char *h, size_t n) {
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        for (size_t i = 1; i + 1 < n; i++)
            if (!strchr("0123456789abcdefABCDEF:.", h[i])) return false;
        return n > 2;
    }
    if (n == 1 && h[0] == '*') return true;
    for (size_t i = 0; i < n; i++)
        if (!(h[i] >= 'a' && h[i] <= 'z') && !(h[i] >= 'A' && h[i] <= 'Z') && !(h[i] >= '0' && h[i] <= '9') &&
            !strchr(".-_", h[i]))
            return false;
    return n > 0;
}

int kv_wire_endpoint(const char *what, const char *ep, bool *bind) {
    if (!strncmp(ep, "ipc://", 6)) {
        if (!ep[6]) return cd_fail("%s %s: ipc:// needs a path", what, ep);
        *bind = true;
        return 0;
    }
    if (strncmp(ep, "tcp://", 6)) return cd_fail("%s %s: expected tcp://HOST:PORT or ipc://PATH", what, ep);
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon == h) return cd_fail("%s %s: expected tcp://HOST:PORT (a host, then a port)", what, ep);
    size_t hn = (size_t)(colon - h);
    if (!host_ok(h, hn))
        return cd_fail("%s %s: the host '%.*s' is not a name, an address, [IPv6] or *", what, ep, (int)hn, h);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 1 || port > 65535) return cd_fail("%s %s: the port must be 1 to 65535", what, ep);
    *bind = (hn == 1 && h[0] == '*') || (hn == 7 && !strncmp(h, "0.0.0.0", 7)) || (hn == 4 && !strncmp(h, "[::]", 4));
    return 0;
}
