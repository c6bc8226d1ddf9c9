/* JSON Schema for constrained replies (runtime/text/json_schema.h) through the prefix automaton
 * (runtime/text/json_prefix.h):
 * - compiling: each schema it cannot take is refused with a message naming the keyword, strict
 *   or not as json_schema.h says;
 * - hand-written instances and near misses of each supported keyword;
 * - against an independent validator written here from JSON Schema's text (with json_schema.h's
 *   narrowings): random schemas, random instances made from them and then spoiled; the
 *   automaton accepts an instance's text (compact and indented) exactly when the validator does,
 *   byte by byte as whole;
 * - no dead ends: from prefixes of instances, feeding bytes the automaton accepts always reaches
 *   a whole value;
 * - the token mask at schema states (keys, enums, bounded strings, unions) decides every token
 *   of the real Qwen3 vocabulary as running its bytes through the automaton does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/base/error.h"
#include "runtime/base/rng.h"
#include "runtime/text/json_mask.h"
#include "runtime/text/json_prefix.h"
#include "runtime/text/json_schema.h"
#include "tests/test_util.h"

static json_schema *compile_or_fail(const char *text, bool strict) {
    json_schema *s = json_schema_compile_text(text, strict);
    if (!s) fail_msg("%s: %s", text, cd_errmsg());
    return s;
}

static bool accepts_whole(const json_schema *s, const char *t, size_t n) {
    static json_prefix p;
    json_prefix_init(&p, s);
    return json_prefix_feed(&p, t, n) && json_prefix_done(&p);
}

static void test_refusals(void **state) {
    (void)state;
    const struct {
        const char *schema;
        bool strict;
        const char *says;
    } no[] = {
        {"{\"type\": \"strin\"}", false, "type must be"},
        {"{\"type\": []}", false, "type is an empty list"},
        {"{\"type\": \"string\", \"pattern\": \"(?=a)b\"}", true, "lookaround"},
        {"{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", true, "backreference"},
        {"{\"type\": \"string\", \"pattern\": \"a\\\\bc\"}", true, "not supported"},
        {"{\"type\": \"string\", \"pattern\": \"a^b\"}", true, "only at the start and the end"},
        {"{\"type\": \"string\", \"pattern\": \"[a-z\"}", true, "[ without ]"},
        {"{\"type\": \"string\", \"pattern\": \"a{3,2}\"}", true, "m below n"},
        {"{\"type\": \"string\", \"pattern\": \"^\\\"$\"}", true, "matches no string written without escapes"},
        {"{\"type\": \"string\", \"pattern\": \"a{70}\"}", true, "too long"},
        {"{\"type\": \"string\", \"pattern\": \"a+\", \"maxLength\": 3}", true, "pattern with minLength or maxLength"},
        {"{\"properties\": {\"n\": {\"type\": \"number\", \"minimum\": 1}}}", true,
         "properties.n: minimum / maximum of numbers"},
        {"{\"type\": \"integer\", \"minimum\": 3, \"maximum\": 2}", false, "no integer lies between"},
        {"{\"type\": \"integer\", \"exclusiveMinimum\": 2, \"exclusiveMaximum\": 3}", false, "no integer lies between"},
        {"{\"type\": \"integer\", \"minimum\": \"1\"}", false, "minimum must be a number"},
        {"{\"type\": \"integer\", \"multipleOf\": 2}", true, "multipleOf is not supported"},
        {"{\"items\": {\"not\": {}}}", true, "items: not is not supported"},
        {"{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}", false, "required names b"},
        {"{\"$ref\": \"#/$defs/x\"}", false, "$ref must point"},
        {"{\"$ref\": \"http://example.com/s.json\"}", false, "$ref must point"},
        {"{\"enum\": []}", false, "enum must be a non-empty array"},
        {"{\"type\": \"string\", \"enum\": [1, true]}", false, "no value of enum"},
        {"{\"enum\": [1], \"const\": 1}", false, "enum and const together"},
        {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", false, "minItems is above maxItems"},
        {"{\"minLength\": -1}", false, "minLength must be a non-negative integer"},
        {"{\"maxLength\": 2, \"minLength\": 3}", false, "minLength is above maxLength"},
        {"{\"$defs\": {\"a\": {\"anyOf\": [{\"$ref\": \"#/$defs/a\"}, {\"type\": \"null\"}]}}, \"$ref\": "
         "\"#/$defs/a\"}",
         false, "refers to itself"},
        {"{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": \"#/$defs/n\"}}, "
         "\"required\": [\"next\"]}}, "
         "\"$ref\": \"#/$defs/n\"}",
         false, "no instance nested"},
        {"false", false, "matches nothing"},
        {"{\"$ref\": \"#\"}", false, "lead back to themselves"},
        {"{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"allOf\": [{\"$ref\": \"#/$defs/a\"}]}}, \"$ref\": "
         "\"#/$defs/a\"}",
         false, "lead back to themselves"},
        {"{\"anyOf\": [false]}", false, "no branch"},
        {"{\"anyOf\": {}}", false, "anyOf must be a non-empty array"},
        {"{\"allOf\": [{}, {}]}", true, "allOf is supported with one schema only"},
        {"{\"$ref\": \"#\", \"minLength\": 1}", true, "minLength beside $ref"},
        {"{\"anyOf\": [{}], \"type\": \"string\"}", true, "type beside anyOf"},
        {"{\"items\": [{}]}", false, "tuple form"},
        {"[1]", false, "must be an object or a boolean"},
        {"{\"properties\": 3}", false, "properties must be an object"},
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        json_schema *s = json_schema_compile_text(no[i].schema, no[i].strict);
        if (s) fail_msg("compiled %s", no[i].schema);
        if (!strstr(cd_errmsg(), no[i].says))
            fail_msg("%s: \"%s\" does not say \"%s\"", no[i].schema, cd_errmsg(), no[i].says);
    }
    /* 65 properties */
    char big[4096] = "{\"properties\": {";
    for (int i = 0; i < 65; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s\"p%d\": {}", i ? ", " : "", i);
    strcat(big, "}}");
    assert_null(json_schema_compile_text(big, false));
    assert_non_null(strstr(cd_errmsg(), "at most 64"));
    /* not strict: what is not enforced is left out, the rest holds */
    json_schema *s = compile_or_fail("{\"type\": \"string\", \"pattern\": \"a+\", \"maxLength\": 2}", false);
    assert_true(accepts_whole(s, "\"bb\"", 4));
    assert_false(accepts_whole(s, "\"bbb\"", 5));
    json_schema_unref(s);
}

