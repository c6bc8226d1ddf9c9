/* Next-token sampling: greedy, or seeded temperature / top-k / top-p.
 *
 * The order of operations is fixed so the GPU sampler can reproduce it exactly:
 *   1. temperature <= 0: argmax (ties to the lower id). Done.
 *   2. keep the top_k largest logits (top_k <= 0: all), sorted descending, ties by lower id;
 *   3. softmax of logit / temperature over those (the sum of the numerators in that order; for
 *      top_k "all", i.e. <= 0 or >= 4096 and the vocabulary, in id order: the vocabulary is then
 *      sorted only as far as the walk below can go);
 *   4. keep the shortest prefix whose probability mass reaches top_p (at least one token);
 *   5. draw u = rng_f32 once per step and walk the renormalized prefix. */
#pragma once
#include <stdint.h>

#include "runtime/base/rng.h"

typedef struct sampler_params {
    float temperature; /* 0 = greedy (the default) */
    int32_t top_k;     /* <= 0: no limit */
    float top_p;       /* >= 1: no limit */
    uint64_t seed;
} sampler_params;

typedef struct sampler {
    sampler_params p;
    rng rng;
    int32_t *ids; /* (n_vocab) scratch */
    float *probs; /* (n_vocab) scratch */
    int32_t n_vocab;
    uint32_t full_sorts; /* top_k "all" draws whose walk outran the binned prefix (sorted everything) */
} sampler;

int sampler_init(sampler *s, sampler_params p, int32_t n_vocab);
/* The parameters and the generator only, no CPU scratch: for a sampler whose draws are made
 * elsewhere (the GPU's sample_topk takes rng_f32(&s->rng) once per token, as sampler_sample
 * would). sampler_sample must not be called on it; sampler_free is fine. */
void sampler_init_draws(sampler *s, sampler_params p);
void sampler_free(sampler *s);
int32_t sampler_argmax(const float *logits, int32_t n);
int32_t sampler_sample(sampler *s, const float *logits);
/* log(sum_i exp(logits[i])) over the finite logits (max first, the sum in double, in id order): a
 * token's log-probability under the row is logits[id] minus it. -inf when none is finite. */
double sampler_log_sum_exp(const float *logits, int32_t n);

/* A chosen token's log-probability under a row of logits and the n_top most likely tokens'. */
#define TOP_LOGPROBS_MAX 20
typedef struct token_logprob {
    int32_t id;
    float logprob;
    uint32_t rank; /* 1 + the tokens with a larger logit (vLLM's rank) */
    uint32_t n_top;
    int32_t top_id[TOP_LOGPROBS_MAX]; /* descending, ties by lower id (sampler_top_k) */
    float top_logprob[TOP_LOGPROBS_MAX];
} token_logprob;
/* out for token id of logits[n] with min(top, TOP_LOGPROBS_MAX, n) alternatives. */
void sampler_logprob(const float *logits, int32_t n, int32_t id, uint32_t top, token_logprob *out);
/* The k largest logits, descending (ties by lower id): ids and values. Returns count. */
int32_t sampler_top_k(const float *logits, int32_t n, int32_t k, int32_t *ids, float *values);
