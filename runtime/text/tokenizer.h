/* Byte-level BPE tokenizer for Qwen2/Qwen3 vocabularies, driven entirely by a GGUF's
 * tokenizer.ggml.* metadata (tokens, token_type, merges, special ids).
 *
 * encode: NFC (utf8proc) -> split out added/special tokens (matched whole, longest first)
 *         -> Qwen2 pre-tokenizer regex (PCRE2) -> bytes mapped to GPT-2 byte-level
 *         unicode -> BPE merges by rank -> ids.
 * decode: ids -> token strings -> byte-level unicode mapped back to bytes. The streaming
 *         decoder holds back an incomplete UTF-8 sequence until its last byte arrives. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/gguf/gguf.h"

typedef struct tokenizer tokenizer;

/* GGUF token types (llama.cpp's llama_token_type). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

int tok_load_gguf(tokenizer **out, const gguf_file *f);
/* The same from in-memory vocabulary data (tok_vocab below); the GGUF path builds one. */
typedef struct tok_vocab tok_vocab;
int tok_load_vocab(tokenizer **out, const tok_vocab *v);
void tok_free(tokenizer *t);

int32_t tok_n_vocab(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);               /* tokenizer.ggml.eos_token_id */
int32_t tok_find(const tokenizer *t, const char *token); /* exact token string, or -1 */
bool tok_is_eog(const tokenizer *t, int32_t id);   /* ends generation: eos, <|im_end|>, <|endoftext|> */

/* Encodes text (UTF-8, need not be NUL-terminated). With parse_special, added tokens in
 * the text become their ids; without, they are encoded as plain text. *ids is malloc'd. */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool parse_special,
               int32_t **ids, size_t *n_ids);

/* Decodes ids to a malloc'd NUL-terminated string (invalid UTF-8 bytes become U+FFFD). */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text);

/* Streaming decode: feed ids one at a time; complete UTF-8 is appended to out. */
typedef struct tok_stream {
    unsigned char pending[8];
    int n_pending;
} tok_stream;
/* Writes at most cap-1 bytes + NUL into out; returns the number of bytes written or -1. */
int tok_stream_push(const tokenizer *t, tok_stream *s, int32_t id, char *out, size_t cap);

/* ---- building GGUF tokenizer metadata from a Hugging Face tokenizer.json ---- */
struct tok_vocab {
    char **tokens;   /* n_tokens NUL-terminated strings, index = id */
    int32_t *types;  /* enum tok_type per token */
    size_t n_tokens; /* padded to the requested vocab size with "[PAD<id>]" unused tokens */
    char **merges;   /* "left right" */
    size_t n_merges;
    int32_t eos_id, pad_id, bos_id;
};

/* Reads tokenizer.json (model.vocab, model.merges, added_tokens) and, when given,
 * tokenizer_config.json for the eos token. n_vocab_padded 0 means no padding. */
int tok_vocab_from_hf(const char *tokenizer_json, const char *tokenizer_config_json,
                      size_t n_vocab_padded, tok_vocab *out);
void tok_vocab_free(tok_vocab *v);
