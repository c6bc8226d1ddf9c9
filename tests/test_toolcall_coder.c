/* Qwen3-Coder tool calls: the XML call of a reply parsed into tool_calls, each value typed by
 * its tool's schema as vLLM's qwen3coder parser types it (runtime/text/toolcall_coder.h).
 * A table of replies with the message each must give; Python's int()/float() rules on the
 * numeric texts (the table's expectations were checked against CPython once); hostile input
 * (unterminated tags, unknown functions, bad values, a name without its ">"); the round trip
 * (random typed arguments rendered by the Coder template, as the model is taught to write
 * them, parse back to the same values); and fragment soup that never crashes and always gives
 * a message the Coder template renders. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/text/chat.h"
#include "runtime/text/toolcall.h"

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"edit\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"},\"line\":{\"type\":\"integer\"},\"ratio\":{\"type\":\"number\"},"
    "\"force\":{\"type\":\"boolean\"},\"opts\":{\"type\":\"object\"},\"items\":{\"type\":\"array\"},"
    "\"any\":{},\"count\":{\"type\":\" Int64 "
    "\"},\"flag\":{\"type\":\"bool\"},\"maybe\":{\"type\":[\"string\",\"null\"]},"
    "\"kind\":{\"type\":\"enum\"},\"size\":{\"type\":\"float\"},\"odd\":{\"type\":\"whatever\"}}}}},"
    "{\"name\":\"bare\",\"parameters\":{\"properties\":{\"n\":{\"type\":\"integer\"}}}}]";

static json_t *tools;

static json_t *parse(const char *text, size_t n) {
    json_t *msg = NULL;
    toolcall_format f = {.template = CHAT_TEMPLATE_QWEN3_CODER, .tools = tools};
    if (toolcall_parse_as(text, n, f, &msg) != 0) fail_msg("%.*s: %s", (int)n, text, cd_errmsg());
    return msg;
}

/* The message for text: content (null when want_content is NULL) and the calls' "name" and
 * "arguments" as name\targuments lines. */
static void expect(const char *text, const char *want_content, const char *want_calls) {
    json_t *msg = parse(text, strlen(text));
    const json_t *content = json_object_get(msg, "content");
    if (want_content ? !json_is_string(content) || strcmp(json_string_value(content), want_content)
                     : !json_is_null(content))
        fail_msg("%s\ncontent: got %s, want %s", text, json_dumps(content, JSON_ENCODE_ANY),
                 want_content ? want_content : "null");
    char got[4096] = "";
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "%s%s\t%s", i ? "\n" : "", json_string_value(json_object_get(fn, "name")),
                 json_string_value(json_object_get(fn, "arguments")));
    }
    if (strcmp(got, want_calls)) fail_msg("%s\ncalls: got\n%s\nwant\n%s", text, got, want_calls);
    json_decref(msg);
}

#define CALL1(params) "<tool_call>\n<function=edit>\n" params "</function>\n</tool_call>"
#define P(name, value) "<parameter=" name ">\n" value "\n</parameter>\n"

