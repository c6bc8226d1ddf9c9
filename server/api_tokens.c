/* POST /v1/chat/completions/render, /v1/completions/render, /tokenize and /detokenize: the token
 * ids of a request, in vLLM's shapes, for a router that schedules by prefix (llm-d's precise
 * prefix-cache scorer tokenizes through the render endpoints: docs/FLEET.md). The render
 * endpoints run api_prepare, the function the generating endpoints run, on the same body, so
 * their ids are the ones a request with that body would run (history as generated, a forced tool
 * call's start included), and they refuse what it refuses with the same 400; nothing reaches the
 * engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_generate.h"

/* Until the weights are up the server's model (tokenizer, context) is not there to read. */
static bool refuse_loading(server *s, const http_req *r, enum MHD_Result *rc) {
    if (bridge_ready(&s->b)) return false;
    *rc = http_error(r->c, 503, NULL, "the model is loading");
    return true;
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n && a; i++)
        if (json_array_append_new(a, json_integer(ids[i]))) json_decref(a), a = NULL;
    return a;
}

/* vLLM's SamplingParams, the fields cinder has, as the job will run them (max_tokens: what the
 * context leaves when the request gives none); seed null when the request gives none or -1,
 * which is none too (each such request draws its own). */
static json_t *sampling_params(const job *j, uint32_t n, const json_t *seed) {
    json_t *stop = json_array();
    for (uint32_t k = 0; k < j->n_stop && stop; k++)
        if (json_array_append_new(stop, json_string(j->stop[k]))) json_decref(stop), stop = NULL;
    if (!stop) return NULL;
    return json_pack("{s:I, s:o, s:o, s:I, s:O, s:I, s:o, s:o, s:o, s:o, s:o}", "n", (json_int_t)n, "temperature",
                     json_real(j->sp.temperature), "top_p", json_real(j->sp.top_p), "top_k", (json_int_t)j->sp.top_k,
                     "seed", json_is_integer(seed) && json_integer_value(seed) != -1 ? (json_t *)seed : json_null(),
                     "max_tokens", (json_int_t)j->max_tokens, "stop", stop, "presence_penalty",
                     json_real(j->adjust.presence), "frequency_penalty", json_real(j->adjust.frequency), "logprobs",
                     j->logprobs ? json_integer(j->top_logprobs) : json_null(), "prompt_logprobs",
                     j->vllm_prompt_logprobs >= 0 ? json_integer(j->vllm_prompt_logprobs) : json_null());
}

/* One prompt's vLLM GenerateRequest: {request_id, token_ids, features, sampling_params, model,
 * stream, stream_options, cache_salt, priority, kv_transfer_params}. */
static json_t *generate_request(server *s, const api_prepared *p, const job *j, const json_t *body) {
    char id[48];
    api_new_id(s, p->chat ? "chatcmpl-" : "cmpl-", id, sizeof id);
    const json_t *model = json_object_get(body, "model");
    json_t *ids = ids_json(j->ids, j->n_ids), *sp = sampling_params(j, p->n, json_object_get(body, "seed"));
    json_t *so = p->stream ? json_pack("{s:b}", "include_usage", p->include_usage) : json_null();
    if (!ids || !sp || !so) {
        json_decref(ids), json_decref(sp), json_decref(so);
        return NULL;
    }
    return json_pack("{s:s, s:o, s:n, s:o, s:O, s:b, s:o, s:s?, s:i, s:n}", "request_id", id, "token_ids", ids,
                     "features", "sampling_params", sp, "model", json_is_string(model) ? model : json_null(), "stream",
                     p->stream, "stream_options", so, "cache_salt", j->cache_salt, "priority", 0, "kv_transfer_params");
}

/* chat: one GenerateRequest; completions: a list of them, one per prompt (vLLM's). */
static enum MHD_Result render(server *s, const http_req *r, bool chat) {
    enum MHD_Result rc;
    if (refuse_loading(s, r, &rc)) return rc;
    api_err e = {0};
    api_prepared p;
    if (api_prepare(&s->model, chat, r->body, r->len, 0, &p, &e)) return api_reply_err(r->c, &e);
    json_t *body = json_loadb(r->body, r->len, 0, NULL); /* parsed once already: for model and seed */
    json_t *out = chat ? NULL : json_array();
    for (uint32_t i = 0; i < p.n_prompts && (chat || out); i++) {
        json_t *g = body ? generate_request(s, &p, p.prompts[i], body) : NULL;
        if (chat) out = g;
        else if (!g || json_array_append_new(out, g)) json_decref(out), out = NULL;
    }
    json_decref(body);
    for (uint32_t i = 0; i < p.n_prompts; i++) job_unref(p.prompts[i]), job_unref(p.prompts[i]); /* never submitted */
    free(p.prompts);
    /* the job keeps floats: 7 digits give 0.8 back as the request wrote it, not 0.800000011920929 */
    char *text = out ? json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(7)) : NULL;
    json_decref(out);
    return text ? http_text(r->c, 200, "application/json", text) : http_error(r->c, 500, NULL, "out of memory");
}

enum MHD_Result api_chat_render(server *s, const http_req *r) { return render(s, r, true); }
enum MHD_Result api_completions_render(server *s, const http_req *r) { return render(s, r, false); }

/* {"count", "max_model_len", "tokens", "token_strs"}: token_strs null unless asked for, each
 * token's stored string otherwise (byte-level text, as Hugging Face's convert_ids_to_tokens). */
enum MHD_Result api_tokenize_text(server *s, const http_req *r) {
    enum MHD_Result rc;
    if (refuse_loading(s, r, &rc)) return rc;
    api_err e = {0};
    api_tokens t;
    if (api_tokenize(&s->model, r->body, r->len, &t, &e)) return api_reply_err(r->c, &e);
    json_t *strs = t.token_strs ? json_array() : json_null();
    for (size_t i = 0; t.token_strs && i < t.n && strs; i++)
        if (json_array_append_new(strs, json_string(tok_text(s->model.tok, t.ids[i])))) json_decref(strs), strs = NULL;
    json_t *ids = ids_json(t.ids, t.n);
    free(t.ids);
    json_t *out = ids && strs ? json_pack("{s:I, s:I, s:o, s:o}", "count", (json_int_t)t.n, "max_model_len",
                                          (json_int_t)s->model.n_ctx, "tokens", ids, "token_strs", strs)
                              : (json_decref(ids), json_decref(strs), NULL);
    return out ? http_json(r->c, 200, out) : http_error(r->c, 500, NULL, "out of memory");
}

/* {"prompt": the text}. */
enum MHD_Result api_detokenize_ids(server *s, const http_req *r) {
    enum MHD_Result rc;
    if (refuse_loading(s, r, &rc)) return rc;
    api_err e = {0};
    char *text;
    if (api_detokenize(&s->model, r->body, r->len, &text, &e)) return api_reply_err(r->c, &e);
    json_t *out = json_pack("{s:s}", "prompt", text);
    free(text);
    return out ? http_json(r->c, 200, out) : http_error(r->c, 500, NULL, "out of memory");
}
