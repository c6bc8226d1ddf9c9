#include "runtime/text/conversation.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/chat.h"

int conv_init(conversation *c) {
    *c = (conversation){.messages = json_array()};
    return c->messages ? 0 : cd_fail("out of memory");
}

static void forget_prompt(conversation *c) {
    free(c->last_text), free(c->last_ids);
    c->last_text = NULL, c->last_ids = NULL, c->last_len = c->n_last = 0;
}

void conv_free(conversation *c) {
    json_decref(c->messages);
    json_decref(c->tools);
    forget_prompt(c);
    *c = (conversation){0};
}

int conv_add(conversation *c, const char *role, const char *text) {
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", text);
    if (!m) return cd_fail("a message that is not valid UTF-8 (role %s)", role);
    return json_array_append_new(c->messages, m) ? cd_fail("out of memory") : 0;
}

int conv_extend(conversation *c, const json_t *messages) {
    if (!json_is_array(messages)) return cd_fail("messages must be an array");
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return cd_fail("message %zu is not an object with a string \"role\"", i);
    }
    json_array_foreach(messages, i, m) {
        if (json_array_append_new(c->messages, json_deep_copy(m))) return cd_fail("out of memory");
    }
    return 0;
}

int conv_set_tools(conversation *c, const json_t *tools) {
    if (!json_is_array(tools)) return cd_fail("tools must be an array");
    json_decref(c->tools);
    c->tools = json_deep_copy(tools);
    return c->tools ? 0 : cd_fail("out of memory");
}

int conv_prompt(conversation *c, const tokenizer *t, bool thinking, int32_t **ids, size_t *n) {
    char *text = NULL;
    chat_options o = {
        .template = c->template, .add_generation_prompt = true, .enable_thinking = thinking, .as_generated = true};
    if (chat_render(c->messages, c->tools, o, &text)) return -1;
    size_t len = strlen(text);
    uint32_t reused;
    forget_prompt(c);
    int rc = reply_memory_encode(c->replies, t, NULL, text, len, ids, n, &reused);
    if (!rc && c->replies && (c->last_ids = malloc((*n ? *n : 1) * sizeof **ids))) {
        memcpy(c->last_ids, *ids, *n * sizeof **ids);
        c->n_last = *n, c->last_text = text, c->last_len = len;
        text = NULL; /* kept for conv_reply */
    }
    free(text);
    return rc;
}

int conv_reply(conversation *c, const tokenizer *t, const char *text, const int32_t *gen, size_t n_gen) {
    if (c->replies && c->last_text)
        reply_memory_remember(c->replies, t, NULL, c->last_ids, c->n_last, c->last_text, c->last_len, gen, n_gen);
    forget_prompt(c);
    return conv_add(c, "assistant", text);
}
