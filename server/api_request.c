/* Request bodies of /v1/chat/completions and /v1/completions to jobs: typed fields, the chat
 * template, tool_choice, tokenizing, the context check. No HTTP here (fuzzed alone:
 * tests/fuzz/fuzz_request.c). */
#include "server/api_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/chat.h"
#include "runtime/text/chat_thinking.h"
#include "runtime/text/slice.h"

int api_fail(api_err *e, unsigned status, const char *param, const char *fmt, ...) {
    e->status = status;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- typed fields: absent or null leaves *out as it is ---- */

static int num_field(const json_t *o, const char *key, double lo, double hi, double *out, api_err *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return api_fail(e, 400, key, "%s must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return api_fail(e, 400, key, "%s must be between %g and %g", key, lo, hi);
    *out = x;
    return 0;
}

static int int_field(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, api_err *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return api_fail(e, 400, key, "%s must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_fail(e, 400, key, "%s must be between %lld and %lld", key, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int bool_field(const json_t *o, const char *key, bool *out, api_err *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return api_fail(e, 400, key, "%s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int stop_field(const json_t *o, gen_params *g, api_err *e) {
    const json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) v = json_pack("[O]", v);
    else if (json_is_array(v)) json_incref((json_t *)v);
    else return api_fail(e, 400, "stop", "stop must be a string or an array of strings");
    int rc = 0;
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (i >= JOB_MAX_STOP) {
            rc = api_fail(e, 400, "stop", "stop has more than %d strings", JOB_MAX_STOP);
            break;
        }
        if (!json_is_string(s) || !json_string_length(s) || json_string_length(s) > 256) {
            rc = api_fail(e, 400, "stop", "stop must hold non-empty strings of at most 256 bytes");
            break;
        }
        if (!(g->stop[g->n_stop] = strdup(json_string_value(s)))) {
            rc = api_fail(e, 500, NULL, "out of memory");
            break;
        }
        g->n_stop++;
    }
    json_decref((json_t *)v);
    return rc;
}

/* cache_salt: a string of 1 to 256 bytes. The salt travels on as a C string, so a NUL inside
 * (which json_loadb refuses today, without JSON_ALLOW_NUL) would cut it into another salt. */
static int salt_field(const json_t *o, gen_params *g, api_err *e) {
    const json_t *v = json_object_get(o, "cache_salt");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return api_fail(e, 400, "cache_salt", "cache_salt must be a string");
    size_t n = json_string_length(v);
    if (n < 1 || n > 256 || strlen(json_string_value(v)) != n)
        return api_fail(e, 400, "cache_salt", "cache_salt must be a string of 1 to 256 bytes");
    if (!(g->cache_salt = strdup(json_string_value(v)))) return api_fail(e, 500, NULL, "out of memory");
    return 0;
}

/* logit_bias: {"token id": bias}, ids as decimal strings (OpenAI's), biases -100 to 100; the
 * list sorted by id, one entry per token. */
static int bias_field(const json_t *o, int32_t n_vocab, gen_params *g, api_err *e) {
    const json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return api_fail(e, 400, "logit_bias", "logit_bias must be an object of token ids to numbers");
    size_t n = json_object_size(v);
    if (n > LOGIT_BIAS_MAX)
        return api_fail(e, 400, "logit_bias", "logit_bias has %zu entries; at most %d", n, LOGIT_BIAS_MAX);
    if (!n) return 0;
    logit_bias *list = malloc(n * sizeof *list);
    if (!list) return api_fail(e, 500, NULL, "out of memory");
    g->adjust.bias = list;
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        size_t digits = strspn(key, "0123456789");
        long id = digits && !key[digits] && digits <= 9 ? strtol(key, NULL, 10) : -1;
        if (id < 0 || id >= n_vocab)
            return api_fail(e, 400, "logit_bias", "logit_bias key \"%.64s\" is not a token id (0 to %d)", key,
                            n_vocab - 1);
        if (!json_is_number(x) || !(json_number_value(x) >= -100 && json_number_value(x) <= 100))
            return api_fail(e, 400, "logit_bias", "logit_bias of token %ld must be a number from -100 to 100", id);
        list[g->adjust.n_bias++] = (logit_bias){(int32_t)id, (float)json_number_value(x)};
    }
    for (uint32_t i = 1; i < g->adjust.n_bias; i++) /* insertion sort: at most LOGIT_BIAS_MAX */
        for (uint32_t k = i; k > 0 && list[k].id < list[k - 1].id; k--) {
            logit_bias t = list[k];
            list[k] = list[k - 1], list[k - 1] = t;
        }
    for (uint32_t i = 1; i < g->adjust.n_bias; i++)
        if (list[i].id == list[i - 1].id)
            return api_fail(e, 400, "logit_bias", "logit_bias names token %d twice", list[i].id);
    return 0;
}

/* Fields cinder does not implement, refused by name when they ask for something (api_request.h),
 * accepted when absent, null, false, 0, "" or their default: OpenAI's, and the constraints of
 * llama-server (grammar) and vLLM (guided_* but guided_json, structured_outputs), which a client
 * written for those would otherwise see ignored. */
static int unsupported_fields(const json_t *b, bool chat, api_err *e) {
    static const char *const keys[] = {
        "echo",    "suffix",       "best_of",       "functions",      "function_call",
        "grammar", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *k = keys[i];
        if (!chat && !strcmp(k, "echo")) continue;
        const json_t *v = json_object_get(b, k);
        if (!v || json_is_null(v) || json_is_false(v)) continue;
        if (json_is_integer(v) && json_integer_value(v) == (strcmp(k, "best_of") ? 0 : 1)) continue;
        if (json_is_string(v) && !json_string_length(v)) continue;
        if (!strcmp(k, "functions") || !strcmp(k, "function_call"))
            return api_fail(e, 400, k, "%s (the legacy function calling) is not supported: use tools and tool_choice",
                            k);
        if (!strcmp(k, "echo"))
            return api_fail(e, 400, k, "echo is not supported on chat completions: /v1/completions has it");
        if (strcmp(k, "suffix") && strcmp(k, "best_of"))
            return api_fail(e, 400, k,
                            "%s is not supported by this server: response_format json_object and json_schema are", k);
        return api_fail(e, 400, k, "%s is not supported by this server", k);
    }
    return 0;
}

/* A schema compiled for the reply (json_schema.h), or a 400 naming param and the problem. */
static int compile_schema(const json_t *schema, bool strict, const char *param, gen_params *g, api_err *e) {
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return api_fail(e, 400, param, "%s must be a JSON Schema (an object)", param);
    if (!(g->schema = json_schema_compile(schema, strict)))
        return api_fail(e, 400, param, "%s: %s", param, cd_errmsg());
    return 0;
}

/* response_format: {"type": "json_schema", "json_schema": {"name": N, "schema": S, "strict": B}}:
 * N as OpenAI has it (1 to 64 of a-z A-Z 0-9 _ -), S absent means any JSON value. */
static int format_schema(const json_t *v, gen_params *g, api_err *e) {
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return api_fail(e, 400, "response_format.json_schema",
                        "response_format json_schema needs json_schema: {\"name\": ..., \"schema\": {...}}");
    const char *name = json_string_value(json_object_get(js, "name"));
    size_t n = name ? strlen(name) : 0;
    if (!n || n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != n)
        return api_fail(e, 400, "response_format.json_schema.name",
                        "response_format.json_schema.name must be 1 to 64 letters, digits, '_' or '-'");
    const json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return api_fail(e, 400, "response_format.json_schema.strict",
                        "response_format.json_schema.strict must be true or false");
    const json_t *schema = json_object_get(js, "schema");
    json_t *any = schema && !json_is_null(schema) ? NULL : json_object();
    int rc = compile_schema(any ? any : schema, json_is_true(strict), "response_format.json_schema.schema", g, e);
    json_decref(any);
    return rc;
}

/* The reply's shape: response_format {"type": "text"} (the default), {"type": "json_object"}
 * (one JSON object: engine_request.json_object) or {"type": "json_schema", ...}; or a schema
 * given as llama-server (json_schema) or vLLM (guided_json) take it, enforced strictly. At most
 * one of them asks for something. */
static int format_field(const json_t *b, gen_params *g, api_err *e) {
    const json_t *v = json_object_get(b, "response_format");
    const char *type = json_is_object(v) ? json_string_value(json_object_get(v, "type")) : NULL;
    bool text = !v || json_is_null(v) || (type && !strcmp(type, "text"));
    static const char *const alt[] = {"json_schema", "guided_json"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *x = json_object_get(b, alt[i]);
        if (!x || json_is_null(x) || (json_is_string(x) && !json_string_length(x))) continue;
        if (!text || g->schema)
            return api_fail(e, 400, alt[i], "%s and another reply format exclude each other", alt[i]);
        json_t *parsed = json_is_string(x) ? json_loads(json_string_value(x), JSON_DECODE_ANY, NULL) : NULL;
        int rc = compile_schema(parsed ? parsed : x, true, alt[i], g, e);
        json_decref(parsed);
        if (rc) return -1;
    }
    if (text) return 0;
    if (type && !strcmp(type, "json_object")) return g->json_object = true, 0;
    if (type && !strcmp(type, "json_schema")) return format_schema(v, g, e);
    return api_fail(e, 400, "response_format",
                    "response_format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                    "\"json_schema\", ...}");
}

/* Chat: logprobs (true / false) and top_logprobs (0 to 20, with logprobs true); completions:
 * logprobs (0 to 5 alternatives, OpenAI's legacy field). */
static int logprobs_fields(const json_t *b, bool chat, gen_params *g, api_err *e) {
    int64_t top = 0;
    if (!chat) {
        top = -1;
        if (int_field(b, "logprobs", 0, 5, &top, e)) return -1;
        g->logprobs = top >= 0;
        g->top_logprobs = top > 0 ? (uint32_t)top : 0;
        return 0;
    }
    if (bool_field(b, "logprobs", &g->logprobs, e) || int_field(b, "top_logprobs", 0, TOP_LOGPROBS_MAX, &top, e))
        return -1;
    if (top && !g->logprobs) return api_fail(e, 400, "top_logprobs", "top_logprobs needs logprobs: true");
    g->top_logprobs = (uint32_t)top;
    return 0;
}

/* vLLM's prompt_logprobs: an integer, 0 to TOP_LOGPROBS_MAX here (-1, every token of the
 * vocabulary, is refused by name); with stream only 0, which vLLM accepts and gives nothing for. */
static int prompt_logprobs_field(const json_t *b, gen_params *g, api_err *e) {
    const json_t *v = json_object_get(b, "prompt_logprobs");
    if (json_is_integer(v) && json_integer_value(v) == -1)
        return api_fail(e, 400, "prompt_logprobs",
                        "prompt_logprobs -1 (the whole vocabulary) is not supported: at most %d", TOP_LOGPROBS_MAX);
    int64_t k = -1;
    if (int_field(b, "prompt_logprobs", 0, TOP_LOGPROBS_MAX, &k, e)) return -1;
    if (g->stream && k > 0)
        return api_fail(e, 400, "prompt_logprobs", "prompt_logprobs are not available when stream is true");
    g->prompt_logprobs = g->stream ? -1 : (int32_t)k;
    return 0;
}

static int gen_params_parse(const json_t *b, bool chat, uint64_t seed_default, int32_t n_vocab, gen_params *g,
                            api_err *e) {
    *g = (gen_params){.sp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = seed_default},
                      .prompt_logprobs = -1};
    double temp = g->sp.temperature, top_p = g->sp.top_p;
    double presence = 0, frequency = 0;
    int64_t top_k = g->sp.top_k, seed = -1, n = 1, max_tokens = -1;
    bool has_mct =
        json_object_get(b, "max_completion_tokens") && !json_is_null(json_object_get(b, "max_completion_tokens"));
    const char *max_key = has_mct ? "max_completion_tokens" : "max_tokens";
    if (int_field(b, max_key, 0, INT32_MAX, &max_tokens, e) || (!chat && bool_field(b, "echo", &g->echo, e)) ||
        num_field(b, "temperature", 0, 2, &temp, e) || num_field(b, "top_p", 0, 1, &top_p, e) ||
        int_field(b, "top_k", -1, INT32_MAX, &top_k, e) || int_field(b, "seed", INT64_MIN, INT64_MAX, &seed, e) ||
        int_field(b, "n", 1, 128, &n, e) || bool_field(b, "stream", &g->stream, e) || stop_field(b, g, e) ||
        salt_field(b, g, e) || num_field(b, "presence_penalty", -2, 2, &presence, e) ||
        num_field(b, "frequency_penalty", -2, 2, &frequency, e) || bias_field(b, n_vocab, g, e) ||
        logprobs_fields(b, chat, g, e) || format_field(b, g, e) || unsupported_fields(b, chat, e) ||
        prompt_logprobs_field(b, g, e))
        return -1;
    if (max_tokens == 0 && !g->echo)
        return api_fail(e, 400, max_key,
                        "%s 0 asks for no token: it needs echo: true (the prompt's log-probabilities alone)", max_key);
    const json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return api_fail(e, 400, "stream_options", "stream_options must be an object");
        if (bool_field(so, "include_usage", &g->include_usage, e)) return e->param = "stream_options.include_usage", -1;
    }
    g->max_tokens = max_tokens;
    g->n = (uint32_t)n;
    g->sp.temperature = (float)temp;
    g->sp.top_p = top_p > 0 ? (float)top_p : 1e-6f; /* 0 keeps the most likely token, as greedy */
    g->sp.top_k = (int32_t)top_k;
    if (seed != -1) g->sp.seed = (uint64_t)seed;
    g->adjust.presence = (float)presence;
    g->adjust.frequency = (float)frequency;
    return 0;
}

