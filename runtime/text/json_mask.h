/* `response_format: {"type": "json_object"}`: which tokens may come next so that the reply stays
 * a prefix of one JSON object (runtime/text/json_prefix.h) and ends when it is whole.
 *
 * A token may come next when its bytes keep the reply such a prefix. Special tokens (control
 * and user-defined: <think>, <tool_call>, ...) and tokens that decode to nothing never may; an
 * end-of-generation token only once the object is whole, and then only those. The chosen token
 * moves the state (json_mask_accept). One pass over the vocabulary per token: each token's
 * bytes through a copy of the state (~1 M byte steps for Qwen3's 151,936 tokens). */
#pragma once
#include <stdint.h>

#include "runtime/text/json_prefix.h"
#include "runtime/text/tokenizer.h"

typedef struct json_mask {
    const tokenizer *tok;
    json_prefix state; /* the reply so far */
} json_mask;

void json_mask_init(json_mask *m, const tokenizer *t);
/* logits[id] = -inf for every token id < n that may not come next (the rest are left as they are). */
void json_mask_apply(const json_mask *m, float *logits, int32_t n);
/* The token chosen: the state moves past its bytes. */
void json_mask_accept(json_mask *m, int32_t id);
/* The object is whole (only end tokens may come). */
static inline bool json_mask_done(const json_mask *m) { return json_prefix_done(&m->state); }
