/* libFuzzer target for model loading from GGUF metadata: model_load (runtime/model/model.c: the
 * config from the qwen3moe/qwen3 keys, validated against every tensor's shape and type, the
 * fingerprint over the metadata and the weights) and the tokenizer it loads from the
 * tokenizer.ggml.* arrays (runtime/text/tokenizer.c: tokens, types, merges, special ids). Each
 * input is a whole file, written to a scratch path and loaded as `cinder` loads a model.
 *
 * The properties: a load fails with a message, or gives a model whose config is sane (non-zero
 * sizes, the tokenizer's vocabulary at most the model's) and whose tokenizer encodes a few texts
 * (special tokens parsed and not) to ids in the vocabulary that decode again, plain ASCII back to
 * itself; freeing it leaks nothing (ASan). The seeds (tests/fuzz/corpus_model) are whole small
 * models written by `cinder mkmodel` with a 323-token vocabulary (tests/fuzz/small_tokenizer: the
 * Qwen3 byte tokens, its first 64 merges, three special tokens): a MoE one in Q8_0 and a dense
 * one in F16 with a padded vocabulary (README in that directory). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/model/model.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

#define CHECK(cond) FUZZ_CHECK("fuzz_model", cond)

static char path[4096];

static void cleanup(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/cinder-fuzz-model-%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    atexit(cleanup);
    return 0;
}

static void check_text(const tokenizer *t, const char *text, bool special, bool roundtrip) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, text, strlen(text), special, &ids, &n)) {
        CHECK(cd_errmsg()[0] != 0);
        return;
    }
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
    char *back = NULL;
    CHECK(tok_decode(t, ids, n, &back) == 0 && back);
    if (roundtrip && strcmp(back, text)) fprintf(stderr, "fuzz_model: '%s' decodes to '%s'\n", text, back);
    CHECK(!roundtrip || strcmp(back, text) == 0);
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, data, size) == (ssize_t)size);
    close(fd);
    model *m = NULL;
    if (model_load(&m, path, (model_load_opts){0})) {
        CHECK(m == NULL && cd_errmsg()[0] != 0);
        return 0;
    }
    const model_config *c = &m->cfg;
    CHECK(c->n_layer && c->n_embd && c->n_head && c->n_head_kv && c->head_dim && c->n_vocab);
    CHECK(m->tok && tok_n_vocab(m->tok) > 0 && (uint32_t)tok_n_vocab(m->tok) <= c->n_vocab);
    check_text(m->tok, "Hello world, in the 1998 inn!", false, true);
    check_text(m->tok, "<|im_start|>user\nhi<|im_end|>\n", true, false);
    check_text(m->tok, "caf\xc3\xa9 \xe2\x82\xac \xff\xfe", false, false);
    model_free(m);
    return 0;
}
