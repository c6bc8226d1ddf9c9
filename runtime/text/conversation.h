/* A conversation: the message history of one chat session (OpenAI-style JSON messages) and
 * its tools, rendered with its chat template (the Qwen3 one unless .template says otherwise)
 * and tokenized for each turn. Turn N's
 * prompt starts with turn N-1's prompt up to the previous assistant reply, which is what lets
 * the prefix cache serve the history instead of prefilling it again.
 *
 * A detail of the Qwen3 template would stop that reuse at turn N-1's "<|im_start|>assistant\n":
 * with thinking off, the generation prompt ends in an empty "<think>\n\n</think>\n\n" block, but
 * the template renders an earlier assistant message without it, so the reply would be prefilled
 * once more. The history is therefore rendered as generated (chat_options.as_generated): the
 * assistant turn keeps the block, and turn N is served from the cache up to turn N-1's last
 * generated token. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

typedef struct conversation {
    json_t *messages; /* array */
    json_t *tools;    /* array or NULL */
    chat_template_id template; /* rendered with (qwen3 after conv_init) */
} conversation;

int conv_init(conversation *c);
void conv_free(conversation *c);
/* Appends one message {"role": role, "content": text}. */
int conv_add(conversation *c, const char *role, const char *text);
/* Appends copies of every message of an array (checked: objects with a string role). */
int conv_extend(conversation *c, const json_t *messages);
int conv_set_tools(conversation *c, const json_t *tools); /* array; copied */
/* The whole history rendered with the generation prompt, tokenized (special tokens parsed). */
int conv_prompt(const conversation *c, const tokenizer *t, bool thinking, int32_t **ids, size_t *n);
