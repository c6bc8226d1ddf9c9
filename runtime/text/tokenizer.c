/* Byte-level BPE (tokenizer.h): loading and validating the vocabulary, encode, decode.
 *
 * Data, all owned by the tokenizer and built once at load:
 *
 *   strs / str_off    every token string, NUL-terminated, back to back; id -> text
 *   str_tab           open-addressing hash table of ids keyed by token text; text -> id
 *   pair_tab          open-addressing table keyed by (left id, right id) -> (merge rank,
 *                     merged id): BPE never touches strings, only ids
 *   byte_id[256]      the token of each single byte (its byte-level character)
 *   pieces / piece_off  what each id decodes to (bytes), precomputed
 *   trie              the added tokens (CONTROL, USER_DEFINED, UNKNOWN types) by bytes,
 *                     for leftmost-longest matching in raw text
 *   re                the Qwen2 pre-tokenizer regex, compiled (and JIT-compiled) once
 *
 * BPE of one word (a regex match), as HF tokenizers does it:
 *
 *   symbols   [h][e][l][l][o]      ids of single bytes, a doubly linked list
 *   heap      candidate pairs (rank, left position), smallest rank first, then leftmost
 *   pop (rank r, pos 2): [h][e][ll][o]   the left symbol takes the merged id, the right
 *                                        one leaves the list; the two new neighbour pairs
 *                                        (e,ll) and (ll,o) go on the heap
 *   a popped entry whose symbols changed since it was pushed is stale and skipped
 *
 * Each merge pushes at most two entries, so a word of n bytes costs O(n log n). Words of
 * BPE_LONG bytes or more (runs of spaces, newlines, letters) use buckets of equal rank
 * instead of the heap, with the same result (bpe_long below): linear on runs of one
 * character, where a heap of millions of entries spends its time in cache misses. */
#include "runtime/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "runtime/base/error.h"
#include "runtime/text/unicode_bytes.h"

#define TOK_MAX_TOKENS (1 << 28)

/* Qwen2's pre-tokenizer (tokenizer.json pre_tokenizer.Split.pattern):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*
 *   |\s*[\r\n]+|\s+(?!\S)|\s+
 * with \s spelled out as Unicode White_Space, which is what \s means in Oniguruma (HF
 * tokenizers' regex engine) and llama.cpp. PCRE2's own \s in UCP mode leaves out U+0085. */
#define WS "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char qwen2_pattern[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
                                    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
                                    "|\\p{N}"
                                    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
                                    "|[" WS "]*[\\r\\n]+"
                                    "|[" WS "]+(?![^" WS "])"
                                    "|[" WS "]+";

typedef struct tok_sv {
    const char *p;
    size_t n;
} tok_sv;

typedef struct pair_slot {
    uint64_t key; /* left id << 32 | right id; PAIR_EMPTY when free */
    int32_t rank;
    int32_t id;
} pair_slot;
#define PAIR_EMPTY UINT64_MAX

typedef struct trie_node {
    int32_t child, sibling; /* -1 when none */
    int32_t token;          /* id ending here, or -1 */
    unsigned char byte;
} trie_node;

struct tokenizer {
    int32_t n_vocab;
    char *strs;
    size_t *str_off; /* n_vocab + 1; token i spans str_off[i] .. str_off[i+1]-1 (NUL) */
    uint8_t *types;
    char *pieces;
    size_t *piece_off; /* n_vocab + 1 */
    size_t piece_max;
    int32_t *str_tab;
    size_t str_mask;
    pair_slot *pair_tab;
    size_t pair_mask;
    int32_t n_ranks; /* merges: ranks are 0 .. n_ranks-1 */
    int32_t byte_id[256];
    uint16_t byte_cp[256];
    int16_t cp_byte[UB_CP_LIMIT];
    trie_node *trie; /* node 0 is the root */
    size_t n_trie;
    bool added_first[256]; /* some added token starts with this byte */
    pcre2_code *re;
    int32_t eos, bos, pad;
    int32_t eog[16];
    int n_eog;
};

/* ---- small helpers ---- */

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static size_t pair_hash(uint64_t k) {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ (k >> 29));
}

static size_t tok_len(const tokenizer *t, int32_t id) { return t->str_off[id + 1] - t->str_off[id] - 1; }

static int32_t find_sv(const tokenizer *t, const char *p, size_t n) {
    size_t h = (size_t)XXH3_64bits(p, n) & t->str_mask;
    for (;; h = (h + 1) & t->str_mask) {
        int32_t id = t->str_tab[h];
        if (id < 0) return -1;
        if (tok_len(t, id) == n && memcmp(t->strs + t->str_off[id], p, n) == 0) return id;
    }
}

static const pair_slot *find_pair(const tokenizer *t, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    for (size_t h = pair_hash(k) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
        const pair_slot *s = &t->pair_tab[h];
        if (s->key == k) return s;
        if (s->key == PAIR_EMPTY) return NULL;
    }
}

/* At most 40 bytes of a token for error messages (four rotating buffers per thread, so one
 * message can show several). */
static const char *show(const char *p, size_t n) {
    static _Thread_local char bufs[4][64];
    static _Thread_local unsigned next;
    char *buf = bufs[next++ & 3];
    size_t k = n < 40 ? n : 40;
    snprintf(buf, sizeof bufs[0], "%.*s%s", (int)k, p, n > k ? "..." : "");
    return buf;
}

/* ---- loading ---- */