/* Each schema with texts it takes whole and texts it refuses. */
static void test_examples(void **state) {
    (void)state;
    const struct {
        const char *schema;
        const char *yes[6];
        const char *no[8];
    } ex[] = {
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"ab\": {\"type\": \"string\"}, "
         "\"b\": {\"type\": \"boolean\"}}, \"required\": [\"ab\"]}",
         {"{\"ab\":\"x\"}", "{\"a\":1,\"ab\":\"\"}", "{\"b\":false, \"ab\":\"y\", \"a\":-20}", "{\n  \"ab\": \"z\"\n}"},
         {"{}", "{\"a\":1}", "{\"ab\":\"x\",\"c\":1}", "{\"ab\":1}", "{\"a\":1.5,\"ab\":\"\"}",
          "{\"ab\":\"x\",\"ab\":\"y\"}", "{\"a\":1e2,\"ab\":\"\"}", "{\"abc\":\"x\"}"}},
        {"{\"enum\": [\"red\", \"green\", 12, 1, null, [1, 2], {\"k\": true}]}",
         {"\"red\"", "\"green\"", "12", "1", "null", "[1,2]"},
         {"\"re\"", "\"blue\"", "2", "123", "[1, 2]", "true", "{\"k\":false}", "\"red\" "}},
        {"{\"const\": {\"k\": true}}", {"{\"k\":true}"}, {"{\"k\": true}", "{}", "true"}},
        {"{\"type\": \"array\", \"items\": {\"type\": \"number\"}, \"minItems\": 1, \"maxItems\": 3}",
         {"[1]", "[1,2.5,-3e4]", "[ 0 ]"},
         {"[]", "[1,2,3,4]", "[\"1\"]", "[1,]", "{}"}},
        {"{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
         {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xc3\xa9\"", "\"a\\n\""},
         {"\"a\"", "\"abcd\"", "\"\\u0041b\"", "\"\xc3\xa9\"", "1"}},
        {"{\"anyOf\": [{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get\"}, \"args\": {\"type\": "
         "\"object\", "
         "\"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": [\"id\"]}}, \"required\": [\"name\", "
         "\"args\"]}, "
         "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"put\"}, \"args\": {\"type\": \"object\", "
         "\"properties\": {\"text\": {\"type\": \"string\"}}, \"required\": [\"text\"]}}, \"required\": [\"name\", "
         "\"args\"]}]}",
         {"{\"name\":\"get\",\"args\":{\"id\":7}}", "{\"name\":\"put\",\"args\":{\"text\":\"hi\"}}",
          "{\"args\":{\"id\":7},\"name\":\"get\"}"},
         {"{\"name\":\"get\",\"args\":{\"text\":\"hi\"}}", "{\"name\":\"put\",\"args\":{\"id\":7}}",
          "{\"name\":\"del\",\"args\":{}}", "{\"args\":{\"id\":7}}"}},
        {"{\"type\": [\"integer\", \"null\"]}", {"0", "-12", "null"}, {"1.5", "01", "\"1\"", "nul", "true"}},
        {"{\"type\": \"integer\", \"minimum\": -3, \"exclusiveMaximum\": 120}",
         {"-3", "0", "-0", "7", "119", "45"},
         {"-4", "120", "-30", "1000", "1.0", "-"}},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 7}", {"5", "6", "7"}, {"4", "8", "0", "56", "-5", "10"}},
        {"{\"type\": \"array\", \"items\": {\"type\": \"integer\", \"minimum\": 10, \"maximum\": 99}}",
         {"[10,99,42]", "[]"},
         {"[5]", "[9,10]", "[100]", "[-10]", "[10.5]"}},
        {"{\"type\": \"integer\", \"maximum\": -5}", {"-5", "-123456789012345678"}, {"-4", "0", "5", "-0"}},
        {"{\"type\": \"integer\", \"minimum\": 1.5, \"maximum\": 3, \"exclusiveMaximum\": true}",
         {"2"},
         {"1", "3", "4"}},
        {"{\"type\": \"string\", \"nullable\": true}", {"\"x\"", "null"}, {"1", "false"}},
        {"{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}-\\\\d{3}$\"}",
         {"\"AB-123\"", "\"ZZ-000\""},
         {"\"AB-12\"", "\"ab-123\"", "\"AB-1234\"", "\"AB\\u002d123\"", "\"\""}},
        {"{\"type\": \"string\", \"pattern\": \"ab\"}",
         {"\"xxabyy\"", "\"ab\"", "\"a\u00e9ab\""},
         {"\"a\"", "\"ba\"", "\"\""}},
        {"{\"type\": \"string\", \"pattern\": \"^(cat|dog)s?$\"}",
         {"\"cat\"", "\"dogs\""},
         {"\"cats!\"", "\"bird\"", "\"catdog\""}},
        {"{\"type\": \"string\", \"pattern\": \"^\u00e9+.$\"}",
         {"\"\u00e9\u00e9\"", "\"\u00e9\u20ac\"", "\"\u00e9\u00e9\u00e9\xf0\x9f\x98\x80\""},
         {"\"e\"", "\"\u00e9\""}},
        {"{\"type\": \"string\", \"pattern\": \"^a{2,3}[^0-9]*$\"}",
         {"\"aa\"", "\"aaax\"", "\"aaaa\""},
         {"\"a\"", "\"aa1\""}},
        {"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"kids\": "
         "{\"type\": "
         "\"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\"]}}, \"$ref\": \"#/$defs/node\"}",
         {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3}]}"},
         {"{\"v\":1,\"kids\":[{}]}", "{\"kids\":[]}"}},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": "
         "{\"type\": \"string\"}}",
         {"{\"a\":1,\"x\":\"y\"}", "{\"zz\":\"\",\"a\":2}", "{}"},
         {"{\"a\":\"1\"}", "{\"x\":1}", "{\"x\\u0041\":\"y\"}"}},
        {"{\"type\": \"object\", \"properties\": {\"q\\\"t\": {\"type\": \"null\"}}, \"required\": [\"q\\\"t\"]}",
         {"{\"q\\\"t\":null}"},
         {"{\"q\":null}", "{\"q\\\"\":null}"}},
        {"{\"type\": \"object\"}", {"{}", "{\"\\u0041\":[1,{\"b\":null}]}"}, {"[]", "1"}},
        {"true", {"1", "\"s\"", "[{}]", "{\"a\":[]}", "null"}, {"x", "[1,]"}},
    };
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        json_schema *s = compile_or_fail(ex[i].schema, true);
        for (size_t k = 0; k < 6 && ex[i].yes[k]; k++) {
            const char *t = ex[i].yes[k];
            if (!accepts_whole(s, t, strlen(t))) fail_msg("%s refuses %s", ex[i].schema, t);
        }
        for (size_t k = 0; k < 8 && ex[i].no[k]; k++) {
            const char *t = ex[i].no[k];
            if (accepts_whole(s, t, strlen(t))) fail_msg("%s accepts %s", ex[i].schema, t);
        }
        json_schema_unref(s);
    }
}

