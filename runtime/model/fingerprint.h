/* The model fingerprint: a SHA-256 over a length-prefixed, domain-separated encoding of
 * everything that changes what the model computes for a token prefix:
 *   "cinder.fingerprint.v2" | arch + hyperparameters | RoPE config | tokenizer digest | weights digest
 * The weights digest is XXH3-128 over the per-tensor XXH3-128 digests (name, type, shape,
 * bytes) in file order (a split model's: shard by shard, the order of the unsplit file, so
 * splitting a file keeps its fingerprint); each tensor is hashed as it is read for loading (never as a second
 * pass): by the GPU upload, or by model_load when nothing else reads the weights. The prefix
 * cache later extends this key with KV dtype, page size and a tenant salt. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "runtime/gguf/gguf.h"

typedef struct fp_weights fp_weights;

/* One slot per tensor of f. */
fp_weights *fp_weights_begin(const gguf_file *f);
/* Hashes tensor t (name, type, shape, bytes) in whatever order the reader meets tensors:
 * the GPU loader calls it just before uploading each one, so the bytes are read once. */
void fp_weights_add(fp_weights *w, const gguf_tensor *t);
/* Hashes any tensor not added yet, combines the per-tensor digests in file order, frees w,
 * writes 16 bytes. -1 only when out of memory. */
int fp_weights_end(fp_weights *w, uint8_t digest[16]);

struct model_config;
/* Combines the parts into the 32-byte fingerprint. */
int fp_model(const gguf_file *f, const struct model_config *cfg, const uint8_t weights_digest[16], uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
void fp_hex(const uint8_t *bytes, size_t n, char *out);
