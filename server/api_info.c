/* GET /health, /v1/models, /metrics (Prometheus text) and /v1/cache (the same as JSON). All read
 * the bridge's snapshot, never the engine (it belongs to the engine thread). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/http.h"

static bridge_snapshot snapshot(server *s) {
    pthread_mutex_lock(&s->b.mu);
    bridge_snapshot v = s->b.snap;
    pthread_mutex_unlock(&s->b.mu);
    return v;
}

enum MHD_Result api_health(server *s, const http_req *r) {
    if (bridge_ready(&s->b)) return http_json(r->c, 200, json_pack("{s:s}", "status", "ok"));
    /* loading: llama-server's 503, with how far the weights' upload has come (0..1) */
    return http_json(r->c, 503, json_pack("{s:s, s:f}", "status", "loading", "progress", bridge_load_fraction(&s->b)));
}

enum MHD_Result api_models(server *s, const http_req *r) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", s->model_name, "object", "model", "created",
                          (json_int_t)time(NULL), "owned_by", "cinder");
    return http_json(r->c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static int hist(char **o, size_t *n, size_t *cap, const char *name, const char *help, const histogram *h) {
    int rc = buf_printf(o, n, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < HIST_BUCKETS && !rc; i++)
        rc =
            buf_printf(o, n, cap, "%s_bucket{le=\"%g\"} %llu\n", name, hist_bounds[i], (unsigned long long)h->count[i]);
    return rc ||
        buf_printf(o, n, cap, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                   (unsigned long long)h->count[HIST_BUCKETS], name, h->sum, name, (unsigned long long)h->n);
}

static int counter(char **o, size_t *n, size_t *cap, const char *type, const char *name, const char *help, uint64_t v) {
    return buf_printf(o, n, cap, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                      (unsigned long long)v);
}

/* A label value in the text format's escaping: backslash, double quote and line feed escaped.
 * -1 when out of memory. */
static int label_value(char **o, size_t *n, size_t *cap, const char *v) {
    int rc = 0;
    for (const char *p = v; *p && !rc; p++) {
        if (*p == '\\') rc = buf_printf(o, n, cap, "\\\\");
        else if (*p == '"') rc = buf_printf(o, n, cap, "\\\"");
        else if (*p == '\n') rc = buf_printf(o, n, cap, "\\n");
        else rc = buf_printf(o, n, cap, "%c", *p);
    }
    return rc;
}

/* One vLLM metric: HELP, TYPE and its sample {model_name, engine} (vLLM's labels: one engine). */
static int vllm_metric(char **o, size_t *n, size_t *cap, const char *type, const char *name, const char *help,
                       const char *model, double v) {
    return buf_printf(o, n, cap, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"", name, help, name, type, name) ||
        label_value(o, n, cap, model) || buf_printf(o, n, cap, "\",engine=\"0\"} %.17g\n", v);
}

/* The model-server protocol (the Gateway API Inference Extension's, which llm-d's scheduler,
 * vLLM's production-stack and AIBrix scrape): vLLM's names and labels for the queue, the KV
 * usage, the cache's geometry and the prefix cache's token counters. The usage counts the pages
 * running requests hold (pinned cache pages and private ones) over the pool: unpinned cached
 * pages can be taken at once, so they count as free, as vLLM counts them. The hits are every
 * tier's (a page restored from the host or disk is on the GPU before the request runs). */
static int vllm_metrics(char **o, size_t *n, size_t *cap, const char *model, const bridge_snapshot *v) {
    const engine_cache_info *c = &v->cache;
    const engine_stats *st = &v->stats;
    double usage = c->gpu_pages ? (double)(c->gpu_pinned + c->gpu_private) / c->gpu_pages : 0;
    int rc = vllm_metric(o, n, cap, "gauge", "vllm:num_requests_running",
                         "Number of requests in model execution batches.", model, v->running);
    rc = rc ||
        vllm_metric(o, n, cap, "gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    model, v->waiting + v->queued);
    rc = rc ||
        vllm_metric(o, n, cap, "gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", model,
                    usage);
    rc = rc ||
        vllm_metric(o, n, cap, "gauge", "vllm:gpu_cache_usage_perc",
                    "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                    model, usage);
    rc = rc ||
        vllm_metric(o, n, cap, "counter", "vllm:prefix_cache_queries_total",
                    "Prefix cache queries, in terms of number of queried tokens.", model, (double)st->prompt_tokens);
    rc = rc ||
        vllm_metric(o, n, cap, "counter", "vllm:prefix_cache_hits_total",
                    "Prefix cache hits, in terms of number of cached tokens.", model, (double)st->cached_tokens);
    rc = rc ||
        vllm_metric(o, n, cap, "counter", "vllm:gpu_prefix_cache_queries_total",
                    "GPU prefix cache queries, in terms of number of queried tokens. DEPRECATED: Use "
                    "vllm:prefix_cache_queries instead.",
                    model, (double)st->prompt_tokens);
    rc = rc ||
        vllm_metric(o, n, cap, "counter", "vllm:gpu_prefix_cache_hits_total",
                    "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use "
                    "vllm:prefix_cache_hits instead.",
                    model, (double)st->cached_tokens);
    /* an info gauge: the geometry a router hashes blocks with (block_size: the page's tokens) */
    rc = rc ||
        buf_printf(o, n, cap,
                   "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                   "# TYPE vllm:cache_config_info gauge\n"
                   "vllm:cache_config_info{block_size=\"%u\",enable_prefix_caching=\"%s\","
                   "num_cpu_blocks=\"%u\",num_gpu_blocks=\"%u\",engine=\"0\",model_name=\"",
                   c->page_tokens, c->prefix_cache ? "True" : "False", c->host_slots, c->gpu_pages);
    return rc || label_value(o, n, cap, model) || buf_printf(o, n, cap, "\"} 1\n");
}

enum MHD_Result api_metrics(server *s, const http_req *r) {
    bridge_snapshot v = snapshot(s);
    const engine_stats *st = &v.stats;
    const engine_cache_info *c = &v.cache;
    char *o = NULL;
    size_t n = 0, cap = 0;
    int rc =
        buf_printf(&o, &n, &cap,
                   "# HELP cinder_requests_total Requests answered, by outcome.\n# TYPE cinder_requests_total counter\n"
                   "cinder_requests_total{status=\"ok\"} %llu\ncinder_requests_total{status=\"length\"} %llu\n"
                   "cinder_requests_total{status=\"cancelled\"} %llu\ncinder_requests_total{status=\"error\"} %llu\n"
                   "cinder_requests_total{status=\"rejected\"} %llu\n",
                   (unsigned long long)v.req_ok, (unsigned long long)v.req_length, (unsigned long long)v.req_cancelled,
                   (unsigned long long)v.req_error, (unsigned long long)v.req_rejected);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_prompt_tokens_total", "Prompt tokens of requests run.",
                st->prompt_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_generated_tokens_total", "Tokens generated.", st->generated_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_prefix_cache_queries_tokens_total",
                "Prompt tokens looked up in the prefix cache.", st->prompt_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_prefix_cache_hit_tokens_total",
                "Prompt tokens served from the prefix cache (all tiers).", st->cached_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_spec_draft_tokens_total",
                "Tokens guessed by speculative decoding (--spec-tokens) and fed to be checked.", st->draft_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_spec_accepted_tokens_total",
                "Guessed tokens kept: each the token its request chose.", st->accepted_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_prompt_logprob_tokens_total",
                "Prompt positions scored (echo with logprobs, prompt_logprobs): computed, not served from the cache.",
                st->scored_tokens);
    rc = rc || counter(&o, &n, &cap, "gauge", "cinder_requests_running", "Requests on the GPU now.", v.running);
    rc = rc ||
        counter(&o, &n, &cap, "gauge", "cinder_requests_waiting", "Requests waiting for a slot.", v.waiting + v.queued);
    rc = rc ||
        buf_printf(
             &o, &n, &cap,
             "# HELP cinder_kv_pages KV pages by tier and state.\n# TYPE cinder_kv_pages gauge\n"
             "cinder_kv_pages{tier=\"gpu\",state=\"free\"} %u\ncinder_kv_pages{tier=\"gpu\",state=\"cached\"} %u\n"
             "cinder_kv_pages{tier=\"gpu\",state=\"pinned\"} %u\ncinder_kv_pages{tier=\"gpu\",state=\"private\"} %u\n"
             "cinder_kv_pages{tier=\"host\",state=\"free\"} %u\ncinder_kv_pages{tier=\"host\",state=\"cached\"} %u\n"
             "cinder_kv_pages{tier=\"host\",state=\"pinned\"} %u\n",
             c->gpu_free, c->gpu_cached, c->gpu_pinned, c->gpu_private, c->host_free, c->host_cached, c->host_pinned);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_evicted_pages_total", "GPU pages the cache gave up.",
                st->evicted_pages);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_demoted_pages_total", "GPU pages saved to the host tier.",
                st->demoted_pages);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_restored_pages_total", "GPU pages filled from the host tier.",
                st->restored_pages);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_prefix_cache_errors_total",
                "Commits to the prefix cache that failed (the replies stood).", st->cache_errors);
    if (c->disk) { /* the disk tier (--cache-dir) */
        rc = rc ||
            counter(&o, &n, &cap, "counter", "cinder_disk_chunks_read_total", "Chunk files served from the disk tier.",
                    st->disk_chunks_read);
        rc = rc ||
            counter(&o, &n, &cap, "counter", "cinder_disk_chunks_written_total",
                    "Chunk files written to the disk tier.", st->disk_chunks_written);
        rc = rc ||
            counter(&o, &n, &cap, "counter", "cinder_disk_rejected_total",
                    "Chunk files rejected (corrupt, forged, truncated, another model) or skipped.", st->disk_rejected);
        rc = rc ||
            counter(&o, &n, &cap, "counter", "cinder_disk_evicted_chunks_total",
                    "Chunk files deleted for the budget (--cache-dir-max-mb), least recently used first.",
                    st->disk_evicted_chunks);
        rc = rc ||
            counter(&o, &n, &cap, "counter", "cinder_disk_evicted_bytes_total", "Bytes of those files.",
                    st->disk_evicted_bytes);
        rc = rc ||
            counter(&o, &n, &cap, "counter", "cinder_disk_over_budget_chunks_total",
                    "Chunks not written: the budget could not hold them.", st->disk_over_budget);
        rc = rc ||
            counter(&o, &n, &cap, "gauge", "cinder_disk_bytes", "Bytes of the chunk files under the cache directory.",
                    c->disk_bytes);
        rc = rc ||
            counter(&o, &n, &cap, "gauge", "cinder_disk_budget_bytes", "The cache directory's budget.",
                    c->disk_budget_bytes);
    }
    size_t held, held_tokens; /* the reply memory (runtime/text/reply_memory.h) */
    reply_memory_held(&s->replies, &held, &held_tokens);
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_reply_memory_hits_total",
                "Chat requests whose prompt began with a sequence run here (a reply sent back, as its ids).",
                atomic_load(&s->replies.hits));
    rc = rc ||
        counter(&o, &n, &cap, "counter", "cinder_reply_memory_reused_tokens_total",
                "Prompt tokens those requests took from the reply memory.", atomic_load(&s->replies.tokens_reused));
    rc = rc || counter(&o, &n, &cap, "gauge", "cinder_reply_memory_entries", "Sequences the reply memory holds.", held);
    rc = rc ||
        counter(&o, &n, &cap, "gauge", "cinder_reply_memory_tokens", "Tokens the reply memory holds.", held_tokens);
    rc = rc || hist(&o, &n, &cap, "cinder_ttft_seconds", "Time to first token.", &v.ttft);
    rc = rc || hist(&o, &n, &cap, "cinder_inter_token_seconds", "Time between two tokens of a request.", &v.itl);
    rc = rc || hist(&o, &n, &cap, "cinder_e2e_seconds", "Submit to the last token.", &v.e2e);
    rc = rc || vllm_metrics(&o, &n, &cap, s->model_name, &v);
    if (rc) {
        free(o);
        return http_error(r->c, 500, NULL, "out of memory");
    }
    return http_text(r->c, 200, "text/plain; version=0.0.4", o);
}

