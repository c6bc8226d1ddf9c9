#include "runtime/text/unicode_bytes.h"

#include <stdlib.h>
#include <string.h>

int ub_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, bool *truncated) {
    if (truncated) *truncated = false;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    /* The second byte's allowed range excludes overlong forms, surrogates and > U+10FFFF
     * up front, so a byte outside it ends the maximal subpart right there. */
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *cp = UB_REPLACEMENT;
        return -1;
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) {
            if (truncated) *truncated = true;
            *cp = UB_REPLACEMENT;
            return -i;
        }
        unsigned b = s[i];
        if (b < lo || b > hi) {
            *cp = UB_REPLACEMENT;
            return -i;
        }
        lo = 0x80, hi = 0xBF;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return len;
}

int ub_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ub_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = ub_utf8_next(s + i, n - i, &cp, NULL);
        if (k < 0) break;
        i += (size_t)k;
    }
    return i;
}

char *ub_utf8_sanitize(const unsigned char *s, size_t n, size_t *out_n) {
    /* Each invalid subpart (>= 1 byte) becomes 3 bytes: at most 3n. */
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t ok = ub_utf8_valid_prefix(s + i, n - i);
        memcpy(out + o, s + i, ok);
        o += ok, i += ok;
        if (i == n) break;
        uint32_t cp;
        int k = ub_utf8_next(s + i, n - i, &cp, NULL);
        i += (size_t)-k;
        o += (size_t)ub_utf8_put(UB_REPLACEMENT, out + o);
    }
    out[o] = 0;
    *out_n = o;
    return out;
}

void ub_bytelevel_tables(uint16_t byte_cp[256], int16_t cp_byte[UB_CP_LIMIT]) {
    for (unsigned i = 0; i < UB_CP_LIMIT; i++) cp_byte[i] = -1;
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_cp[b] = (uint16_t)(printable ? b : next++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}
