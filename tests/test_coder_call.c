/* The Qwen3-Coder call grammar (runtime/text/coder_call.h): a call in the template's layout
 * reads as the JSON call object it stands for; each malformed call is refused at its first bad
 * byte; random calls of random tools, written as the template writes them, are accepted whole
 * and at every split, and the parser (toolcall_coder.h) gives the arguments the view holds. The
 * token mask over the real Qwen3 vocabulary in this mode (json_mask_set_coder): its shortcuts
 * decide every token as the grammar does, and random walks through what it allows end in calls
 * that parse to instances of the tools' schemas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/text/coder_call.h"
#include "runtime/text/json_jinja.h"
#include "runtime/text/json_mask.h"
#include "runtime/text/json_prefix.h"
#include "runtime/text/toolcall_coder.h"
#include "tests/test_util.h"

/* The schema of one call of any of tools, as the server builds it (server/api_request.c). */
static json_schema *calls_schema(const json_t *tools) {
    json_t *any = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        json_t *params = json_deep_copy(json_object_get(fn, "parameters"));
        json_object_set_new(params, "$id", json_string("cinder:tools/parameters"));
        json_array_append_new(any,
                              json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name",
                                        "const", json_object_get(fn, "name"), "arguments", params, "required", "name",
                                        "arguments", "additionalProperties", 0));
    }
    json_t *root = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0)) : json_pack("{s:O}", "anyOf", any);
    json_schema *s = json_schema_compile(root, false);
    if (!s) fail_msg("schema: %s", cd_errmsg());
    json_decref(root);
    json_decref(any);
    return s;
}

typedef struct reader {
    json_schema *schema;
    coder_tools *tools;
    coder_call c;
    json_prefix p;
    char view[4096];
    size_t vn;
} reader;

static reader *reader_new(const json_t *tools) {
    reader *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->schema = calls_schema(tools);
    r->tools = coder_tools_of(tools);
    assert_non_null(r->tools);
    coder_call_init(&r->c, r->tools);
    json_prefix_init(&r->p, r->schema);
    return r;
}

static void reader_free(reader *r) {
    json_schema_unref(r->schema);
    coder_tools_unref(r->tools);
    free(r);
}

/* Reads n bytes in one go: false when the grammar or the automaton refuses them. */
static bool reader_feed(reader *r, const char *s, size_t n) {
    char view[CODER_VIEW_MAX(64)];
    for (size_t at = 0; at < n; at += 64) { /* in pieces of at most 64, the view buffer's size */
        size_t k = n - at < 64 ? n - at : 64, vn, used;
        if (!coder_call_read(&r->c, &r->p, s + at, k, view, &vn, &used) || used != k) return false;
        if (vn && !json_prefix_feed(&r->p, view, vn)) return false;
        if (r->vn + vn >= sizeof r->view) fail_msg("view too long");
        memcpy(r->view + r->vn, view, vn);
        r->vn += vn;
    }
    return true;
}

static bool reader_done(const reader *r) { return coder_call_done(&r->c) && json_prefix_done(&r->p); }

static json_t *tools_of(const char *text) {
    json_error_t e;
    json_t *t = json_loads(text, 0, &e);
    if (!t) fail_msg("tools: %s", e.text);
    return t;
}

/* The parser's arguments for a call text (after <tool_call>). */
static json_t *parsed_args(const char *text, const json_t *tools) {
    json_t *call = toolcall_coder_call((slice){text, strlen(text)}, tools);
    if (!call) return NULL;
    json_t *args =
        json_loads(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), 0, NULL);
    json_decref(call);
    return args;
}

static const char *weather_tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"strict\": "
                                   "true, \"parameters\": {\"type\": \"object\","
                                   " \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 12}, \"days\": "
                                   "{\"type\": \"integer\", \"minimum\": 1},"
                                   " \"opts\": {\"type\": \"object\"}, \"hot\": {\"type\": \"boolean\"}, \"unit\": "
                                   "{\"enum\": [\"c\", \"f\"]}, \"any\": {}},"
                                   " \"required\": [\"city\", \"days\"], \"additionalProperties\": false}}},"
                                   " {\"type\": \"function\", \"function\": {\"name\": \"noop\", \"parameters\": "
                                   "{\"type\": \"object\", \"properties\": {}}}}]";

