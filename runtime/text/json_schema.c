#include "runtime/text/json_schema.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/json_prefix.h"

/* Keywords that assert something not enforced here: refused when strict (json_schema.h). */
static const char *const unenforced[] = {
    "patternProperties",
    "propertyNames",
    "multipleOf",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
};

/* Keywords a node enforces itself; beside $ref, anyOf or enum they would have to hold too. */
static const char *const enforced[] = {"type",
                                       "properties",
                                       "required",
                                       "additionalProperties",
                                       "items",
                                       "minItems",
                                       "maxItems",
                                       "minLength",
                                       "maxLength",
                                       "enum",
                                       "const",
                                       "anyOf",
                                       "oneOf",
                                       "allOf",
                                       "$ref",
                                       "nullable",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       "pattern"};

#define NEED_NONE 255 /* no instance within the depth limit */

typedef struct compiler {
    json_schema *s;
    const json_t *doc;
    bool strict;
    uint32_t n_props, cap_props, n_branches, cap_branches, n_lits, cap_lits, cap_regexes;
    size_t n_bytes, cap_bytes;
    const json_t **memo_of; /* [n_nodes]: the schema object each node was compiled from */
    uint8_t *done;          /* [n_nodes]: compiled (a union's branches known) */
    char where[512];        /* the path to the schema being compiled, for errors */
    uint32_t aliases;       /* $ref / allOf followed in a row (a cycle of them has no node) */
} compiler;

static int grow(void **p, uint32_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    uint32_t n = *cap ? *cap * 2 : 16;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q) return cd_fail("out of memory compiling a JSON schema");
    *p = q, *cap = n;
    return 0;
}

/* "where: what", a long path cut to its last 160 bytes. */
static int fail_at(const compiler *c, const char *what) {
    size_t n = strlen(c->where);
    const char *w = n > 160 ? c->where + n - 160 : c->where;
    return cd_fail("%s%s%s%s", n > 160 ? "..." : "", w, n ? ": " : "", what);
}

/* Appends ".name" to the error path; returns the old length to restore. */
static size_t enter(compiler *c, const char *name) {
    size_t n = strlen(c->where);
    snprintf(c->where + n, sizeof c->where - n, "%s%s", n ? "." : "", name);
    return n;
}

static void leave(compiler *c, size_t n) { c->where[n] = 0; }

static int add_bytes(compiler *c, const char *b, size_t n, json_bytes *out) {
    if (c->n_bytes + n > JSON_SCHEMA_MAX_LITERAL_BYTES) return fail_at(c, "the schema's names and values are too long");
    if (c->n_bytes + n > c->cap_bytes) {
        size_t cap = c->cap_bytes ? c->cap_bytes : 256;
        while (cap < c->n_bytes + n) cap *= 2;
        char *q = realloc(c->s->bytes, cap);
        if (!q) return cd_fail("out of memory compiling a JSON schema");
        c->s->bytes = q, c->cap_bytes = cap;
    }
    if (n) memcpy(c->s->bytes + c->n_bytes, b, n); /* bytes may be NULL while empty */
    *out = (json_bytes){(uint32_t)c->n_bytes, (uint32_t)n};
    c->n_bytes += n;
    return 0;
}

/* nodes, memo_of and done are allocated at JSON_SCHEMA_MAX_NODES (nodes trimmed at the end). */
static int new_node(compiler *c, const json_t *from, uint32_t *id) {
    json_schema *s = c->s;
    if (s->n_nodes == JSON_SCHEMA_MAX_NODES) return fail_at(c, "the schema has too many parts");
    *id = s->n_nodes++;
    s->nodes[*id] = (json_node){.types = JSON_T_ANY,
                                .additional = 0,
                                .items = 0,
                                .max_items = UINT32_MAX,
                                .max_len = UINT32_MAX,
                                .pattern = -1};
    c->memo_of[*id] = from;
    c->done[*id] = 0;
    return 0;
}

static bool has_any(const json_t *o, const char *const *keys, size_t n, const char *except, const char **found) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], except) && json_object_get(o, keys[i])) return *found = keys[i], true;
    return false;
}