static void gen_params_free(gen_params *g) {
    for (uint32_t i = 0; i < g->n_stop; i++) free(g->stop[i]);
    g->n_stop = 0;
    free(g->cache_salt);
    g->cache_salt = NULL;
    logit_adjust_free(&g->adjust);
    json_schema_unref(g->schema);
    g->schema = NULL;
}

/* A prompt of n tokens fits the context (what: its name in the message; param: the field). */
static int prompt_fits(const api_model *s, size_t n, const char *what, const char *param, api_err *e) {
    if (n == 0) return api_fail(e, 400, param, "%s is empty", what);
    if (n >= s->n_ctx)
        return api_fail(e, 400, param,
                        "%s has %zu tokens; the context holds %u (prompt + at least one generated token)", what, n,
                        s->n_ctx);
    return 0;
}

/* The job's prompt: ids[n] (taken), and what max_tokens leaves of the context after it. */
static void set_prompt(job *j, const api_model *s, int32_t *ids, size_t n, int64_t max_tokens) {
    uint32_t room = s->n_ctx - (uint32_t)n;
    free(j->ids);
    j->ids = ids;
    j->n_ids = (uint32_t)n;
    j->max_tokens = max_tokens >= 0 && max_tokens < room ? (uint32_t)max_tokens : room;
}

