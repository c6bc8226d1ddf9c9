#include "runtime/vk/op_rope.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/base/error.h"
#include "shaders/shaders.h"

void cvk_rope_table_dims(uint32_t n_pos, uint32_t *shift, uint32_t *n_hi) {
    uint32_t bits = 0;
    while (bits < 32 && (1ull << bits) < n_pos) bits++; /* ceil(log2(n_pos)) */
    uint32_t s = (bits + 1) / 2;
    if (s < 4) s = 4;
    *shift = s;
    *n_hi = (uint32_t)(((uint64_t)n_pos + (1ull << s) - 1) >> s);
    if (*n_hi == 0) *n_hi = 1;
}

void cvk_rope_table_fill(float *out, uint32_t d, float theta, uint32_t shift, uint32_t n_hi) {
    uint32_t half = d / 2, n_lo = 1u << shift;
    for (uint32_t i = 0; i < half; i++) {
        double freq = pow((double)theta, -2.0 * i / d); /* as cpu_rope_neox */
        for (uint64_t r = 0; r < (uint64_t)n_lo + n_hi; r++) {
            double p = r < n_lo ? (double)r : (double)((r - n_lo) << shift);
            double angle = p * freq;
            out[(r * half + i) * 2] = (float)cos(angle);
            out[(r * half + i) * 2 + 1] = (float)sin(angle);
        }
    }
}

int cvk_rope_table_create(cvk_rope_table *t, cvk_mem *m, cvk_stager *s, uint32_t head_dim, float theta,
                          uint32_t n_pos) {
    *t = (cvk_rope_table){.head_dim = head_dim, .n_pos = n_pos, .theta = theta};
    if (head_dim < 2 || head_dim % 2) return cd_fail("rope: head_dim %u is not even", head_dim);
    if (n_pos == 0) return cd_fail("rope: table for no positions");
    cvk_rope_table_dims(n_pos, &t->shift, &t->n_hi);
    size_t n = ((size_t)(1u << t->shift) + t->n_hi) * head_dim;
    float *host = malloc(n * sizeof *host);
    if (!host) return cd_fail("rope: out of memory for a %zu-float table", n);
    cvk_rope_table_fill(host, head_dim, theta, t->shift, t->n_hi);
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

int cvk_rope_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    if (!wg) wg = 64;
    if (wg > d->info.caps.max_wg_size[0]) return cd_fail("rope: workgroup size %u too large", wg);
    uint32_t spec[1] = {wg};
    cvk_pipeline_desc desc = {.name = "rope_neox", .spv = cinder_spv_rope_neox, .spv_size = cinder_spv_rope_neox_size,
                              .n_bindings = 3, .push_size = sizeof(cvk_rope_push), .spec = spec, .n_spec = 1};
    return cvk_pipeline_create(p, d, cache, &desc);
}

int cvk_rope(cvk_cmd *c, cvk_descpool *dp, const cvk_pipeline *p, const cvk_rope_args *a) {
    const cvk_rope_table *t = a->table;
    if (a->tokens == 0 || a->heads == 0) return 0;
    if (!t || !t->buf.n_parts) return cd_fail("rope: no table");
    uint32_t d = t->head_dim, stride = a->tok_stride ? a->tok_stride : a->heads * d;
    if ((uint64_t)a->heads * d > stride) return cd_fail("rope: token stride %u below heads * head_dim", stride);
    uint64_t pairs = (uint64_t)a->tokens * a->heads * (d / 2);
    if ((uint64_t)a->tokens * stride > UINT32_MAX || pairs > UINT32_MAX) return cd_fail("rope: too many elements");
    uint64_t need = ((uint64_t)(a->tokens - 1) * stride + (uint64_t)a->heads * d) * sizeof(float);
    if (a->x.size < need)
        return cd_fail("rope: x holds %llu bytes, needs %llu", (unsigned long long)a->x.size, (unsigned long long)need);
    if (a->pos.size < 4ull * a->tokens) return cd_fail("rope: pos holds fewer than %u positions", a->tokens);
    cvk_rope_push pc = {a->tokens, a->heads, d, stride, t->shift, t->n_hi};
    cvk_view views[3] = {a->x, a->pos, cvk_view_whole(&t->buf)};
    VkDescriptorSet set;
    if (cvk_descset(dp, p, views, &set)) return -1;
    uint64_t groups = (pairs + p->spec[0] - 1) / p->spec[0];
    uint32_t gx = groups < 65535 ? (uint32_t)groups : 65535, gy = (uint32_t)((groups + 65534) / 65535);
    cvk_cmd_label_begin(c, "rope_neox");
    cvk_cmd_dispatch(c, p, set, &pc, gx, gy, 1);
    cvk_cmd_label_end(c);
    return 0;
}
