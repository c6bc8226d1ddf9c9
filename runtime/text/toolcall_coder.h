/* One Qwen3-Coder tool call: the inner text of a <tool_call> block, in the layout its chat
 * template teaches (runtime/text/chat_coder.h),
 *
 *   \n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n<parameter=Q>\n...\n</function>\n
 *
 * -> {"type": "function", "function": {"name": NAME, "arguments": "{\"P\": VALUE, ...}"}}.
 *
 * It reads calls the way Qwen's own parser does (vLLM's qwen3coder_tool_parser.py), so a
 * client sees the same arguments from cinder as from vLLM:
 *   - NAME is the text after "<function=" up to the first ">"; a parameter's name likewise;
 *   - a parameter's value runs to "</parameter>", or to the next "<parameter=", or to the
 *     function's end (a model that forgot a closing tag), less one leading and one trailing
 *     "\n"; the function ends at the block's last "</function>" (or the block's end), so a
 *     value may hold "</function>" (code that quotes the tag), where vLLM cuts it at the first;
 *   - each value is converted by the type its tool's JSON Schema gives the parameter
 *     (tools[].function.parameters.properties.P.type, lower-cased):
 *       "null" in any case, whatever the type          null
 *       no schema for P, or string/str/text/varchar/char/enum    the text as it is
 *       int*, uint*, long*, short*, unsigned*          Python int(): an integer, else the text
 *       num*, float*                                   Python float(): an integer when integral,
 *                                                      else a number; the text when not finite
 *       boolean, bool, binary                          true when the text is "true" in any case,
 *                                                      else false (as vLLM: "yes" is false)
 *       object, array, arr, dict*, list*, anything else     the JSON value, else the text
 *   - the arguments are written as Python's json.dumps does (runtime/text/json_jinja.h), in
 *     the order the parameters came; a repeated parameter keeps its first place, its last value.
 * Where cinder is stricter than vLLM, so that a call is either clearly one or is content:
 *   - the block holds exactly one function: only whitespace before "<function=" and after
 *     "</function>", and no "<function=" between its parameters (vLLM takes several functions
 *     from one block, and ones without a block);
 *   - a name without its ">" is not a call (vLLM fails the whole reply the same way).
 * Differences in the corners: Python int() and float() accept integers of any size (cinder
 * keeps the text beyond 64 bits; an integral float beyond them stays a number), and the last
 * resort of vLLM's conversion, ast.literal_eval (Python literals like 'a' or True), is JSON
 * here. */
#pragma once
#include <jansson.h>

#include "runtime/text/slice.h"

/* The call in inner (a new reference), or NULL when inner is not one call in this layout (or
 * on out of memory). tools: the request's "tools" array, or NULL (every value a string). */
json_t *toolcall_coder_call(slice inner, const json_t *tools);

/* How a parameter's value is converted (the table above): the text as it is, Python's int(),
 * float() or the boolean rule, or JSON. "null" in any case is null whatever the kind. The
 * call grammar (runtime/text/coder_call.h) reads values by the same kinds. */
typedef enum coder_kind { CODER_TEXT, CODER_INT, CODER_NUM, CODER_BOOL, CODER_JSON } coder_kind;

/* tools[].function.parameters.properties of the tool called name (NULL: no such tool, or none). */
const json_t *toolcall_coder_properties(const json_t *tools, slice name);
/* The kind of parameter pname under props (a tool's properties, or NULL: text). */
coder_kind toolcall_coder_kind(const json_t *props, slice pname);
