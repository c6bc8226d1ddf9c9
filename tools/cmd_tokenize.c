/* cinder tokenize / detokenize: the model's own tokenizer from its GGUF metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/gguf/gguf.h"
#include "runtime/text/tokenizer.h"
#include "tools/cli.h"
#include "tools/commands.h"

/* Opens only what tokenizing needs: the metadata, not the weights. */
static int open_tokenizer(const char *cmd, const char *path, gguf_file **f, tokenizer **t) {
    if (!path) {
        if (cli_ensure_default_model()) return 1;
        path = cli_default_model();
    }
    if (gguf_open(f, path)) return cli_error(cmd, "%s: %s", path, cd_errmsg());
    if (tok_load_gguf(t, *f)) {
        cli_error(cmd, "%s: %s", path, cd_errmsg());
        gguf_close(*f);
        return 1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL;
    bool json = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_flag(argv, i, "--help")) {
            printf("usage: cinder tokenize [--model M] [--json] [--no-special] TEXT\n"
                   "  prints comma-separated ids; special tokens in TEXT are parsed unless --no-special\n");
            return 0;
        }
        if (cli_value(argc, argv, &i, "--model", &v)) {
            if (!v) return cli_error("tokenize", "--model needs a path");
            model = v;
        } else if (cli_flag(argv, i, "--json")) json = true;
        else if (cli_flag(argv, i, "--no-special")) special = false;
        else if (cli_flag(argv, i, "--")) {
            if (i + 1 < argc) text = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) return cli_unknown("tokenize", argv[i]);
        else text = argv[i];
    }
    if (!text) return cli_error("tokenize", "no TEXT given");
    gguf_file *f;
    tokenizer *t;
    if (open_tokenizer("tokenize", model, &f, &t)) return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    if (tok_encode(t, text, strlen(text), special, &ids, &n)) rc = cli_error("tokenize", "%s", cd_errmsg());
    else {
        printf(json ? "{\"tokens\": [" : "");
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? (json ? ", " : ",") : "", ids[i]);
        printf(json ? "], \"n_tokens\": %zu}\n" : "\n", n);
    }
    free(ids);
    tok_free(t);
    gguf_close(f);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *list = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_flag(argv, i, "--help")) {
            printf("usage: cinder detokenize [--model M] 1,2,3\n");
            return 0;
        }
        if (cli_value(argc, argv, &i, "--model", &v)) {
            if (!v) return cli_error("detokenize", "--model needs a path");
            model = v;
        } else if (argv[i][0] == '-') return cli_unknown("detokenize", argv[i]);
        else list = argv[i];
    }
    int32_t *ids;
    size_t n;
    if (!list) return cli_error("detokenize", "no token ids given");
    if (cli_ids("detokenize", list, &ids, &n)) return 1;
    gguf_file *f;
    tokenizer *t;
    if (open_tokenizer("detokenize", model, &f, &t)) {
        free(ids);
        return 1;
    }
    char *text = NULL;
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= tok_n_vocab(t)) {
            rc = cli_error("detokenize", "token id %d out of range (vocabulary %d)", ids[i], tok_n_vocab(t));
            break;
        }
    if (!rc && tok_decode(t, ids, n, &text)) rc = cli_error("detokenize", "%s", cd_errmsg());
    if (!rc) printf("%s\n", text);
    free(text);
    free(ids);
    tok_free(t);
    gguf_close(f);
    return rc;
}
