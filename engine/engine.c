#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "engine/request.h"

static int alloc_scheduler(engine *e, const engine_opts *o) {
    e->max_seqs = o->max_seqs ? o->max_seqs : 1;
    e->chunk_tokens = o->chunk_tokens ? o->chunk_tokens : 512;
    e->max_wait_steps = o->max_wait_steps ? o->max_wait_steps : 64;
    uint32_t T = e->g.n_batch, S = e->max_seqs, O = e->max_out;
    if (e->chunk_tokens > T) e->chunk_tokens = T;
    e->row_free = malloc(S * sizeof *e->row_free);
    e->b_ids = malloc(T * sizeof *e->b_ids);
    e->b_row = malloc(T * sizeof *e->b_row);
    e->b_pos = malloc(T * sizeof *e->b_pos);
    e->b_out = malloc(O * sizeof *e->b_out);
    e->b_next = malloc(O * sizeof *e->b_next);
    e->b_owner = malloc(O * sizeof *e->b_owner);
    e->b_sample = malloc(O * sizeof *e->b_sample);
    if (!e->row_free || !e->b_ids || !e->b_row || !e->b_pos || !e->b_out || !e->b_next || !e->b_owner || !e->b_sample)
        return cd_fail("out of memory");
    for (uint32_t r = 0; r < S; r++) e->row_free[r] = 1;
    return 0;
}

static int open_device(engine *e, cvk_ctx *borrowed) {
    if (borrowed) {
        e->vk = borrowed, e->vk_borrowed = true;
        return 0;
    }
    if (!(e->vk = calloc(1, sizeof *e->vk))) return cd_fail("out of memory");
    cvk_ctx_opts vo = {.device = -1, .pipeline_cache = ""};
    if (cvk_ctx_init(e->vk, &vo)) {
        free(e->vk);
        e->vk = NULL;
        return -1;
    }
    return 0;
}

/* The KV pool of `pool` tokens and the model on the device. With the pool's size the engine's
 * own (fit), every weight stays on the device before the pool is large: when `pool` tokens leave
 * no room for the weights, the pool shrinks to what does (not below one context), and only when
 * one context's pool does not leave room either do experts go to host memory (the plan's own
 * choice, unless o fixes it). With the context the engine's own too (fit_ctx: the file's), the
 * context shrinks first, to what fits beside the weights but not below ENGINE_CTX_FLOOR, as
 * llama.cpp fits its context to the device. 16 GB cards: Qwen3-30B-A3B's Q3_K_M file is 14.7 GB,
 * its KV 96 KiB a token, so one context of the file's 40,960 tokens (3.75 GiB) does not fit
 * beside it; a 2507 file's 262,144 (24 GiB) fits no consumer card. */
static int init_pool_and_model(engine *e, const kv_layout *lay, uint64_t pool, bool fit, bool fit_ctx,
                               gpu_model_opts *o) {
    uint64_t room = UINT64_MAX; /* the plan sets it when the plan is what refused */
    gpu_model_opts first = *o;
    if (fit) {
        first.kv_room = &room;
        if (!o->host_experts_fixed) first.host_experts_fixed = true, first.host_expert_layers = 0;
    }
    CD_TRY(kv_pool_init(&e->pool, e->vk, lay, (uint32_t)pool));
    first.kv = &e->pool.buf, first.lay = &e->pool.lay;
    if (!gpu_model_init(&e->g, e->vk, e->m, &first)) return 0;
    if (!fit || room == UINT64_MAX) return -1; /* another failure (out of memory, ...): as it is */
    uint64_t fits = room / lay->page_bytes * lay->page_tokens;
    uint32_t file_ctx = o->n_ctx;
    if (fit_ctx && fits < o->n_ctx) {
        uint32_t floor = ENGINE_CTX_FLOOR < o->n_ctx ? ENGINE_CTX_FLOOR : o->n_ctx;
        o->n_ctx = fits > floor ? (uint32_t)fits : floor;
    }
    uint64_t tokens = fits > o->n_ctx ? fits : o->n_ctx;
    if (tokens >= pool) return -1; /* not the pool's size: nothing smaller helps */
    if (o->n_ctx < file_ctx)
        fprintf(stderr, "cinder: a context of %u tokens fits this device, not the file's %u (--ctx sets it)\n",
                o->n_ctx, file_ctx);
    kv_pool_free(&e->pool);
    CD_TRY(kv_pool_init(&e->pool, e->vk, lay, (uint32_t)tokens));
    o->kv = &e->pool.buf, o->lay = &e->pool.lay;
    CD_TRY(gpu_model_init(&e->g, e->vk, e->m, o));
    fprintf(stderr, "cinder: a KV pool of %llu tokens (%.1f MiB) %s, not %llu (--kv-pool-tokens sets it)\n",
            (unsigned long long)tokens, (double)e->pool.buf.size / (1 << 20),
            fits >= o->n_ctx ? "leaves room for the weights on this device" : "holds one context",
            (unsigned long long)pool);
    return 0;
}

