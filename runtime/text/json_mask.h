/* `response_format` json_object / json_schema: which tokens may come next so that the reply stays
 * a prefix of one instance of a schema (runtime/text/json_prefix.h, json_schema.h) and ends when
 * it is whole.
 *
 * A token may come next when its bytes keep the reply such a prefix. Special tokens (control
 * and user-defined: <think>, <tool_call>, ...) and tokens that decode to nothing never may; an
 * end-of-generation token only once the value is whole (for an object, array or string, only
 * those then). The chosen token moves the state (json_mask_accept).
 *
 * One pass over the vocabulary per token, made cheap by a table built once per tokenizer
 * (json_vocab): each token's first byte, whether it is "string-safe" (no '"', '\\' or control
 * byte, whole UTF-8 sequences) and its characters. Per pass, the 256 first bytes are tried on
 * the state once; a token whose first byte fails is out at once; inside a string (not
 * mid-escape, not mid-UTF-8) a string-safe token that fits the string's maxLength is in at once;
 * only the rest run their bytes through the state (json_prefix_accepts). Tested equal to
 * running every token through the automaton (test_json_prefix). */
#pragma once
#include <stdint.h>

#include "runtime/text/json_prefix.h"
#include "runtime/text/tokenizer.h"

typedef struct coder_call coder_call; /* runtime/text/coder_call.h */
typedef struct coder_tools coder_tools;

typedef struct json_vocab {
    const tokenizer *tok;
    int32_t n;
    uint8_t *first; /* [n] the first byte */
    uint8_t *flags; /* [n] JSON_TOKEN_* */
    uint8_t *chars; /* [n] a string-safe token's characters (255: that many or more) */
} json_vocab;

int json_vocab_init(json_vocab *v, const tokenizer *t); /* -1: out of memory */
void json_vocab_free(json_vocab *v);

#define JSON_MASK_MAX_TAIL 32

typedef struct json_mask {
    const json_vocab *v;
    json_schema *schema;           /* a reference held */
    char tail[JSON_MASK_MAX_TAIL]; /* bytes that follow the value (a tool call's "\n</tool_call>") */
    uint8_t tail_n, tail_pos;      /* its length, and how much of it is written */
    int32_t trigger;               /* -1; else the token that opens each value (<tool_call>), free text around */
    bool waiting;                  /* trigger >= 0: outside a value, nothing masked until the trigger */
    bool once;                     /* trigger >= 0: after the first value and its tail, only end tokens */
    coder_call *coder;             /* NULL; else each value is a Qwen3-Coder call, read as its JSON view */
    coder_tools *tools;            /* with coder: the request's tools (a reference held) */
    json_prefix state;             /* the reply so far (with coder: its JSON view) */
} json_mask;

/* The reply must be an instance of schema (the mask holds a reference until json_mask_free). */
void json_mask_init(json_mask *m, const json_vocab *v, json_schema *schema);
void json_mask_free(json_mask *m);
/* After the value, these bytes, then only end tokens (a schema of objects: where one ends is
 * plain). Tokens may run from the value into the tail; a user-defined token (</tool_call>) may
 * stand only in the tail. -1: too long, or the schema's values are not all objects. */
int json_mask_set_tail(json_mask *m, const char *tail);
/* Lazy: the reply is free text (nothing masked) until token id; from the next token on, a value
 * and the tail; then free again, until the next id (once: then only end tokens). The calls a
 * model chooses to make. */
void json_mask_set_trigger(json_mask *m, int32_t id, bool once);
/* The values are Qwen3-Coder XML calls (runtime/text/coder_call.h), each from right after its
 * <tool_call>, read as the JSON call objects the schema holds; tools gives their parameters'
 * kinds (a reference is taken). Before any feed. -1: out of memory. */
int json_mask_set_coder(json_mask *m, coder_tools *tools);
/* Text already in the reply (a forced start written into the prompt): false if it cannot be. */
bool json_mask_feed(json_mask *m, const char *bytes, size_t n);
/* logits[id] = -inf for every token id < n that may not come next (the rest are left as they are). */
void json_mask_apply(const json_mask *m, float *logits, int32_t n);
/* The token chosen: the state moves past its bytes. */
void json_mask_accept(json_mask *m, int32_t id);
/* Whether token id may come next, by running its bytes through a copy of the state (what
 * json_mask_apply decides, the slow way: its reference in the tests). */
bool json_mask_allows(const json_mask *m, int32_t id);
/* Whether json_mask_apply would mask anything now (not while it waits for its trigger). */
static inline bool json_mask_active(const json_mask *m) { return !m->waiting; }
/* The value is whole and the tail written, or the mask waits for its trigger (end tokens may come). */
bool json_mask_done(const json_mask *m);
