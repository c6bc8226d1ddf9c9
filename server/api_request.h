/* A request body of /v1/chat/completions or /v1/completions (and of their render endpoints, which
 * run the same function), checked and turned into a job: every field typed and range-checked (a
 * 400 naming it), the chat template rendered (tool_choice included), the prompt tokenized and
 * checked against the context; and /tokenize's and /detokenize's bodies. Pure: no HTTP, no
 * engine, so it is fuzzed on its own (tests/fuzz/fuzz_request.c). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/chat_template.h"
#include "runtime/text/chat_thinking.h"
#include "runtime/text/tokenizer.h"
#include "server/call_memory.h"
#include "runtime/text/reply_memory.h"
#include "server/job.h"

/* A request error: the HTTP status, the offending field (or NULL) and the message. */
typedef struct api_err {
    unsigned status;
    const char *param;
    char msg[512];
} api_err;
int api_fail(api_err *e, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What the requests are checked against. */
typedef struct api_model {
    const tokenizer *tok;
    uint32_t n_ctx;            /* prompt + generated tokens of one request at most */
    chat_template_id template; /* renders chat requests and parses their replies (chat_template.h) */
    bool as_generated;         /* chat history rendered as generated (chat.h) */
    bool preserve_reasoning;
    chat_think_ask think_default; /* serve --think / --no-think: for requests that do not say (chat_thinking.h) */
    call_memory *calls;           /* the tool calls generated here (as_generated renders them back exactly) */
    reply_memory *replies; /* the sequences chat requests ran (as_generated: a reply sent back is its ids), or NULL */
} api_model;

#define API_MAX_PROMPTS 128 /* prompts of one /v1/completions request */

typedef struct gen_params { /* the sampling and streaming fields */
    int64_t max_tokens;     /* -1: until the end token or the context is full; 0 (with echo) none */
    uint32_t n;             /* choices (1 to 128) */
    sampler_params sp;
    logit_adjust adjust;   /* its bias list owned */
    bool logprobs;         /* each token's log-probability in the reply, */
    uint32_t top_logprobs; /* with this many alternatives */
    bool json_object;      /* response_format json_object */
    json_schema *schema;   /* response_format json_schema (json_schema, guided_json): a reference, or NULL */
    char *stop[JOB_MAX_STOP];
    uint32_t n_stop;
    char *cache_salt; /* owned, or NULL */
    bool stream, include_usage;
    bool echo;               /* completions: the reply text begins with the prompt (job.echo) */
    int32_t prompt_logprobs; /* vLLM's: -1 none, else every prompt position's entry and this many
                                alternatives (0 to 20; not streamed) */
} gen_params;

typedef struct api_prepared {
    job **prompts; /* [n_prompts] one job per prompt (chat: one), two references each
                                (job.h: the caller's and the engine thread's); the array is the caller's */
    uint32_t n_prompts;
    uint32_t n; /* choices of each prompt: its job and n - 1 copies (job_choices) */
    bool chat, stream, include_usage;
} api_prepared;

/* Fields: model (any: one model is served), messages / prompt (completions: a string, token ids,
 * or a list of up to API_MAX_PROMPTS of either, a job each), tools, tool_choice,
 * chat_template_kwargs.enable_thinking, max_tokens / max_completion_tokens, temperature, top_p,
 * top_k, seed (seed_default when absent), stop, n (1 to 128 choices; the server makes them with
 * job_choices), stream, stream_options.include_usage, cache_salt (vLLM's: 1 to 256 bytes, no NUL; the request shares cached prefixes only with
 * requests of the same salt, engine.h), presence_penalty and frequency_penalty (-2 to 2) and
 * logit_bias (token id -> -100 to 100; runtime/model/logit_adjust.h), logprobs and top_logprobs
 * (chat: true/false and 0 to 20; completions: logprobs 0 to 5), echo (completions: the reply
 * text begins with the prompt, and with logprobs its tokens' log-probabilities, the first one's
 * null, as OpenAI's legacy API and lm-evaluation-harness have them; max_tokens 0 then asks for the
 * prompt alone), response_format text,
 * json_object or json_schema, or a schema as llama-server's json_schema / vLLM's guided_json
 * (not with thinking on or a forced tool call; docs/STRUCTURED.md). A forced tool call's
 * object is held to the tools' schemas (job.schema, forced_json, json_tail); so are the calls
 * of strict tools under auto, and with parallel_tool_calls false there is at most one
 * (json_lazy, json_once).
 * prompt_logprobs (vLLM's, both endpoints: 0 to 20 alternatives; -1, the whole vocabulary, is
 * refused; with stream only 0, which gives nothing, as vLLM).
 * Fields of OpenAI's API that are not implemented (suffix, best_of, the legacy functions /
 * function_call, echo on chat), and llama-server's and
 * vLLM's other constraints (grammar, guided_regex, guided_choice, guided_grammar,
 * structured_outputs) are refused by name when they ask for
 * something, never ignored: a reply without what was asked for would look like one with it.
 * Absent or null fields keep their defaults (temperature 0.8, top_k 40, top_p 0.95, max_tokens:
 * the rest of the context). 0 and out->prompts, or -1 with *e (out->prompts NULL). */
int api_prepare(const api_model *m, bool chat, const char *body, size_t len, uint64_t seed_default, api_prepared *out,
                api_err *e);

/* POST /tokenize, in vLLM's shapes: {"prompt": a string}, tokenized as a /v1/completions prompt
 * is, or {"messages": [...], "tools", "chat_template_kwargs"}, rendered and tokenized as a chat
 * request's prompt is (the same functions: history as generated; tool_choice is not /tokenize's),
 * with the generation prompt unless add_generation_prompt is false, and cache_salt as a chat request's (a
 * reply sent back becomes the ids it was generated as within its namespace: runtime/text/reply_memory.h). add_special_tokens is
 * accepted (a boolean): Qwen3's tokenizer adds no BOS or EOS, so the ids are the same either way.
 * return_token_strs asks for each token's stored string. continue_final_message and
 * chat_template are refused by name. No context check (the reply gives max_model_len). */
typedef struct api_tokens {
    int32_t *ids; /* [n], malloc'd (NULL when n is 0) */
    size_t n;
    bool token_strs; /* return_token_strs */
} api_tokens;
int api_tokenize(const api_model *m, const char *body, size_t len, api_tokens *out, api_err *e);
/* POST /detokenize: {"tokens": [ids]} -> *text (malloc'd): the ids decoded, special tokens as
 * their text (vLLM's). An id outside the vocabulary is a 400 naming tokens. */
int api_detokenize(const api_model *m, const char *body, size_t len, char **text, api_err *e);