/* engine_init up to the memory plan (plan: where its sizes go; plan_only: stop there). */
static int init_engine(engine *e, model *m, const engine_opts *o, gpu_memory_plan *plan, bool plan_only) {
    *e = (engine){.m = m, .cache_on = !o->no_prefix_cache && !plan_only};
    if (o->cache_dir_max_bytes && !o->cache_dir)
        return cd_fail("a disk budget (--cache-dir-max-mb) needs a disk tier (--cache-dir)");
    if (!e->cache_on && (o->host_cache_mb || o->cache_dir))
        return cd_fail("%s needs the prefix cache (it is off: no_prefix_cache)",
                       o->cache_dir ? "a disk tier (--cache-dir)" : "a host tier (--host-cache-mb)");
    uint32_t n_ctx = o->n_ctx ? o->n_ctx : m->cfg.n_ctx_train; /* the file's (init_pool_and_model may shrink it) */
    if (n_ctx > m->cfg.n_ctx_train)
        return cd_fail("a context of %u tokens is more than the model was trained for (%u)", n_ctx, m->cfg.n_ctx_train);
    uint64_t pool = o->pool_tokens ? o->pool_tokens : 4ull * n_ctx;
    if (pool > UINT32_MAX) return cd_fail("a KV pool of %llu tokens is too large", (unsigned long long)pool);
    uint32_t max_seqs = o->max_seqs ? o->max_seqs : 1;
    if (max_seqs > 256) return cd_fail("%u sequences at once: at most 256", max_seqs);
    if (o->spec_tokens > ENGINE_SPEC_MAX)
        return cd_fail("%u speculative tokens: at most %d", o->spec_tokens, ENGINE_SPEC_MAX);
    e->spec_tokens = o->spec_tokens;
    e->guess = o->guess, e->guess_ctx = o->guess_ctx;
    /* rows for guesses: every sequence's up to 256 in all, and for prompt log-probabilities (a
     * pass's logits rows cost n_vocab floats each: 256 are 155 MB with Qwen3's vocabulary) */
    uint32_t guess_rows = max_seqs * o->spec_tokens;
    e->max_out = max_seqs + (guess_rows < ENGINE_SPEC_ROWS ? guess_rows : ENGINE_SPEC_ROWS) + ENGINE_PROMPT_ROWS;
    e->b_lp = calloc(e->max_out, sizeof *e->b_lp);
    e->host_list = calloc(e->max_out, sizeof *e->host_list);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    e->n_workers = cores < 1 ? 1 : cores > 16 ? 16 : (uint32_t)cores;
    if (e->n_workers > max_seqs + ENGINE_PROMPT_ROWS)
        e->n_workers = max_seqs + ENGINE_PROMPT_ROWS; /* the items a pass can have */
    if (!e->b_lp || !e->host_list) return cd_fail("out of memory");
    CD_TRY(open_device(e, o->device));
    /* a pass holds every running sequence's decode token (and guessed ones) plus a prompt chunk */
    uint32_t chunk = o->chunk_tokens ? o->chunk_tokens : 512;
    uint64_t n_batch = (uint64_t)chunk + e->max_out;
    if (n_batch > n_ctx + (uint64_t)e->max_out) n_batch = n_ctx + (uint64_t)e->max_out;
    kv_layout lay;
    const model_config *c = &m->cfg;
    CD_TRY(kv_layout_init(&lay, c->n_layer, c->n_head_kv, c->head_dim,
                          o->page_tokens ? o->page_tokens : KV_PAGE_TOKENS_DEFAULT));
    gpu_model_opts go = {.n_ctx = n_ctx,
                         .n_batch = (uint32_t)n_batch,
                         .max_seqs = max_seqs,
                         .max_out = e->max_out,
                         .gate_up_pairs = o->gate_up_pairs,
                         .int_dot = o->int_dot,
                         .device_memory = (uint64_t)o->device_memory_mb << 20,
                         .progress = o->load_progress,
                         .host_expert_layers = o->host_expert_layers,
                         .host_experts_fixed = o->host_experts_fixed,
                         .plan = plan,
                         .plan_only = plan_only,
                         .build_pipelines = o->build_pipelines};
    CD_TRY(init_pool_and_model(e, &lay, pool, !o->pool_tokens, !o->n_ctx, &go));
    if (plan_only) return 0;
    CD_TRY(model_set_weights_digest(m, e->g.w.digest));
    CD_TRY(alloc_scheduler(e, o));
    e->draw_on_device = o->draw == ENGINE_DRAW_DEVICE ||
        (o->draw == ENGINE_DRAW_AUTO && e->vk->dev.info.props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU);
    if (!e->cache_on) return 0;
    uint8_t ns[RADIX_NS_BYTES];
    const char *t = o->tenant;
    uint8_t code[CVK_CODE_ID_BYTES];
    cvk_code_id(&e->vk->dev.info, code);
    /* the integer family rounds otherwise than the float one; the float plan keeps the id */
    const char *family = gpu_model_family(&e->g);
    if (strcmp(family, "float")) cvk_code_id_variant(code, family);
    CD_TRY(kv_cache_namespace(m->fingerprint, code, "f16", lay.page_tokens, t, t ? strlen(t) : 0, ns));
    CD_TRY(kv_cache_init(&e->cache, &e->pool.pages, ns));
    if (o->host_cache_mb) {
        CD_TRY(kv_host_init(&e->host, e->vk, &e->pool.buf, lay.page_bytes, (uint64_t)o->host_cache_mb << 20));
        CD_TRY(kv_cache_attach_host(&e->cache, &e->host));
    }
    if (o->cache_dir) {
        CD_TRY(kv_disk_init(&e->disk, e->vk, &e->pool.buf, &e->pool.lay, ns, o->cache_dir, o->disk_chunk_pages,
                            o->cache_dir_max_bytes));
        e->disk_on = true;
        CD_TRY(kv_cache_attach_disk(&e->cache, &e->disk));
    }
    if (o->page_events) CD_TRY(kv_cache_set_events(&e->cache, o->page_events, o->page_events_ctx));
    return 0;
}

