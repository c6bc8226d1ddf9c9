/* Byte-level BPE tokenizer for Qwen2/Qwen3 vocabularies, driven entirely by a GGUF's
 * tokenizer.ggml.* metadata (tokens, token_type, merges, special ids).
 *
 * encode (the same steps, in the same order, as Hugging Face tokenizers; docs/TOKENIZER.md):
 *         invalid UTF-8 -> U+FFFD
 *         -> split out added tokens (CONTROL and USER_DEFINED types), matched whole on the
 *            raw text, leftmost-longest
 *         -> NFC (utf8proc) on each piece of text between them
 *         -> Qwen2 pre-tokenizer regex (PCRE2) -> bytes mapped to GPT-2 byte-level unicode
 *         -> BPE merges by rank (a heap over a linked list, O(n log n) per word; buckets of
 *            equal rank for long words) -> ids.
 * decode: ids -> token strings -> byte-level unicode mapped back to bytes. The streaming
 *         decoder holds back an incomplete UTF-8 sequence until its last byte arrives.
 *
 * A tokenizer owns all its memory (nothing refers back into the GGUF mapping or the
 * tok_vocab it was built from) and is immutable after loading: encode/decode may run on
 * several threads at once. */
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

/* Reads tokenizer.ggml.{model,pre,tokens,token_type,merges} (all required; model must be
 * "gpt2" and pre "qwen2") and the optional tokenizer.ggml.{eos,bos,padding}_token_id.
 * Everything is validated and copied; on bad metadata returns -1 with cd_errmsg() naming
 * the key and the problem. */
int tok_load_gguf(tokenizer **out, const gguf_file *f);
/* The same from in-memory vocabulary data (tok_vocab below); the GGUF path builds one. */
typedef struct tok_vocab tok_vocab;
int tok_load_vocab(tokenizer **out, const tok_vocab *v);
void tok_free(tokenizer *t);

int32_t tok_n_vocab(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);                     /* tokenizer.ggml.eos_token_id, or -1 */
int32_t tok_bos(const tokenizer *t);                     /* tokenizer.ggml.bos_token_id, or -1 */
int32_t tok_pad(const tokenizer *t);                     /* tokenizer.ggml.padding_token_id, or -1 */
int32_t tok_find(const tokenizer *t, const char *token); /* exact token string, or -1 */
/* Ends generation: eos, <|im_end|>, <|endoftext|>, and (as llama.cpp) the FIM pad, repo and
 * file-separator tokens <|fim_pad|>, <|repo_name|>, <|file_sep|> when present. */
bool tok_is_eog(const tokenizer *t, int32_t id);
/* A token's stored string (byte-level text for NORMAL tokens) and type; NULL and
 * TOK_TYPE_UNDEFINED for ids out of range. */
const char *tok_text(const tokenizer *t, int32_t id);
enum tok_type tok_token_type(const tokenizer *t, int32_t id);
/* The bytes token id decodes to (not NUL-terminated, possibly part of a UTF-8 sequence), and
 * their count in *len; NULL for ids out of range. */
const char *tok_piece(const tokenizer *t, int32_t id, size_t *len);
/* The most bytes any single token decodes to (128 for Qwen3). */
size_t tok_piece_max(const tokenizer *t);

/* Encodes text (UTF-8, need not be NUL-terminated; invalid sequences are read as U+FFFD).
 * Added tokens of type USER_DEFINED (<think>, <tool_call>, ...) always become their ids, as
 * in HF tokenizers and llama.cpp. CONTROL tokens (<|im_start|>, <|endoftext|>, ...) become
 * their ids only with parse_special; without it they are encoded as plain text (HF's
 * split_special_tokens, llama.cpp's parse_special = false). *ids is malloc'd (NULL when
 * *n_ids is 0). */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids, size_t *n_ids);

/* The byte offsets in text just past each added token tok_encode would split out of it (with
 * parse_special as given), in order: *ends malloc'd (NULL when *n is 0). tok_encode works on
 * the pieces between added tokens alone, so for any such offset p the ids of text are those of
 * text[0..p) followed by those of text[p..): a known encoding of the head (a reply as
 * generated, runtime/text/reply_memory.h) can stand in for the head's. Offsets are of the raw text;
 * text that is not valid UTF-8 (which tok_encode would clean first, moving offsets) has none. */
int tok_added_ends(const tokenizer *t, const char *text, size_t len, bool parse_special, size_t **ends, size_t *n);

/* Decodes ids to a malloc'd NUL-terminated string (invalid UTF-8 bytes become U+FFFD).
 * CONTROL and USER_DEFINED tokens decode to their text, UNUSED ones to nothing. An id out
 * of range is an error. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text);

/* Streaming decode: feed ids one at a time; complete UTF-8 is appended to out. */
typedef struct tok_stream {
    unsigned char pending[8];
    int n_pending;
} tok_stream;
/* Writes at most cap-1 bytes + NUL into out; returns the number of bytes written or -1
 * (id out of range, or the text does not fit: cap >= 3 * (tok_piece_max + 3) + 1 always
 * suffices). Bytes that can never become valid UTF-8 are written as U+FFFD at once; an
 * incomplete sequence at the end is held in the stream until the next id. */
int tok_stream_push(const tokenizer *t, tok_stream *s, int32_t id, char *out, size_t cap);
/* Ends a stream: a held incomplete sequence is written as U+FFFD (cap >= 4 suffices).
 * Returns the number of bytes written; the stream is empty afterwards. */
int tok_stream_flush(tok_stream *s, char *out, size_t cap);

/* ---- building GGUF tokenizer metadata from a Hugging Face tokenizer.json ---- */
struct tok_vocab {
    char **tokens;   /* n_tokens NUL-terminated strings, index = id */
    int32_t *types;  /* enum tok_type per token */
    size_t n_tokens; /* padded to the requested vocab size with "[PAD<id>]" unused tokens */
    char **merges;   /* "left right" */
    size_t n_merges;
    int32_t eos_id, pad_id, bos_id; /* -1 when absent */
};

/* Reads tokenizer.json (model.vocab, model.merges, added_tokens) and, when given,
 * tokenizer_config.json for the eos/pad/bos tokens. n_vocab_padded 0 means no padding; a
 * vocabulary already larger than n_vocab_padded is returned as it is (the caller checks).
 * Token types follow llama.cpp's convert_hf_to_gguf.py: model tokens NORMAL; added tokens
 * CONTROL when special or shaped like "<|...|>", else USER_DEFINED; ids no token has, and
 * the padding, "[PAD<id>]" UNUSED. eos is the config's eos_token (else <|endoftext|>), pad its
 * pad_token (else <|endoftext|>), bos its bos_token (else <|endoftext|>, as Qwen's
 * config.json bos_token_id). */
int tok_vocab_from_hf(const char *tokenizer_json, const char *tokenizer_config_json, size_t n_vocab_padded,
                      tok_vocab *out);
void tok_vocab_free(tok_vocab *v);
