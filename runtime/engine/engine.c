#include "runtime/engine/engine.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/error.h"

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if (x) return -1;                                                                                              \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int engine_init(engine *e, model *m, const engine_opts *o) {
    *e = (engine){.m = m, .cache_on = !o->no_prefix_cache};
    uint32_t n_ctx = o->n_ctx ? o->n_ctx : (m->cfg.n_ctx_train < 8192 ? m->cfg.n_ctx_train : 8192);
    if (n_ctx > m->cfg.n_ctx_train)
        return cd_fail("a context of %u tokens is more than the model was trained for (%u)", n_ctx, m->cfg.n_ctx_train);
    uint64_t pool = o->pool_tokens ? o->pool_tokens : 4ull * n_ctx;
    if (pool > UINT32_MAX) return cd_fail("a KV pool of %llu tokens is too large", (unsigned long long)pool);
    if (sampler_init(&e->smp, (sampler_params){.temperature = 0}, (int32_t)m->cfg.n_vocab)) return -1;
    e->vk = calloc(1, sizeof *e->vk);
    e->logits = malloc(m->cfg.n_vocab * sizeof *e->logits);
    if (!e->vk || !e->logits) return cd_fail("out of memory");
    cvk_ctx_opts vo = {.device = -1, .pipeline_cache = ""};
    if (cvk_ctx_init(e->vk, &vo)) {
        free(e->vk);
        e->vk = NULL;
        return -1;
    }
    gpu_model_opts go = {.n_ctx = n_ctx, .pool_tokens = (uint32_t)pool, .page_tokens = o->page_tokens};
    TRY(gpu_model_init_opts(&e->g, e->vk, m, &go));
    TRY(model_set_weights_digest(m, e->g.w.digest));
    if (!e->cache_on) return 0;
    uint8_t ns[RADIX_NS_BYTES];
    const char *t = o->tenant;
    TRY(kv_cache_namespace(m->fingerprint, "f16", e->g.page_tokens, t, t ? strlen(t) : 0, ns));
    TRY(kv_cache_init(&e->cache, &e->g.pages, ns));
    if (o->host_cache_mb) {
        TRY(kv_host_init(&e->host, e->vk, &e->g.pool, e->g.lay.page_bytes, (uint64_t)o->host_cache_mb << 20));
        TRY(kv_cache_attach_host(&e->cache, &e->host));
    }
    e->g.reclaim = kv_cache_reclaim_hook;
    e->g.reclaim_ctx = &e->cache;
    return 0;
}

void engine_free(engine *e) {
    if (e->cache_on) kv_cache_free(&e->cache);
    kv_host_free(&e->host);
    if (e->vk) {
        gpu_model_free(&e->g);
        cvk_ctx_free(e->vk);
        free(e->vk);
    }
    free(e->logits);
    sampler_free(&e->smp);
    memset(e, 0, sizeof *e);
}

int engine_set_sampler(engine *e, const sampler_params *p) {
    sampler_free(&e->smp);
    return sampler_init(&e->smp, *p, (int32_t)e->m->cfg.n_vocab) || gpu_model_set_sampler(&e->g, p);
}

void engine_reply_free(engine_reply *r) {
    free(r->ids);
    memset(r, 0, sizeof *r);
}

/* The token the last head run chose: on the GPU when the kernel samples, else here. */
static int32_t next_token(engine *e) {
    if (gpu_model_samples_on_device(&e->g)) return gpu_model_next(&e->g);
    if (gpu_model_logits(&e->g, e->logits)) return -1;
    return sampler_sample(&e->smp, e->logits);
}

/* The cached prefix of ids[0..n-1) into the (empty) sequence; *cached = its tokens. One token
 * is always left to prefill: its logits choose the first generated token. Host-resident pages
 * of the match are restored first; when they cannot be, only the GPU part is used. */
static int attach_prefix(engine *e, const int32_t *ids, uint32_t n, radix_match *m, engine_reply *r,
                         uint32_t *cached) {
    *cached = 0;
    if (!e->cache_on || n < 2) return 0;
    TRY(kv_cache_match(&e->cache, ids, n - 1, m));
    uint32_t pt = e->g.page_tokens, n_pages = m->n_pages, n_tokens = m->n_tokens;
    if (m->n_restore) {
        uint32_t gpu_tokens = m->n_gpu_pages * pt < n_tokens ? m->n_gpu_pages * pt : n_tokens, taken = 0;
        double t0 = now_ms();
        int rc = kv_cache_restore(&e->cache, m, &taken);
        if (rc < 0) return -1;
        r->restore_ms = now_ms() - t0;
        if (rc == 0) {
            r->restored_tokens = n_tokens - gpu_tokens;
            r->restored_pages = taken;
        } else { /* not restored: the GPU pages only */
            n_pages = m->n_gpu_pages;
            n_tokens = gpu_tokens;
        }
    }
    *cached = n_tokens;
    return kv_seq_attach(&e->g.pages, &e->g.seq, m->pages, n_pages, n_tokens);
}

