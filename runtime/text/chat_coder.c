/* The Qwen3-Coder chat template in C; the layout and the departures are in chat_coder.h.
 *
 * The template's Python-isms, as Jinja2 evaluates them:
 *   - `x | trim` is str.strip(): every Unicode whitespace character (str.isspace), not just
 *     ASCII: py_strip below;
 *   - `x | string` and `a ~ b` are str(x): "True", "False", "None", repr() of floats;
 *   - `x.key` on a dict is the item; on anything else it is undefined;
 *   - `loop.previtem` is undefined for the first message after the system one, so a tool
 *     message there opens no user turn (the template's quirk, kept). */
#include "runtime/text/chat_coder.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/json_jinja.h"
#include "runtime/text/json_kind.h"
#include "runtime/text/sbuf.h"
#include "runtime/text/slice.h"

/* ---- Python's str.strip() and str() ----------------------------------------------------- */

/* Bytes of the whitespace character (str.isspace) starting at s[i], or 0. */
static size_t ws_at(slice s, size_t i) {
    const unsigned char *p = (const unsigned char *)s.p + i;
    size_t left = s.n - i;
    if ((p[0] >= 0x09 && p[0] <= 0x0d) || (p[0] >= 0x1c && p[0] <= 0x20)) return 1;
    if (left >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0)) return 2;
    if (left < 3) return 0;
    if (p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80) return 3; /* U+1680 */
    if (p[0] == 0xe2 && p[1] == 0x80 &&
        ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
        return 3;                                               /* U+2000..U+200A, U+2028, U+2029, U+202F */
    if (p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f) return 3; /* U+205F */
    if (p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* Bytes of the whitespace character ending at s[end) (a UTF-8 character is at most 3 bytes
 * here), or 0. */
static size_t ws_before(slice s, size_t end) {
    for (size_t k = 1; k <= 3 && k <= end; k++) {
        unsigned char c = (unsigned char)s.p[end - k];
        if (k < 3 && (c & 0xc0) == 0x80) continue; /* a continuation byte: look further back */
        return ws_at((slice){s.p, end}, end - k) == k ? k : 0;
    }
    return 0;
}

static slice py_strip(slice s) {
    size_t a = 0, b = s.n, k;
    while (a < b && (k = ws_at(s, a)) > 0) a += k;
    while (b > a && (k = ws_before((slice){s.p, b}, b)) > 0) b -= k;
    return (slice){s.p + a, b - a};
}

/* str(v) of a scalar, appended; for strings their text. -1 for objects and arrays, which
 * print as Python reprs cinder does not reproduce. */
static int put_str(sbuf *b, const json_t *v) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_STRING: put(b, (slice){json_string_value(v), json_string_length(v)}); return 0;
    case JSON_INTEGER: snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: json_jinja_format_real(json_real_value(v), num); break;
    case JSON_TRUE: snprintf(num, sizeof num, "True"); break;
    case JSON_FALSE: snprintf(num, sizeof num, "False"); break;
    case JSON_NULL: snprintf(num, sizeof num, "None"); break;
    default: return -1;
    }
    puts_(b, num);
    return 0;
}

/* A value as the template prints it where it writes
 *   (v | tojson) if v is mapping or (v is sequence and v is not string) else (v | string). */
static int put_value(sbuf *b, const json_t *v) {
    if (json_is_object(v) || json_is_array(v)) {
        if (b->oom) return 0;
        if (json_jinja_append(v, &b->p, &b->len, &b->cap) != 0) return -1;
        return 0;
    }
    return put_str(b, v);
}

/* str() of a list of plain ASCII names: ['string', 'null'] (repr quotes them with '). */
static int put_name_list(sbuf *b, const json_t *list) {
    size_t i;
    const json_t *e;
    json_array_foreach(list, i, e) {
        if (!json_is_string(e)) return -1;
        const char *s = json_string_value(e);
        for (size_t k = 0; k < json_string_length(e); k++)
            if (s[k] < 0x20 || s[k] > 0x7e || s[k] == '\'' || s[k] == '\\') return -1;
    }
    puts_(b, "[");
    json_array_foreach(list, i, e) {
        puts_(b, i ? ", '" : "'");
        puts_(b, json_string_value(e));
        puts_(b, "'");
    }
    puts_(b, "]");
    return 0;
}

/* A string that is printed raw: no NUL bytes, which would end the C string early. */
static int text_of(const json_t *v, slice *out, const char *where) {
    if (!json_is_string(v)) return cd_fail("%s: expected a string, got %s", where, json_kind(v));
    *out = (slice){json_string_value(v), json_string_length(v)};
    if (memchr(out->p, 0, out->n)) return cd_fail("%s: contains a NUL byte", where);
    return 0;
}