/* Other enforced keywords beside one that replaces the node ($ref, allOf, anyOf, enum). */
static int alone(compiler *c, const json_t *o, const char *kw, const char *const *allowed, size_t n_allowed) {
    for (size_t i = 0; i < sizeof enforced / sizeof *enforced; i++) {
        const char *k = enforced[i];
        bool ok = !strcmp(k, kw);
        for (size_t a = 0; a < n_allowed; a++) ok |= !strcmp(k, allowed[a]);
        if (!ok && json_object_get(o, k)) {
            if (!c->strict) continue;
            char msg[160];
            snprintf(msg, sizeof msg, "%s beside %s is not supported", k, kw);
            return fail_at(c, msg);
        }
    }
    return 0;
}

/* Resolves a JSON pointer ("#", "#/$defs/x", "#/properties/a~1b") in the document. */
static const json_t *resolve(const compiler *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *at = c->doc;
    const char *p = ref + 1;
    while (*p == '/' && at) {
        char part[256];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (n + 1 == sizeof part) return NULL;
            part[n++] = ch;
        }
        part[n] = 0;
        if (json_is_object(at)) at = json_object_get(at, part);
        else if (json_is_array(at)) {
            char *end;
            long i = strtol(part, &end, 10);
            at = *part && !*end && i >= 0 ? json_array_get(at, (size_t)i) : NULL;
        } else at = NULL;
    }
    return *p ? NULL : at;
}

static int compile(compiler *c, const json_t *v, uint32_t *out);
static int node_fields(compiler *c, const json_t *o, uint32_t id);

static int types_field(compiler *c, const json_t *o, uint8_t *types) {
    const json_t *t = json_object_get(o, "type");
    if (!t) return 0;
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    const json_t *one = t;
    size_t i, n = json_is_array(t) ? json_array_size(t) : 1;
    if (!n) return fail_at(c, "type is an empty list");
    *types = 0;
    for (i = 0; i < n; i++) {
        if (json_is_array(t)) one = json_array_get(t, i);
        const char *name = json_string_value(one);
        size_t k = 0;
        while (name && k < 7 && strcmp(name, names[k])) k++;
        if (!name || k == 7)
            return fail_at(c, "type must be object, array, string, number, integer, boolean or null (or a list)");
        *types |= (uint8_t)(1u << k);
    }
    if (*types & JSON_T_NUMBER) *types |= JSON_T_INTEGER;
    return 0;
}

static uint8_t type_of(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return JSON_T_OBJECT;
    case JSON_ARRAY: return JSON_T_ARRAY;
    case JSON_STRING: return JSON_T_STRING;
    case JSON_INTEGER: return JSON_T_INTEGER;
    case JSON_REAL: return JSON_T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE: return JSON_T_BOOLEAN;
    default: return JSON_T_NULL;
    }
}

static int cmp_bytes(const char *base, json_bytes a, json_bytes b) {
    int r = memcmp(base + a.off, base + b.off, a.len < b.len ? a.len : b.len);
    return r ? r : (a.len > b.len) - (a.len < b.len);
}

/* enum / const: each value of the node's types, written compactly, sorted, duplicates dropped. */
static int literals_field(compiler *c, const json_t *o, json_node *nd) {
    const json_t *en = json_object_get(o, "enum");
    if (!json_is_array(en) || !json_array_size(en)) return fail_at(c, "enum must be a non-empty array");
    size_t i;
    const json_t *x;
    nd->lit = c->n_lits;
    json_array_foreach(en, i, x) {
        uint8_t t = type_of(x);
        if (!(nd->types & t) && !(t == JSON_T_INTEGER && (nd->types & JSON_T_NUMBER))) continue;
        char *text = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        if (!text) return cd_fail("out of memory compiling a JSON schema");
        json_bytes b;
        int rc = grow((void **)&c->s->literals, &c->cap_lits, c->n_lits + 1, sizeof b) ||
            add_bytes(c, text, strlen(text), &b);
        free(text);
        if (rc) return -1;
        uint32_t k = c->n_lits++; /* insertion into the sorted run */
        while (k > nd->lit && cmp_bytes(c->s->bytes, c->s->literals[k - 1], b) > 0)
            c->s->literals[k] = c->s->literals[k - 1], k--;
        if (k > nd->lit && !cmp_bytes(c->s->bytes, c->s->literals[k - 1], b)) {
            memmove(&c->s->literals[k], &c->s->literals[k + 1], (c->n_lits - 1 - k) * sizeof b);
            c->n_lits--;
        } else c->s->literals[k] = b;
    }
    nd->n_lit = c->n_lits - nd->lit;
    if (!nd->n_lit) return fail_at(c, "no value of enum or const is of the schema's type");
    return 0;
}