/* Decodes up to rq->max_tokens tokens after the prefill; all[] collects prompt + output. */
static int decode(engine *e, const engine_request *rq, engine_reply *r, int32_t *all, double t0) {
    double t1 = 0;
    for (uint32_t i = 0; i < rq->max_tokens; i++) {
        int32_t id = next_token(e);
        if (id < 0) return -1;
        if (i == 0) r->ttft_ms = (t1 = now_ms()) - t0;
        all[rq->n + i] = r->ids[r->n++] = id;
        bool more = !rq->on_token || rq->on_token(rq->ctx, id);
        if (!rq->ignore_eos && tok_is_eog(e->m->tok, id)) { r->eog = true; break; }
        uint32_t pos = rq->n + i;
        if (!more || i + 1 == rq->max_tokens || pos + 1 >= e->g.n_ctx) break;
        TRY(gpu_forward(&e->g, id, pos, true));
    }
    r->decode_ms = r->n ? now_ms() - t1 : 0;
    return 0;
}

static int run_request(engine *e, const engine_request *rq, engine_reply *r, int32_t *all, radix_match *m) {
    double t0 = now_ms();
    uint32_t cached;
    TRY(attach_prefix(e, rq->ids, rq->n, m, r, &cached));
    r->cached_tokens = cached;
    r->prefilled_tokens = rq->n - cached;
    if (gpu_prefill(&e->g, rq->ids + cached, rq->n - cached, cached, true))
        return cd_fail_ctx("prefilling %u tokens after %u cached", r->prefilled_tokens, r->cached_tokens);
    TRY(decode(e, rq, r, all, t0));
    /* the KV written covers the prompt and every generated token but the last */
    return e->cache_on ? kv_cache_insert(&e->cache, all, &e->g.seq) : 0;
}

int engine_generate(engine *e, const engine_request *rq, engine_reply *r) {
    *r = (engine_reply){.prompt_tokens = rq->n};
    if (rq->n == 0) return cd_fail("the prompt is empty");
    if (rq->n >= e->g.n_ctx)
        return cd_fail("the prompt has %u tokens; the context holds %u (prompt + at least one generated)", rq->n,
                       e->g.n_ctx);
    int32_t *all = malloc(((size_t)rq->n + rq->max_tokens + 1) * sizeof *all);
    r->ids = malloc(((size_t)rq->max_tokens + 1) * sizeof *r->ids);
    if (!all || !r->ids) {
        free(all);
        return cd_fail("out of memory for a request of %u + %u tokens", rq->n, rq->max_tokens);
    }
    memcpy(all, rq->ids, rq->n * sizeof *all);
    uint64_t freed0 = e->cache.freed_pages, demoted0 = e->cache.tree.stats.demoted_pages;
    radix_match m = {0};
    kv_seq_free(&e->g.pages, &e->g.seq);
    int rc = run_request(e, rq, r, all, &m);
    if (e->cache_on) radix_release(&e->cache.tree, &m);
    kv_seq_free(&e->g.pages, &e->g.seq); /* what the cache took stays; the rest is free again */
    free(all);
    r->evicted_pages = e->cache.freed_pages - freed0;
    r->demoted_pages = e->cache.tree.stats.demoted_pages - demoted0;
    engine_stats *s = &e->stats;
    s->requests++;
    s->prompt_tokens += rq->n;
    s->cached_tokens += r->cached_tokens;
    s->prefilled_tokens += r->prefilled_tokens;
    s->generated_tokens += r->n;
    s->evicted_pages += r->evicted_pages;
    s->restored_tokens += r->restored_tokens;
    s->restored_pages += r->restored_pages;
    s->demoted_pages += r->demoted_pages;
    s->restore_ms += r->restore_ms;
    return rc;
}

int engine_warm_up(engine *e) {
    int32_t ids[8];
    for (int i = 0; i < 8; i++) ids[i] = 1000 + i;
    bool on = e->cache_on;
    e->cache_on = false;
    engine_request rq = {.ids = ids, .n = 8, .max_tokens = 2, .ignore_eos = true};
    engine_reply r;
    int rc = engine_generate(e, &rq, &r);
    engine_reply_free(&r);
    e->cache_on = on;
    e->stats = (engine_stats){0};
    return rc;
}
