#include "runtime/vk/op_sample.h"

#include "runtime/base/error.h"
#include "runtime/vk/vk_barrier.h"
#include "shaders/shaders.h"

#define ARGMAX_ITEMS 8 /* logits per invocation in pass 0 */
/* the texel variant's: fewer, longer workgroups (llvmpipe: the workgroups' reductions dominate
 * at fewer logits an invocation; measured in docs/kernels/eltwise.md, "Greedy argmax") */
#define ARGMAX_ITEMS_TEXEL 64

int cvk_argmax_pipelines(cvk_argmax_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t wg, bool texel) {
    *p = (cvk_argmax_pipes){.texel = texel};
    if (!wg) wg = 256;
    if (wg < 32 || wg > 1024 || !cvk_wg_fits(&d->info.caps, wg) || (wg & (wg - 1)))
        return cd_fail("argmax: workgroup size %u is not a power of two within 32..1024 and the device limit", wg);
    for (uint32_t pass = 0; pass < 2; pass++) {
        uint32_t spec[2] = {wg, pass};
        cvk_pipeline_desc desc = {.name = pass ? "argmax_final" : "argmax",
                                  .spv = cinder_spv_argmax,
                                  .spv_size = cinder_spv_argmax_size,
                                  .n_bindings = 3,
                                  .push_size = sizeof(cvk_argmax_push),
                                  .spec = spec,
                                  .n_spec = 2};
        if (texel) /* the logits (binding 0) through a uniform texel buffer */
            desc.spv = cinder_spv_argmax_texel, desc.spv_size = cinder_spv_argmax_texel_size, desc.texel_bindings = 1;
        if (cvk_pipeline_create(&p->pass[pass], d, cache, &desc)) {
            cvk_argmax_pipelines_destroy(d, p);
            return -1;
        }
    }
    return 0;
}

void cvk_argmax_pipelines_destroy(cvk_device *d, cvk_argmax_pipes *p) {
    cvk_pipeline_destroy(d, &p->pass[0]);
    cvk_pipeline_destroy(d, &p->pass[1]);
}

static uint32_t chunk_of(const cvk_argmax_pipes *p) {
    return p->pass[0].spec[0] * (p->texel ? ARGMAX_ITEMS_TEXEL : ARGMAX_ITEMS);
}

uint64_t cvk_argmax_scratch_bytes(const cvk_argmax_pipes *p, uint32_t n, uint32_t rows) {
    uint64_t chunk = chunk_of(p);
    return ((uint64_t)n + chunk - 1) / chunk * rows * 8;
}

int cvk_argmax(cvk_cmd *c, cvk_descpool *dp, const cvk_argmax_pipes *p, const cvk_argmax_args *a) {
    if (a->rows == 0) return 0;
    if (a->n == 0) return cd_fail("argmax: empty rows");
    uint32_t stride = a->stride ? a->stride : a->n, chunk = chunk_of(p);
    uint32_t n_chunks = (uint32_t)(((uint64_t)a->n + chunk - 1) / chunk);
    if (stride < a->n) return cd_fail("argmax: stride below n");
    if (a->rows > CVK_GRID_MAX) return cd_fail("argmax: %u rows (65535 at most)", a->rows);
    uint32_t l0 = 0;
    if (p->texel && stride % 4) return cd_fail("argmax: a stride of %u floats is not whole 16-byte texels", stride);
    if (p->texel && cvk_texel_offset(&a->logits, &l0)) return cd_fail_ctx("argmax: logits: ");
    /* the texel variant reads each row's last texel whole */
    uint64_t need = ((uint64_t)(a->rows - 1) * stride + (p->texel ? (a->n + 3ull) / 4 * 4 : a->n)) * 4;
    if (need > (uint64_t)UINT32_MAX * 4) return cd_fail("argmax: too many logits");
    if (a->logits.size < need || a->out.size < 4ull * a->rows ||
        a->scratch.size < cvk_argmax_scratch_bytes(p, a->n, a->rows))
        return cd_fail("argmax: logits, scratch or out too small");
    cvk_argmax_push pc = {a->n, a->rows, stride, chunk, n_chunks, l0};
    cvk_view views[3] = {a->logits, a->scratch, a->out};
    VkDescriptorSet set[2];
    if (cvk_descset(dp, &p->pass[0], views, &set[0]) || cvk_descset(dp, &p->pass[1], views, &set[1])) return -1;
    cvk_cmd_label_begin(c, "argmax");
    cvk_cmd_dispatch(c, &p->pass[0], set[0], &pc, n_chunks, a->rows, 1);
    cvk_barrier_compute_to_compute(c->cb);
    cvk_cmd_dispatch(c, &p->pass[1], set[1], &pc, a->rows, 1, 1);
    cvk_cmd_label_end(c);
    return 0;
}

