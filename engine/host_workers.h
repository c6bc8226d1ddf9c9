/* A few threads that take items of one job off a shared counter, the calling thread among them,
 * and otherwise sleep (on a condition variable, never spinning): the host's per-row work of a
 * pass (masks, adjustments, draws) spread over cores. A CPU device computes the next pass on
 * the same cores, so a thread that spun after a job would slow it: OpenMP's default did
 * (docs/PERF.md, session 29).
 *
 *   host_workers w;  host_workers_init(&w, 3);     three helpers + the caller = 4 workers
 *   host_workers_run(&w, n, fn, ctx);              fn(ctx, item, worker) for item < n, worker < 4
 *   host_workers_free(&w);
 *
 * A job's items run in any order and on any worker; run returns when all are done. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef void (*host_work_fn)(void *ctx, uint32_t item, uint32_t worker);

typedef struct host_workers {
    pthread_t *threads;
    uint32_t n_threads; /* helpers; workers = n_threads + 1 */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t job;  /* incremented per job: a helper's signal to start */
    uint32_t busy; /* helpers still on the current job */
    bool stop, inited;
    host_work_fn fn;
    void *ctx;
    uint32_t n_items;
    atomic_uint next; /* the next item to take */
} host_workers;

/* Starts up to n helpers (fewer if threads or memory cannot be had: the work then runs on fewer,
 * at worst on the caller alone). */
void host_workers_init(host_workers *w, uint32_t n);
void host_workers_free(host_workers *w); /* zeroed is fine */
static inline uint32_t host_workers_count(const host_workers *w) { return w->n_threads + 1; }
void host_workers_run(host_workers *w, uint32_t n_items, host_work_fn fn, void *ctx);
