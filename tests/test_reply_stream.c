/* Streaming a reply as deltas: whatever the pieces the text arrives in (every prefix, two
 * pieces cut at every byte, random chunkings), the deltas add up to toolcall_parse of the
 * final text, for a table of replies and for random replies in the template's layout (L);
 * outside (L) the stream either still matches or says it diverged and sends the rest
 * verbatim. The delta shapes, the ids, and the errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/text/reply_stream.h"
#include "runtime/text/slice.h"
#include "runtime/text/toolcall.h"

/* ---- running a stream ------------------------------------------------------------------- */

/* The call format every stream below is checked in (qwen3's JSON calls unless a test sets it). */
static toolcall_format fmt;

typedef struct {
    json_t *deltas;     /* all deltas, in order */
    size_t diverged_at; /* index of the first delta sent by the feed that diverged */
    bool diverged;
} run;

/* Feeds text[0..cuts[i]) for each cut (increasing, each < n), then the whole text as final. */
static run stream(const char *text, size_t n, const size_t *cuts, size_t n_cuts) {
    run r = {json_array(), 0, false};
    reply_stream s;
    reply_stream_init_as(&s, "call_", fmt);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t before = json_array_size(r.deltas);
        bool final = i == n_cuts;
        if (reply_stream_feed(&s, text, final ? n : cuts[i], final, r.deltas) != 0)
            fail_msg("%.*s: %s", (int)n, text, cd_errmsg());
        if (s.diverged && !r.diverged) r.diverged_at = before;
        r.diverged = s.diverged;
    }
    reply_stream_free(&s);
    return r;
}

/* ---- what the deltas add up to ---------------------------------------------------------- */

typedef struct {
    char *reasoning, *content; /* concatenated pieces (malloc'd) */
    json_t *calls;             /* [{"type", "function"}] as toolcall_parse gives them */
    bool in_order;             /* reasoning, then content, then tool calls */
} sum;

static void append(char **buf, const char *p) {
    size_t a = *buf ? strlen(*buf) : 0, b = strlen(p);
    *buf = realloc(*buf, a + b + 1);
    memcpy(*buf + a, p, b + 1);
}

/* One delta: exactly one key; a non-empty string, or one whole tool call with the next index
 * and its id. */
static void add_delta(sum *m, const json_t *d, int *phase) {
    assert_true(json_is_object(d));
    assert_int_equal(json_object_size(d), 1);
    const char *key = json_object_iter_key(json_object_iter((json_t *)d));
    const json_t *v = json_object_iter_value(json_object_iter((json_t *)d));
    int p = strcmp(key, "reasoning_content") == 0 ? 0 : strcmp(key, "content") == 0 ? 1 : 2;
    if (p < *phase) m->in_order = false;
    *phase = p;
    if (p < 2) {
        assert_true(json_is_string(v));
        assert_true(json_string_length(v) > 0);
        assert_int_equal(strlen(json_string_value(v)), json_string_length(v)); /* no NULs in the tests */
        append(p == 0 ? &m->reasoning : &m->content, json_string_value(v));
        return;
    }
    assert_string_equal(key, "tool_calls");
    assert_int_equal(json_array_size(v), 1);
    const json_t *c = json_array_get(v, 0);
    size_t i = json_array_size(m->calls);
    char id[32];
    snprintf(id, sizeof id, "call_%zu", i);
    assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
    assert_string_equal(json_string_value(json_object_get(c, "id")), id);
    const json_t *f = json_object_get(c, "function");
    assert_true(json_is_string(json_object_get(f, "name")) && json_is_string(json_object_get(f, "arguments")));
    assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
    json_array_append_new(m->calls, json_pack("{s:s, s:O}", "type", "function", "function", f));
}

static sum add_up(const json_t *deltas, size_t from, size_t to) {
    sum m = {NULL, NULL, json_array(), true};
    int phase = 0;
    for (size_t i = from; i < to; i++) add_delta(&m, json_array_get(deltas, i), &phase);
    if (!m.reasoning) append(&m.reasoning, "");
    if (!m.content) append(&m.content, "");
    return m;
}

static void sum_free(sum *m) {
    free(m->reasoning);
    free(m->content);
    json_decref(m->calls);
}

/* ---- the checks ------------------------------------------------------------------------- */

/* The layout (L) of reply_stream.h, in which the stream must be exact; (L') when the prompt
 * opened the think block (fmt.in_think). */
