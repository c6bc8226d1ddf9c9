#include "runtime/text/toolcall.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/json_jinja.h"
#include "runtime/text/slice.h"
#include "runtime/text/toolcall_coder.h"

/* ---- the raw text of the "arguments" value ---------------------------------------------- */

static size_t skip_ws(slice s, size_t i) {
    while (i < s.n && is_ws(s.p[i])) i++;
    return i;
}

/* End of the JSON string whose opening quote is at i. The text is known to be valid JSON
 * (jansson parsed it), so only the structure matters here. */
static size_t skip_string(slice s, size_t i) {
    for (i++; i < s.n; i++) {
        if (s.p[i] == '\\') i++;
        else if (s.p[i] == '"') return i + 1;
    }
    return s.n;
}

static size_t skip_value(slice s, size_t i) {
    if (i >= s.n) return s.n;
    if (s.p[i] == '"') return skip_string(s, i);
    if (s.p[i] == '{' || s.p[i] == '[') {
        int depth = 0;
        while (i < s.n) {
            char c = s.p[i];
            if (c == '"') {
                i = skip_string(s, i);
                continue;
            }
            if (c == '{' || c == '[') depth++;
            if ((c == '}' || c == ']') && --depth == 0) return i + 1;
            i++;
        }
        return s.n;
    }
    while (i < s.n && !is_ws(s.p[i]) && s.p[i] != ',' && s.p[i] != '}' && s.p[i] != ']') i++;
    return i;
}

/* The bytes of the top-level object's "arguments" value, spelled without escapes; false when
 * not found that way (the caller then serializes the parsed value instead). */
