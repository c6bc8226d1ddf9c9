/* Changes to a row of logits before the next token is chosen, as OpenAI's API defines them
 * (`logit_bias`, `presence_penalty`, `frequency_penalty`), in this order:
 *   1. logit[id] += bias                for each (id, bias) of the list;
 *   2. logit[j]  -= c[j] * frequency + presence    for each j with c[j] > 0,
 * where c[j] counts token j among the tokens generated so far for this request (the prompt
 * does not count: OpenAI's formula, as vLLM applies it). Greedy then takes the argmax of the
 * changed row; sampling draws from it (sampler.h). Per request and per row: the batch and the
 * cache cannot change the result. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define LOGIT_BIAS_MAX 1024 /* entries of one request's list */

typedef struct logit_bias {
    int32_t id;
    float bias;
} logit_bias;

typedef struct logit_adjust {
    float presence;   /* OpenAI's range: -2 to 2 */
    float frequency;  /* -2 to 2 */
    logit_bias *bias; /* [n_bias], ids ascending and distinct; owned where copied (logit_adjust_copy) */
    uint32_t n_bias;
} logit_adjust;

/* Whether a changes anything (NULL: no). */
bool logit_adjust_active(const logit_adjust *a);
/* 0, or -1 naming the first problem: a penalty outside -2..2, a bias outside -100..100, an id
 * outside the vocabulary, ids not ascending and distinct, more than LOGIT_BIAS_MAX entries. */
int logit_adjust_check(const logit_adjust *a, int32_t n_vocab);
/* dst = src with a bias list of its own (free with logit_adjust_free); src NULL: nothing. */
int logit_adjust_copy(logit_adjust *dst, const logit_adjust *src);
void logit_adjust_free(logit_adjust *a);
/* Steps 1-2 on logits[n_vocab] after the tokens gen[0..n_gen). count: n_vocab zeros of scratch,
 * left zero again. Ids outside the vocabulary are ignored (logit_adjust_check refuses them). */
void logit_adjust_apply(const logit_adjust *a, const int32_t *gen, uint32_t n_gen, float *logits, int32_t n_vocab,
                        uint32_t *count);
