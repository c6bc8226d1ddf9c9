#include "runtime/text/reply_stream.h"

#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/slice.h"
#include "runtime/text/toolcall.h"

#define BAD_TEXT "reply_stream_feed: invalid UTF-8 in the generated text, or out of memory"

/* ---- what the text so far settles ------------------------------------------------------- */

static slice lstrip_ws(slice s) {
    while (s.n && is_ws(s.p[0])) s.p++, s.n--;
    return s;
}
static slice rstrip_ws(slice s) {
    while (s.n && is_ws(s.p[s.n - 1])) s.n--;
    return s;
}

/* Length of the longest suffix of s that is a proper prefix of marker: a marker that may be
 * arriving. (Its earliest possible start, so no occurrence of the marker can begin before
 * s.n minus this.) */
static size_t partial_marker(slice s, slice marker) {
    for (size_t k = marker.n - 1 < s.n ? marker.n - 1 : s.n; k > 0; k--)
        if (memcmp(s.p + s.n - k, marker.p, k) == 0) return k;
    return 0;
}

/* n less a trailing incomplete UTF-8 sequence, whose rest is not generated yet. Invalid bytes
 * stay in, for jansson to reject. */
static size_t utf8_whole(const char *p, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)p[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* The settled reasoning of a think block still open; r is the text after "<think>". The
 * block's end may be arriving, and trailing whitespace is held: rstrip('\n') drops newlines
 * when the block closes, strip() all whitespace when the reply ends inside it. */
static slice open_reasoning(slice r) {
    r = lstrip_nl(r);
    return rstrip_ws((slice){r.p, r.n - partial_marker(r, LIT("</think>"))});
}

/* The settled content of r, the text after the reasoning. With tool calls the content is
 * strip_ws(text before the first block); without, r itself. So: nothing while r starts with
 * whitespace (kept or stripped, unknown until the end), and no further than the first block
 * or one that may be arriving, trailing whitespace held. */
static slice settled_content(slice r) {
    if (r.n == 0 || is_ws(r.p[0])) return (slice){r.p, 0};
    ptrdiff_t open = find_first(r, LIT("<tool_call>"));
    size_t end = open >= 0 ? (size_t)open : r.n - partial_marker(r, LIT("<tool_call>"));
    return rstrip_ws((slice){r.p, end});
}

typedef struct {
    slice reasoning, content;
} settled;

/* What text t settles, read the way toolcall_parse reads it; exact for texts in the layout
 * (L) of reply_stream.h. in_think: the prompt opened the block (toolcall_format.in_think). */
static settled settled_of(slice t, bool in_think) {
    settled g = {{t.p, 0}, {t.p, 0}};
    ptrdiff_t close = find_first(t, LIT("</think>"));
    if (close >= 0) { /* the reasoning is final: cut it as toolcall_parse does */
        slice before = rstrip_nl((slice){t.p, (size_t)close});
        ptrdiff_t open = find_last(before, LIT("<think>"));
        g.reasoning = lstrip_nl(open < 0 ? before : tail(before, (size_t)open + LIT("<think>").n));
        size_t after = (size_t)find_last(t, LIT("</think>")) + LIT("</think>").n;
        g.content = settled_content(lstrip_nl(tail(t, after)));
        return g;
    }
    if (in_think) { /* inside the block the prompt opened, until its "</think>" */
        g.reasoning = open_reasoning(t);
        return g;
    }
    slice s = lstrip_ws(t);
    if (starts_with(s, LIT("<think>"))) g.reasoning = open_reasoning(tail(s, LIT("<think>").n));
    else if (!starts_with(LIT("<think>"), s)) g.content = settled_content(t);
    /* else s is "" or a beginning of "<think>": reasoning or content, not known yet */
    return g;
}

/* ---- sending ---------------------------------------------------------------------------- */

/* Whether the piece settled now continues the n bytes sent from text + at: the same span of
 * the text, longer or not. (Equal bytes elsewhere are not enough: the text was read anew,
 * and the next feed may show it.) */
static bool continues(slice piece, const char *text, size_t at, size_t n) { return n == 0 || piece.p == text + at; }

/* At the final feed: whether piece, from toolcall_parse, begins with the n bytes sent. */
static bool completes(slice piece, const char *sent, size_t n) { return piece.n >= n && memcmp(piece.p, sent, n) == 0; }

static int send_piece(json_t *deltas, const char *key, slice piece) {
    if (piece.n == 0) return 0;
    json_t *d = json_pack("{s:s%}", key, piece.p, piece.n);
    if (!d || json_array_append_new(deltas, d) != 0) return cd_fail(BAD_TEXT);
    return 0;
}

/* Sends what piece (a slice of text) adds to the *n bytes sent, and records it as sent. */
static int extend(json_t *deltas, const char *key, slice piece, const char *text, size_t *at, size_t *n) {
    if (piece.n <= *n) return 0;
    if (send_piece(deltas, key, tail(piece, *n)) != 0) return -1;
    *at = (size_t)(piece.p - text);
    *n = piece.n;
    return 0;
}

/* After a divergence: all that was generated after the last byte sent goes out verbatim as
 * content, so the client still sees everything and nothing sent is contradicted. */
static int feed_raw(reply_stream *s, const char *text, size_t len, bool final, json_t *deltas) {
    size_t end = final ? len : utf8_whole(text, len);
    if (end <= s->raw_at) return 0;
    if (send_piece(deltas, "content", (slice){text + s->raw_at, end - s->raw_at}) != 0) return -1;
    s->raw_at = end;
    return 0;
}

static int diverge(reply_stream *s, const char *text, size_t len, bool final, json_t *deltas) {
    size_t r_end = s->r_at + s->r_len, c_end = s->c_at + s->c_len;
    s->diverged = true;
    s->raw_at = r_end > c_end ? r_end : c_end;
    return feed_raw(s, text, len, final, deltas);
}

static int send_calls(const reply_stream *s, const json_t *calls, json_t *deltas) {
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call) {
        char index[24];
        snprintf(index, sizeof index, "%zu", i);
        json_t *d = json_pack("{s:[{s:I, s:s+, s:s, s:O}]}", "tool_calls", "index", (json_int_t)i, "id", s->id_prefix,
                              index, "type", "function", "function", json_object_get(call, "function"));
        if (!d || json_array_append_new(deltas, d) != 0) return cd_fail(BAD_TEXT);
    }
    return 0;
}