static int count_field(compiler *c, const json_t *o, const char *k, uint32_t *out) {
    const json_t *v = json_object_get(o, k);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s must be a non-negative integer", k);
        return fail_at(c, msg);
    }
    json_int_t n = json_integer_value(v);
    *out = n >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)n;
    return 0;
}

/* A key as written between its quotes (malloc'd), or NULL: out of memory. */
static char *encode_key(const char *key) {
    json_t *js = json_string(key);
    char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    if (!q) return NULL;
    size_t n = strlen(q);
    memmove(q, q + 1, n - 2);
    q[n - 2] = 0;
    return q;
}

static int property_key(compiler *c, const char *key, json_bytes *out) {
    char *q = encode_key(key);
    if (!q) return cd_fail("out of memory compiling a JSON schema");
    int rc = add_bytes(c, q, strlen(q), out);
    free(q);
    return rc;
}

static int object_fields(compiler *c, const json_t *o, uint32_t id) {
    const json_t *props = json_object_get(o, "properties"), *req = json_object_get(o, "required");
    const json_t *add = json_object_get(o, "additionalProperties");
    if (props && !json_is_object(props)) return fail_at(c, "properties must be an object");
    size_t n = props ? json_object_size(props) : 0;
    if (n > JSON_SCHEMA_MAX_PROPERTIES) return fail_at(c, "an object may declare at most 64 properties");
    uint32_t first = c->n_props;
    if (grow((void **)&c->s->properties, &c->cap_props, first + n, sizeof *c->s->properties)) return -1;
    c->n_props += (uint32_t)n; /* reserved: nested objects append after these */
    const char *key;
    const json_t *sub;
    uint32_t k = 0;
    json_object_foreach((json_t *)props, key, sub) {
        json_property p;
        size_t mark = enter(c, "properties"), mark2 = enter(c, key);
        int rc = property_key(c, key, &p.key) || compile(c, sub, &p.node);
        leave(c, mark2), leave(c, mark);
        if (rc) return -1;
        uint32_t at = first + k++;
        while (at > first && cmp_bytes(c->s->bytes, c->s->properties[at - 1].key, p.key) > 0)
            c->s->properties[at] = c->s->properties[at - 1], at--;
        c->s->properties[at] = p;
    }
    json_node *nd = &c->s->nodes[id];
    nd->prop = first, nd->n_prop = (uint32_t)n;
    if (req && !json_is_array(req)) return fail_at(c, "required must be an array of property names");
    size_t i;
    json_array_foreach(req, i, sub) {
        const char *name = json_string_value(sub);
        if (!name) return fail_at(c, "required must be an array of property names");
        char *q = encode_key(name);
        if (!q) return cd_fail("out of memory compiling a JSON schema");
        uint32_t p = 0;
        for (json_bytes k; p < n; p++)
            if (k = c->s->properties[first + p].key, k.len == strlen(q) && !memcmp(c->s->bytes + k.off, q, k.len))
                break;
        free(q);
        if (p == n) {
            char msg[160];
            snprintf(msg, sizeof msg, "required names %.64s, which is not in properties", name);
            return fail_at(c, msg);
        }
        c->s->nodes[id].required |= 1ull << p;
    }
    int32_t other = n ? -1 : 0;
    if (json_is_false(add)) other = -1;
    else if (add) {
        size_t mark = enter(c, "additionalProperties");
        uint32_t a;
        int rc = compile(c, add, &a);
        leave(c, mark);
        if (rc) return -1;
        other = (int32_t)a;
    }
    c->s->nodes[id].additional = other;
    return 0;
}