/* The layout's view, byte for byte, and the parser's arguments equal to the view's. */
static void test_view_of_a_call(void **state) {
    (void)state;
    json_t *tools = tools_of(weather_tools);
    const char *text =
        "\n<function=get_weather>\n<parameter=city>\nParis \"x\"\\\n\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2],\n \"b\": \"<\\n>\"}\n</parameter>\n"
        "<parameter=hot>\nTrue\n</parameter>\n</function>";
    const char *want = "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris \\\"x\\\"\\\\\\n\",\"days\":3,"
                       "\"opts\":{\"a\": [1, 2],\n \"b\": \"<\\n>\"},\"hot\":true}}";
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) { /* one split anywhere: the same view */
        reader *r = reader_new(tools);
        if (!reader_feed(r, text, cut) || !reader_feed(r, text + cut, n - cut)) fail_msg("refused, split at %zu", cut);
        if (!reader_done(r)) fail_msg("not done, split at %zu", cut);
        if (r->vn != strlen(want) || memcmp(r->view, want, r->vn)) fail_msg("view %.*s", (int)r->vn, r->view);
        reader_free(r);
    }
    json_t *view = json_loads(want, 0, NULL), *args = parsed_args(text, tools);
    assert_non_null(args);
    assert_true(json_equal(args, json_object_get(view, "arguments")));
    json_decref(view);
    json_decref(args);
    json_decref(tools);
}

/* Accepted up to the end of ok, refused at bad's first byte. */
static void refused_at(const json_t *tools, const char *ok, const char *bad, const char *why) {
    reader *r = reader_new(tools);
    if (!reader_feed(r, ok, strlen(ok))) fail_msg("%s: refused before the bad byte: %s", why, ok);
    if (reader_feed(r, bad, 1)) fail_msg("%s: accepted %s|%c", why, ok, bad[0]);
    reader_free(r);
}

#define CALL "\n<function=get_weather>\n"
static void test_refusals(void **state) {
    (void)state;
    json_t *tools = tools_of(weather_tools);
    refused_at(tools, "", "<", "the newline after <tool_call>");
    refused_at(tools, "\n<function=get_w", "x", "a function not among the tools");
    refused_at(tools, "\n<function=", ">", "an empty name");
    refused_at(tools, "\n<function=get", "\n", "a newline in a name");
    refused_at(tools, "\n<function=get_weather>", "<", "the newline after the name");
    refused_at(tools, CALL, " ", "whitespace between tags");
    refused_at(tools, CALL "<parameter=", "z", "a parameter the strict tool does not have");
    refused_at(tools, CALL "<parameter=days>\n3", ".", "a fraction for an integer");
    refused_at(tools, CALL "<parameter=days>\n3", ",", "a comma outside the value");
    refused_at(tools, CALL "<parameter=days>\n3", "}", "a close outside the value");
    refused_at(tools, CALL "<parameter=days>\n", "x", "not JSON for an integer");
    refused_at(tools, CALL "<parameter=days>\n", "\n", "an empty value");
    refused_at(tools, CALL "<parameter=hot>\ntru", "\n", "a value not whole");
    refused_at(tools, CALL "<parameter=city>\nabcdefghijkl", "m", "past maxLength");
    refused_at(tools, CALL "<parameter=any>\nab<parameter", "=", "a parameter tag in a text");
    refused_at(tools, CALL "<parameter=any>\nab</parameter", ">", "a close not on its own line");
    refused_at(tools, CALL "<parameter=any>\nab</tool_call", ">", "the block's close in a text");
    refused_at(tools, CALL "<parameter=any>\nab</think", ">", "the reasoning's close in a text");
    refused_at(tools, CALL "<parameter=unit>\n", "x", "not one of an enum's values");
    refused_at(tools, CALL "<parameter=opts>\n{\"a\": \"x<parameter", "=", "a parameter tag in a JSON string");
    refused_at(tools, CALL "<parameter=opts>\n{\"a\": \"</parameter", ">", "a close in a JSON string");
    refused_at(tools, CALL "<parameter=any>\nNuLl\n</parameter", ">", "a text the parser reads as null");
    refused_at(tools, CALL "<parameter=city>\nab\n</parameter>\n<parameter=", "c", "a parameter twice");
    refused_at(tools, CALL "<parameter=city>\nab\n</parameter>\n<", "/", "an end before the required parameters");
    refused_at(tools, CALL "<parameter=unit>\n", "\n", "a newline where an enum's value cannot end or go on");
    /* what the parser reads is accepted: a tag-like text, a "null" inside a longer text, a last newline */
    reader *r = reader_new(tools);
    const char *fine = CALL "<parameter=city>\n<para</func\n\n</parameter>\n<parameter=any>\nnulls\n</parameter>\n"
                            "<parameter=days>\n14\n</parameter>\n</function>";
    assert_true(reader_feed(r, fine, strlen(fine)));
    assert_true(reader_done(r));
    reader_free(r);
    json_t *args = parsed_args(fine, tools);
    assert_non_null(args);
    assert_string_equal(json_string_value(json_object_get(args, "city")), "<para</func\n");
    assert_string_equal(json_string_value(json_object_get(args, "any")), "nulls");
    assert_int_equal(json_integer_value(json_object_get(args, "days")), 14);
    json_decref(args);
    json_decref(tools);
}

