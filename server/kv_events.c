#include "server/kv_events.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "runtime/base/error.h"
#include "server/kv_wire.h"

typedef struct ring_entry {
    uint64_t seq;
    void *data;
    size_t len;
} ring_entry;

struct kv_publisher {
    kv_pub_opts o;
    void *zctx, *pub, *router;
    int wake; /* eventfd: the engine thread's "a batch is queued" to zmq_poll */
    pthread_t thread;
    bool started;

    kv_wire_batch *cur; /* the step's batch (engine thread only) */

    pthread_mutex_t mu; /* the queue and the counters below */
    pthread_cond_t handled_cv;
    kv_wire_batch *head, **tail;
    uint64_t queued_bytes;
    uint64_t queued, handled; /* serials: batches queued, batches the publisher is done with */
    uint64_t dropped;
    bool stopping;

    /* publisher thread only */
    uint64_t seq;
    ring_entry *ring;
    uint32_t ring_first, ring_n;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void be64(uint8_t out[8], uint64_t v) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* ---- the engine thread ---- */

void kv_pub_event(void *ctx, const kv_event *ev) {
    kv_publisher *p = ctx;
    if (!p->cur && !(p->cur = calloc(1, sizeof *p->cur))) {
        pthread_mutex_lock(&p->mu);
        p->dropped++; /* counted once per lost event: the step's batch could not be had */
        pthread_mutex_unlock(&p->mu);
        return;
    }
    kv_wire_append(p->cur, ev);
}

uint64_t kv_pub_flush(kv_publisher *p) {
    kv_wire_batch *b = p->cur;
    pthread_mutex_lock(&p->mu);
    if (b && b->n_ev) {
        p->cur = NULL;
        b->ts = now_s();
        size_t bytes = kv_wire_bytes(b);
        if (b->lost || p->queued_bytes + bytes > p->o.max_queue_bytes) {
            p->dropped++;
            kv_wire_free(b);
            free(b);
        } else {
            b->next = NULL;
            *p->tail = b;
            p->tail = &b->next;
            p->queued_bytes += bytes;
            p->queued++;
            uint64_t one = 1;
            if (write(p->wake, &one, sizeof one) < 0) { /* cannot fail: the counter is far from full */
            }
        }
    }
    uint64_t serial = p->queued;
    pthread_mutex_unlock(&p->mu);
    return serial;
}

void kv_pub_wait(kv_publisher *p, uint64_t serial) {
    if (!p) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_mutex_lock(&p->mu);
    while (p->handled < serial && !p->stopping)
        if (pthread_cond_timedwait(&p->handled_cv, &p->mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&p->mu);
}

uint64_t kv_pub_dropped(kv_publisher *p) {
    pthread_mutex_lock(&p->mu);
    uint64_t d = p->dropped;
    pthread_mutex_unlock(&p->mu);
    return d;
}

/* ---- the publisher thread ---- */

/* Keeps (seq, payload) for replay, the oldest giving way; the payload is taken. */
static void ring_keep(kv_publisher *p, void *data, size_t len) {
    uint32_t cap = p->o.ring;
    if (p->ring_n == cap) {
        free(p->ring[p->ring_first].data);
        p->ring_first = (p->ring_first + 1) % cap;
        p->ring_n--;
    }
    p->ring[(p->ring_first + p->ring_n) % cap] = (ring_entry){.seq = p->seq, .data = data, .len = len};
    p->ring_n++;
}

/* Sends one batch [topic, seq, payload] without blocking (a subscriber at its high-water mark
 * misses it: ZMQ drops it for that subscriber) and keeps it for replay. */
static void send_batch(kv_publisher *p, const kv_wire_batch *b) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (kv_wire_encode(b, p->o.map_encoding, &sb)) {
        msgpack_sbuffer_destroy(&sb);
        pthread_mutex_lock(&p->mu);
        p->dropped++;
        pthread_mutex_unlock(&p->mu);
        return;
    }
    uint8_t seq[8];
    be64(seq, p->seq);
    const char *topic = p->o.topic ? p->o.topic : "";
    zmq_send(p->pub, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, sb.data, sb.size, ZMQ_DONTWAIT);
    ring_keep(p, sb.data, sb.size); /* the ring owns the buffer now */
    p->seq++;
}

/* One replay request: [identity, empty, start seq] -> every kept batch from start, then the end. */
static void serve_replay(kv_publisher *p) {
    uint8_t id[256], frames[3][16];
    int len[3] = {0};
    int n = 0, more = 1;
    size_t more_sz = sizeof more;
    int id_len = zmq_recv(p->router, id, sizeof id, ZMQ_DONTWAIT);
    if (id_len < 0) return;
    zmq_getsockopt(p->router, ZMQ_RCVMORE, &more, &more_sz);
    while (more) { /* the rest of the request; only [empty, 8 bytes] is one */
        int got = zmq_recv(p->router, n < 3 ? frames[n] : frames[2], sizeof frames[0], 0);
        if (got < 0) return;
        if (n < 3) len[n] = got;
        n++;
        zmq_getsockopt(p->router, ZMQ_RCVMORE, &more, &more_sz);
    }
    if (n != 2 || len[0] != 0 || len[1] != 8 || id_len > (int)sizeof id) {
        fprintf(stderr, "cinder serve: kv events: a replay request that is not [empty, 8-byte start seq]: ignored\n");
        return;
    }
    uint64_t start = 0;
    for (int i = 0; i < 8; i++) start = start << 8 | frames[1][i];
    for (uint32_t i = 0; i < p->ring_n; i++) {
        const ring_entry *e = &p->ring[(p->ring_first + i) % p->o.ring];
        if (e->seq < start) continue;
        uint8_t seq[8];
        be64(seq, e->seq);
        zmq_send(p->router, id, (size_t)id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->router, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->router, e->data, e->len, ZMQ_DONTWAIT);
    }
    uint8_t end[8];
    be64(end, UINT64_MAX); /* -1 as a signed 64-bit integer */
    zmq_send(p->router, id, (size_t)id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->router, end, sizeof end, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->router, "", 0, ZMQ_DONTWAIT);
}

/* Sends every queued batch; false once stopping and nothing is left. */
static bool drain(kv_publisher *p) {
    pthread_mutex_lock(&p->mu);
    for (;;) {
        kv_wire_batch *b = p->head;
        if (!b) break;
        p->head = b->next;
        if (!p->head) p->tail = &p->head;
        p->queued_bytes -= kv_wire_bytes(b);
        pthread_mutex_unlock(&p->mu);
        send_batch(p, b);
        kv_wire_free(b);
        free(b);
        pthread_mutex_lock(&p->mu);
        p->handled++;
        pthread_cond_broadcast(&p->handled_cv);
    }
    bool go_on = !p->stopping;
    pthread_mutex_unlock(&p->mu);
    return go_on;
}

static void *publisher(void *arg) {
    kv_publisher *p = arg;
    for (;;) {
        zmq_pollitem_t it[2] = {{.fd = p->wake, .events = ZMQ_POLLIN}, {.socket = p->router, .events = ZMQ_POLLIN}};
        int n = zmq_poll(it, p->router ? 2 : 1, -1);
        if (n < 0 && errno != EINTR) break;
        if (n > 0 && (it[0].revents & ZMQ_POLLIN)) {
            uint64_t v;
            if (read(p->wake, &v, sizeof v) < 0) { /* EAGAIN: already read */
            }
        }
        if (!drain(p)) break;
        if (p->router && (it[1].revents & ZMQ_POLLIN)) serve_replay(p);
    }
    return NULL;
}

/* ---- set-up ---- */

static int open_socket(kv_publisher *p, void **s, int type, const char *what, const char *ep, bool force_bind) {
    bool bind;
    if (kv_wire_endpoint(what, ep, &bind)) return -1;
    if (!(*s = zmq_socket(p->zctx, type))) return cd_fail("%s %s: %s", what, ep, zmq_strerror(errno));
    int hwm = (int)p->o.hwm, linger = 1000;
    zmq_setsockopt(*s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(*s, ZMQ_LINGER, &linger, sizeof linger); /* at exit: a second to send what is queued */
    int rc = bind || force_bind ? zmq_bind(*s, ep) : zmq_connect(*s, ep);
    if (rc)
        return cd_fail("%s %s: cannot %s: %s", what, ep, bind || force_bind ? "bind" : "connect", zmq_strerror(errno));
    return 0;
}

static void close_all(kv_publisher *p) {
    if (p->pub) zmq_close(p->pub);
    if (p->router) zmq_close(p->router);
    if (p->zctx) zmq_ctx_term(p->zctx);
    if (p->wake >= 0) close(p->wake);
    for (uint32_t i = 0; i < p->ring_n; i++) free(p->ring[(p->ring_first + i) % p->o.ring].data);
    free(p->ring);
    for (kv_wire_batch *b = p->head, *next; b; b = next) {
        next = b->next;
        kv_wire_free(b);
        free(b);
    }
    if (p->cur) kv_wire_free(p->cur);
    free(p->cur);
    pthread_cond_destroy(&p->handled_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int kv_pub_start(kv_publisher **out, const kv_pub_opts *o) {
    *out = NULL;
    kv_publisher *p = calloc(1, sizeof *p);
    if (!p) return cd_fail("out of memory (kv events)");
    p->o = *o;
    if (!p->o.hwm) p->o.hwm = 100000;
    if (!p->o.ring) p->o.ring = 10000;
    if (!p->o.max_queue_bytes) p->o.max_queue_bytes = 64u << 20;
    p->tail = &p->head;
    p->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->handled_cv, NULL);
    p->ring = calloc(p->o.ring, sizeof *p->ring);
    if (p->wake < 0 || !p->ring || !(p->zctx = zmq_ctx_new())) {
        close_all(p);
        return cd_fail("kv events: cannot set up (eventfd, memory or the ZeroMQ context)");
    }
    if (open_socket(p, &p->pub, ZMQ_PUB, "--kv-events", o->endpoint, false) ||
        (o->replay && open_socket(p, &p->router, ZMQ_ROUTER, "--kv-events-replay", o->replay, true))) {
        char err[512];
        snprintf(err, sizeof err, "%s", cd_errmsg());
        close_all(p);
        return cd_fail("%s", err);
    }
    if (pthread_create(&p->thread, NULL, publisher, p)) {
        close_all(p);
        return cd_fail("kv events: cannot start the publisher thread");
    }
    p->started = true;
    *out = p;
    return 0;
}

void kv_pub_stop(kv_publisher *p) {
    if (!p) return;
    kv_pub_flush(p);
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->handled_cv);
    pthread_mutex_unlock(&p->mu);
    uint64_t one = 1;
    if (write(p->wake, &one, sizeof one) < 0) { /* the thread wakes on its next poll anyway */
    }
    if (p->started) pthread_join(p->thread, NULL);
    close_all(p);
}