/* ---- an independent validator: JSON Schema's rules for the keywords enforced, with
 * json_schema.h's narrowings (marked) ---- */

static const json_t *resolve_ref(const json_t *doc, const char *ref) {
    const char *pre = "#/$defs/";
    if (!strcmp(ref, "#")) return doc;
    if (strncmp(ref, pre, strlen(pre))) return NULL;
    return json_object_get(json_object_get(doc, "$defs"), ref + strlen(pre));
}

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool has_escape_u(const json_t *str) { /* as written: a control character is \uXXXX */
    for (const char *s = json_string_value(str); *s; s++)
        if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t' && *s != '\r' && *s != '\b' && *s != '\f') return true;
    return false;
}

static bool valid(const json_t *doc, const json_t *sch, const json_t *v);

static bool indented;
static const json_t *current;
/* the schema under test, for messages */ /* the instance is written indented (JSON_INDENT) */

/* An enum or const value matches as its compact text (narrowing): indented, a non-empty array
 * or object is written otherwise. */
static bool literal_equal(const json_t *lit, const json_t *v) {
    bool spread = (json_is_array(v) && json_array_size(v)) || (json_is_object(v) && json_object_size(v));
    return json_equal(lit, v) && !(indented && spread);
}

static bool type_ok(const json_t *t, const json_t *v) {
    if (!t) return true;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        if ((!strcmp(name, "object") && json_is_object(v)) || (!strcmp(name, "array") && json_is_array(v)) ||
            (!strcmp(name, "string") && json_is_string(v)) || (!strcmp(name, "number") && json_is_number(v)) ||
            (!strcmp(name, "integer") && json_is_integer(v)) /* narrowing: 1.0 is not written as an integer */ ||
            (!strcmp(name, "boolean") && json_is_boolean(v)) || (!strcmp(name, "null") && json_is_null(v)))
            return true;
    }
    return false;
}

static bool object_ok(const json_t *doc, const json_t *sch, const json_t *v) {
    const json_t *props = json_object_get(sch, "properties"), *add = json_object_get(sch, "additionalProperties");
    const json_t *req = json_object_get(sch, "required"), *x;
    size_t i;
    json_array_foreach(req, i, x) if (!json_object_get(v, json_string_value(x))) return false;
    const char *k;
    json_object_foreach((json_t *)v, k, x) {
        const json_t *ps = json_object_get(props, k);
        if (ps) {
            if (!valid(doc, ps, x)) return false;
            continue;
        }
        bool declared = props && json_object_size(props);
        if (!add && declared) return false; /* narrowing: absent means none when properties are given */
        if (json_is_false(add)) return false;
        if (declared && strpbrk(k, "\"\\\x01\x02\x1f")) return false; /* narrowing: other keys have no escapes */
        if (add && !valid(doc, add, x)) return false;
    }
    return true;
}

static bool valid(const json_t *doc, const json_t *sch, const json_t *v) {
    if (json_is_boolean(sch)) return json_is_true(sch);
    const json_t *ref = json_object_get(sch, "$ref");
    if (ref) return valid(doc, resolve_ref(doc, json_string_value(ref)), v);
    const json_t *alts = json_object_get(sch, "anyOf"), *x;
    if (!alts) alts = json_object_get(sch, "oneOf"); /* narrowing: oneOf read as anyOf */
    size_t i;
    if (alts) {
        json_array_foreach(alts, i, x) if (valid(doc, x, v)) return true;
        return false;
    }
    const json_t *t = json_object_get(sch, "type");
    bool nullable = json_is_true(json_object_get(sch, "nullable")) && json_is_null(v);
    if (!nullable && !type_ok(t, v)) return false;
    const json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
    if (cn) return literal_equal(cn, v);
    if (en) {
        json_array_foreach(en, i, x) if (literal_equal(x, v)) return true;
        return false;
    }
    if (json_is_object(v)) return object_ok(doc, sch, v);
    if (json_is_array(v)) {
        const json_t *items = json_object_get(sch, "items"), *mn = json_object_get(sch, "minItems"),
                     *mx = json_object_get(sch, "maxItems");
        if (mn && json_array_size(v) < (size_t)json_integer_value(mn)) return false;
        if (mx && json_array_size(v) > (size_t)json_integer_value(mx)) return false;
        json_array_foreach(v, i, x) if (items && !valid(doc, items, x)) return false;
        return true;
    }
    if (json_is_integer(v)) {
        const json_t *b[4] = {json_object_get(sch, "minimum"), json_object_get(sch, "maximum"),
                              json_object_get(sch, "exclusiveMinimum"), json_object_get(sch, "exclusiveMaximum")};
        double x = (double)json_integer_value(v);
        if (json_is_number(b[0]) && x < json_number_value(b[0])) return false;
        if (json_is_number(b[1]) && x > json_number_value(b[1])) return false;
        if (json_is_number(b[2]) && x <= json_number_value(b[2])) return false;
        if (json_is_number(b[3]) && x >= json_number_value(b[3])) return false;
        return true;
    }
    if (json_is_string(v)) {
        const json_t *mn = json_object_get(sch, "minLength"), *mx = json_object_get(sch, "maxLength");
        size_t n = code_points(json_string_value(v));
        bool bounded = (mn && json_integer_value(mn) > 0) || mx;
        if (bounded && has_escape_u(v)) return false; /* narrowing: a bounded string has no \u */
        return (!mn || n >= (size_t)json_integer_value(mn)) && (!mx || n <= (size_t)json_integer_value(mx));
    }
    return true;
}