static int array_fields(compiler *c, const json_t *o, uint32_t id) {
    const json_t *items = json_object_get(o, "items");
    uint32_t it = 0, lo = 0, hi = UINT32_MAX;
    if (count_field(c, o, "minItems", &lo) || count_field(c, o, "maxItems", &hi)) return -1;
    if (json_is_false(items)) hi = 0;
    else if (items) {
        if (json_is_array(items)) return fail_at(c, "items as an array (tuple form) is not supported");
        size_t mark = enter(c, "items");
        int rc = compile(c, items, &it);
        leave(c, mark);
        if (rc) return -1;
    }
    if (lo > hi) return fail_at(c, "minItems is above maxItems");
    json_node *nd = &c->s->nodes[id];
    nd->items = it, nd->min_items = lo, nd->max_items = hi;
    return 0;
}

/* pattern: a regex over the string's characters (json_regex.h). With a length bound the two
 * could leave no string between them mid-way: refused when strict, the pattern left out else;
 * so is a pattern json_regex cannot take. */
static int pattern_field(compiler *c, const json_t *o, uint32_t id) {
    const json_t *v = json_object_get(o, "pattern");
    json_node *nd = &c->s->nodes[id];
    if (!v || !(nd->types & JSON_T_STRING)) return 0;
    if (!json_is_string(v)) return fail_at(c, "pattern must be a string");
    if (nd->min_len || nd->max_len != UINT32_MAX)
        return c->strict ? fail_at(c, "pattern with minLength or maxLength is not supported") : 0;
    json_regex re;
    if (json_regex_compile(&re, json_string_value(v))) {
        char why[256]; /* fail_at writes where cd_errmsg() reads */
        snprintf(why, sizeof why, "%s", cd_errmsg());
        return c->strict ? fail_at(c, why) : 0;
    }
    uint32_t cap = c->cap_regexes;
    if (grow((void **)&c->s->regexes, &cap, c->s->n_regexes + 1, sizeof re)) {
        json_regex_free(&re);
        return -1;
    }
    c->cap_regexes = cap;
    c->s->regexes[c->s->n_regexes] = re;
    nd->pattern = (int32_t)c->s->n_regexes++;
    return 0;
}

