/* The Qwen3-Coder chat template (Qwen3-Coder-30B-A3B-Instruct's tokenizer_config.json, the
 * same text as llama.cpp's models/templates/Qwen3-Coder.jinja), rendered in C. Output is
 * byte-identical to Python Jinja2 as transformers sets it up, and to @huggingface/jinja except
 * where that renderer departs from Python (str() of True/False/None/floats and lists, which
 * the template prints for scalar schema fields and arguments): docs/CHAT_TEMPLATE.md.
 * tests/test_chat.c checks it on curated and generated conversations.
 *
 *   <|im_start|>system\nSYSTEM                     (or the template's default system text,
 *                                                  when there are tools and no system message)
 *   \n\n# Tools\n\nYou have access to the following tools:\n\n<tools>
 *   \n<function>\n<name>NAME</name>\n<description>D</description>\n<parameters>
 *     \n<parameter>\n<name>P</name>\n<type>T</type>\n<description>D</description>
 *     (every other schema key K: \n<K>VALUE</K>, VALUE tojson for objects and arrays, else str())
 *     \n</parameter>  ... \n</parameters> ... \n</function> ... \n</tools> + instructions
 *   <|im_end|>\n
 *   assistant with calls:  <|im_start|>assistant[\nCONTENT.strip()\n]
 *                          \n<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
 *                          </function>\n</tool_call> ... <|im_end|>\n
 *   a run of tool messages: <|im_start|>user\n<tool_response>\nC\n</tool_response>\n ... <|im_end|>\n
 *   other turns:           <|im_start|>ROLE\nCONTENT<|im_end|>\n
 *   generation prompt:     <|im_start|>assistant\n          (no thinking: enable_thinking is ignored)
 *
 * Where cinder departs from the template, each because the template would fail or print
 * nonsense, never silently:
 *   - a call's "arguments" may be a JSON text (what OpenAI clients send): it is parsed, as vLLM
 *     and llama.cpp do before rendering; the template's `|items` needs an object. Anything
 *     but an object is refused;
 *   - an assistant message's null or absent content renders as "" (OpenAI sends that);
 *   - a schema "type" that is a list prints as Python's repr of it only for plain ASCII names
 *     ("['string', 'null']"); fancier values printed with repr() are refused.
 * With opt.as_generated and opt.generated_call, a call this server generated renders as the
 * bytes it was generated as ("\n<tool_call>" + TEXT + "</tool_call>"), as chat.h describes.
 * reasoning_content is ignored, as the template ignores it. */
#pragma once
#include <jansson.h>

#include "runtime/text/chat.h"

int chat_render_coder(const json_t *messages, const json_t *tools, chat_options opt, char **out);