int engine_init(engine *e, model *m, const engine_opts *o) { return init_engine(e, m, o, NULL, false); }

int engine_plan_memory(model *m, const engine_opts *o, engine_plan *out) {
    *out = (engine_plan){0};
    engine *e = calloc(1, sizeof *e);
    if (!e) return cd_fail("out of memory");
    int rc = init_engine(e, m, o, &out->mem, true);
    if (rc && out->mem.device) { /* the plan was made, and refused */
        snprintf(out->refusal, sizeof out->refusal, "%s", cd_errmsg());
        rc = 0;
    }
    if (!rc && e->vk) {
        snprintf(out->device, sizeof out->device, "%s", e->vk->dev.info.props.deviceName);
        out->n_ctx = out->mem.n_ctx;
        out->pool_tokens = e->pool.pages.n_pages * e->pool.lay.page_tokens;
        out->host_expert_layers = e->g.host_expert_layers;
    }
    engine_free(e);
    free(e);
    return rc;
}

int engine_cache_pages(const engine *e, void (*fn)(void *ctx, uint64_t hash, kv_medium m), void *ctx) {
    return e->cache_on ? kv_cache_list_pages(&e->cache, fn, ctx) : 0;
}

void engine_cache_info_get(const engine *e, engine_cache_info *o) {
    const kv_pages *p = &e->pool.pages;
    *o = (engine_cache_info){.gpu_pages = p->n_pages,
                             .gpu_free = kv_pages_free_count(p),
                             .page_tokens = e->pool.lay.page_tokens,
                             .n_ctx = e->g.n_ctx};
    if (e->cache_on) {
        const radix_stats *t = kv_cache_stats(&e->cache);
        o->prefix_cache = true;
        o->gpu_pinned = (uint32_t)t->pinned_pages;
        o->gpu_cached = (uint32_t)(t->pages - t->pinned_pages);
        o->nodes = t->nodes;
        o->index_bytes = t->bytes;
        o->host_cached = (uint32_t)(t->host_slots - t->pinned_host_slots);
        o->host_pinned = (uint32_t)t->pinned_host_slots;
    }
    uint32_t held = o->gpu_free + o->gpu_cached + o->gpu_pinned;
    o->gpu_private = o->gpu_pages > held ? o->gpu_pages - held : 0;
    if (e->cache.host) {
        o->host_slots = e->cache.host->n_slots;
        o->host_free = kv_host_free_count(e->cache.host);
        o->host_bytes_to_host = e->cache.host->bytes_to_host;
        o->host_bytes_to_gpu = e->cache.host->bytes_to_gpu;
    }
    if (e->disk_on) {
        o->disk = true;
        o->disk_dir = e->disk.dir;
        o->disk_files = e->disk.index.n;
        o->disk_bytes = e->disk.index.bytes;
        o->disk_budget_bytes = e->disk.max_bytes;
    }
}