static int build_strings(tokenizer *t, const tok_sv *toks, const int32_t *types, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (toks[i].n && memchr(toks[i].p, 0, toks[i].n)) return cd_fail("token %zu contains a NUL byte", i);
        if (types[i] < TOK_TYPE_UNDEFINED || types[i] > TOK_TYPE_BYTE)
            return cd_fail("token %zu (\"%s\") has type %d, which is not a token type (0..6)", i,
                           show(toks[i].p, toks[i].n), types[i]);
        if (toks[i].n > SIZE_MAX / 2 - total) return cd_fail("token strings too large");
        total += toks[i].n + 1;
    }
    t->strs = malloc(total);
    t->str_off = malloc((n + 1) * sizeof *t->str_off);
    t->types = malloc(n);
    if (!t->strs || !t->str_off || !t->types) return cd_fail("out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        t->str_off[i] = o;
        if (toks[i].n) memcpy(t->strs + o, toks[i].p, toks[i].n);
        o += toks[i].n;
        t->strs[o++] = 0;
        t->types[i] = (uint8_t)types[i];
    }
    t->str_off[n] = o;

    size_t cap = pow2_at_least(2 * n);
    t->str_mask = cap - 1;
    t->str_tab = malloc(cap * sizeof *t->str_tab);
    if (!t->str_tab) return cd_fail("out of memory");
    memset(t->str_tab, 0xFF, cap * sizeof *t->str_tab);
    for (size_t i = 0; i < n; i++) {
        const char *p = t->strs + t->str_off[i];
        size_t len = tok_len(t, (int32_t)i);
        size_t h = (size_t)XXH3_64bits(p, len) & t->str_mask;
        for (;; h = (h + 1) & t->str_mask) {
            int32_t id = t->str_tab[h];
            if (id < 0) {
                t->str_tab[h] = (int32_t)i;
                break;
            }
            /* A repeated string keeps its first id (a vocabulary is a map in HF). */
            if (tok_len(t, id) == len && memcmp(t->strs + t->str_off[id], p, len) == 0) break;
        }
    }
    return 0;
}

/* Whether token id decodes as byte-level text (build_pieces): what BPE may give. */
static bool byte_level(const tokenizer *t, int32_t id) {
    return t->types[id] == TOK_TYPE_NORMAL || t->types[id] == TOK_TYPE_BYTE;
}

static int build_bytes(tokenizer *t) {
    ub_bytelevel_tables(t->byte_cp, t->cp_byte);
    for (int b = 0; b < 256; b++) {
        char u[4];
        int k = ub_utf8_put(t->byte_cp[b], u);
        t->byte_id[b] = find_sv(t, u, (size_t)k);
        if (t->byte_id[b] < 0)
            return cd_fail("the vocabulary has no token for byte 0x%02X (\"%.*s\"), which byte-level BPE needs", b, k,
                           u);
        if (!byte_level(t, t->byte_id[b]))
            return cd_fail("the token for byte 0x%02X (id %d) has type %d: byte-level BPE needs a normal or byte "
                           "token, which decodes to its byte",
                           b, t->byte_id[b], t->types[t->byte_id[b]]);
    }
    return 0;
}

