#include "runtime/text/json_prefix.h"

enum {
    START,      /* whitespace, then the '{' of the object */
    VALUE,      /* a value (after ':' or ',' in an array) */
    ARR_FIRST,  /* after '[': a value or ']' */
    KEY_FIRST,  /* after '{': a key or '}' */
    KEY,        /* after ',' in an object: a key */
    COLON,      /* after a key */
    AFTER,      /* after a value: ',' or the container's close */
    STRING,     /* inside a string (key says which kind) */
    ESCAPE,     /* after a backslash */
    HEX,        /* in \uXXXX (sub: digits seen) */
    NUMBER,     /* inside a number (sub: its part) */
    LITERAL,    /* inside true / false / null (sub: which, pos: bytes matched) */
    DONE,       /* the object is whole */
};

/* Parts of a number; the ones marked end may be its last. */
enum { N_MINUS, N_ZERO /* end */, N_INT /* end */, N_DOT, N_FRAC /* end */, N_E, N_ESIGN, N_EXP /* end */ };

static const char *const literals[] = {"true", "false", "null"};

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

void json_prefix_init(json_prefix *p) { *p = (json_prefix){.state = START}; }

bool json_prefix_done(const json_prefix *p) { return p->state == DONE; }

bool json_prefix_in_string(const json_prefix *p) { return p->state == STRING && p->utf8 == 0; }

/* A value has ended: AFTER inside a container; DONE when it closed the outermost one. */
static void value_ended(json_prefix *p) { p->state = p->depth ? AFTER : DONE; }

static bool open_container(json_prefix *p, unsigned char c) {
    if (p->depth == JSON_PREFIX_MAX_DEPTH) return false;
    p->open[p->depth++] = c;
    p->state = c == '{' ? KEY_FIRST : ARR_FIRST;
    return true;
}

static bool close_container(json_prefix *p, unsigned char c) {
    if (!p->depth || p->open[p->depth - 1] != (c == '}' ? '{' : '[')) return false;
    p->depth--;
    value_ended(p);
    return true;
}

/* The first byte of a value. */
static bool start_value(json_prefix *p, unsigned char c) {
    if (c == '{' || c == '[') return open_container(p, c);
    if (c == '"') {
        p->state = STRING, p->key = 0;
        return true;
    }
    if (c == '-' || is_digit(c)) {
        p->state = NUMBER, p->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        return true;
    }
    for (uint8_t i = 0; i < 3; i++)
        if (c == (unsigned char)literals[i][0]) {
            p->state = LITERAL, p->sub = i, p->pos = 1;
            return true;
        }
    return false;
}

/* A byte inside a string: UTF-8 checked as it goes (Unicode's table of well-formed sequences). */
static bool string_byte(json_prefix *p, unsigned char c) {
    if (p->utf8) {
        if (c < p->lo || c > p->hi) return false;
        p->utf8--, p->lo = 0x80, p->hi = 0xBF;
        return true;
    }
    if (c == '"') {
        if (p->key) p->state = COLON;
        else value_ended(p);
        return true;
    }
    if (c == '\\') {
        p->state = ESCAPE;
        return true;
    }
    if (c < 0x20) return false;
    if (c < 0x80) return true;
    p->lo = 0x80, p->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) p->utf8 = 1;
    else if (c >= 0xE0 && c <= 0xEF) p->utf8 = 2, p->lo = c == 0xE0 ? 0xA0 : 0x80, p->hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) p->utf8 = 3, p->lo = c == 0xF0 ? 0x90 : 0x80, p->hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    return true;
}

/* A byte inside a number; one that cannot continue it ends it (if it may end there) and is then
 * read as what follows a value (returns 2). */
static int number_byte(json_prefix *p, unsigned char c) {
    switch (p->sub) {
    case N_MINUS:
        if (!is_digit(c)) return 0;
        p->sub = c == '0' ? N_ZERO : N_INT;
        return 1;
    case N_ZERO:
    case N_INT:
        if (p->sub == N_INT && is_digit(c)) return 1;
        if (c == '.') return p->sub = N_DOT, 1;
        if (c == 'e' || c == 'E') return p->sub = N_E, 1;
        break;
    case N_DOT:
        return is_digit(c) ? (p->sub = N_FRAC, 1) : 0;
    case N_FRAC:
        if (is_digit(c)) return 1;
        if (c == 'e' || c == 'E') return p->sub = N_E, 1;
        break;
    case N_E:
        if (c == '+' || c == '-') return p->sub = N_ESIGN, 1;
        /* fall through */
    case N_ESIGN:
        return is_digit(c) ? (p->sub = N_EXP, 1) : 0;
    case N_EXP:
        if (is_digit(c)) return 1;
        break;
    }
    value_ended(p); /* the number is whole (the outermost value is an object: depth > 0 here) */
    return 2;
}

/* A whitespace byte where whitespace may stand: within the run's shape (json_prefix.h)? */
static bool take_ws(json_prefix *p, unsigned char c) {
    if (c == '\n' && p->ws == 0) return p->ws = 2, true;
    if (c == ' ' && p->ws == 0) return p->ws = 1, true;
    if ((c == ' ' || c == '\t') && p->ws >= 2 && p->ws < 2 + JSON_PREFIX_MAX_INDENT) return p->ws++, true;
    return false;
}

static bool feed_byte(json_prefix *p, unsigned char c) {
    bool between = p->state <= AFTER; /* the states between tokens, where whitespace may stand */
    if (between && is_ws(c)) return take_ws(p, c);
    if (between) p->ws = 0;
    switch (p->state) {
    case START:
        return c == '{' && open_container(p, c);
    case VALUE:
        return start_value(p, c);
    case ARR_FIRST:
        return c == ']' ? close_container(p, c) : start_value(p, c);
    case KEY_FIRST:
    case KEY:
        if (c == '}' && p->state == KEY_FIRST) return close_container(p, c);
        if (c != '"') return false;
        p->state = STRING, p->key = 1;
        return true;
    case COLON:
        if (c != ':') return false;
        p->state = VALUE;
        return true;
    case AFTER:
        if (c == ',') {
            p->state = p->open[p->depth - 1] == '{' ? KEY : VALUE;
            return true;
        }
        return (c == '}' || c == ']') && close_container(p, c);
    case STRING:
        return string_byte(p, c);
    case ESCAPE:
        if (c == 'u') {
            p->state = HEX, p->sub = 0;
            return true;
        }
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
        p->state = STRING;
        return true;
    case HEX:
        if (!is_hex(c)) return false;
        if (++p->sub == 4) p->state = STRING;
        return true;
    case NUMBER: {
        int r = number_byte(p, c);
        return r == 2 ? feed_byte(p, c) : r == 1;
    }
    case LITERAL:
        if (c != (unsigned char)literals[p->sub][p->pos]) return false;
        if (!literals[p->sub][++p->pos]) value_ended(p);
        return true;
    default: /* DONE: nothing may follow */
        return false;
    }
}

bool json_prefix_feed(json_prefix *p, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed_byte(p, (unsigned char)bytes[i])) return false;
    return true;
}
