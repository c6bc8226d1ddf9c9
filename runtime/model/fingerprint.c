#include "runtime/model/fingerprint.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/base/error.h"
#include "runtime/base/key_encode.h"
#include "runtime/model/model.h"

struct fp_weights {
    const gguf_file *file;
    XXH128_hash_t *digest; /* per tensor, by index in the file */
    bool *done;
};

fp_weights *fp_weights_begin(const gguf_file *f) {
    fp_weights *w = calloc(1, sizeof *w);
    size_t n = f->n_tensors ? f->n_tensors : 1;
    if (!w || !(w->digest = calloc(n, sizeof *w->digest)) || !(w->done = calloc(n, sizeof *w->done))) {
        if (w) free(w->digest);
        free(w);
        return NULL;
    }
    w->file = f;
    return w;
}

static XXH128_hash_t tensor_digest(const gguf_tensor *t) {
    uint64_t head[3 + GGUF_MAX_DIMS] = {t->name.len, (uint64_t)t->type, t->nbytes};
    for (int i = 0; i < GGUF_MAX_DIMS; i++) head[3 + i] = (uint64_t)t->ne[i];
    /* one pass over the bytes: the head and name go in as a seed-like prefix digest */
    XXH128_hash_t h = XXH3_128bits(head, sizeof head);
    uint64_t seed = h.low64 ^ XXH3_64bits(t->name.ptr, t->name.len);
    return XXH3_128bits_withSeed(t->data, t->nbytes, seed);
}

void fp_weights_add(fp_weights *w, const gguf_tensor *t) {
    size_t i = (size_t)(t - w->file->tensors);
    if (i >= w->file->n_tensors || w->done[i]) return; /* a tied tensor comes twice */
    w->digest[i] = tensor_digest(t);
    w->done[i] = true;
}

/* File order: by shard, then by offset in it. A split model's tensors are then in the order
 * gguf-split found them in the unsplit file, so both get one fingerprint (one file is all
 * shard 0: its order is what it always was). */
static int by_offset(const void *a, const void *b, void *file) {
    const gguf_tensor *t = ((const gguf_file *)file)->tensors;
    const gguf_tensor *x = &t[*(const size_t *)a], *y = &t[*(const size_t *)b];
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

int fp_weights_end(fp_weights *w, uint8_t digest[16]) {
    const gguf_file *f = w->file;
    size_t *order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    int rc = order ? 0 : cd_fail("out of memory");
    if (order) {
        for (size_t i = 0; i < f->n_tensors; i++) {
            fp_weights_add(w, &f->tensors[i]);
            order[i] = i;
        }
        qsort_r(order, f->n_tensors, sizeof *order, by_offset, (void *)f);
        XXH128_canonical_t *all = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *all);
        if (!all) {
            rc = cd_fail("out of memory");
        } else {
            for (size_t i = 0; i < f->n_tensors; i++) XXH128_canonicalFromHash(&all[i], w->digest[order[i]]);
            XXH128_canonical_t c;
            XXH128_canonicalFromHash(&c, XXH3_128bits(all, f->n_tensors * sizeof *all));
            memcpy(digest, c.digest, 16);
            free(all);
        }
    }
    free(order);
    free(w->digest);
    free(w->done);
    free(w);
    return rc;
}

/* ---- the key encoding (runtime/base/key_encode.h) into SHA-256 ---- */

static void sha_put(void *ctx, const void *p, size_t n) { EVP_DigestUpdate(ctx, p, n); }
static void put_field(EVP_MD_CTX *ctx, const char *tag, const void *data, uint64_t n) {
    cd_key_field(sha_put, ctx, tag, data, n);
}
static void put_u64(EVP_MD_CTX *ctx, const char *tag, uint64_t v) { cd_key_u64(sha_put, ctx, tag, v); }
static void put_f64(EVP_MD_CTX *ctx, const char *tag, double v) { cd_key_f64(sha_put, ctx, tag, v); }

