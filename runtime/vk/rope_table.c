#include "runtime/vk/rope_table.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/base/error.h"

void cvk_rope_table_dims(uint32_t n_pos, uint32_t *shift, uint32_t *n_hi) {
    uint32_t bits = 0;
    while (bits < 32 && (1ull << bits) < n_pos) bits++; /* ceil(log2(n_pos)) */
    uint32_t s = (bits + 1) / 2;
    if (s < 4) s = 4;
    *shift = s;
    *n_hi = (uint32_t)(((uint64_t)n_pos + (1ull << s) - 1) >> s);
    if (*n_hi == 0) *n_hi = 1;
}

void cvk_rope_table_fill(float *out, uint32_t d, const double *freq, double mscale, uint32_t shift, uint32_t n_hi) {
    uint32_t half = d / 2, n_lo = 1u << shift;
    for (uint32_t i = 0; i < half; i++) {
        for (uint64_t r = 0; r < (uint64_t)n_lo + n_hi; r++) {
            double p = r < n_lo ? (double)r : (double)((r - n_lo) << shift);
            double angle = p * freq[i], scale = r < n_lo ? mscale : 1.0;
            out[(r * half + i) * 2] = (float)(cos(angle) * scale);
            out[(r * half + i) * 2 + 1] = (float)(sin(angle) * scale);
        }
    }
}

int cvk_rope_table_create(cvk_rope_table *t, cvk_mem *m, cvk_stager *s, uint32_t head_dim, const double *freq,
                          double mscale, uint32_t n_pos) {
    *t = (cvk_rope_table){.head_dim = head_dim, .n_pos = n_pos};
    if (head_dim < 2 || head_dim % 2) return cd_fail("rope: head_dim %u is not even", head_dim);
    if (n_pos == 0) return cd_fail("rope: table for no positions");
    cvk_rope_table_dims(n_pos, &t->shift, &t->n_hi);
    size_t n = ((size_t)(1u << t->shift) + t->n_hi) * head_dim;
    float *host = malloc(n * sizeof *host);
    if (!host) return cd_fail("rope: out of memory for a %zu-float table", n);
    cvk_rope_table_fill(host, head_dim, freq, mscale, t->shift, t->n_hi);
    int rc = cvk_buffer_create(m, &t->buf, n * sizeof *host, 0, CVK_MEM_DEVICE);
    if (!rc && t->buf.n_parts != 1) rc = cd_fail("rope: table of %zu bytes does not fit one binding", n * 4);
    if (!rc) rc = cvk_stager_upload(s, cvk_view_whole(&t->buf), host);
    if (!rc) rc = cvk_stager_flush(s);
    free(host);
    if (rc) cvk_buffer_destroy(m, &t->buf);
    return rc;
}

void cvk_rope_table_destroy(cvk_mem *m, cvk_rope_table *t) {
    cvk_buffer_destroy(m, &t->buf);
    *t = (cvk_rope_table){0};
}
