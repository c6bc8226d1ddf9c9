#include "runtime/model/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/base/error.h"

int sampler_init(sampler *s, sampler_params p, int32_t n_vocab) {
    s->p = p;
    s->n_vocab = n_vocab;
    rng_seed(&s->rng, p.seed);
    s->ids = malloc((size_t)n_vocab * sizeof *s->ids);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    if (!s->ids || !s->probs) {
        sampler_free(s);
        return cd_fail("out of memory for the sampler");
    }
    return 0;
}

void sampler_init_draws(sampler *s, sampler_params p) {
    *s = (sampler){.p = p};
    rng_seed(&s->rng, p.seed);
}

void sampler_free(sampler *s) {
    free(s->ids);
    free(s->probs);
    s->ids = NULL;
    s->probs = NULL;
}

int32_t sampler_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Orders (value desc, id asc): a strict total order, so sorting is deterministic. */
static int cmp_desc(const void *a, const void *b, void *logits) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float vx = ((const float *)logits)[x], vy = ((const float *)logits)[y];
    if (vx != vy) return vx > vy ? -1 : 1;
    return (x > y) - (x < y);
}

int32_t sampler_top_k(const float *logits, int32_t n, int32_t k, int32_t *ids, float *values) {
    if (k <= 0 || k > n) k = n;
    /* partial selection: keep a sorted window of the best k (k is small in practice) */
    int32_t count = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (count == k && !(v > values[k - 1])) continue;
        int32_t j = count < k ? count++ : k - 1;
        while (j > 0 && v > values[j - 1]) {
            values[j] = values[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        values[j] = v;
        ids[j] = i;
    }
    return count;
}

int32_t sampler_sample(sampler *s, const float *logits) {
    const sampler_params *p = &s->p;
    if (p->temperature <= 0) return sampler_argmax(logits, s->n_vocab);

    int32_t n;
    if (p->top_k > 0 && p->top_k < 4096) {
        n = sampler_top_k(logits, s->n_vocab, p->top_k, s->ids, s->probs);
    } else {
        n = s->n_vocab;
        if (p->top_k > 0 && p->top_k < n) n = p->top_k;
        for (int32_t i = 0; i < s->n_vocab; i++) s->ids[i] = i;
        qsort_r(s->ids, (size_t)s->n_vocab, sizeof *s->ids, cmp_desc, (void *)logits);
        for (int32_t i = 0; i < n; i++) s->probs[i] = logits[s->ids[i]];
    }
    /* softmax with temperature over the kept tokens (probs[0] is the max) */
    double sum = 0;
    float max = s->probs[0];
    for (int32_t i = 0; i < n; i++) {
        s->probs[i] = expf((s->probs[i] - max) / p->temperature);
        sum += s->probs[i];
    }
    /* top-p: shortest prefix reaching the mass */
    int32_t keep = n;
    if (p->top_p < 1.0f) {
        double mass = 0;
        for (int32_t i = 0; i < n; i++) {
            mass += s->probs[i] / sum;
            if (mass >= p->top_p) { keep = i + 1; break; }
        }
    }
    double kept = 0;
    for (int32_t i = 0; i < keep; i++) kept += s->probs[i];
    double u = (double)rng_f32(&s->rng) * kept, acc = 0;
    for (int32_t i = 0; i < keep; i++) {
        acc += s->probs[i];
        if (u < acc) return s->ids[i];
    }
    return s->ids[keep - 1];
}
