/* One API request on its way through the server: built by the connection thread that parsed it,
 * run by the engine thread, read back (text as it grows, then the outcome) by the connection
 * thread, which answers the client.
 *
 *   connection thread                      engine thread (owns the GPU and the engine)
 *   ─────────────────                      ─────────────────────────────────────────────
 *   job_new, fill the request part
 *   bridge_submit ───── queue ────────────► engine_submit
 *   wait on job->cv (text, done)  ◄──────── per token: decode, stop strings, append text, signal
 *   client gone: job->cancel, wake ───────► engine_cancel
 *                                           finished: the outcome copied in, done, signal
 *   job_unref                               job_unref
 *
 * Everything below "shared" is guarded by the bridge's mutex; the request part is written before
 * submit and only read afterwards; the engine part is touched by the engine thread alone. The
 * job is freed by whichever side lets go last (two references).
 *
 * A request for n choices (OpenAI's n) is n jobs made by job_choices: the same prompt and
 * request, seeds seed, seed + 1, ... (vLLM's rule, so choice k is the reply one request with
 * seed + k would get). They are separate engine requests: the engine prefills the shared prompt
 * once (engine.h, a prefix several requests send at once) and batches their decoding. Every
 * choice signals the first one's cv, so the connection thread waits on one condition for all.
 * A /v1/completions request with a list of prompts is a job per prompt, each with its n choices;
 * all of them signal the first prompt's first choice's cv.
 *
 * echo: the reply text begins with the prompt's (echo_text). With logprobs too, the prompt's
 * tokens' log-probabilities come from the engine (engine_request.on_prompt_logprob) into plp;
 * only a prompt's first choice computes them, its other choices' replies read the first's. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/model/logit_adjust.h"
#include "runtime/model/sampler.h"
#include "runtime/text/coder_call.h"
#include "runtime/text/json_schema.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/toolcall.h"

#define JOB_MAX_STOP 16

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state; /* in this order */
typedef enum job_finish { JOB_STOP, JOB_LENGTH, JOB_CANCELLED, JOB_FAILED } job_finish;

/* What the engine reported when the request finished. */
typedef struct job_outcome {
    uint32_t cached_tokens;            /* prompt tokens served from the prefix cache */
    uint32_t host_tokens, disk_tokens; /* of cached_tokens, those restored from host memory / read from disk */
    double ttft_ms, decode_ms;         /* submit to the first token; the first token to the last */
    uint32_t n;                        /* tokens generated, an end token included */
    bool eog;                          /* it ended at an end-of-generation token */
    job_finish finish;
} job_outcome;

typedef struct job {
    uint64_t ev_mark; /* the KV event batch holding its final commit (bridge.c; 0 = none) */
    /* the request (connection thread, before submit) */
    int32_t *ids;
    uint32_t n_ids;
    uint32_t max_tokens;
    sampler_params sp;
    logit_adjust adjust; /* logit_bias and the penalties (its list owned) */
    bool logprobs;       /* each output token's token_logprob kept in lp */
    uint32_t top_logprobs;
    bool json_object;         /* the reply is one JSON object (engine_request.json_object) */
    json_schema *schema;      /* the reply is an instance of it (engine_request.json_schema): a reference, or NULL */
    char *stop[JOB_MAX_STOP]; /* stop strings: the text ends before the first one found */
    uint32_t n_stop;
    char *forced;            /* text already "generated" by the prompt (a forced tool call), or NULL */
    toolcall_format calls;   /* chat: how the reply's tool calls are written; calls.tools a reference */
    const char *forced_json; /* with schema: the part of forced the call's object begins with */
    const char *json_tail;   /* with schema: what follows the object ("\n</tool_call>"), or NULL */
    bool json_lazy;          /* with schema: free text until token json_trigger opens a call */
    bool json_once;          /* with schema: after the call, only the end (parallel_tool_calls false) */
    int32_t json_trigger;
    coder_tools *coder_tools; /* with schema: the calls are Qwen3-Coder's (engine_request.json_coder), a reference */
    char *cache_salt;         /* the request's cache namespace salt (engine_request.cache_salt), or NULL */
    bool echo;                /* the reply text begins with echo_text (the prompt's) */
    char *echo_text;          /* NUL-terminated, owned; copies of a choice have none (the first's serves) */
    bool prompt_logprobs;     /* plp is filled (prompt_top alternatives each): echo + logprobs, or */
    int32_t vllm_prompt_logprobs; /* vLLM's prompt_logprobs: -1 none, else its alternatives (the reply's field) */
    uint32_t prompt_top;          /* the most alternatives either asks for */
    char *prompt_text;            /* chat: the rendered prompt ids stand for (runtime/text/reply_memory.h), owned,
                                 or NULL; copies of a choice have none (the first's serves) */
    size_t prompt_len;
    uint32_t reply_reused; /* chat: the prompt's first ids came from the reply memory (this many) */
    bool keep_gen;         /* the generated ids are kept in gen (a chat reply, to remember) */

    /* shared (bridge mutex) */
    int refs;
    job_state state;
    bool cancel; /* the client went away: the engine thread cancels the request */
    char *text;  /* the reply so far, NUL-terminated; stop strings cut off */
    size_t len, cap;
    size_t stable;  /* text[0..stable) can no longer be taken back by a stop string */
    uint32_t n_gen; /* tokens generated (an end token included) */
    bool stopped_by_string;
    token_logprob *lp; /* [n_lp] the output tokens' (an end token's not), in order */
    uint32_t n_lp, cap_lp;
    token_logprob *plp; /* [n_plp] prompt positions 1.. (prompt_logprobs), in order */
    uint32_t n_plp, cap_plp;
    bool lp_lost; /* an entry (of lp or plp) could not be stored (out of memory): the reply fails */
    int32_t *gen; /* with keep_gen, once done: [n_gen_kept] the generated ids (an end token
                                 included; engine_reply.ids, moved) */
    uint32_t n_gen_kept;
    pthread_cond_t cv; /* signalled on new text and when done */
    /* the outcome (when done) */
    job_outcome out;
    int err_status; /* 0, or the HTTP status of a failure (400 for a request the engine refused) */
    char err[512];

    /* the engine thread's */
    uint32_t handle;
    tok_stream ts;
    const tokenizer *tok;
    double t_submit_ms, t_last_ms;
    struct job *next; /* the bridge's queue and list */

    struct job *first; /* every job of a request but the first: the first (a reference), whose cv it signals */
} job;

job *job_new(void);
/* Drops one reference (the caller holds the bridge mutex, or is the only holder). */
void job_unref(job *j);
/* j's request part, deep (the same seed; not echo_text, prompt_logprobs or first), with two
 * references; NULL when out of memory. */
job *job_copy(const job *j);
/* out[p * n + k]: prompt p's choice k, for p < n_prompts and k < n: out[p * n] = prompts[p], the
 * others its copies (request part only; seed + k, no prompt_logprobs), each with two references;
 * every job but prompts[0] holds it as first. The caller is still each prompt's only holder. -1
 * (no copy left, no job linked) when out of memory. */
int job_choices(job **prompts, uint32_t n_prompts, uint32_t n, job **out);
/* Wakes whoever waits on j (the bridge mutex held): its first choice's cv. */
void job_signal(job *j);
/* The condition to wait on for j and its sibling choices. */
static inline pthread_cond_t *job_cv(job *j) { return j->first ? &j->first->cv : &j->cv; }
/* Appends generated text: stop strings cut it, and stable is moved. Returns false when a stop
 * string ended the reply. */
bool job_append(job *j, const char *s, size_t n);
