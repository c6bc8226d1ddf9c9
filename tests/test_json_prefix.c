/* The JSON-object prefix automaton (runtime/text/json_prefix.h): valid objects are accepted at
 * every split and done only at their end; each invalid text is refused at its first bad byte;
 * random objects written by jansson are accepted, and on random mutations of them the automaton
 * and jansson agree (jansson is the independent parser). The token mask over the real Qwen3
 * vocabulary (runtime/text/json_mask.h): its shortcuts decide every token as running the
 * token's bytes through the automaton does, at states cut anywhere in random objects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rng.h"
#include "runtime/base/error.h"
#include "runtime/text/json_mask.h"
#include "runtime/text/json_prefix.h"
#include "tests/test_util.h"

static json_schema *any; /* response_format json_object's schema: any object */

/* Fed whole, and at every split into two feeds: accepted; done at the end and not before. */
static void accepts(const char *s) {
    size_t n = strlen(s);
    for (size_t cut = 0; cut <= n; cut++) {
        json_prefix p;
        json_prefix_init(&p, any);
        if (!json_prefix_feed(&p, s, cut)) fail_msg("refused %.*s (of %s)", (int)cut, s, s);
        if (cut < n && json_prefix_done(&p)) fail_msg("done early at %zu of %s", cut, s);
        if (!json_prefix_feed(&p, s + cut, n - cut)) fail_msg("refused %s split at %zu", s, cut);
        if (!json_prefix_done(&p)) fail_msg("not done at the end of %s", s);
    }
}

/* Accepted up to byte bad, refused there. */
static void refuses_at(const char *s, size_t bad) {
    json_prefix p;
    json_prefix_init(&p, any);
    if (!json_prefix_feed(&p, s, bad)) fail_msg("refused %s before byte %zu", s, bad);
    if (json_prefix_feed(&p, s + bad, 1)) fail_msg("accepted byte %zu of %s", bad, s);
}

static void test_valid(void **state) {
    (void)state;
    const char *ok[] = {
        "{}",
        "\n\t{ }",
        " {\n  \"a\": 1\n}",
        "{\"a\":1}",
        "{\"a\" : [ ] , \"b\" : { } }",
        "{\"\":\"\"}",
        "{\"n\":[0,-0,12,-3.25,1e5,1E+5,2.5e-10,-0.0e0,10]}",
        "{\"t\":[true,false,null]}",
        "{\"s\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00\"}",
        "{\"u\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xf4\x8f\xbf\xbf\"}",
        "{\"deep\":[[[[{\"x\":[{}]}]]]],\"after\":1}",
        "{\"a\":{\"b\":{\"c\":[1,[2,[3]]]}}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) accepts(ok[i]);
}

static void test_invalid(void **state) {
    (void)state;
    const struct {
        const char *s;
        size_t bad;
    } no[] = {
        {"[1]", 0},
        {"\"x\"", 0},
        {"1", 0},
        {" x", 1}, /* the top level is an object */
        {"{}", 2},
        {"{} ", 2}, /* nothing after it */
        {"{a:1}", 1},
        {"{\"a\" 1}", 5},
        {"{\"a\":}", 5},
        {"{,}", 1},
        {"{\"a\":1,}", 7},
        {"{\"a\":[1,]}", 8},
        {"{\"a\":[1}", 7},
        {"{\"a\":{]", 6},
        {"{\"a\":1]", 6},
        {"{\"a\":01}", 6},
        {"{\"a\":-}", 6},
        {"{\"a\":1.}", 7},
        {"{\"a\":1e}", 7},
        {"{\"a\":.5}", 5},
        {"{\"a\":+1}", 5},
        {"{\"a\":1.2.3}", 8},
        {"{\"a\":tru}", 8},
        {"{\"a\":nul1}", 8},
        {"{\"a\":True}", 5},
        {"{\"a\":\"\\x\"}", 7},
        {"{\"a\":\"\\u12G4\"}", 10},
        {"{\"a\":\"\x01\"}", 6},
        {"{\"a\":\"\n\"}", 6},
        {"{\"a\":\"\xc0\xaf\"}", 6},
        {"{\"a\":\"\xe0\x80\x80\"}", 7},
        {"{\"a\":\"\xed\xa0\x80\"}", 7},
        {"{\"a\":\"\xf4\x90\x80\x80\"}", 7},
        {"{\"a\":\"\xf5\"}", 6},
        {"{\"a\":\"\xc3\"}", 7},
        {"{\"a\":\"\x80\"}", 6},
        {"{\"a\":1}\xc3\xa9", 7},
        {"{\xc3\xa9}", 1},
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) refuses_at(no[i].s, no[i].bad);
    /* whitespace runs: nothing, one space, or a newline and up to 20 spaces or tabs */
    const struct {
        const char *s;
        size_t bad;
    } ws[] = {{"{  }", 2},
              {"{\r}", 1},
              {"{\t}", 1},
              {"{\n\n}", 2},
              {" \n{}", 1},
              {"{\"a\":1 \n}", 7},
              {"{\n                     }", 22},
              {"{\"a\": [1,  2]}", 10}};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) refuses_at(ws[i].s, ws[i].bad);
    accepts("{\n                    }");
    accepts("{\"a\":\n\t\t[ 1 ,\n 2 ]}");
    /* depth: JSON_PREFIX_MAX_DEPTH containers open, one more refused */
    char deep[JSON_PREFIX_MAX_DEPTH + 16];
    size_t n = 0;
    deep[n++] = '{', deep[n++] = '"', deep[n++] = 'a', deep[n++] = '"', deep[n++] = ':';
    for (int i = 1; i < JSON_PREFIX_MAX_DEPTH; i++) deep[n++] = '[';
    deep[n++] = '[';
    deep[n] = 0;
    refuses_at(deep, n - 1);
}

