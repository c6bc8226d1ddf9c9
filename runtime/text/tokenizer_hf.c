/* tok_vocab_from_hf: a Hugging Face tokenizer.json (+ tokenizer_config.json) to the arrays
 * a GGUF stores as tokenizer.ggml.*, the way llama.cpp's convert_hf_to_gguf.py builds them
 * for Qwen2-style byte-level BPE (get_vocab_base and gguf-py's SpecialVocab). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/base/error.h"
#include "runtime/text/tokenizer.h"

#define HF_MAX_TOKENS (1 << 28)

/* convert_hf_to_gguf.py does_token_look_special: added tokens that are not marked special
 * but are typed CONTROL anyway (Qwen's <|fim_prefix|>, <|repo_name|>, ...). */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    static const char *exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(s, exact[i]) == 0) return true;
#define ENDS(suf) (n >= strlen(suf) && strcmp(s + n - strlen(suf), suf) == 0)
    if (strncmp(s, "<|", 2) == 0 && ENDS("|>")) return true;
    if (strncmp(s, "<\xEF\xBD\x9C", 4) == 0 && ENDS("\xEF\xBD\x9C>")) return true; /* <｜ ... ｜> */
    if (strncmp(s, "<unused", 7) == 0 && ENDS(">")) return true;
#undef ENDS
    return false;
}

void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    if (v->tokens)
        for (size_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    if (v->merges)
        for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
    v->eos_id = v->pad_id = v->bos_id = -1;
}

/* json_load_file reads a byte at a time through stdio; one read and json_loadb is faster on
 * an 11 MB file. */
static json_t *load_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return cd_fail("%s: cannot open: %s", path, strerror(errno)), NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return cd_fail("%s: out of memory", path), NULL;
            }
            buf = p;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return cd_fail("%s: read error", path), NULL;
    }
    json_error_t err;
    json_t *j = json_loadb(buf, n, 0, &err);
    free(buf);
    if (!j) cd_fail("%s: %s (line %d)", path, err.text, err.line);
    return j;
}

static int get_id(json_t *val, const char *path, const char *what, size_t *id) {
    json_int_t x = json_is_integer(val) ? json_integer_value(val) : -1;
    if (x < 0 || x >= HF_MAX_TOKENS) return cd_fail("%s: %s has no valid id", path, what);
    *id = (size_t)x;
    return 0;
}

/* The id of a token named by tokenizer_config.json ("<|im_end|>" or {"content": ...}), -1 if
 * the entry is absent or null, -2 (with a message) if it names no token. */
static int32_t config_token(json_t *cfg, const char *key, const tok_vocab *v, const char *path) {
    json_t *e = json_object_get(cfg, key);
    if (json_is_object(e)) e = json_object_get(e, "content");
    if (!e || json_is_null(e)) return -1;
    const char *s = json_string_value(e);
    if (!s) return cd_fail("%s: %s is not a string", path, key), -2;
    for (size_t i = 0; i < v->n_tokens; i++)
        if (strcmp(v->tokens[i], s) == 0) return (int32_t)i;
    return cd_fail("%s: %s \"%s\" is not in the vocabulary", path, key, s), -2;
}

static int read_config(const char *path, tok_vocab *v) {
    int32_t eot = -1;
    for (size_t i = 0; i < v->n_tokens && eot < 0; i++)
        if (strcmp(v->tokens[i], "<|endoftext|>") == 0) eot = (int32_t)i;
    v->eos_id = v->pad_id = v->bos_id = eot;
    if (!path) return 0;
    json_t *cfg = load_json(path);
    if (!cfg) return -1;
    int rc = 0;
    if (!json_is_object(cfg)) rc = cd_fail("%s: not a JSON object", path);
    int32_t eos = rc ? -1 : config_token(cfg, "eos_token", v, path);
    int32_t pad = rc || eos == -2 ? -1 : config_token(cfg, "pad_token", v, path);
    int32_t bos = rc || eos == -2 || pad == -2 ? -1 : config_token(cfg, "bos_token", v, path);
    if (eos == -2 || pad == -2 || bos == -2) rc = -1;
    if (eos >= 0) v->eos_id = eos;
    if (pad >= 0) v->pad_id = pad;
    if (bos >= 0) v->bos_id = bos;
    json_decref(cfg);
    return rc;
}

