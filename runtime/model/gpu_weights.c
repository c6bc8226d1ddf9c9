/* Weights to the device: one buffer per tensor, granule = row bytes so a row never straddles
 * two parts (vk_memory.h) — except an FFN's gate and up of one type, stored together as gate-up
 * pairs (gpu_model.h), and an lm_head its matvec reads in an aligned layout (op_matvec.h) —
 * uploaded straight from the mapped file through the stager. Norm
 * vectors are converted to f32 on the host when stored otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/error.h"
#include "runtime/model/cpu_ref.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/gpu_model.h"

/* After each tensor: the caller's report, and for uploads big enough to wait for a progress
 * line on a terminal (stderr) with the rate and the time left; whole percents only, so the line
 * is rewritten at most 100 times. */
static void progress(gpu_weights *w) {
    if (w->report.fn) w->report.fn(w->report.ctx, w->bytes, w->total);
    if (!w->total || !w->show_progress) return;
    unsigned pct = (unsigned)(w->bytes * 100 / w->total);
    if (pct == w->shown_pct) return;
    w->shown_pct = pct;
    double s = (cd_now_ms() - w->started_ms) / 1000.0, rate = s > 0 ? w->bytes / s : 0;
    fprintf(stderr, "\rcinder: weights to the device %3u%% (%.2f / %.2f GiB, %.2f GiB/s, %.0f s left) %s", pct,
            w->bytes / 1073741824.0, w->total / 1073741824.0, rate / 1073741824.0,
            rate > 0 ? (w->total - w->bytes) / rate : 0.0, pct >= 100 ? "\n" : "");
    fflush(stderr);
}

static int upload(cvk_ctx *vk, cvk_buffer *b, const gguf_tensor *t, gpu_weights *w) {
    if (!t) return 0;
    uint64_t row = qtype_row_bytes(t->type, t->ne[0]);
    uint64_t rows = (uint64_t)t->ne[1] * t->ne[2] * t->ne[3];
    if (!row || row * rows != t->nbytes)
        return cd_fail("%.*s: %llu bytes is not %llu rows of %llu", (int)t->name.len, t->name.ptr,
                       (unsigned long long)t->nbytes, (unsigned long long)rows, (unsigned long long)row);
    if (cvk_buffer_create(&vk->mem, b, t->nbytes, row, w->kind)) return -1;
    w->bytes += t->nbytes;
    fp_weights_add(w->hashing, t); /* the fingerprint's read of these bytes: the upload's read follows from cache */
    int rc = cvk_stager_upload(&vk->stager, cvk_view_whole(b), t->data);
    progress(w);
    return rc;
}

/* The lm_head in the layout its matvec reads (op_matvec.h: cfg->a16, 16-byte-aligned Q6_K
 * rows), packed on the host a chunk of rows at a time; the file's layout without one. */
static int upload_head(cvk_ctx *vk, cvk_buffer *b, const gguf_tensor *t, gpu_weights *w, const cvk_matvec_cfg *cfg) {
    if (!cfg || !cfg->a16) return upload(vk, b, t, w);
    uint32_t n_in = (uint32_t)t->ne[0];
    uint64_t from = qtype_row_bytes(t->type, n_in), to = cvk_matvec_row_bytes(cfg, t->type, n_in);
    uint64_t rows = (uint64_t)t->ne[1] * t->ne[2] * t->ne[3];
    if (t->type != QTYPE_Q6_K || !from || from * rows != t->nbytes)
        return cd_fail("%.*s: not %llu Q6_K rows of %llu bytes", (int)t->name.len, t->name.ptr,
                       (unsigned long long)rows, (unsigned long long)from);
    enum { CHUNK_ROWS = 4096 };
    uint8_t *tmp = malloc(CHUNK_ROWS * to);
    if (!tmp) return cd_fail("out of memory packing %.*s", (int)t->name.len, t->name.ptr);
    int rc = cvk_buffer_create(&vk->mem, b, rows * to, to, CVK_MEM_DEVICE);
    fp_weights_add(w->hashing, t);
    for (uint64_t r0 = 0; !rc && r0 < rows; r0 += CHUNK_ROWS) {
        uint64_t n = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
        cvk_matvec_pack_rows(cfg, t->type, n_in, (const uint8_t *)t->data + r0 * from, tmp, n);
        rc = cvk_stager_upload(&vk->stager, cvk_view_range(b, r0 * to, n * to), tmp);
    }
    free(tmp);
    w->bytes += t->nbytes;
    progress(w);
    return rc ? -1 : 0;
}

