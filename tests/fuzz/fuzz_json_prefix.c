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
 * Input "C:" text: a Qwen3-Coder call (after <tool_call>) of fixed tools, read by its grammar
 * (runtime/text/coder_call.c) into the JSON view the call schema's automaton holds:
 *   - read whole and byte by byte it gives the same verdict, and never reads out of bounds;
 *   - accepted to its end => the view is one JSON object (jansson, with the same exceptions as
 *     below: \u escapes the model wrote, numbers past jansson's range) and the parser
 *     (toolcall_coder.c) takes the text as a call.
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

#include "runtime/text/coder_call.h"
#include "runtime/text/json_prefix.h"
#include "runtime/text/toolcall_coder.h"
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
        if (!jansson_may_refuse((const uint8_t *)text, n, &e, j))
            FUZZ_CHECK("json_prefix accepts what jansson refuses", j);
        json_decref(j);
    }
    json_schema_unref(s);
    return 0;
}

/* The tools of "C:" inputs, and their call schema (as server/api_request.c builds it). */
static const char coder_tools_text[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"s\": {\"type\": \"string\", \"maxLength\": 8}, \"n\": {\"type\": \"integer\"}, \"x\": {\"type\": \"number\"}, "
    "\"b\": {\"type\": \"boolean\"}, \"o\": {\"type\": \"object\"}, \"e\": {\"enum\": [\"a\", \"b c\"]}}, "
    "\"required\": [\"s\"]}}}]";
static const char coder_schema_text[] =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"f\"}, \"arguments\": {\"type\": \"object\", "
    "\"properties\": {\"s\": {\"type\": \"string\", \"maxLength\": 8}, \"n\": {\"type\": \"integer\"}, \"x\": "
    "{\"type\": \"number\"}, "
    "\"b\": {\"type\": \"boolean\"}, \"o\": {\"type\": \"object\"}, \"e\": {\"enum\": [\"a\", \"b c\"]}}, "
    "\"required\": [\"s\"], "
    "\"additionalProperties\": false}}, \"required\": [\"name\", \"arguments\"], \"additionalProperties\": false}";

/* Reads text[0..n) one piece at a time (pieces of step bytes): the view into view (cap bytes),
 * false when refused. */
static bool coder_read(coder_call *c, json_prefix *p, const char *text, size_t n, size_t step, char *view, size_t cap,
                       size_t *vn) {
    *vn = 0;
    for (size_t at = 0; at < n; at += step) {
        size_t k = n - at < step ? n - at : step, got, used;
        char piece[CODER_VIEW_MAX(8)];
        if (!coder_call_read(c, p, text + at, k, piece, &got, &used) || used != k) return false;
        if (got && !json_prefix_feed(p, piece, got)) return false;
        if (*vn + got > cap) return false;
        memcpy(view + *vn, piece, got);
        *vn += got;
    }
    return true;
}

static int coder_input(const uint8_t *data, size_t size) {
    static json_t *tools;
    static coder_tools *kinds;
    static json_schema *schema;
    static json_prefix p, q;
    static char view[CODER_VIEW_MAX(4096)], view2[CODER_VIEW_MAX(4096)];
    if (!tools) {
        tools = json_loads(coder_tools_text, 0, NULL);
        kinds = coder_tools_of(tools);
        schema = json_schema_compile_text(coder_schema_text, true);
        FUZZ_CHECK("coder fixture", tools && kinds && schema);
    }
    const char *text = (const char *)data;
    coder_call c, d;
    size_t vn, vn2;
    coder_call_init(&c, kinds), coder_call_init(&d, kinds);
    json_prefix_init(&p, schema), json_prefix_init(&q, schema);
    bool one = coder_read(&c, &p, text, size, 8, view, sizeof view, &vn);
    bool each = coder_read(&d, &q, text, size, 1, view2, sizeof view2, &vn2);
    FUZZ_CHECK("coder_call byte by byte", one == each && (!one || (vn == vn2 && !memcmp(view, view2, vn))));
    if (one && coder_call_done(&c)) {
        FUZZ_CHECK("coder_call done, the automaton not", json_prefix_done(&p));
        json_error_t e;
        json_t *v = json_loadb(view, vn, JSON_ALLOW_NUL, &e), *call = toolcall_coder_call((slice){text, size}, tools);
        if (!jansson_may_refuse((const uint8_t *)view, vn, &e, v))
            FUZZ_CHECK("coder_call's view is not JSON", v && json_is_object(v));
        FUZZ_CHECK("coder_call accepts what the parser does not take", call);
        json_decref(v);
        json_decref(call);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    if (size >= 2 && data[0] == 'S' && data[1] == ':') return schema_input(data + 2, size - 2);
    if (size >= 2 && data[0] == 'C' && data[1] == ':') return coder_input(data + 2, size - 2);
    static json_prefix p, q; /* ~35 KB each */
    size_t ok = accepted(data, size, &p);
    bool whole = ok == size && json_prefix_done(&p);
    /* the same verdict fed in two parts */
    size_t cut = size ? data[0] % (size + 1) : 0;
    json_prefix_init(&q, any_object());
    bool two =
        json_prefix_feed(&q, (const char *)data, cut) && json_prefix_feed(&q, (const char *)data + cut, size - cut);
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
