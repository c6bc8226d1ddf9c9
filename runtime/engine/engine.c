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
    if (!e->cache_on && (o->host_cache_mb || o->cache_dir))
        return cd_fail("%s needs the prefix cache (it is off: no_prefix_cache)",
                       o->cache_dir ? "a disk tier (--cache-dir)" : "a host tier (--host-cache-mb)");
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
    if (o->cache_dir) {
        TRY(kv_disk_init(&e->disk, e->vk, &e->g.pool, &e->g.lay, ns, o->cache_dir, o->disk_chunk_pages));
        e->disk_on = true;
        if (!(e->disk_pages = malloc((size_t)e->disk.chunk_pages * sizeof *e->disk_pages))) return cd_fail("out of memory");
    }
    e->g.reclaim = kv_cache_reclaim_hook;
    e->g.reclaim_ctx = &e->cache;
    return 0;
}

void engine_free(engine *e) {
    if (e->cache_on) kv_cache_free(&e->cache);
    kv_host_free(&e->host);
    kv_disk_free(&e->disk);
    free(e->chain);
    free(e->disk_pages);
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

/* The chain hashes of the first n_chunks chunks of ids into e->chain. */
static int chain_hashes(engine *e, const int32_t *ids, uint32_t n_chunks) {
    if (n_chunks > e->cap_chain) {
        void *p = realloc(e->chain, (size_t)n_chunks * sizeof *e->chain);
        if (!p) return cd_fail("out of memory for %u chunk hashes", n_chunks);
        e->chain = p;
        e->cap_chain = n_chunks;
    }
    return kv_disk_chain(&e->disk, ids, n_chunks, e->chain);
}

/* Whole chunks of ids[0..n-1) past an all-GPU match of n_tokens tokens, from the disk tier:
 * consecutive chunks from the one holding the first unmatched page, until one is missing or
 * rejected (or the pool has no room). The sequence gets the match's whole pages, then each
 * chunk's pages past them (a partly matched last page is replaced by the chunk's full one),
 * and the tree adopts them. *loaded = 0: nothing read, the sequence is untouched. */
static int attach_disk(engine *e, const int32_t *ids, uint32_t n, const radix_match *m, uint32_t n_tokens,
                       engine_reply *r, bool *loaded) {
    *loaded = false;
    kv_disk_tier *d = &e->disk;
    uint32_t pt = e->g.page_tokens, C = d->chunk_pages, ct = d->chunk_tokens;
    uint32_t mw = n_tokens / pt, c0 = mw / C, c_end = (n - 1) / ct;
    if (c0 >= c_end) return 0;
    double t0 = now_ms();
    uint64_t rej0 = d->rejected, bytes0 = d->bytes_read;
    TRY(chain_hashes(e, ids, c_end));
    static const uint8_t zero[KV_DISK_HASH_BYTES];
    uint32_t *pg = e->disk_pages;
    int rc = 0;
    for (uint32_t c = c0; c < c_end; c++) {
        int got = kv_disk_read(d, ids + (size_t)c * ct, c, c ? e->chain[c - 1] : zero, e->chain[c]);
        if (got <= 0) { rc = got; break; }
        uint32_t first = c == c0 ? mw - c0 * C : 0, need = C - first;
        if (kv_pages_free_count(&e->g.pages) < need) kv_cache_reclaim(&e->cache, need); /* the match is pinned */
        if (kv_pages_free_count(&e->g.pages) < need) break;
        if (!*loaded && (rc = kv_seq_attach(&e->g.pages, &e->g.seq, m->pages, mw, mw * pt))) break;
        *loaded = true;
        for (uint32_t i = 0; i < need; i++) kv_page_alloc(&e->g.pages, &pg[i]); /* cannot fail: counted above */
        rc = kv_disk_upload(d, first, pg, need);
        if (!rc) rc = kv_seq_attach(&e->g.pages, &e->g.seq, pg, need, need * pt);
        for (uint32_t i = 0; i < need; i++) kv_page_release(&e->g.pages, pg[i]); /* the sequence holds them now */
        if (rc) break;
        r->disk_chunks_read++;
    }
    if (*loaded && !rc) rc = kv_cache_insert(&e->cache, ids, &e->g.seq); /* later requests see them cached */
    r->disk_rejected = (uint32_t)(d->rejected - rej0);
    r->disk_bytes_read = d->bytes_read - bytes0;
    r->disk_read_ms = now_ms() - t0;
    if (*loaded) r->disk_tokens = e->g.seq.n_tokens - n_tokens;
    return rc;
}

/* The cached prefix of ids[0..n-1) into the (empty) sequence; *cached = its tokens. One token
 * is always left to prefill: its logits choose the first generated token. Host-resident pages
 * of the match are restored first; when they cannot be, only the GPU part is used. Then whole
 * chunks past the match come from the disk tier when they are there. */
static int attach_prefix(engine *e, const int32_t *ids, uint32_t n, radix_match *m, engine_reply *r,
                         uint32_t *cached) {
    *cached = 0;
    if (!e->cache_on || n < 2) return 0;
    TRY(kv_cache_match(&e->cache, ids, n - 1, m));
    uint32_t pt = e->g.page_tokens, n_pages = m->n_pages, n_tokens = m->n_tokens;
    bool all_gpu = true;
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
            all_gpu = false; /* host nodes below: the tree could not adopt disk pages (radix.h Rule 7) */
        }
    }
    if (e->disk_on && all_gpu) {
        bool loaded;
        TRY(attach_disk(e, ids, n, m, n_tokens, r, &loaded));
        if (loaded) {
            *cached = e->g.seq.n_tokens;
            return 0;
        }
    }
    *cached = n_tokens;
    return kv_seq_attach(&e->g.pages, &e->g.seq, m->pages, n_pages, n_tokens);
}

/* Write-through: every whole chunk of all[0 .. seq tokens) not yet on disk; stops at the first
 * failed write (one message per request, the request goes on). */
static int store_disk(engine *e, const int32_t *all, engine_reply *r) {
    kv_disk_tier *d = &e->disk;
    uint32_t n_chunks = e->g.seq.n_tokens / d->chunk_tokens;
    if (!n_chunks) return 0;
    double t0 = now_ms();
    uint64_t bytes0 = d->bytes_written, n0 = d->chunks_written;
    TRY(chain_hashes(e, all, n_chunks));
    TRY(kv_disk_store_chunks(d, all, n_chunks, e->chain, e->g.seq.pages));
    r->disk_chunks_written = (uint32_t)(d->chunks_written - n0);
    r->disk_bytes_written = d->bytes_written - bytes0;
    r->disk_write_ms = now_ms() - t0;
    return 0;
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
    if (!e->cache_on) return 0;
    TRY(kv_cache_insert(&e->cache, all, &e->g.seq));
    return e->disk_on ? store_disk(e, all, r) : 0;
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
    s->disk_tokens += r->disk_tokens;
    s->disk_chunks_read += r->disk_chunks_read;
    s->disk_chunks_written += r->disk_chunks_written;
    s->disk_bytes_read += r->disk_bytes_read;
    s->disk_bytes_written += r->disk_bytes_written;
    s->disk_rejected += r->disk_rejected;
    s->disk_read_ms += r->disk_read_ms;
    s->disk_write_ms += r->disk_write_ms;
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
