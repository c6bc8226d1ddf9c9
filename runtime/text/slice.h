/* Byte slices (pointer + length) and the Python string operations the chat template and the
 * tool-call parser need: strip('\n'), startswith, split(sep)[0] / [-1]. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    const char *p;
    size_t n;
} slice;

#define LIT(s) ((slice){(s), sizeof(s) - 1})

static inline slice lstrip_nl(slice s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}
static inline slice rstrip_nl(slice s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}
static inline slice strip_nl(slice s) { return rstrip_nl(lstrip_nl(s)); }

static inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static inline slice strip_ws(slice s) {
    while (s.n && is_ws(s.p[0])) s.p++, s.n--;
    while (s.n && is_ws(s.p[s.n - 1])) s.n--;
    return s;
}

static inline bool starts_with(slice s, slice pre) { return s.n >= pre.n && memcmp(s.p, pre.p, pre.n) == 0; }
static inline bool ends_with(slice s, slice suf) {
    return s.n >= suf.n && memcmp(s.p + s.n - suf.n, suf.p, suf.n) == 0;
}

/* Offset of the first / last occurrence of pat in s, or -1. */
static inline ptrdiff_t find_first(slice s, slice pat) {
    const char *hit = memmem(s.p, s.n, pat.p, pat.n);
    return hit ? hit - s.p : -1;
}
static inline ptrdiff_t find_last(slice s, slice pat) {
    ptrdiff_t last = -1;
    for (size_t from = 0; from + pat.n <= s.n;) {
        const char *hit = memmem(s.p + from, s.n - from, pat.p, pat.n);
        if (!hit) break;
        last = hit - s.p;
        from = (size_t)last + 1;
    }
    return last;
}

static inline slice tail(slice s, size_t from) { return (slice){s.p + from, s.n - from}; }

/* s.split(sep)[-1] and s.split(sep)[0]. */
static inline slice after_last(slice s, slice sep) {
    ptrdiff_t i = find_last(s, sep);
    return i < 0 ? s : (slice){s.p + i + sep.n, s.n - (size_t)i - sep.n};
}
static inline slice before_first(slice s, slice sep) {
    ptrdiff_t i = find_first(s, sep);
    return i < 0 ? s : (slice){s.p, (size_t)i};
}
