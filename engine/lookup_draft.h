/* Prompt lookup: a guess at a sequence's next tokens from its own history, for speculative
 * decoding without a draft model (llama.cpp's lookup decoding, vLLM's "ngram" method). Agent
 * replies copy a great deal from their context: file contents, tool results, earlier calls
 * and their JSON. The guess is where the sequence's last n tokens (n from LOOKUP_NGRAM_MAX
 * down to LOOKUP_NGRAM_MIN) last appeared before, and the tokens that followed them there.
 *
 * The scheduler feeds the guess after the sequence's last token in one pass and keeps the
 * guessed tokens up to the first one its own choice disagrees with (engine.h, spec_tokens), so a
 * guess only ever changes how fast the tokens come, never which tokens. Pure. */
#pragma once
#include <stdint.h>

#define LOOKUP_NGRAM_MAX 4
#define LOOKUP_NGRAM_MIN 2

/* Up to k_max tokens that followed the latest earlier occurrence of the longest suffix of
 * toks[0, n) of LOOKUP_NGRAM_MIN..MAX tokens, into out; their count (0: no occurrence). */
uint32_t lookup_draft(const int32_t *toks, uint32_t n, uint32_t k_max, int32_t *out);