static int build_merges(tokenizer *t, const tok_sv *merges, size_t n_merges) {
    if (n_merges > INT32_MAX) return cd_fail("too many merges (%zu)", n_merges);
    t->n_ranks = (int32_t)n_merges;
    size_t cap = pow2_at_least(2 * n_merges);
    t->pair_mask = cap - 1;
    t->pair_tab = malloc(cap * sizeof *t->pair_tab);
    if (!t->pair_tab) return cd_fail("out of memory");
    for (size_t i = 0; i < cap; i++) t->pair_tab[i].key = PAIR_EMPTY;
    char *cat = NULL;
    size_t cat_cap = 0;
    int rc = 0;
    for (size_t r = 0; r < n_merges && !rc; r++) {
        const char *p = merges[r].p;
        size_t n = merges[r].n;
        /* "left right": split at the first space after the first byte, as llama.cpp does. */
        const char *sp = n > 1 ? memchr(p + 1, ' ', n - 1) : NULL;
        if (!sp || sp + 1 == p + n) {
            rc = cd_fail("merge %zu (\"%s\") is not two tokens separated by a space", r, show(p, n));
            break;
        }
        size_t nl = (size_t)(sp - p), nr = n - nl - 1;
        int32_t a = find_sv(t, p, nl), b = find_sv(t, sp + 1, nr);
        if (a < 0 || b < 0) {
            rc = cd_fail("merge %zu (\"%s\"): \"%s\" is not in the vocabulary", r, show(p, n),
                         a < 0 ? show(p, nl) : show(sp + 1, nr));
            break;
        }
        if (nl + nr > cat_cap) {
            cat_cap = 2 * (nl + nr);
            char *c = realloc(cat, cat_cap);
            if (!c) {
                rc = cd_fail("out of memory");
                break;
            }
            cat = c;
        }
        memcpy(cat, p, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t ab = find_sv(t, cat, nl + nr);
        if (ab < 0) {
            rc = cd_fail("merge %zu (\"%s\"): the merged token \"%s\" is not in the vocabulary", r, show(p, n),
                         show(cat, nl + nr));
            break;
        }
        /* a merge into a token that does not decode as byte-level text (control, user-defined,
         * unused: only a broken file has one) is left out, so that every token the encoder
         * gives decodes back to the text it came from */
        if (!byte_level(t, ab)) continue;
        uint64_t k = pair_key(a, b);
        for (size_t h = pair_hash(k) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
            pair_slot *s = &t->pair_tab[h];
            if (s->key == k) break; /* a repeated merge keeps its first (best) rank */
            if (s->key == PAIR_EMPTY) {
                *s = (pair_slot){.key = k, .rank = (int32_t)r, .id = ab};
                break;
            }
        }
    }
    free(cat);
    return rc;
}

/* What each id decodes to. NORMAL and BYTE tokens are byte-level text mapped back to bytes
 * (a token with a character outside the byte-level alphabet is taken as raw text, as HF's
 * ByteLevel decoder does); CONTROL, USER_DEFINED and UNKNOWN tokens are their text; UNUSED
 * and UNDEFINED tokens decode to nothing (llama.cpp). A decoded piece is never longer than
 * the token string, so the strings' size bounds the buffer. */
static int build_pieces(tokenizer *t) {
    size_t n = (size_t)t->n_vocab;
    t->pieces = malloc(t->str_off[n] + 1);
    t->piece_off = malloc((n + 1) * sizeof *t->piece_off);
    if (!t->pieces || !t->piece_off) return cd_fail("out of memory");
    size_t o = 0;
    t->piece_max = 0;
    for (size_t i = 0; i < n; i++) {
        t->piece_off[i] = o;
        const unsigned char *s = (const unsigned char *)t->strs + t->str_off[i];
        size_t len = tok_len(t, (int32_t)i);
        switch (t->types[i]) {
        case TOK_TYPE_NORMAL:
        case TOK_TYPE_BYTE: {
            size_t j = 0, start = o;
            while (j < len) {
                uint32_t cp;
                int k = ub_utf8_next(s + j, len - j, &cp, NULL);
                if (k < 0 || cp >= UB_CP_LIMIT || t->cp_byte[cp] < 0) break;
                t->pieces[o++] = (char)t->cp_byte[cp];
                j += (size_t)k;
            }
            if (j < len) {
                memcpy(t->pieces + start, s, len);
                o = start + len;
            }
            break;
        }
        case TOK_TYPE_CONTROL:
        case TOK_TYPE_USER_DEFINED:
        case TOK_TYPE_UNKNOWN:
            memcpy(t->pieces + o, s, len);
            o += len;
            break;
        default: break;
        }
        if (o - t->piece_off[i] > t->piece_max) t->piece_max = o - t->piece_off[i];
    }
    t->piece_off[n] = o;
    return 0;
}

static bool is_added(int type) {
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNKNOWN;
}

static int build_trie(tokenizer *t) {
    size_t n = (size_t)t->n_vocab, nodes = 1;
    for (size_t i = 0; i < n; i++)
        if (is_added(t->types[i])) nodes += tok_len(t, (int32_t)i);
    t->trie = malloc(nodes * sizeof *t->trie);
    if (!t->trie) return cd_fail("out of memory");
    t->trie[0] = (trie_node){.child = -1, .sibling = -1, .token = -1};
    t->n_trie = 1;
    for (size_t i = 0; i < n; i++) {
        size_t len = tok_len(t, (int32_t)i);
        if (!is_added(t->types[i]) || len == 0) continue;
        const unsigned char *s = (const unsigned char *)t->strs + t->str_off[i];
        int32_t node = 0;
        for (size_t j = 0; j < len; j++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != s[j]) c = t->trie[c].sibling;
            if (c < 0) {
                c = (int32_t)t->n_trie++;
                t->trie[c] = (trie_node){.child = -1, .sibling = t->trie[node].child, .token = -1, .byte = s[j]};
                t->trie[node].child = c;
            }
            node = c;
        }
        if (t->trie[node].token < 0) t->trie[node].token = (int32_t)i;
        t->added_first[s[0]] = true;
    }
    return 0;
}

static int build_regex(tokenizer *t) {
    int err;
    PCRE2_SIZE off;
    t->re = pcre2_compile((PCRE2_SPTR)qwen2_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return cd_fail("pre-tokenizer regex: %s at offset %zu", (const char *)msg, (size_t)off);
    }
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter runs */
    return 0;
}

static int check_id(const tokenizer *t, const char *what, int32_t id) {
    if (id >= t->n_vocab || id < -1)
        return cd_fail("%s %d is out of range (vocabulary of %d tokens)", what, id, t->n_vocab);
    return 0;
}

