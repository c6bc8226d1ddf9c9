/* KV cache events in vLLM's wire format (vllm/distributed/kv_events.py, the version whose events
 * are msgspec array_like tagged structs: the encoding every consumer decodes, llm-d's
 * kv-cache-manager included). Pure: a batch of page events (kv/page_events.h) gathered during one
 * engine step, its MessagePack encoding, and the endpoint syntax. The sockets are kv_events.c's.
 *
 *   batch   [ts, [event, ...], 0]          ts: float seconds since the epoch; 0: data_parallel_rank
 *   event   ["BlockStored", [hash, ...], parent hash | nil, [token id, ...], block_size, nil, medium]
 *           ["BlockRemoved", [hash, ...], medium]
 *           ["AllBlocksCleared"]
 *   medium  "GPU" | "CPU"; block_size = the page size in tokens; the nil after it is lora_id
 *
 * Seven fields in a stored event, three in a removal (the tag first), as vLLM wrote them before it
 * added lora_name and extra_keys; a consumer of a newer release reads the missing trailing fields
 * as their defaults. The map encoding (--kv-events-encoding map: msgspec's tagged structs without
 * array_like, which newer consumers such as Dynamo's also decode) writes each event as a map of
 * the same fields by name, the tag under "type":
 *   {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
 *    "lora_id", "medium"}, {"type": "BlockRemoved", "block_hashes", "medium"},
 *   {"type": "AllBlocksCleared"}; the batch stays [ts, [event, ...], 0]. */
#pragma once
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/page_events.h"

typedef struct kv_wire_event {
    uint8_t kind, medium;   /* kv_event_kind, kv_medium */
    uint32_t n;             /* pages */
    uint64_t parent;        /* 0 = nil */
    size_t hash_at, tok_at; /* into the batch's arrays */
} kv_wire_event;

/* The events of one step. */
typedef struct kv_wire_batch {
    struct kv_wire_batch *next; /* the publisher's queue */
    double ts;
    uint32_t page_tokens;
    kv_wire_event *ev;
    uint32_t n_ev, cap_ev;
    uint64_t *hash;
    size_t n_hash, cap_hash;
    int32_t *tok;
    size_t n_tok, cap_tok;
    bool lost; /* an append ran out of memory: the batch is incomplete, never sent */
} kv_wire_batch;

/* Appends ev (copied); on out of memory marks the batch lost. */
void kv_wire_append(kv_wire_batch *b, const kv_event *ev);
void kv_wire_reset(kv_wire_batch *b); /* empty, memory kept */
void kv_wire_free(kv_wire_batch *b);
size_t kv_wire_bytes(const kv_wire_batch *b); /* memory the batch holds */
/* The batch as vLLM's KVEventBatch into out (appended), its events as arrays or (map) maps; -1
 * when out of memory. */
int kv_wire_encode(const kv_wire_batch *b, bool map, msgpack_sbuffer *out);

/* "tcp://HOST:PORT" (HOST a name, an IPv4 address, [IPv6] or *) or "ipc://PATH". bind: whether
 * a publisher binds it (a wildcard host *, 0.0.0.0, [::], or ipc) or connects to it (anything
 * else: a subscriber that binds, llm-d's default), as vLLM's ZmqEventPublisher decides. -1 with
 * a message naming what is wrong. */
int kv_wire_endpoint(const char *what, const char *ep, bool *bind);