/* The job of prompt ids[n] (taken; what and param name the prompt in errors) from g's fields. */
static int make_job(const api_model *s, int32_t *ids, size_t n, gen_params *g, const char *what, const char *param,
                    job **out, api_err *e) {
    *out = NULL;
    if (prompt_fits(s, n, what, param, e)) {
        free(ids);
        return -1;
    }
    job *j = job_new();
    if (!j) {
        free(ids);
        return api_fail(e, 500, NULL, "out of memory");
    }
    set_prompt(j, s, ids, n, g->max_tokens);
    j->sp = g->sp;
    memcpy(j->stop, g->stop, sizeof g->stop);
    j->n_stop = g->n_stop;
    g->n_stop = 0;
    j->cache_salt = g->cache_salt;
    g->cache_salt = NULL;
    j->adjust = g->adjust;
    g->adjust = (logit_adjust){0};
    j->logprobs = g->logprobs;
    j->top_logprobs = g->top_logprobs;
    j->json_object = g->json_object;
    j->schema = g->schema;
    g->schema = NULL;
    j->echo = g->echo;
    j->vllm_prompt_logprobs = g->prompt_logprobs;
    j->prompt_logprobs = (g->echo && g->logprobs) || g->prompt_logprobs >= 0;
    uint32_t echo_top = g->echo && g->logprobs ? g->top_logprobs : 0;
    j->prompt_top = g->prompt_logprobs > (int32_t)echo_top ? (uint32_t)g->prompt_logprobs : echo_top;
    *out = j;
    return 0;
}

