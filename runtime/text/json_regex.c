#include "runtime/text/json_regex.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* A sub-expression as Glushkov has it: the positions it may begin and end with, and whether it
 * matches the empty string. */
typedef struct frag {
    uint64_t first, last;
    bool nullable;
} frag;

typedef struct parser {
    json_regex *re;
    const char *s;
    size_t i, n;
    uint32_t cap_ranges;
    int depth;
} parser;

static const uint32_t digit_ranges[][2] = {{'0', '9'}};
static const uint32_t word_ranges[][2] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const uint32_t space_ranges[][2] = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                           {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                           {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
static const uint32_t dot_ranges[][2] = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}; /* negated */

static int fail(parser *P, const char *what) { return cd_fail("pattern \"%.64s\": %s (at %zu)", P->s, what, P->i); }

static void foreach_bit(uint64_t m, json_regex *re, uint64_t add) {
    for (; m; m &= m - 1) re->pos[__builtin_ctzll(m)].follow |= add;
}

static frag cat(json_regex *re, frag a, frag b) {
    foreach_bit(a.last, re, b.first);
    return (frag){a.first | (a.nullable ? b.first : 0), b.last | (b.nullable ? a.last : 0), a.nullable && b.nullable};
}

static frag alt(frag a, frag b) { return (frag){a.first | b.first, a.last | b.last, a.nullable || b.nullable}; }

static frag star(json_regex *re, frag a) {
    foreach_bit(a.last, re, a.first);
    return (frag){a.first, a.last, true};
}

static int add_ranges(parser *P, const uint32_t (*r)[2], size_t n) {
    json_regex *re = P->re;
    if (re->n_ranges + n > P->cap_ranges) {
        uint32_t cap = P->cap_ranges ? P->cap_ranges * 2 : 16;
        while (cap < re->n_ranges + n) cap *= 2;
        void *q = realloc(re->ranges, cap * sizeof *re->ranges);
        if (!q) return cd_fail("out of memory compiling a pattern");
        re->ranges = q, P->cap_ranges = cap;
    }
    memcpy(re->ranges + re->n_ranges, r, n * sizeof *r);
    re->n_ranges += (uint32_t)n;
    return 0;
}

/* A new position whose class is the ranges added since range0. */
static int new_pos(parser *P, uint32_t range0, bool negate, frag *out) {
    json_regex *re = P->re;
    if (re->n_pos == JSON_REGEX_MAX_POSITIONS)
        return fail(P, "too long (more than 62 character positions once {n,m} are written out)");
    uint32_t p = re->n_pos++;
    re->pos[p] = (json_regex_pos){.range = range0, .n_range = re->n_ranges - range0, .negate = negate};
    *out = (frag){1ull << p, 1ull << p, false};
    return 0;
}

/* One UTF-8 code point at P->i. */
static int code_point(parser *P, uint32_t *c) {
    const unsigned char *s = (const unsigned char *)P->s + P->i;
    size_t left = P->n - P->i;
    int len = s[0] < 0x80 ? 1 : s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (!len || (size_t)len > left) return fail(P, "not UTF-8");
    uint32_t v = len == 1 ? s[0] : s[0] & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return fail(P, "not UTF-8");
        v = v << 6 | (s[k] & 0x3F);
    }
    P->i += (size_t)len;
    *c = v;
    return 0;
}

static int hex4(parser *P, uint32_t *c) {
    *c = 0;
    for (int k = 0; k < 4; k++, P->i++) {
        char h = P->i < P->n ? P->s[P->i] : 0;
        int d = h >= '0' && h <= '9' ? h - '0'
            : h >= 'a' && h <= 'f'   ? h - 'a' + 10
            : h >= 'A' && h <= 'F'   ? h - 'A' + 10
                                     : -1;
        if (d < 0) return fail(P, "\\u needs four hex digits");
        *c = *c << 4 | (uint32_t)d;
    }
    return 0;
}

/* After a backslash: a class (\d \w \s; upper case: negated, *negate set) or one code point. */
static int escape(parser *P, const uint32_t (**cls)[2], size_t *n_cls, bool *negate, uint32_t *c) {
    if (P->i >= P->n) return fail(P, "a pattern may not end with a backslash");
    char e = P->s[P->i++];
    *cls = NULL, *negate = false;
    switch (e) {
    case 'd':
    case 'D': *cls = digit_ranges, *n_cls = 1; break;
    case 'w':
    case 'W': *cls = word_ranges, *n_cls = 4; break;
    case 's':
    case 'S': *cls = space_ranges, *n_cls = sizeof space_ranges / sizeof *space_ranges; break;
    case 'n': *c = '\n'; return 0;
    case 't': *c = '\t'; return 0;
    case 'r': *c = '\r'; return 0;
    case 'f': *c = '\f'; return 0;
    case 'v': *c = '\v'; return 0;
    case 'u': return hex4(P, c);
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            return fail(P, "this escape (\\b, a backreference, \\p, \\x, ...) is not supported");
        *c = (unsigned char)e;
        return 0;
    }
    *negate = e >= 'A' && e <= 'Z';
    return 0;
}

