/* JSON Schema's "pattern" (an ECMA-262 regular expression, unanchored unless it says ^ / $) as
 * a Glushkov automaton over code points: one state per character position of the pattern, no
 * empty moves, so a set of states is one 64-bit word a prefix automaton can carry and compare.
 *
 *   ^\d{3}-[a-z]+$   ->  positions \d \d \d - [a-z]: first {0}, follow 0->1->2->3->4, 4->4,
 *                        last {4}; anchored at both ends
 *
 * Supported: literals (UTF-8), ., classes [a-z0-9_] and [^...], \d \D \w \W \s \S, escaped
 * punctuation, \n \t \r \f \v, \uXXXX, groups ( ) and (?: ), |, * + ? {n} {n,} {n,m} (lazy
 * forms read as greedy: the same strings), ^ at the start and $ at the end. Refused by name:
 * backreferences, lookaround, \b, anchors elsewhere, more than JSON_REGEX_MAX_POSITIONS
 * positions (after {n,m} are written out).
 *
 * The text is written inside a JSON string without escapes (json_schema.h), so '"', '\\' and
 * control characters never match; positions that cannot then lead to a match are dropped at
 * compile time, so every live state set can still end in a match (no dead ends), and a pattern
 * that no such string matches is refused. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define JSON_REGEX_MAX_POSITIONS 62
#define JSON_REGEX_START (1ull << 62)   /* before the first character (anchored: only then) */
#define JSON_REGEX_MATCHED (1ull << 63) /* unanchored at the end and matched: the rest is free */

typedef struct json_regex_pos {
    uint32_t range, n_range; /* code point ranges [lo, hi] in json_regex.ranges */
    bool negate;
    uint64_t follow; /* positions that may come next */
} json_regex_pos;

typedef struct json_regex {
    uint32_t n_pos;
    json_regex_pos pos[JSON_REGEX_MAX_POSITIONS];
    uint32_t (*ranges)[2];
    uint32_t n_ranges;
    uint64_t first, last; /* positions a match may begin / end with */
    bool nullable;        /* the empty string matches */
    bool anchored_start, anchored_end;
} json_regex;

/* Compiles pattern; -1 with cd_errmsg() naming the problem. json_regex_free after. */
int json_regex_compile(json_regex *re, const char *pattern);
void json_regex_free(json_regex *re);
/* The state before any character. */
uint64_t json_regex_start(const json_regex *re);
/* The state after code point c: 0 when no match can follow any more. */
uint64_t json_regex_step(const json_regex *re, uint64_t state, uint32_t c);
/* Whether some character in [lo, hi] may come next (json_regex_step would not give 0): what a
 * UTF-8 sequence begun so far can still become must be checked before it is whole. */
bool json_regex_may_take(const json_regex *re, uint64_t state, uint32_t lo, uint32_t hi);
/* The text so far matches (the string may end here). */
bool json_regex_accepts(const json_regex *re, uint64_t state);
