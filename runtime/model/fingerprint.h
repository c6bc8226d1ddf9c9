/* The model fingerprint: a SHA-256 over a length-prefixed, domain-separated encoding of
 * everything that changes what the model computes for a token prefix:
 *   "cinder.fingerprint.v1" | arch + hyperparameters | RoPE config | tokenizer digest | weights digest
 * The weights digest is XXH3-128 over each tensor's name, type, shape and bytes, fed in
 * file order while the weights are read for loading (never as a second pass). The prefix
 * cache later extends this key with KV dtype, page size and a tenant salt. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "runtime/gguf/gguf.h"

typedef struct fp_weights fp_weights;

fp_weights *fp_weights_begin(void);
/* Starts a tensor's record (name, type, shape); its bytes follow through fp_weights_update. */
void fp_weights_tensor(fp_weights *w, const gguf_tensor *t);
void fp_weights_update(fp_weights *w, const void *data, size_t n);
/* Finishes and frees w; writes 16 bytes. */
void fp_weights_end(fp_weights *w, uint8_t digest[16]);

struct model_config;
/* Combines the parts into the 32-byte fingerprint. */
int fp_model(const gguf_file *f, const struct model_config *cfg, const uint8_t weights_digest[16],
             uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
void fp_hex(const uint8_t *bytes, size_t n, char *out);