static void test_typed_values(void **state) {
    (void)state;
    /* each schema type, as the template lists it and the model writes it */
    expect(CALL1(P("path", "src/a b.c") P("line", "42") P("ratio", "0.25") P("force", "true")
                     P("opts", "{\"a\": [1, 2]}") P("items", "[\"x\", 3]")),
           NULL,
           "edit\t{\"path\": \"src/a b.c\", \"line\": 42, \"ratio\": 0.25, \"force\": true, \"opts\": {\"a\": [1, 2]}, "
           "\"items\": [\"x\", 3]}");
    /* a string stays a string, whatever it looks like; multi-line values keep inner newlines */
    expect(CALL1(P("path", "42") P("kind", "true")), NULL, "edit\t{\"path\": \"42\", \"kind\": \"true\"}");
    expect(CALL1(P("path", "\nline1\n\nline2\n")), NULL, "edit\t{\"path\": \"\\nline1\\n\\nline2\\n\"}");
    /* null in any case, for any type, also untyped; but "none" is text */
    expect(CALL1(P("line", "NULL") P("path", "null") P("any", "Null") P("kind", "none")), NULL,
           "edit\t{\"line\": null, \"path\": null, \"any\": null, \"kind\": \"none\"}");
    /* Python int(): whitespace, sign, underscores between digits; else the text */
    expect(CALL1(P("line", " -7 ") P("count", "1_000")), NULL, "edit\t{\"line\": -7, \"count\": 1000}");
    expect(CALL1(P("line", "1__0") P("count", "0x10")), NULL, "edit\t{\"line\": \"1__0\", \"count\": \"0x10\"}");
    expect(CALL1(P("line", "1.5") P("count", "9223372036854775808")), NULL,
           "edit\t{\"line\": \"1.5\", \"count\": \"9223372036854775808\"}");
    /* Python float(): integral values become integers; inf, nan, hex, junk keep their text */
    expect(CALL1(P("ratio", "2.0") P("size", "-0.0") P("ratio", ".5")), NULL, "edit\t{\"ratio\": 0.5, \"size\": 0}");
    expect(CALL1(P("ratio", "1e3") P("size", "1_0.5")), NULL, "edit\t{\"ratio\": 1000, \"size\": 10.5}");
    expect(CALL1(P("ratio", "inf") P("size", "nan")), NULL, "edit\t{\"ratio\": \"inf\", \"size\": \"nan\"}");
    expect(CALL1(P("ratio", "1e400") P("size", "0x1p3")), NULL, "edit\t{\"ratio\": \"1e400\", \"size\": \"0x1p3\"}");
    expect(CALL1(P("ratio", "1.2.3") P("size", "+.5e+1")), NULL, "edit\t{\"ratio\": \"1.2.3\", \"size\": 5}");
    /* booleans: "true" in any case, anything else false (vLLM degenerates to false) */
    expect(CALL1(P("force", "TRUE") P("flag", "yes")), NULL, "edit\t{\"force\": true, \"flag\": false}");
    /* objects and arrays: JSON, else the text; any other type too */
    expect(CALL1(P("opts", "{bad") P("items", "[1,") P("odd", "[1, 2]") P("maybe", "7")), NULL,
           "edit\t{\"opts\": \"{bad\", \"items\": \"[1,\", \"odd\": [1, 2], \"maybe\": 7}");
    /* untyped and unlisted parameters are text */
    expect(CALL1(P("any", "5") P("nope", "{}")), NULL, "edit\t{\"any\": \"5\", \"nope\": \"{}\"}");
    /* a repeated parameter: first place, last value */
    expect(CALL1(P("line", "1") P("path", "p") P("line", "2")), NULL, "edit\t{\"line\": 2, \"path\": \"p\"}");
    /* a tool given without the "function" wrapper */
    expect("<tool_call>\n<function=bare>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>", NULL,
           "bare\t{\"n\": 3}");
    /* no parameters */
    expect("<tool_call>\n<function=edit>\n</function>\n</tool_call>", NULL, "edit\t{}");
}

