/* A Qwen3-Coder tool call held to its tool's JSON Schema: the XML call a model writes, read
 * byte by byte as the JSON call object it stands for, which the JSON automaton
 * (runtime/text/json_prefix.h) then holds to the call's schema ({"name": ..., "arguments":
 * ...}, server/api_request.c). One grammar thus serves both call formats: `tool_choice`
 * required or named, `strict` tools and `parallel_tool_calls` false mean the same for
 * Qwen3-Coder as for Qwen3's JSON calls (runtime/text/json_mask.h drives it).
 *
 *   reply (after <tool_call>)                 view (what json_prefix reads)
 *   \n<function=                              {"name":"
 *   get_weather                               get_weather
 *   >\n                                       ","arguments":{
 *   <parameter=                               "             (,"  before every later one)
 *   city>\n                                   city":"       (a text kind: the string opens)
 *   Paris "16e"  (any text, JSON-escaped)     Paris \"16e\"
 *   \n</parameter>\n                          "
 *   <parameter=days>\n                        ,"days":
 *   3    (a JSON value: int, number, ...)     3
 *   \n</parameter>\n
 *   </function>                               }}
 *   \n</tool_call>                            (the mask's tail)
 *
 * That is the layout the Coder chat template teaches (runtime/text/chat_coder.h), held
 * exactly: one "\n" after each tag, no other whitespace between tags. A value is read by its
 * parameter's kind, the same kinds the parser converts by (runtime/text/toolcall_coder.h
 * toolcall_coder_kind), so the arguments the parser gives are the JSON the schema held:
 *   - text: any bytes up to "\n</parameter>", except "</parameter>", "<parameter=" (where the
 *     parser would end the value), "</tool_call>" and "</think>" (where the reply's blocks and
 *     reasoning are split); the last "\n" before the close is the layout's, others are the
 *     value's. A text that is "null" in any case (the parser's null) may not close.
 *   - int, number, boolean, JSON: one JSON value (json_prefix's syntax), then "\n" outside any
 *     container or string, which closes it once the value is whole; its strings may not hold
 *     the four tags a text may not. A boolean's letters are
 *     read in any case ("True", as the template prints Python's str(); the parser's rule).
 * A parameter's name and the function's hold no "<", newline or NUL; a name stops at ">".
 *
 * The state is small and flat (copied per vocabulary token by the mask); the view of n bytes
 * is at most CODER_VIEW_MAX(n) bytes. */
#pragma once
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/text/json_prefix.h"
#include "runtime/text/toolcall_coder.h"

#define CODER_NAME_MAX 128
#define CODER_VIEW_MAX(n) (6 * (n) + 32)

/* The request's tools, as the grammar needs them: each tool's name and its parameters' kinds.
 * Immutable once made, shared by reference (made by the connection thread, read by the engine
 * thread). */
typedef struct coder_param {
    char *name;
    coder_kind kind;
} coder_param;
typedef struct coder_tool {
    char *name;
    coder_param *params;
    uint32_t n_params;
} coder_tool;
typedef struct coder_tools {
    coder_tool *tool;
    uint32_t n;
    atomic_int refs;
} coder_tools;

/* From a request's "tools" array (NULL: no tools, every value text). NULL on out of memory. */
coder_tools *coder_tools_of(const json_t *tools);
coder_tools *coder_tools_ref(coder_tools *t);
void coder_tools_unref(coder_tools *t);

typedef struct coder_call {
    const coder_tools *tools;        /* borrowed */
    uint8_t state;                   /* enum in coder_call.c */
    uint8_t lit, pos;                /* a literal being matched (or the two after a line), bytes matched */
    uint8_t kind;                    /* the value's coder_kind */
    uint8_t params;                  /* parameters begun (saturates) */
    uint8_t nl;                      /* text: a "\n" held (the close's, or the value's) */
    uint8_t hold_n;                  /* bytes since a '<' that begin a tag (text: held back from the view) */
    uint8_t nul;                     /* text: the value so far is this much of "null" (0xFF: not) */
    uint8_t depth, in_str, esc, any; /* JSON: open containers, inside a string, after '\\', bytes */
    int16_t tool;                    /* the called tool's index in tools, -1: none */
    uint16_t name_n;                 /* the name being read */
    char hold[16];
    char name[CODER_NAME_MAX];
} coder_call;

/* Right after "<tool_call>". */
void coder_call_init(coder_call *c, const coder_tools *tools);
/* Reads bytes[0..n) as far as the call goes: false when a byte is refused (c is then
 * unspecified). Else view[0..*vn) is what they add to the JSON view (which must then be fed to
 * the automaton at p, the view so far, or checked against it: p itself is only read, to close
 * JSON values), and *used the bytes the call took: n, or fewer once "</function>" ends it. */
bool coder_call_read(coder_call *c, const json_prefix *p, const char *bytes, size_t n, char *view, size_t *vn,
                     size_t *used);
/* "</function>" was read: the call is whole (its view too, if the automaton took it). */
bool coder_call_done(const coder_call *c);
/* Inside a value's text (or a JSON string), between characters and holding nothing: bytes with
 * no '<', '"', '\\' or control byte are written to the view as they are. */
bool coder_call_plain(const coder_call *c);
