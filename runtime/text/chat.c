/* The Qwen3 chat template (tokenizer_config.json "chat_template"), rendered in C.
 *
 * The template, step by step, and where each step lives below:
 *
 *   1. Header (render_header). With a non-empty `tools` list: one system turn holding the
 *      first message's content (when it is a system message) + "\n\n", the "# Tools" text,
 *      each tool as "\n" + tojson(tool), and the tool-call instructions. Without tools: the
 *      first message, when it is a system message, as an ordinary system turn.
 *
 *   2. last_query_index (find_last_query): scanning backwards, the index of the last user
 *      message that is a real query, i.e. not wrapped as "<tool_response>...</tool_response>"
 *      (a client feeding tool results back as user turns: "multi_step_tool"). Defaults to
 *      the last index when there is none.
 *
 *   3. The turns (chat_render's loop):
 *        user, and system other than at index 0:  <|im_start|>ROLE\nCONTENT<|im_end|>\n
 *        assistant (render_assistant):
 *          reasoning = reasoning_content when given (even ""), else, when the content has a
 *            "</think>": content = after the last "</think>", lstrip('\n');
 *                       reasoning = before the first "</think>", rstrip('\n'), after the
 *                       last "<think>", lstrip('\n').
 *          after the last query, and (last message or reasoning non-empty):
 *            <|im_start|>assistant\n<think>\nREASONING.strip('\n')\n</think>\n\nCONTENT.lstrip('\n')
 *          otherwise (earlier turns drop their reasoning):
 *            <|im_start|>assistant\nCONTENT
 *          then each tool call, "\n" before it unless it is the first and CONTENT is empty:
 *            <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 *          (ARGS verbatim when a string, else tojson), then <|im_end|>\n.
 *        tool: a run of consecutive tool messages becomes one user turn,
 *            <|im_start|>user + per message "\n<tool_response>\nCONTENT\n</tool_response>"
 *            + <|im_end|>\n.
 *
 *   4. Generation prompt: <|im_start|>assistant\n, plus <think>\n\n</think>\n\n when
 *      enable_thinking is false.
 *
 * String operations follow Python (transformers renders the template with Jinja2):
 * strip('\n') removes only newlines, split(s)[-1] is the text after the last s. Truthiness
 * is Python's: an empty string, list or dict is false.
 *
 * Inputs the template cannot render, or would render as nonsense, are rejected before any
 * output is produced. One leniency: an assistant message's content may be null or absent
 * (OpenAI sends that with tool_calls); it renders as "". */
#include "runtime/text/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/chat_coder.h"
#include "runtime/text/json_jinja.h"
#include "runtime/text/json_kind.h"
#include "runtime/text/sbuf.h"
#include "runtime/text/slice.h"

/* ---- validated messages ----------------------------------------------------------------- */

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };
static const char *const role_names[] = {"system", "user", "assistant", "tool"};

typedef struct {
    slice name;
    const json_t *arguments; /* string: printed verbatim; anything else: tojson */
    const char *id;          /* "" when the message gives none */
} tool_call;

typedef struct {
    enum role role;
    slice content;
    bool has_reasoning; /* reasoning_content given and not null */
    slice reasoning;
    tool_call *calls;
    size_t n_calls;
} message;

/* A string that is printed raw: no NUL bytes, which would end the C string early. */
static int raw_string(const json_t *v, slice *out, const char *what, size_t i) {
    if (!json_is_string(v)) return cd_fail("messages[%zu].%s: expected a string, got %s", i, what, json_kind(v));
    out->p = json_string_value(v);
    out->n = json_string_length(v);
    if (memchr(out->p, 0, out->n)) return cd_fail("messages[%zu].%s: contains a NUL byte", i, what);
    return 0;
}

