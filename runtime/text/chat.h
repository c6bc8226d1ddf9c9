/* The Qwen3 chat template, rendered in C. Output is byte-identical to running the Jinja
 * template in Qwen3's tokenizer_config.json with Python Jinja2 / transformers, and to
 * @huggingface/jinja except where that renderer departs from Python (strip with an
 * argument, integer-like key order and float formatting in tojson): see
 * docs/CHAT_TEMPLATE.md. Checked on a committed set of conversations.
 *
 * Messages are OpenAI-style JSON objects (jansson): {"role", "content", "reasoning_content"?,
 * "tool_calls"?: [{"function": {"name", "arguments"}}]}; roles system, user, assistant, tool.
 * Tools are the OpenAI "tools" array; each is emitted with the template's `tojson`. */
#pragma once
#include <stdbool.h>
#include <jansson.h>

#include "runtime/text/chat_template.h"

typedef struct chat_options {
    /* which template renders (chat_template.h); 0 = qwen3. Only qwen3 reads enable_thinking and
     * preserve_reasoning: Qwen3-Coder has no thinking and drops reasoning_content. */
    chat_template_id template;
    bool add_generation_prompt;
    bool enable_thinking; /* false appends the empty <think></think> block */
    /* Departures from the template, for prefix reuse (docs/CHAT_TEMPLATE.md, "Rendering history
     * as generated"); both off = byte-identical to the template:
     *   as_generated: with enable_thinking false, every assistant turn is rendered as the model
     *     generated it after the generation prompt, "<think>\n\n</think>\n\n" + content, instead
     *     of the template's bare content, so the next turn's prompt continues the cached tokens;
     *   preserve_reasoning: assistant turns keep their reasoning_content wherever they are (the
     *     template drops it before the last user query), as llama.cpp's and SGLang's options do. */
    bool as_generated;
    bool preserve_reasoning;
    /* With as_generated: the text a tool call was generated as, so a call sent back renders as
     * those bytes ("<tool_call>" + *text + "</tool_call>") instead of the template's layout,
     * which a model may not have kept (whitespace, key order). Called with the call's id (empty
     * when the message gives none), name and arguments as the client sent them; returns true
     * and a malloc'd *text only when the caller generated exactly that call (the server's
     * memory of its replies, server/call_memory.h). NULL: the template's layout always. */
    bool (*generated_call)(void *ctx, const char *id, const char *name, const json_t *arguments, char **text,
                           size_t *len);
    void *generated_call_ctx;
} chat_options;

/* Renders to a malloc'd string with opt.template (qwen3-coder: chat_coder.h). -1 with a message for malformed messages. */
int chat_render(const json_t *messages, const json_t *tools, chat_options opt, char **out);
