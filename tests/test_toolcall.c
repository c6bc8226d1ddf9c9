/* Parsing a generated Qwen3 assistant turn into reasoning, content and tool calls: a table
 * of outputs with the message each must give; the round trip (what the model wrote, parsed
 * and rendered back through the chat template, is the same bytes); and random fragment soup
 * that must never crash and always yields a message chat_render accepts. */
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

static void expect_parse(const char *text, const char *want_json) {
    json_t *got = NULL;
    if (toolcall_parse(text, strlen(text), &got) != 0) fail_msg("%s: %s", text, cd_errmsg());
    json_error_t err;
    json_t *want = json_loads(want_json, 0, &err);
    if (!want) fail_msg("bad want json %s: %s", want_json, err.text);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT);
        fail_msg("text: %s\n got: %s\nwant: %s", text, g, want_json);
    }
    json_decref(got);
    json_decref(want);
}

#define CALL(name, args) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"arguments\":" args "}}"

static void test_table(void **state) {
    (void)state;
    expect_parse("", "{\"role\":\"assistant\",\"content\":\"\"}");
    expect_parse("Hello there.\n", "{\"role\":\"assistant\",\"content\":\"Hello there.\\n\"}");
    expect_parse("<think>\nLet me think.\n</think>\n\nThe answer is 4.",
                 "{\"role\":\"assistant\",\"content\":\"The answer is 4.\",\"reasoning_content\":\"Let me think.\"}");
    /* the prompt already opened <think> (some templates do): no opening tag in the output */
    expect_parse("Reasoning here.\n</think>\n\nAnswer.",
                 "{\"role\":\"assistant\",\"content\":\"Answer.\",\"reasoning_content\":\"Reasoning here.\"}");
    /* an empty think block (enable_thinking false is usually in the prompt, but may be echoed) */
    expect_parse("<think>\n\n</think>\n\nHi", "{\"role\":\"assistant\",\"content\":\"Hi\",\"reasoning_content\":\"\"}");
    /* stopped mid-thought */
    expect_parse("<think>\nStill thinking about <tool_call>{\"name\":\"x\"}</tool_call>",
                 "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":"
                 "\"Still thinking about <tool_call>{\\\"name\\\":\\\"x\\\"}</tool_call>\"}");
    /* the template's rules: reasoning before the first </think>, content after the last */
    expect_parse("<think>a<think>\nb\n</think>c</think>\n\nd",
                 "{\"role\":\"assistant\",\"content\":\"d\",\"reasoning_content\":\"b\"}");

    /* one call; arguments keep the model's exact bytes (spacing, 1.0, key order) */
    expect_parse(
        "<think>\nNeed weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\":  \"Paris\", \"days\": 1.0, \"a\": [1,2]}}\n</tool_call>",
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Need weather.\",\"tool_calls\":[" CALL(
            "get_weather", "\"{\\\"city\\\":  \\\"Paris\\\", \\\"days\\\": 1.0, \\\"a\\\": [1,2]}\"") "]}");
    /* content before two calls; text between and after blocks is dropped */
    expect_parse("Checking both.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"}\\\"]\"}}\n</tool_call>"
                 " stray \n<tool_call>{\"arguments\": [], \"name\": \"g\"}</tool_call>\ntrailing",
                 "{\"role\":\"assistant\",\"content\":\"Checking both.\",\"tool_calls\":[" CALL(
                     "f", "\"{\\\"x\\\": \\\"}\\\\\\\"]\\\"}\"") "," CALL("g", "\"[]\"") "]}");
    /* string arguments are already the text; absent arguments are {} */
    expect_parse("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>"
                 "<tool_call>{\"name\": \"g\"}</tool_call>",
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" CALL("f", "\"{\\\"a\\\": 1}\"") "," CALL(
                     "g", "\"{}\"") "]}");
    /* an escaped key is found by the parser but not by the span scan: re-serialized */
    expect_parse("<tool_call>{\"name\": \"f\", \"\\u0061rguments\": {\"b\":2,\"a\":1.50}}</tool_call>",
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" CALL(
                     "f", "\"{\\\"b\\\": 2, \\\"a\\\": 1.5}\"") "]}");
    /* unterminated last block that still parses (stopped right before </tool_call>) */
    expect_parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n",
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" CALL("f", "\"{}\"") "]}");

    /* not tool calls: the whole text after the reasoning is content */
    const char *not_calls[] = {
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}\n</tool_call>", /* truncated JSON */
        "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
        "<tool_call>[\"f\"]</tool_call>",
        "<tool_call>{\"name\": \"f\", \"name\": \"g\"}</tool_call>", /* duplicate key */
        "<tool_call>{\"name\": \"f\"}</tool_call><tool_call>oops</tool_call>",
        "<tool_call></tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\\u0000\"}} extra</tool_call>",
    };
    for (size_t i = 0; i < sizeof not_calls / sizeof *not_calls; i++) {
        json_t *m = NULL;
        assert_int_equal(toolcall_parse(not_calls[i], strlen(not_calls[i]), &m), 0);
        assert_null(json_object_get(m, "tool_calls"));
        assert_string_equal(json_string_value(json_object_get(m, "content")), not_calls[i]);
        json_decref(m);
    }
    /* with reasoning in front, the content is what follows it */
    expect_parse("<think>\nr\n</think>\n\n<tool_call>bad</tool_call>",
                 "{\"role\":\"assistant\",\"content\":\"<tool_call>bad</tool_call>\",\"reasoning_content\":\"r\"}");

    json_t *m = (json_t *)1;
    assert_int_equal(toolcall_parse("\xff\xfe", 2, &m), -1);
    assert_null(m);
    assert_non_null(strstr(cd_errmsg(), "UTF-8"));
}

