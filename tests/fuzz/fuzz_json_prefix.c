/* libFuzzer target for the prefix automaton (runtime/text/json_prefix.c), two ways.
 *
 * Input "S:" schema NUL text: the schema a client sent (runtime/text/json_schema.c compiles it,
 * strict when the schema's first byte is odd), then the text fed to the automaton it makes:
 *   - compiling any bytes refuses them or gives a schema, and never reads out of bounds;
 *   - the text fed whole and byte by byte (json_prefix_accepts before each feed) gives the
 *     same verdict;
 *   - accepted whole => jansson reads one JSON value (but for \u escapes and numbers past
 *     jansson's range, as below).
 *
 * Any other input, against jansson (differential) for response_format json_object:
 *   - fed whole or split at a point the input picks, the automaton gives the same verdict;
 *   - accepted whole (done) => jansson reads one object (but for \u escapes, which the automaton
 *     takes as any four hex digits, and numbers past jansson's range);
 *   - jansson reads one object with no whitespace byte anywhere and no NUL =>
 *     the automaton accepts it whole (whitespace runs are narrower than RFC 8259 on purpose:
 *     json_prefix.h).
 * ASan and UBSan watch every byte of it. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/text/json_prefix.h"
#include "tests/fuzz/fuzz_util.h"

static const json_schema *any_object(void) {
    static json_schema *any;
    if (!any) any = json_schema_any_object();
    return any;
}

/* How far the automaton reads bytes[0..n): n if it accepts them all. */
static size_t accepted(const uint8_t *bytes, size_t n, json_prefix *p) {
    json_prefix_init(p, any_object());
    for (size_t i = 0; i < n; i++)
        if (!json_prefix_feed(p, (const char *)bytes + i, 1)) return i;
    return n;
}

/* \u escapes (the automaton takes any four hex digits; jansson refuses lone surrogates and
 * \u0000) and numbers past jansson's range are not grammar: left out of the comparison. */
static bool jansson_may_refuse(const uint8_t *data, size_t size, const json_error_t *e, bool parsed) {
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == '\\' && data[i + 1] == 'u') return true;
    return !parsed && (strstr(e->text, "overflow") || strstr(e->text, "too big"));
}

static int schema_input(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    size_t n_schema = (size_t)(nul - data), n = size - n_schema - 1;
    const char *text = (const char *)nul + 1;
    json_t *doc = json_loadb((const char *)data, n_schema, JSON_DECODE_ANY, NULL);
    json_schema *s = doc ? json_schema_compile(doc, n_schema && data[0] & 1) : NULL;
    json_decref(doc);
    if (!s) return 0;
    static json_prefix p, q;
    json_prefix_init(&p, s);
    bool whole = json_prefix_feed(&p, text, n) && json_prefix_done(&p);
    json_prefix_init(&q, s);
    size_t i = 0;
    while (i < n && json_prefix_accepts(&q, text + i, 1) && json_prefix_feed(&q, text + i, 1)) i++;
    FUZZ_CHECK("json_prefix byte by byte", (i == n && json_prefix_done(&q)) == whole);
    if (whole) {
        json_error_t e;
        json_t *j = json_loadb(text, n, JSON_DECODE_ANY, &e);
        if (!jansson_may_refuse((const uint8_t *)text, n, &e, j)) FUZZ_CHECK("json_prefix accepts what jansson refuses", j);
        json_decref(j);
    }
    json_schema_unref(s);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    if (size >= 2 && data[0] == 'S' && data[1] == ':') return schema_input(data + 2, size - 2);
    static json_prefix p, q; /* ~35 KB each */
    size_t ok = accepted(data, size, &p);
    bool whole = ok == size && json_prefix_done(&p);
    /* the same verdict fed in two parts */
    size_t cut = size ? data[0] % (size + 1) : 0;
    json_prefix_init(&q, any_object());
    bool two = json_prefix_feed(&q, (const char *)data, cut) && json_prefix_feed(&q, (const char *)data + cut, size - cut);
    FUZZ_CHECK("json_prefix", two == (ok == size));
    if (ok == size) FUZZ_CHECK("json_prefix", json_prefix_done(&q) == json_prefix_done(&p));
    /* against jansson */
    json_error_t e;
    json_t *j = json_loadb((const char *)data, size, 0, &e);
    bool theirs = j && json_is_object(j) && !memchr(data, 0, size);
    bool ws = false;
    for (size_t i = 0; i < size; i++) ws |= data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r';
    if (whole && !jansson_may_refuse(data, size, &e, j)) FUZZ_CHECK("json_prefix accepts what jansson refuses", theirs);
    if (theirs && !ws) FUZZ_CHECK("json_prefix refuses what jansson reads", whole);
    json_decref(j);
    return 0;
}
