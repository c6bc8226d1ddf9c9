#include "runtime/text/json_jinja.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

/* ---- growable buffer -------------------------------------------------------------------- */

typedef struct {
    char **buf;
    size_t *len, *cap;
    bool oom;
} out_buf;

static void put(out_buf *b, const char *p, size_t n) {
    if (b->oom) return;
    if (*b->len + n + 1 > *b->cap) {
        size_t cap = *b->cap ? *b->cap : 256;
        while (cap < *b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *nb = realloc(*b->buf, cap);
        if (!nb) {
            b->oom = true;
            return;
        }
        *b->buf = nb;
        *b->cap = cap;
    }
    memcpy(*b->buf + *b->len, p, n);
    *b->len += n;
    (*b->buf)[*b->len] = 0;
}

static void puts_(out_buf *b, const char *s) { put(b, s, strlen(s)); }

/* ---- Python float repr ------------------------------------------------------------------ */

/* m * 10^e10 as a double, through strtod (correctly rounded, like Python's float()). */
static double decimal_value(uint64_t m, int e10) {
    char s[48];
    snprintf(s, sizeof s, "%" PRIu64 "e%d", m, e10);
    return strtod(s, NULL);
}

/* The shortest decimal digit string D (no trailing zeros) and exponent E, d = 0.D * 10^(E+1)
 * i.e. D[0].D[1..] * 10^E, that reads back as d (d finite, > 0). Like dtoa mode 0, which
 * both Python's repr and JavaScript's Number#toString use: fewest digits, and among those
 * the closest to d.
 *
 * At each precision p, printf's correctly rounded p-digit value c0 is the nearest p-digit
 * decimal; if any p-digit decimal reads back as d then c0 or the neighbour on the other side
 * of d does (the grid points nearest d from below and above bracket every other one). The
 * neighbour matters only at powers of two, where the rounding interval is lopsided. */
static void shortest_digits(double d, char digits[24], int *exp10) {
    char buf[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        uint64_t m = 0;
        const char *s = buf;
        for (; *s && *s != 'e'; s++)
            if (*s >= '0' && *s <= '9') m = m * 10 + (uint64_t)(*s - '0');
        int e = atoi(s + 1); /* c0 = m * 10^(e - p + 1) */
        uint64_t pow_p1 = 1;
        for (int i = 1; i < p; i++) pow_p1 *= 10; /* 10^(p-1): smallest p-digit mantissa */

        uint64_t best_m = 0;
        int best_e = 0; /* exponent of the least significant digit */
        if (decimal_value(m, e - p + 1) == d) {
            best_m = m, best_e = e - p + 1;
        } else {
            double c0 = decimal_value(m, e - p + 1);
            if (c0 < d) { /* try the next p-digit decimal above */
                best_m = m + 1, best_e = e - p + 1;
            } else if (m == pow_p1) { /* below 1.00..e: 9.99..e-1 */
                best_m = pow_p1 * 10 - 1, best_e = e - p;
            } else {
                best_m = m - 1, best_e = e - p + 1;
            }
            if (decimal_value(best_m, best_e) != d) continue;
        }
        int n = snprintf(digits, 24, "%" PRIu64, best_m);
        *exp10 = best_e + n - 1;
        while (n > 1 && digits[n - 1] == '0') digits[--n] = 0;
        return;
    }
    /* unreachable: 17 significant digits always round-trip */
    snprintf(buf, sizeof buf, "%.16e", d);
    digits[0] = buf[0];
    memcpy(digits + 1, buf + 2, 16);
    digits[17] = 0;
    *exp10 = atoi(strchr(buf, 'e') + 1);
}

void json_jinja_format_real(double d, char out[32]) {
    if (isnan(d)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (d == 0) {
        strcpy(out, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char digits[24];
    int e;
    shortest_digits(fabs(d), digits, &e);
    int n = (int)strlen(digits);
    char *o = out;
    if (d < 0) *o++ = '-';
    if (e < -4 || e >= 16) { /* Python's repr: exponent form outside [1e-4, 1e16) */
        *o++ = digits[0];
        if (n > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)n - 1);
            o += n - 1;
        }
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e < 0) { /* 0.000ddd */
        *o++ = '0', *o++ = '.';
        for (int i = 0; i < -e - 1; i++) *o++ = '0';
        memcpy(o, digits, (size_t)n);
        o += n;
        *o = 0;
    } else { /* ddd.ddd, ".0" when integral */
        for (int i = 0; i <= e; i++) *o++ = i < n ? digits[i] : '0';
        *o++ = '.';
        if (n > e + 1) {
            memcpy(o, digits + e + 1, (size_t)(n - e - 1));
            o += n - e - 1;
        } else *o++ = '0';
        *o = 0;
    }
}

/* ---- serializer ------------------------------------------------------------------------- */

static void put_string(out_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    put(b, "\"", 1);
    size_t run = 0; /* bytes [i - run, i) need no escaping */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        put(b, s + i - run, run);
        run = 0;
        char esc[7] = {'\\', 0};
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default: esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
        }
        put(b, esc, strlen(esc));
    }
    put(b, s + n - run, run);
    put(b, "\"", 1);
}

static int dump(out_buf *b, const json_t *v, int depth) {
    if (depth > JSON_JINJA_MAX_DEPTH)
        return cd_fail("tojson: nested deeper than %d levels (or cyclic)", JSON_JINJA_MAX_DEPTH);
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        put(b, "{", 1);
        bool first = true;
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            if (!first) put(b, ", ", 2);
            first = false;
            put_string(b, json_object_iter_key(it), json_object_iter_key_len(it));
            put(b, ": ", 2);
            if (dump(b, json_object_iter_value(it), depth + 1) != 0) return -1;
        }
        put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(b, ", ", 2);
            if (dump(b, json_array_get(v, i), depth + 1) != 0) return -1;
        }
        put(b, "]", 1);
        break;
    case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, num);
        break;
    case JSON_REAL:
        json_jinja_format_real(json_real_value(v), num);
        puts_(b, num);
        break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    case JSON_NULL: puts_(b, "null"); break;
    }
    return 0;
}

int json_jinja_append(const json_t *v, char **buf, size_t *len, size_t *cap) {
    if (!v) return cd_fail("tojson: no value");
    out_buf b = {buf, len, cap, false};
    if (dump(&b, v, 0) != 0) return -1;
    if (b.oom) return cd_fail("tojson: out of memory");
    return 0;
}

int json_jinja_dumps(const json_t *v, char **out, size_t *len) {
    char *buf = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    if (json_jinja_append(v, &buf, &n, &cap) != 0) {
        free(buf);
        return -1;
    }
    *out = buf; /* never NULL: every value prints at least one byte */
    if (len) *len = n;
    return 0;
}
