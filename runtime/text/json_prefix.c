#include "runtime/text/json_prefix.h"

#include <string.h>

enum {
    VALUE,     /* a value of p->node (after ':', ',' in an array, or at the start) */
    ARR_FIRST, /* after '[': an item of p->node or ']' */
    KEY_FIRST, /* after '{': a key or '}' */
    KEY,       /* after ',' in an object: a key */
    COLON,     /* after a key: ':', then a value of p->node */
    AFTER,     /* after a value: ',' or the container's close */
    STRING,    /* inside a string value of p->node, or a key not declared (key) */
    ESCAPE,    /* after a backslash */
    HEX,       /* in \uXXXX (sub: digits seen) */
    KEY_NAME,  /* inside a declared key (mlo..mhi: the properties it may still be) */
    NUMBER,    /* inside a number (sub: its part) */
    LITERAL,   /* inside true / false / null (sub: which, pos: bytes matched) */
    ENUM,      /* inside one of p->node's enum values (mlo..mhi: those it may still be) */
    DONE,      /* the value is whole */
};

/* Parts of a number; the ones marked end may be its last. */
enum { N_MINUS, N_ZERO /* end */, N_INT /* end */, N_DOT, N_FRAC /* end */, N_E, N_ESIGN, N_EXP /* end */ };