void engine_free(engine *e) {
    while (e->n_reqs) { /* requests not handed back: pins and pages go back first */
        uint32_t h = e->reqs[0]->handle;
        engine_reply r;
        engine_cancel(e, h);
        if (engine_poll(e, h, &r) == 1) engine_reply_free(&r);
    }
    free(e->reqs);
    if (e->cache_on) kv_cache_free(&e->cache);
    kv_host_free(&e->host);
    kv_disk_free(&e->disk);
    if (e->vk) {
        if (e->vk_borrowed && e->vk->dev.dev) vkDeviceWaitIdle(e->vk->dev.dev); /* nothing freed under its work */
        gpu_model_free(&e->g);
        kv_pool_free(&e->pool);
        if (!e->vk_borrowed) {
            cvk_ctx_free(e->vk);
            free(e->vk);
        }
    }
    host_workers_free(&e->workers);
    free(e->host_rows);
    free(e->b_lp);
    free(e->host_list);
    free(e->adj_count);
    free(e->adj_logits);
    json_vocab_free(&e->json_vocab);
    json_schema_unref(e->any_object);
    free(e->row_free);
    free(e->b_ids);
    free(e->b_row);
    free(e->b_pos);
    free(e->b_out);
    free(e->b_next);
    free(e->b_owner);
    free(e->b_sample);
    free(e->pass);
    memset(e, 0, sizeof *e);
}

int engine_set_sampler(engine *e, const sampler_params *p) {
    e->sp = *p;
    return 0;
}

void engine_reply_free(engine_reply *r) {
    free(r->ids);
    memset(r, 0, sizeof *r);
}

int engine_generate(engine *e, const engine_request *rq, engine_reply *r) {
    *r = (engine_reply){.prompt_tokens = rq->n};
    uint32_t h;
    CD_TRY(engine_submit(e, rq, &h));
    for (;;) {
        int step = engine_step(e, NULL);
        int got = engine_poll(e, h, r);
        if (got < 0) return -1;
        if (got) return r->finish == ENGINE_ERROR ? -1 : 0;
        if (step) { /* the step failed without our request in it: keep its message */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", cd_errmsg());
            engine_cancel(e, h);
            if (engine_poll(e, h, r) == 1) r->finish = ENGINE_ERROR;
            return cd_fail("%s", msg);
        }
    }
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
