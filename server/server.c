/* server_run: listen first (so /health can say "loading"), load the model and upload the weights,
 * then run the engine thread until a signal. */
#include "server/server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "server/http.h"

static sigset_t stop_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return set;
}

/* Waits for SIGINT/SIGTERM (blocked in every thread) and stops the bridge. */
static void *signal_waiter(void *arg) {
    sigset_t set = stop_signals();
    int sig;
    sigwait(&set, &sig);
    fprintf(stderr, "cinder serve: %s: stopping (running requests are cancelled)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    bridge_stop(arg);
    return NULL;
}

static void name_model(server *s, const char *path) {
    const char *base = strrchr(path, '/');
    snprintf(s->model_name, sizeof s->model_name, "%s", s->o.alias ? s->o.alias : base ? base + 1 : path);
}

/* The KV event stream, topic kv@<replica>@<model> (what llm-d's subscriber parses: the replica
 * part names the pod, the model part the model its index is keyed by). */
static int start_events(server *s) {
    if (!s->o.kv_events) return 0;
    char replica[300];
    if (s->o.kv_events_id) snprintf(replica, sizeof replica, "%s", s->o.kv_events_id);
    else snprintf(replica, sizeof replica, "%s:%u", s->o.host, s->o.port);
    snprintf(s->kv_topic, sizeof s->kv_topic, "kv@%s@%s", replica, s->model_name);
    kv_pub_opts po = {.endpoint = s->o.kv_events,
                      .replay = s->o.kv_events_replay,
                      .topic = s->kv_topic,
                      .map_encoding = s->o.kv_events_map};
    if (kv_pub_start(&s->b.pub, &po)) return -1;
    fprintf(stderr, "cinder serve: kv events on %s (topic %s)%s%s\n", s->o.kv_events, s->kv_topic,
            s->o.kv_events_replay ? ", replay on " : "", s->o.kv_events_replay ? s->o.kv_events_replay : "");
    return 0;
}

static int load(server *s, const char *path, const engine_opts *eo_in, model **m, engine *e) {
    engine_opts eo_events = *eo_in, *eo = &eo_events;
    if (s->b.pub) eo->page_events = kv_pub_event, eo->page_events_ctx = s->b.pub;
    eo->load_progress = (gpu_load_progress){bridge_load_progress, &s->b}; /* for /health while it loads */
    if (model_load(m, path, (model_load_opts){.skip_weight_hash = true, .rope = s->o.rope})) return -1;
    chat_template_id tmpl;
    chat_template_match how;
    if (chat_template_resolve((*m)->chat_template.ptr, (size_t)(*m)->chat_template.len, s->o.chat_template, &tmpl,
                              &how))
        return cd_fail_ctx("%s: ", path);
    if (engine_init(e, *m, eo) || engine_warm_up(e)) return -1;
    s->model = (api_model){.tok = (*m)->tok,
                           .n_ctx = engine_n_ctx(e),
                           .template = tmpl,
                           .as_generated = !s->o.strict_template,
                           .preserve_reasoning = s->o.preserve_reasoning,
                           .think_default = s->o.think,
                           .calls = &s->calls,
                           .replies = &s->replies};
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_%02x%02x%02x%02x%02x%02x", (*m)->fingerprint[0],
             (*m)->fingerprint[1], (*m)->fingerprint[2], (*m)->fingerprint[3], (*m)->fingerprint[4],
             (*m)->fingerprint[5]);
    return 0;
}

int server_run(const char *model_path, const server_opts *so, const engine_opts *eo) {
    server s = {.o = *so};
    name_model(&s, model_path);
    if (bridge_init(&s.b, so->queue)) return -1;
    /* replies: a whole sequence each (prompt + reply), so an agent loop's rounds hold a lot in
     * common; 4M tokens (16 MiB of ids) and 32 MiB of text keep the latest rounds of many
     * conversations at once */
    if (call_memory_init(&s.calls, 4096) || reply_memory_init(&s.replies, 4096, 4u << 20, 32u << 20)) {
        call_memory_free(&s.calls);
        bridge_free(&s.b);
        return -1;
    }
    /* SIGINT/SIGTERM go to the waiter thread only (blocked here, inherited by every thread) */
    sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a vanished client is an error code, not a death */
    pthread_t waiter;
    if (pthread_create(&waiter, NULL, signal_waiter, &s.b)) {
        bridge_free(&s.b);
        call_memory_free(&s.calls);
        reply_memory_free(&s.replies);
        return cd_fail("cannot start the signal thread");
    }
    model *m = NULL;
    engine e = {0};
    int rc = http_start(&s);
    if (!rc) {
        fprintf(stderr, "cinder serve: listening on http://%s:%u (loading %s)\n", s.o.host, s.o.port, model_path);
        if (so->port_file) {
            FILE *f = fopen(so->port_file, "w");
            if (f) fprintf(f, "%u\n", s.o.port), fclose(f);
        }
        rc = start_events(&s);
        if (!rc) rc = load(&s, model_path, eo, &m, &e);
    }
    if (!rc) {
        pthread_mutex_lock(&s.b.mu);
        s.b.ready = true;
        pthread_mutex_unlock(&s.b.mu);
        fprintf(stderr, "cinder serve: ready: model %s, context %u tokens, %u requests at once, chat template %s\n",
                s.model_name, s.model.n_ctx, e.max_seqs, chat_template_name(s.model.template));
        rc = bridge_run(&s.b, &e);
    }
    char err[512];
    snprintf(err, sizeof err, "%s", cd_errmsg());
    http_quiesce(&s);
    bridge_stop(&s.b);
    http_stop(&s); /* waits for the connection threads: their jobs are all done by now */
    pthread_cancel(waiter);
    pthread_join(waiter, NULL);
    engine_free(&e);
    kv_pub_stop(s.b.pub); /* after engine_free: its last events (every page removed) go out too */
    s.b.pub = NULL;
    if (m) model_free(m);
    bridge_free(&s.b);
    call_memory_free(&s.calls);
    reply_memory_free(&s.replies);
    if (rc) cd_fail("%s", err);
    return rc;
}
