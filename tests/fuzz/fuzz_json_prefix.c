/* libFuzzer target for the JSON-object prefix automaton (runtime/text/json_prefix.c), checked
 * against jansson (differential): on any bytes,
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

/* How far the automaton reads bytes[0..n): n if it accepts them all. */
static size_t accepted(const uint8_t *bytes, size_t n, json_prefix *p) {
    json_prefix_init(p);
    for (size_t i = 0; i < n; i++)
        if (!json_prefix_feed(p, (const char *)bytes + i, 1)) return i;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    json_prefix p, q;
    size_t ok = accepted(data, size, &p);
    bool whole = ok == size && json_prefix_done(&p);
    /* the same verdict fed in two parts */
    size_t cut = size ? data[0] % (size + 1) : 0;
    json_prefix_init(&q);
    bool two = json_prefix_feed(&q, (const char *)data, cut) && json_prefix_feed(&q, (const char *)data + cut, size - cut);
    FUZZ_CHECK("json_prefix", two == (ok == size));
    if (ok == size) FUZZ_CHECK("json_prefix", json_prefix_done(&q) == json_prefix_done(&p));
    /* against jansson */
    json_error_t e;
    json_t *j = json_loadb((const char *)data, size, 0, &e);
    bool theirs = j && json_is_object(j) && !memchr(data, 0, size);
    bool ws = false, esc = false;
    for (size_t i = 0; i < size; i++) {
        ws |= data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r';
        esc |= data[i] == '\\' && i + 1 < size && data[i + 1] == 'u';
    }
    bool range = !j && (strstr(e.text, "overflow") || strstr(e.text, "too big"));
    if (whole && !esc && !range) FUZZ_CHECK("json_prefix accepts what jansson refuses", theirs);
    if (theirs && !ws) FUZZ_CHECK("json_prefix refuses what jansson reads", whole);
    json_decref(j);
    return 0;
}
