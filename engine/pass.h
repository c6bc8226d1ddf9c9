/* One forward pass of the engine (private to engine): the requests it feeds, in the order their
 * tokens and output rows sit in it, and where each one's rows are. build_pass (scheduler.c)
 * writes it once per step; the device's draws, the host's choices and the callbacks after the
 * pass read each request's rows from its entry, never from the request or from the rows of the
 * others. An entry's rows, in order: those of the prompt positions whose log-probabilities its
 * request reads, then (gen_row) the row its next token is chosen from and one per guessed token
 * fed after it. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

struct engine_req;

typedef struct pass_entry {
    struct engine_req *q;
    uint32_t fed;          /* its tokens in the pass */
    uint32_t first_out;    /* its first output row (the pass's next when it was added) */
    uint32_t lp_pos, n_lp; /* rows of prompt positions [lp_pos, lp_pos + n_lp) */
    bool gen_row;          /* then the row a token is chosen from */
    uint32_t n_draft;      /* and the guess fed after its last token (lookup_draft.h), a row each */
    int32_t draft[ENGINE_SPEC_MAX];
} pass_entry;

/* The output rows of p. */
static inline uint32_t pass_entry_rows(const pass_entry *p) { return p->n_lp + (p->gen_row ? 1 + p->n_draft : 0); }
