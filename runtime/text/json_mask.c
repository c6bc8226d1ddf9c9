#include "runtime/text/json_mask.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/base/error.h"

enum {
    JSON_TOKEN_TEXT = 1,   /* a normal or byte token with bytes: may be JSON text */
    JSON_TOKEN_EOG = 2,    /* ends generation */
    JSON_TOKEN_SAFE = 4,   /* string-safe: inside a string it only extends the string */
};

/* No '"', '\\' or control byte, and whole well-formed UTF-8 sequences (json_prefix's checks). */
static bool string_safe(const char *s, size_t n) {
    json_prefix p;
    json_prefix_init(&p);
    if (!json_prefix_feed(&p, "{\"\":\"", 5)) return false; /* inside a string value */
    for (size_t i = 0; i < n; i++)
        if (s[i] == '"' || s[i] == '\\') return false;
    return json_prefix_feed(&p, s, n) && json_prefix_in_string(&p);
}

int json_vocab_init(json_vocab *v, const tokenizer *t) {
    *v = (json_vocab){.tok = t, .n = tok_n_vocab(t)};
    v->first = calloc((size_t)v->n, 1);
    v->flags = calloc((size_t)v->n, 1);
    if (!v->first || !v->flags) {
        json_vocab_free(v);
        return cd_fail("out of memory for the JSON mask's vocabulary table");
    }
    for (int32_t id = 0; id < v->n; id++) {
        size_t n;
        const char *s = tok_piece(t, id, &n);
        enum tok_type type = tok_token_type(t, id);
        if (tok_is_eog(t, id)) v->flags[id] = JSON_TOKEN_EOG;
        else if ((type == TOK_TYPE_NORMAL || type == TOK_TYPE_BYTE) && n) {
            v->first[id] = (uint8_t)s[0];
            v->flags[id] = JSON_TOKEN_TEXT | (string_safe(s, n) ? JSON_TOKEN_SAFE : 0);
        }
    }
    return 0;
}

void json_vocab_free(json_vocab *v) {
    free(v->first);
    free(v->flags);
    *v = (json_vocab){0};
}

void json_mask_init(json_mask *m, const json_vocab *v) {
    m->v = v;
    json_prefix_init(&m->state);
}

bool json_mask_allows(const json_mask *m, int32_t id) {
    const json_vocab *v = m->v;
    if (id < 0 || id >= v->n) return false;
    if (v->flags[id] & JSON_TOKEN_EOG) return json_prefix_done(&m->state);
    if (!(v->flags[id] & JSON_TOKEN_TEXT)) return false;
    size_t n;
    const char *bytes = tok_piece(v->tok, id, &n);
    json_prefix p = m->state;
    return json_prefix_feed(&p, bytes, n);
}

void json_mask_apply(const json_mask *m, float *logits, int32_t n) {
    const json_vocab *v = m->v;
    bool first_ok[256];
    for (int b = 0; b < 256; b++) {
        json_prefix p = m->state;
        char c = (char)b;
        first_ok[b] = json_prefix_feed(&p, &c, 1);
    }
    bool in_string = json_prefix_in_string(&m->state);
    bool done = json_prefix_done(&m->state);
    for (int32_t id = 0; id < n; id++) {
        if (logits[id] == -INFINITY) continue;
        uint8_t f = id < v->n ? v->flags[id] : 0;
        bool ok;
        if (f & JSON_TOKEN_EOG) ok = done;
        else if (!(f & JSON_TOKEN_TEXT) || !first_ok[v->first[id]]) ok = false;
        else if (in_string && (f & JSON_TOKEN_SAFE)) ok = true;
        else ok = json_mask_allows(m, id);
        if (!ok) logits[id] = -INFINITY;
    }
}

void json_mask_accept(json_mask *m, int32_t id) {
    size_t n;
    const char *bytes = tok_piece(m->v->tok, id, &n);
    if (bytes && !(m->v->flags[id] & JSON_TOKEN_EOG)) json_prefix_feed(&m->state, bytes, n);
}