static void test_layout(void **state) {
    (void)state;
    /* content before the calls (stripped), two calls, text after dropped */
    expect("Let me look.\n\n" CALL1(P("path", "a")) "\n" CALL1(P("path", "b")) "\n", "Let me look.",
           "edit\t{\"path\": \"a\"}\nedit\t{\"path\": \"b\"}");
    /* reasoning, as for qwen3 (a Coder model does not think, but a prompt may make it) */
    json_t *m = parse("<think>\nhm\n</think>\n\n" CALL1(P("line", "3")),
                      strlen("<think>\nhm\n</think>\n\n" CALL1(P("line", "3"))));
    assert_string_equal(json_string_value(json_object_get(m, "reasoning_content")), "hm");
    assert_int_equal(json_array_size(json_object_get(m, "tool_calls")), 1);
    json_decref(m);
    /* no call at all */
    expect("Just text <function=edit> mentioned.", "Just text <function=edit> mentioned.", "");
    /* the model stopped early: unterminated tags are read to the end */
    expect("<tool_call>\n<function=edit>\n<parameter=path>\na.c\n</parameter>\n</function>", NULL,
           "edit\t{\"path\": \"a.c\"}");
    expect("<tool_call>\n<function=edit>\n<parameter=path>\na.c\n</parameter>\n", NULL, "edit\t{\"path\": \"a.c\"}");
    expect("<tool_call>\n<function=edit>\n<parameter=path>\na.c", NULL, "edit\t{\"path\": \"a.c\"}");
    expect("<tool_call>\n<function=edit>\n<parameter=path>\na.c\n<parameter=line>\n4\n</function>\n</tool_call>", NULL,
           "edit\t{\"path\": \"a.c\", \"line\": 4}");
    expect("<tool_call>\n<function=edit>", NULL, "edit\t{}");
    /* an unknown function: its values are text */
    expect("<tool_call>\n<function=rm_rf>\n<parameter=line>\n1\n</parameter>\n</function>\n</tool_call>", NULL,
           "rm_rf\t{\"line\": \"1\"}");
}

/* Not a call, so the whole text is content, as one malformed JSON block makes it for qwen3. */
static void test_hostile(void **state) {
    (void)state;
    static const char *const not_calls[] = {
        "<tool_call>\n<function=edit",                                        /* name without ">" */
        "<tool_call>\n<function=>\n</function>\n</tool_call>",                /* empty name */
        "<tool_call>\n{\"name\": \"edit\", \"arguments\": {}}\n</tool_call>", /* the JSON layout */
        "<tool_call>\nsay <function=edit>\n</function>\n</tool_call>",        /* text before the function */
        "<tool_call>\n<function=edit>\n</function>\n<function=edit>\n</function>\n</tool_call>", /* two in one block */
        "<tool_call>\n<function=edit>\n<parameter=path\nx\n</function>\n</tool_call>", /* parameter without ">" */
        "<tool_call>\n<function=edit>\n<parameter=>\nx\n</parameter>\n</function>\n</tool_call>", /* empty parameter name */
        "<tool_call>\n<function=ed\nit>\n</function>\n</tool_call>", /* a newline in the name */
        "<tool_call></tool_call>",
        CALL1(P("path", "a")) "\n<tool_call>\n<function=edit\n</tool_call>", /* one bad block spoils all */
    };
    for (size_t i = 0; i < sizeof not_calls / sizeof not_calls[0]; i++) {
        json_t *m = parse(not_calls[i], strlen(not_calls[i]));
        if (json_object_get(m, "tool_calls")) fail_msg("[%zu] parsed as a call: %s", i, not_calls[i]);
        assert_string_equal(json_string_value(json_object_get(m, "content")), not_calls[i]);
        json_decref(m);
    }
    /* a parameter name longer than the key buffer is refused, not cut */
    char big[600];
    int n =
        snprintf(big, sizeof big, "<tool_call>\n<function=edit>\n<parameter=%0300d>\nx\n</parameter>\n</function>", 0);
    json_t *m = parse(big, (size_t)n);
    assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
    /* what the layout cannot quote: a value holding "<parameter=" starts a parameter there */
    expect(CALL1(P("path", "a <parameter=line>\n5")), NULL, "edit\t{\"path\": \"a \", \"line\": 5}");
    /* the JSON format is not read as XML, nor the XML as JSON */
    json_t *q = NULL;
    const char *xml = CALL1(P("path", "a"));
    assert_int_equal(toolcall_parse(xml, strlen(xml), &q), 0);
    assert_null(json_object_get(q, "tool_calls"));
    json_decref(q);
}

/* ---- the round trip ---------------------------------------------------------------------- */