static const char *const literals[] = {"true", "false", "null"};

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static bool number_may_end(uint8_t sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

/* Copies what is meaningful: the fields and the open frames. */
static void path_copy(json_path *to, const json_path *from) {
    memcpy(to, from, offsetof(json_path, f) + from->depth * sizeof(json_frame));
}

static bool path_equal(const json_path *a, const json_path *b) {
    return a->depth == b->depth && !memcmp(a, b, offsetof(json_path, f) + a->depth * sizeof(json_frame));
}

static const json_node *node_of(const json_schema *s, uint32_t id) { return &s->nodes[id]; }
static json_frame *top(json_path *p) { return &p->f[p->depth - 1]; }
static bool fits(const json_path *p, uint8_t need) { return p->depth + need <= JSON_PREFIX_MAX_DEPTH; }

/* A value has ended: AFTER inside a container; DONE when it was the outermost. */
static void value_ended(json_path *p) {
    p->sub = p->pos = p->utf8 = p->lo = p->hi = p->key = p->keys = p->integer = p->neg = 0;
    p->node = 0, p->mlo = p->mhi = p->mpos = p->slen = 0, p->num = 0, p->re = 0, p->cp = 0;
    p->state = p->depth ? AFTER : DONE;
}

/* The object's next key may be declared (an unseen property whose value fits) / another one. */
static bool declared_key_left(const json_schema *s, json_path *p) {
    const json_frame *f = top(p);
    const json_node *o = node_of(s, f->node);
    for (uint32_t i = 0; i < o->n_prop; i++)
        if (!(f->seen >> i & 1) && fits(p, node_of(s, s->properties[o->prop + i].node)->need)) return true;
    return false;
}

static bool other_key_allowed(const json_schema *s, json_path *p) {
    const json_node *o = node_of(s, top(p)->node);
    return o->additional >= 0 && fits(p, node_of(s, (uint32_t)o->additional)->need);
}

static bool push(json_path *p, unsigned char open, uint32_t node) {
    if (p->depth == JSON_PREFIX_MAX_DEPTH) return false;
    p->f[p->depth++] = (json_frame){.node = (uint16_t)node, .open = open};
    return true;
}

static bool close_container(const json_schema *s, json_path *p, unsigned char c) {
    if (!p->depth) return false;
    json_frame *f = top(p);
    const json_node *n = node_of(s, f->node);
    if (f->open != (c == '}' ? '{' : '[')) return false;
    if (c == '}' && (f->seen & n->required) != n->required) return false;
    if (c == ']' && f->count < n->min_items) return false;
    p->depth--;
    value_ended(p);
    return true;
}

/* The candidates of ENUM (literals) and of a key (properties), sorted by their bytes. */
static json_bytes candidate(const json_schema *s, const json_path *p, uint32_t i) {
    return p->state == ENUM ? s->literals[i] : s->properties[i].key;
}

/* Candidates [mlo, mhi) whose byte at mpos is c: narrowed in place (contiguous, as the list is
 * sorted). False if none. */
static bool narrow(const json_schema *s, json_path *p, unsigned char c) {
    uint32_t lo = p->mhi, hi = p->mlo;
    for (uint32_t i = p->mlo; i < p->mhi; i++) {
        json_bytes b = candidate(s, p, i);
        if (b.len > p->mpos && (unsigned char)s->bytes[b.off + p->mpos] == c) {
            if (lo > i) lo = i;
            hi = i + 1;
        }
    }
    if (hi <= lo) return false;
    p->mlo = lo, p->mhi = hi, p->mpos++;
    return true;
}

/* The candidate matched whole, if any (sorted: it is the first of the range). */
static bool candidate_whole(const json_schema *s, const json_path *p, uint32_t *at) {
    if (p->mlo < p->mhi && candidate(s, p, p->mlo).len == p->mpos) return *at = p->mlo, true;
    return false;
}

static bool feed_byte(const json_schema *s, json_path *p, unsigned char c);

/* A byte of one of an enum's values (written compactly: json_schema.h). A number may be followed
 * by more digits of a longer value; a byte that continues none ends it and is read next. */
static bool enum_byte(const json_schema *s, json_path *p, unsigned char c) {
    uint32_t at;
    bool whole = candidate_whole(s, p, &at);
    if (narrow(s, p, c)) {
        if (candidate_whole(s, p, &at) && !is_digit((unsigned char)s->bytes[s->literals[at].off + p->mpos - 1]))
            value_ended(p); /* a string, container or literal ends with its last byte */
        return true;
    }
    if (!whole) return false;
    value_ended(p);
    return feed_byte(s, p, c);
}

/* Whether some property of [mlo, mhi) is unseen and its value fits. */
static bool unseen_candidate(const json_schema *s, json_path *p) {
    const json_frame *f = top(p);
    const json_node *o = node_of(s, f->node);
    for (uint32_t i = p->mlo; i < p->mhi; i++)
        if (!(f->seen >> (i - o->prop) & 1) && fits(p, node_of(s, s->properties[i].node)->need)) return true;
    return false;
}

/* A declared key, byte by byte against the properties still possible. */
static bool key_name_byte(const json_schema *s, json_path *p, unsigned char c) {
    json_frame *f = top(p);
    const json_node *o = node_of(s, f->node);
    uint32_t at;
    bool whole = candidate_whole(s, p, &at);
    /* a '"' inside a key's bytes is escaped (so never where one ends): it continues the key */
    if (narrow(s, p, c)) return unseen_candidate(s, p);
    if (c != '"' || !whole) return false;
    uint32_t bit = at - o->prop, value = s->properties[at].node;
    if (f->seen >> bit & 1 || !fits(p, node_of(s, value)->need)) return false;
    f->seen |= 1ull << bit;
    p->mlo = p->mhi = p->mpos = 0;
    p->state = COLON, p->node = (uint16_t)value;
    return true;
}

/* ---- integers within minimum / maximum: the digits so far (magnitude num, sign neg) must
 * still lead to one in [min_int, max_int], and the number ends only on one ---- */

/* Some integer whose digits begin with v's (more digits allowed unless it is "0") is in range. */
static bool int_reachable(const json_node *n, bool neg, int64_t v, bool more) {
    for (int64_t span = 1;; span *= 10) { /* the magnitudes [v * span, v * span + span - 1] */
        int64_t a = v * span, b = a + span - 1, lo = neg ? -b : a, hi = neg ? -a : b;
        if (lo <= n->max_int && hi >= n->min_int) return true;
        if (!more || v == 0 || span > JSON_SCHEMA_INT_LIMIT / 10 || v > JSON_SCHEMA_INT_LIMIT / (span * 10))
            return false;
    }
}

#define INT_FREE (-1) /* num: every integer these digits can become is in range (no bound that way) */

static bool int_in_range(const json_node *n, const json_path *p) {
    int64_t x = p->neg ? -p->num : p->num;
    return p->num == INT_FREE || (x >= n->min_int && x <= n->max_int);
}

/* A digit of a bounded integer (after "-" or another digit). Once the number is in range and
 * no bound lies ahead in its direction, the digits stop being counted: paths that differ only
 * there compare equal. */
static bool int_digit(const json_node *n, json_path *p, unsigned char c) {
    if (p->num == INT_FREE) return true;
    int64_t v = p->num * 10 + (c - '0');
    if (p->num > JSON_SCHEMA_INT_LIMIT / 10 || !int_reachable(n, p->neg, v, v != 0)) return false;
    p->num = v;
    bool open_ahead = p->neg ? n->min_int == -JSON_SCHEMA_INT_LIMIT : n->max_int == JSON_SCHEMA_INT_LIMIT;
    if (open_ahead && int_in_range(n, p)) p->num = INT_FREE;
    return true;
}

/* The first byte of a value of p->node (a settled path: never a union). */
static bool start_value(const json_schema *s, json_path *p, unsigned char c) {
    const json_node *n = node_of(s, p->node);
    if (!fits(p, n->need)) return false;
    if (n->n_lit) {
        p->state = ENUM, p->mlo = n->lit, p->mhi = n->lit + n->n_lit, p->mpos = 0;
        return enum_byte(s, p, c);
    }
    if (c == '{') {
        if (!(n->types & JSON_T_OBJECT) || !fits(p, n->obj_depth) || !push(p, '{', p->node)) return false;
        p->state = KEY_FIRST, p->keys = 0, p->node = 0;
        return true;
    }
    if (c == '[') {
        if (!(n->types & JSON_T_ARRAY) || !fits(p, n->arr_depth) || !push(p, '[', p->node)) return false;
        p->state = ARR_FIRST, p->node = (uint16_t)n->items;
        return true;
    }
    if (c == '"') {
        if (!(n->types & JSON_T_STRING)) return false;
        p->state = STRING, p->key = 0, p->slen = 0;
        if (n->pattern >= 0) p->re = json_regex_start(&s->regexes[n->pattern]);
        return true;
    }
    if (c == '-' || is_digit(c)) {
        if (!(n->types & (JSON_T_NUMBER | JSON_T_INTEGER))) return false;
        p->state = NUMBER, p->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        p->integer = !(n->types & JSON_T_NUMBER);
        if (!n->int_bounded) return true;
        p->neg = c == '-', p->num = 0;
        return c == '-' ? n->min_int <= 0 : int_digit(n, p, c);
    }
    for (uint8_t i = 0; i < 3; i++)
        if (c == (unsigned char)literals[i][0]) {
            if (!(n->types & (i < 2 ? JSON_T_BOOLEAN : JSON_T_NULL))) return false;
            p->state = LITERAL, p->sub = i, p->pos = 1;
            return true;
        }
    return false;
}

/* A string's length bounds, when it is a value (a key has none). */
static bool bounded(const json_schema *s, const json_path *p) {
    const json_node *n = node_of(s, p->node);
    return !p->key && (n->min_len || n->max_len != UINT32_MAX);
}

/* A character begins: within the string's maxLength? Counted only as far as the bounds need it
 * (to minLength when there is no maxLength), so that paths that differ in no way that matters
 * compare equal. */
static bool count_char(const json_schema *s, json_path *p) {
    if (p->key) return true;
    const json_node *n = node_of(s, p->node);
    if (p->slen >= n->max_len) return false;
    if (n->max_len != UINT32_MAX || p->slen < n->min_len) p->slen++;
    return true;
}

/* A string value with a pattern: its regex (json_regex.h), else NULL. */
static const json_regex *pattern_of(const json_schema *s, const json_path *p) {
    int32_t k = p->key ? -1 : node_of(s, p->node)->pattern;
    return k >= 0 ? &s->regexes[k] : NULL;
}

/* A character of a patterned string, whole: the regex moves on, or the character is refused. */
static bool regex_char(const json_regex *re, json_path *p, uint32_t c) {
    p->re = json_regex_step(re, p->re, c);
    p->cp = 0;
    return p->re != 0;
}

/* Mid-UTF-8: some character the sequence can still become may come next (else a lead byte the
 * pattern cannot follow would be a dead end). Its bits so far, the rest free; at least the
 * smallest character of a sequence that long (a lead byte's overlong forms are refused byte
 * by byte: E0 and F0 alone leave them in the bits). */
static bool regex_may_become(const json_regex *re, const json_path *p) {
    static const uint32_t least[] = {0, 0x80, 0x800, 0x10000}; /* by continuation bytes still due */
    uint32_t shift = 6u * p->utf8, lo = p->cp << shift, hi = lo | ((1u << shift) - 1);
    if (lo < least[p->utf8]) lo = least[p->utf8];
    return json_regex_may_take(re, p->re, lo, hi);
}

/* The closing quote: a value string of at least minLength (matching its pattern); a key that
 * is not declared, then its value (of additionalProperties). */
static bool end_string(const json_schema *s, json_path *p) {
    if (!p->key) {
        if (p->slen < node_of(s, p->node)->min_len) return false;
        const json_regex *re = pattern_of(s, p);
        if (re && !json_regex_accepts(re, p->re)) return false;
        value_ended(p);
        return true;
    }
    uint32_t at;
    if (candidate_whole(s, p, &at)) return false; /* a declared key: written as one (KEY_NAME) */
    p->key = 0, p->slen = 0, p->mlo = p->mhi = p->mpos = 0;
    p->state = COLON, p->node = (uint16_t)node_of(s, top(p)->node)->additional;
    return true;
}

/* A byte inside a string: UTF-8 checked as it goes (Unicode's table of well-formed sequences).
 * A key that is not declared is followed against the declared ones, to refuse it if it is one. */
static bool string_byte(const json_schema *s, json_path *p, unsigned char c) {
    const json_regex *re = pattern_of(s, p);
    if (p->utf8) {
        if (c < p->lo || c > p->hi) return false;
        p->utf8--, p->lo = 0x80, p->hi = 0xBF;
        if (re) { /* the code point grows; whole, the regex reads it */
            p->cp = p->cp << 6 | (c & 0x3F);
            if (p->utf8 ? !regex_may_become(re, p) : !regex_char(re, p, p->cp)) return false;
        }
    } else if (c == '"') {
        return end_string(s, p);
    } else if (c == '\\') {
        /* in an object with declared keys, other keys have no escapes; nor have patterned
         * strings (json_schema.h) */
        if ((p->key && node_of(s, top(p)->node)->n_prop) || re) return false;
        if (!count_char(s, p)) return false;
        p->state = ESCAPE;
        return true;
    } else if (c < 0x20) {
        return false;
    } else if (c >= 0x80) {
        p->lo = 0x80, p->hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) p->utf8 = 1, p->cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            p->utf8 = 2, p->cp = c & 0x0F, p->lo = c == 0xE0 ? 0xA0 : 0x80, p->hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            p->utf8 = 3, p->cp = c & 0x07, p->lo = c == 0xF0 ? 0x90 : 0x80, p->hi = c == 0xF4 ? 0x8F : 0xBF;
        else return false;
        if (!re) p->cp = 0; /* kept only where a pattern reads it */
        if (!count_char(s, p) || (re && !regex_may_become(re, p))) return false;
    } else if (!count_char(s, p) || (re && !regex_char(re, p, c))) {
        return false;
    }
    if (p->key && p->mlo < p->mhi && !narrow(s, p, c)) p->mlo = p->mhi = 0;
    return true;
}

