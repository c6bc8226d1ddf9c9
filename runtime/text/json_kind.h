/* What a JSON value is, in words, for errors that name what was given instead ("expected a
 * string, got an array"): shared by the chat renderers (chat.c, chat_coder.c). */
#pragma once
#include <jansson.h>

static inline const char *json_kind(const json_t *v) {
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "?";
}