/* A metadata value with its type, recursively (arrays of strings and nested arrays). */
static void put_value(EVP_MD_CTX *ctx, const gguf_value *v) {
    cd_key_le32(sha_put, ctx, (uint32_t)v->type);
    switch (v->type) {
    case GGUF_VT_STRING:
        cd_key_le64(sha_put, ctx, v->str.len);
        EVP_DigestUpdate(ctx, v->str.ptr, v->str.len);
        break;
    case GGUF_VT_ARRAY: {
        cd_key_le32(sha_put, ctx, (uint32_t)v->arr.type);
        cd_key_le64(sha_put, ctx, v->arr.n);
        if (v->arr.items)
            for (uint64_t i = 0; i < v->arr.n; i++) put_value(ctx, &v->arr.items[i]);
        else /* the file's own bytes, little-endian as GGUF stores them */
            EVP_DigestUpdate(ctx, v->arr.raw, v->arr.n * gguf_vtype_size(v->arr.type));
        break;
    }
    case GGUF_VT_F32:
    case GGUF_VT_F64: {
        uint64_t bits;
        memcpy(&bits, &v->f64, sizeof bits);
        cd_key_le64(sha_put, ctx, bits);
        break;
    }
    default: cd_key_le64(sha_put, ctx, v->u64); break;
    }
}

/* Every tokenizer.* key (vocabulary, merges, types, special ids, chat template). */
static void put_tokenizer(EVP_MD_CTX *ctx, const gguf_file *f) {
    static const char prefix[] = "tokenizer.";
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len < sizeof prefix - 1 || memcmp(kv->key.ptr, prefix, sizeof prefix - 1)) continue;
        put_field(ctx, "tokenizer.key", kv->key.ptr, kv->key.len);
        put_value(ctx, &kv->val);
    }
}

/* The RoPE the model runs (the file's keys after the command line's overrides, rope.h), not
 * the keys as written: YaRN on and off never share pages, and the same YaRN from the file or
 * from --rope-scaling does. The original context only matters to YaRN. */
static void put_rope(EVP_MD_CTX *ctx, const model_config *c) {
    const rope_config *r = &c->rope;
    put_f64(ctx, "rope.freq_base", r->freq_base);
    put_u64(ctx, "rope.head_dim", c->head_dim);
    put_u64(ctx, "rope.scaling", r->scaling);
    put_f64(ctx, "rope.factor", r->factor);
    put_u64(ctx, "rope.orig_ctx", r->scaling == ROPE_SCALING_YARN ? r->orig_ctx : 0);
    put_f64(ctx, "rope.attn_factor", r->attn_factor);
    put_f64(ctx, "rope.ext_factor", r->ext_factor);
    put_f64(ctx, "rope.beta_fast", r->beta_fast);
    put_f64(ctx, "rope.beta_slow", r->beta_slow);
}

int fp_model(const gguf_file *f, const model_config *c, const uint8_t weights_digest[16], uint8_t out[32]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return cd_fail("SHA-256 unavailable from libcrypto");
    }
    put_field(ctx, "domain", "cinder.fingerprint.v2", 21);
    put_u64(ctx, "arch", c->arch);
    const uint32_t hp[] = {c->n_layer, c->n_embd,   c->n_head,        c->n_head_kv, c->head_dim,
                           c->n_vocab, c->n_expert, c->n_expert_used, c->n_ff_exp,  c->n_ff};
    uint8_t hp_le[sizeof hp];
    for (size_t i = 0; i < sizeof hp; i++) hp_le[i] = (uint8_t)(hp[i / 4] >> (8 * (i % 4)));
    put_field(ctx, "hparams", hp_le, sizeof hp_le);
    put_f64(ctx, "rms_eps", c->rms_eps);
    put_rope(ctx, c);
    put_tokenizer(ctx, f);
    put_field(ctx, "weights.xxh3_128", weights_digest, 16);
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : cd_fail("SHA-256 failed");
}

void fp_hex(const uint8_t *bytes, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", bytes[i]);
    out[2 * n] = 0;
}