/* ---- random schemas and instances ---- */

static const char *const names[] = {"a", "ab", "abc", "b", "id", "name", "caf\xc3\xa9", "q\"t", "x y"};
#define N_NAMES (sizeof names / sizeof *names)

static json_t *random_literal(rng *r) {
    switch (rng_below(r, 7)) {
    case 0: return json_integer((json_int_t)rng_below(r, 30) - 5);
    case 1: return json_real((double)rng_below(r, 100) / 8.0);
    case 2: return json_string(names[rng_below(r, N_NAMES)]);
    case 3: return json_null();
    case 4: return json_true();
    case 5: return json_pack("[i,s]", (int)rng_below(r, 3), "k");
    default: return json_integer(1000 + (json_int_t)rng_below(r, 20));
    }
}

static json_t *random_schema(rng *r, int d, bool has_defs);

static json_t *random_object_schema(rng *r, int d, bool has_defs) {
    json_t *o = json_pack("{s:s}", "type", "object"), *props = json_object(), *req = json_array();
    for (uint32_t k = rng_below(r, 5); k > 0; k--) {
        const char *nm = names[rng_below(r, N_NAMES)];
        json_object_set_new(props, nm, random_schema(r, d - 1, has_defs));
        if (rng_below(r, 2)) json_array_append_new(req, json_string(nm));
    }
    if (rng_below(r, 5)) json_object_set_new(o, "properties", props);
    else json_decref(props);
    /* required names only properties given */
    json_t *kept = json_array(), *x;
    size_t i;
    json_array_foreach(req, i, x) if (json_object_get(json_object_get(o, "properties"), json_string_value(x)) &&
                                      !json_array_size(kept)) json_array_append(kept, x);
    json_array_foreach(req, i, x) {
        bool dup = false;
        size_t j;
        json_t *y;
        json_array_foreach(kept, j, y) dup |= json_equal(x, y);
        if (!dup && json_object_get(json_object_get(o, "properties"), json_string_value(x))) json_array_append(kept, x);
    }
    json_decref(req);
    json_object_set_new(o, "required", kept);
    switch (rng_below(r, 4)) {
    case 0: json_object_set_new(o, "additionalProperties", json_false()); break;
    case 1: json_object_set_new(o, "additionalProperties", json_true()); break;
    case 2: json_object_set_new(o, "additionalProperties", random_schema(r, d - 1, has_defs)); break;
    default: break;
    }
    return o;
}

static json_t *random_schema(rng *r, int d, bool has_defs) {
    uint32_t pick = rng_below(r, d > 0 ? 14 : 8);
    switch (pick) {
    case 0: {
        json_t *s = json_pack("{s:s}", "type", "integer");
        int64_t lo = (int64_t)rng_below(r, 400) - 200, hi = lo + (int64_t)rng_below(r, 300);
        if (rng_below(r, 2))
            json_object_set_new(s, rng_below(r, 2) ? "minimum" : "exclusiveMinimum",
                                json_integer(lo - 1 + (int)rng_below(r, 2)));
        if (rng_below(r, 2))
            json_object_set_new(s, rng_below(r, 2) ? "maximum" : "exclusiveMaximum",
                                json_integer(hi + 1 + (int)rng_below(r, 2)));
        return s;
    }
    case 1: return json_pack("{s:s}", "type", "number");
    case 2: {
        json_t *s = json_pack("{s:s}", "type", "string");
        uint32_t lo = rng_below(r, 3) == 0 ? rng_below(r, 2) : 0;
        if (rng_below(r, 2)) json_object_set_new(s, "maxLength", json_integer(lo + rng_below(r, 6)));
        if (lo || rng_below(r, 4) == 0) json_object_set_new(s, "minLength", json_integer(lo));
        return s;
    }
    case 3: return json_pack("{s:[s,s]}", "type", rng_below(r, 2) ? "boolean" : "string", "null");
    case 4: {
        json_t *e = json_array();
        for (uint32_t k = 1 + rng_below(r, 4); k > 0; k--) json_array_append_new(e, random_literal(r));
        return json_pack("{s:o}", "enum", e);
    }
    case 5: return json_pack("{s:o}", "const", random_literal(r));
    case 6: return rng_below(r, 2) ? json_object() : json_true();
    case 7: return has_defs ? json_pack("{s:s}", "$ref", "#/$defs/leaf") : json_pack("{s:s}", "type", "null");
    case 8:
    case 9: return random_object_schema(r, d, has_defs);
    case 10:
    case 11: {
        json_t *a = json_pack("{s:s,s:o}", "type", "array", "items", random_schema(r, d - 1, has_defs));
        if (rng_below(r, 2)) json_object_set_new(a, "minItems", json_integer(rng_below(r, 2)));
        if (rng_below(r, 2)) json_object_set_new(a, "maxItems", json_integer(1 + rng_below(r, 3)));
        return a;
    }
    default: {
        json_t *alts = json_array();
        for (uint32_t k = 2 + rng_below(r, 2); k > 0; k--)
            json_array_append_new(alts, random_schema(r, d - 1, has_defs));
        return json_pack("{s:o}", rng_below(r, 2) ? "anyOf" : "oneOf", alts);
    }
    }
}

