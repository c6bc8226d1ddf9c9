#include "tools/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/chat_thinking.h"

void trace_free(trace *t) {
    json_decref(t->header);
    json_decref(t->lines);
    *t = (trace){0};
}

int trace_parse(const char *name, const char *buf, size_t len, trace *t) {
    *t = (trace){.lines = json_array()};
    if (!t->lines) return cd_fail("out of memory");
    int rc = 0;
    size_t no = 0;
    for (size_t at = 0; !rc && at < len;) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - buf) : len, n = end - at;
        no++;
        if (n > 0) {
            json_error_t err;
            json_t *j = json_loadb(buf + at, n, 0, &err);
            if (!json_is_object(j)) rc = cd_fail("%s:%zu: not a JSON object (%s)", name, no, j ? "" : err.text);
            else if (!t->header) t->header = j, j = NULL;
            else if (json_array_append(t->lines, j)) rc = cd_fail("out of memory");
            json_decref(j);
        }
        at = end + 1;
    }
    const char *kind = t->header ? json_string_value(json_object_get(t->header, "kind")) : NULL;
    if (!rc && !t->header) rc = cd_fail("%s: empty trace (no header line)", name);
    else if (!rc && (!kind || (strcmp(kind, "tokens") && strcmp(kind, "chat"))))
        rc = cd_fail("%s: the header's \"kind\" must be \"tokens\" or \"chat\"", name);
    if (rc) {
        trace_free(t);
        return -1;
    }
    t->chat = !strcmp(kind, "chat");
    return 0;
}

int trace_load(const char *path, trace *t) {
    *t = (trace){0};
    FILE *f = fopen(path, "rb");
    if (!f) return cd_fail("%s: cannot open the trace", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (len == cap) {
            char *p = cap < ((size_t)1 << 32) ? realloc(buf, cap ? 2 * cap : 65536) : NULL;
            if (!p) {
                rc = cd_fail("%s: out of memory reading the trace", path);
                break;
            }
            buf = p;
            cap = cap ? 2 * cap : 65536;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) rc = cd_fail("%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (!rc) rc = trace_parse(path, buf, len, t);
    free(buf);
    return rc;
}

uint32_t trace_header_u32(const trace *t, const char *key) {
    json_int_t v = json_integer_value(json_object_get(t->header, key));
    return v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
}

int trace_max_tokens(const json_t *req, size_t no, uint32_t *out) {
    json_t *v = json_object_get(req, "max_tokens");
    if (!v) {
        *out = 16;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 20)
        return cd_fail("request %zu: max_tokens must be an integer from 1 to 2^20", no);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

int trace_request_ids(const json_t *req, size_t no, uint32_t n_vocab, int32_t **ids, size_t *n) {
    const json_t *a = json_object_get(req, "prompt_tokens");
    if (!json_is_array(a) || json_array_size(a) == 0)
        return cd_fail("request %zu: prompt_tokens must be a non-empty array", no);
    *n = json_array_size(a);
    *ids = malloc(*n * sizeof **ids);
    if (!*ids) return cd_fail("out of memory");
    for (size_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(a, i);
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= n_vocab) {
            free(*ids);
            *ids = NULL;
            return cd_fail("request %zu: prompt_tokens[%zu] is not a token id below %u", no, i, n_vocab);
        }
        (*ids)[i] = (int32_t)id;
    }
    return 0;
}

/* ---- chat sessions ---- */

static conversation *session_get(trace_sessions *ss, const char *name) {
    for (size_t i = 0; i < ss->n; i++)
        if (!strcmp(ss->s[i].name, name)) return &ss->s[i].c;
    if (!ss->replies.e && reply_memory_init(&ss->replies, 4096, 4u << 20, 32u << 20)) return NULL;
    if (ss->n == ss->cap) {
        size_t cap = ss->cap ? 2 * ss->cap : 8;
        trace_session *s = realloc(ss->s, cap * sizeof *s);
        if (!s) return NULL;
        ss->s = s;
        ss->cap = cap;
    }
    trace_session *s = &ss->s[ss->n];
    if (!(s->name = strdup(name)) || conv_init(&s->c)) {
        free(s->name);
        return NULL;
    }
    s->c.template = ss->template;
    s->c.replies = &ss->replies;
    ss->n++;
    return &s->c;
}

void trace_sessions_free(trace_sessions *ss) {
    for (size_t i = 0; i < ss->n; i++) {
        free(ss->s[i].name);
        conv_free(&ss->s[i].c);
    }
    free(ss->s);
    reply_memory_free(&ss->replies);
    *ss = (trace_sessions){0};
}

int trace_chat_ids(trace_sessions *ss, const json_t *req, size_t no, const tokenizer *tok, conversation **conv,
                   int32_t **ids, size_t *n) {
    const char *name = json_string_value(json_object_get(req, "session"));
    if (!name) return cd_fail("request %zu: \"session\" must be a string", no);
    conversation *c = session_get(ss, name);
    if (!c) return cd_fail("out of memory");
    json_t *tools = json_object_get(req, "tools");
    if (tools && conv_set_tools(c, tools)) return cd_fail_ctx("request %zu: ", no);
    if (conv_extend(c, json_object_get(req, "append"))) return cd_fail_ctx("request %zu: ", no);
    *conv = c;
    bool thinking; /* traces are replayed with thinking off (scripts/scenarios/README.md) */
    if (chat_thinking(c->template, CHAT_THINK_ASK_OFF, CHAT_REPLY_FREE, &thinking)) return -1;
    return conv_prompt(c, tok, thinking, ids, n);
}