/* A byte inside a number; one that cannot continue it ends it (if it may end there) and is then
 * read as what follows a value (returns 2). */
static int number_byte(const json_schema *s, json_path *p, unsigned char c) {
    bool fraction = !p->integer && c == '.', exponent = !p->integer && (c == 'e' || c == 'E');
    const json_node *n = node_of(s, p->node);
    switch (p->sub) {
    case N_MINUS:
        if (!is_digit(c) || (n->int_bounded && !int_digit(n, p, c))) return 0;
        p->sub = c == '0' ? N_ZERO : N_INT;
        return 1;
    case N_ZERO:
    case N_INT:
        if (p->sub == N_INT && is_digit(c)) return !n->int_bounded || int_digit(n, p, c);
        if (fraction) return p->sub = N_DOT, 1;
        if (exponent) return p->sub = N_E, 1;
        break;
    case N_DOT: return is_digit(c) ? (p->sub = N_FRAC, 1) : 0;
    case N_FRAC:
        if (is_digit(c)) return 1;
        if (exponent) return p->sub = N_E, 1;
        break;
    case N_E:
        if (c == '+' || c == '-') return p->sub = N_ESIGN, 1;
        /* fall through */
    case N_ESIGN: return is_digit(c) ? (p->sub = N_EXP, 1) : 0;
    case N_EXP:
        if (is_digit(c)) return 1;
        break;
    }
    if (n->int_bounded && !int_in_range(n, p)) return 0; /* it may not end short of minimum */
    value_ended(p);
    return 2;
}