static const char *const words[] = {
    "a",    "src/main.c", "héllo wörld", "line1\nline2", "  spaced  ",         "x < y",      "{\"k\": 1}", "[1]",
    "true", "null?",      "日本",        "tab\there",    "</function> inside", "</tool_call"};

/* A value of the parameter's type that the template writes and the parser reads back as the
 * same value: text never holding "</parameter>" or "<parameter=" (the layout cannot quote
 * them: test_hostile), nor the word null alone; floats not integral (an integral float comes
 * back an integer, as in vLLM). */
static json_t *random_value(rng *g, const char *type) {
    if (!strcmp(type, "integer")) return json_integer((json_int_t)rng_below(g, 2000000) - 1000000);
    if (!strcmp(type, "number")) return json_real(((double)rng_below(g, 100000) - 50000) / 64.0 + 1.0 / 128.0);
    if (!strcmp(type, "boolean")) return json_boolean(rng_below(g, 2));
    if (!strcmp(type, "object"))
        return json_pack("{s:i, s:[s, f], s:{}}", "n", (int)rng_below(g, 50), "l", words[rng_below(g, 14)], 0.5, "e");
    if (!strcmp(type, "array")) return json_pack("[s, i, n, b]", words[rng_below(g, 14)], (int)rng_below(g, 9), 0);
    char buf[256] = "";
    for (uint64_t k = 0, n = 1 + rng_below(g, 3); k < n; k++) {
        const char *w = words[rng_below(g, 14)];
        strcat(buf, k ? " " : "");
        strcat(buf, w);
    }
    if (!strcmp(buf, "null")) strcpy(buf, "nul");
    return json_string(buf);
}

static void test_round_trip(void **state) {
    (void)state;
    static const char *const names[] = {"path", "line", "ratio", "force", "opts", "items"};
    static const char *const types[] = {"string", "integer", "number", "boolean", "object", "array"};
    rng g;
    rng_seed(&g, 47);
    for (int it = 0; it < 2000; it++) {
        json_t *args = json_object();
        for (uint64_t k = 0, n = rng_below(&g, 7); k < n; k++) {
            size_t t = rng_below(&g, 6);
            json_object_set_new(args, names[t], random_value(&g, types[t]));
        }
        json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s, s:[{s:{s:s, s:O}}]}]", "role", "user", "content", "q", "role",
                                 "assistant", "content", rng_below(&g, 2) ? "Sure." : "", "tool_calls", "function",
                                 "name", "edit", "arguments", args);
        char *text = NULL;
        if (chat_render(msgs, tools, (chat_options){.template = CHAT_TEMPLATE_QWEN3_CODER}, &text) != 0)
            fail_msg("%s", cd_errmsg());
        /* the model's reply: what follows the assistant header, up to <|im_end|> */
        char *reply = strstr(text, "<|im_start|>assistant") + strlen("<|im_start|>assistant");
        *strstr(reply, "<|im_end|>") = 0;
        json_t *msg = parse(reply, strlen(reply));
        const json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
        json_t *back = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
        if (!back || !json_equal(back, args))
            fail_msg("reply:\n%s\nwant %s\ngot  %s", reply, json_dumps(args, JSON_COMPACT),
                     json_string_value(json_object_get(fn, "arguments")));
        /* and sent back, the parsed message renders the same prompt */
        json_t *again = json_pack("[{s:s, s:s}, O]", "role", "user", "content", "q", msg);
        char *text2 = NULL;
        assert_int_equal(chat_render(again, tools, (chat_options){.template = CHAT_TEMPLATE_QWEN3_CODER}, &text2), 0);
        *strstr(text, "<|im_end|>\n<|im_start|>assistant") = 0; /* the header and user turn compared below */
        assert_true(strncmp(text2, text, strlen(text)) == 0);
        free(text2);
        json_decref(again);
        json_decref(back);
        json_decref(msg);
        free(text);
        json_decref(msgs);
        json_decref(args);
    }
}