static bool in_layout(slice t) {
    ptrdiff_t close = find_first(t, LIT("</think>"));
    if (fmt.in_think)
        return close < 0 ||
            (find_last(t, LIT("</think>")) == close && find_first((slice){t.p, (size_t)close}, LIT("<think>")) < 0);
    if (close < 0) return true;
    slice s = strip_ws(t);
    slice before = {t.p, (size_t)close};
    return find_last(t, LIT("</think>")) == close && starts_with(s, LIT("<think>")) &&
        find_last(before, LIT("<think>")) == s.p - t.p;
}

static const char *str_or_empty(const json_t *j) { return json_is_string(j) ? json_string_value(j) : ""; }

static void expect_exact(const char *text, size_t n, const run *r) {
    json_t *msg = NULL;
    assert_int_equal(toolcall_parse_as(text, n, fmt, &msg), 0);
    sum m = add_up(r->deltas, 0, json_array_size(r->deltas));
    json_t *calls = json_object_get(msg, "tool_calls");
    calls = calls ? json_incref(calls) : json_array();
    if (strcmp(m.reasoning, str_or_empty(json_object_get(msg, "reasoning_content"))) ||
        strcmp(m.content, str_or_empty(json_object_get(msg, "content"))) || !json_equal(m.calls, calls) ||
        !m.in_order) {
        char *want = json_dumps(msg, JSON_COMPACT), *got = json_dumps(r->deltas, JSON_COMPACT);
        fail_msg("text: %.*s\nwant: %s\ndeltas: %s", (int)n, text, want, got);
    }
    sum_free(&m);
    json_decref(calls);
    json_decref(msg);
}

/* A diverged stream: no tool calls, and the deltas from the diverging feed on are the text
 * after the end of a piece sent before it, verbatim. */
static void expect_raw(const char *text, size_t n, const run *r) {
    sum raw = add_up(r->deltas, r->diverged_at, json_array_size(r->deltas));
    sum all = add_up(r->deltas, 0, json_array_size(r->deltas));
    assert_int_equal(json_array_size(all.calls), 0);
    assert_string_equal(raw.reasoning, "");
    size_t x = strlen(raw.content), from = n - x;
    assert_true(x <= n && memcmp(text + from, raw.content, x) == 0);
    bool joins = false; /* text[..from) ends with a piece sent before */
    for (size_t i = 0; i < r->diverged_at && !joins; i++) {
        const json_t *v = json_object_iter_value(json_object_iter(json_array_get(r->deltas, i)));
        size_t l = json_string_length(v);
        joins = l <= from && memcmp(text + from - l, json_string_value(v), l) == 0;
    }
    if (!joins) fail_msg("text: %.*s: the verbatim rest does not follow a piece sent", (int)n, text);
    sum_free(&raw);
    sum_free(&all);
}

static void check(const char *text, size_t n, const size_t *cuts, size_t n_cuts) {
    run r = stream(text, n, cuts, n_cuts);
    if (r.diverged && in_layout((slice){text, n}))
        fail_msg("text in the layout diverged: %.*s (%zu cuts)", (int)n, text, n_cuts);
    if (r.diverged) expect_raw(text, n, &r);
    else expect_exact(text, n, &r);
    json_decref(r.deltas);
}

/* Every prefix; two pieces cut at every byte; one piece; some random chunkings. Every byte,
 * not only UTF-8 boundaries: a split sequence is held back until it is whole. */
static void check_all_splits(const char *text, size_t n, rng *g, int n_random) {
    size_t *cuts = calloc(n + 1, sizeof *cuts);
    for (size_t k = 1; k < n; k++) cuts[k - 1] = k;
    check(text, n, cuts, n ? n - 1 : 0);
    for (size_t k = 0; k < n; k++) check(text, n, &k, 1);
    check(text, n, NULL, 0);
    for (int it = 0; it < n_random; it++) {
        size_t m = 0;
        for (size_t k = 0; k < n; k++)
            if (rng_below(g, 4) == 0) cuts[m++] = k;
        check(text, n, cuts, m);
    }
    free(cuts);
}

/* ---- the tests -------------------------------------------------------------------------- */

