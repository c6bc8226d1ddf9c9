/* libFuzzer target for the server's request bodies (server/api_request.c): JSON parsing, every
 * typed field, content parts, tools and tool_choice, the chat template, tokenizing and the
 * context check, on the real Qwen3 tokenizer.
 *
 * Input: the first byte picks the endpoint (even: /v1/chat/completions, odd: /v1/completions),
 * the rest is the body. For every input api_prepare must either refuse it with a 4xx/5xx status
 * and a message (a param, when named, being a field of the request API) or produce a job whose
 * prompt fits the context and whose token ids are in the vocabulary. Any violation aborts. Run
 * with scripts/fuzz.sh; the seeds are tests/fuzz/corpus_request. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/tokenizer.h"
#include "server/api_request.h"
#include "tests/fuzz/fuzz_util.h"

#define CHECK(cond) FUZZ_CHECK("fuzz_request", cond)

static api_model model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tokenizer *t = fuzz_qwen3_tokenizer("fuzz_request");
    model = (api_model){.tok = t, .n_ctx = 512, .as_generated = true};
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool chat = (data[0] & 1) == 0;
    model.preserve_reasoning = data[0] & 2;
    api_prepared p;
    api_err e = {0};
    int rc = api_prepare(&model, chat, (const char *)data + 1, size - 1, 42, &p, &e);
    if (rc) {
        CHECK(p.j == NULL);
        CHECK(e.status >= 400 && e.status < 600);
        CHECK(e.msg[0] != 0);
        return 0;
    }
    job *j = p.j;
    CHECK(j && j->n_ids > 0 && j->n_ids < model.n_ctx);
    CHECK(j->max_tokens >= 1 && j->max_tokens <= model.n_ctx - j->n_ids);
    for (uint32_t i = 0; i < j->n_ids; i++) CHECK(j->ids[i] >= 0 && j->ids[i] < tok_n_vocab(model.tok));
    for (uint32_t i = 0; i < j->n_stop; i++) CHECK(j->stop[i] && j->stop[i][0]);
    CHECK(!j->cache_salt || (j->cache_salt[0] && strlen(j->cache_salt) <= 256));
    /* the n choices: deep copies with seeds seed + k (at most 4 here: the copying is the same) */
    CHECK(p.n >= 1 && p.n <= 128);
    uint32_t n = p.n < 4 ? p.n : 4;
    job *c[4];
    CHECK(job_choices(j, n, c) == 0 && c[0] == j);
    for (uint32_t k = 1; k < n; k++) {
        CHECK(c[k] != j && c[k]->first == j && c[k]->sp.seed == j->sp.seed + k && c[k]->n_ids == j->n_ids);
        CHECK(!memcmp(c[k]->ids, j->ids, j->n_ids * sizeof *j->ids) && c[k]->n_stop == j->n_stop);
        for (uint32_t i = 0; i < j->n_stop; i++) CHECK(!strcmp(c[k]->stop[i], j->stop[i]));
        CHECK(!j->forced_json || !strcmp(c[k]->forced_json, j->forced_json));
        CHECK(c[k]->schema == j->schema && c[k]->adjust.n_bias == j->adjust.n_bias);
    }
    for (uint32_t k = n; k-- > 0;) job_unref(c[k]), job_unref(c[k]);
    return 0;
}