/* ---- the prompt of a chat request ---- */

typedef struct chat_req {
    gen_params g;
    const json_t *messages, *tools; /* borrowed from the body; tools NULL when none are offered */
    chat_think_ask think_ask;       /* chat_template_kwargs.enable_thinking */
    bool thinking;                  /* decided (decide_thinking) */
    char *forced;                   /* the start of a tool call the request's tool_choice demands, or NULL */
    bool lazy;   /* tool_choice auto with a strict tool: the calls the model makes are held (g.schema) */
    bool single; /* parallel_tool_calls false: after one call, the end */
    bool coder;  /* the qwen3-coder template: XML calls, held as their JSON view (runtime/text/coder_call.h) */
} chat_req;

static bool offered(const json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *tn = NULL;
        if (!json_unpack(t, "{s:{s:s}}", "function", "name", &tn) && !strcmp(tn, name)) return true;
    }
    return false;
}

/* The schema of one call of tool i: {"name": its name, "arguments": its parameters}. The
 * parameters become a resource of their own ("$id": their $refs keep pointing into them). A
 * tool marked strict must compile strictly (else a 400 naming it); one whose parameters do not
 * compile otherwise takes any object (its call still has the right name and is JSON). */
static json_t *call_schema(const json_t *tool, size_t i, api_err *e) {
    const char *name = NULL;
    json_t *params = NULL, *fn = json_object_get(tool, "function");
    json_unpack(fn, "{s:s}", "name", &name);
    const json_t *given = json_object_get(fn, "parameters");
    if (json_is_object(given)) {
        json_schema *ok = json_schema_compile(given, json_is_true(json_object_get(fn, "strict")));
        if (!ok && json_is_true(json_object_get(fn, "strict"))) {
            api_fail(e, 400, "tools", "tools[%zu].function.parameters: %s", i, cd_errmsg());
            return NULL;
        }
        if (ok) params = json_deep_copy(given);
        json_schema_unref(ok);
    }
    if (!params) params = json_pack("{s:s}", "type", "object");
    if (params) json_object_set_new(params, "$id", json_string("cinder:tools/parameters"));
    json_t *call = params
        ? json_pack("{s:s,s:{s:{s:s?},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "const", name,
                    "arguments", params, "required", "name", "arguments", "additionalProperties", 0)
        : NULL;
    if (!call) api_fail(e, 500, NULL, "out of memory");
    return call;
}

/* A forced call's schema: the named tool's call, or (required) any tool's (a union); when that
 * is past what one schema holds (JSON_SCHEMA_MAX_BRANCHES tools, JSON_SCHEMA_MAX_NODES), a
 * name among the tools and any object of arguments. */
static int forced_schema(chat_req *q, const char *named, api_err *e) {
    json_t *calls = json_array(), *t, *root = NULL, *names = json_array();
    size_t i;
    json_array_foreach(q->tools, i, t) {
        const char *name = NULL;
        json_unpack(t, "{s:{s:s}}", "function", "name", &name);
        if (!name || (named && strcmp(name, named))) continue;
        json_t *c = call_schema(t, i, e);
        if (!c) {
            json_decref(calls);
            json_decref(names);
            return -1;
        }
        json_array_append_new(calls, c);
        json_array_append_new(names, json_string(name));
    }
    if (json_array_size(calls) == 1) root = json_incref(json_array_get(calls, 0));
    else root = json_pack("{s:O}", "anyOf", calls);
    q->g.schema = root ? json_schema_compile(root, false) : NULL;
    json_decref(root);
    json_decref(calls);
    if (!q->g.schema) { /* too many tools or too large a union for one schema: the name alone */
        root = json_pack("{s:s,s:{s:{s:O},s:{s:s}},s:[s,s],s:b}", "type", "object", "properties", "name", "enum", names,
                         "arguments", "type", "object", "required", "name", "arguments", "additionalProperties", 0);
        q->g.schema = root ? json_schema_compile(root, false) : NULL;
        json_decref(root);
    }
    json_decref(names);
    return q->g.schema ? 0 : api_fail(e, 400, "tools", "tools: %s", cd_errmsg());
}