static void add_eog(tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

static int load_common(tokenizer **out, const tok_sv *toks, const int32_t *types, size_t n, const tok_sv *merges,
                       size_t n_merges, int32_t eos, int32_t bos, int32_t pad) {
    *out = NULL;
    if (n == 0) return cd_fail("the vocabulary is empty");
    if (n > TOK_MAX_TOKENS) return cd_fail("the vocabulary has %zu tokens, more than %d", n, TOK_MAX_TOKENS);
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return cd_fail("out of memory");
    t->n_vocab = (int32_t)n;
    t->eos = eos, t->bos = bos, t->pad = pad;
    if (check_id(t, "eos token id", eos) || check_id(t, "bos token id", bos) || check_id(t, "padding token id", pad) ||
        build_strings(t, toks, types, n) || build_bytes(t) || build_merges(t, merges, n_merges) || build_pieces(t) ||
        build_trie(t) || build_regex(t)) {
        tok_free(t);
        return -1;
    }
    /* llama.cpp's end-of-generation set, the entries that apply to this vocabulary family. */
    add_eog(t, eos);
    static const char *eog_text[] = {"<|im_end|>",   "<|endoftext|>",   "<|eot_id|>",  "<|end|>",
                                     "<|eom_id|>",   "<|end_of_text|>", "<|fim_pad|>", "<|repo_name|>",
                                     "<|fim_repo|>", "<|file_sep|>"};
    for (size_t i = 0; i < sizeof eog_text / sizeof eog_text[0]; i++) add_eog(t, tok_find(t, eog_text[i]));
    *out = t;
    return 0;
}

int tok_load_vocab(tokenizer **out, const tok_vocab *v) {
    if (!out) return cd_fail("tok_load_vocab: no output");
    *out = NULL;
    if (!v || (v->n_tokens && (!v->tokens || !v->types)) || (v->n_merges && !v->merges))
        return cd_fail("tok_load_vocab: incomplete vocabulary");
    if (v->n_tokens > TOK_MAX_TOKENS)
        return cd_fail("the vocabulary has %zu tokens, more than %d", v->n_tokens, TOK_MAX_TOKENS);
    tok_sv *toks = malloc((v->n_tokens + 1) * sizeof *toks);
    tok_sv *merges = malloc((v->n_merges + 1) * sizeof *merges);
    int rc = -1;
    if (!toks || !merges) {
        cd_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (!v->tokens[i]) {
            cd_fail("token %zu is missing", i);
            goto done;
        }
        toks[i] = (tok_sv){v->tokens[i], strlen(v->tokens[i])};
    }
    for (size_t i = 0; i < v->n_merges; i++) {
        if (!v->merges[i]) {
            cd_fail("merge %zu is missing", i);
            goto done;
        }
        merges[i] = (tok_sv){v->merges[i], strlen(v->merges[i])};
    }
    rc = load_common(out, toks, v->types, v->n_tokens, merges, v->n_merges, v->eos_id, v->bos_id, v->pad_id);
done:
    free(toks);
    free(merges);
    return rc;
}

/* -- GGUF metadata. Reads the gguf_file structure directly (the reader has validated it). */

static const gguf_value *gguf_kv_get(const gguf_file *f, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key.len == n && memcmp(f->kv[i].key.ptr, key, n) == 0) return &f->kv[i].val;
    return NULL;
}

static int gguf_want_str(const gguf_file *f, const char *key, tok_sv *out) {
    const gguf_value *v = gguf_kv_get(f, key);
    if (!v) return cd_fail("%s is missing", key);
    if (v->type != GGUF_VT_STRING) return cd_fail("%s is not a string", key);
    *out = (tok_sv){v->str.ptr, (size_t)v->str.len};
    return 0;
}

static int gguf_want_str_arr(const gguf_file *f, const char *key, const gguf_value **out) {
    const gguf_value *v = gguf_kv_get(f, key);
    if (!v) return cd_fail("%s is missing", key);
    if (v->type != GGUF_VT_ARRAY || v->arr.type != GGUF_VT_STRING) return cd_fail("%s is not an array of strings", key);
    if (v->arr.n > TOK_MAX_TOKENS) return cd_fail("%s has %llu entries, too many", key, (unsigned long long)v->arr.n);
    if (v->arr.n && !v->arr.items) return cd_fail("%s has no parsed items", key);
    for (uint64_t i = 0; i < v->arr.n; i++)
        if (v->arr.items[i].type != GGUF_VT_STRING || (v->arr.items[i].str.len && !v->arr.items[i].str.ptr))
            return cd_fail("%s[%llu] is not a string", key, (unsigned long long)i);
    *out = v;
    return 0;
}

static bool vt_signed(enum gguf_vtype t) {
    return t == GGUF_VT_I8 || t == GGUF_VT_I16 || t == GGUF_VT_I32 || t == GGUF_VT_I64;
}

static bool vt_unsigned(enum gguf_vtype t) {
    return t == GGUF_VT_U8 || t == GGUF_VT_U16 || t == GGUF_VT_U32 || t == GGUF_VT_U64;
}

static size_t vt_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_VT_U8:
    case GGUF_VT_I8: return 1;
    case GGUF_VT_U16:
    case GGUF_VT_I16: return 2;
    case GGUF_VT_U32:
    case GGUF_VT_I32: return 4;
    case GGUF_VT_U64:
    case GGUF_VT_I64: return 8;
    default: return 0;
    }
}

/* Element i of a packed little-endian integer array, as int64 (u64 above INT64_MAX saturates). */
static int64_t raw_int(const uint8_t *raw, enum gguf_vtype t, uint64_t i) {
    size_t sz = vt_size(t);
    const uint8_t *p = raw + i * sz;
    uint64_t u = 0;
    for (size_t k = 0; k < sz; k++) u |= (uint64_t)p[k] << (8 * k);
    if (vt_signed(t) && sz < 8 && (u >> (8 * sz - 1)) & 1) u |= ~0ull << (8 * sz); /* sign-extend */
    if (t == GGUF_VT_U64 && u > INT64_MAX) return INT64_MAX;
    return (int64_t)u;
}

/* An optional token id: -1 when absent; an error when present but not a valid id. */
static int gguf_opt_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *out) {
    *out = -1;
    const gguf_value *v = gguf_kv_get(f, key);
    if (!v) return 0;
    int64_t x;
    if (vt_unsigned(v->type)) x = v->u64 > INT64_MAX ? INT64_MAX : (int64_t)v->u64;
    else if (vt_signed(v->type)) x = v->i64;
    else return cd_fail("%s has value type %d, not an integer", key, (int)v->type);
    if (x < 0 || x >= n_vocab)
        return cd_fail("%s = %lld is out of range (vocabulary of %d tokens)", key, (long long)x, n_vocab);
    *out = (int32_t)x;
    return 0;
}

