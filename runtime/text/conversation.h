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
 * generated token.
 *
 * That holds for the text; for the ids it needs the reply memory (reply_memory.h): a model's
 * tokens are often not the canonical BPE of their text, and re-encoding the reply diverges from
 * the cached ids where they differ. With .replies set, conv_reply records each reply's ids and
 * the next conv_prompt takes them as generated. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/chat_template.h"
#include "runtime/text/reply_memory.h"
#include "runtime/text/tokenizer.h"

typedef struct conversation {
    json_t *messages;          /* array */
    json_t *tools;             /* array or NULL */
    chat_template_id template; /* rendered with (qwen3 after conv_init) */
    reply_memory *replies;     /* NULL: replies re-encoded from their text; the owner's, set after conv_init */
    /* with replies: the last conv_prompt's text and ids, for conv_reply */
    char *last_text;
    size_t last_len;
    int32_t *last_ids;
    size_t n_last;
} conversation;

int conv_init(conversation *c);
void conv_free(conversation *c);
/* Appends one message {"role": role, "content": text}. */
int conv_add(conversation *c, const char *role, const char *text);
/* Appends copies of every message of an array (checked: objects with a string role). */
int conv_extend(conversation *c, const json_t *messages);
int conv_set_tools(conversation *c, const json_t *tools); /* array; copied */
/* The whole history rendered with the generation prompt, tokenized (special tokens parsed); with
 * .replies, the replies recorded by conv_reply as the ids generated. */
int conv_prompt(conversation *c, const tokenizer *t, bool thinking, int32_t **ids, size_t *n);
/* The reply to the last conv_prompt: appends {"role": "assistant", "content": text} and, with
 * .replies, records that prompt's ids + gen[0..n_gen) (the ids generated, an end token
 * included or not) for the next prompt. Recording is best effort (reply_memory_remember). */
int conv_reply(conversation *c, const tokenizer *t, const char *text, const int32_t *gen, size_t n_gen);