/* What the model writes in the template's layout, parsed and rendered back as the last
 * assistant message, reproduces prompt + output + <|im_end|>\n exactly. */
static void test_round_trip(void **state) {
    (void)state;
    static const struct {
        bool thinking;
        const char *out;
    } outs[] = {
        {true, "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"},
        {true,
         "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
         "{\"city\": \"Zürich\", \"days\": 3}}\n</tool_call>"},
        {true,
         "<think>\nTwo calls.\n</think>\n\nLet me look both up.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
         "{\"q\": \"x\\ny\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>"},
        {true, "<think>\n\n</think>\n\n   indented first line\n\ntrailing spaces  "},
        {false, "Just the answer, no reasoning."},
        {false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1.0,\"m\":[ 1 ]}}\n</tool_call>"},
    };
    json_t *msgs =
        json_loads("[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
        char *prompt = NULL, *full = NULL;
        chat_options opt = {.add_generation_prompt = true, .enable_thinking = outs[i].thinking};
        assert_int_equal(chat_render(msgs, tools, opt, &prompt), 0);
        json_t *m = NULL;
        assert_int_equal(toolcall_parse(outs[i].out, strlen(outs[i].out), &m), 0);
        json_t *conv = json_copy(msgs);
        json_array_append_new(conv, m);
        opt.add_generation_prompt = false;
        if (chat_render(conv, tools, opt, &full) != 0) fail_msg("%s", cd_errmsg());
        size_t need = strlen(prompt) + strlen(outs[i].out) + 16;
        char *want = malloc(need);
        snprintf(want, need, "%s%s<|im_end|>\n", prompt, outs[i].out);
        assert_string_equal(full, want);
        free(want);
        free(prompt);
        free(full);
        json_decref(conv);
    }
    json_decref(msgs);
    json_decref(tools);
}

/* Random soup of the tags, JSON pieces and text: parsing never crashes, and the message it
 * gives renders (run under ASan). */
/* toolcall_spans: the inner bytes of each block toolcall_parse takes, in order; none when it
 * takes none (a block that is not a call makes everything content). */
static void test_spans(void **state) {
    (void)state;
    const char *t = "<think>\nr\n</think>\n\nhi\n<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n"
                    "<tool_call>{\"name\": \"b\"}</tool_call>";
    size_t off[4], n[4];
    assert_int_equal(toolcall_spans(t, strlen(t), off, n, 4), 2);
    assert_int_equal(n[0], strlen("\n{\"name\":\"a\",\"arguments\":{}}\n"));
    assert_memory_equal(t + off[0], "\n{\"name\":\"a\",\"arguments\":{}}\n", n[0]);
    assert_memory_equal(t + off[1], "{\"name\": \"b\"}", n[1]);
    assert_int_equal(toolcall_spans(t, strlen(t), off, n, 1), 2); /* counted, one written */
    const char *bad = "<tool_call>{\"name\":\"a\"}</tool_call><tool_call>not json</tool_call>";
    assert_int_equal(toolcall_spans(bad, strlen(bad), off, n, 4), 0);
    const char *open = "<tool_call>\n{\"name\":\"a\"}"; /* unterminated: to the end */
    assert_int_equal(toolcall_spans(open, strlen(open), off, n, 4), 1);
    assert_int_equal(off[0] + n[0], strlen(open));
}

static void test_fragment_soup(void **state) {
    (void)state;
    static const char *frag[] = {
        "<think>",    "</think>", "<tool_call>", "</tool_call>", "\n", " ",    "{",        "}",
        "[",          "]",        "\"",          "\\",           ":",  ",",    "\"name\"", "\"arguments\"",
        "\"f\"",      "1",        "1.0",         "null",         "é",  "text", "<tool_",   "</think",
        "\"\\u0000\""};
    rng r;
    rng_seed(&r, 5);
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"q\"}]", 0, NULL);
    char buf[512];
    int with_calls = 0;
    for (int iter = 0; iter < 30000; iter++) {
        size_t n = 0, cuts[25] = {0}, n_cuts = 1; /* fragment boundaries, to keep UTF-8 whole */
        int k = (int)(rng_u64(&r) % 24);
        for (int j = 0; j < k; j++) {
            const char *f = frag[rng_u64(&r) % (sizeof frag / sizeof *frag)];
            size_t l = strlen(f);
            if (n + l >= sizeof buf) break;
            memcpy(buf + n, f, l);
            n += l;
            cuts[n_cuts++] = n;
        }
        if (iter % 3 == 0) { /* often a well-formed call somewhere */
            const char *call = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"]}\"}]}}</tool_call>";
            size_t l = strlen(call);
            size_t at = cuts[rng_u64(&r) % n_cuts];
            if (n + l < sizeof buf) {
                memmove(buf + at + l, buf + at, n - at);
                memcpy(buf + at, call, l);
                n += l;
            }
        }
        json_t *m = NULL;
        assert_int_equal(toolcall_parse(buf, n, &m), 0);
        assert_true(json_is_object(m));
        with_calls += json_object_get(m, "tool_calls") != NULL;
        json_t *conv = json_copy(msgs);
        json_array_append_new(conv, m);
        char *out = NULL;
        if (chat_render(conv, NULL, (chat_options){0}, &out) != 0) fail_msg("%.*s: %s", (int)n, buf, cd_errmsg());
        free(out);
        json_decref(conv);
    }
    assert_true(with_calls > 1000);
    json_decref(msgs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_fragment_soup),
        cmocka_unit_test(test_spans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
