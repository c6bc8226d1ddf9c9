/* The chat template's `tojson` filter: JSON text exactly as transformers renders it, which is
 * Python's json.dumps(x, ensure_ascii=False), no indent, default separators:
 *
 *   {"name": "f", "arguments": {"a": [1, 2.0, "é\n"], "b": null}}
 *
 * - ", " between items, ": " after keys; objects in insertion order (jansson keeps it).
 * - Strings: \" \\ \b \f \n \r \t, other bytes below 0x20 as \u00xx (lowercase hex); every
 *   other byte, DEL and non-ASCII included, verbatim (ensure_ascii=False).
 * - Integers in decimal. Reals as Python's repr(float): the shortest digits that read back
 *   to the same double, "1.0" for integral values, exponent form "1e-05" / "1e+16" outside
 *   1e-4 <= |x| < 1e16. So JSON 1.0 stays 1.0 and 1 stays 1, as in Python (JavaScript
 *   would print both as 1; see docs/CHAT_TEMPLATE.md).
 *
 * Nesting deeper than JSON_JINJA_MAX_DEPTH (also what catches a cyclic json_t) fails. */
#pragma once
#include <stddef.h>
#include <jansson.h>

#define JSON_JINJA_MAX_DEPTH 2048

/* Serializes v to a malloc'd, NUL-terminated string; *len (if given) excludes the NUL.
 * -1 with a message on out-of-memory or nesting too deep; *out is then NULL. */
int json_jinja_dumps(const json_t *v, char **out, size_t *len);

/* Appends to a growable buffer: *buf (malloc'd or NULL) holds *len bytes in *cap; the bytes
 * are kept NUL-terminated. On failure the buffer stays valid (possibly partly appended). */
int json_jinja_append(const json_t *v, char **buf, size_t *len, size_t *cap);

/* Python's repr() of a double into out (at least 32 bytes): "0.1", "1.0", "-0.0", "1e-05",
 * "1.5e+16", "5e-324"; non-finite values as json.dumps writes them ("NaN", "Infinity"). */
void json_jinja_format_real(double d, char out[32]);