static int parse_tool_call(const json_t *tc, tool_call *out, size_t i, size_t j) {
    if (!json_is_object(tc))
        return cd_fail("messages[%zu].tool_calls[%zu]: expected an object, got %s", i, j, json_kind(tc));
    /* {% if tool_call.function %}{% set tool_call = tool_call.function %}: the OpenAI wrapper
     * is optional; a bare {"name", "arguments"} works too. */
    const json_t *id = json_object_get(tc, "id");
    out->id = json_is_string(id) ? json_string_value(id) : "";
    const json_t *fn = json_object_get(tc, "function");
    if (fn && !json_is_null(fn)) {
        if (!json_is_object(fn))
            return cd_fail("messages[%zu].tool_calls[%zu].function: expected an object, got %s", i, j, json_kind(fn));
        if (json_object_size(fn) > 0) tc = fn;
    }
    const json_t *name = json_object_get(tc, "name");
    if (!name) return cd_fail("messages[%zu].tool_calls[%zu]: no function name", i, j);
    if (!json_is_string(name))
        return cd_fail("messages[%zu].tool_calls[%zu]: function name must be a string, got %s", i, j, json_kind(name));
    out->name = (slice){json_string_value(name), json_string_length(name)};
    if (memchr(out->name.p, 0, out->name.n))
        return cd_fail("messages[%zu].tool_calls[%zu]: function name contains a NUL byte", i, j);
    out->arguments = json_object_get(tc, "arguments");
    if (!out->arguments) return cd_fail("messages[%zu].tool_calls[%zu]: no arguments", i, j);
    if (json_is_string(out->arguments) &&
        memchr(json_string_value(out->arguments), 0, json_string_length(out->arguments)))
        return cd_fail("messages[%zu].tool_calls[%zu]: arguments contain a NUL byte", i, j);
    return 0;
}

static int parse_message(const json_t *m, message *out, size_t i) {
    if (!json_is_object(m)) return cd_fail("messages[%zu]: expected an object, got %s", i, json_kind(m));
    const json_t *role = json_object_get(m, "role");
    if (!role) return cd_fail("messages[%zu]: no role", i);
    if (!json_is_string(role)) return cd_fail("messages[%zu].role: expected a string, got %s", i, json_kind(role));
    const char *r = json_string_value(role);
    int ri = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(r, role_names[k]) == 0 && strlen(r) == json_string_length(role)) ri = k;
    if (ri < 0)
        return cd_fail("messages[%zu].role: unknown role \"%.40s\" (expected system, user, assistant or tool)", i, r);
    out->role = (enum role)ri;

    const json_t *content = json_object_get(m, "content");
    if (out->role == ROLE_ASSISTANT && (!content || json_is_null(content))) {
        out->content = LIT("");
    } else if (!content) {
        return cd_fail("messages[%zu]: %s message has no content", i, r);
    } else if (raw_string(content, &out->content, "content", i) != 0) {
        return -1;
    }
    if (out->role != ROLE_ASSISTANT) return 0;

    /* {% if message.reasoning_content is defined and message.reasoning_content is not none %} */
    const json_t *rc = json_object_get(m, "reasoning_content");
    if (rc && !json_is_null(rc)) {
        if (raw_string(rc, &out->reasoning, "reasoning_content", i) != 0) return -1;
        out->has_reasoning = true;
    }

    const json_t *calls = json_object_get(m, "tool_calls");
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls))
        return cd_fail("messages[%zu].tool_calls: expected an array, got %s", i, json_kind(calls));
    size_t n = json_array_size(calls);
    if (n == 0) return 0;
    out->calls = calloc(n, sizeof *out->calls);
    if (!out->calls) return cd_fail("out of memory");
    out->n_calls = n;
    for (size_t j = 0; j < n; j++)
        if (parse_tool_call(json_array_get(calls, j), &out->calls[j], i, j) != 0) return -1;
    return 0;
}

/* ---- rendering -------------------------------------------------------------------------- */