/* A whitespace byte where whitespace may stand: within the run's shape (json_prefix.h)? */
static bool take_ws(json_path *p, unsigned char c) {
    if (c == '\n' && p->ws == 0) return p->ws = 2, true;
    if (c == ' ' && p->ws == 0) return p->ws = 1, true;
    if ((c == ' ' || c == '\t') && p->ws >= 2 && p->ws < 2 + JSON_PREFIX_MAX_INDENT) return p->ws++, true;
    return false;
}

/* ',' after a value: another key (if one may come) or another item (within maxItems). */
static bool comma(const json_schema *s, json_path *p) {
    json_frame *f = top(p);
    if (f->open == '{') {
        if (!declared_key_left(s, p) && !other_key_allowed(s, p)) return false;
        p->state = KEY, p->keys = 0;
        return true;
    }
    const json_node *a = node_of(s, f->node);
    if (f->count >= a->max_items || !fits(p, node_of(s, a->items)->need)) return false;
    if (a->max_items != UINT32_MAX || f->count < a->min_items) f->count++; /* counted as far as the bounds need */
    p->state = VALUE, p->node = (uint16_t)a->items;
    return true;
}

/* '"' opening a key: a declared one (keys 1) or another (keys 2). */
static bool open_key(const json_schema *s, json_path *p) {
    const json_node *o = node_of(s, top(p)->node);
    p->mlo = o->prop, p->mhi = o->prop + o->n_prop, p->mpos = 0;
    if (p->keys == 1) {
        p->state = KEY_NAME;
        return unseen_candidate(s, p);
    }
    p->state = STRING, p->key = 1, p->slen = 0;
    return true;
}

