/* Streams a Qwen3 assistant reply while it is generated, as OpenAI chat-completion-chunk
 * deltas, split the way toolcall_parse (runtime/text/toolcall.h) splits the finished reply:
 *
 *   {"reasoning_content": "..."}   pieces of the reasoning, in order
 *   {"content": "..."}             pieces of the content, in order
 *   {"tool_calls": [{"index": i, "id": PREFIX i, "type": "function",
 *                    "function": {"name": ..., "arguments": "..."}}]}   one per call, whole
 *
 * The invariant: the reasoning pieces add up to the final message's "reasoning_content" (no
 * piece when it is absent or ""), the content pieces to its "content" (no piece when it is
 * null or ""), and the tool-call deltas are its "tool_calls" in order, where message =
 * toolcall_parse(final text). No delta is empty. A piece, once sent, is never taken back, so
 * each feed sends only what no continuation of the text (in the layout (L) below) can change,
 * and the final feed sends the rest:
 *
 *   text so far                        settled               held back, and why
 *   "  <thi"                           -                     all: reasoning or content?
 *   "<think>\nR1 R2\n</thi"            reasoning "R1 R2"     "\n</thi": rstrip, a marker
 *   "<think>\nR\n</think>\n\nC1  <to"  reasoning "R",        "  <to": strip_ws before a
 *                                      content "C1"          block, a marker
 *   "C <tool_call>{...}</tool_call>"   content "C"           the rest, until the end
 *   " C"                               -                     all: " C" without tool calls,
 *                                                            "C" with them (strip_ws)
 *
 * Tool calls go out at the final feed only. toolcall_parse takes the blocks as calls only
 * when every block is a tool call; one malformed block anywhere, even the last, makes the
 * whole text after the reasoning content. A call sent when its block closed could be undone
 * by a later block, so no call is settled before the end; content before the first
 * <tool_call> streams live. (A client gets the calls a few tokens later than a
 * close-and-send stream would give them: they are the end of the reply anyway.)
 *
 * Where exactness cannot be had. toolcall_parse cuts reasoning at the LAST "<think>" before
 * the first "</think>", and content after the LAST "</think>"; and text with a "</think>"
 * but no opening "<think>" is reasoning up to it (the prompt opened the block). Read
 * literally, any later "</think>" could turn all content sent into something else, and a
 * later "<think>" all reasoning sent: no content could stream before the end, nor reasoning
 * before its "</think>". So the stream assumes the layout the Qwen3 template renders
 * (runtime/text/chat.c) and the model was trained to write:
 *
 *   (L) the text has no "</think>"; or it opens with "<think>" (after whitespace), has
 *       exactly one "</think>", and no other "<think>" before it.
 *   (L') with fmt.in_think (the prompt opened the block, so the reply starts inside it): the
 *       text has no "<think>" before its first "</think>" and at most one "</think>". Until
 *       that "</think>" everything is reasoning, sent as it comes; without one the reply is
 *       all reasoning, as toolcall_parse_as reads it.
 *
 * For every text in (L) (in (L') with in_think), fed in any pieces, the invariant holds
 * exactly (tests/test_reply_stream.c feeds every prefix and random chunkings). A text outside (L) may
 * still match (the markers arrived before anything was sent); when it does not, the feed
 * that sees the mismatch sets `diverged` and from then on sends everything generated after
 * the last piece sent, verbatim, as content, and no tool calls: the client sees all the
 * model wrote and nothing is contradicted. A server that stores the reply should then store
 * what it streamed, not toolcall_parse's message.
 *
 * Cost: each feed rescans the whole text (a few memmem passes), so a reply fed token by
 * token costs O(n^2) bytes scanned. Measured: a 32 KB reply fed 4 bytes at a time is 8195
 * feeds in 92 ms, 11 us a feed on average, small next to a decode step; an incremental scan
 * is not worth its state. The final feed runs toolcall_parse once. The stream allocates
 * nothing and keeps no pointer into the text between feeds. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "runtime/text/toolcall.h"

typedef struct reply_stream {
    const char *id_prefix; /* borrowed: tool call i gets the id id_prefix + "i" */
    toolcall_format fmt;   /* how the calls are written (its tools borrowed); qwen3's JSON by default */
    size_t fed;            /* length of the text at the last feed (it only grows) */
    size_t r_at, r_len;    /* the reasoning sent so far is text[r_at, r_at + r_len) */
    size_t c_at, c_len;    /* the content sent so far (before a divergence) likewise */
    size_t raw_at;         /* after a divergence: text[.., raw_at) has been sent */
    bool done;             /* the final feed ran */
    bool diverged;         /* read by the caller: the stream left toolcall_parse's message */
} reply_stream;

/* id_prefix must outlive the stream; NULL means "". */
void reply_stream_init(reply_stream *s, const char *id_prefix);
/* The same, for replies whose calls are written in fmt (fmt.tools must outlive the stream):
 * the invariant holds against toolcall_parse_as(text, fmt). */
void reply_stream_init_as(reply_stream *s, const char *id_prefix, toolcall_format fmt);

/* text[0..len) is the WHOLE reply generated so far, without the end token: each call passes
 * the previous text extended (or unchanged). final = generation ended; it flushes everything
 * and ends the stream. Appends zero or more new delta objects to the array `deltas`. A
 * trailing incomplete UTF-8 sequence is held back until more text completes it. -1 with
 * cd_errmsg() on invalid UTF-8, out of memory, a text shorter than the last one, or a feed
 * after the final one; deltas appended before the failure stay valid and accounted for. */
int reply_stream_feed(reply_stream *s, const char *text, size_t len, bool final, json_t *deltas);

void reply_stream_free(reply_stream *s);