int tok_load_gguf(tokenizer **out, const gguf_file *f) {
    if (!out) return cd_fail("tok_load_gguf: no output");
    *out = NULL;
    if (!f) return cd_fail("tok_load_gguf: no file");
    tok_sv model, pre;
    const gguf_value *tokens, *types_v, *merges_v;
    if (gguf_want_str(f, "tokenizer.ggml.model", &model)) return -1;
    if (model.n != 4 || memcmp(model.p, "gpt2", 4) != 0)
        return cd_fail("tokenizer.ggml.model is \"%s\"; only \"gpt2\" (byte-level BPE) is supported",
                       show(model.p, model.n));
    if (gguf_want_str(f, "tokenizer.ggml.pre", &pre)) return -1;
    if (pre.n != 5 || memcmp(pre.p, "qwen2", 5) != 0)
        return cd_fail("tokenizer.ggml.pre is \"%s\"; only \"qwen2\" is supported", show(pre.p, pre.n));
    if (gguf_want_str_arr(f, "tokenizer.ggml.tokens", &tokens) ||
        gguf_want_str_arr(f, "tokenizer.ggml.merges", &merges_v))
        return -1;
    types_v = gguf_kv_get(f, "tokenizer.ggml.token_type");
    if (!types_v) return cd_fail("tokenizer.ggml.token_type is missing");
    if (types_v->type != GGUF_VT_ARRAY || !vt_size(types_v->arr.type) || (types_v->arr.n && !types_v->arr.raw))
        return cd_fail("tokenizer.ggml.token_type is not an array of integers");
    size_t n = (size_t)tokens->arr.n;
    if (types_v->arr.n != tokens->arr.n)
        return cd_fail("tokenizer.ggml.token_type has %llu entries but tokenizer.ggml.tokens has %zu",
                       (unsigned long long)types_v->arr.n, n);
    if (n == 0) return cd_fail("tokenizer.ggml.tokens is empty");

    int32_t eos, bos, pad;
    if (gguf_opt_id(f, "tokenizer.ggml.eos_token_id", (int32_t)n, &eos) ||
        gguf_opt_id(f, "tokenizer.ggml.bos_token_id", (int32_t)n, &bos) ||
        gguf_opt_id(f, "tokenizer.ggml.padding_token_id", (int32_t)n, &pad))
        return -1;

    size_t nm = (size_t)merges_v->arr.n;
    tok_sv *toks = malloc(n * sizeof *toks), *merges = malloc((nm + 1) * sizeof *merges);
    int32_t *types = malloc(n * sizeof *types);
    int rc = -1;
    if (!toks || !merges || !types) {
        cd_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        toks[i] = (tok_sv){tokens->arr.items[i].str.ptr, (size_t)tokens->arr.items[i].str.len};
        int64_t ty = raw_int(types_v->arr.raw, types_v->arr.type, i);
        types[i] = ty < INT32_MIN ? INT32_MIN : ty > INT32_MAX ? INT32_MAX : (int32_t)ty;
    }
    for (size_t i = 0; i < nm; i++)
        merges[i] = (tok_sv){merges_v->arr.items[i].str.ptr, (size_t)merges_v->arr.items[i].str.len};
    rc = load_common(out, toks, types, n, merges, nm, eos, bos, pad);
    if (rc) cd_fail_ctx("tokenizer: ");
done:
    free(toks);
    free(merges);
    free(types);
    return rc;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->strs);
    free(t->str_off);
    free(t->types);
    free(t->pieces);
    free(t->piece_off);
    free(t->str_tab);
    free(t->pair_tab);
    free(t->trie);
    pcre2_code_free(t->re);
    free(t);
}

/* ---- queries ---- */

int32_t tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_pad(const tokenizer *t) { return t->pad; }
size_t tok_piece_max(const tokenizer *t) { return t->piece_max; }

int32_t tok_find(const tokenizer *t, const char *token) { return token ? find_sv(t, token, strlen(token)) : -1; }

bool tok_is_eog(const tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

const char *tok_text(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->strs + t->str_off[id] : NULL;
}

enum tok_type tok_token_type(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? (enum tok_type)t->types[id] : TOK_TYPE_UNDEFINED;
}

/* ---- encode ---- */

/* A candidate merge: key = rank << 32 | left position, so one comparison orders by rank and
 * then leftmost (HF's tie-break). The ids it was pushed for detect stale entries. */
typedef struct heap_entry {
    uint64_t key;
    int32_t left, right;
} heap_entry;

typedef struct bucket_ent {
    int32_t pos, left, right; /* left position and the ids it was pushed for */
    int32_t next;             /* next entry in the same bucket, or in the free list */
} bucket_ent;

typedef struct enc {
    const tokenizer *t;
    int32_t *ids;
    size_t n_ids, cap_ids;
    pcre2_match_data *md;
    /* BPE scratch, grown to the longest word seen */
    int32_t *sym, *prev, *next;
    heap_entry *heap; /* a 4-ary min-heap: shallower than binary, children share a cache line */
    size_t n_heap, cap_word;
    /* long words (bpe_long): one bucket of candidate merges per rank */
    int32_t *bucket; /* n_ranks list heads into ent, -1 when empty */
    bucket_ent *ent; /* entries; free ones chained through .next from ent_free */
    size_t n_ent, cap_ent;
    int32_t ent_free;
    int32_t *ranks; /* binary min-heap of the ranks whose bucket is non-empty */
    size_t n_ranks, cap_ranks;
    uint64_t *batch; /* one bucket's entries as pos << 32 | entry, to sort */
    size_t cap_batch;
} enc;

static int push_id(enc *e, int32_t id) {
    if (e->n_ids == e->cap_ids) {
        size_t cap = e->cap_ids ? 2 * e->cap_ids : 64;
        int32_t *p = realloc(e->ids, cap * sizeof *p);
        if (!p) return cd_fail("out of memory");
        e->ids = p, e->cap_ids = cap;
    }
    e->ids[e->n_ids++] = id;
    return 0;
}

static void heap_push(enc *e, heap_entry x) {
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (e->heap[p].key <= x.key) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = x;
}

static heap_entry heap_pop(enc *e) {
    heap_entry top = e->heap[0], x = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 4 * i + 1, best = c;
        if (c >= n) break;
        size_t end = c + 4 < n ? c + 4 : n;
        for (size_t k = c + 1; k < end; k++)
            if (e->heap[k].key < e->heap[best].key) best = k;
        if (e->heap[best].key >= x.key) break;
        e->heap[i] = e->heap[best];
        i = best;
    }
    if (n) e->heap[i] = x;
    return top;
}