static json_t *random_any(rng *r, int d) {
    switch (rng_below(r, d > 0 ? 6 : 4)) {
    case 0: return json_integer((json_int_t)rng_below(r, 2000) - 1000);
    case 1: return json_real((double)rng_below(r, 400) / 16.0 - 4);
    case 2: {
        static const char *const w[] = {"", "x", "abcdef", "\xc3\xa9t\xc3\xa9", "tab\t", "ctl\x01", "q\"t"};
        return json_string(w[rng_below(r, 7)]);
    }
    case 3: return rng_below(r, 3) == 0 ? json_null() : json_boolean(rng_below(r, 2));
    case 4: {
        json_t *a = json_array();
        for (uint32_t k = rng_below(r, 3); k > 0; k--) json_array_append_new(a, random_any(r, d - 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (uint32_t k = rng_below(r, 3); k > 0; k--)
            json_object_set_new(o, names[rng_below(r, N_NAMES)], random_any(r, d - 1));
        return o;
    }
    }
}

/* An instance made to fit sch, spoiled now and then (a random value in place of one, a required
 * key dropped, a key added, an item too many). */
static json_t *instance(rng *r, const json_t *doc, const json_t *sch, int d) {
    if (rng_below(r, 12) == 0 || d < 0) return random_any(r, 2);
    if (json_is_boolean(sch)) return random_any(r, 2);
    const json_t *ref = json_object_get(sch, "$ref");
    if (ref) return instance(r, doc, resolve_ref(doc, json_string_value(ref)), d);
    const json_t *alts = json_object_get(sch, "anyOf");
    if (!alts) alts = json_object_get(sch, "oneOf");
    if (alts) return instance(r, doc, json_array_get(alts, rng_below(r, (uint32_t)json_array_size(alts))), d);
    const json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
    if (cn) return json_deep_copy(cn);
    if (en) return json_deep_copy(json_array_get(en, rng_below(r, (uint32_t)json_array_size(en))));
    const json_t *t = json_object_get(sch, "type");
    const char *type = json_is_array(t) ? json_string_value(json_array_get(t, rng_below(r, 2))) : json_string_value(t);
    if (!type) return random_any(r, 2);
    if (!strcmp(type, "integer")) { /* near a bound, or anywhere */
        const char *const kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        const json_t *b = json_object_get(sch, kw[rng_below(r, 4)]);
        if (b && rng_below(r, 3)) return json_integer(json_integer_value(b) + (json_int_t)rng_below(r, 5) - 2);
        return json_integer((json_int_t)rng_below(r, 200000) - 100000);
    }
    if (!strcmp(type, "number"))
        return rng_below(r, 2) ? json_real((double)rng_below(r, 1000) / 32.0 - 10) : json_integer(7);
    if (!strcmp(type, "boolean")) return json_boolean(rng_below(r, 2));
    if (!strcmp(type, "null")) return json_null();
    if (!strcmp(type, "string")) {
        static const char *const w[] = {"",     "a",         "ab",     "abc", "abcd", "abcdef", "\xc3\xa9\xc3\xa9",
                                        "a\nb", "tab\there", "ctl\x02"};
        return json_string(w[rng_below(r, 10)]);
    }
    if (!strcmp(type, "array")) {
        json_t *a = json_array();
        const json_t *mx = json_object_get(sch, "maxItems");
        uint32_t n = rng_below(r, mx ? (uint32_t)json_integer_value(mx) + 2 : 4);
        for (uint32_t k = 0; k < n; k++)
            json_array_append_new(a, instance(r, doc, json_object_get(sch, "items"), d - 1));
        return a;
    }
    json_t *o = json_object(), *x;
    const char *k;
    json_object_foreach(json_object_get(sch, "properties"), k, x) {
        bool req = false;
        size_t i;
        json_t *q;
        json_array_foreach(json_object_get(sch, "required"), i, q) req |= !strcmp(json_string_value(q), k);
        if ((req && rng_below(r, 20)) || rng_below(r, 2)) json_object_set_new(o, k, instance(r, doc, x, d - 1));
    }
    if (rng_below(r, 5) == 0)
        json_object_set_new(o, rng_below(r, 2) ? "extra" : names[rng_below(r, N_NAMES)], random_any(r, 1));
    return o;
}

/* Bytes fed one at a time agree with the whole feed: never refused before the end when accepted whole. */
static void check_bytewise(const json_schema *s, const char *t, size_t n, bool whole) {
    static json_prefix p;
    json_prefix_init(&p, s);
    size_t i = 0;
    while (i < n && json_prefix_accepts(&p, t + i, 1) && json_prefix_feed(&p, t + i, 1)) i++;
    bool bytewise = i == n && json_prefix_done(&p);
    if (bytewise != whole) fail_msg("byte by byte %d, whole %d: %s", bytewise, whole, t);
}

/* A copy of the live paths only (a json_prefix is ~40 KB; most of it unused). */
static void prefix_copy(json_prefix *to, const json_prefix *from) {
    to->s = from->s, to->n = from->n;
    memcpy(to->path, from->path, from->n * sizeof *from->path);
}

/* A state as bytes: each live path's fields and open frames (what json_prefix compares). */
static size_t state_bytes(const json_prefix *p, unsigned char *out) {
    size_t n = 0;
    for (uint32_t k = 0; k < p->n; k++) {
        size_t len = offsetof(json_path, f) + p->path[k].depth * sizeof(json_frame);
        memcpy(out + n, &p->path[k], len);
        n += len;
    }
    return n;
}

static void state_from(json_prefix *p, const json_schema *s, const unsigned char *in, size_t n) {
    p->s = s, p->n = 0;
    for (size_t at = 0; at < n; p->n++) {
        json_path *q = &p->path[p->n];
        memcpy(q, in + at, offsetof(json_path, f));
        size_t len = offsetof(json_path, f) + q->depth * sizeof(json_frame);
        memcpy(q, in + at, len);
        at += len;
    }
}

static uint64_t fnv(const unsigned char *b, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The search's frontier: states by (open containers, then newest first). */
typedef struct frontier_item {
    uint64_t key;
    unsigned char *bytes;
    size_t n;
} frontier_item;

static void heap_push(frontier_item *h, uint32_t *n, frontier_item x) {
    uint32_t i = (*n)++;
    for (; i && h[(i - 1) / 2].key > x.key; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = x;
}

static frontier_item heap_pop(frontier_item *h, uint32_t *n) {
    frontier_item top = h[0], last = h[--*n];
    uint32_t i = 0;
    for (uint32_t c; (c = 2 * i + 1) < *n; i = c) {
        if (c + 1 < *n && h[c + 1].key < h[c].key) c++;
        if (last.key <= h[c].key) break;
        h[i] = h[c];
    }
    h[i] = last;
    return top;
}

/* From a prefix the automaton accepts, a whole value is reachable: a best-first search over
 * states, shallowest first (bytes: JSON's structure, a letter, a digit, and every byte of the
 * schema's keys and values), each state visited once. No prefix is a dead end. */
static void check_completes(const json_schema *s, const char *t, size_t cut, bool utf8_bytes) {
    static json_prefix p, q;
    enum { MAX_STATES = 200000, SET = 1 << 17 };
    static frontier_item heap[MAX_STATES];
    static uint64_t set[SET];
    static unsigned char buf[JSON_PREFIX_MAX_PATHS * sizeof(json_path)];
    static const char alphabet[] = "\"}]0123456789,:{[ntrueflsa.-e \\\xc3\xa9"
                                   "bcxyzABZ";
    bool use[256] = {0};
    for (const char *c = alphabet; *c; c++) use[(unsigned char)*c] = true;
    for (int b = 0x80; b <= 0xBF && utf8_bytes; b++) use[b] = true; /* continuation bytes, and the */
    use[0xE0] = use[0xE2] = utf8_bytes;                             /* patterns' lead bytes */
    for (uint32_t i = 0; i < s->n_nodes; i++) {                     /* the bytes of keys and enum values */
        const json_node *nd = &s->nodes[i];
        for (uint32_t k = 0; k < nd->n_prop + nd->n_lit; k++) {
            json_bytes w = k < nd->n_prop ? s->properties[nd->prop + k].key : s->literals[nd->lit + k - nd->n_prop];
            for (uint32_t j = 0; j < w.len; j++) use[(unsigned char)s->bytes[w.off + j]] = true;
        }
    }
    memset(set, 0, sizeof set);
    json_prefix_init(&p, s);
    if (!json_prefix_feed(&p, t, cut)) fail_msg("refused a prefix of %s", t);
    uint32_t n_heap = 0, visited = 0;
    uint64_t seq = UINT32_MAX;
    size_t n = state_bytes(&p, buf);
    frontier_item x = {0, malloc(n), n};
    memcpy(x.bytes, buf, n);
    heap_push(heap, &n_heap, x);
    bool found = false;
    while (n_heap && !found && visited < SET / 2) {
        x = heap_pop(heap, &n_heap);
        uint64_t h = fnv(x.bytes, x.n) | 1;
        size_t at = h & (SET - 1);
        while (set[at] && set[at] != h) at = (at + 1) & (SET - 1);
        if (!set[at]) {
            set[at] = h, visited++;
            state_from(&p, s, x.bytes, x.n);
            found = json_prefix_done(&p);
            for (int b = 0; b < 256 && !found && n_heap < MAX_STATES; b++) {
                char c = (char)b;
                if (!use[b] || !json_prefix_accepts(&p, &c, 1)) continue;
                prefix_copy(&q, &p);
                assert_true(json_prefix_feed(&q, &c, 1));
                n = state_bytes(&q, buf);
                uint32_t depth = JSON_PREFIX_MAX_DEPTH;
                for (uint32_t k = 0; k < q.n; k++) depth = q.path[k].depth < depth ? q.path[k].depth : depth;
                frontier_item y = {(uint64_t)depth << 32 | (seq-- & 0xFFFFFFFFu), malloc(n), n};
                memcpy(y.bytes, buf, n);
                heap_push(heap, &n_heap, y);
            }
        }
        free(x.bytes);
    }
    while (n_heap) free(heap_pop(heap, &n_heap).bytes);
    if (!found)
        fail_msg("no whole value reachable (%u states) after %zu bytes of %s\nschema %s", visited, cut, t,
                 json_dumps(current, JSON_COMPACT));
}

static void test_against_validator(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 31);
    uint32_t yes = 0, no = 0, schemas = 0;
    for (int it = 0; it < 2000; it++) {
        bool defs = rng_below(&r, 3) == 0;
        json_t *sch = random_schema(&r, 3, defs);
        if (defs) {
            json_t *wrap = json_pack("{s:{s:o},s:o}", "$defs", "leaf", random_schema(&r, 1, false), "anyOf",
                                     json_pack("[o]", sch));
            sch = wrap;
        }
        json_schema *s = json_schema_compile(sch, true);
        if (!s) fail_msg("%s: %s", json_dumps(sch, JSON_COMPACT), cd_errmsg());
        schemas++;
        for (int k = 0; k < 12; k++) {
            json_t *v = instance(&r, sch, sch, 4);
            indented = k % 2 == 0;
            bool want = valid(sch, sch, v);
            char *t = json_dumps(v, JSON_ENCODE_ANY | (indented ? JSON_INDENT(2) : JSON_COMPACT));
            size_t n = strlen(t);
            bool got = accepts_whole(s, t, n);
            if (got != want) {
                char *st = json_dumps(sch, JSON_COMPACT);
                fail_msg("schema %s\ninstance %s\nautomaton %d, validator %d", st, t, got, want);
            }
            check_bytewise(s, t, n, got);
            if (got) {
                current = sch;
                check_completes(s, t, rng_below(&r, (uint32_t)n), false);
            }
            yes += want, no += !want;
            free(t);
            json_decref(v);
        }
        json_schema_unref(s);
        json_decref(sch);
    }
    printf("  %u schemas: %u instances valid, %u not (automaton and validator agree on all)\n", schemas, yes, no);
    assert_true(yes > 8000 && no > 2500);
}

/* A random pattern of the supported syntax, over a few letters, a digit class and é. */
static void random_pattern(rng *r, char *out, size_t cap, int d) {
    static const char *const atoms[] = {"a",
                                        "b",
                                        "c",
                                        "\\d",
                                        "[a-c]",
                                        "[^a]",
                                        ".",
                                        "\xc3\xa9",
                                        "x",
                                        "\\.",
                                        "[0-9a]",
                                        "[\xc3\xa0-\xc3\xbf]",
                                        "\xe2\x82\xac",
                                        "[\xe0\xa4\x80-\xe0\xa5\xbf]"};
    static const char *const quants[] = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}"};
    size_t n = strlen(out);
    for (uint32_t k = 1 + rng_below(r, 3); k > 0 && n + 40 < cap; k--) {
        if (d > 0 && rng_below(r, 4) == 0) {
            strcat(out, rng_below(r, 2) ? "(" : "(?:");
            random_pattern(r, out, cap, d - 1);
            strcat(out, "|");
            random_pattern(r, out, cap, d - 1);
            strcat(out, ")");
        } else {
            strcat(out, atoms[rng_below(r, sizeof atoms / sizeof *atoms)]);
        }
        strcat(out, quants[rng_below(r, sizeof quants / sizeof *quants)]);
        n = strlen(out);
    }
}

/* From state p, bytes 0x80-0xBF can finish the character begun (k more of them), depth first. */
static bool finishes_char(const json_prefix *p, int k) {
    if (k == 0) return true;
    for (int b = 0x80; b <= 0xBF; b++) {
        char c = (char)b;
        if (!json_prefix_accepts(p, &c, 1)) continue;
        json_prefix *q = malloc(sizeof *q);
        prefix_copy(q, p);
        json_prefix_feed(q, &c, 1);
        bool ok = finishes_char(q, k - 1);
        free(q);
        if (ok) return true;
    }
    return false;
}

/* Every lead byte the state takes can become a whole character (the state after it is no dead
 * end, which a search from the state alone would not see). */
static void check_lead_bytes(const json_schema *s, const char *t, size_t cut) {
    static json_prefix p, q;
    json_prefix_init(&p, s);
    if (!json_prefix_feed(&p, t, cut)) return;
    for (int b = 0xC2; b <= 0xF4; b++) {
        char c = (char)b;
        if (!json_prefix_accepts(&p, &c, 1)) continue;
        prefix_copy(&q, &p);
        json_prefix_feed(&q, &c, 1);
        if (!finishes_char(&q, b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1))
            fail_msg("lead byte 0x%02X after %zu bytes of %s takes no continuation: a dead end", b, cut, t);
    }
}

/* Random patterns and strings: the automaton takes "s" whole exactly when PCRE2 (UTF) finds a
 * match in s (JSON Schema's patterns are searches, not anchored), byte by byte as whole; from a
 * prefix of an accepted one a whole string is reachable. */
static void test_pattern_against_pcre2(void **state) {
    (void)state;
    rng r;
    rng_seed(&r, 43);
    static const char *const chars[] = {"a", "b", "c", "x", "1", "7", ".", "\xc3\xa9", " ", "\xe2\x82\xac"};
    uint32_t yes = 0, no = 0;
    for (int it = 0; it < 800; it++) {
        char pat[512] = "";
        if (rng_below(&r, 3) == 0) strcat(pat, "^");
        random_pattern(&r, pat, sizeof pat - 2, 2);
        if (rng_below(&r, 3) == 0) strcat(pat, "$");
        json_t *sch = json_pack("{s:s,s:s}", "type", "string", "pattern", pat);
        json_schema *s = json_schema_compile(sch, true);
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
        assert_non_null(re);
        if (!s) { /* only when no string written raw matches, or the pattern is too long */
            if (!strstr(cd_errmsg(), "too long")) fail_msg("%s: %s", pat, cd_errmsg());
            pcre2_code_free(re);
            json_decref(sch);
            continue;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        for (int k = 0; k < 16; k++) {
            char text[128] = "\"";
            for (uint32_t c = rng_below(&r, 9); c > 0; c--)
                strcat(text, chars[rng_below(&r, sizeof chars / sizeof *chars)]);
            size_t n = strlen(text);
            int m = pcre2_match(re, (PCRE2_SPTR)text + 1, n - 1, 0, 0, md, NULL);
            strcat(text, "\"");
            bool want = m >= 0, got = accepts_whole(s, text, n + 1);
            if (got != want) fail_msg("pattern %s, string %s: automaton %d, pcre2 %d", pat, text, got, want);
            check_bytewise(s, text, n + 1, got);
            if (got) {
                current = sch;
                check_completes(s, text, rng_below(&r, (uint32_t)n + 1), true);
                check_lead_bytes(s, text, rng_below(&r, (uint32_t)n + 1));
            }
            yes += want, no += !want;
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        json_schema_unref(s);
        json_decref(sch);
    }
    printf("  patterns: %u strings matched, %u not (automaton and PCRE2 agree on all)\n", yes, no);
    assert_true(yes > 1500 && no > 3000);
}

/* The id of text when it is one token (specials parsed), else -1. */
static int32_t one_token(const tokenizer *t, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, text, strlen(text), true, &ids, &n)) fail_msg("%s", cd_errmsg());
    int32_t id = n == 1 ? ids[0] : -1;
    free(ids);
    return id;
}

/* The mask's shortcuts at schema states equal running each token through the automaton. */
static void test_mask_at_schema_states(void **state) {
    (void)state;
    tokenizer *t = tu_qwen3_tokenizer();
    if (!t) fail_msg("%s", cd_errmsg());
    json_vocab v;
    assert_int_equal(json_vocab_init(&v, t), 0);
    int32_t n = tok_n_vocab(t);
    float *l = malloc((size_t)n * sizeof *l);
    assert_non_null(l);
    const char *schema = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 5}, "
                         "\"names\": {\"type\": \"array\", "
                         "\"items\": {\"enum\": [\"alpha\", \"alps\", 12, 125, null]}}, \"n\": {\"anyOf\": [{\"type\": "
                         "\"integer\"}, {\"type\": "
                         "\"object\", \"properties\": {\"q\": {\"type\": \"boolean\"}}, \"additionalProperties\": "
                         "{\"type\": \"string\"}}]}}, "
                         "\"required\": [\"name\", \"n\"]}";
    const char *texts[] = {
        "{\"name\":\"ab\xc3\xa9\",\"names\":[\"alps\",125,null,\"alpha\",12],\"n\":{\"q\":true,\"zz\":\"w\"}}",
        "{\n \"n\": -42,\n \"name\": \"\",\n \"names\": []\n}"};
    json_schema *s = compile_or_fail(schema, true);
    uint32_t states = 0, allowed = 0;
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(texts[k]);
        for (size_t cut = 0; cut <= len; cut += 1 + (k == 0)) {
            json_mask m;
            json_mask_init(&m, &v, s);
            if (!json_prefix_feed(&m.state, texts[k], cut)) fail_msg("refused %.*s", (int)cut, texts[k]);
            for (int32_t id = 0; id < n; id++) l[id] = id % 89 == 0 ? -INFINITY : 0.0f;
            json_mask_apply(&m, l, n);
            for (int32_t id = 0; id < n; id++) {
                bool want = id % 89 != 0 && json_mask_allows(&m, id);
                if ((l[id] == 0.0f) != want)
                    fail_msg("token %d at \"%.*s\": mask %d, automaton %d", id, (int)cut, texts[k], l[id] == 0.0f,
                             want);
                allowed += want;
            }
            json_mask_free(&m);
            states++;
        }
    }
    json_schema_unref(s);
    /* a tool call: the object, then "\n</tool_call>" (tokens may run from one into the other;
     * the </tool_call> token only in the tail), then only end tokens */
    s = compile_or_fail(
        "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get\"}, \"arguments\": {\"type\": "
        "\"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": [\"id\"]}}, "
        "\"required\": [\"name\", \"arguments\"]}",
        true);
    const char *call = "{\"name\": \"get\", \"arguments\": {\"id\": 7}}\n</tool_call>";
    size_t len = strlen(call), value_end = strlen(call) - strlen("\n</tool_call>");
    int32_t close_tag = one_token(t, "</tool_call>"), brace_nl = one_token(t, "}\n"), eos = one_token(t, "<|im_end|>");
    assert_true(close_tag >= 0 && brace_nl >= 0 && eos >= 0);
    for (size_t cut = 0; cut <= len; cut++) {
        json_mask m;
        json_mask_init(&m, &v, s);
        assert_int_equal(json_mask_set_tail(&m, "\n</tool_call>"), 0);
        if (!json_mask_feed(&m, call, cut)) fail_msg("refused %.*s", (int)cut, call);
        for (int32_t id = 0; id < n; id++) l[id] = 0.0f;
        json_mask_apply(&m, l, n);
        uint32_t here = 0;
        for (int32_t id = 0; id < n; id++) {
            bool want = json_mask_allows(&m, id);
            if ((l[id] == 0.0f) != want)
                fail_msg("token %d at \"%.*s\": mask %d, automaton %d", id, (int)cut, call, l[id] == 0.0f, want);
            here += want;
            allowed += want;
        }
        assert_true(here > 0); /* never a dead end */
        assert_true((l[close_tag] == 0.0f) == (cut == value_end + 1));
        if (cut == value_end - 1) assert_true(l[brace_nl] == 0.0f); /* "}\n": the value's end and the tail's start */
        assert_true((l[eos] == 0.0f) == (cut == len));
        assert_true(json_mask_done(&m) == (cut == len));
        for (int32_t id = 0; cut == len && id < n; id++) /* at the end: end tokens only */
            if (l[id] == 0.0f) assert_true(tok_is_eog(t, id));
        json_mask_free(&m);
        states++;
    }
    json_mask m;
    json_mask_init(&m, &v, s);
    assert_int_equal(json_mask_set_tail(&m, "\n</tool_call>"), 0);
    assert_false(json_mask_feed(&m, "{\"name\": \"put\"", 15)); /* a forced start must fit */
    json_mask_free(&m);
    /* lazy: free text (nothing masked) until <tool_call>; then the call and its tag; free again */
    json_mask_init(&m, &v, s);
    assert_int_equal(json_mask_set_tail(&m, "\n</tool_call>"), 0);
    json_mask_set_trigger(&m, one_token(t, "<tool_call>"), false);
    const char *text =
        "Let me look.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"id\": 7}}\n</tool_call>\nDone.\n<tool_call>";
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (tok_encode(t, text, strlen(text), true, &ids, &n_ids)) fail_msg("%s", cd_errmsg());
    uint32_t free_steps = 0, held_steps = 0;
    for (size_t k = 0; k < n_ids; k++) {
        for (int32_t id = 0; id < n; id++) l[id] = 0.0f;
        json_mask_apply(&m, l, n);
        uint32_t out = 0;
        for (int32_t id = 0; id < n; id++) out += l[id] != 0.0f;
        if (m.waiting) assert_int_equal(out, 0), free_steps++; /* free text: nothing masked, the end allowed */
        else assert_true(out > 100000), held_steps++;
        if (l[ids[k]] != 0.0f) fail_msg("token %zu (%d) of the text masked", k, ids[k]);
        json_mask_accept(&m, ids[k]);
    }
    assert_false(m.waiting); /* the second <tool_call> opened another call */
    assert_true(free_steps >= 6 && held_steps >= 10);
    json_mask_free(&m);
    /* once (parallel_tool_calls false): after the first call and its tag, only end tokens */
    json_mask_init(&m, &v, s);
    assert_int_equal(json_mask_set_tail(&m, "\n</tool_call>"), 0);
    json_mask_set_trigger(&m, one_token(t, "<tool_call>"), true);
    size_t k = 0;
    while (k < n_ids && !(json_mask_done(&m) && !m.waiting && k > 4)) json_mask_accept(&m, ids[k++]);
    assert_true(k < n_ids && json_mask_done(&m)); /* stopped right after </tool_call> */
    for (int32_t id = 0; id < n; id++) l[id] = 0.0f;
    json_mask_apply(&m, l, n);
    for (int32_t id = 0; id < n; id++)
        if ((l[id] == 0.0f) != tok_is_eog(t, id))
            fail_msg("once: token %d %s after the call", id, l[id] == 0.0f ? "allowed" : "masked");
    free(ids);
    json_mask_free(&m);
    json_schema *scalar = compile_or_fail("{\"type\": \"integer\"}", true);
    json_mask_init(&m, &v, scalar);
    assert_int_equal(json_mask_set_tail(&m, "x"), -1); /* where a number ends is not plain */
    json_mask_free(&m);
    json_schema_unref(scalar);
    printf("  %u schema states: %u tokens allowed in all\n", states, allowed);
    assert_true(states > 100 && allowed > 100000);
    json_schema_unref(s);
    free(l);
    json_vocab_free(&v);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_against_validator),
        cmocka_unit_test(test_pattern_against_pcre2),
        cmocka_unit_test(test_mask_at_schema_states),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
