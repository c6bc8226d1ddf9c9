#include "engine/lookup_draft.h"

#include <string.h>

/* The start of the latest occurrence of toks[n - g, n) that ends before n - 1 and has at least
 * one token after it, or UINT32_MAX. */
static uint32_t latest_occurrence(const int32_t *toks, uint32_t n, uint32_t g) {
    const int32_t *suffix = toks + n - g;
    for (uint32_t i = n - g; i-- > 0;) /* starts n - g - 1 .. 0: the match ends at i + g <= n - 1 */
        if (toks[i] == suffix[0] && !memcmp(toks + i, suffix, g * sizeof *toks)) return i;
    return UINT32_MAX;
}

uint32_t lookup_draft(const int32_t *toks, uint32_t n, uint32_t k_max, int32_t *out) {
    for (uint32_t g = LOOKUP_NGRAM_MAX; g >= LOOKUP_NGRAM_MIN; g--) {
        if (n < g + 1) continue;
        uint32_t at = latest_occurrence(toks, n, g);
        if (at == UINT32_MAX) continue;
        uint32_t from = at + g, k = n - from < k_max ? n - from : k_max;
        memcpy(out, toks + from, k * sizeof *out);
        return k;
    }
    return 0;
}
