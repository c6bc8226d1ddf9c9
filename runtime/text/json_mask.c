#include "runtime/text/json_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/coder_call.h"

enum {
    JSON_TOKEN_TEXT = 1, /* a normal or byte token with bytes: may be JSON text */
    JSON_TOKEN_EOG = 2,  /* ends generation */
    JSON_TOKEN_SAFE = 4, /* string-safe: inside a string it only extends the string */
    JSON_TOKEN_TAG = 8,  /* a user-defined token with text (</tool_call>): in a tail only */
    JSON_TOKEN_LT = 16,  /* holds a '<' (which may begin a tag in a Qwen3-Coder call's text) */
};

/* No '"', '\\' or control byte, and whole well-formed UTF-8 sequences: from inside a string
 * (in_string), json_prefix takes the bytes, and then a closing quote (only at a character's end). */
static bool string_safe(const json_prefix *in_string, const char *s, size_t n) {
    char buf[256];
    if (n >= sizeof buf) return false; /* no shortcut for such a token: it is run whole */
    for (size_t i = 0; i < n; i++)
        if (s[i] == '"' || s[i] == '\\') return false;
    memcpy(buf, s, n);
    buf[n] = '"';
    return json_prefix_accepts(in_string, buf, n + 1);
}

/* Characters: the bytes that begin one (not 10xxxxxx). */
static uint8_t chars_of(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k > 255 ? 255 : (uint8_t)k;
}

int json_vocab_init(json_vocab *v, const tokenizer *t) {
    *v = (json_vocab){.tok = t, .n = tok_n_vocab(t)};
    v->first = calloc((size_t)v->n, 1);
    v->flags = calloc((size_t)v->n, 1);
    v->chars = calloc((size_t)v->n, 1);
    json_schema *str = json_schema_compile_text("{\"type\": \"string\"}", true);
    json_prefix *in_string = malloc(sizeof *in_string);
    if (!v->first || !v->flags || !v->chars || !str || !in_string) {
        json_vocab_free(v);
        json_schema_unref(str);
        free(in_string);
        return cd_fail("out of memory for the JSON mask's vocabulary table");
    }
    json_prefix_init(in_string, str);
    json_prefix_feed(in_string, "\"", 1);
    for (int32_t id = 0; id < v->n; id++) {
        size_t n;
        const char *s = tok_piece(t, id, &n);
        enum tok_type type = tok_token_type(t, id);
        if (tok_is_eog(t, id)) v->flags[id] = JSON_TOKEN_EOG;
        else if (type == TOK_TYPE_USER_DEFINED && n) v->flags[id] = JSON_TOKEN_TAG;
        else if ((type == TOK_TYPE_NORMAL || type == TOK_TYPE_BYTE) && n) {
            v->first[id] = (uint8_t)s[0];
            v->flags[id] = JSON_TOKEN_TEXT | (string_safe(in_string, s, n) ? JSON_TOKEN_SAFE : 0) |
                (memchr(s, '<', n) ? JSON_TOKEN_LT : 0);
            v->chars[id] = chars_of(s, n);
        }
    }
    free(in_string);
    json_schema_unref(str);
    return 0;
}

void json_vocab_free(json_vocab *v) {
    free(v->first);
    free(v->flags);
    free(v->chars);
    *v = (json_vocab){0};
}

void json_mask_init(json_mask *m, const json_vocab *v, json_schema *schema) {
    m->v = v;
    m->schema = json_schema_ref(schema);
    m->tail_n = m->tail_pos = 0;
    m->trigger = -1, m->waiting = false, m->once = false;
    m->coder = NULL, m->tools = NULL;
    json_prefix_init(&m->state, schema);
}

int json_mask_set_coder(json_mask *m, coder_tools *tools) {
    if (!(m->coder = malloc(sizeof *m->coder))) return cd_fail("out of memory for a tool call's grammar");
    m->tools = coder_tools_ref(tools);
    coder_call_init(m->coder, tools);
    return 0;
}

/* A fresh value: the automaton's start (and the call's). */
static void restart(json_mask *m) {
    json_prefix_init(&m->state, m->schema);
    if (m->coder) coder_call_init(m->coder, m->tools);
}

void json_mask_set_trigger(json_mask *m, int32_t id, bool once) { m->trigger = id, m->waiting = true, m->once = once; }

void json_mask_free(json_mask *m) {
    json_schema_unref(m->schema);
    coder_tools_unref(m->tools);
    free(m->coder);
    m->schema = NULL, m->tools = NULL, m->coder = NULL;
}

int json_mask_set_tail(json_mask *m, const char *tail) {
    size_t n = strlen(tail);
    if (n > JSON_MASK_MAX_TAIL)
        return cd_fail("the text after the JSON value is longer than %d bytes", JSON_MASK_MAX_TAIL);
    if (n && m->schema->nodes[m->schema->root].types != JSON_T_OBJECT)
        return cd_fail("text after the JSON value needs a schema of objects (where the value ends is then plain)");
    memcpy(m->tail, tail, n);
    m->tail_n = (uint8_t)n, m->tail_pos = 0;
    return 0;
}

/* The value is whole (with a coder call: "</function>" read, which closes its view). */
static bool value_done(const json_mask *m) {
    return (!m->coder || coder_call_done(m->coder)) && json_prefix_done(&m->state);
}

bool json_mask_done(const json_mask *m) { return m->waiting || (value_done(m) && m->tail_pos == m->tail_n); }

/* Bytes n after the value is whole: the next of the tail? */
static bool tail_takes(const json_mask *m, const char *bytes, size_t n) {
    return n <= (size_t)(m->tail_n - m->tail_pos) && !memcmp(m->tail + m->tail_pos, bytes, n);
}