static bool feed_byte(const json_schema *s, json_path *p, unsigned char c) {
    bool between = p->state <= AFTER; /* the states between tokens, where whitespace may stand */
    if (between && is_ws(c)) return take_ws(p, c);
    if (between) p->ws = 0;
    switch (p->state) {
    case VALUE: return start_value(s, p, c);
    case ARR_FIRST:
        if (c == ']') return close_container(s, p, c);
        if (node_of(s, top(p)->node)->max_items == 0) return false;
        top(p)->count = 1;
        return start_value(s, p, c);
    case KEY_FIRST:
    case KEY:
        if (c == '}' && p->state == KEY_FIRST) return close_container(s, p, c);
        return c == '"' && open_key(s, p);
    case COLON:
        if (c != ':') return false;
        p->state = VALUE;
        return true;
    case AFTER:
        if (c == ',') return comma(s, p);
        return (c == '}' || c == ']') && close_container(s, p, c);
    case STRING: return string_byte(s, p, c);
    case ESCAPE:
        if (c == 'u') {
            if (bounded(s, p)) return false; /* a bounded string counts characters: no \u (json_schema.h) */
            p->state = HEX, p->sub = 0;
            return true;
        }
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
        p->state = STRING;
        return true;
    case HEX:
        if (!is_hex(c)) return false;
        if (++p->sub == 4) p->state = STRING, p->sub = 0;
        return true;
    case KEY_NAME: return key_name_byte(s, p, c);
    case NUMBER: {
        int r = number_byte(s, p, c);
        return r == 2 ? feed_byte(s, p, c) : r == 1;
    }
    case LITERAL:
        if (c != (unsigned char)literals[p->sub][p->pos]) return false;
        if (!literals[p->sub][++p->pos]) value_ended(p);
        return true;
    case ENUM: return enum_byte(s, p, c);
    default: /* DONE: nothing may follow */ return false;
    }
}

/* ---- settling: a path that stands before a union's value, or before a key that may be of
 * either kind, becomes one path per choice ---- */

static bool unsettled(const json_schema *s, const json_path *p) {
    if (p->state == VALUE || p->state == ARR_FIRST) return node_of(s, p->node)->n_branch > 0;
    return (p->state == KEY_FIRST || p->state == KEY) && p->keys == 0;
}

/* Choice k of an unsettled path into *out: 1 made, 0 not possible (skip it), -1 no more. */
static int settle_one(const json_schema *s, const json_path *p, uint32_t k, json_path *out) {
    if (p->state == VALUE || p->state == ARR_FIRST) {
        const json_node *u = node_of(s, p->node);
        if (k >= u->n_branch) return -1;
        uint32_t b = s->branches[u->branch + k];
        if (!fits(p, node_of(s, b)->need)) return 0;
        path_copy(out, p);
        out->node = (uint16_t)b;
        return 1;
    }
    if (k >= 2) return -1;
    json_path *q = (json_path *)p; /* the checks only read it */
    bool declared = declared_key_left(s, q), other = other_key_allowed(s, q);
    if (k == 0 ? !declared && (other || p->state == KEY) : !other) return 0;
    path_copy(out, p);
    out->keys = (uint8_t)(k + 1); /* with neither, KEY_FIRST may still close: kept as "declared" */
    return 1;
}

