#include "runtime/text/coder_call.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* ---- the tools' table ------------------------------------------------------------------ */

void coder_tools_unref(coder_tools *t) {
    if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
    for (uint32_t i = 0; i < t->n; i++) {
        for (uint32_t k = 0; k < t->tool[i].n_params; k++) free(t->tool[i].params[k].name);
        free(t->tool[i].params);
        free(t->tool[i].name);
    }
    free(t->tool);
    free(t);
}

coder_tools *coder_tools_ref(coder_tools *t) {
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

static int add_tool(coder_tool *out, const json_t *tool) {
    const json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn)) fn = tool; /* as toolcall_coder_properties reads it */
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name) return 0;
    const json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
    size_t n = json_is_object(props) ? json_object_size(props) : 0;
    if (!(out->name = strdup(name)) || (n && !(out->params = calloc(n, sizeof *out->params)))) return -1;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        coder_param *p = &out->params[out->n_params];
        if (!(p->name = strdup(key))) return -1;
        p->kind = toolcall_coder_kind(props, (slice){key, strlen(key)});
        out->n_params++;
    }
    return 0;
}

coder_tools *coder_tools_of(const json_t *tools) {
    coder_tools *t = calloc(1, sizeof *t);
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    if (!t || (n && !(t->tool = calloc(n, sizeof *t->tool)))) {
        free(t);
        cd_fail("out of memory for the tools' call grammar");
        return NULL;
    }
    atomic_init(&t->refs, 1);
    for (size_t i = 0; i < n; i++) {
        int rc = add_tool(&t->tool[t->n], json_array_get(tools, i));
        if (t->tool[t->n].name) t->n++; /* a tool without a name is not callable: not listed */
        if (rc) {
            coder_tools_unref(t);
            cd_fail("out of memory for the tools' call grammar");
            return NULL;
        }
    }
    return t;
}

static int find_tool(const coder_tools *t, const char *name, size_t n) {
    for (uint32_t i = 0; t && i < t->n; i++)
        if (strlen(t->tool[i].name) == n && !memcmp(t->tool[i].name, name, n)) return (int)i;
    return -1;
}

static coder_kind param_kind(const coder_tools *t, int tool, const char *name, size_t n) {
    if (tool < 0) return CODER_TEXT;
    const coder_tool *k = &t->tool[tool];
    for (uint32_t i = 0; i < k->n_params; i++)
        if (strlen(k->params[i].name) == n && !memcmp(k->params[i].name, name, n)) return k->params[i].kind;
    return CODER_TEXT; /* no schema for it: the parser keeps its text */
}

/* ---- the grammar ------------------------------------------------------------------------ */

enum { S_LIT, S_NEXT, S_FNAME, S_PNAME, S_TEXT, S_JSON, S_DONE };
/* The literals (S_LIT) and what follows each. */
enum { L_START, L_NL_NEXT, L_NL_VALUE, L_CLOSE };
static const char *const lit_text[] = {
    [L_START] = "\n<function=",  /* then the function's name */
    [L_NL_NEXT] = "\n",          /* after the name's '>' or a text's close: then S_NEXT */
    [L_NL_VALUE] = "\n",         /* after a parameter's name: then its value */
    [L_CLOSE] = "</parameter>\n" /* after a JSON value's "\n": then S_NEXT */
};
/* S_NEXT: a parameter or the end, which lit names once byte 1 tells them apart. */
static const char next_param[] = "<parameter=", next_end[] = "</function>";
enum { NEXT_PARAM = 1, NEXT_END = 2 };
/* What a text value may not hold (all begin with '<', and hold no other '<'). */
static const char *const tags[] = {"</parameter>", "<parameter=", "</tool_call>", "</think>"};
#define N_TAGS (sizeof tags / sizeof *tags)

typedef struct out {
    char *v;
    size_t n;
} out;

static void put(out *o, const char *s) {
    size_t n = strlen(s);
    memcpy(o->v + o->n, s, n);
    o->n += n;
}

/* One byte of a JSON string's content. */
static void put_escaped(out *o, unsigned char ch) {
    static const char hex[] = "0123456789abcdef";
    const char *esc = ch == '"' ? "\\\""
        : ch == '\\'            ? "\\\\"
        : ch == '\n'            ? "\\n"
        : ch == '\r'            ? "\\r"
        : ch == '\t'            ? "\\t"
        : ch == '\b'            ? "\\b"
        : ch == '\f'            ? "\\f"
                                : NULL;
    if (esc) put(o, esc);
    else if (ch < 0x20) {
        char u[7] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15], 0};
        put(o, u);
    } else o->v[o->n++] = (char)ch;
}