static void try_pair(enc *e, int32_t l) {
    int32_t r = e->next[l];
    if (r < 0) return;
    const pair_slot *p = find_pair(e->t, e->sym[l], e->sym[r]);
    if (p)
        heap_push(e,
                  (heap_entry){
                      .key = (uint64_t)(uint32_t)p->rank << 32 | (uint32_t)l, .left = e->sym[l], .right = e->sym[r]});
}

/* ---- long words: the same merges in the same order, by buckets of equal rank ----
 *
 * On a word of a million spaces the heap holds millions of entries and every pop walks
 * down through cold cache lines. Here each rank has a bucket of candidate pairs; the
 * lowest non-empty rank's bucket is taken whole, sorted by position and merged left to
 * right, which is the heap's order exactly as long as no merge creates a pair of that rank
 * or lower. BPE-trained merge lists never do (a merge using a token comes after the merge
 * that made it); for one that does, the rest of the bucket goes back and the rank heap
 * picks again, so the result is the same whatever the list. Runs of one character come
 * out of each bucket already sorted, making those words linear. */

#define BPE_LONG 64 /* words at least this many bytes take the bucket path */

static int rank_push(enc *e, int32_t r) {
    if (e->n_ranks == e->cap_ranks) {
        size_t cap = e->cap_ranks ? 2 * e->cap_ranks : 256;
        int32_t *p = realloc(e->ranks, cap * sizeof *p);
        if (!p) return cd_fail("out of memory");
        e->ranks = p, e->cap_ranks = cap;
    }
    size_t i = e->n_ranks++;
    while (i > 0 && e->ranks[(i - 1) / 2] > r) {
        e->ranks[i] = e->ranks[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->ranks[i] = r;
    return 0;
}

static int32_t rank_pop(enc *e) {
    int32_t top = e->ranks[0], x = e->ranks[--e->n_ranks];
    size_t i = 0, n = e->n_ranks;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && e->ranks[c + 1] < e->ranks[c]) c++;
        if (e->ranks[c] >= x) break;
        e->ranks[i] = e->ranks[c];
        i = c;
    }
    if (n) e->ranks[i] = x;
    return top;
}

static int bucket_link(enc *e, int32_t rank, int32_t k) {
    if (e->bucket[rank] < 0 && rank_push(e, rank)) return -1;
    e->ent[k].next = e->bucket[rank];
    e->bucket[rank] = k;
    return 0;
}