static slice string_of(const json_t *j) {
    return json_is_string(j) ? (slice){json_string_value(j), json_string_length(j)} : (slice){"", 0};
}

static int feed_live(reply_stream *s, const char *text, size_t len, json_t *deltas) {
    settled g = settled_of((slice){text, utf8_whole(text, len)}, s->fmt.in_think);
    if (!continues(g.reasoning, text, s->r_at, s->r_len) || !continues(g.content, text, s->c_at, s->c_len))
        return diverge(s, text, len, false, deltas);
    if (extend(deltas, "reasoning_content", g.reasoning, text, &s->r_at, &s->r_len) != 0) return -1;
    return extend(deltas, "content", g.content, text, &s->c_at, &s->c_len);
}

/* The rest of toolcall_parse's message, when it extends what was sent (always, in (L)). */
static int feed_final(reply_stream *s, const char *text, size_t len, json_t *deltas) {
    json_t *msg = NULL;
    if (toolcall_parse_as(text, len, s->fmt, &msg) != 0) return cd_fail_ctx("reply_stream_feed: ");
    slice r = string_of(json_object_get(msg, "reasoning_content")), c = string_of(json_object_get(msg, "content"));
    /* Equal bytes from another reading pass here; but reasoning that grows once content went
     * out means a "</think>" came after the content (a live feed sees that as the content
     * moving). Send it as a divergence, not as reasoning behind the content. */
    bool late = s->c_len > 0 && r.n > s->r_len;
    int rc;
    if (late || !completes(r, text + s->r_at, s->r_len) || !completes(c, text + s->c_at, s->c_len)) {
        rc = diverge(s, text, len, true, deltas);
    } else {
        rc = send_piece(deltas, "reasoning_content", tail(r, s->r_len));
        if (rc == 0) rc = send_piece(deltas, "content", tail(c, s->c_len));
        if (rc == 0) rc = send_calls(s, json_object_get(msg, "tool_calls"), deltas);
    }
    json_decref(msg);
    return rc;
}

/* ---- the stream ------------------------------------------------------------------------- */

void reply_stream_init(reply_stream *s, const char *id_prefix) {
    reply_stream_init_as(s, id_prefix, (toolcall_format){0});
}

void reply_stream_init_as(reply_stream *s, const char *id_prefix, toolcall_format fmt) {
    *s = (reply_stream){.id_prefix = id_prefix ? id_prefix : "", .fmt = fmt};
}

int reply_stream_feed(reply_stream *s, const char *text, size_t len, bool final, json_t *deltas) {
    if (s->done) return cd_fail("reply_stream_feed: the stream already ended");
    if (len < s->fed) return cd_fail("reply_stream_feed: the text shrank from %zu to %zu bytes", s->fed, len);
    s->fed = len;
    int rc = s->diverged ? feed_raw(s, text, len, final, deltas)
        : final          ? feed_final(s, text, len, deltas)
                         : feed_live(s, text, len, deltas);
    if (rc == 0 && final) s->done = true;
    return rc;
}

void reply_stream_free(reply_stream *s) { *s = (reply_stream){0}; }