static bool arguments_span(slice obj, slice *out) {
    size_t i = skip_ws(obj, 0);
    if (i >= obj.n || obj.p[i] != '{') return false;
    for (i = skip_ws(obj, i + 1); i < obj.n && obj.p[i] == '"';) {
        size_t key_end = skip_string(obj, i);
        slice key = {obj.p + i + 1, key_end - i - 2};
        i = skip_ws(obj, key_end);
        if (i >= obj.n || obj.p[i] != ':') return false;
        size_t v = skip_ws(obj, i + 1), v_end = skip_value(obj, v);
        if (key.n == 9 && memcmp(key.p, "arguments", 9) == 0) {
            *out = (slice){obj.p + v, v_end - v};
            return true;
        }
        i = skip_ws(obj, v_end);
        if (i < obj.n && obj.p[i] == ',') i = skip_ws(obj, i + 1);
    }
    return false;
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* One block's inner text -> {"type": "function", "function": {"name", "arguments"}}, or
 * NULL when it is not a tool call. */
static json_t *parse_call(slice inner) {
    inner = strip_ws(inner);
    json_t *obj = json_loadb(inner.p, inner.n, JSON_REJECT_DUPLICATES, NULL);
    const json_t *name = json_object_get(obj, "name");
    const json_t *args = json_object_get(obj, "arguments");
    json_t *call = NULL;
    if (!json_is_string(name)) goto done;
    json_t *args_text = NULL;
    slice span;
    if (!args) {
        args_text = json_string("{}");
    } else if (json_is_string(args)) {
        args_text = json_stringn(json_string_value(args), json_string_length(args));
    } else if (arguments_span(inner, &span)) {
        args_text = json_stringn(span.p, span.n);
    } else {
        char *s = NULL;
        size_t n = 0;
        if (json_jinja_dumps(args, &s, &n) == 0) args_text = json_stringn(s, n);
        free(s);
    }
    if (!args_text) goto done;
    call = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name", name, "arguments", args_text);
done:
    json_decref(obj);
    return call;
}

/* Tool calls from the text after the reasoning; NULL when there are none or any block is
 * not a tool call. *content_end is where the content stops (the first block). Each block's
 * inner text goes to inner[] (up to max of them) when inner is not NULL. */
static json_t *parse_calls(slice rest, toolcall_format f, size_t *content_end, slice *inner, size_t max) {
    ptrdiff_t first = find_first(rest, LIT("<tool_call>"));
    if (first < 0) return NULL;
    json_t *calls = json_array();
    if (!calls) return NULL;
    for (size_t at = (size_t)first;;) {
        slice after = tail(rest, at + LIT("<tool_call>").n);
        ptrdiff_t close = find_first(after, LIT("</tool_call>"));
        slice block = close < 0 ? after : (slice){after.p, (size_t)close};
        size_t k = json_array_size(calls);
        if (inner && k < max) inner[k] = block;
        json_t *call =
            f.template == CHAT_TEMPLATE_QWEN3_CODER ? toolcall_coder_call(block, f.tools) : parse_call(block);
        if (!call || json_array_append_new(calls, call) != 0) {
            json_decref(calls);
            return NULL;
        }
        if (close < 0) break; /* unterminated last block */
        slice next = tail(after, (size_t)close + LIT("</tool_call>").n);
        ptrdiff_t open = find_first(next, LIT("<tool_call>"));
        if (open < 0) break;
        at = (size_t)(next.p - rest.p) + (size_t)open;
    }
    *content_end = (size_t)first;
    return calls;
}

/* The text after the reasoning (the whole text without any); the reasoning itself. in_think:
 * the prompt opened the block (toolcall_format.in_think). */
static slice split_reasoning(slice all, bool in_think, slice *reasoning, bool *has_reasoning) {
    *reasoning = (slice){NULL, 0};
    *has_reasoning = false;
    if (find_first(all, LIT("</think>")) >= 0) {
        slice before = rstrip_nl((slice){all.p, (size_t)find_first(all, LIT("</think>"))});
        ptrdiff_t open = find_last(before, LIT("<think>"));
        *reasoning = lstrip_nl(open < 0 ? before : tail(before, (size_t)open + LIT("<think>").n));
        *has_reasoning = true;
        return lstrip_nl(tail(all, (size_t)find_last(all, LIT("</think>")) + LIT("</think>").n));
    }
    if (in_think) { /* still thinking when the reply stopped: reasoning, as an open block's is */
        slice r = lstrip_nl(all);
        while (r.n && is_ws(r.p[r.n - 1])) r.n--;
        *reasoning = r;
        *has_reasoning = true;
        return (slice){all.p + all.n, 0};
    }
    if (starts_with(strip_ws(all), LIT("<think>"))) {
        slice s = strip_ws(all);
        *reasoning = lstrip_nl(tail(s, LIT("<think>").n));
        *has_reasoning = true;
        return (slice){s.p + s.n, 0};
    }
    return all;
}

size_t toolcall_spans(const char *text, size_t len, size_t *off, size_t *n, size_t max) {
    return toolcall_spans_as(text, len, (toolcall_format){0}, off, n, max);
}

size_t toolcall_spans_as(const char *text, size_t len, toolcall_format f, size_t *off, size_t *n, size_t max) {
    slice reasoning, inner[64];
    bool has_reasoning;
    slice rest = split_reasoning((slice){text, len}, f.in_think, &reasoning, &has_reasoning);
    size_t content_end;
    json_t *calls = parse_calls(rest, f, &content_end, inner, 64);
    size_t count = json_array_size(calls), kept = count < max ? count : max;
    if (kept > 64) kept = 64;
    for (size_t k = 0; k < kept; k++) {
        off[k] = (size_t)(inner[k].p - text);
        n[k] = inner[k].n;
    }
    json_decref(calls);
    return count;
}

int toolcall_parse(const char *text, size_t len, json_t **message) {
    return toolcall_parse_as(text, len, (toolcall_format){0}, message);
}

int toolcall_parse_as(const char *text, size_t len, toolcall_format f, json_t **message) {
    *message = NULL;
    slice all = {text, len}, reasoning;
    bool has_reasoning;
    slice rest = split_reasoning(all, f.in_think, &reasoning, &has_reasoning);

    size_t content_end = rest.n;
    json_t *calls = parse_calls(rest, f, &content_end, NULL, 0);
    slice content = {rest.p, content_end};
    if (calls) content = strip_ws(content);

    json_t *msg = json_object();
    int rc = msg ? json_object_set_new(msg, "role", json_string("assistant")) : -1;
    if (rc == 0) {
        json_t *c = calls && content.n == 0 ? json_null() : json_stringn(content.p, content.n);
        rc = c ? json_object_set_new(msg, "content", c) : -1;
    }
    if (rc == 0 && has_reasoning) {
        json_t *r = json_stringn(reasoning.p, reasoning.n);
        rc = r ? json_object_set_new(msg, "reasoning_content", r) : -1;
    }
    if (rc == 0 && calls) {
        rc = json_object_set_new(msg, "tool_calls", calls);
        calls = NULL;
    }
    json_decref(calls);
    if (rc != 0) {
        json_decref(msg);
        return cd_fail("toolcall_parse: invalid UTF-8 in the generated text, or out of memory");
    }
    *message = msg;
    return 0;
}
