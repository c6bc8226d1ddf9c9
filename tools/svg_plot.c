#include "tools/svg_plot.h"

#include <math.h>
#include <stdio.h>

#include "runtime/base/error.h"

static const char *const colors[] = {"#d95f02", "#1b9e77", "#7570b3", "#e7298a"};

static void text(FILE *f, const char *s) {
    for (; *s; s++) switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

static int check_values(const double *v, size_t n, double *max) {
    *max = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]) || v[i] < 0) return cd_fail("plot: value %zu is %g (finite, >= 0 wanted)", i, v[i]);
        if (v[i] > *max) *max = v[i];
    }
    if (*max == 0) *max = 1;
    return 0;
}

static FILE *open_svg(const char *path, int w, int h, const char *title) {
    FILE *f = fopen(path, "w");
    if (!f) {
        cd_fail("plot: cannot create %s", path);
        return NULL;
    }
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">",
            w, h);
    text(f, title);
    fputs("</text>\n", f);
    return f;
}

static int close_svg(FILE *f, const char *path) {
    fputs("</svg>\n", f);
    int bad = ferror(f);
    if (fclose(f) || bad) return cd_fail("plot: writing %s failed", path);
    return 0;
}

int svg_bars(const char *path, const char *title, const char *unit, const char *const *labels, const double *v,
             size_t n) {
    double max;
    if (check_values(v, n, &max)) return -1;
    enum { LEFT = 190, BAR_W = 420, ROW = 20, TOP = 36 };
    FILE *f = open_svg(path, LEFT + BAR_W + 110, TOP + (int)n * ROW + 10, title);
    if (!f) return -1;
    for (size_t i = 0; i < n; i++) {
        int y = TOP + (int)i * ROW;
        double w = BAR_W * v[i] / max;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", LEFT - 6, y + 14);
        text(f, labels[i]);
        fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", LEFT, y + 3, w,
                ROW - 6, colors[0]);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">%.3g", LEFT + w + 4, y + 14, v[i]);
        text(f, unit);
        fputs("</text>\n", f);
    }
    return close_svg(f, path);
}

int svg_grouped(const char *path, const char *title, const char *xlabel, const char *unit, size_t n_x,
                const svg_series *s, size_t n_series) {
    double max = 0;
    for (size_t k = 0; k < n_series; k++) {
        double m;
        if (check_values(s[k].v, n_x, &m)) return -1;
        if (m > max) max = m;
    }
    if (n_series > sizeof colors / sizeof colors[0]) return cd_fail("plot: at most 4 series");
    enum { LEFT = 70, TOP = 50, H = 260, BOTTOM = 40 };
    int group = (int)(n_series * 10 + 6), width = LEFT + (int)n_x * group + 20;
    if (width < 480) width = 480;
    FILE *f = open_svg(path, width, TOP + H + BOTTOM, title);
    if (!f) return -1;
    for (size_t k = 0; k < n_series; k++) { /* legend */
        fprintf(f, "<rect x=\"%d\" y=\"28\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"37\">",
                LEFT + (int)k * 200, colors[k], LEFT + (int)k * 200 + 14);
        text(f, s[k].name);
        fputs("</text>\n", f);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", LEFT, TOP + H, width - 10,
            TOP + H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", LEFT, TOP, LEFT, TOP + H);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.3g", LEFT - 4, TOP + 10, max);
    text(f, unit);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>\n", LEFT - 4, TOP + H);
    for (size_t x = 0; x < n_x; x++) {
        for (size_t k = 0; k < n_series; k++) {
            double h = H * s[k].v[x] / max;
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"9\" height=\"%.1f\" fill=\"%s\"/>\n",
                    LEFT + 4 + (int)(x * group + k * 10), TOP + H - h, h, colors[k]);
        }
        if (n_x <= 40 || x % 5 == 4)
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">%zu</text>\n",
                    LEFT + 4 + (int)(x * group + n_series * 5), TOP + H + 14, x + 1);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", LEFT + (width - LEFT) / 2, TOP + H + 32);
    text(f, xlabel);
    fputs("</text>\n", f);
    return close_svg(f, path);
}