/* ---- top-k / temperature / top-p ---- */

#define SAMPLE_MAX_CHUNKS 1024 /* MAX_CHUNKS in the shader */

int cvk_sample_pipelines(cvk_sample_pipes *p, cvk_device *d, VkPipelineCache cache, uint32_t wg) {
    *p = (cvk_sample_pipes){0};
    if (!wg) wg = 256;
    if (wg < 32 || wg > 1024 || !cvk_wg_fits(&d->info.caps, wg) || (wg & (wg - 1)))
        return cd_fail("sample: workgroup size %u is not a power of two within 32..1024 and the device limit", wg);
    for (uint32_t pass = 0; pass < 2; pass++) {
        uint32_t spec[2] = {wg, pass};
        cvk_pipeline_desc desc = {.name = pass ? "sample_topk_final" : "sample_topk",
                                  .spv = cinder_spv_sample_topk,
                                  .spv_size = cinder_spv_sample_topk_size,
                                  .n_bindings = 4,
                                  .push_size = sizeof(cvk_sample_push),
                                  .spec = spec,
                                  .n_spec = 2};
        if (cvk_pipeline_create(&p->pass[pass], d, cache, &desc)) {
            cvk_sample_pipelines_destroy(d, p);
            return -1;
        }
    }
    return 0;
}

void cvk_sample_pipelines_destroy(cvk_device *d, cvk_sample_pipes *p) {
    cvk_pipeline_destroy(d, &p->pass[0]);
    cvk_pipeline_destroy(d, &p->pass[1]);
}

uint64_t cvk_sample_scratch_bytes(const cvk_sample_pipes *p, uint32_t n, uint32_t rows, uint32_t k_max) {
    uint64_t chunk = (uint64_t)p->pass[0].spec[0] * ARGMAX_ITEMS, k = k_max ? k_max : 1;
    if (k > chunk) k = chunk;
    return ((uint64_t)n + chunk - 1) / chunk * rows * k * 8;
}

int cvk_sample(cvk_cmd *c, cvk_descpool *dp, const cvk_sample_pipes *p, const cvk_sample_args *a) {
    if (a->rows == 0) return 0;
    if (a->n == 0) return cd_fail("sample: empty rows");
    if (a->k_max < 1 || a->k_max > CVK_SAMPLE_MAX_K)
        return cd_fail("sample: k_max %u (1..%d on the GPU)", a->k_max, CVK_SAMPLE_MAX_K);
    uint32_t stride = a->stride ? a->stride : a->n, chunk = p->pass[0].spec[0] * ARGMAX_ITEMS;
    uint32_t n_chunks = (uint32_t)(((uint64_t)a->n + chunk - 1) / chunk);
    if (stride < a->n) return cd_fail("sample: stride below n");
    if (n_chunks > SAMPLE_MAX_CHUNKS)
        return cd_fail("sample: %u logits need more than %d chunks", a->n, SAMPLE_MAX_CHUNKS);
    if (a->rows > CVK_GRID_MAX) return cd_fail("sample: %u rows (65535 at most)", a->rows);
    uint64_t need = ((uint64_t)(a->rows - 1) * stride + a->n) * 4;
    if (need > (uint64_t)UINT32_MAX * 4) return cd_fail("sample: too many logits");
    if (a->logits.size < need || a->out.size < 4ull * a->rows || a->params.size < sizeof(cvk_sample_row) * a->rows ||
        a->scratch.size < cvk_sample_scratch_bytes(p, a->n, a->rows, a->k_max))
        return cd_fail("sample: logits, scratch, params or out too small");
    cvk_sample_push pc = {a->n, a->rows, stride, n_chunks, a->k_max};
    cvk_view views[4] = {a->logits, a->scratch, a->params, a->out};
    VkDescriptorSet set[2];
    if (cvk_descset(dp, &p->pass[0], views, &set[0]) || cvk_descset(dp, &p->pass[1], views, &set[1])) return -1;
    cvk_cmd_label_begin(c, "sample_topk");
    cvk_cmd_dispatch(c, &p->pass[0], set[0], &pc, n_chunks, a->rows, 1);
    cvk_barrier_compute_to_compute(c->cb);
    cvk_cmd_dispatch(c, &p->pass[1], set[1], &pc, a->rows, 1, 1);
    cvk_cmd_label_end(c);
    return 0;
}
