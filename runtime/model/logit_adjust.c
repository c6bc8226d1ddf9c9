#include "runtime/model/logit_adjust.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

bool logit_adjust_active(const logit_adjust *a) { return a && (a->presence != 0 || a->frequency != 0 || a->n_bias); }

int logit_adjust_check(const logit_adjust *a, int32_t n_vocab) {
    if (!a) return 0;
    if (!(a->presence >= -2 && a->presence <= 2)) return cd_fail("presence_penalty %g is outside -2 to 2", a->presence);
    if (!(a->frequency >= -2 && a->frequency <= 2))
        return cd_fail("frequency_penalty %g is outside -2 to 2", a->frequency);
    if (a->n_bias > LOGIT_BIAS_MAX) return cd_fail("logit_bias has %u entries; at most %d", a->n_bias, LOGIT_BIAS_MAX);
    for (uint32_t i = 0; i < a->n_bias; i++) {
        const logit_bias *b = &a->bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return cd_fail("logit_bias names token %d; the vocabulary is 0 to %d", b->id, n_vocab - 1);
        if (!(b->bias >= -100 && b->bias <= 100))
            return cd_fail("logit_bias of token %d is %g, outside -100 to 100", b->id, b->bias);
        if (i && b->id <= a->bias[i - 1].id) return cd_fail("logit_bias names token %d twice or out of order", b->id);
    }
    return 0;
}

int logit_adjust_copy(logit_adjust *dst, const logit_adjust *src) {
    *dst = (logit_adjust){0};
    if (!src) return 0;
    *dst = *src;
    dst->bias = NULL;
    if (!src->n_bias) return 0;
    if (!(dst->bias = malloc(src->n_bias * sizeof *dst->bias))) {
        dst->n_bias = 0;
        return cd_fail("out of memory for a logit_bias of %u entries", src->n_bias);
    }
    memcpy(dst->bias, src->bias, src->n_bias * sizeof *dst->bias);
    return 0;
}

void logit_adjust_free(logit_adjust *a) {
    free(a->bias);
    *a = (logit_adjust){0};
}

void logit_adjust_apply(const logit_adjust *a, const int32_t *gen, uint32_t n_gen, float *logits, int32_t n_vocab,
                        uint32_t *count) {
    if (!a) return;
    for (uint32_t i = 0; i < a->n_bias; i++)
        if (a->bias[i].id >= 0 && a->bias[i].id < n_vocab) logits[a->bias[i].id] += a->bias[i].bias;
    if (a->presence == 0 && a->frequency == 0) return;
    for (uint32_t i = 0; i < n_gen; i++)
        if (gen[i] >= 0 && gen[i] < n_vocab) count[gen[i]]++;
    for (uint32_t i = 0; i < n_gen; i++) { /* each distinct token once, at its first occurrence */
        int32_t j = gen[i];
        if (j < 0 || j >= n_vocab || !count[j]) continue;
        logits[j] -= (float)count[j] * a->frequency + a->presence;
        count[j] = 0;
    }
}
