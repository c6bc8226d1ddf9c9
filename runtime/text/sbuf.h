/* A growable output string for the chat renderers: appends never fail on the spot; an
 * allocation failure sets oom, later appends are ignored, and the renderer reports it once. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/text/slice.h"

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static inline void put(sbuf *b, slice s) {
    if (b->oom) return;
    if (b->len + s.n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + s.n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s.p, s.n);
    b->len += s.n;
    b->p[b->len] = 0;
}
static inline void puts_(sbuf *b, const char *s) { put(b, (slice){s, strlen(s)}); }