/* Adds the pair starting at symbol l, if it merges; *lowest gets the lowest rank added. */
static int bucket_add(enc *e, int32_t l, int32_t *lowest) {
    int32_t r = e->next[l];
    if (r < 0) return 0;
    const pair_slot *p = find_pair(e->t, e->sym[l], e->sym[r]);
    if (!p) return 0;
    int32_t k = e->ent_free;
    if (k >= 0) e->ent_free = e->ent[k].next;
    else {
        if (e->n_ent == e->cap_ent) {
            size_t cap = e->cap_ent ? 2 * e->cap_ent : 1024;
            bucket_ent *q = realloc(e->ent, cap * sizeof *q);
            if (!q) return cd_fail("out of memory");
            e->ent = q, e->cap_ent = cap;
        }
        k = (int32_t)e->n_ent++;
    }
    e->ent[k] = (bucket_ent){.pos = l, .left = e->sym[l], .right = e->sym[r]};
    if (p->rank < *lowest) *lowest = p->rank;
    return bucket_link(e, p->rank, k);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int bpe_long(enc *e, size_t n) {
    const tokenizer *t = e->t;
    if (t->n_ranks == 0) return 0;
    if (!e->bucket) {
        if (!(e->bucket = malloc((size_t)t->n_ranks * sizeof *e->bucket))) return cd_fail("out of memory");
        memset(e->bucket, 0xFF, (size_t)t->n_ranks * sizeof *e->bucket);
    }
    e->n_ent = 0, e->ent_free = -1, e->n_ranks = 0;
    int32_t lowest = INT32_MAX;
    for (size_t i = 0; i + 1 < n; i++)
        if (bucket_add(e, (int32_t)i, &lowest)) return -1;
    while (e->n_ranks) {
        int32_t rank = rank_pop(e);
        size_t nb = 0;
        for (int32_t k = e->bucket[rank]; k >= 0; k = e->ent[k].next) {
            if (nb == e->cap_batch) {
                size_t cap = e->cap_batch ? 2 * e->cap_batch : 1024;
                uint64_t *q = realloc(e->batch, cap * sizeof *q);
                if (!q) return cd_fail("out of memory");
                e->batch = q, e->cap_batch = cap;
            }
            e->batch[nb++] = (uint64_t)(uint32_t)e->ent[k].pos << 32 | (uint32_t)k;
        }
        e->bucket[rank] = -1;
        /* The list is newest first; pushes within one pass come in position order. */
        bool sorted = true;
        for (size_t i = 0; i < nb / 2; i++) {
            uint64_t x = e->batch[i];
            e->batch[i] = e->batch[nb - 1 - i];
            e->batch[nb - 1 - i] = x;
        }
        for (size_t i = 1; i < nb && sorted; i++) sorted = e->batch[i - 1] < e->batch[i];
        if (!sorted) qsort(e->batch, nb, sizeof *e->batch, cmp_u64);
        for (size_t b = 0; b < nb; b++) {
            int32_t k = (int32_t)(uint32_t)e->batch[b];
            bucket_ent x = e->ent[k];
            e->ent[k].next = e->ent_free;
            e->ent_free = k;
            int32_t l = x.pos, r = e->next[l];
            if (e->sym[l] != x.left || r < 0 || e->sym[r] != x.right) continue; /* stale */
            e->sym[l] = find_pair(t, x.left, x.right)->id;
            e->sym[r] = -1;
            e->next[l] = e->next[r];
            if (e->next[r] >= 0) e->prev[e->next[r]] = l;
            lowest = INT32_MAX;
            if ((e->prev[l] >= 0 && bucket_add(e, e->prev[l], &lowest)) || bucket_add(e, l, &lowest)) return -1;
            if (lowest <= rank) { /* not BPE-trained order: requeue the rest, pick again */
                for (size_t q = b + 1; q < nb; q++)
                    if (bucket_link(e, rank, (int32_t)(uint32_t)e->batch[q])) return -1;
                break;
            }
        }
    }
    return 0;
}

static int bpe_word(enc *e, const unsigned char *w, size_t n) {
    const tokenizer *t = e->t;
    if (n == 1) return push_id(e, t->byte_id[w[0]]);
    if (n > INT32_MAX / 4) return cd_fail("a pre-tokenized word of %zu bytes is too long", n);
    if (n > e->cap_word) {
        size_t cap = n < BPE_LONG ? BPE_LONG : n;
        free(e->sym), free(e->prev), free(e->next);
        e->sym = malloc(cap * sizeof *e->sym);
        e->prev = malloc(cap * sizeof *e->prev);
        e->next = malloc(cap * sizeof *e->next);
        e->cap_word = cap;
        if (!e->heap) e->heap = malloc(3 * BPE_LONG * sizeof *e->heap); /* n-1 pairs + 2 per merge */
        if (!e->sym || !e->prev || !e->next || !e->heap) {
            e->cap_word = 0;
            return cd_fail("out of memory");
        }
    }
    for (size_t i = 0; i < n; i++) {
        e->sym[i] = t->byte_id[w[i]];
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    if (n >= BPE_LONG) {
        if (bpe_long(e, n)) return -1;
    } else {
        e->n_heap = 0;
        for (size_t i = 0; i + 1 < n; i++) try_pair(e, (int32_t)i);
        while (e->n_heap) {
            heap_entry m = heap_pop(e);
            int32_t l = (int32_t)(uint32_t)m.key, r = e->next[l];
            if (e->sym[l] != m.left || r < 0 || e->sym[r] != m.right) continue; /* stale */
            e->sym[l] = find_pair(t, m.left, m.right)->id;
            e->sym[r] = -1;
            e->next[l] = e->next[r];
            if (e->next[r] >= 0) e->prev[e->next[r]] = l;
            if (e->prev[l] >= 0) try_pair(e, e->prev[l]);
            try_pair(e, l);
        }
    }
    for (int32_t i = 0; i >= 0; i = e->next[i])
        if (push_id(e, e->sym[i])) return -1;
    return 0;
}

/* One run of text between added tokens: NFC, then the regex, then BPE on every match. */
static int encode_text(enc *e, const unsigned char *s, size_t n) {
    bool ascii = true;
    for (size_t i = 0; i < n && ascii; i++) ascii = s[i] < 0x80;
    utf8proc_uint8_t *nfc = NULL;
    if (!ascii) {
        utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) return cd_fail("NFC normalization: %s", utf8proc_errmsg(m));
        s = nfc, n = (size_t)m;
    }
    int rc = 0;
    size_t off = 0;
    while (off < n && !rc) {
        int m = pcre2_match(e->t->re, s, n, off, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT)
            m = pcre2_match(e->t->re, s, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) {
            rc = bpe_word(e, s + off, n - off); /* unmatched text is kept as its own piece */
            break;
        }
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = cd_fail("pre-tokenizer regex: %s", (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t a = ov[0], b = ov[1];
        if (a > off) rc = bpe_word(e, s + off, a - off);
        if (b == a) { /* cannot happen with this pattern; step over one character */
            uint32_t cp;
            int k = ub_utf8_next(s + a, n - a, &cp, NULL);
            b = a + (size_t)(k < 0 ? -k : k);
        }
        if (!rc) rc = bpe_word(e, s + a, b - a);
        off = b;
    }
    free(nfc);
    return rc;
}

/* The longest added token allowed here that starts at s, or 0. */
static size_t match_added(const tokenizer *t, const unsigned char *s, size_t n, bool parse_special, int32_t *id) {
    size_t best = 0;
    int32_t node = 0;
    for (size_t j = 0; j < n; j++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != s[j]) c = t->trie[c].sibling;
        if (c < 0) break;
        node = c;
        int32_t tk = t->trie[node].token;
        if (tk >= 0 && (parse_special || t->types[tk] == TOK_TYPE_USER_DEFINED)) {
            best = j + 1;
            *id = tk;
        }
    }
    return best;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids, size_t *n_ids) {
    if (!ids || !n_ids) return cd_fail("tok_encode: no output");
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return cd_fail("tok_encode: no tokenizer or text");
    const unsigned char *s = (const unsigned char *)text;
    char *clean = NULL;
    if (ub_utf8_valid_prefix(s, len) != len) {
        size_t n2;
        if (!(clean = ub_utf8_sanitize(s, len, &n2))) return cd_fail("out of memory");
        s = (const unsigned char *)clean, len = n2;
    }
    enc e = {.t = t};
    int rc = 0;
    if (!(e.md = pcre2_match_data_create_from_pattern(t->re, NULL))) rc = cd_fail("out of memory");
    size_t start = 0, i = 0;
    while (!rc && i < len) {
        int32_t id = -1;
        size_t m = t->added_first[s[i]] ? match_added(t, s + i, len - i, parse_special, &id) : 0;
        if (!m) {
            i++;
            continue;
        }
        if (i > start) rc = encode_text(&e, s + start, i - start);
        if (!rc) rc = push_id(&e, id);
        i += m;
        start = i;
    }
    if (!rc && start < len) rc = encode_text(&e, s + start, len - start);
    pcre2_match_data_free(e.md);
    free(e.sym), free(e.prev), free(e.next), free(e.heap);
    free(e.bucket), free(e.ent), free(e.ranks), free(e.batch);
    free(clean);
    if (rc || e.n_ids == 0) {
        free(e.ids);
        return rc;
    }
    *ids = e.ids;
    *n_ids = e.n_ids;
    return 0;
}

int tok_added_ends(const tokenizer *t, const char *text, size_t len, bool parse_special, size_t **ends, size_t *n) {
    *ends = NULL, *n = 0;
    const unsigned char *s = (const unsigned char *)text;
    if (!t || !text || ub_utf8_valid_prefix(s, len) != len) return 0;
    size_t cap = 0;
    for (size_t i = 0; i < len;) { /* the same scan as tok_encode's */
        int32_t id;
        size_t m = t->added_first[s[i]] ? match_added(t, s + i, len - i, parse_special, &id) : 0;
        if (!m) {
            i++;
            continue;
        }
        i += m;
        if (*n == cap) {
            size_t *p = realloc(*ends, (cap = cap ? 2 * cap : 16) * sizeof *p);
            if (!p) {
                free(*ends);
                *ends = NULL, *n = 0;
                return cd_fail("out of memory");
            }
            *ends = p;
        }
        (*ends)[(*n)++] = i;
    }
    return 0;
}

/* ---- decode ---- */

const char *tok_piece(const tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->pieces + t->piece_off[id];
}

int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text) {
    if (!text) return cd_fail("tok_decode: no output");
    *text = NULL;
    if (!t || (!ids && n)) return cd_fail("tok_decode: no tokenizer or ids");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return cd_fail("token id %d out of range (vocabulary of %d tokens)", ids[i], t->n_vocab);
        total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    }
    char *raw = malloc(total + 1);
    if (!raw) return cd_fail("out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t a = t->piece_off[ids[i]], b = t->piece_off[ids[i] + 1];
        memcpy(raw + o, t->pieces + a, b - a);
        o += b - a;
    }
    raw[o] = 0;
    if (ub_utf8_valid_prefix((const unsigned char *)raw, o) == o) {
        *text = raw;
        return 0;
    }
    size_t m;
    *text = ub_utf8_sanitize((const unsigned char *)raw, o, &m);
    free(raw);
    return *text ? 0 : cd_fail("out of memory");
}

