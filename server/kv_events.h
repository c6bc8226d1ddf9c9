/* cinder serve's KV cache event stream (--kv-events): the prefix cache's page events
 * (kv/page_events.h) published over ZeroMQ as vLLM publishes its own, so a router that indexes
 * vLLM replicas by their cached blocks (llm-d's precise prefix-cache scorer) indexes cinder too.
 *
 *   engine thread                                  publisher thread (owns the sockets)
 *     kv_pub_event: the cache's events appended       pops a batch, encodes it (kv_wire.h), sends
 *     to the step's batch (memcpy, no I/O)     ──►    [topic, seq (8 bytes big endian), payload]
 *     kv_pub_flush after each step: the batch         on the PUB socket without blocking, keeps it
 *     joins a bounded queue (a full queue drops       in the replay ring; answers replay requests
 *     it, counted: the step never waits)              on the ROUTER socket
 *
 * seq counts batches from 0 with each start of the server (the first one holds AllBlocksCleared).
 * A subscriber slower than the PUB socket's high-water mark loses batches (ZMQ drops them for it
 * alone) and can ask the replay socket for them: it sends [empty, start seq (8 bytes big
 * endian)] (a REQ or DEALER socket) and gets [empty, seq, payload] for every batch still in the
 * ring from start on, then [empty, seq -1, empty payload], as vLLM's replay does.
 *
 * A request's reply waits until the batch holding its final commit has been handed to the PUB
 * socket (kv_pub_wait): a router that reads the stream sees a replica's new pages before the
 * client can send its next turn. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kv/page_events.h"

typedef struct kv_pub_opts {
    const char *endpoint;     /* PUB: tcp://HOST:PORT (bound for a wildcard host, else connected) */
    const char *replay;       /* ROUTER, always bound; NULL = no replay */
    const char *topic;        /* the first frame of every message */
    bool map_encoding;        /* events as msgspec maps, not arrays (kv_wire.h) */
    uint32_t hwm;             /* ZMQ_SNDHWM of the PUB socket, messages; 0 = 100000 */
    uint32_t ring;            /* batches kept for replay; 0 = 10000 */
    uint64_t max_queue_bytes; /* batches waiting for the publisher at most; 0 = 64 MiB */
} kv_pub_opts;

typedef struct kv_publisher kv_publisher;

/* Opens the sockets (a malformed endpoint or a failed bind is an error naming it) and starts the
 * publisher thread. */
int kv_pub_start(kv_publisher **out, const kv_pub_opts *o);
/* Publishes what is queued (within a second), stops the thread, closes the sockets. NULL is fine. */
void kv_pub_stop(kv_publisher *p);

/* Engine thread. kv_pub_event is a kv_event_fn (ctx: the publisher). */
void kv_pub_event(void *ctx, const kv_event *ev);
/* Ends the step: a batch with events is queued. Returns the serial of the last batch queued
 * (1, 2, ...; 0 before any), for kv_pub_wait. */
uint64_t kv_pub_flush(kv_publisher *p);

/* Any thread: waits (a second at most) until the publisher has handled the batch of serial
 * (sent it, or dropped it). */
void kv_pub_wait(kv_publisher *p, uint64_t serial);
/* Batches dropped because the queue was full or memory ran out. */
uint64_t kv_pub_dropped(kv_publisher *p);