/* ---- random tools and calls -------------------------------------------------------------- */

enum { K_STRING, K_INT, K_NUM, K_BOOL, K_OBJECT, K_ARRAY, K_ENUM, K_KINDS };

static void random_text(rng *r, char *out, size_t cap) {
    static const char *const bits[] = {"a", "Z", " ",    "\"", "\\",       "\n",           "<",
                                       ">", "/", "p",    "=",  "\xc3\xa9", "\xe2\x82\xac", "\t",
                                       "{", "1", "null", "</", "<p"};
    size_t n = 0, k = 1 + rng_below(r, 10);
    out[0] = 0;
    for (size_t i = 0; i < k; i++) {
        const char *b = bits[rng_below(r, sizeof bits / sizeof *bits)];
        if (n + strlen(b) + 1 > cap) break;
        strcpy(out + n, b);
        n += strlen(b);
    }
}

static bool text_ok(const char *s) {
    static const char *const tags[] = {"</parameter>", "<parameter=", "</tool_call>", "</think>"};
    for (size_t i = 0; i < 4; i++)
        if (strstr(s, tags[i])) return false;
    return strlen(s) != 4 || strncasecmp(s, "null", 4);
}

/* A tool with 1..4 parameters of random kinds (names p0..), all required; its call's arguments
 * (values that fit) in *args and the call written as the Coder template writes it in text. */
static json_t *random_tool(rng *r, int id, json_t **args, char *text, size_t cap) {
    json_t *props = json_object(), *req = json_array();
    *args = json_object();
    char fname[32];
    snprintf(fname, sizeof fname, "tool_%d", id);
    size_t n = (size_t)snprintf(text, cap, "\n<function=%s>\n", fname);
    uint32_t np = 1 + rng_below(r, 4);
    for (uint32_t i = 0; i < np; i++) {
        char pname[16], value[128];
        snprintf(pname, sizeof pname, "p%u", i);
        json_t *schema, *v;
        int kind = (int)rng_below(r, K_KINDS);
        switch (kind) {
        case K_STRING:
            do random_text(r, value, 48);
            while (!text_ok(value));
            schema = json_pack("{s:s}", "type", "string"), v = json_string(value);
            break;
        case K_INT:
            schema = json_pack("{s:s}", "type", "integer"), v = json_integer((json_int_t)rng_below(r, 2001) - 1000);
            break;
        case K_NUM:
            schema = json_pack("{s:s}", "type", "number"), v = json_real(((double)rng_below(r, 800) - 400) / 4 + 0.125);
            break; /* never integral */
        case K_BOOL: schema = json_pack("{s:s}", "type", "boolean"), v = json_boolean(rng_below(r, 2)); break;
        case K_OBJECT:
            schema = json_pack("{s:s}", "type", "object"),
            v = json_pack("{s:i,s:[s,b]}", "k", (int)rng_below(r, 9), "l", "x<y\n", 1);
            break;
        case K_ARRAY:
            schema = json_pack("{s:s,s:{s:s}}", "type", "array", "items", "type", "string"),
            v = json_pack("[s,s]", "a\"", "</b>");
            break;
        default:
            schema = json_pack("{s:[s,s,s]}", "enum", "red", "green", "a b"),
            v = json_string(rng_below(r, 2) ? "green" : "a b");
            break;
        }
        json_object_set_new(props, pname, schema);
        json_array_append_new(req, json_string(pname));
        /* the template: mappings and lists by tojson, everything else by str() (Python's True) */
        char *dumped = NULL;
        size_t dl = 0;
        if (json_is_string(v)) snprintf(value, sizeof value, "%s", json_string_value(v));
        else if (json_is_boolean(v)) snprintf(value, sizeof value, "%s", json_is_true(v) ? "True" : "False");
        else {
            assert_int_equal(json_jinja_dumps(v, &dumped, &dl), 0);
            snprintf(value, sizeof value, "%s", dumped);
            free(dumped);
        }
        n += (size_t)snprintf(text + n, cap - n, "<parameter=%s>\n%s\n</parameter>\n", pname, value);
        json_object_set_new(*args, pname, v);
    }
    snprintf(text + n, cap - n, "</function>");
    return json_pack("{s:s,s:{s:s,s:b,s:{s:s,s:o,s:o,s:b}}}", "type", "function", "function", "name", fname, "strict",
                     1, "parameters", "type", "object", "properties", props, "required", req, "additionalProperties",
                     0);
}

