/* UTF-8 scanning and GPT-2's byte-level alphabet, shared by the tokenizer's encoder and
 * decoder.
 *
 * Byte-level BPE works on bytes, but its vocabulary is stored as printable text: every byte
 * 0..255 is given one visible code point (GPT-2's bytes_to_unicode):
 *
 *   bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF  ->  themselves (U+0021.., U+00A1.., U+00AE..)
 *   the other 68 bytes (0x00..0x20, 0x7F..0xA0, 0xAD), in order  ->  U+0100, U+0101, ...
 *
 * so a space (0x20) is 'Ġ' (U+0120) and a newline (0x0A) is 'Ċ' (U+010A). All mapped code
 * points are below U+0144, which keeps the reverse map a small table. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UB_REPLACEMENT 0xFFFDu
#define UB_CP_LIMIT 0x144u /* every byte-level code point is below this */

/* Decodes one code point at s[0..n), n >= 1. Returns the number of bytes it takes (1..4)
 * and stores it in *cp. Invalid input (stray continuation byte, overlong form, surrogate,
 * > U+10FFFF, or a sequence cut short) returns the length of the maximal valid prefix
 * (at least 1, as Unicode's "maximal subpart" rule, Python and WHATWG replace it) as a
 * negative number, and *cp = UB_REPLACEMENT. A cut-short sequence that reaches the end of
 * the buffer sets *truncated (when given): more bytes might still complete it. */
int ub_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, bool *truncated);

/* Writes cp as UTF-8 into out (4 bytes of room); returns the length. cp must be valid. */
int ub_utf8_put(uint32_t cp, char *out);

/* Length of the longest prefix of s that is valid UTF-8 (== n when all of it is). */
size_t ub_utf8_valid_prefix(const unsigned char *s, size_t n);

/* Copies s into a malloc'd buffer with every invalid sequence replaced by U+FFFD (maximal
 * subparts). *out_n gets the new length; the buffer has a NUL after it. NULL when out of
 * memory. */
char *ub_utf8_sanitize(const unsigned char *s, size_t n, size_t *out_n);

/* GPT-2 bytes_to_unicode: fills byte_cp[256] with each byte's code point and cp_byte[cp]
 * (for cp < UB_CP_LIMIT) with the byte it stands for, or -1. */
void ub_bytelevel_tables(uint16_t byte_cp[256], int16_t cp_byte[UB_CP_LIMIT]);