/* ---- the tool list ---------------------------------------------------------------------- */

/* {% if x.description is defined %}\n<description>{{ x.description | trim }}</description> */
static int put_description(sbuf *b, const json_t *obj, const char *where) {
    const json_t *d = json_object_get(obj, "description");
    if (!d) return 0;
    if (json_is_string(d) && memchr(json_string_value(d), 0, json_string_length(d)))
        return cd_fail("%s.description: contains a NUL byte", where);
    sbuf tmp = {0};
    if (put_str(&tmp, d) != 0) return cd_fail("%s.description: expected a string, got %s", where, json_kind(d));
    if (tmp.oom) return cd_fail("out of memory");
    puts_(b, "\n<description>");
    put(b, py_strip((slice){tmp.p ? tmp.p : "", tmp.len}));
    puts_(b, "</description>");
    free(tmp.p);
    return 0;
}

/* The template's render_extra_keys macro: every key of obj but the handled ones. */
static int put_extra_keys(sbuf *b, const json_t *obj, const char *const *handled, const char *where) {
    if (!json_is_object(obj)) return 0;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        bool skip = false;
        for (const char *const *h = handled; *h; h++) skip |= !strcmp(key, *h);
        if (skip) continue;
        if (json_is_string(v) && memchr(json_string_value(v), 0, json_string_length(v)))
            return cd_fail("%s.%s: contains a NUL byte", where, key);
        puts_(b, "\n<");
        puts_(b, key);
        puts_(b, ">");
        if (put_value(b, v) != 0) return cd_fail_ctx("%s.%s: ", where, key);
        puts_(b, "</");
        puts_(b, key);
        puts_(b, ">");
    }
    return 0;
}

static int put_parameter(sbuf *b, const char *name, const json_t *fields, const char *where) {
    static const char *const handled[] = {"name", "type", "description", NULL};
    puts_(b, "\n<parameter>\n<name>");
    puts_(b, name);
    puts_(b, "</name>");
    if (json_is_object(fields)) { /* on anything else .type and .description are undefined */
        const json_t *type = json_object_get(fields, "type");
        if (type) {
            puts_(b, "\n<type>");
            int rc = json_is_array(type) ? put_name_list(b, type) : put_str(b, type);
            if (rc != 0 || (json_is_string(type) && memchr(json_string_value(type), 0, json_string_length(type))))
                return cd_fail("%s.type: cinder prints a string or a list of plain names here, got %s", where,
                               json_kind(type));
            puts_(b, "</type>");
        }
        if (put_description(b, fields, where) != 0) return -1;
        if (put_extra_keys(b, fields, handled, where) != 0) return -1;
    }
    puts_(b, "\n</parameter>");
    return 0;
}

static int put_tool(sbuf *b, const json_t *tool, size_t i) {
    static const char *const params_handled[] = {"type", "properties", NULL};
    static const char *const tool_handled[] = {"type", "name", "description", "parameters", NULL};
    char where[96];
    snprintf(where, sizeof where, "tools[%zu]", i);
    if (!json_is_object(tool)) return cd_fail("%s: expected an object, got %s", where, json_kind(tool));
    const json_t *fn = json_object_get(tool, "function");
    if (fn) {
        if (!json_is_object(fn)) return cd_fail("%s.function: expected an object, got %s", where, json_kind(fn));
        tool = fn;
        snprintf(where, sizeof where, "tools[%zu].function", i);
    }
    slice name;
    const json_t *nv = json_object_get(tool, "name");
    char what[128];
    snprintf(what, sizeof what, "%s.name", where);
    if (!nv) return cd_fail("%s: no name", where);
    if (text_of(nv, &name, what) != 0) return -1;
    puts_(b, "\n<function>\n<name>");
    put(b, name);
    puts_(b, "</name>");
    if (put_description(b, tool, where) != 0) return -1;
    puts_(b, "\n<parameters>");
    const json_t *params = json_object_get(tool, "parameters");
    const json_t *props = json_object_get(params, "properties");
    if (json_is_object(params) && json_is_object(props)) {
        const char *pname;
        const json_t *fields;
        json_object_foreach((json_t *)props, pname, fields) {
            char pw[192];
            snprintf(pw, sizeof pw, "%s.parameters.properties.%.60s", where, pname);
            if (put_parameter(b, pname, fields, pw) != 0) return -1;
        }
    }
    snprintf(what, sizeof what, "%s.parameters", where);
    if (put_extra_keys(b, params, params_handled, what) != 0) return -1;
    puts_(b, "\n</parameters>");
    if (put_extra_keys(b, tool, tool_handled, where) != 0) return -1;
    puts_(b, "\n</function>");
    return 0;
}