/* A random JSON value (objects and arrays nest up to depth d). */
static json_t *random_value(rng *r, int d) {
    switch (rng_below(r, d > 0 ? 7 : 5)) {
    case 0: return json_integer((json_int_t)rng_below(r, 2000000) - 1000000);
    case 1: return json_real((double)(int)rng_below(r, 20000) / 64.0 - 100);
    case 2: return rng_below(r, 2) ? json_true() : json_null();
    case 3: {
        static const char *const words[] = {"",        "x",           "caf\xc3\xa9",      "tab\there",
                                            "q\"uote", "back\\slash", "\xf0\x9f\x98\x80", "ctl\x01"};
        return json_string(words[rng_below(r, 8)]);
    }
    case 4: return json_false();
    case 5: {
        json_t *a = json_array();
        for (uint32_t i = rng_below(r, 4); i > 0; i--) json_array_append_new(a, random_value(r, d - 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        char key[16];
        for (uint32_t i = rng_below(r, 4); i > 0; i--) {
            snprintf(key, sizeof key, "k%u", rng_below(r, 100));
            json_object_set_new(o, key, random_value(r, d - 1));
        }
        return o;
    }
    }
}

/* Whether every whitespace run outside strings has the shape json_prefix allows. */
static bool ws_runs_ok(const char *t, size_t n) {
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') continue;
        size_t j = i;
        while (j < n && (t[j] == ' ' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r')) j++;
        bool ok = (j - i == 1 && c == ' ') ||
            (c == '\n' && j - i <= 21 && !memchr(t + i + 1, '\n', j - i - 1) && !memchr(t + i + 1, '\r', j - i - 1));
        if (!ok) return false;
        i = j - 1;
    }
    return true;
}

/* Random objects in jansson's compact and indented forms are accepted; random byte mutations of
 * them: when jansson reads an object with nothing after it (and whitespace runs of the allowed
 * shape), the automaton accepts it whole, and
 * when the automaton accepts one whole, jansson reads it (but for \u escapes: the automaton takes
 * any four hex digits, jansson refuses lone surrogates and \u0000; and numbers past a double or
 * an integer's range, which jansson refuses and JSON's grammar does not). */
static void test_against_jansson(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 12);
    static const char mut[] = "{}[]\":,.-+eE0123456789 \\utrfn\x80\xc3\xa9x";
    uint32_t agreed_ok = 0, agreed_bad = 0;
    for (int it = 0; it < 3000; it++) {
        json_t *v = json_object();
        for (uint32_t i = rng_below(&r, 5); i > 0; i--) {
            char key[16];
            snprintf(key, sizeof key, "key%d", (int)i);
            json_object_set_new(v, key, random_value(&r, 4));
        }
        char *s = json_dumps(v, it % 2 ? JSON_COMPACT : JSON_INDENT(2));
        json_decref(v);
        assert_non_null(s);
        accepts(s);
        size_t n = strlen(s);
        for (int m = 0; m < 4; m++) {
            char *t = strdup(s);
            for (uint32_t k = 1 + rng_below(&r, 2); k > 0; k--)
                t[rng_below(&r, (uint32_t)n)] = mut[rng_below(&r, sizeof mut - 1)];
            json_prefix p;
            json_prefix_init(&p, any);
            bool whole = json_prefix_feed(&p, t, n) && json_prefix_done(&p);
            json_error_t e;
            json_t *j = json_loadb(t, n, 0, &e);
            bool trailing = n && (t[n - 1] == ' ' || t[n - 1] == '\n');
            bool theirs = j && json_is_object(j) && !trailing && !memchr(t, 0, n);
            if (theirs && !whole && ws_runs_ok(t, n)) fail_msg("jansson reads, the automaton refuses: %s", t);
            bool range = !j && (strstr(e.text, "overflow") || strstr(e.text, "too big")); /* a number, not grammar */
            if (whole && !theirs && !strstr(t, "\\u") && !range)
                fail_msg("the automaton accepts, jansson refuses (%s): %s", e.text, t);
            agreed_ok += whole && theirs;
            agreed_bad += !whole && !theirs;
            json_decref(j);
            free(t);
        }
        free(s);
    }
    printf("  mutations: %u read by both, %u refused by both\n", agreed_ok, agreed_bad);
    assert_true(agreed_ok > 500 && agreed_bad > 5000);
}

/* json_mask_apply against json_mask_allows (every token through the automaton) at 300 states:
 * random jansson objects cut at random bytes (mid-key, mid-string, mid-escape, mid-UTF-8, after
 * the end), with some logits already -inf (left so). */
static void test_mask_shortcuts(void **state) {
    (void)state;
    tokenizer *t = tu_qwen3_tokenizer();
    if (!t) fail_msg("%s", cd_errmsg());
    json_vocab v;
    assert_int_equal(json_vocab_init(&v, t), 0);
    int32_t n = tok_n_vocab(t);
    float *l = malloc((size_t)n * sizeof *l);
    assert_non_null(l);
    rng r;
    rng_seed(&r, 5);
    uint32_t states = 0, in_string = 0, done = 0, allowed = 0;
    while (states < 300) {
        json_t *o = json_object();
        json_object_set_new(o, "k\xc3\xa9y", random_value(&r, 3));
        json_object_set_new(o, "esc\"ape", json_string("tab\t\xe2\x82\xac"));
        char *s = json_dumps(o, states % 2 ? JSON_COMPACT : JSON_INDENT(1));
        json_decref(o);
        size_t len = strlen(s);
        for (int c = 0; c < 3; c++, states++) {
            json_mask m;
            json_mask_init(&m, &v, any);
            size_t cut = c == 2 ? len : rng_below(&r, (uint32_t)len);
            assert_true(json_prefix_feed(&m.state, s, cut));
            in_string += json_prefix_string_room(&m.state) > 0;
            done += json_mask_done(&m);
            for (int32_t id = 0; id < n; id++) l[id] = id % 97 == 0 ? -INFINITY : 0.0f;
            json_mask_apply(&m, l, n);
            for (int32_t id = 0; id < n; id++) {
                bool want = id % 97 != 0 && json_mask_allows(&m, id);
                if ((l[id] == 0.0f) != want)
                    fail_msg("token %d at \"%.*s\": mask %d, automaton %d", id, (int)cut, s, l[id] == 0.0f, want);
                allowed += want;
            }
            json_mask_free(&m);
        }
        free(s);
    }
    printf("  300 states (%u in a string, %u whole): %u tokens allowed in all\n", in_string, done, allowed);
    assert_true(in_string > 30 && done >= 100 && allowed > 1000000);
    free(l);
    json_vocab_free(&v);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_against_jansson),
        cmocka_unit_test(test_mask_shortcuts),
    };
    any = json_schema_any_object();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_schema_unref(any);
    return rc;
}