/* One member of a class: a code point (*c), or with *cls set a class escape (\\d \\w \\s). */
static int class_member(parser *P, const uint32_t (**cls)[2], size_t *n_cls, uint32_t *c) {
    *cls = NULL;
    if (P->s[P->i] != '\\') return code_point(P, c);
    P->i++;
    bool neg;
    if (escape(P, cls, n_cls, &neg, c)) return -1;
    return *cls && neg ? fail(P, "\\D, \\W or \\S inside a class is not supported") : 0;
}

/* [...] */
static int char_class(parser *P, frag *out) {
    uint32_t range0 = P->re->n_ranges;
    bool negate = P->i < P->n && P->s[P->i] == '^';
    if (negate) P->i++;
    for (bool first = true; P->i < P->n && (P->s[P->i] != ']' || first); first = false) {
        uint32_t lo, hi;
        const uint32_t(*cls)[2];
        size_t n_cls;
        if (class_member(P, &cls, &n_cls, &lo)) return -1;
        if (cls) {
            if (add_ranges(P, cls, n_cls)) return -1;
            continue;
        }
        hi = lo;
        if (P->i + 1 < P->n && P->s[P->i] == '-' && P->s[P->i + 1] != ']') {
            P->i++;
            if (class_member(P, &cls, &n_cls, &hi)) return -1;
            if (cls) return fail(P, "a class escape cannot end a range");
            if (hi < lo) return fail(P, "a range out of order");
        }
        uint32_t r[1][2] = {{lo, hi}};
        if (add_ranges(P, (const uint32_t(*)[2])r, 1)) return -1;
    }
    if (P->i >= P->n) return fail(P, "[ without ]");
    P->i++;
    return new_pos(P, range0, negate, out);
}

static int parse_alt(parser *P, frag *out);

