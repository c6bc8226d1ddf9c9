/* The bridge between the HTTP connection threads and the one thread that owns the engine (and
 * the GPU). Connection threads submit jobs and wait on them; bridge_run, on the engine thread,
 * feeds them to the scheduler, steps it while anything is running, streams text into the jobs
 * and hands back outcomes. A slow or vanished client never blocks the engine thread: it only
 * ever appends to a job's text and signals. server/job.h has the life of a job.
 *
 * The engine thread also publishes a snapshot of the engine's counters and cache state after
 * every step (bridge_snapshot), which /metrics and /v1/cache read without touching the engine. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "server/job.h"
#include "server/kv_events.h"

/* Prometheus histogram: cumulative counts of observations <= each bound. */
#define HIST_BUCKETS 14
typedef struct histogram {
    uint64_t count[HIST_BUCKETS + 1]; /* the last: +Inf */
    double sum;
    uint64_t n;
} histogram;
extern const double hist_bounds[HIST_BUCKETS];
void hist_add(histogram *h, double v);

typedef struct bridge_snapshot {
    engine_stats stats;
    engine_cache_info cache;
    uint32_t running, waiting; /* in the engine */
    uint32_t queued;           /* submitted, not yet handed to the engine */
    uint64_t req_ok, req_length, req_cancelled, req_error, req_rejected;
    histogram ttft, itl, e2e; /* seconds */
} bridge_snapshot;

typedef struct bridge {
    pthread_mutex_t mu;
    pthread_cond_t wake;            /* the engine thread waits here when idle */
    bool ready;                     /* weights uploaded: the API answers */
    uint64_t load_done, load_total; /* the weights' upload so far, in bytes (bridge_load_progress) */
    bool stopping;                  /* shutdown: no more jobs; running ones are cancelled */
    job *incoming;                  /* FIFO of submitted jobs */
    job **incoming_tail;
    uint32_t n_incoming;
    uint32_t max_queue; /* jobs waiting (queued + waiting in the engine) at most */
    bridge_snapshot snap;
    kv_publisher *pub; /* KV cache events (--kv-events), or NULL; set before bridge_run */
    /* the page listing (bridge_list_pages): asked for by a connection thread, made by the engine thread */
    pthread_cond_t listed;
    bool list_want;
    uint64_t list_gen;    /* listings made so far */
    uint64_t *list_hash;  /* [n_list] the last listing: page hashes, */
    uint8_t *list_medium; /* and their tiers (kv_medium) */
    uint32_t n_list;
    int list_rc; /* 0, or -1: out of memory */
} bridge;

int bridge_init(bridge *b, uint32_t max_queue);
/* The weights' upload: a gpu_load_progress function (ctx the bridge), and what /health reads
 * while the server loads: the fraction uploaded, 0 before the upload begins. */
void bridge_load_progress(void *b, uint64_t done, uint64_t total);
double bridge_load_fraction(bridge *b);
void bridge_free(bridge *b);
/* Queues the n jobs of one request (its choices), all or none, taking the engine thread's
 * references. 0, or 1 when the queue has no room for all n or the server is stopping (the jobs
 * untouched, both references still the caller's to drop), or -1 before the model is loaded. */
int bridge_submit(bridge *b, job **jobs, uint32_t n);
/* Asks the engine thread to cancel j (the client is gone); j stays the caller's to unref. */
void bridge_cancel(bridge *b, job *j);
void bridge_stop(bridge *b);
/* The engine thread: runs jobs until bridge_stop, then cancels what is left. A failed forward
 * pass fails only the requests in it (a line on stderr). */
int bridge_run(bridge *b, engine *e);
/* Whether the weights are up (the API answers); once true, the server's model fields, written
 * before, may be read. */
bool bridge_ready(bridge *b);
/* A connection thread: asks the engine thread for the cache's page listing (engine_cache_pages)
 * and waits for it (5 s at most); 0 with b->list_* filled (read them under b->mu, which is held
 * on return: the caller unlocks), -1 when it could not be made. */
int bridge_list_pages(bridge *b);
/* Counts a request the front end refused before it reached the engine (HTTP 4xx/5xx). */
void bridge_count_rejected(bridge *b);