/* A coder call's view of n bytes is made on the stack for a token's, else on the heap. */
#define VIEW_STACK 2048

/* How many of the bytes call c (the mask's, or a copy when only asking) takes: SIZE_MAX when
 * the call or the automaton refuses them. feed: the automaton moves past their view (the
 * mask's own state); NULL: it is only asked. */
static size_t coder_part(const json_mask *m, coder_call *c, json_prefix *feed, const char *bytes, size_t n) {
    char stack[VIEW_STACK], *view = CODER_VIEW_MAX(n) <= VIEW_STACK ? stack : malloc(CODER_VIEW_MAX(n));
    size_t vn, used;
    bool ok = view && coder_call_read(c, &m->state, bytes, n, view, &vn, &used) &&
        (!vn || (feed ? json_prefix_feed(feed, view, vn) : json_prefix_accepts(&m->state, view, vn)));
    if (view != stack) free(view);
    return ok ? used : SIZE_MAX;
}

/* How many of the bytes the value takes (the rest must be the tail's), SIZE_MAX if none fit. */
static size_t value_part(const json_mask *m, const char *bytes, size_t n) {
    if (value_done(m) && m->tail_n) /* an object is whole: nothing more of it */
        return tail_takes(m, bytes, n) ? 0 : SIZE_MAX;
    size_t k;
    if (m->coder) {
        coder_call ask = *m->coder;
        k = coder_part(m, &ask, NULL, bytes, n);
    } else {
        k = json_prefix_reads(&m->state, bytes, n);
    }
    return k == SIZE_MAX || (k < n && !tail_takes(m, bytes + k, n - k)) ? SIZE_MAX : k;
}

/* The value's part of fed bytes (k of them, value_part's), into the state. */
static bool feed_value(json_mask *m, const char *bytes, size_t k) {
    return m->coder ? coder_part(m, m->coder, &m->state, bytes, k) == k : json_prefix_feed(&m->state, bytes, k);
}

bool json_mask_feed(json_mask *m, const char *bytes, size_t n) {
    size_t k = value_part(m, bytes, n);
    if (k == SIZE_MAX || (k && !feed_value(m, bytes, k))) return false;
    if (k < n && !tail_takes(m, bytes + k, n - k)) return false;
    m->tail_pos = (uint8_t)(m->tail_pos + (n - k));
    return true;
}

bool json_mask_allows(const json_mask *m, int32_t id) {
    const json_vocab *v = m->v;
    if (id < 0 || id >= v->n) return false;
    if (m->waiting) return true;
    uint8_t f = v->flags[id];
    if (f & JSON_TOKEN_EOG) return json_mask_done(m);
    if (!(f & (JSON_TOKEN_TEXT | JSON_TOKEN_TAG))) return false;
    size_t n;
    const char *bytes = tok_piece(v->tok, id, &n);
    size_t k = value_part(m, bytes, n);
    return k != SIZE_MAX && (k == 0 || (f & JSON_TOKEN_TEXT)); /* a tag (</tool_call>) only in the tail */
}

/* After the value: the tokens that go on with the tail, then only end tokens. */
static void apply_tail(const json_mask *m, float *logits, int32_t n) {
    const json_vocab *v = m->v;
    for (int32_t id = 0; id < n; id++) {
        uint8_t f = id < v->n ? v->flags[id] : 0;
        bool ok;
        if (f & JSON_TOKEN_EOG) ok = m->tail_pos == m->tail_n;
        else if (!(f & (JSON_TOKEN_TEXT | JSON_TOKEN_TAG))) ok = false;
        else {
            size_t len;
            const char *bytes = tok_piece(v->tok, id, &len);
            ok = tail_takes(m, bytes, len);
        }
        if (!ok) logits[id] = -INFINITY;
    }
}

void json_mask_apply(const json_mask *m, float *logits, int32_t n) {
    const json_vocab *v = m->v;
    if (m->waiting) return;
    if (value_done(m) && m->tail_n) return apply_tail(m, logits, n);
    bool first_ok[256];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        first_ok[b] = m->coder ? value_part(m, &c, 1) != SIZE_MAX : json_prefix_accepts(&m->state, &c, 1);
    }
    /* a coder call passes a value's plain text to the view as it is, and nothing else */
    uint32_t room = !m->coder || coder_call_plain(m->coder) ? json_prefix_string_room(&m->state) : 0;
    uint8_t unsafe = m->coder ? JSON_TOKEN_LT : 0;
    bool done = json_mask_done(m);
    for (int32_t id = 0; id < n; id++) {
        if (logits[id] == -INFINITY) continue;
        uint8_t f = id < v->n ? v->flags[id] : 0;
        bool ok;
        if (f & JSON_TOKEN_EOG) ok = done;
        else if (!(f & JSON_TOKEN_TEXT) || !first_ok[v->first[id]]) ok = false; /* the value goes on: no tag yet */
        else if ((f & JSON_TOKEN_SAFE) && !(f & unsafe) && v->chars[id] <= room) ok = true; /* safe: under 256 bytes */
        else ok = json_mask_allows(m, id);
        if (!ok) logits[id] = -INFINITY;
    }
}

void json_mask_accept(json_mask *m, int32_t id) {
    if (m->waiting) { /* the trigger opens a value: a fresh one, then its tail */
        if (id == m->trigger) m->waiting = false, m->tail_pos = 0, restart(m);
        return;
    }
    size_t n;
    const char *bytes = tok_piece(m->v->tok, id, &n);
    if (bytes && !(m->v->flags[id] & JSON_TOKEN_EOG)) json_mask_feed(m, bytes, n);
    if (m->trigger >= 0 && !m->once && json_mask_done(m)) m->waiting = true; /* once: the end only */
}