/* A random set of 1..3 tools, and a call of one of them. */
static json_t *random_call(rng *r, json_t **args, char *text, size_t cap) {
    json_t *tools = json_array();
    uint32_t nt = 1 + rng_below(r, 3), pick = rng_below(r, nt);
    for (uint32_t t = 0; t < nt; t++) {
        json_t *a;
        char tx[2048];
        json_array_append_new(tools, random_tool(r, (int)t, &a, tx, sizeof tx));
        if (t == pick) *args = a, snprintf(text, cap, "%s", tx);
        else json_decref(a);
    }
    return tools;
}

static void test_random_calls(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 47);
    for (int i = 0; i < 300; i++) {
        json_t *args;
        char text[2048];
        json_t *tools = random_call(&r, &args, text, sizeof text);
        size_t n = strlen(text);
        for (size_t cut = 0; cut <= n; cut += 1 + rng_below(&r, 7)) {
            reader *rd = reader_new(tools);
            if (!reader_feed(rd, text, cut) || !reader_feed(rd, text + cut, n - cut))
                fail_msg("refused at a split %zu: %s", cut, text);
            if (!reader_done(rd)) fail_msg("not done: %s", text);
            json_t *view = json_loadb(rd->view, rd->vn, 0, NULL);
            if (!view || !json_equal(json_object_get(view, "arguments"), args))
                fail_msg("view %.*s of %s", (int)rd->vn, rd->view, text);
            json_decref(view);
            reader_free(rd);
        }
        json_t *parsed = parsed_args(text, tools);
        if (!parsed || !json_equal(parsed, args))
            fail_msg("parsed %s from %s", parsed ? json_dumps(parsed, 0) : "nothing", text);
        json_decref(parsed);
        json_decref(args);
        json_decref(tools);
    }
}

/* ---- the token mask in this mode ----------------------------------------------------------- */

static tokenizer *tok;
static json_vocab vocab;

static void mask_for(json_mask *m, json_schema *s, coder_tools *t) {
    json_mask_init(m, &vocab, s);
    assert_int_equal(json_mask_set_coder(m, t), 0);
    assert_int_equal(json_mask_set_tail(m, "\n</tool_call>"), 0);
}

/* json_mask_apply against json_mask_allows (every token through the grammar) at 200 states
 * cut anywhere in random calls and their tails. */
static void test_mask_shortcuts(void **state) {
    (void)state;
    int32_t n = tok_n_vocab(tok);
    float *l = malloc((size_t)(uint32_t)n * sizeof *l);
    assert_non_null(l);
    rng r;
    rng_seed(&r, 9);
    uint32_t allowed = 0, plain = 0, done = 0;
    for (int st = 0; st < 200; st++) {
        json_t *args;
        char text[2048];
        json_t *tools = random_call(&r, &args, text, sizeof text - 16);
        strcat(text, "\n</tool_call>");
        json_schema *s = calls_schema(tools);
        coder_tools *t = coder_tools_of(tools);
        json_mask m;
        mask_for(&m, s, t);
        size_t len = strlen(text), cut = st % 10 == 0 ? len : rng_below(&r, (uint32_t)len + 1);
        if (!json_mask_feed(&m, text, cut)) fail_msg("refused %.*s", (int)cut, text);
        plain += coder_call_plain(m.coder);
        done += json_mask_done(&m);
        for (int32_t id = 0; id < n; id++) l[id] = id % 89 == 0 ? -INFINITY : 0.0f;
        json_mask_apply(&m, l, n);
        for (int32_t id = 0; id < n; id++) {
            bool want = id % 89 != 0 && json_mask_allows(&m, id);
            if ((l[id] == 0.0f) != want)
                fail_msg("token %d at \"%.*s\": mask %d, grammar %d", id, (int)cut, text, l[id] == 0.0f, want);
            allowed += want;
        }
        json_mask_free(&m);
        coder_tools_unref(t);
        json_schema_unref(s);
        json_decref(args);
        json_decref(tools);
    }
    printf("  200 states (%u in plain text, %u whole): %u tokens allowed in all\n", plain, done, allowed);
    assert_true(plain >= 3 && done >= 20 && allowed > 100000);
    free(l);
}

