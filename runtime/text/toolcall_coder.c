#include "runtime/text/toolcall_coder.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/text/json_jinja.h"

/* ---- Python's int() and float() of a text ---------------------------------------------- */

static slice py_trim(slice s) {
    while (s.n && (is_ws(s.p[0]) || s.p[0] == '\f' || s.p[0] == '\v')) s.p++, s.n--;
    while (s.n && (is_ws(s.p[s.n - 1]) || s.p[s.n - 1] == '\f' || s.p[s.n - 1] == '\v')) s.n--;
    return s;
}

/* Digits with single underscores between them (Python's numeric literal rule), copied to
 * out without the underscores; the count of bytes read, 0 when there is no digit. */
static size_t digits(slice s, size_t i, char *out, size_t *o) {
    size_t start = i;
    while (i < s.n && isdigit((unsigned char)s.p[i])) {
        out[(*o)++] = s.p[i++];
        if (i + 1 < s.n && s.p[i] == '_' && isdigit((unsigned char)s.p[i + 1])) i++;
    }
    return i - start;
}

/* int(text): an optional sign, then digits. */
static bool py_int(slice s, json_int_t *out) {
    s = py_trim(s);
    if (s.n == 0 || s.n > 64) return false;
    char buf[80];
    size_t i = 0, o = 0;
    if (s.p[0] == '+' || s.p[0] == '-') buf[o++] = s.p[i++];
    size_t d = digits(s, i, buf, &o);
    if (d == 0 || i + d != s.n) return false;
    buf[o] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end) return false; /* beyond 64 bits: Python would have it, jansson cannot */
    *out = (json_int_t)v;
    return true;
}

/* float(text), finite: [sign] (digits [. [digits]] | . digits) [e [sign] digits]. inf and nan,
 * which Python reads, are not finite, and vLLM keeps their text. */
static bool py_float(slice s, double *out) {
    s = py_trim(s);
    if (s.n == 0 || s.n > 256) return false;
    char buf[300];
    size_t i = 0, o = 0, whole, frac = 0;
    if (s.p[i] == '+' || s.p[i] == '-') buf[o++] = s.p[i++];
    i += whole = digits(s, i, buf, &o);
    if (i < s.n && s.p[i] == '.') {
        buf[o++] = s.p[i++];
        i += frac = digits(s, i, buf, &o);
    }
    if (whole + frac == 0) return false;
    if (i < s.n && (s.p[i] == 'e' || s.p[i] == 'E')) {
        buf[o++] = s.p[i++];
        if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) buf[o++] = s.p[i++];
        size_t e = digits(s, i, buf, &o);
        if (e == 0) return false;
        i += e;
    }
    if (i != s.n) return false;
    buf[o] = 0;
    double d = strtod(buf, NULL);
    if (!isfinite(d)) return false;
    *out = d;
    return true;
}

static bool equals_nocase(slice s, const char *word) {
    size_t n = strlen(word);
    if (s.n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s.p[i]) != word[i]) return false;
    return true;
}

/* ---- the schema's type of a parameter --------------------------------------------------- */

const json_t *toolcall_coder_properties(const json_t *tools, slice name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) fn = t;
        const json_t *n = json_object_get(fn, "name");
        if (json_is_string(n) && json_string_length(n) == name.n && !memcmp(json_string_value(n), name.p, name.n))
            return json_object_get(json_object_get(fn, "parameters"), "properties");
    }
    return NULL;
}

/* str(type).strip().lower() into out; "" for a type that is not a string (a list prints as
 * Python's repr, which matches none of the names below either). false: no type (a string). */
static bool param_type(const json_t *props, slice pname, char out[32]) {
    char key[256];
    if (pname.n >= sizeof key) return false;
    memcpy(key, pname.p, pname.n);
    key[pname.n] = 0;
    if (memchr(key, 0, pname.n)) return false;
    const json_t *type = json_object_get(json_object_get(props, key), "type");
    if (!type) return false;
    out[0] = 0;
    if (!json_is_string(type)) return true;
    slice t = py_trim((slice){json_string_value(type), json_string_length(type)});
    if (t.n >= 32) return true;
    for (size_t i = 0; i < t.n; i++) out[i] = (char)tolower((unsigned char)t.p[i]);
    out[t.n] = 0;
    return true;
}

static bool starts(const char *s, const char *pre) { return !strncmp(s, pre, strlen(pre)); }

static bool one_of(const char *s, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(s, *names)) return true;
    return false;
}

coder_kind toolcall_coder_kind(const json_t *props, slice pname) {
    static const char *const strings[] = {"string", "str", "text", "varchar", "char", "enum", NULL};
    static const char *const bools[] = {"boolean", "bool", "binary", NULL};
    char type[32];
    if (!props || !param_type(props, pname, type) || one_of(type, strings)) return CODER_TEXT;
    if (starts(type, "int") || starts(type, "uint") || starts(type, "long") || starts(type, "short") ||
        starts(type, "unsigned"))
        return CODER_INT;
    if (starts(type, "num") || starts(type, "float")) return CODER_NUM;
    if (one_of(type, bools)) return CODER_BOOL;
    return CODER_JSON; /* object, array, arr, dict*, list* and any other type */
}