static const char instructions[] =
    "\n</tools>\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: the tool calling block MUST begin with an opening "
    "<tool_call> tag and end with a closing </tool_call> tag.\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n- If there is no function call available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n</IMPORTANT>";

static int put_header(sbuf *b, const json_t *messages, const json_t *tools) {
    const json_t *first = json_array_get(messages, 0);
    bool has_system = !strcmp(json_string_value(json_object_get(first, "role")), "system");
    size_t n_tools = json_array_size(tools);
    if (has_system) {
        slice sys;
        if (text_of(json_object_get(first, "content"), &sys, "messages[0].content") != 0) return -1;
        puts_(b, "<|im_start|>system\n");
        put(b, sys);
    } else if (n_tools > 0) {
        puts_(b,
              "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve "
              "tasks.");
    }
    if (n_tools > 0) {
        puts_(b, "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>");
        for (size_t i = 0; i < n_tools; i++)
            if (put_tool(b, json_array_get(tools, i), i) != 0) return -1;
        puts_(b, instructions);
    }
    if (has_system || n_tools > 0) puts_(b, "<|im_end|>\n");
    return 0;
}

/* ---- the turns -------------------------------------------------------------------------- */

/* A call's arguments as an object: the object itself, or a JSON object text parsed (a new
 * reference either way); NULL with a message otherwise. */
static json_t *arguments_object(const json_t *args, const char *where) {
    if (json_is_object(args)) return json_incref((json_t *)args);
    if (!json_is_string(args))
        return cd_fail("%s: expected an object or a JSON object text, got %s", where, json_kind(args)), NULL;
    json_error_t err;
    json_t *v = json_loadb(json_string_value(args), json_string_length(args), 0, &err);
    if (!json_is_object(v)) {
        json_decref(v);
        cd_fail("%s: the Qwen3-Coder template lists arguments by name, so they must be a JSON object (%s)", where,
                v ? "got another JSON value" : err.text);
        return NULL;
    }
    return v;
}

static int put_call(sbuf *b, const json_t *tc, chat_options opt, const char *where) {
    if (!json_is_object(tc)) return cd_fail("%s: expected an object, got %s", where, json_kind(tc));
    const json_t *id = json_object_get(tc, "id");
    const json_t *fn = json_object_get(tc, "function");
    char w[160];
    snprintf(w, sizeof w, "%s", where);
    if (fn) {
        if (!json_is_object(fn)) return cd_fail("%s.function: expected an object, got %s", where, json_kind(fn));
        tc = fn;
        snprintf(w, sizeof w, "%s.function", where);
    }
    const json_t *nv = json_object_get(tc, "name");
    if (!nv) return cd_fail("%s: no function name", where);
    slice name;
    char what[192];
    snprintf(what, sizeof what, "%s.name", w);
    if (text_of(nv, &name, what) != 0) return -1;
    const json_t *args = json_object_get(tc, "arguments");
    char *text = NULL;
    size_t len = 0;
    if (opt.as_generated && opt.generated_call && args &&
        opt.generated_call(opt.generated_call_ctx, json_is_string(id) ? json_string_value(id) : "", name.p, args, &text,
                           &len)) {
        puts_(b, "\n<tool_call>");
        put(b, (slice){text, len});
        puts_(b, "</tool_call>");
        free(text);
        return 0;
    }
    puts_(b, "\n<tool_call>\n<function=");
    put(b, name);
    puts_(b, ">\n");
    if (args) {
        snprintf(what, sizeof what, "%s.arguments", w);
        json_t *obj = arguments_object(args, what);
        if (!obj) return -1;
        const char *key;
        const json_t *v;
        int rc = 0;
        json_object_foreach(obj, key, v) {
            if (json_is_string(v) && memchr(json_string_value(v), 0, json_string_length(v))) {
                rc = cd_fail("%s.%s: contains a NUL byte", what, key);
                break;
            }
            puts_(b, "<parameter=");
            puts_(b, key);
            puts_(b, ">\n");
            if ((rc = put_value(b, v)) != 0) break;
            puts_(b, "\n</parameter>\n");
        }
        json_decref(obj);
        if (rc != 0) return cd_fail_ctx("%s: ", what);
    }
    puts_(b, "</function>\n</tool_call>");
    return 0;
}

