/* Whether a reply thinks: the one place that decides it, for cinder serve (a request's
 * chat_template_kwargs.enable_thinking, the server's --think / --no-think), cinder chat
 * (--think / --no-think) and /tokenize alike, from the template the model's file carries.
 *
 * The template decides first, as llama.cpp and vLLM have it (they render the file's own
 * template with the request's kwargs and nothing else):
 *   CHAT_THINK_SWITCH (the hybrid Qwen3)  on unless asked off: the template adds the empty
 *                                         think block only when enable_thinking is false;
 *   CHAT_THINK_NEVER  (Qwen3-Coder)       off whatever is asked (its template has no switch);
 *   CHAT_THINK_ALWAYS (a Thinking model)  on whatever is asked (its prompt opens the block).
 * What is asked of a template without a switch is ignored, not refused, as those servers do
 * (the template never reads it).
 *
 * Where the reply's first tokens are not the model's to choose, "on unless asked off" gives
 * way (chat_reply_start):
 *   CHAT_REPLY_JSON  held to JSON from its first token (response_format json_object /
 *                    json_schema): it cannot open with "<think>", so the default is off and
 *                    asking for thinking is refused;
 *   CHAT_REPLY_CALL  the prompt writes the start of a tool call (tool_choice required or
 *                    named): nothing can come before it, so the default is off, the layout
 *                    the hybrid model was trained to call in without thinking
 *                    ("<think>\n\n</think>\n\n<tool_call>"); asked on, the call follows the
 *                    generation prompt directly, as cinder always did.
 * A template that always thinks refuses both: its reply opens with reasoning. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "runtime/text/chat_template.h"

typedef enum chat_think_ask {
    CHAT_THINK_ASK_DEFAULT = 0, /* nothing said: the template's default (zeroed options say nothing) */
    CHAT_THINK_ASK_OFF,
    CHAT_THINK_ASK_ON,
} chat_think_ask;

typedef enum chat_reply_start {
    CHAT_REPLY_FREE, /* the model writes the reply from its first token */
    CHAT_REPLY_CALL, /* the prompt writes the start of a tool call */
    CHAT_REPLY_JSON, /* held to JSON from its first token */
} chat_reply_start;

/* *on = whether the reply thinks (chat_options.enable_thinking). -1 with a message, *on
 * untouched, when a reply that starts so cannot be had with what the template and the ask say. */
int chat_thinking(chat_template_id t, chat_think_ask ask, chat_reply_start start, bool *on);

/* The ask of a JSON value: absent or null is the default, true and false themselves. -1 for
 * anything else (the caller names the field). */
int chat_think_ask_of(const json_t *v, chat_think_ask *ask);