static bool path_done(const json_schema *s, const json_path *q) {
    uint32_t at;
    if (q->state == DONE) return true;
    if (q->depth == 0 && q->state == NUMBER && number_may_end(q->sub))
        return !node_of(s, q->node)->int_bounded || int_in_range(node_of(s, q->node), q);
    return q->depth == 0 && q->state == ENUM && candidate_whole(s, q, &at);
}

/* One path takes the rest of the bytes, forking where it must (depth first, no state kept); a
 * byte refused once the value is whole ends the reading: the bytes read (n: all of them), or
 * SIZE_MAX when a byte is refused before the value is whole. */
static size_t path_reads(const json_schema *s, const json_path *from, const unsigned char *b, size_t n) {
    json_path p;
    path_copy(&p, from);
    for (size_t i = 0; i < n; i++) {
        bool whole = path_done(s, &p);
        if (!feed_byte(s, &p, b[i])) return whole ? i : SIZE_MAX;
        if (!unsettled(s, &p)) continue;
        json_path q;
        int r;
        size_t best = SIZE_MAX;
        for (uint32_t k = 0; (r = settle_one(s, &p, k, &q)) >= 0 && best != n - i - 1; k++) { /* all read: done */
            size_t got = r ? path_reads(s, &q, b + i + 1, n - i - 1) : SIZE_MAX;
            if (got != SIZE_MAX && (best == SIZE_MAX || got > best)) best = got;
        }
        return best == SIZE_MAX ? SIZE_MAX : i + 1 + best;
    }
    return n;
}

/* Adds a settled path to a set (unless it is there already, or the set is full). */
static void add_path(json_prefix *set, const json_path *p) {
    for (uint32_t i = 0; i < set->n; i++)
        if (path_equal(&set->path[i], p)) return;
    if (set->n < JSON_PREFIX_MAX_PATHS) path_copy(&set->path[set->n++], p);
}

static void add_settled(const json_schema *s, json_prefix *set, const json_path *p) {
    if (!unsettled(s, p)) return add_path(set, p);
    json_path q;
    int r;
    for (uint32_t k = 0; (r = settle_one(s, p, k, &q)) >= 0; k++)
        if (r) add_path(set, &q);
}

void json_prefix_init(json_prefix *p, const json_schema *s) {
    p->s = s, p->n = 0;
    json_path start;
    memset(&start, 0, sizeof start);
    start.state = VALUE, start.node = (uint16_t)s->root;
    add_settled(s, p, &start);
}

bool json_prefix_feed(json_prefix *p, const char *bytes, size_t n) {
    static _Thread_local json_prefix next; /* ~35 KB: kept off the stack */
    for (size_t i = 0; i < n && p->n; i++) {
        next.s = p->s, next.n = 0;
        for (uint32_t k = 0; k < p->n; k++) {
            json_path q;
            path_copy(&q, &p->path[k]);
            if (feed_byte(p->s, &q, (unsigned char)bytes[i])) add_settled(p->s, &next, &q);
        }
        p->n = next.n;
        for (uint32_t k = 0; k < next.n; k++) path_copy(&p->path[k], &next.path[k]);
    }
    return p->n > 0;
}

bool json_prefix_accepts(const json_prefix *p, const char *bytes, size_t n) {
    return json_prefix_reads(p, bytes, n) == n;
}

size_t json_prefix_reads(const json_prefix *p, const char *bytes, size_t n) {
    size_t best = SIZE_MAX;
    for (uint32_t k = 0; k < p->n && best != n; k++) {
        size_t got = path_reads(p->s, &p->path[k], (const unsigned char *)bytes, n);
        if (got != SIZE_MAX && (best == SIZE_MAX || got > best)) best = got;
    }
    return best;
}

bool json_prefix_done(const json_prefix *p) {
    for (uint32_t k = 0; k < p->n; k++)
        if (path_done(p->s, &p->path[k])) return true;
    return false;
}

uint32_t json_prefix_string_room(const json_prefix *p) {
    uint32_t room = 0;
    for (uint32_t k = 0; k < p->n; k++) {
        const json_path *q = &p->path[k];
        if (q->state != STRING || q->utf8 || pattern_of(p->s, q)) continue; /* a pattern reads every character */
        uint32_t max = q->key ? UINT32_MAX : node_of(p->s, q->node)->max_len;
        uint32_t left = max == UINT32_MAX ? UINT32_MAX : max - q->slen;
        if (left > room) room = left;
    }
    return room;
}