/* ?pages=1 with KV events on: the hashes of every whole page the cache holds, per tier, computed
 * from the tree's tokens by the engine thread (what an index built from the events must hold;
 * the tests compare the two). */
static int add_page_listing(server *s, json_t *j) {
    int rc = bridge_list_pages(&s->b); /* returns with the mutex held */
    json_t *gpu = json_array(), *cpu = json_array();
    for (uint32_t i = 0; !rc && i < s->b.n_list && gpu && cpu; i++)
        rc = json_array_append_new(s->b.list_medium[i] == KV_MEDIUM_CPU ? cpu : gpu,
                                   json_integer((json_int_t)s->b.list_hash[i]));
    pthread_mutex_unlock(&s->b.mu);
    if (rc || !gpu || !cpu) {
        json_decref(gpu), json_decref(cpu);
        return -1;
    }
    return json_object_set_new(j, "pages", json_pack("{s:o, s:o}", "gpu", gpu, "cpu", cpu));
}

enum MHD_Result api_cache(server *s, const http_req *r) {
    bridge_snapshot v = snapshot(s);
    const engine_cache_info *c = &v.cache;
    const engine_stats *st = &v.stats;
    json_t *j = json_pack(
        "{s:{s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i}, s:I, s:I, s:i, s:i, s:i, s:I, s:I, s:I, s:I, "
        "s:I, s:I}",
        "gpu", "pages", c->gpu_pages, "free", c->gpu_free, "cached", c->gpu_cached, "pinned", c->gpu_pinned, "private",
        c->gpu_private, "host", "slots", c->host_slots, "free", c->host_free, "cached", c->host_cached, "pinned",
        c->host_pinned, "nodes", (json_int_t)c->nodes, "index_bytes", (json_int_t)c->index_bytes, "page_tokens",
        c->page_tokens, "running", v.running, "waiting", v.waiting + v.queued, "requests", (json_int_t)st->requests,
        "prompt_tokens", (json_int_t)st->prompt_tokens, "hit_tokens", (json_int_t)st->cached_tokens, "generated_tokens",
        (json_int_t)st->generated_tokens, "evicted_pages", (json_int_t)st->evicted_pages, "dedup_tokens",
        (json_int_t)st->dedup_tokens);
    if (s->b.pub)
        json_object_set_new(
            j, "kv_events",
            json_pack("{s:s, s:I}", "topic", s->kv_topic, "dropped_batches", (json_int_t)kv_pub_dropped(s->b.pub)));
    const char *pages = MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, "pages");
    if (pages && s->b.pub && add_page_listing(s, j)) {
        json_decref(j);
        return http_error(r->c, 503, NULL, "the page listing could not be made");
    }
    if (c->disk)
        json_object_set_new(j, "disk",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "files", (json_int_t)c->disk_files,
                                      "bytes", (json_int_t)c->disk_bytes, "budget_bytes",
                                      (json_int_t)c->disk_budget_bytes, "chunks_read", (json_int_t)st->disk_chunks_read,
                                      "chunks_written", (json_int_t)st->disk_chunks_written, "evicted_chunks",
                                      (json_int_t)st->disk_evicted_chunks, "evicted_bytes",
                                      (json_int_t)st->disk_evicted_bytes));
    return http_json(r->c, 200, j);
}
