/* Whether bytes so far can still become one JSON value (RFC 8259) that is an instance of a
 * schema (runtime/text/json_schema.h), fed a few bytes at a time: the automaton behind
 * `response_format` json_object and json_schema (a token may come next only if its bytes keep
 * the reply such a prefix; runtime/text/json_mask.h).
 *
 *   {  "k"  :  [ 1, -2.5e3, "x\u00e9", true, null ]  }
 *   ^  ^---^ ^ ^ ^^                                  ^
 *   |  key   | | value, then ',' or ']'              DONE: the value is whole, no byte more
 *   whitespace, then the value the schema's root allows
 *
 * A path is one way of reading the bytes: a stack of open containers, each with its schema
 * node (and the keys written so far, or the items begun), and where the innermost one stands (a
 * value expected, a key, a colon, a ',' or a close, inside a string, a number, a literal, or one
 * of an enum's values). The state is the set of live paths: a union (anyOf) starts one path per
 * branch, and an object that allows both declared and other keys one per kind of key; a path
 * dies on a byte it cannot take. Paths past JSON_PREFIX_MAX_PATHS are dropped: that narrows
 * what may follow but never lets through what the schema does not allow.
 *
 * Strings are checked as RFC 8259 says: no control characters, escapes \" \\ \/ \b \f \n \r \t
 * \uXXXX, UTF-8 well formed (no overlong forms, no surrogates, nothing past U+10FFFF). Numbers:
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? (integers: no fraction or exponent). Depth is
 * bounded (JSON_PREFIX_MAX_DEPTH containers), and a value, key or item is begun only if an
 * instance of its schema fits in the depth left, so a path never reaches a dead end.
 *
 * Whitespace between tokens is narrower than RFC 8259's, as llama.cpp's json.gbnf has it: each
 * run is nothing, one space, or a newline and at most JSON_PREFIX_MAX_INDENT spaces or tabs.
 * Compact and indented JSON fit; a model held to the grammar cannot spin in whitespace forever
 * (with any whitespace allowed, a small model's most likely allowed token often is more). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/json_schema.h"

#define JSON_PREFIX_MAX_DEPTH 32
#define JSON_PREFIX_MAX_INDENT 20
#define JSON_PREFIX_MAX_PATHS 64

typedef struct json_frame {
    uint64_t seen;  /* object: bit i = properties[node.prop + i] written */
    uint32_t count; /* array: items begun */
    uint16_t node;  /* the container's schema node */
    uint8_t open;   /* '{' or '[' */
    uint8_t pad;
} json_frame;

typedef struct json_path {
    uint8_t state;  /* enum in json_prefix.c */
    uint8_t sub;    /* a number: its part; a literal: which; \u: hex digits seen */
    uint8_t pos;    /* a literal: bytes matched */
    uint8_t utf8;   /* continuation bytes still due in a string */
    uint8_t lo, hi; /* the range of the next continuation byte */
    uint8_t key;    /* the string is an object key not declared */
    uint8_t ws;     /* the whitespace run so far: 0 none, 1 a space, 2 + k a newline and k indents */
    uint8_t depth;
    uint8_t keys;    /* before a key: 0 not chosen yet, 1 a declared key, 2 another key */
    uint8_t integer; /* the number is an integer */
    uint8_t neg;     /* a bounded integer: it has a minus sign */
    uint16_t node;   /* the schema node of the value expected or being read */
    uint16_t pad2;
    uint32_t mlo, mhi, mpos; /* properties (a key) or literals (an enum) still matching; bytes matched */
    uint32_t slen;           /* characters of the string so far */
    int64_t num;             /* a bounded integer: the magnitude of its digits so far */
    uint64_t re;             /* a string with a pattern: the regex's state (json_regex.h) */
    uint32_t cp;             /* a string with a pattern: the code point being read (its UTF-8 bytes so far) */
    uint32_t pad3;
    json_frame f[JSON_PREFIX_MAX_DEPTH]; /* open containers, outermost first (only [0, depth) meaningful) */
} json_path;

typedef struct json_prefix {
    const json_schema *s; /* borrowed: outlives the state */
    uint32_t n;           /* live paths (0: the bytes fed were refused) */
    json_path path[JSON_PREFIX_MAX_PATHS];
} json_prefix;

/* At the start of a reply that must be an instance of s. */
void json_prefix_init(json_prefix *p, const json_schema *s);
/* Feeds n bytes: true if the text is still a prefix of an instance (p moved past them); false if
 * not (p is then unspecified: feed a copy, or ask json_prefix_accepts, to try a continuation). */
bool json_prefix_feed(json_prefix *p, const char *bytes, size_t n);
/* Whether n more bytes would keep it a prefix (p unchanged; cheaper than feeding a copy). */
bool json_prefix_accepts(const json_prefix *p, const char *bytes, size_t n);
/* How many of n bytes it reads: n when it accepts them all; k < n when it accepts the first k and
 * the value is whole there (what follows is not JSON's: a tool call's closing tag); SIZE_MAX
 * when it refuses a byte before the value is whole. p unchanged. */
size_t json_prefix_reads(const json_prefix *p, const char *bytes, size_t n);
/* The value is whole and may end here (for an object, array or string nothing more may follow;
 * a number or an enum's value might still grow). */
bool json_prefix_done(const json_prefix *p);
/* Inside a string, between characters (not after a backslash, not mid-UTF-8), any byte string
 * with no '"', '\\' or control byte, made of whole UTF-8 sequences of at most this many
 * characters, keeps it a prefix: 0 when no path is in such a string. */
uint32_t json_prefix_string_room(const json_prefix *p);