/* Gate and up (one type, n_slice slices of `rows` rows each) as gate-up pairs: slice e's gate
 * rows then its up rows, granule = a pair slice so no part splits one (op_matmul.h's glu). */
static int upload_pairs(cvk_ctx *vk, cvk_buffer *b, const gguf_tensor *gate, const gguf_tensor *up, gpu_weights *w) {
    uint64_t row = qtype_row_bytes(gate->type, gate->ne[0]), rows = (uint64_t)gate->ne[1],
             n_slice = (uint64_t)gate->ne[2];
    uint64_t slice = rows * row;
    const gguf_tensor *ts[2] = {gate, up};
    for (int i = 0; i < 2; i++)
        if (!row || slice * n_slice != ts[i]->nbytes)
            return cd_fail("%.*s: %llu bytes is not %llu rows of %llu", (int)ts[i]->name.len, ts[i]->name.ptr,
                           (unsigned long long)ts[i]->nbytes, (unsigned long long)(rows * n_slice),
                           (unsigned long long)row);
    if (cvk_buffer_create(&vk->mem, b, 2 * slice * n_slice, 2 * slice, w->kind)) return -1;
    for (int i = 0; i < 2; i++) {
        fp_weights_add(w->hashing, ts[i]);
        for (uint64_t e = 0; e < n_slice; e++)
            if (cvk_stager_upload(&vk->stager, cvk_view_range(b, (2 * e + i) * slice, slice),
                                  (const uint8_t *)ts[i]->data + e * slice))
                return -1;
        w->bytes += ts[i]->nbytes;
        progress(w);
    }
    return 0;
}

/* The FFN's gate and up: as gate-up pairs when wanted and they share a type and shape, else apart. */
static int upload_gate_up(cvk_ctx *vk, gpu_layer *d, const layer_weights *l, gpu_weights *w, bool pairs) {
    const gguf_tensor *gate, *up;
    if (pairs && gpu_layer_ffn_pairable(l, &gate, &up)) return upload_pairs(vk, &d->gate_up, gate, up, w);
    if (l->gate_exps) return upload(vk, &d->gate_exps, l->gate_exps, w) || upload(vk, &d->up_exps, l->up_exps, w);
    return upload(vk, &d->ffn_gate, l->ffn_gate, w) || upload(vk, &d->ffn_up, l->ffn_up, w);
}

/* A norm vector as f32 (converted on the host when stored as another type). */
static int upload_norm(cvk_ctx *vk, cvk_buffer *b, const gguf_tensor *t, gpu_weights *w) {
    if (t->type == QTYPE_F32) return upload(vk, b, t, w);
    fp_weights_add(w->hashing, t);
    uint64_t n = (uint64_t)t->ne[0];
    float *f = malloc(n * sizeof *f);
    if (!f) return cd_fail("out of memory converting %.*s", (int)t->name.len, t->name.ptr);
    cpu_tensor_row(t, 0, f);
    int rc = cvk_buffer_create(&vk->mem, b, n * 4, 4, CVK_MEM_DEVICE) ||
        cvk_stager_upload(&vk->stager, cvk_view_whole(b), f);
    free(f);
    w->bytes += t->nbytes; /* the file's bytes, as total counts them */
    progress(w);
    return rc ? -1 : 0;
}