static int string_fields(compiler *c, const json_t *o, uint32_t id) {
    uint32_t lo = 0, hi = UINT32_MAX;
    if (count_field(c, o, "minLength", &lo) || count_field(c, o, "maxLength", &hi)) return -1;
    if (lo > hi) return fail_at(c, "minLength is above maxLength");
    c->s->nodes[id].min_len = lo, c->s->nodes[id].max_len = hi;
    return pattern_field(c, o, id);
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number; draft 4's boolean
 * exclusives too) of an integer: as an inclusive [min_int, max_int] within 18 digits. Of other
 * numbers they are not enforced (a fraction's digits would need another automaton). */
static int int_bounds(compiler *c, const json_t *o, uint32_t id) {
    static const char *const kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    const json_t *v[4];
    bool any = false;
    for (int i = 0; i < 4; i++) any |= (v[i] = json_object_get(o, kw[i])) != NULL;
    json_node *nd = &c->s->nodes[id];
    if (!any || !(nd->types & JSON_T_INTEGER)) return 0;
    if (nd->types & JSON_T_NUMBER) {
        if (!c->strict) return 0;
        return fail_at(c,
                       "minimum / maximum of numbers that are not integers are not supported (of integers they are)");
    }
    const double limit = (double)JSON_SCHEMA_INT_LIMIT; /* 1e18 as a double: compared, never stored */
    int64_t lo = -JSON_SCHEMA_INT_LIMIT, hi = JSON_SCHEMA_INT_LIMIT;
    for (int i = 0; i < 4; i++) {
        if (!v[i] || (i >= 2 && json_is_boolean(v[i]))) continue;
        if (!json_is_number(v[i])) {
            char msg[96];
            snprintf(msg, sizeof msg, "%s must be a number", kw[i]);
            return fail_at(c, msg);
        }
        double x = json_number_value(v[i]);
        bool exclusive = i >= 2 || json_is_true(v[i + 2]); /* draft 4: "exclusiveMinimum": true */
        x = i % 2 == 0 ? (exclusive ? floor(x) + 1 : ceil(x)) : (exclusive ? ceil(x) - 1 : floor(x));
        if (x >= limit || x <= -limit) { /* past 18 digits: no bound that way, or no integer at all */
            if ((i % 2 == 0) == (x > 0)) lo = 1, hi = 0;
            continue;
        }
        if (i % 2 == 0 && (int64_t)x > lo) lo = (int64_t)x;
        if (i % 2 == 1 && (int64_t)x < hi) hi = (int64_t)x;
    }
    if (lo > hi) return fail_at(c, "no integer lies between minimum and maximum (within 18 digits)");
    nd->int_bounded = 1, nd->min_int = lo, nd->max_int = hi;
    return 0;
}

/* anyOf / oneOf: the branches, nested unions flattened. */
static int union_field(compiler *c, const json_t *alts, const char *kw, uint32_t id) {
    if (!json_is_array(alts) || !json_array_size(alts)) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s must be a non-empty array of schemas", kw);
        return fail_at(c, msg);
    }
    uint32_t list[JSON_SCHEMA_MAX_BRANCHES], n = 0;
    size_t i;
    const json_t *a;
    json_array_foreach(alts, i, a) {
        if (json_is_false(a)) continue; /* matches nothing: never taken */
        char idx[32];
        snprintf(idx, sizeof idx, "%s[%zu]", kw, i);
        size_t mark = enter(c, idx);
        uint32_t b;
        int rc = compile(c, a, &b);
        leave(c, mark);
        if (rc) return -1;
        const json_node *bn = &c->s->nodes[b];
        if (!c->done[b]) return fail_at(c, "a schema that refers to itself before reading anything is not supported");
        uint32_t take = bn->n_branch ? bn->n_branch : 1;
        if (n + take > JSON_SCHEMA_MAX_BRANCHES) return fail_at(c, "anyOf has more than 64 branches");
        for (uint32_t k = 0; k < take; k++) list[n++] = bn->n_branch ? c->s->branches[bn->branch + k] : b;
    }
    if (!n) return fail_at(c, "no branch of the union can match");
    if (grow((void **)&c->s->branches, &c->cap_branches, c->n_branches + n, sizeof *list)) return -1;
    memcpy(c->s->branches + c->n_branches, list, n * sizeof *list);
    json_node *nd = &c->s->nodes[id];
    nd->branch = c->n_branches, nd->n_branch = n, nd->types = 0;
    for (uint32_t k = 0; k < n; k++) nd->types |= c->s->nodes[list[k]].types;
    c->n_branches += n;
    return 0;
}

/* A schema that stands for another ($ref, one-element allOf): the same node. */
static int alias(compiler *c, const json_t *o, const char *kw, const json_t *to, uint32_t *out) {
    if (alone(c, o, kw, NULL, 0)) return -1;
    if (++c->aliases > 32) return fail_at(c, "$ref / allOf lead back to themselves without a schema between");
    size_t mark = enter(c, kw);
    int rc = compile(c, to, out);
    leave(c, mark);
    c->aliases--;
    return rc;
}

static int compile_object(compiler *c, const json_t *o, uint32_t *out) {
    const char *bad;
    if (c->strict && has_any(o, unenforced, sizeof unenforced / sizeof *unenforced, "", &bad)) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "%s is not supported (a strict schema may use only what cinder enforces: docs/STRUCTURED.md)", bad);
        return fail_at(c, msg);
    }
    const json_t *ref = json_object_get(o, "$ref"), *all = json_object_get(o, "allOf");
    if (ref) {
        const json_t *to = json_is_string(ref) ? resolve(c, json_string_value(ref)) : NULL;
        if (!to) return fail_at(c, "$ref must point into this schema (\"#/$defs/name\")");
        return alias(c, o, "$ref", to, out);
    }
    if (all && (!json_is_array(all) || json_array_size(all) != 1)) {
        if (c->strict) return fail_at(c, "allOf is supported with one schema only");
    } else if (all) return alias(c, o, "allOf", json_array_get(all, 0), out);
    if (new_node(c, o, out)) return -1;
    uint32_t aliases = c->aliases;
    c->aliases = 0; /* a node between: the $refs inside it start a new row */
    int rc = node_fields(c, o, *out);
    c->aliases = aliases;
    return rc;
}