static int parse_atom(parser *P, frag *out) {
    char c = P->s[P->i];
    uint32_t range0 = P->re->n_ranges;
    if (c == '(') {
        P->i++;
        if (P->i < P->n && P->s[P->i] == '?') {
            if (P->i + 1 < P->n && P->s[P->i + 1] == ':') P->i += 2;
            else return fail(P, "lookaround and named groups are not supported");
        }
        if (++P->depth > 32) return fail(P, "groups nested too deeply");
        if (parse_alt(P, out)) return -1;
        P->depth--;
        if (P->i >= P->n || P->s[P->i] != ')') return fail(P, "( without )");
        P->i++;
        return 0;
    }
    if (c == '[') {
        P->i++;
        return char_class(P, out);
    }
    if (c == '.') {
        P->i++;
        return add_ranges(P, dot_ranges, 3) || new_pos(P, range0, true, out);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail(P, "nothing to repeat");
    if (c == '^' || c == '$') return fail(P, "^ and $ are supported only at the start and the end");
    if (c == ')') return fail(P, ") without (");
    uint32_t cp;
    if (c == '\\') {
        P->i++;
        const uint32_t(*cls)[2];
        size_t n_cls;
        bool neg;
        if (escape(P, &cls, &n_cls, &neg, &cp)) return -1;
        if (cls) return add_ranges(P, cls, n_cls) || new_pos(P, range0, neg, out);
    } else if (code_point(P, &cp)) {
        return -1;
    }
    uint32_t r[1][2] = {{cp, cp}};
    return add_ranges(P, (const uint32_t(*)[2])r, 1) || new_pos(P, range0, false, out);
}

/* {n}, {n,}, {n,m}: false when the text is not one (then it is an error). */
static bool braces(parser *P, uint32_t *lo, uint32_t *hi) {
    size_t i = P->i + 1;
    uint32_t a = 0, b;
    if (i >= P->n || P->s[i] < '0' || P->s[i] > '9') return false;
    while (i < P->n && P->s[i] >= '0' && P->s[i] <= '9' && a < 1000) a = a * 10 + (uint32_t)(P->s[i++] - '0');
    b = a;
    if (i < P->n && P->s[i] == ',') {
        i++;
        b = UINT32_MAX;
        if (i < P->n && P->s[i] >= '0' && P->s[i] <= '9')
            for (b = 0; i < P->n && P->s[i] >= '0' && P->s[i] <= '9' && b < 1000;)
                b = b * 10 + (uint32_t)(P->s[i++] - '0');
    }
    if (i >= P->n || P->s[i] != '}') return false;
    P->i = i + 1;
    *lo = a, *hi = b;
    return true;
}

/* The atom at [at, end) again, with positions of its own (a copy for {n,m}). */
static int reparse(parser *P, size_t at, frag *out) {
    size_t keep = P->i;
    P->i = at;
    int rc = parse_atom(P, out);
    P->i = keep;
    return rc;
}

static int parse_repeat(parser *P, frag *out) {
    size_t at = P->i;
    frag f = {0};
    if (parse_atom(P, &f)) return -1;
    if (P->i >= P->n) return *out = f, 0;
    char q = P->s[P->i];
    uint32_t lo, hi;
    if (q == '*' || q == '+' || q == '?') {
        P->i++;
        if (q == '*') f = star(P->re, f);
        else if (q == '+') f = (frag){star(P->re, f).first, f.last, f.nullable};
        else f.nullable = true;
    } else if (q == '{') {
        if (!braces(P, &lo, &hi)) return fail(P, "a { that is not {n}, {n,} or {n,m}");
        if (hi < lo) return fail(P, "{n,m} with m below n");
        frag r = {0, 0, true};
        uint32_t copies = hi == UINT32_MAX ? lo + 1 : hi;
        for (uint32_t k = 0; k < copies; k++) {
            frag g = f;
            if (k && reparse(P, at, &g)) return -1;
            if (k >= lo) g = hi == UINT32_MAX ? star(P->re, g) : (frag){g.first, g.last, true};
            r = cat(P->re, r, g);
        }
        if (!copies) r = (frag){0, 0, true}; /* {0}: f's positions stay unreachable */
        f = r;
    } else {
        return *out = f, 0;
    }
    if (P->i < P->n && P->s[P->i] == '?') P->i++; /* lazy: the same strings */
    if (P->i < P->n && strchr("*+?{", P->s[P->i])) return fail(P, "a quantifier after a quantifier");
    *out = f;
    return 0;
}

static int parse_concat(parser *P, frag *out) {
    frag acc = {0, 0, true};
    while (P->i < P->n && P->s[P->i] != '|' && P->s[P->i] != ')') {
        if (P->s[P->i] == '$' && P->i + 1 == P->n && P->depth == 0) {
            P->re->anchored_end = true;
            P->i++;
            break;
        }
        frag f = {0};
        if (parse_repeat(P, &f)) return -1;
        acc = cat(P->re, acc, f);
    }
    *out = acc;
    return 0;
}

static int parse_alt(parser *P, frag *out) {
    frag a = {0};
    if (parse_concat(P, &a)) return -1;
    while (P->i < P->n && P->s[P->i] == '|') {
        P->i++;
        frag b = {0};
        if (parse_concat(P, &b)) return -1;
        a = alt(a, b);
    }
    *out = a;
    return 0;
}

/* '"', '\\' and control characters are never written raw in a JSON string; surrogates are not
 * characters. */
static bool raw(uint32_t c) {
    return c >= 0x20 && c != '"' && c != '\\' && (c < 0xD800 || c > 0xDFFF) && c <= 0x10FFFF;
}

static bool pos_matches(const json_regex *re, const json_regex_pos *p, uint32_t c) {
    bool in = false;
    for (uint32_t k = 0; k < p->n_range && !in; k++)
        in = c >= re->ranges[p->range + k][0] && c <= re->ranges[p->range + k][1];
    return raw(c) && in != p->negate;
}

/* Some character written raw matches the position. */
static bool viable(const json_regex *re, const json_regex_pos *p) {
    if (p->negate) return true; /* a negated class leaves almost everything */
    static const uint32_t safe[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, 0x10FFFF}};
    for (uint32_t k = 0; k < p->n_range; k++)
        for (int s = 0; s < 4; s++)
            if (re->ranges[p->range + k][0] <= safe[s][1] && re->ranges[p->range + k][1] >= safe[s][0]) return true;
    return false;
}

/* Some character written raw in [lo, hi]. */
static bool raw_between(uint32_t lo, uint32_t hi) {
    static const uint32_t safe[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, 0x10FFFF}};
    for (int s = 0; s < 4; s++)
        if (lo <= safe[s][1] && hi >= safe[s][0]) return true;
    return false;
}