void coder_call_init(coder_call *c, const coder_tools *tools) {
    memset(c, 0, offsetof(coder_call, hold));
    c->tools = tools, c->state = S_LIT, c->lit = L_START, c->tool = -1;
}

bool coder_call_done(const coder_call *c) { return c->state == S_DONE; }

bool coder_call_plain(const coder_call *c) {
    return (c->state == S_TEXT && !c->nl && !c->hold_n) || (c->state == S_JSON && c->in_str && !c->esc);
}

static void start_value(coder_call *c) {
    c->nl = c->hold_n = c->nul = c->depth = c->in_str = c->esc = c->any = 0;
    c->state = c->kind == CODER_TEXT ? S_TEXT : S_JSON;
}

static void lit_done(coder_call *c, out *o) {
    c->pos = 0;
    switch (c->lit) {
    case L_START: put(o, "{\"name\":\""), c->state = S_FNAME, c->name_n = 0; return;
    case L_NL_VALUE: start_value(c); return;
    default: c->state = S_NEXT; return; /* L_NL_NEXT, L_CLOSE */
    }
}

static void lit(coder_call *c, uint8_t which) { c->state = S_LIT, c->lit = which, c->pos = 0; }

/* S_NEXT: pos bytes of "<parameter=" or "</function>" matched. They part at byte 1, which sets
 * lit (NEXT_PARAM or NEXT_END) and writes the view at once, so that the automaton refuses
 * there a parameter the arguments cannot take or an end they cannot have (required ones
 * missing), not at the tag's last byte, where nothing else could follow. */
static bool next_byte(coder_call *c, char ch, out *o) {
    if (c->pos == 0) {
        if (ch != '<') return false;
    } else if (c->pos == 1) {
        if (ch == next_param[1]) {
            c->lit = NEXT_PARAM;
            put(o, c->params ? ",\"" : "\"");
            if (c->params < 255) c->params++;
        } else if (ch == next_end[1]) {
            c->lit = NEXT_END;
            put(o, "}}");
        } else return false;
    } else if (ch != (c->lit == NEXT_PARAM ? next_param : next_end)[c->pos]) return false;
    c->pos++;
    if (c->lit == NEXT_PARAM && c->pos == sizeof next_param - 1) c->state = S_PNAME, c->name_n = 0, c->pos = 0;
    else if (c->lit == NEXT_END && c->pos == sizeof next_end - 1) c->state = S_DONE;
    return true;
}

/* A name's byte (the function's or a parameter's): '>' ends it. */
static bool name_byte(coder_call *c, char ch, out *o) {
    if (ch != '>') {
        if (ch == '<' || ch == '\n' || ch == 0 || c->name_n == CODER_NAME_MAX) return false;
        c->name[c->name_n++] = ch;
        put_escaped(o, (unsigned char)ch);
        return true;
    }
    if (!c->name_n) return false;
    if (c->state == S_FNAME) {
        c->tool = (int16_t)find_tool(c->tools, c->name, c->name_n);
        put(o, "\",\"arguments\":{");
        lit(c, L_NL_NEXT);
        return true;
    }
    c->kind = (uint8_t)param_kind(c->tools, c->tool, c->name, c->name_n);
    put(o, c->kind == CODER_TEXT ? "\":\"" : "\":");
    lit(c, L_NL_VALUE);
    return true;
}

/* A byte of a text value's content. */
static void text_content(coder_call *c, char ch, out *o) {
    if (c->nul != 0xFF)
        c->nul = c->nul < 4 && tolower((unsigned char)ch) == "null"[c->nul] ? (uint8_t)(c->nul + 1) : 0xFF;
    put_escaped(o, (unsigned char)ch);
}

static void flush_held(coder_call *c, out *o) {
    if (c->nl) text_content(c, '\n', o), c->nl = 0;
    for (uint8_t i = 0; i < c->hold_n; i++) text_content(c, c->hold[i], o);
    c->hold_n = 0;
}

/* Whether view + the bytes at probe can still be read (p: the view before this read). */
static bool view_takes(const json_prefix *p, out *o, const char *probe, size_t n) {
    memcpy(o->v + o->n, probe, n);
    return json_prefix_accepts(p, o->v, o->n + n);
}

/* What is held (a "\n", a tag's start) must become something: the close, if the string may
 * end here, or text, if the automaton takes it as such. Else a byte is refused now rather than
 * leaving nothing that could follow. */