/* What a node itself holds: a union, an enum, or the keywords of its types. */
static int node_fields(compiler *c, const json_t *o, uint32_t id) {
    const json_t *alts = json_object_get(o, "anyOf");
    const char *kw = alts ? "anyOf" : "oneOf";
    if (!alts) alts = json_object_get(o, "oneOf");
    if (alts) {
        static const char *const ok[] = {"anyOf", "oneOf"};
        if (alone(c, o, kw, ok, 2) || union_field(c, alts, kw, id)) return -1;
        c->done[id] = 1;
        return 0;
    }
    uint8_t types = JSON_T_ANY;
    if (types_field(c, o, &types)) return -1;
    if (json_is_true(json_object_get(o, "nullable"))) types |= JSON_T_NULL;
    c->s->nodes[id].types = types;
    if (json_object_get(o, "enum") || json_object_get(o, "const")) {
        static const char *const ok[] = {"type", "nullable"};
        const json_t *cn = json_object_get(o, "const");
        if (cn && json_object_get(o, "enum")) return fail_at(c, "enum and const together are not supported");
        if (alone(c, o, cn ? "const" : "enum", ok, 2)) return -1;
        json_node nd = c->s->nodes[id];
        json_t *wrap = cn ? json_pack("{s:[O]}", "enum", cn) : NULL;
        if (cn && !wrap) return cd_fail("out of memory compiling a JSON schema");
        int rc = literals_field(c, wrap ? wrap : o, &nd);
        json_decref(wrap);
        if (rc) return -1;
        c->s->nodes[id] = nd;
        c->done[id] = 1;
        return 0;
    }
    if (object_fields(c, o, id) || array_fields(c, o, id) || string_fields(c, o, id) || int_bounds(c, o, id)) return -1;
    c->done[id] = 1;
    return 0;
}

static int compile(compiler *c, const json_t *v, uint32_t *out) {
    for (uint32_t i = 1; i < c->s->n_nodes; i++) /* compiled already (a $ref target, recursion) */
        if (c->memo_of[i] == v) return *out = i, 0;
    if (json_is_true(v)) return *out = 0, 0;
    if (json_is_false(v)) return fail_at(c, "the schema false matches nothing");
    if (!json_is_object(v)) return fail_at(c, "a schema must be an object or a boolean");
    if (strlen(c->where) > sizeof c->where - 64) return fail_at(c, "the schema is nested too deeply");
    /* "$id" makes a schema a resource of its own: "#..." inside it points into it (how a
     * tool's parameters keep their $refs when embedded in a larger schema) */
    const json_t *doc = c->doc;
    if (json_is_string(json_object_get(v, "$id"))) c->doc = v;
    int rc = compile_object(c, v, out);
    c->doc = doc;
    return rc;
}

/* need: containers an instance needs at least (literals are matched as bytes: none). A fixpoint
 * from "none fits", so recursive schemas converge on their shallowest instance. */
static uint8_t need_of(const json_schema *s, const uint8_t *need, uint32_t i, uint8_t *obj, uint8_t *arr) {
    const json_node *n = &s->nodes[i];
    *obj = *arr = NEED_NONE;
    if (n->n_lit) return 0;
    if (n->n_branch) {
        uint8_t m = NEED_NONE;
        for (uint32_t k = 0; k < n->n_branch; k++)
            m = need[s->branches[n->branch + k]] < m ? need[s->branches[n->branch + k]] : m;
        return m;
    }
    unsigned o = 1, a = 1;
    for (uint32_t p = 0; p < n->n_prop; p++)
        if (n->required >> p & 1)
            o = need[s->properties[n->prop + p].node] + 1u > o ? need[s->properties[n->prop + p].node] + 1u : o;
    if (n->min_items) a = need[n->items] + 1u;
    if (n->max_items == 0 && n->min_items) a = NEED_NONE;
    *obj = o > JSON_PREFIX_MAX_DEPTH ? NEED_NONE : (uint8_t)o;
    *arr = a > JSON_PREFIX_MAX_DEPTH ? NEED_NONE : (uint8_t)a;
    uint8_t m = n->types & ~(JSON_T_OBJECT | JSON_T_ARRAY) ? 0 : NEED_NONE;
    if ((n->types & JSON_T_OBJECT) && *obj < m) m = *obj;
    if ((n->types & JSON_T_ARRAY) && *arr < m) m = *arr;
    return m;
}

