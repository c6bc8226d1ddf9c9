#include "runtime/text/chat_template.h"

#include <stdbool.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/slice.h"

typedef struct {
    const char *name, *what;
    chat_think_mode think;
    /* the checked texts: hash and length after trailing whitespace is removed */
    struct {
        uint64_t hash;
        size_t len;
    } exact[2];
    /* every one present (in the Jinja source, so "\n" is the two characters) */
    const char *markers[4];
    /* none present */
    const char *absent[2];
} known_template;

static const known_template known[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_QWEN3] =
        {
            .name = "qwen3",
            .what = "Qwen3 hybrid thinking",
            .think = CHAT_THINK_SWITCH,
            /* Qwen3-0.6B .. 235B-A22B and Qwen3-30B-A3B (April 2025): tokenizer_config.json's
         * chat_template = llama.cpp's models/templates/Qwen-Qwen3-0.6B.jinja */
            .exact = {{0x2bfdb7aa9754484eull, 4116}},
            .markers = {"enable_thinking", "<function-name>", "<args-json-object>", "<tool_response>"},
            .absent = {"<function=", "<parameter="},
        },
    [CHAT_TEMPLATE_QWEN3_CODER] =
        {
            .name = "qwen3-coder",
            .what = "Qwen3-Coder, XML tool calls",
            .think = CHAT_THINK_NEVER,
            /* Qwen3-Coder-30B-A3B-Instruct and -480B-A35B: llama.cpp's models/templates/Qwen3-Coder.jinja */
            .exact = {{0x21dc9ed0659009cbull, 6147}},
            .markers = {"<tool_call>\\n<function=", "<parameter=", "<tools>", "<tool_response>"},
            .absent = {"enable_thinking", "<args-json-object>"},
        },
};

const char *chat_template_name(chat_template_id id) {
    return (unsigned)id < CHAT_TEMPLATE_COUNT ? known[id].name : "?";
}

chat_think_mode chat_template_think_mode(chat_template_id id) {
    return (unsigned)id < CHAT_TEMPLATE_COUNT ? known[id].think : CHAT_THINK_NEVER;
}

const char *chat_template_known(void) {
    return "qwen3 (Qwen3 hybrid thinking), qwen3-coder (Qwen3-Coder, XML tool calls)";
}

int chat_template_from_name(const char *name, chat_template_id *out) {
    for (int i = 0; i < CHAT_TEMPLATE_COUNT; i++)
        if (name && !strcmp(name, known[i].name)) {
            *out = (chat_template_id)i;
            return 0;
        }
    return cd_fail("unknown chat template \"%.60s\"; cinder knows %s", name ? name : "", chat_template_known());
}

static size_t trimmed_len(const char *text, size_t len) {
    while (len && (is_ws(text[len - 1]) || text[len - 1] == '\f' || text[len - 1] == '\v')) len--;
    return len;
}

uint64_t chat_template_hash(const char *text, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    len = trimmed_len(text, len);
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool has_markers(const known_template *k, slice text) {
    for (size_t i = 0; i < sizeof k->markers / sizeof k->markers[0]; i++)
        if (k->markers[i] && find_first(text, (slice){k->markers[i], strlen(k->markers[i])}) < 0) return false;
    for (size_t i = 0; i < sizeof k->absent / sizeof k->absent[0]; i++)
        if (k->absent[i] && find_first(text, (slice){k->absent[i], strlen(k->absent[i])}) >= 0) return false;
    return true;
}

int chat_template_identify(const char *text, size_t len, chat_template_id *out, chat_template_match *how) {
    if (!text || len == 0) {
        *out = CHAT_TEMPLATE_QWEN3;
        *how = CHAT_MATCH_ABSENT;
        return 0;
    }
    uint64_t h = chat_template_hash(text, len);
    size_t n = trimmed_len(text, len);
    for (int i = 0; i < CHAT_TEMPLATE_COUNT; i++)
        for (size_t j = 0; j < sizeof known[i].exact / sizeof known[i].exact[0]; j++)
            if (known[i].exact[j].len == n && known[i].exact[j].hash == h) {
                *out = (chat_template_id)i;
                *how = CHAT_MATCH_EXACT;
                return 0;
            }
    for (int i = 0; i < CHAT_TEMPLATE_COUNT; i++)
        if (has_markers(&known[i], (slice){text, len})) {
            *out = (chat_template_id)i;
            *how = CHAT_MATCH_MARKERS;
            return cd_fail(
                "the model's chat template (%zu bytes, hash %016llx) is not one cinder renders exactly, though "
                "its markers say it is a variant of %s (%s); render it with that layout by passing "
                "--chat-template %s (cinder knows %s)",
                len, (unsigned long long)h, known[i].name, known[i].what, known[i].name, chat_template_known());
        }
    *how = CHAT_MATCH_UNKNOWN;
    return cd_fail("the model's chat template (%zu bytes, hash %016llx) is none cinder renders; cinder knows %s: "
                   "pick one with --chat-template NAME",
                   len, (unsigned long long)h, chat_template_known());
}

int chat_template_resolve(const char *text, size_t len, const char *name, chat_template_id *out,
                          chat_template_match *how) {
    if (name) {
        *how = CHAT_MATCH_NAMED;
        return chat_template_from_name(name, out);
    }
    return chat_template_identify(text, len, out, how);
}