/* A parameter's value as the schema types it (the table in toolcall_coder.h); NULL only
 * when out of memory. */
static json_t *convert(slice v, const json_t *props, slice pname) {
    if (equals_nocase(v, "null")) return json_null();
    switch (toolcall_coder_kind(props, pname)) {
    case CODER_TEXT: return json_stringn(v.p, v.n);
    case CODER_INT: {
        json_int_t i;
        return py_int(v, &i) ? json_integer(i) : json_stringn(v.p, v.n);
    }
    case CODER_NUM: {
        double d;
        if (!py_float(v, &d)) return json_stringn(v.p, v.n);
        if (d != trunc(d) || fabs(d) >= 9.2e18) return json_real(d);
        return json_integer((json_int_t)d);
    }
    case CODER_BOOL: return json_boolean(equals_nocase(v, "true"));
    case CODER_JSON: break;
    }
    json_t *j = json_loadb(v.p, v.n, JSON_DECODE_ANY, NULL); /* JSON, else the text */
    return j ? j : json_stringn(v.p, v.n);
}

/* ---- the call --------------------------------------------------------------------------- */

/* The end of a parameter's value starting at body[at]: the nearest of "</parameter>" and the
 * next "<parameter=" (or the body's end); *closed says which ended it. */
static size_t value_end(slice body, size_t at, bool *closed) {
    slice rest = tail(body, at);
    ptrdiff_t close = find_first(rest, LIT("</parameter>")), next = find_first(rest, LIT("<parameter="));
    *closed = close >= 0 && (next < 0 || close < next);
    if (*closed) return at + (size_t)close;
    return next >= 0 ? at + (size_t)next : body.n;
}

/* A gap between parameters (or before the first, after the last) holds no function: that
 * would be a second call in the block. */
static bool gap_ok(slice gap) { return find_first(gap, LIT("<function=")) < 0; }

static int add_params(json_t *args, slice body, const json_t *props) {
    size_t from = 0;
    for (ptrdiff_t p; (p = find_first(tail(body, from), LIT("<parameter="))) >= 0;) {
        if (!gap_ok((slice){body.p + from, (size_t)p})) return -1;
        size_t at = from + (size_t)p + LIT("<parameter=").n;
        ptrdiff_t gt = find_first(tail(body, at), LIT(">"));
        if (gt < 0) return -1;
        slice pname = {body.p + at, (size_t)gt};
        at += (size_t)gt + 1;
        bool closed;
        size_t end = value_end(body, at, &closed);
        slice v = {body.p + at, end - at};
        if (v.n && v.p[0] == '\n') v.p++, v.n--;
        if (v.n && v.p[v.n - 1] == '\n') v.n--;
        char key[256];
        if (pname.n == 0 || pname.n >= sizeof key || memchr(pname.p, 0, pname.n)) return -1;
        memcpy(key, pname.p, pname.n);
        key[pname.n] = 0;
        json_t *value = convert(v, props, pname);
        if (!value || json_object_set_new(args, key, value)) return -1;
        from = closed ? end + LIT("</parameter>").n : end;
    }
    return gap_ok(tail(body, from)) ? 0 : -1;
}

json_t *toolcall_coder_call(slice inner, const json_t *tools) {
    slice s = strip_ws(inner);
    if (!starts_with(s, LIT("<function="))) return NULL;
    slice after = tail(s, LIT("<function=").n);
    ptrdiff_t gt = find_first(after, LIT(">"));
    if (gt <= 0) return NULL;
    slice name = {after.p, (size_t)gt};
    if (memchr(name.p, '\n', name.n) || memchr(name.p, '<', name.n)) return NULL;
    /* the body ends at the last "</function>": a value may quote the tag (code does) */
    slice body = tail(after, (size_t)gt + 1);
    ptrdiff_t close = find_last(body, LIT("</function>"));
    if (close >= 0) {
        if (strip_ws(tail(body, (size_t)close + LIT("</function>").n)).n) return NULL; /* text after the call */
        body.n = (size_t)close;
    }
    json_t *args = json_object(), *call = NULL;
    char *text = NULL;
    size_t len = 0;
    if (args && add_params(args, body, toolcall_coder_properties(tools, name)) == 0 &&
        json_jinja_dumps(args, &text, &len) == 0)
        call = json_pack("{s:s, s:{s:s%, s:s%}}", "type", "function", "function", "name", name.p, name.n, "arguments",
                         text, len);
    free(text);
    json_decref(args);
    return call;
}