static int depths(json_schema *s) {
    uint8_t *need = malloc(s->n_nodes);
    if (!need) return cd_fail("out of memory compiling a JSON schema");
    memset(need, NEED_NONE, s->n_nodes);
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < s->n_nodes; i++) {
            uint8_t o, a, m = need_of(s, need, i, &o, &a);
            if (m != need[i] || o != s->nodes[i].obj_depth || a != s->nodes[i].arr_depth) changed = true;
            need[i] = m, s->nodes[i].need = m, s->nodes[i].obj_depth = o, s->nodes[i].arr_depth = a;
        }
    }
    bool fits = need[s->root] != NEED_NONE;
    free(need);
    return fits ? 0 : cd_fail("the schema has no instance nested at most %d deep", JSON_PREFIX_MAX_DEPTH);
}

json_schema *json_schema_compile(const json_t *schema, bool strict) {
    compiler c = {.doc = schema, .strict = strict};
    c.s = calloc(1, sizeof *c.s);
    c.memo_of = calloc(JSON_SCHEMA_MAX_NODES, sizeof *c.memo_of);
    c.done = calloc(JSON_SCHEMA_MAX_NODES, 1);
    if (c.s) c.s->nodes = malloc(JSON_SCHEMA_MAX_NODES * sizeof *c.s->nodes), c.s->refs = 1;
    uint32_t any;
    if (!c.s || !c.memo_of || !c.done || !c.s->nodes) {
        free(c.memo_of);
        free(c.done);
        json_schema_unref(c.s);
        cd_fail("out of memory compiling a JSON schema");
        return NULL;
    }
    new_node(&c, NULL, &any);
    c.done[any] = 1;
    int rc = compile(&c, schema, &c.s->root);
    for (uint32_t i = 0; !rc && i < c.s->n_nodes; i++) /* a union reached through its own $ref */
        for (uint32_t k = 0; k < c.s->nodes[i].n_branch; k++)
            if (c.s->nodes[c.s->branches[c.s->nodes[i].branch + k]].n_branch)
                rc = cd_fail("a schema that refers to itself before reading anything is not supported");
    if (!rc) rc = depths(c.s);
    json_node *trim = rc ? NULL : realloc(c.s->nodes, c.s->n_nodes * sizeof *trim);
    if (trim) c.s->nodes = trim;
    free(c.memo_of);
    free(c.done);
    if (rc) {
        json_schema_unref(c.s);
        return NULL;
    }
    return c.s;
}

json_schema *json_schema_compile_text(const char *text, bool strict) {
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    if (!j) {
        cd_fail("the schema is not JSON: %s (line %d)", e.text, e.line);
        return NULL;
    }
    json_schema *s = json_schema_compile(j, strict);
    json_decref(j);
    return s;
}

json_schema *json_schema_any_object(void) {
    json_t *o = json_pack("{s:s}", "type", "object");
    json_schema *s = o ? json_schema_compile(o, true) : NULL;
    json_decref(o);
    return s;
}

json_schema *json_schema_ref(json_schema *s) {
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void json_schema_unref(json_schema *s) {
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    free(s->nodes);
    free(s->properties);
    free(s->branches);
    free(s->literals);
    for (uint32_t i = 0; i < s->n_regexes; i++) json_regex_free(&s->regexes[i]);
    free(s->regexes);
    free(s->bytes);
    free(s);
}