int tok_stream_push(const tokenizer *t, tok_stream *s, int32_t id, char *out, size_t cap) {
    if (!t || !s || !out || cap == 0) return cd_fail("tok_stream_push: bad arguments");
    out[0] = 0;
    if (id < 0 || id >= t->n_vocab)
        return cd_fail("token id %d out of range (vocabulary of %d tokens)", id, t->n_vocab);
    if (s->n_pending < 0 || s->n_pending > (int)sizeof s->pending) return cd_fail("tok_stream_push: corrupt stream");
    size_t np = (size_t)s->n_pending, a = t->piece_off[id], plen = t->piece_off[id + 1] - a;
    size_t total = np + plen;
    unsigned char local[512], *buf = total <= sizeof local ? local : malloc(total);
    if (!buf) return cd_fail("out of memory");
    memcpy(buf, s->pending, np);
    memcpy(buf + np, t->pieces + a, plen);
    size_t i = 0, o = 0;
    int rc = 0;
    while (i < total) {
        uint32_t cp;
        bool truncated;
        int k = ub_utf8_next(buf + i, total - i, &cp, &truncated);
        if (k < 0 && truncated && total - i < sizeof s->pending) break; /* wait for the rest */
        size_t w = k > 0 ? (size_t)k : 3;
        if (o + w > cap - 1) {
            rc = cd_fail("token %d decodes to more than the %zu-byte buffer holds", id, cap);
            break;
        }
        if (k > 0) memcpy(out + o, buf + i, w);
        else ub_utf8_put(UB_REPLACEMENT, out + o);
        o += w;
        i += k > 0 ? (size_t)k : (size_t)-k;
    }
    if (!rc) {
        s->n_pending = (int)(total - i);
        memcpy(s->pending, buf + i, total - i);
    }
    out[rc ? 0 : o] = 0;
    if (buf != local) free(buf);
    return rc ? -1 : (int)o;
}

int tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    if (!s || !out || cap == 0) return cd_fail("tok_stream_flush: bad arguments");
    out[0] = 0;
    int n = s->n_pending > 0 ? 3 : 0;
    if ((size_t)n > cap - 1) return cd_fail("tok_stream_flush: buffer too small");
    if (n) ub_utf8_put(UB_REPLACEMENT, out);
    out[n] = 0;
    s->n_pending = 0;
    return n;
}
