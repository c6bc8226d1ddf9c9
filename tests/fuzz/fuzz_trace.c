/* libFuzzer target for request traces (tools/trace.c, the format of scripts/scenarios/README.md):
 * the line splitting and JSON of the whole trace, the header's kind, then every request the way
 * the replay reads it: max_tokens, and the prompt (token ids checked against the vocabulary, or
 * a chat session's history + append + tools through the chat template and the real Qwen3
 * tokenizer). For every input each step either fails with a message or gives a non-empty prompt
 * of token ids in the vocabulary. Any violation aborts. Run with scripts/fuzz.sh; the seeds are
 * tests/fuzz/corpus_trace (the shipped scenarios among them). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/trace.h"

#define CHECK(cond) FUZZ_CHECK("fuzz_trace", cond)

#define MAX_LINES 64 /* requests read per input: enough for the seeds, bounded per run */

static tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tok = fuzz_qwen3_tokenizer("fuzz_trace");
    return 0;
}

static void check_prompt(int rc, const int32_t *ids, size_t n) {
    if (rc) {
        CHECK(cd_errmsg()[0] != 0);
        return;
    }
    CHECK(ids && n > 0);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && (int64_t)ids[i] < (int64_t)tok_n_vocab(tok));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    trace t;
    if (trace_parse("fuzz", (const char *)data, size, &t)) {
        CHECK(cd_errmsg()[0] != 0 && t.header == NULL && t.lines == NULL);
        return 0;
    }
    CHECK(json_is_object(t.header) && json_is_array(t.lines));
    (void)trace_header_u32(&t, "kv_pool_tokens");
    trace_sessions ss = {0};
    size_t n_lines = json_array_size(t.lines);
    for (size_t no = 1; no <= n_lines && no <= MAX_LINES; no++) {
        const json_t *req = json_array_get(t.lines, no - 1);
        uint32_t max_tokens = 0;
        if (trace_max_tokens(req, no, &max_tokens)) CHECK(cd_errmsg()[0] != 0);
        else CHECK(max_tokens >= 1 && max_tokens <= 1u << 20);
        int32_t *ids = NULL;
        size_t n = 0;
        conversation *c = NULL;
        int rc = t.chat ? trace_chat_ids(&ss, req, no, tok, &c, &ids, &n)
                        : trace_request_ids(req, no, tok_n_vocab(tok), &ids, &n);
        check_prompt(rc, ids, n);
        if (!rc && c) conv_add(c, "assistant", "ok"); /* the reply joins the session, as in the replay */
        free(ids);
    }
    trace_sessions_free(&ss);
    trace_free(&t);
    return 0;
}