static const char *const table[] = {
    "",
    "Hello there.",
    "Hello there.\n\n",
    "\n\n",
    "  indented, kept without tool calls",
    "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?",
    "<think>\n\n</think>\n\n   indented first line\n\ntrailing spaces  ",
    "<think>\nStill thinking, stopped here\n\n",
    "<think>",
    "  <think>\nx  \t",
    "<think>\nmaybe <tool_call>{\"name\": \"x\"}</tool_call>\n</think>\n\nok",
    "<think>\nR\n</think>\n\nI said <think> again",
    "I use <think> tags and a < b </br> <tool",
    "Line one.\r\n\tLine two.\r\n",
    /* tool calls */
    "<think>\nNeed weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Zürich\", \"days\": 3}}\n</tool_call>",
    "Checking both.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"}\\\"]\"}}\n</tool_call>"
    " stray \n<tool_call>{\"arguments\": [], \"name\": \"g\"}</tool_call>\ntrailing",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1.0,\"m\":[ 1 ]}}\n</tool_call>",
    "  \n<tool_call>{\"name\": \"f\"}</tool_call>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", /* unterminated, still a call */
    /* not tool calls: all content */
    "Here: <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}\n</tool_call>",
    "<tool_call>{\"name\": \"f\"}</tool_call><tool_call>oops</tool_call>",
    "<think>\nr\n</think>\n\nSo <tool_call>{\"name\": \"f\"}</tool_call> <tool_call>{\"name\": 5}",
    /* multi-byte UTF-8 everywhere */
    "<think>\nGrüße, 日本語 🎉\n</think>\n\nÉté ✓ 🎉"
    "<tool_call>{\"name\": \"é\", \"arguments\": {\"k\": \"日本\"}}</tool_call>",
    /* outside the layout: may diverge, must stay consistent */
    "Reasoning here.\n</think>\n\nAnswer.",
    "<think>\nr\n</think>\n\nabc</think>def",
    "<think>a<think>\nb\n</think>c</think>\n\nd",
    "<think>\nfirst<think>second</think>\n\nanswer <tool_call>{\"name\": \"f\"}</tool_call>",
};

/* Qwen3-Coder replies: the same invariant against toolcall_parse_as in the XML format, the
 * values typed by the tools' schemas. */
static const char *const coder_table[] = {
    "Let me look.\n\n<tool_call>\n<function=edit>\n<parameter=path>\nsrc/a.c\n</parameter>\n"
    "<parameter=line>\n42\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=edit>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=unknown>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=edit>\n<parameter=line>\n7",                  /* cut off: still a call */
    "Text <tool_call>\n<function=edit\n</tool_call>",                     /* not a call: all content */
    "<tool_call>\n{\"name\": \"edit\", \"arguments\": {}}\n</tool_call>", /* the JSON layout is content here */
    "Grüße 日本 <tool_call>\n<function=edit>\n<parameter=path>\n日本語 🎉\n</parameter>\n</function>\n</tool_call>",
    "Just an answer, mentioning <function=edit> in passing.",
};

static void test_coder_all_splits(void **state) {
    (void)state;
    json_t *tools =
        json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"edit\",\"parameters\":{\"type\":"
                   "\"object\",\"properties\":{\"line\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}}]",
                   0, NULL);
    assert_non_null(tools);
    fmt = (toolcall_format){.template = CHAT_TEMPLATE_QWEN3_CODER, .tools = tools};
    rng g;
    rng_seed(&g, 12);
    for (size_t i = 0; i < sizeof coder_table / sizeof *coder_table; i++) {
        check_all_splits(coder_table[i], strlen(coder_table[i]), &g, 50);
        run r = stream(coder_table[i], strlen(coder_table[i]), NULL, 0);
        bool has_calls = false; /* the first three and the sixth are calls */
        for (size_t k = 0; k < json_array_size(r.deltas); k++)
            has_calls |= json_object_get(json_array_get(r.deltas, k), "tool_calls") != NULL;
        assert_int_equal(has_calls, i < 3 || i == 5);
        json_decref(r.deltas);
    }
    run r = stream(coder_table[0], strlen(coder_table[0]), NULL, 0);
    const json_t *last = json_array_get(r.deltas, json_array_size(r.deltas) - 1);
    const json_t *fn = json_object_get(json_array_get(json_object_get(last, "tool_calls"), 0), "function");
    assert_string_equal(json_string_value(json_object_get(fn, "arguments")), "{\"path\": \"src/a.c\", \"line\": 42}");
    json_decref(r.deltas);
    fmt = (toolcall_format){0};
    json_decref(tools);
}