static bool any_strict(const json_t *tools) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i,
                       t) if (json_is_true(json_object_get(json_object_get(t, "function"), "strict"))) return true;
    return false;
}

/* tool_choice: "auto" (default), "none" (the tools are not shown), "required" (the reply starts
 * with a tool call), {"type": "function", "function": {"name": N}} (a call of N). A forced choice
 * is the start of the call written into the prompt, the same text the model would have
 * generated; the rest of the call is held to the tools' schemas (forced_schema: the name one of
 * theirs, the arguments an instance of its parameters), then "\n</tool_call>" and the end. */
static int tool_choice(const json_t *body, chat_req *q, api_err *e) {
    const json_t *tc = json_object_get(body, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    const char *mode = json_string_value(tc), *name = NULL;
    if (mode && !strcmp(mode, "auto")) return 0;
    if (mode && !strcmp(mode, "none")) {
        q->tools = NULL;
        return 0;
    }
    if (mode && !strcmp(mode, "required")) {
        q->forced = strdup("<tool_call>\n");
    } else if (q->coder && !mode && !json_unpack((json_t *)tc, "{s:{s:s}}", "function", "name", &name)) {
        size_t n = strlen(name) + 32; /* Qwen3-Coder's call: the name is written, the arguments free */
        if ((q->forced = malloc(n))) snprintf(q->forced, n, "<tool_call>\n<function=%s>\n", name);
    } else if (!mode && !json_unpack((json_t *)tc, "{s:{s:s}}", "function", "name", &name)) {
        json_t *js = json_string(name);
        char *quoted = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        size_t n = quoted ? strlen(quoted) + 64 : 0;
        if (quoted && (q->forced = malloc(n)))
            snprintf(q->forced, n, "<tool_call>\n{\"name\": %s, \"arguments\": ", quoted);
        free(quoted);
    } else {
        return api_fail(e, 400, "tool_choice",
                        "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    }
    if (!q->forced) return api_fail(e, 500, NULL, "out of memory");
    if (!q->tools) return api_fail(e, 400, "tool_choice", "tool_choice asks for a tool call but no tools are given");
    if (name && !offered(q->tools, name))
        return api_fail(e, 400, "tool_choice", "tool_choice names %s, which is not in tools", name);
    if (q->coder && name && strpbrk(name, "<>\n")) /* it would end the <function=NAME> tag early */
        return api_fail(e, 400, "tool_choice", "a Qwen3-Coder tool name cannot hold <, > or a newline");
    return forced_schema(q, name, e);
}

/* OpenAI lets a message's content be an array of parts; the template takes a string. Text parts
 * are joined in order (as llama-server does); any other part is refused by name. In place: the
 * body is the request's own. */
static int flatten_content(json_t *messages, api_err *e) {
    size_t i, k;
    json_t *m, *part;
    json_array_foreach(messages, i, m) {
        json_t *parts = json_is_object(m) ? json_object_get(m, "content") : NULL;
        if (!json_is_array(parts)) continue;
        char *text = NULL;
        size_t len = 0;
        json_array_foreach(parts, k, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            json_t *t = json_object_get(part, "text");
            if (!type || strcmp(type, "text") || !json_is_string(t)) {
                free(text);
                return api_fail(
                    e, 400, "messages",
                    "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported", i, k);
            }
            size_t n = json_string_length(t);
            char *grown = realloc(text, len + n + 1);
            if (!grown) {
                free(text);
                return api_fail(e, 500, NULL, "out of memory");
            }
            text = grown;
            memcpy(text + len, json_string_value(t), n);
            len += n;
        }
        json_t *joined = json_stringn(text ? text : "", len);
        free(text);
        if (!joined || json_object_set_new(m, "content", joined)) return api_fail(e, 500, NULL, "out of memory");
    }
    return 0;
}

/* What the template renders: messages (content parts joined), tools, and
 * chat_template_kwargs.enable_thinking. Shared by chat requests and /tokenize, so both render a
 * conversation the same way. */
static int chat_fields(const json_t *body, chat_req *q, api_err *e) {
    q->messages = json_object_get(body, "messages");
    if (!json_is_array(q->messages) || !json_array_size(q->messages))
        return api_fail(e, 400, "messages", "messages must be a non-empty array of messages");
    if (flatten_content((json_t *)q->messages, e)) return -1;
    const json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return api_fail(e, 400, "tools", "tools must be an array");
    q->tools = json_is_array(tools) && json_array_size(tools) ? tools : NULL;
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return api_fail(e, 400, "chat_template_kwargs", "chat_template_kwargs must be an object");
    if (chat_think_ask_of(json_object_get(kw, "enable_thinking"), &q->think_ask))
        return api_fail(e, 400, "chat_template_kwargs.enable_thinking", "enable_thinking must be true or false");
    return 0;
}

/* Whether the reply thinks (runtime/text/chat_thinking.h): the request's enable_thinking, else
 * for a free reply the server's --think / --no-think, else the template's default (a JSON reply
 * or a demanded call that does not say is off, whatever the server's default). */
static int decide_thinking(const api_model *m, chat_req *q, chat_reply_start start, api_err *e) {
    chat_think_ask ask = q->think_ask != CHAT_THINK_ASK_DEFAULT ? q->think_ask
        : start == CHAT_REPLY_FREE                              ? m->think_default
                                                                : CHAT_THINK_ASK_DEFAULT;
    if (chat_thinking(m->template, ask, start, &q->thinking))
        return api_fail(e, 400, start == CHAT_REPLY_JSON ? "response_format" : "tool_choice", "%s", cd_errmsg());
    return 0;
}

static int parse_chat(const json_t *body, uint64_t seed, const api_model *m, chat_req *q, api_err *e) {
    *q = (chat_req){.coder = m->template == CHAT_TEMPLATE_QWEN3_CODER};
    if (gen_params_parse(body, true, seed, tok_n_vocab(m->tok), &q->g, e) || chat_fields(body, q, e)) return -1;
    bool json = q->g.json_object || q->g.schema;
    const json_t *tc = json_object_get(body, "tool_choice");
    bool demands = json_is_object(tc) || (json_is_string(tc) && !strcmp(json_string_value(tc), "required"));
    if (json && demands && q->tools)
        return api_fail(e, 400, "response_format",
                        "a JSON response_format and a tool_choice that demands a tool call exclude each other");
    if (tool_choice(body, q, e)) return -1;
    if (decide_thinking(m, q, json ? CHAT_REPLY_JSON : q->forced ? CHAT_REPLY_CALL : CHAT_REPLY_FREE, e)) return -1;
    bool parallel = true;
    if (bool_field(body, "parallel_tool_calls", &parallel, e)) return -1;
    q->single = !parallel;
    /* OpenAI's strict: the calls fit; parallel_tool_calls false: at most one (held, so that the
     * end can be all that follows it) */
    if (!q->forced && q->tools && !json && (any_strict(q->tools) || q->single)) {
        if (forced_schema(q, NULL, e)) return -1;
        q->lazy = true;
    }
    return 0;
}

static void chat_req_free(chat_req *q) {
    gen_params_free(&q->g);
    free(q->forced);
}

/* The rendered prompt's ids: with history as generated, the reply memory's (a reply sent back
 * as the ids the model generated: runtime/text/reply_memory.h); else tok_encode of all. */
static int encode_prompt(const api_model *s, const char *salt, const char *text, size_t len, int32_t **ids, size_t *n,
                         uint32_t *reused) {
    return reply_memory_encode(s->as_generated ? s->replies : NULL, s->tok, salt, text, len, ids, n, reused);
}

/* The rendered, tokenized prompt (the forced start of a tool call included); without
 * generation_prompt (/tokenize's add_generation_prompt false) the conversation alone.
 * *in_think (when not NULL): the prompt ends inside an open think block (a generation prompt
 * that opens "<think>\n"), so the reply starts in its reasoning (toolcall_format.in_think).
 * *kept (when not NULL): the rendered text, which the ids stand for (the job keeps it for the
 * reply memory); *reused: encode_prompt's. */
static int chat_prompt(const api_model *s, const chat_req *q, bool generation_prompt, int32_t **ids, size_t *n,
                       bool *in_think, char **kept, uint32_t *reused, api_err *e) {
    char *text = NULL;
    chat_options opt = {.template = s->template,
                        .add_generation_prompt = generation_prompt,
                        .enable_thinking = q->thinking,
                        .as_generated = s->as_generated,
                        .preserve_reasoning = s->preserve_reasoning,
                        .generated_call = s->calls ? call_memory_lookup : NULL,
                        .generated_call_ctx = s->calls};
    if (chat_render(q->messages, q->tools, opt, &text)) return api_fail(e, 400, "messages", "%s", cd_errmsg());
    if (in_think)
        *in_think = !q->forced && generation_prompt && ends_with((slice){text, strlen(text)}, LIT("<think>\n"));
    if (q->forced) {
        size_t a = strlen(text), b = strlen(q->forced);
        char *t = realloc(text, a + b + 1);
        if (!t) {
            free(text);
            return api_fail(e, 500, NULL, "out of memory");
        }
        memcpy(t + a, q->forced, b + 1);
        text = t;
    }
    uint32_t r;
    int rc = encode_prompt(s, q->g.cache_salt, text, strlen(text), ids, n, reused ? reused : &r);
    if (kept && !rc) *kept = text;
    else free(text);
    return rc ? api_fail(e, 400, "messages", "%s", cd_errmsg()) : 0;
}

/* One prompt of a completions request (what: its name in messages, "prompt" or "prompt[i]"): a
 * string (tokenized with special tokens parsed, as llama-server does) or an array of token ids.
 * With echo, *text is what the reply begins with: the string itself, or the ids decoded. */
static int one_prompt(const api_model *s, const json_t *p, bool echo, const char *what, int32_t **ids, size_t *n,
                      char **text, api_err *e) {
    *ids = NULL, *text = NULL;
    if (json_is_string(p)) {
        if (tok_encode(s->tok, json_string_value(p), json_string_length(p), true, ids, n))
            return api_fail(e, 400, "prompt", "%s: %s", what, cd_errmsg());
    } else {
        if (!json_is_array(p) || !json_array_size(p))
            return api_fail(e, 400, "prompt", "%s must be a string or a non-empty array of token ids", what);
        *n = json_array_size(p);
        if (!(*ids = malloc(*n * sizeof **ids))) return api_fail(e, 500, NULL, "out of memory");
        int32_t vocab = tok_n_vocab(s->tok);
        for (size_t i = 0; i < *n; i++) {
            const json_t *v = json_array_get(p, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
                free(*ids);
                *ids = NULL;
                return api_fail(e, 400, "prompt", "%s[%zu] is not a token id (0 to %d)", what, i, vocab - 1);
            }
            (*ids)[i] = (int32_t)json_integer_value(v);
        }
    }
    if (!echo) return 0;
    if (json_is_string(p) ? !(*text = strdup(json_string_value(p))) : tok_decode(s->tok, *ids, (uint32_t)*n, text)) {
        free(*ids);
        *ids = NULL;
        return api_fail(e, 500, NULL, "out of memory");
    }
    return 0;
}

/* "prompt": one prompt (a string or token ids) or a list of up to API_MAX_PROMPTS of them (OpenAI's
 * batch), a job each: the first made from g, the others copies of it with their own prompt. */
static int completion_jobs(const api_model *s, const json_t *body, gen_params *g, api_prepared *out, api_err *e) {
    const json_t *p = json_object_get(body, "prompt");
    bool list = json_is_array(p) && json_array_size(p) && !json_is_integer(json_array_get(p, 0));
    size_t count = list ? json_array_size(p) : 1;
    if (count > API_MAX_PROMPTS)
        return api_fail(e, 400, "prompt", "prompt lists %zu prompts; at most %d", count, API_MAX_PROMPTS);
    if (!(out->prompts = calloc(count, sizeof *out->prompts))) return api_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < count; i++) {
        char what[32];
        snprintf(what, sizeof what, list ? "prompt[%zu]" : "prompt", i);
        int32_t *ids;
        size_t n;
        char *text;
        job *j = NULL;
        if (one_prompt(s, list ? json_array_get(p, i) : p, g->echo, what, &ids, &n, &text, e)) return -1;
        if (i == 0) {
            if (make_job(s, ids, n, g, list ? what : "the prompt", list ? "prompt" : NULL, &j, e)) ids = NULL;
        } else if (!prompt_fits(s, n, what, "prompt", e) && !(j = job_copy(out->prompts[0]))) {
            api_fail(e, 500, NULL, "out of memory");
        }
        if (!j) {
            free(ids);
            free(text);
            return -1;
        }
        if (i) set_prompt(j, s, ids, n, g->max_tokens), j->prompt_logprobs = out->prompts[0]->prompt_logprobs;
        j->echo_text = text;
        out->prompts[out->n_prompts++] = j;
    }
    return 0;
}

static int chat_job(const api_model *m, const json_t *b, uint64_t seed, api_prepared *out, api_err *e) {
    chat_req q;
    int32_t *ids = NULL;
    size_t n = 0;
    bool in_think = false;
    job *j = NULL;
    char *text = NULL;
    uint32_t reused = 0;
    int rc = parse_chat(b, seed, m, &q, e) || chat_prompt(m, &q, true, &ids, &n, &in_think, &text, &reused, e) ||
            make_job(m, ids, n, &q.g, "the prompt", NULL, &j, e)
        ? -1
        : 0;
    if (!rc) { /* what the reply memory records when the request ends (api_chat.c) */
        j->prompt_text = text, j->prompt_len = text ? strlen(text) : 0, text = NULL;
        j->reply_reused = reused;
        j->keep_gen = m->replies && m->as_generated;
    }
    free(text);
    if (!rc && !(out->prompts = malloc(sizeof *out->prompts))) {
        job_unref(j), job_unref(j);
        rc = api_fail(e, 500, NULL, "out of memory");
    }
    if (!rc) {
        out->prompts[out->n_prompts++] = j;
        j->calls = (toolcall_format){
            .template = m->template, .tools = q.tools ? json_incref((json_t *)q.tools) : NULL, .in_think = in_think};
        j->forced = q.forced;
        q.forced = NULL;
        /* the call's object begins after "<tool_call>\n"; an XML call's grammar reads from that "\n",
         * as it does after the trigger token */
        if (j->schema && j->forced)
            j->forced_json = j->forced + strlen(q.coder ? "<tool_call>" : "<tool_call>\n"),
            j->json_tail = "\n</tool_call>";
        int32_t open = q.lazy ? tok_find(m->tok, "<tool_call>") : -1; /* each call the model opens */
        if (open >= 0) j->json_lazy = true, j->json_trigger = open, j->json_tail = "\n</tool_call>";
        else if (q.lazy) json_schema_unref(j->schema), j->schema = NULL; /* no such token: free text */
        j->json_once = j->json_lazy && q.single;                         /* one call (a forced one is one already) */
        if (j->schema && q.coder && !(j->coder_tools = coder_tools_of(q.tools)))
            rc = api_fail(e, 500, NULL, "out of memory");
    }
    out->n = q.g.n;
    out->stream = q.g.stream;
    out->include_usage = q.g.include_usage;
    chat_req_free(&q);
    return rc;
}

int api_prepare(const api_model *m, bool chat, const char *body, size_t len, uint64_t seed, api_prepared *out,
                api_err *e) {
    *out = (api_prepared){.chat = chat};
    json_error_t je;
    json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!b) return api_fail(e, 400, NULL, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    int rc;
    if (!json_is_object(b)) {
        rc = api_fail(e, 400, NULL, "the request body must be a JSON object");
    } else if (chat) {
        rc = chat_job(m, b, seed, out, e);
    } else {
        gen_params g;
        rc = gen_params_parse(b, false, seed, tok_n_vocab(m->tok), &g, e) || completion_jobs(m, b, &g, out, e) ? -1 : 0;
        out->n = g.n;
        out->stream = g.stream;
        out->include_usage = g.include_usage;
        gen_params_free(&g);
    }
    json_decref(b);
    if (rc) { /* nothing goes out: both references of every job made */
        for (uint32_t i = 0; i < out->n_prompts; i++) job_unref(out->prompts[i]), job_unref(out->prompts[i]);
        free(out->prompts);
        out->prompts = NULL;
        out->n_prompts = 0;
    }
    return rc;
}

/* ---- /tokenize and /detokenize ---- */

/* /tokenize's fields besides the text: each a boolean (a 400 naming it otherwise); the ones
 * that would ask for another rendering are refused by name. */
static int tokenize_flags(const json_t *b, bool chat, bool *generation_prompt, bool *strs, api_err *e) {
    bool special = !chat, cont = false;
    *generation_prompt = true, *strs = false;
    if (bool_field(b, "add_special_tokens", &special, e) || bool_field(b, "return_token_strs", strs, e) ||
        (chat &&
         (bool_field(b, "add_generation_prompt", generation_prompt, e) ||
          bool_field(b, "continue_final_message", &cont, e))))
        return -1;
    if (cont)
        return api_fail(e, 400, "continue_final_message", "continue_final_message is not supported by this server");
    const json_t *t = json_object_get(b, "chat_template");
    if (t && !json_is_null(t))
        return api_fail(e, 400, "chat_template", "chat_template is not supported: the model's own template renders");
    return 0;
}

/* The body's ids: a prompt as /v1/completions tokenizes it, or messages as a chat request renders
 * them (chat_fields and chat_prompt: history as generated, no tool_choice). */
static int tokenize_body(const api_model *m, const json_t *b, api_tokens *out, api_err *e) {
    const json_t *prompt = json_object_get(b, "prompt"), *messages = json_object_get(b, "messages");
    bool has_prompt = prompt && !json_is_null(prompt), chat = messages && !json_is_null(messages);
    if (has_prompt == chat)
        return api_fail(e, 400, chat ? "prompt" : "messages", "give either prompt (a string) or messages");
    bool generation_prompt;
    if (tokenize_flags(b, chat, &generation_prompt, &out->token_strs, e)) return -1;
    if (!chat) {
        if (!json_is_string(prompt)) return api_fail(e, 400, "prompt", "prompt must be a string");
        char *text;
        return one_prompt(m, prompt, false, "prompt", &out->ids, &out->n, &text, e);
    }
    chat_req q = {0};
    int rc = chat_fields(b, &q, e) || salt_field(b, &q.g, e) || decide_thinking(m, &q, CHAT_REPLY_FREE, e) ||
            chat_prompt(m, &q, generation_prompt, &out->ids, &out->n, NULL, NULL, NULL, e)
        ? -1
        : 0;
    chat_req_free(&q);
    return rc;
}

int api_tokenize(const api_model *m, const char *body, size_t len, api_tokens *out, api_err *e) {
    *out = (api_tokens){0};
    json_error_t je;
    json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!b) return api_fail(e, 400, NULL, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    int rc = json_is_object(b) ? tokenize_body(m, b, out, e)
                               : api_fail(e, 400, NULL, "the request body must be a JSON object");
    json_decref(b);
    if (rc) {
        free(out->ids);
        *out = (api_tokens){0};
    }
    return rc;
}

int api_detokenize(const api_model *m, const char *body, size_t len, char **text, api_err *e) {
    *text = NULL;
    json_error_t je;
    json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!b) return api_fail(e, 400, NULL, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    const json_t *t = json_object_get(b, "tokens");
    int32_t vocab = tok_n_vocab(m->tok), *ids = NULL;
    size_t n = json_array_size(t);
    int rc = !json_is_object(b)                 ? api_fail(e, 400, NULL, "the request body must be a JSON object")
        : !json_is_array(t)                     ? api_fail(e, 400, "tokens", "tokens must be an array of token ids")
        : n && !(ids = malloc(n * sizeof *ids)) ? api_fail(e, 500, NULL, "out of memory")
                                                : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
            rc = api_fail(e, 400, "tokens", "tokens[%zu] is not a token id (0 to %d)", i, vocab - 1);
        else ids[i] = (int32_t)json_integer_value(v);
    }
    if (!rc && tok_decode(m->tok, ids, n, text)) rc = api_fail(e, 500, NULL, "%s", cd_errmsg());
    free(ids);
    json_decref(b);
    return rc;
}
