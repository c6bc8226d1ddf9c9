/* A JSON Schema compiled for constrained generation (`response_format: {"type": "json_schema"}`):
 * a flat table of nodes that the prefix automaton (runtime/text/json_prefix.h) walks, so that
 * every reply it lets through is an instance of the schema.
 *
 *   {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
 *    "days": {"type": "integer"}}, "required": ["city"]}
 *     -> node 1: object, properties "city" -> 2, "days" -> 3 (sorted by key), required {city},
 *        no other keys;  node 2: string of at most 40 characters;  node 3: integer
 *
 * Enforced: type (one or a list), enum, const, properties, required, additionalProperties
 * (false, true or a schema), items, minItems, maxItems, minLength, maxLength, minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (of integers: not of other numbers), pattern (json_regex.h;
 * not with a length bound), anyOf, oneOf, a one-element allOf, $ref into the document ("#",
 * "#/$defs/..", any JSON pointer; recursion included; inside a subschema with "$id", "#" is
 * that subschema), OpenAPI's nullable, boolean schemas. Annotations are ignored, as JSON Schema
 * says (title, description, default, examples, format, ...), and so are unknown keywords.
 *
 * Narrower than JSON Schema on purpose, so that a prefix automaton stays small; every reply is
 * still an instance:
 *   - additionalProperties absent means none when properties are given (as OpenAI's strict mode
 *     and xgrammar have it); absent with no properties means any;
 *   - keys that are not declared are written without escapes;
 *   - integers are -?(0|[1-9][0-9]*); enum and const values are written as jansson writes them
 *     compactly (1 matches "1", not "1.0");
 *   - oneOf is read as anyOf (as llama.cpp does): a reply may match two of its branches;
 *   - a string with a length bound has no \u escapes (each character counts once), and one with
 *     a pattern no escapes at all (its characters are matched as written);
 *
 * Keywords that assert what is not enforced here (bounds of non-integers, multipleOf,
 * minProperties, uniqueItems, prefixItems, not, if/then/else, ...) are refused by name when the
 * schema is strict; otherwise they are ignored and the reply follows the rest (OpenAI's
 * non-strict mode promises no more). Schemas without any instance that fits are refused. */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/text/json_regex.h"

#define JSON_SCHEMA_MAX_NODES 2048
#define JSON_SCHEMA_MAX_PROPERTIES 64 /* per object: the automaton keeps one bit per key seen */
#define JSON_SCHEMA_MAX_BRANCHES 64   /* per anyOf, after nested ones are flattened */
#define JSON_SCHEMA_MAX_LITERAL_BYTES (256 * 1024)
#define JSON_SCHEMA_INT_LIMIT 999999999999999999LL /* bounded integers have at most 18 digits */

enum json_type {
    JSON_T_OBJECT = 1,
    JSON_T_ARRAY = 2,
    JSON_T_STRING = 4,
    JSON_T_NUMBER = 8,
    JSON_T_INTEGER = 16,
    JSON_T_BOOLEAN = 32,
    JSON_T_NULL = 64,
    JSON_T_ANY = 127,
};

typedef struct json_bytes {
    uint32_t off, len; /* into json_schema.bytes */
} json_bytes;

typedef struct json_property {
    json_bytes key; /* as written between the quotes (escaped as jansson writes it) */
    uint32_t node;
} json_property;

typedef struct json_node {
    uint8_t types;                /* JSON_T_* allowed (a union's are its branches') */
    uint8_t need;                 /* containers an instance needs at least (255: none fits), */
    uint8_t obj_depth, arr_depth; /* as an object / as an array */
    uint32_t branch, n_branch;    /* n_branch > 0: anyOf of branches[branch ..] (none a union) */
    uint32_t lit, n_lit;          /* n_lit > 0: one of literals[lit ..] (sorted by bytes) */
    uint32_t prop, n_prop;        /* object: properties[prop ..] (sorted by key bytes) */
    uint64_t required;            /* bit i: properties[prop + i] must appear */
    int32_t additional;           /* node of other keys' values; -1: no other keys */
    uint32_t items;               /* node of array items */
    uint32_t min_items, max_items;
    uint32_t min_len, max_len; /* string length in characters */
    uint8_t int_bounded;       /* an integer within [min_int, max_int] (minimum, maximum, exclusive*) */
    int64_t min_int, max_int;
    int32_t pattern; /* string: regexes[pattern] matches it (json_regex.h); -1: none */
} json_node;

typedef struct json_schema {
    uint32_t root;
    uint32_t n_nodes;
    json_node *nodes; /* nodes[0] is "any JSON value" */
    json_property *properties;
    uint32_t *branches;
    json_bytes *literals; /* whole JSON values, compact */
    json_regex *regexes;  /* the patterns */
    uint32_t n_regexes;
    char *bytes;
    atomic_int refs; /* shared by reference: json_schema_ref / json_schema_unref */
} json_schema;

/* Compiles a schema (a JSON object or boolean); strict refuses keywords it cannot enforce.
 * NULL with cd_errmsg() naming the problem and where ("properties.a.items: pattern is not
 * supported"). The result holds one reference. */
json_schema *json_schema_compile(const json_t *schema, bool strict);
/* Parses text first. */
json_schema *json_schema_compile_text(const char *text, bool strict);
/* "Any JSON object": what response_format json_object asks for. */
json_schema *json_schema_any_object(void);

json_schema *json_schema_ref(json_schema *s);
void json_schema_unref(json_schema *s); /* NULL is fine */
