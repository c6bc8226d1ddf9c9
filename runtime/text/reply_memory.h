/* The token sequences a front end ran for chat requests (the server's, `cinder chat`'s, a chat
 * trace's replay), by the text they decode to, so that a
 * reply sent back in the next request (an agent loop, a chat) becomes the ids the model
 * generated instead of the tokenizer's re-encoding of its text. A model's tokens are often not
 * the canonical BPE of their text (a space or digit split another way, " nhìn" as one token
 * where the merges make two): re-encoding diverges there from the cached ids, and the rest of
 * the reply is prefilled again.
 *
 * An entry is one finished request: its prompt ids + the ids it generated (its end token
 * included; a reply cut by max_tokens gets the <|im_end|> the template closes it with), and the
 * text those stand for: the rendered prompt + the generated ids decoded. The next request's
 * rendered prompt begins with that text, up to and including the <|im_end|> after the reply;
 * tok_encode splits the text at every added token and encodes the pieces apart, so at such a
 * boundary p the prompt's ids are an entry for text[0..p) followed by tok_encode(text[p..))
 * (runtime/text/tokenizer.h, tok_added_ends), and the cache continues token for token.
 *
 *   request k:    [ prompt k text                ][ reply k<|im_end|> ]
 *   entry k:      [ prompt k ids                 ][ generated ids     ]
 *   request k+1:  [ prompt k text                 reply k<|im_end|>   ][\n<|im_start|>user ...]
 *                 [ entry k's ids                                     ][ tok_encode(rest)     ]
 *
 * Keyed by a 64-bit XXH3 of the text seeded by the request's cache namespace (its cache_salt:
 * a salted request never matches another salt's replies, nor an unsalted one); a hit compares
 * the salt and the text byte for byte, so a hash collision costs a miss, never a wrong prompt.
 *
 * Bounded by entries, tokens and text bytes held; the oldest is forgotten first, and one over
 * the bounds alone is not kept. Everything is best effort: a failure to remember (out of memory)
 * only costs reuse. Thread-safe: replies are recorded and prompts rendered on connection
 * threads. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/tokenizer.h"

typedef struct reply_entry {
    uint64_t hash; /* reply_memory_hash of (salt, text) */
    char *salt;    /* NULL: the unsalted namespace */
    int32_t *ids;
    size_t n_ids;
    char *text; /* what ids stand for (not NUL-terminated) */
    size_t text_len;
} reply_entry;

typedef struct reply_memory {
    pthread_mutex_t mu;
    reply_entry *e; /* [n] oldest first */
    size_t n, max_entries;
    size_t tokens, max_tokens;                /* ids held, and the most */
    size_t bytes, max_bytes;                  /* text bytes held, and the most */
    uint64_t hash_mask;                       /* ~0; the tests clear bits to make texts collide */
    atomic_uint_fast64_t hits, tokens_reused; /* requests served an entry, and its tokens (/metrics) */
} reply_memory;

int reply_memory_init(reply_memory *m, size_t max_entries, size_t max_tokens, size_t max_bytes);
void reply_memory_free(reply_memory *m);

/* Records ids as standing for text in salt's namespace (NULL or "": the unsalted one); copies
 * both. An entry for the same salt and text is replaced. 0 also when it is not kept (over the
 * bounds); -1 only when out of memory. */
int reply_memory_put(reply_memory *m, const char *salt, const int32_t *ids, size_t n_ids, const char *text,
                     size_t text_len);

/* The longest entry of salt's namespace whose text is text[0..ends[i]) for some i (ends
 * ascending): true with a copy of its ids (*ids malloc'd, *n_ids) and *end = ends[i]; false
 * when none (or out of memory). Counts nothing (reply_memory_count does). */
bool reply_memory_find(reply_memory *m, const char *salt, const char *text, const size_t *ends, size_t n_ends,
                       int32_t **ids, size_t *n_ids, size_t *end);

/* A rendered prompt's ids: the longest head of text that is an entry of salt's namespace ending
 * at an added token (tok_added_ends) as that entry's ids, then tok_encode of the rest, which is
 * what tok_encode gives past an added token anyway; tok_encode of all on a miss, or when m is
 * NULL. *reused: the ids taken from an entry (0: none). */
int reply_memory_encode(reply_memory *m, const tokenizer *t, const char *salt, const char *text, size_t len,
                        int32_t **ids, size_t *n, uint32_t *reused);

/* Records a finished chat request: prompt[0..n_prompt) rendered from prompt_text, and the ids it
 * generated, gen[0..n_gen), as what the next request's prompt starts with, the reply closed the
 * way the template closes a turn: an end-of-generation last token replaced by <|im_end|> (the
 * reply's last token is never fed, so which end it was costs no reuse), and <|im_end|> added
 * to a reply cut short. Best effort: nothing is kept when out of memory or over the bounds. */
void reply_memory_remember(reply_memory *m, const tokenizer *t, const char *salt, const int32_t *prompt,
                           size_t n_prompt, const char *prompt_text, size_t prompt_len, const int32_t *gen,
                           size_t n_gen);

/* A request that runs was served n_ids tokens of an entry (/metrics). */
void reply_memory_count(reply_memory *m, size_t n_ids);

/* What is held now: entries and tokens (/metrics). */
void reply_memory_held(reply_memory *m, size_t *entries, size_t *tokens);