static void test_table_all_splits(void **state) {
    (void)state;
    rng g;
    rng_seed(&g, 11);
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) check_all_splits(table[i], strlen(table[i]), &g, 50);
}

static void expect_first_piece(const char *text, const char *want_json) {
    json_t *d = json_array(), *want = json_loads(want_json, 0, NULL);
    reply_stream s;
    reply_stream_init(&s, "call_");
    assert_int_equal(reply_stream_feed(&s, text, strlen(text), false, d), 0);
    if (!json_equal(d, want)) fail_msg("%s: got %s", text, json_dumps(d, JSON_COMPACT));
    reply_stream_free(&s);
    json_decref(want);
    json_decref(d);
}

/* Markers split across two feeds, spelled out. */
static void test_split_markers(void **state) {
    (void)state;
    static const struct {
        const char *text;
        size_t cut;
    } cases[] = {
        {"Hi <tool_call>{\"name\": \"f\"}</tool_call>", 9}, /* "Hi <tool_" | "call>..." */
        {"<think>\nr\n</think>\n\nC", 15},                  /* "...</thi" | "nk>..." */
        {"<thi", 2},
        {"<think>\nr\n</thinking is fun", 15}, /* not the marker after all */
        {"a <tool_calling> b", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check(cases[i].text, strlen(cases[i].text), &cases[i].cut, 1);

    /* what the first piece may send: nothing that the marker might take */
    expect_first_piece("Hi <tool_", "[{\"content\":\"Hi\"}]");
    expect_first_piece("<think>\nr1 r2\n</thi", "[{\"reasoning_content\":\"r1 r2\"}]");
    expect_first_piece("  <thi", "[]");
    expect_first_piece("Done.\n\n", "[{\"content\":\"Done.\"}]");
}

/* The exact deltas of one reply fed token by token: reasoning and content live, the calls
 * whole at the end with their ids. */
static void test_delta_shapes(void **state) {
    (void)state;
    const char *tok[] = {"<think>",
                         "\n",
                         "Need",
                         " it",
                         ".\n",
                         "</think>",
                         "\n\n",
                         "Sure",
                         ".",
                         "\n",
                         "<tool_call>",
                         "\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
                         "\n",
                         "</tool_call>",
                         "\n",
                         "<tool_call>",
                         "{\"name\": \"g\"}",
                         "</tool_call>"};
    char text[256] = "";
    json_t *d = json_array();
    reply_stream s;
    reply_stream_init(&s, "call_9_");
    for (size_t i = 0; i < sizeof tok / sizeof *tok; i++) {
        strcat(text, tok[i]);
        assert_int_equal(reply_stream_feed(&s, text, strlen(text), false, d), 0);
    }
    assert_int_equal(reply_stream_feed(&s, text, strlen(text), true, d), 0);
    json_t *want =
        json_loads("[{\"reasoning_content\":\"Need\"},{\"reasoning_content\":\" it\"},{\"reasoning_content\":\".\"},"
                   "{\"content\":\"Sure\"},{\"content\":\".\"},"
                   "{\"tool_calls\":[{\"index\":0,\"id\":\"call_9_0\",\"type\":\"function\","
                   "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},"
                   "{\"tool_calls\":[{\"index\":1,\"id\":\"call_9_1\",\"type\":\"function\","
                   "\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}]",
                   0, NULL);
    if (!json_equal(d, want)) fail_msg("got %s", json_dumps(d, JSON_COMPACT));
    assert_false(s.diverged);
    reply_stream_free(&s);
    json_decref(want);
    json_decref(d);
}

/* Outside the layout, fed byte by byte: what the client sees. */
static void test_divergence(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        /* content sent before a "</think>" turned it into reasoning: all of it is content */
        {"Reasoning here.\n</think>\n\nAnswer.", "[\"\",\"Reasoning here.\\n</think>\\n\\nAnswer.\"]"},
        /* a second "</think>" after content was sent: the rest follows verbatim */
        {"<think>\nr\n</think>\n\nabc</think>def", "[\"r\",\"abc</think>def\"]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = strlen(cases[i].text), cuts[64];
        for (size_t k = 1; k < n; k++) cuts[k - 1] = k;
        run r = stream(cases[i].text, n, cuts, n - 1);
        assert_true(r.diverged);
        sum m = add_up(r.deltas, 0, json_array_size(r.deltas));
        json_t *got = json_pack("[s,s]", m.reasoning, m.content), *want = json_loads(cases[i].want, 0, NULL);
        if (!json_equal(got, want)) fail_msg("%s: got %s", cases[i].text, json_dumps(got, JSON_COMPACT));
        json_decref(got);
        json_decref(want);
        sum_free(&m);
        json_decref(r.deltas);
        /* all at once, the markers are seen before anything is sent: exact */
        run one = stream(cases[i].text, n, NULL, 0);
        assert_false(one.diverged);
        expect_exact(cases[i].text, n, &one);
        json_decref(one.deltas);
    }
}

/* Random replies from fragments: in the layout (a think block, then content without think
 * markers, or content alone) they must stream exactly; any soup must stream consistently. */
static size_t soup(rng *g, char *buf, size_t cap, size_t n, bool with_think_markers) {
    static const char *frag[] = {"<tool_call>",
                                 "</tool_call>",
                                 "\n",
                                 " ",
                                 "\t",
                                 "{",
                                 "}",
                                 "\"",
                                 ":",
                                 ",",
                                 "\"name\"",
                                 "\"arguments\"",
                                 "\"f\"",
                                 "1",
                                 "é",
                                 "日",
                                 "text",
                                 "<tool_",
                                 "</think",
                                 "<thin",
                                 "<",
                                 "</",
                                 "{\"name\": \"f\"}",
                                 "<think>",
                                 "</think>"};
    size_t n_frag = sizeof frag / sizeof *frag - (with_think_markers ? 0 : 2);
    for (int k = (int)rng_below(g, 12); k > 0; k--) {
        const char *f = frag[rng_below(g, (uint32_t)n_frag)];
        if (rng_below(g, 8) == 0) f = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, \"]}\"]}}</tool_call>";
        size_t l = strlen(f);
        if (n + l >= cap) break;
        memcpy(buf + n, f, l);
        n += l;
    }
    return n;
}

static void test_random_replies(void **state) {
    (void)state;
    rng g;
    rng_seed(&g, 7);
    char buf[600];
    int exact_calls = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = 0;
        bool think = rng_below(&g, 2), anything = it % 4 == 3;
        if (think) {
            memcpy(buf, "<think>\n", 8);
            n = soup(&g, buf, 280, 8, anything);
            memcpy(buf + n, "\n</think>\n\n", 11);
            n += 11;
        }
        n = soup(&g, buf, sizeof buf, n, anything);
        check_all_splits(buf, n, &g, 2);
        json_t *m = NULL;
        assert_int_equal(toolcall_parse(buf, n, &m), 0);
        exact_calls += json_object_get(m, "tool_calls") != NULL;
        json_decref(m);
    }
    assert_true(exact_calls > 300); /* the random replies do exercise tool calls */
}

/* Replies to a prompt that opened the think block (a Thinking model's generation prompt ends
 * in "<think>\n"): reasoning from the first byte until "</think>", and all reasoning when it
 * never comes; exact in (L') for every split, and the same random soups as above. */
static const char *const in_think_table[] = {
    "",
    "The user greets me.\n</think>\n\nHello! How can I help?",
    "\n\nStill thinking, stopped here\n\n",
    "R\n</thi",
    "R\n</think>",
    "R\n</think>\n\n",
    "  spaced reasoning \t\n</think>\n\n  indented content",
    "Need weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Zürich\"}}\n</tool_call>",
    "maybe <tool_call>{\"name\": \"x\"}</tool_call> still thinking",
    "Grüße, 日本語 🎉\n</think>\n\nÉté ✓ 🎉",
    /* outside (L'): may diverge, must stay consistent */
    "r\n</think>\n\nabc</think>def",
    "<think>\nagain\n</think>\n\nC",
};

static void expect_parse_in_think(const char *text, const char *want_json) {
    json_t *got = NULL, *want = json_loads(want_json, 0, NULL);
    assert_int_equal(toolcall_parse_as(text, strlen(text), fmt, &got), 0);
    if (!json_equal(got, want)) fail_msg("%s: got %s", text, json_dumps(got, JSON_COMPACT));
    json_decref(got);
    json_decref(want);
}

static void test_in_think(void **state) {
    (void)state;
    fmt = (toolcall_format){.in_think = true};
    rng g;
    rng_seed(&g, 13);
    for (size_t i = 0; i < sizeof in_think_table / sizeof *in_think_table; i++)
        check_all_splits(in_think_table[i], strlen(in_think_table[i]), &g, 50);
    expect_parse_in_think("Thought.\n</think>\n\nAnswer.",
                          "{\"role\":\"assistant\",\"content\":\"Answer.\",\"reasoning_content\":\"Thought.\"}");
    expect_parse_in_think("\nStopped mid-thought \n",
                          "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"Stopped mid-thought\"}");
    expect_parse_in_think("", "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"\"}");
    expect_parse_in_think("R\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
                          "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"R\",\"tool_calls\":"
                          "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}");
    /* token by token: the reasoning goes out live, before any "</think>" */
    const char *tok[] = {"Need", " it", ".\n", "</think>", "\n\n", "Sure", "."};
    char text[64] = "";
    json_t *d = json_array();
    reply_stream s;
    reply_stream_init_as(&s, "c", fmt);
    for (size_t i = 0; i < sizeof tok / sizeof *tok; i++) {
        strcat(text, tok[i]);
        assert_int_equal(reply_stream_feed(&s, text, strlen(text), false, d), 0);
        if (i == 0) assert_int_equal(json_array_size(d), 1); /* "Need" is reasoning already */
    }
    assert_int_equal(reply_stream_feed(&s, text, strlen(text), true, d), 0);
    json_t *want = json_loads("[{\"reasoning_content\":\"Need\"},{\"reasoning_content\":\" it\"},"
                              "{\"reasoning_content\":\".\"},{\"content\":\"Sure\"},{\"content\":\".\"}]",
                              0, NULL);
    if (!json_equal(d, want)) fail_msg("got %s", json_dumps(d, JSON_COMPACT));
    assert_false(s.diverged);
    reply_stream_free(&s);
    json_decref(want);
    json_decref(d);
    /* random replies: reasoning soup, "</think>", content soup (or no close at all) */
    char buf[600];
    for (int it = 0; it < 1500; it++) {
        bool anything = it % 4 == 3;
        size_t n = soup(&g, buf, 280, 0, anything);
        if (rng_below(&g, 4)) {
            memcpy(buf + n, "\n</think>\n\n", 11);
            n = soup(&g, buf, sizeof buf, n + 11, anything);
        }
        check_all_splits(buf, n, &g, 2);
    }
    fmt = (toolcall_format){0};
}

static void test_errors(void **state) {
    (void)state;
    json_t *d = json_array();
    reply_stream s;
    reply_stream_init(&s, NULL);
    assert_int_equal(reply_stream_feed(&s, "ab\xff cd", 6, false, d), -1); /* settled bad bytes */
    assert_non_null(strstr(cd_errmsg(), "UTF-8"));
    reply_stream_init(&s, NULL);
    assert_int_equal(reply_stream_feed(&s, "\xff\xfe", 2, true, d), -1);
    assert_non_null(strstr(cd_errmsg(), "UTF-8"));
    reply_stream_init(&s, NULL);
    assert_int_equal(reply_stream_feed(&s, "abc", 3, false, d), 0);
    assert_int_equal(reply_stream_feed(&s, "ab", 2, false, d), -1);
    assert_non_null(strstr(cd_errmsg(), "shrank"));
    assert_int_equal(reply_stream_feed(&s, "abc", 3, true, d), 0);
    assert_int_equal(reply_stream_feed(&s, "abc", 3, true, d), -1);
    assert_non_null(strstr(cd_errmsg(), "ended"));
    reply_stream_free(&s);
    /* a NULL prefix: ids are the bare index */
    json_array_clear(d);
    reply_stream_init(&s, NULL);
    assert_int_equal(reply_stream_feed(&s, "<tool_call>{\"name\": \"f\"}</tool_call>", 37, true, d), 0);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(json_array_get(d, 0), "tool_calls"), 0), "id")),
                        "0");
    reply_stream_free(&s);
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_all_splits), cmocka_unit_test(test_split_markers),
        cmocka_unit_test(test_delta_shapes),     cmocka_unit_test(test_divergence),
        cmocka_unit_test(test_random_replies),   cmocka_unit_test(test_errors),
        cmocka_unit_test(test_coder_all_splits), cmocka_unit_test(test_in_think),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
