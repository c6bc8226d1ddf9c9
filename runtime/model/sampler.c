#include "runtime/model/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/base/error.h"

int sampler_init(sampler *s, sampler_params p, int32_t n_vocab) {
    *s = (sampler){.p = p, .n_vocab = n_vocab};
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

double sampler_log_sum_exp(const float *logits, int32_t n) {
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (isfinite(logits[i]) && logits[i] > m) m = logits[i];
    if (m == -INFINITY) return -INFINITY;
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        if (isfinite(logits[i])) s += exp((double)logits[i] - m);
    return m + log(s);
}

void sampler_logprob(const float *logits, int32_t n, int32_t id, uint32_t top, token_logprob *out) {
    *out = (token_logprob){.id = id};
    double lse = sampler_log_sum_exp(logits, n);
    out->logprob = (float)(logits[id] - lse);
    uint32_t above = 0;
    for (int32_t i = 0; i < n; i++) above += logits[i] > logits[id];
    out->rank = above + 1;
    if (top > TOP_LOGPROBS_MAX) top = TOP_LOGPROBS_MAX;
    if (top > (uint32_t)n) top = (uint32_t)n;
    if (!top) return;
    float v[TOP_LOGPROBS_MAX];
    out->n_top = (uint32_t)sampler_top_k(logits, n, (int32_t)top, out->top_id, v);
    for (uint32_t i = 0; i < out->n_top; i++) out->top_logprob[i] = (float)(v[i] - lse);
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

/* ids / probs[0, n) hold the candidates sorted (probs: their logits); makes probs the softmax
 * numerators exp((l - max) / T) and returns their sum, in that order. */
static double numerators(sampler *s, int32_t n) {
    double sum = 0;
    float max = s->probs[0];
    for (int32_t i = 0; i < n; i++) {
        s->probs[i] = expf((s->probs[i] - max) / s->p.temperature);
        sum += s->probs[i];
    }
    return sum;
}

/* The whole vocabulary sorted (value desc, id asc), probs as numerators() leaves them. */
static void sort_all(sampler *s, const float *logits) {
    for (int32_t i = 0; i < s->n_vocab; i++) s->ids[i] = i;
    qsort_r(s->ids, (size_t)s->n_vocab, sizeof *s->ids, cmp_desc, (void *)logits);
    for (int32_t i = 0; i < s->n_vocab; i++) s->probs[i] = logits[s->ids[i]];
    numerators(s, s->n_vocab);
}

/* Steps 4 and 5 over candidates [0, n) sorted, of which [0, have) are in ids / probs (the rest
 * not yet sorted: sample_all); sum: the numerators' total. Returns the id, or -1 when the walk
 * needs candidates past `have`. */
static int32_t walk(sampler *s, int32_t n, int32_t have, double sum, float u01) {
    int32_t keep = n; /* top-p: the shortest prefix reaching the mass */
    if (s->p.top_p < 1.0f) {
        double mass = 0;
        int32_t i = 0;
        for (; i < have; i++) {
            mass += s->probs[i] / sum;
            if (mass >= s->p.top_p) break;
        }
        if (i == have && have < n) return -1;
        if (i < have) keep = i + 1;
    }
    double kept = 0;
    if (keep == n) kept = sum;
    else
        for (int32_t i = 0; i < keep; i++) kept += s->probs[i];
    double u = (double)u01 * kept, acc = 0;
    int32_t last = keep < have ? keep : have;
    for (int32_t i = 0; i < last; i++) {
        acc += s->probs[i];
        if (u < acc) return s->ids[i];
    }
    return last < keep ? -1 : s->ids[keep - 1];
}

/* top_k "all" without sorting the vocabulary (a full sort per token cost ~20 ms at 151,936
 * tokens, on the engine's thread): the numerators are binned by size (8 bins per factor of 2, a
 * larger numerator in a lower bin: the bins keep the sorted order), the bins' masses show how
 * far down the sorted order the walk can go (to the top-p mass, or to the draw), and only the
 * tokens of the bins down to there are sorted. They are a prefix of the whole sorted order, so
 * the walk over them is the walk over everything. */
enum { SUB_BINS = 8, BINS = 64 * SUB_BINS };

static int bin_of(float e) { /* e in [0, 1] */
    if (!(e > 0)) return BINS - 1;
    int ex;
    float m = frexpf(e, &ex); /* e = m 2^ex, m in [0.5, 1) */
    int sub = (int)((1.0f - m) * 2 * SUB_BINS);
    int b = (1 - ex) * SUB_BINS + (sub < SUB_BINS ? sub : SUB_BINS - 1);
    return b < BINS - 1 ? b : BINS - 1;
}

static int32_t sample_all(sampler *s, const float *logits, float u01) {
    const sampler_params *p = &s->p;
    int32_t n = s->n_vocab;
    float max = logits[sampler_argmax(logits, n)];
    double sum = 0, mass[BINS] = {0};
    for (int32_t i = 0; i < n; i++) { /* the total in id order; probs: the numerators by id */
        float e = s->probs[i] = expf((logits[i] - max) / p->temperature);
        sum += e;
        mass[bin_of(e)] += e;
    }
    /* the walk stops within the first `need` of the mass (a margin for the rounding of its sums) */
    double need = (p->top_p < 1.0f ? p->top_p : u01) * sum * (1 + 1e-6), below = 0;
    int last = 0;
    while (last < BINS - 1 && (below += mass[last]) < need) last++;
    int32_t have = 0;
    for (int32_t i = 0; i < n; i++)
        if (bin_of(s->probs[i]) <= last) s->ids[have++] = i;
    qsort_r(s->ids, (size_t)have, sizeof *s->ids, cmp_desc, (void *)logits);
    for (int32_t i = 0; i < have; i++) s->probs[i] = logits[s->ids[i]];
    numerators(s, have);
    int32_t id = walk(s, n, have, sum, u01);
    if (id >= 0) return id;
    s->full_sorts++; /* the margin was not enough: everything */
    sort_all(s, logits);
    return walk(s, n, n, sum, u01);
}

int32_t sampler_sample(sampler *s, const float *logits) {
    const sampler_params *p = &s->p;
    if (p->temperature <= 0) return sampler_argmax(logits, s->n_vocab);
    float u01 = rng_f32(&s->rng); /* one draw per token, whatever the path */
    if (p->top_k > 0 && p->top_k < 4096) {
        int32_t n = sampler_top_k(logits, s->n_vocab, p->top_k, s->ids, s->probs);
        return walk(s, n, n, numerators(s, n), u01);
    }
    if (p->top_k > 0 && p->top_k < s->n_vocab) { /* a large top_k: sort */
        sort_all(s, logits);
        double sum = 0;
        for (int32_t i = 0; i < p->top_k; i++) sum += s->probs[i];
        return walk(s, p->top_k, p->top_k, sum, u01);
    }
    return sample_all(s, logits, u01);
}