int gpu_weights_upload(gpu_weights *w, cvk_ctx *vk, const model *m, bool pairs, const cvk_matvec_cfg *head,
                       gpu_load_progress report, uint32_t host_expert_layers) {
    *w = (gpu_weights){.report = report, .started_ms = cd_now_ms(), .kind = CVK_MEM_DEVICE};
    const model_config *c = &m->cfg;
    w->layers = calloc(c->n_layer, sizeof *w->layers);
    w->hashing = fp_weights_begin(m->file);
    if (!w->layers || !w->hashing) return cd_fail("out of memory");
    w->total = model_weight_bytes(m);
    w->show_progress = w->total >= (256u << 20) && isatty(STDERR_FILENO);
    w->shown_pct = 0;
    if (report.fn) report.fn(report.ctx, 0, w->total);
    if (upload(vk, &w->tok_embd, m->tok_embd, w) || upload_norm(vk, &w->output_norm, m->output_norm, w)) return -1;
    if (m->output == m->tok_embd) w->head = &w->tok_embd;
    else if (upload_head(vk, &w->output, m->output, w, head)) return -1;
    else w->head = &w->output;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        gpu_layer *d = &w->layers[il];
        if (upload_norm(vk, &d->attn_norm, l->attn_norm, w) || upload(vk, &d->wq, l->wq, w) ||
            upload(vk, &d->wk, l->wk, w) || upload(vk, &d->wv, l->wv, w) || upload(vk, &d->wo, l->wo, w) ||
            upload_norm(vk, &d->q_norm, l->q_norm, w) || upload_norm(vk, &d->k_norm, l->k_norm, w) ||
            upload_norm(vk, &d->ffn_norm, l->ffn_norm, w))
            return -1;
        if (c->arch == ARCH_QWEN3MOE) {
            if (upload(vk, &d->gate_inp, l->gate_inp, w)) return -1;
            /* the first host_expert_layers layers' experts in host memory the kernels read */
            w->kind = il < host_expert_layers ? CVK_MEM_UPLOAD : CVK_MEM_DEVICE;
            int rc = upload_gate_up(vk, d, l, w, pairs) || upload(vk, &d->down_exps, l->down_exps, w);
            w->kind = CVK_MEM_DEVICE;
            if (rc) return -1;
        } else if (upload_gate_up(vk, d, l, w, pairs) || upload(vk, &d->ffn_down, l->ffn_down, w)) return -1;
    }
    fp_weights *fp = w->hashing;
    w->hashing = NULL;
    if (fp_weights_end(fp, w->digest)) return -1;
    if (w->show_progress && w->shown_pct < 100) fputc('\n', stderr);
    if (cvk_stager_flush(&vk->stager)) return -1;
    double s = (cd_now_ms() - w->started_ms) / 1000.0;
    if (!w->show_progress && w->total >= (256u << 20)) /* not a terminal: one line for the log */
        fprintf(stderr, "cinder: %.2f GiB of weights to the device in %.1f s (%.2f GiB/s)\n", w->total / 1073741824.0,
                s, s > 0 ? w->total / 1073741824.0 / s : 0.0);
    return 0;
}

void gpu_weights_free(gpu_weights *w, cvk_ctx *vk, const model *m) {
    if (w->hashing) { /* an upload that failed half way */
        uint8_t unused[16];
        fp_weights_end(w->hashing, unused);
    }
    if (w->layers) {
        for (uint32_t il = 0; il < m->cfg.n_layer; il++) {
            cvk_buffer *b = (cvk_buffer *)&w->layers[il];
            for (size_t i = 0; i < sizeof(gpu_layer) / sizeof(cvk_buffer); i++) cvk_buffer_destroy(&vk->mem, &b[i]);
        }
        free(w->layers);
    }
    cvk_buffer_destroy(&vk->mem, &w->tok_embd);
    cvk_buffer_destroy(&vk->mem, &w->output_norm);
    cvk_buffer_destroy(&vk->mem, &w->output);
    *w = (gpu_weights){0};
}
