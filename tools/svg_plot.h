/* Two small charts as SVG files (text a browser, a README or docs/PERF.md shows directly):
 * horizontal bars (the per-op share of cinder profile --plot) and grouped vertical bars (TTFT
 * per request, prefix cache on and off: cinder bench --scenario ... --plot). Labels are XML-
 * escaped; values must be finite and >= 0. Why not gnuplot: docs/DEPENDENCIES.md. */
#pragma once
#include <stddef.h>

/* One bar per label, top to bottom in the order given; `unit` follows each value. */
int svg_bars(const char *path, const char *title, const char *unit, const char *const *labels, const double *v,
             size_t n);

typedef struct svg_series {
    const char *name;
    const double *v; /* n_x values */
} svg_series;

/* n_x groups (x = 1..n_x) of one bar per series, with a legend. */
int svg_grouped(const char *path, const char *title, const char *xlabel, const char *unit, size_t n_x,
                const svg_series *s, size_t n_series);
