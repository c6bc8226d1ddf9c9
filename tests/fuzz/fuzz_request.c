/* libFuzzer target for the server's request bodies (server/api_request.c): JSON parsing, every
 * typed field, content parts, tools and tool_choice, the chat template, tokenizing and the
 * context check, on the real Qwen3 tokenizer.
 *
 * Input: the first byte picks the endpoint (even: /v1/chat/completions, odd: /v1/completions;
 * with bit 0x04 /tokenize, with 0x08 /detokenize instead: the same checks of the body, then ids
 * in the vocabulary, or a NUL-terminated text), preserve_reasoning (bit 0x02) and the chat
 * template (bit 0x10: qwen3-coder, else qwen3); the rest is the body. For every input
 * api_prepare must either refuse it with a 4xx/5xx status
 * and a message (a param, when named, being a field of the request API) or produce a job per
 * prompt whose prompt fits the context and whose token ids are in the vocabulary, and their
 * choices as job_choices makes them (one cv for all). Any violation aborts. Run
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

/* /tokenize and /detokenize (api_request.h): refused with a status and a message, or ids in the
 * vocabulary / a text. */
static int fuzz_tokens(bool detokenize, const char *body, size_t len) {
    api_err e = {0};
    int rc;
    if (detokenize) {
        char *text = NULL;
        rc = api_detokenize(&model, body, len, &text, &e);
        CHECK(rc ? text == NULL : text != NULL);
        if (text) CHECK(strlen(text) <= 3 * tok_piece_max(model.tok) * len); /* to its NUL; U+FFFD is 3 bytes */
        free(text);
    } else {
        api_tokens t;
        rc = api_tokenize(&model, body, len, &t, &e);
        CHECK(!rc || (t.ids == NULL && t.n == 0));
        for (size_t k = 0; !rc && k < t.n; k++) CHECK(t.ids[k] >= 0 && t.ids[k] < tok_n_vocab(model.tok));
        free(t.ids);
    }
    CHECK(!rc || (e.status >= 400 && e.status < 600 && e.msg[0]));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    model.preserve_reasoning = data[0] & 2;
    model.template = data[0] & 0x10 ? CHAT_TEMPLATE_QWEN3_CODER : CHAT_TEMPLATE_QWEN3;
    if (data[0] & 0x0c) return fuzz_tokens(data[0] & 0x08, (const char *)data + 1, size - 1);
    bool chat = (data[0] & 1) == 0;
    api_prepared p;
    api_err e = {0};
    int rc = api_prepare(&model, chat, (const char *)data + 1, size - 1, 42, &p, &e);
    if (rc) {
        CHECK(p.prompts == NULL && p.n_prompts == 0);
        CHECK(e.status >= 400 && e.status < 600);
        CHECK(e.msg[0] != 0);
        return 0;
    }
    CHECK(p.prompts && p.n_prompts >= 1 && p.n_prompts <= (chat ? 1 : API_MAX_PROMPTS));
    for (uint32_t i = 0; i < p.n_prompts; i++) {
        const job *j = p.prompts[i], *j0 = p.prompts[0];
        CHECK(j && j->n_ids > 0 && j->n_ids < model.n_ctx && !j->first);
        CHECK((j->max_tokens >= 1 || j->echo) && j->max_tokens <= model.n_ctx - j->n_ids);
        for (uint32_t k = 0; k < j->n_ids; k++) CHECK(j->ids[k] >= 0 && j->ids[k] < tok_n_vocab(model.tok));
        for (uint32_t k = 0; k < j->n_stop; k++) CHECK(j->stop[k] && j->stop[k][0]);
        CHECK(!j->cache_salt || (j->cache_salt[0] && strlen(j->cache_salt) <= 256));
        CHECK(!j->echo || (!chat && j->echo_text)); /* the prompt's own text to begin the reply with */
        CHECK(j->prompt_logprobs == ((j->echo && j->logprobs) || j->vllm_prompt_logprobs >= 0));
        CHECK(j->vllm_prompt_logprobs >= -1 && j->vllm_prompt_logprobs <= TOP_LOGPROBS_MAX &&
              j->prompt_top <= TOP_LOGPROBS_MAX);
        CHECK(!p.stream || j->vllm_prompt_logprobs < 0); /* never streamed */
        CHECK(j->echo == j0->echo && j->sp.seed == j0->sp.seed && j->n_stop == j0->n_stop && j->schema == j0->schema);
    }
    /* the choices: deep copies with seeds seed + k (at most 4 here: the copying is the same) */
    CHECK(p.n >= 1 && p.n <= 128);
    uint32_t n = p.n < 4 ? p.n : 4, np = p.n_prompts < 3 ? p.n_prompts : 3;
    for (uint32_t i = np; i < p.n_prompts; i++) job_unref(p.prompts[i]), job_unref(p.prompts[i]);
    job *c[12];
    CHECK(job_choices(p.prompts, np, n, c) == 0);
    for (uint32_t i = 0; i < np * n; i++) {
        job *j = p.prompts[i / n], *ci = c[i];
        CHECK(i % n ? ci != j && !ci->prompt_logprobs && !ci->echo_text : ci == j);
        CHECK(i == 0 ? !ci->first : ci->first == p.prompts[0]); /* one cv for all */
        CHECK(ci->sp.seed == j->sp.seed + i % n && ci->n_ids == j->n_ids && ci->echo == j->echo);
        CHECK(!memcmp(ci->ids, j->ids, j->n_ids * sizeof *j->ids) && ci->n_stop == j->n_stop);
        for (uint32_t k = 0; k < j->n_stop; k++) CHECK(!strcmp(ci->stop[k], j->stop[k]));
        CHECK(!j->forced_json || !strcmp(ci->forced_json, j->forced_json));
        CHECK(ci->schema == j->schema && ci->adjust.n_bias == j->adjust.n_bias);
    }
    for (uint32_t i = np * n; i-- > 0;) job_unref(c[i]), job_unref(c[i]);
    free(p.prompts);
    return 0;
}
