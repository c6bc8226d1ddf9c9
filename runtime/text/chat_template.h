/* Which chat template a model's file carries, and so which of cinder's renderers (each a C
 * translation of one Jinja text, byte-identical to it) and tool-call formats serve it.
 *
 * A GGUF's tokenizer.chat_template is recognised by its exact text: a 64-bit FNV-1a hash of
 * the text, trailing whitespace removed (the same text ships with and without a final newline:
 * llama.cpp's .jinja files have one, most tokenizer_config.json strings do not), against the
 * texts each renderer was checked on. Only an exact match renders by default: every other
 * text, however close, could render differently, and a prompt the model's file does not
 * describe should not happen silently.
 *
 * A text that is not exact is refused, naming the templates cinder knows; --chat-template NAME
 * then renders it with NAME's layout, the user's informed choice. To make that choice easy,
 * the refusal says which family the text belongs to when its markers say so: the literal
 * pieces of output that set the family apart (Qwen3-Coder's "<function=" / "<parameter="
 * calls, the hybrid template's enable_thinking switch and JSON call instructions). Re-uploads
 * carry such variants: unsloth's Qwen3-Coder template and Qwen's later revision of it list
 * tools with other words and print arguments with Python's str(), so "same family" is not
 * "same bytes". The Qwen3-2507 siblings share the hybrid's JSON calls but not its
 * enable_thinking switch (which is why that switch is a marker): they are not called qwen3.
 * A file without any template renders as qwen3, the architecture's own, as cinder always has. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum chat_template_id {
    CHAT_TEMPLATE_QWEN3 = 0,       /* Qwen3 hybrid thinking (April 2025), JSON tool calls */
    CHAT_TEMPLATE_QWEN3_CODER = 1, /* Qwen3-Coder, XML tool list and calls */
    CHAT_TEMPLATE_COUNT
} chat_template_id;

typedef enum chat_template_match {
    CHAT_MATCH_EXACT,   /* the text (up to trailing whitespace) the renderer was checked on */
    CHAT_MATCH_MARKERS, /* refused: not the exact text, but the family's markers (a hint) */
    CHAT_MATCH_ABSENT,  /* the file has no template: the default */
    CHAT_MATCH_NAMED,   /* picked by name (--chat-template) */
    CHAT_MATCH_UNKNOWN, /* refused: neither the text nor any family's markers */
} chat_template_match;

/* What a template does about thinking (runtime/text/chat_thinking.h decides a request's). */
typedef enum chat_think_mode {
    CHAT_THINK_SWITCH, /* enable_thinking turns it off; undefined = on (the hybrid Qwen3) */
    CHAT_THINK_NEVER,  /* no think block ever (Qwen3-Coder; Qwen3-2507 Instruct's would be) */
    CHAT_THINK_ALWAYS, /* the generation prompt opens "<think>\n" (Qwen3-2507 Thinking's would;
                          none known yet: docs/CHAT_TEMPLATE.md) */
} chat_think_mode;

/* "qwen3", "qwen3-coder". */
const char *chat_template_name(chat_template_id id);
chat_think_mode chat_template_think_mode(chat_template_id id);
/* One line listing every known name with what it is, for messages and usage texts. */
const char *chat_template_known(void);
/* -1 with a message listing the known names when name is none of them. */
int chat_template_from_name(const char *name, chat_template_id *out);

/* FNV-1a 64 of text[0..len) without trailing whitespace (step 1 above). */
uint64_t chat_template_hash(const char *text, size_t len);

/* Recognises a template text (len 0: absent). -1 with a message naming the known templates
 * when it is not exactly one of them; *how then says whether its markers name a family
 * (CHAT_MATCH_MARKERS, *out that family, named in the message too) or not (CHAT_MATCH_UNKNOWN). */
int chat_template_identify(const char *text, size_t len, chat_template_id *out, chat_template_match *how);

/* What a command renders with: the template named by `name` when not NULL (the file's text
 * is then not looked at), else the file's, identified. */
int chat_template_resolve(const char *text, size_t len, const char *name, chat_template_id *out,
                          chat_template_match *how);
