/* Whether bytes so far can still become one JSON object (RFC 8259), fed a few bytes at a time:
 * the automaton behind `response_format: {"type": "json_object"}` (a token may come next only if
 * its bytes keep the reply such a prefix; runtime/text/json_mask.h).
 *
 *   {  "k"  :  [ 1, -2.5e3, "x\u00e9", true, null ]  }
 *   ^  ^---^ ^ ^ ^^                                  ^
 *   |  key   | | value, then ',' or ']'              DONE: the object is whole, no byte more
 *   START: whitespace, then '{' only
 *
 * The state is a stack of open containers and where the innermost one stands (a value
 * expected, a key, a colon, a ',' or a close, inside a string, a number or a literal). Strings
 * are checked as RFC 8259 says: no control characters, escapes \" \\ \/ \b \f \n \r \t \uXXXX,
 * UTF-8 well formed (no overlong forms, no surrogates, nothing past U+10FFFF). Numbers:
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. Depth is bounded (JSON_PREFIX_MAX_DEPTH
 * containers): deeper is refused, so a state stays small enough to copy per token.
 *
 * Whitespace between tokens is narrower than RFC 8259's, as llama.cpp's json.gbnf has it: each
 * run is nothing, one space, or a newline and at most JSON_PREFIX_MAX_INDENT spaces or tabs.
 * Compact and indented JSON fit; a model held to the grammar cannot spin in whitespace forever
 * (with any whitespace allowed, a small model's most likely allowed token often is more). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_PREFIX_MAX_DEPTH 32
#define JSON_PREFIX_MAX_INDENT 20

typedef struct json_prefix {
    uint8_t state;    /* enum in json_prefix.c */
    uint8_t sub;      /* inside a number: its part; a literal: its index; \u: hex digits seen */
    uint8_t pos;      /* a literal: bytes matched */
    uint8_t utf8;     /* continuation bytes still due in a string */
    uint8_t lo, hi;   /* the range of the next continuation byte */
    uint8_t key;      /* the string is an object key */
    uint8_t ws;       /* the whitespace run so far: 0 none, 1 a space, 2 + k a newline and k indents */
    uint8_t depth;
    uint8_t open[JSON_PREFIX_MAX_DEPTH]; /* '{' or '[' per open container, outermost first */
} json_prefix;

void json_prefix_init(json_prefix *p);
/* Feeds n bytes: true if the text is still a prefix of a JSON object (p moved past them); false
 * if not (p is then unspecified: feed a copy to try a continuation). */
bool json_prefix_feed(json_prefix *p, const char *bytes, size_t n);
/* The object is whole: nothing more may follow. */
bool json_prefix_done(const json_prefix *p);
/* Inside a string, between characters (not after a backslash, not mid-UTF-8): any byte string
 * with no '"', '\\' or control byte made of whole UTF-8 sequences keeps it there. */
bool json_prefix_in_string(const json_prefix *p);
