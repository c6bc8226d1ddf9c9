#include "engine/host_workers.h"

#include <stdlib.h>

typedef struct helper_arg {
    host_workers *w;
    uint32_t id;
} helper_arg;

static void take_items(host_workers *w, uint32_t worker) {
    for (uint32_t i; (i = atomic_fetch_add(&w->next, 1)) < w->n_items;) w->fn(w->ctx, i, worker);
}

static void *helper(void *p) {
    helper_arg a = *(helper_arg *)p;
    free(p);
    host_workers *w = a.w;
    uint64_t seen = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->job == seen) pthread_cond_wait(&w->go, &w->mu);
        if (w->stop) break;
        seen = w->job;
        pthread_mutex_unlock(&w->mu);
        take_items(w, a.id);
        pthread_mutex_lock(&w->mu);
        if (--w->busy == 0) pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void host_workers_init(host_workers *w, uint32_t n) {
    *w = (host_workers){.inited = true};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->go, NULL);
    pthread_cond_init(&w->done, NULL);
    atomic_init(&w->next, 0);
    if (!n || !(w->threads = calloc(n, sizeof *w->threads))) return; /* the caller alone */
    for (uint32_t i = 0; i < n; i++) {
        helper_arg *a = malloc(sizeof *a);
        if (!a) break;
        *a = (helper_arg){w, i + 1};
        if (pthread_create(&w->threads[i], NULL, helper, a)) {
            free(a);
            break;
        }
        w->n_threads++;
    }
}

void host_workers_free(host_workers *w) {
    if (!w->inited) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mu);
    for (uint32_t i = 0; i < w->n_threads; i++) pthread_join(w->threads[i], NULL);
    free(w->threads);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->go);
    pthread_cond_destroy(&w->done);
    *w = (host_workers){0};
}

void host_workers_run(host_workers *w, uint32_t n_items, host_work_fn fn, void *ctx) {
    if (!w->n_threads || n_items < 2) { /* nothing to share */
        for (uint32_t i = 0; i < n_items; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->fn = fn, w->ctx = ctx, w->n_items = n_items;
    atomic_store(&w->next, 0);
    w->busy = w->n_threads;
    w->job++;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mu);
    take_items(w, 0);
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->done, &w->mu);
    pthread_mutex_unlock(&w->mu);
}