static int render_header(sbuf *b, const message *ms, const json_t *tools) {
    bool first_is_system = ms[0].role == ROLE_SYSTEM;
    if (json_array_size(tools) > 0) {
        puts_(b, "<|im_start|>system\n");
        if (first_is_system) {
            put(b, ms[0].content);
            puts_(b, "\n\n");
        }
        puts_(b,
              "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            puts_(b, "\n");
            if (json_jinja_append(json_array_get(tools, i), &b->p, &b->len, &b->cap) != 0)
                return cd_fail_ctx("tools[%zu]: ", i);
        }
        puts_(b,
              "\n</tools>\n\nFor each function call, return a json object with function name and "
              "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
              "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (first_is_system) {
        puts_(b, "<|im_start|>system\n");
        put(b, ms[0].content);
        puts_(b, "<|im_end|>\n");
    }
    return 0;
}

static size_t find_last_query(const message *ms, size_t n) {
    for (size_t i = n; i-- > 0;) {
        if (ms[i].role != ROLE_USER) continue;
        slice c = ms[i].content;
        if (!(starts_with(c, LIT("<tool_response>")) && ends_with(c, LIT("</tool_response>")))) return i;
    }
    return n - 1;
}

static int render_assistant(sbuf *b, const message *m, chat_options opt, bool after_last_query, bool is_last) {
    slice content = m->content, reasoning = LIT("");
    if (m->has_reasoning) {
        reasoning = m->reasoning;
    } else if (find_first(content, LIT("</think>")) >= 0) {
        slice full = content;
        content = lstrip_nl(after_last(full, LIT("</think>")));
        reasoning = lstrip_nl(after_last(rstrip_nl(before_first(full, LIT("</think>"))), LIT("<think>")));
    }
    puts_(b, "<|im_start|>assistant\n");
    bool keep = (after_last_query || opt.preserve_reasoning) && (is_last || reasoning.n > 0);
    if (keep || (opt.as_generated && !opt.enable_thinking)) {
        puts_(b, "<think>\n");
        if (keep) put(b, strip_nl(reasoning));
        puts_(b, "\n</think>\n\n");
        put(b, lstrip_nl(content));
    } else {
        put(b, content);
    }
    for (size_t j = 0; j < m->n_calls; j++) {
        if (j > 0 || content.n > 0) puts_(b, "\n");
        char *text = NULL;
        size_t len = 0;
        if (opt.as_generated && opt.generated_call && m->calls[j].name.n == strlen(m->calls[j].name.p) &&
            opt.generated_call(opt.generated_call_ctx, m->calls[j].id, m->calls[j].name.p, m->calls[j].arguments, &text,
                               &len)) {
            puts_(b, "<tool_call>");
            put(b, (slice){text, len});
            puts_(b, "</tool_call>");
            free(text);
            continue;
        }
        puts_(b, "<tool_call>\n{\"name\": \"");
        put(b, m->calls[j].name);
        puts_(b, "\", \"arguments\": ");
        const json_t *args = m->calls[j].arguments;
        if (json_is_string(args)) {
            put(b, (slice){json_string_value(args), json_string_length(args)});
        } else if (json_jinja_append(args, &b->p, &b->len, &b->cap) != 0) {
            return -1;
        }
        puts_(b, "}\n</tool_call>");
    }
    puts_(b, "<|im_end|>\n");
    return 0;
}

int chat_render(const json_t *messages, const json_t *tools, chat_options opt, char **out) {
    if (opt.template == CHAT_TEMPLATE_QWEN3_CODER) return chat_render_coder(messages, tools, opt, out);
    if (opt.template != CHAT_TEMPLATE_QWEN3) return cd_fail("chat_render: unknown template %d", (int)opt.template);
    if (!out) return cd_fail("chat_render: out is NULL");
    *out = NULL;
    if (!messages || !json_is_array(messages))
        return cd_fail("messages: expected an array, got %s", json_kind(messages));
    size_t n = json_array_size(messages);
    if (n == 0) return cd_fail("messages: empty");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return cd_fail("tools: expected an array, got %s", json_kind(tools));
    if (tools && json_is_null(tools)) tools = NULL;

    message *ms = calloc(n, sizeof *ms);
    if (!ms) return cd_fail("out of memory");
    sbuf b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) rc = parse_message(json_array_get(messages, i), &ms[i], i);
    if (rc == 0) rc = render_header(&b, ms, tools);

    size_t last_query = rc == 0 ? find_last_query(ms, n) : 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const message *m = &ms[i];
        switch (m->role) {
        case ROLE_SYSTEM:
            if (i == 0) break; /* already in the header */
            /* fall through */
        case ROLE_USER:
            puts_(&b, "<|im_start|>");
            puts_(&b, role_names[m->role]);
            puts_(&b, "\n");
            put(&b, m->content);
            puts_(&b, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT: rc = render_assistant(&b, m, opt, i > last_query, i == n - 1); break;
        case ROLE_TOOL:
            if (i == 0 || ms[i - 1].role != ROLE_TOOL) puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            put(&b, m->content);
            puts_(&b, "\n</tool_response>");
            if (i == n - 1 || ms[i + 1].role != ROLE_TOOL) puts_(&b, "<|im_end|>\n");
            break;
        }
    }
    if (rc == 0 && opt.add_generation_prompt) {
        puts_(&b, "<|im_start|>assistant\n");
        if (!opt.enable_thinking) puts_(&b, "<think>\n\n</think>\n\n");
    }

    for (size_t i = 0; i < n; i++) free(ms[i].calls);
    free(ms);
    if (rc == 0 && b.oom) rc = cd_fail("out of memory rendering the chat template");
    if (rc != 0) {
        free(b.p);
        return -1;
    }
    *out = b.p ? b.p : strdup("");
    if (!*out) return cd_fail("out of memory");
    return 0;
}