static char *join_merge(json_t *m) {
    const char *s = json_string_value(m);
    if (s) return strdup(s);
    if (!json_is_array(m) || json_array_size(m) != 2) return NULL;
    const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
    if (!a || !b) return NULL;
    size_t na = strlen(a), nb = strlen(b);
    char *out = malloc(na + nb + 2);
    if (!out) return NULL;
    memcpy(out, a, na);
    out[na] = ' ';
    memcpy(out + na + 1, b, nb + 1);
    return out;
}

static int build(json_t *root, const char *path, size_t n_vocab_padded, tok_vocab *v) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return cd_fail("%s: no \"model\" object", path);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0) return cd_fail("%s: model type is \"%s\", not BPE", path, type);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) return cd_fail("%s: model.vocab is not an object", path);
    if (!json_is_array(merges)) return cd_fail("%s: model.merges is not an array", path);
    if (added && !json_is_array(added)) return cd_fail("%s: added_tokens is not an array", path);

    size_t n = 0, id = 0, i;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (get_id(val, path, key, &id)) return -1;
        if (id + 1 > n) n = id + 1;
    }
    json_array_foreach(added, i, val) {
        if (!json_is_string(json_object_get(val, "content")))
            return cd_fail("%s: added_tokens[%zu] has no content", path, i);
        if (get_id(json_object_get(val, "id"), path, json_string_value(json_object_get(val, "content")), &id))
            return -1;
        if (id + 1 > n) n = id + 1;
    }
    if (n_vocab_padded > n) {
        if (n_vocab_padded > HF_MAX_TOKENS) return cd_fail("vocabulary size %zu is too large", n_vocab_padded);
        n = n_vocab_padded;
    }
    if (n == 0) return cd_fail("%s: the vocabulary is empty", path);
    v->n_tokens = n;
    v->tokens = calloc(n, sizeof *v->tokens);
    v->types = malloc(n * sizeof *v->types);
    if (!v->tokens || !v->types) return cd_fail("out of memory");

    json_object_foreach(vocab, key, val) {
        id = (size_t)json_integer_value(val);
        if (v->tokens[id]) return cd_fail("%s: id %zu is both \"%s\" and \"%s\"", path, id, v->tokens[id], key);
        if (!(v->tokens[id] = strdup(key))) return cd_fail("out of memory");
        v->types[id] = TOK_TYPE_NORMAL;
    }
    json_array_foreach(added, i, val) {
        const char *content = json_string_value(json_object_get(val, "content"));
        id = (size_t)json_integer_value(json_object_get(val, "id"));
        if (v->tokens[id] && strcmp(v->tokens[id], content) != 0)
            return cd_fail("%s: added token \"%s\" has id %zu, which is \"%s\"", path, content, id, v->tokens[id]);
        if (!v->tokens[id] && !(v->tokens[id] = strdup(content))) return cd_fail("out of memory");
        bool special = json_is_true(json_object_get(val, "special"));
        v->types[id] = special || looks_special(content) ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
    }
    for (id = 0; id < n; id++) {
        if (v->tokens[id]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%zu]", id);
        if (!(v->tokens[id] = strdup(pad))) return cd_fail("out of memory");
        v->types[id] = TOK_TYPE_UNUSED;
    }

    size_t nm = json_array_size(merges);
    v->merges = calloc(nm ? nm : 1, sizeof *v->merges);
    if (!v->merges) return cd_fail("out of memory");
    json_array_foreach(merges, i, val) {
        if (!(v->merges[i] = join_merge(val)))
            return cd_fail("%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
        v->n_merges = i + 1;
    }
    return 0;
}

int tok_vocab_from_hf(const char *tokenizer_json, const char *tokenizer_config_json, size_t n_vocab_padded,
                      tok_vocab *out) {
    if (!out) return cd_fail("tok_vocab_from_hf: no output");
    memset(out, 0, sizeof *out);
    out->eos_id = out->pad_id = out->bos_id = -1;
    if (!tokenizer_json) return cd_fail("tok_vocab_from_hf: no tokenizer.json path");
    json_t *root = load_json(tokenizer_json);
    if (!root) return -1;
    int rc = json_is_object(root) ? build(root, tokenizer_json, n_vocab_padded, out)
                                  : cd_fail("%s: not a JSON object", tokenizer_json);
    json_decref(root);
    if (!rc) rc = read_config(tokenizer_config_json, out);
    if (rc) tok_vocab_free(out);
    return rc;
}