static bool held_viable(const coder_call *c, const json_prefix *p, out *o) {
    if (c->nl && c->nul != 4 && !memcmp(tags[0], c->hold, c->hold_n) && view_takes(p, o, "\"", 1)) return true;
    char text[32];
    out t = {text, 0};
    if (c->nl) put_escaped(&t, '\n');
    for (uint8_t i = 0; i < c->hold_n; i++) put_escaped(&t, (unsigned char)c->hold[i]);
    return view_takes(p, o, text, t.n);
}

static bool text_byte(coder_call *c, const json_prefix *p, char ch, out *o) {
    if (c->hold_n) {
        c->hold[c->hold_n] = ch;
        size_t n = (size_t)c->hold_n + 1;
        bool prefix = false;
        for (size_t t = 0; t < N_TAGS; t++) {
            size_t len = strlen(tags[t]);
            if (n > len || memcmp(tags[t], c->hold, n)) continue;
            if (n < len) {
                prefix = true;
                continue;
            }
            if (t != 0 || !c->nl || c->nul == 4) return false; /* a tag in the text, or a "null" */
            put(o, "\"");
            c->hold_n = c->nl = 0;
            lit(c, L_NL_NEXT);
            return true;
        }
        if (prefix) {
            c->hold_n = (uint8_t)n;
            return held_viable(c, p, o);
        }
        flush_held(c, o); /* not a tag: text after all, and ch starts afresh */
    }
    if (ch == '\n') {
        if (c->nl) text_content(c, '\n', o);
        c->nl = 1;
    } else if (ch == '<') {
        c->hold[0] = '<', c->hold_n = 1;
    } else {
        if (c->nl) text_content(c, '\n', o), c->nl = 0;
        text_content(c, ch, o);
        return true;
    }
    return held_viable(c, p, o);
}

/* Whether ch, after the bytes held, completes one of the tags (hold: the longest held
 * suffix that begins one; each tag holds one '<', at its start). */
static bool completes_tag(coder_call *c, char ch) {
    if (ch == '<') {
        c->hold[0] = '<', c->hold_n = 1;
        return false;
    }
    if (!c->hold_n) return false;
    c->hold[c->hold_n] = ch;
    size_t n = (size_t)c->hold_n + 1;
    c->hold_n = 0;
    for (size_t t = 0; t < N_TAGS; t++) {
        size_t len = strlen(tags[t]);
        if (n > len || memcmp(tags[t], c->hold, n)) continue;
        if (n == len) return true;
        c->hold_n = (uint8_t)n;
    }
    return false;
}

/* A byte of a JSON value: passed to the view as it is, the lexer following strings and
 * containers; "\n" outside both closes the value, if the automaton finds it whole there. Its
 * strings may not hold the tags a text may not (the parser would cut the value there). */
static bool json_byte(coder_call *c, const json_prefix *p, char ch, out *o) {
    if (completes_tag(c, ch)) return false;
    if (c->in_str) {
        if (c->esc) c->esc = 0;
        else if (ch == '\\') c->esc = 1;
        else if (ch == '"') c->in_str = 0;
    } else if (ch == '\n' && c->depth == 0) {
        if (!c->any) return false;
        if (!view_takes(p, o, ",", 1) && !view_takes(p, o, "}", 1)) return false; /* the arguments go on, or end */
        lit(c, L_CLOSE);
        return true;
    } else if (ch == '"') c->in_str = 1;
    else if (ch == '{' || ch == '[') c->depth++;
    else if (ch == '}' || ch == ']' || ch == ',') {
        if (c->depth == 0) return false; /* would close the arguments, or begin another of them */
        if (ch != ',') c->depth--;
    }
    c->any = 1;
    /* a boolean's text is read in any case (the parser's rule; the template writes Python's True) */
    o->v[o->n++] = c->kind == CODER_BOOL && !c->in_str ? (char)tolower((unsigned char)ch) : ch;
    return true;
}

bool coder_call_read(coder_call *c, const json_prefix *p, const char *bytes, size_t n, char *view, size_t *vn,
                     size_t *used) {
    out o = {view, 0};
    size_t i = 0;
    for (; i < n && c->state != S_DONE; i++) {
        char ch = bytes[i];
        bool ok;
        switch (c->state) {
        case S_LIT:
            ok = ch == lit_text[c->lit][c->pos];
            if (ok && !lit_text[c->lit][++c->pos]) lit_done(c, &o);
            break;
        case S_NEXT: ok = next_byte(c, ch, &o); break;
        case S_FNAME:
        case S_PNAME: ok = name_byte(c, ch, &o); break;
        case S_TEXT: ok = text_byte(c, p, ch, &o); break;
        default: ok = json_byte(c, p, ch, &o); break;
        }
        if (!ok) return false;
    }
    *vn = o.n, *used = i;
    return true;
}