static int put_assistant_calls(sbuf *b, const json_t *m, const json_t *calls, chat_options opt, size_t i) {
    puts_(b, "<|im_start|>assistant");
    const json_t *content = json_object_get(m, "content");
    if (content && !json_is_null(content)) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].content", i);
        slice c;
        if (text_of(content, &c, where) != 0) return -1;
        c = py_strip(c);
        if (c.n > 0) {
            puts_(b, "\n");
            put(b, c);
            puts_(b, "\n");
        }
    }
    for (size_t j = 0; j < json_array_size(calls); j++) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].tool_calls[%zu]", i, j);
        if (put_call(b, json_array_get(calls, j), opt, where) != 0) return -1;
    }
    puts_(b, "<|im_end|>\n");
    return 0;
}

static const char *role_of(const json_t *m, size_t i) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const json_t *role = json_object_get(m, "role");
    if (!role) return cd_fail("messages[%zu]: no role", i), NULL;
    if (!json_is_string(role))
        return cd_fail("messages[%zu].role: expected a string, got %s", i, json_kind(role)), NULL;
    for (size_t k = 0; k < 4; k++)
        if (!strcmp(json_string_value(role), roles[k]) && strlen(roles[k]) == json_string_length(role)) return roles[k];
    cd_fail("messages[%zu].role: unknown role \"%.40s\" (expected system, user, assistant or tool)", i,
            json_string_value(role));
    return NULL;
}

/* Every message is an object with a known role, before any output. */
static int check_messages(const json_t *messages) {
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        if (!json_is_object(m)) return cd_fail("messages[%zu]: expected an object, got %s", i, json_kind(m));
        if (!role_of(m, i)) return -1;
        const json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls) && !json_is_array(calls))
            return cd_fail("messages[%zu].tool_calls: expected an array, got %s", i, json_kind(calls));
    }
    return 0;
}

static int put_turn(sbuf *b, const json_t *messages, size_t i, size_t first, chat_options opt) {
    const json_t *m = json_array_get(messages, i);
    const char *role = role_of(m, i);
    const json_t *calls = json_object_get(m, "tool_calls");
    if (!strcmp(role, "assistant") && json_array_size(calls) > 0) return put_assistant_calls(b, m, calls, opt, i);
    const json_t *content = json_object_get(m, "content");
    char where[64];
    snprintf(where, sizeof where, "messages[%zu].content", i);
    slice c = LIT("");
    if (!content && strcmp(role, "assistant")) return cd_fail("messages[%zu]: %s message has no content", i, role);
    if (content && !(json_is_null(content) && !strcmp(role, "assistant")) && text_of(content, &c, where) != 0)
        return -1;
    if (strcmp(role, "tool")) {
        puts_(b, "<|im_start|>");
        puts_(b, role);
        puts_(b, "\n");
        put(b, c);
        puts_(b, "<|im_end|>\n");
        return 0;
    }
    /* {% if loop.previtem and loop.previtem.role != "tool" %}: no previtem for the first */
    if (i > first && strcmp(role_of(json_array_get(messages, i - 1), i - 1), "tool")) puts_(b, "<|im_start|>user\n");
    puts_(b, "<tool_response>\n");
    put(b, c);
    puts_(b, "\n</tool_response>\n");
    bool last = i + 1 == json_array_size(messages);
    if (last || strcmp(role_of(json_array_get(messages, i + 1), i + 1), "tool")) puts_(b, "<|im_end|>\n");
    return 0;
}

int chat_render_coder(const json_t *messages, const json_t *tools, chat_options opt, char **out) {
    if (!out) return cd_fail("chat_render: out is NULL");
    *out = NULL;
    if (!messages || !json_is_array(messages))
        return cd_fail("messages: expected an array, got %s", messages ? json_kind(messages) : "nothing");
    size_t n = json_array_size(messages);
    if (n == 0) return cd_fail("messages: empty");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return cd_fail("tools: expected an array, got %s", json_kind(tools));
    if (tools && json_is_null(tools)) tools = NULL;
    if (check_messages(messages) != 0) return -1;

    sbuf b = {0};
    int rc = put_header(&b, messages, tools);
    size_t first = !strcmp(role_of(json_array_get(messages, 0), 0), "system") ? 1 : 0;
    for (size_t i = first; i < n && rc == 0; i++) rc = put_turn(&b, messages, i, first, opt);
    if (rc == 0 && opt.add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
    if (rc == 0 && b.oom) rc = cd_fail("out of memory rendering the chat template");
    if (rc != 0) {
        free(b.p);
        return -1;
    }
    *out = b.p ? b.p : strdup("");
    return *out ? 0 : cd_fail("out of memory");
}