static bool valid_utf8(const char *p, size_t n) {
    json_t *s = json_stringn(p, n);
    json_decref(s);
    return s != NULL;
}

/* Well-formed replies damaged at random (a tag or text inserted, a range cut out, the end cut
 * off): never a crash (ASan), always a message the Coder template renders. */
static size_t damaged_reply(rng *g, char *buf, size_t cap) {
    static const char *const bits[] = {
        "<tool_call>", "</tool_call>", "<function=", "edit", ">", "</function>", "<parameter=", "line",
        "force",       "</parameter>", "\n",         " ",    "1", "true",        "{\"a\":",     "}",
        "null",        "<think>",      "</think>",   "é",    "<", "\xe6\x97\xa5"};
    static const char *const params[] = {P("line", "12"),  P("force", "false"), P("opts", "{\"a\": [1]}"),
                                         P("path", "x y"), P("ratio", "2.5"),   P("any", "")};
    size_t n = 0;
    buf[0] = 0;
    if (rng_below(g, 2)) n += (size_t)snprintf(buf + n, cap - n, "Text first.\n\n");
    for (uint32_t c = 0, calls = 1 + rng_below(g, 3); c < calls; c++) {
        n += (size_t)snprintf(buf + n, cap - n, "%s<tool_call>\n<function=%s>\n", c ? "\n" : "",
                              rng_below(g, 2) ? "edit" : "bare");
        for (uint32_t k = 0, np = rng_below(g, 4); k < np; k++)
            n += (size_t)snprintf(buf + n, cap - n, "%s", params[rng_below(g, 6)]);
        n += (size_t)snprintf(buf + n, cap - n, "</function>\n</tool_call>");
    }
    for (uint32_t d = 0, nd = rng_below(g, 4); d < nd && n > 0; d++) {
        size_t at = rng_below(g, (uint32_t)n + 1);
        switch (rng_below(g, 3)) {
        case 0: { /* insert */
            const char *b = bits[rng_below(g, 22)];
            size_t l = strlen(b);
            if (n + l + 1 > cap) break;
            memmove(buf + at + l, buf + at, n - at + 1);
            memcpy(buf + at, b, l);
            n += l;
            break;
        }
        case 1: { /* cut a range */
            size_t l = rng_below(g, (uint32_t)(n - at) + 1);
            memmove(buf + at, buf + at + l, n - at - l + 1);
            n -= l;
            break;
        }
        default: n = at, buf[n] = 0; /* the end cut off */
        }
    }
    /* a cut may split the UTF-8 of é or 日: drop a broken tail, as the server holds it back */
    while (n && (unsigned char)buf[n - 1] >= 0x80 && !valid_utf8(buf, n)) buf[--n] = 0;
    return n;
}

static void test_damaged(void **state) {
    (void)state;
    rng g;
    rng_seed(&g, 4747);
    int calls = 0, content = 0, skipped = 0;
    for (int it = 0; it < 30000; it++) {
        char buf[2048];
        size_t n = damaged_reply(&g, buf, sizeof buf);
        if (!valid_utf8(buf, n)) {
            skipped++;
            continue;
        } /* a cut inside a character (invalid UTF-8 is refused) */
        json_t *msg = parse(buf, n);
        if (json_object_get(msg, "tool_calls")) calls++;
        else content++;
        json_t *conv = json_pack("[{s:s, s:s}, O]", "role", "user", "content", "q", msg);
        char *out = NULL;
        if (chat_render(conv, tools, (chat_options){.template = CHAT_TEMPLATE_QWEN3_CODER}, &out) != 0)
            fail_msg("%s: %s", buf, cd_errmsg());
        free(out);
        json_decref(conv);
        json_decref(msg);
    }
    assert_true(calls > 5000 && content > 3000 && skipped < 3000);
}

static int setup(void **state) {
    (void)state;
    tools = json_loads(tools_json, 0, NULL);
    return tools ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    json_decref(tools);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_typed_values), cmocka_unit_test(test_layout),  cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_damaged),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