/* Some character written raw in [lo, hi] matches the position. */
static bool pos_meets(const json_regex *re, const json_regex_pos *p, uint32_t lo, uint32_t hi) {
    const uint32_t(*r)[2] = re->ranges + p->range;
    if (!p->negate) {
        for (uint32_t k = 0; k < p->n_range; k++) {
            uint32_t a = lo > r[k][0] ? lo : r[k][0], b = hi < r[k][1] ? hi : r[k][1];
            if (a <= b && raw_between(a, b)) return true;
        }
        return false;
    }
    for (uint32_t x = lo; x <= hi;) { /* the first character no range covers, if raw */
        bool moved = false;
        for (uint32_t k = 0; k < p->n_range; k++)
            if (x >= r[k][0] && x <= r[k][1]) {
                if (r[k][1] >= hi) return false;
                x = r[k][1] + 1, moved = true;
            }
        if (moved) continue;
        uint32_t end = hi; /* up to the next range's start */
        for (uint32_t k = 0; k < p->n_range; k++)
            if (r[k][0] > x && r[k][0] - 1 < end) end = r[k][0] - 1;
        if (raw_between(x, end)) return true;
        if (end == hi) return false;
        x = end + 1;
    }
    return false;
}

bool json_regex_may_take(const json_regex *re, uint64_t state, uint32_t lo, uint32_t hi) {
    if (state & JSON_REGEX_MATCHED) return raw_between(lo, hi);
    uint64_t cand = state & JSON_REGEX_START ? re->first : 0;
    for (uint64_t m = state & ~(JSON_REGEX_START | JSON_REGEX_MATCHED); m; m &= m - 1)
        cand |= re->pos[__builtin_ctzll(m)].follow;
    for (; cand; cand &= cand - 1)
        if (pos_meets(re, &re->pos[__builtin_ctzll(cand)], lo, hi)) return true;
    return !re->anchored_start && raw_between(lo, hi); /* unanchored: a match may still begin later */
}

int json_regex_compile(json_regex *re, const char *pattern) {
    *re = (json_regex){0};
    parser P = {.re = re, .s = pattern, .n = strlen(pattern)};
    if (P.n && pattern[0] == '^') re->anchored_start = true, P.i = 1;
    frag f = {0};
    if (parse_alt(&P, &f) || (P.i < P.n && fail(&P, ") without ("))) {
        json_regex_free(re);
        return -1;
    }
    /* live positions: a match can still end from them, through characters written raw */
    uint64_t live = 0;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t p = 0; p < re->n_pos; p++) {
            bool ok = viable(re, &re->pos[p]) && ((f.last >> p & 1) || (re->pos[p].follow & live));
            if (ok && !(live >> p & 1)) live |= 1ull << p, changed = true;
        }
    }
    for (uint32_t p = 0; p < re->n_pos; p++) re->pos[p].follow &= live;
    re->first = f.first & live, re->last = f.last & live, re->nullable = f.nullable;
    if (!re->first && !re->nullable) {
        json_regex_free(re);
        return cd_fail("pattern \"%.64s\" matches no string written without escapes", pattern);
    }
    return 0;
}

void json_regex_free(json_regex *re) {
    free(re->ranges);
    re->ranges = NULL;
}

bool json_regex_accepts(const json_regex *re, uint64_t state) {
    return (state & JSON_REGEX_MATCHED) || (state & re->last) || ((state & JSON_REGEX_START) && re->nullable);
}

/* Unanchored at the end, a match found leaves the rest free. */
static uint64_t settle(const json_regex *re, uint64_t state) {
    return !re->anchored_end && json_regex_accepts(re, state) ? JSON_REGEX_MATCHED : state;
}

uint64_t json_regex_start(const json_regex *re) { return settle(re, JSON_REGEX_START); }

uint64_t json_regex_step(const json_regex *re, uint64_t state, uint32_t c) {
    if (state & JSON_REGEX_MATCHED) return raw(c) ? state : 0;
    uint64_t cand = state & JSON_REGEX_START ? re->first : 0, next = 0;
    for (uint64_t m = state & ~(JSON_REGEX_START | JSON_REGEX_MATCHED); m; m &= m - 1)
        cand |= re->pos[__builtin_ctzll(m)].follow;
    for (; cand; cand &= cand - 1) {
        uint32_t p = (uint32_t)__builtin_ctzll(cand);
        if (pos_matches(re, &re->pos[p], c)) next |= 1ull << p;
    }
    if (!re->anchored_start && raw(c)) next |= JSON_REGEX_START; /* a match may begin at the next character */
    return next ? settle(re, next) : 0;
}