/* Random walks through what the mask allows (random logits, tags and newlines favoured so that
 * calls end) until the end token: each reply parses to a call of one of the tools whose
 * arguments are an instance of its schema (the view automaton, fed the parser's call). */
static void test_walks_end_in_valid_calls(void **state) {
    (void)state;
    int32_t n = tok_n_vocab(tok), eog = -1;
    for (int32_t id = 0; id < n && eog < 0; id++)
        if (tok_is_eog(tok, id)) eog = id;
    assert_true(eog >= 0);
    float *l = malloc((size_t)(uint32_t)n * sizeof *l);
    /* the bonus of pieces of the layout's tags and JSON's closes: most for their beginnings */
    float *closing = calloc((size_t)(uint32_t)n, sizeof *closing);
    assert_true(l && closing);
    static const char *const closers[] = {
        "\n</parameter>\n", "</function>\n</tool_call>", "<parameter=p0>\n", "\"", "]", "}"};
    for (int32_t id = 0; id < n; id++) {
        size_t pn;
        const char *p = tok_piece(tok, id, &pn);
        for (size_t k = 0; p && pn && k < sizeof closers / sizeof *closers; k++) {
            const char *at = memmem(closers[k], strlen(closers[k]), p, pn);
            if (at) closing[id] = fmaxf(closing[id], at == closers[k] ? 9.0f : 3.0f);
        }
    }
    rng r;
    rng_seed(&r, 21);
    int ended = 0;
    for (int w = 0; w < 12; w++) {
        json_t *args;
        char example[2048], text[8192];
        json_t *tools = random_call(&r, &args, example, sizeof example);
        json_schema *s = calls_schema(tools);
        coder_tools *t = coder_tools_of(tools);
        json_mask m;
        mask_for(&m, s, t);
        size_t len = 0;
        text[0] = 0;
        for (int step = 0; step < 160; step++) {
            for (int32_t id = 0; id < n; id++) l[id] = (float)rng_below(&r, 1000) / 100.0f + closing[id];
            json_mask_apply(&m, l, n);
            int32_t best = -1;
            for (int32_t id = 0; id < n; id++)
                if (l[id] != -INFINITY && (best < 0 || l[id] > l[best])) best = id;
            if (best < 0) fail_msg("no token allowed after %s", text);
            if (best == eog || tok_is_eog(tok, best)) break;
            size_t pn;
            const char *p = tok_piece(tok, best, &pn);
            if (len + pn + 1 > sizeof text) break;
            memcpy(text + len, p, pn);
            text[len += pn] = 0;
            json_mask_accept(&m, best);
        }
        if (json_mask_done(&m)) {
            ended++;
            char *end = strstr(text, "\n</tool_call>");
            assert_non_null(end);
            *end = 0;
            json_t *call = toolcall_coder_call((slice){text, strlen(text)}, tools);
            if (!call) fail_msg("not a call: %s", text);
            json_t *fn = json_object_get(call, "function");
            json_t *parsed = json_pack("{s:O,s:o}", "name", json_object_get(fn, "name"), "arguments",
                                       json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL));
            char *dumped = json_dumps(parsed, JSON_COMPACT);
            json_prefix p;
            json_prefix_init(&p, s);
            if (!json_prefix_feed(&p, dumped, strlen(dumped)) || !json_prefix_done(&p))
                fail_msg("the call %s (from %s) is not an instance of the schema", dumped, text);
            free(dumped);
            json_decref(parsed);
            json_decref(call);
        }
        json_mask_free(&m);
        coder_tools_unref(t);
        json_schema_unref(s);
        json_decref(args);
        json_decref(tools);
    }
    printf("  12 walks, %d ended in a call\n", ended);
    assert_true(ended >= 6); /* the rest still in a text or JSON value at 160 tokens */
    free(l);
    free(closing);
}

static int setup(void **state) {
    (void)state;
    if (!(tok = tu_qwen3_tokenizer())) fail_msg("%s", cd_errmsg());
    return json_vocab_init(&vocab, tok);
}

static int teardown(void **state) {
    (void)state;
    json_vocab_free(&vocab);
    tok_free(tok);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_of_a_call),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_random_calls),
        cmocka_unit_test_setup_teardown(test_mask_shortcuts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_walks_end_in_valid_calls, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
