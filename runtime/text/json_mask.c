#include "runtime/text/json_mask.h"

#include <math.h>

void json_mask_init(json_mask *m, const tokenizer *t) {
    m->tok = t;
    json_prefix_init(&m->state);
}

static bool allowed(const json_mask *m, int32_t id) {
    if (tok_is_eog(m->tok, id)) return json_prefix_done(&m->state);
    enum tok_type type = tok_token_type(m->tok, id);
    if (type != TOK_TYPE_NORMAL && type != TOK_TYPE_BYTE) return false;
    size_t n;
    const char *bytes = tok_piece(m->tok, id, &n);
    if (!n) return false;
    json_prefix p = m->state;
    return json_prefix_feed(&p, bytes, n);
}

void json_mask_apply(const json_mask *m, float *logits, int32_t n) {
    int32_t v = tok_n_vocab(m->tok);
    for (int32_t id = 0; id < n; id++)
        if (logits[id] != -INFINITY && (id >= v || !allowed(m, id))) logits[id] = -INFINITY;
}

void json_mask_accept(json_mask *m, int32_t id) {
    size_t n;
    const char *bytes = tok_piece(m->tok, id, &n);
    if (bytes && !tok_is_eog(m->tok, id)) json_prefix_feed(&m->state, bytes, n);
}
