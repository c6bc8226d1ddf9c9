#include "runtime/text/reply_memory.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/base/error.h"

static const char *namespace_of(const char *salt) { return salt && *salt ? salt : NULL; }

/* The namespace seeds the text's hash: two salts' equal texts land apart. */
static uint64_t salt_seed(const char *salt) { return salt ? XXH3_64bits(salt, strlen(salt)) : 0; }

static bool same_salt(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static void entry_free(reply_entry *e) {
    free(e->salt);
    free(e->ids);
    free(e->text);
    *e = (reply_entry){0};
}

int reply_memory_init(reply_memory *m, size_t max_entries, size_t max_tokens, size_t max_bytes) {
    *m = (reply_memory){.max_entries = max_entries ? max_entries : 1,
                        .max_tokens = max_tokens,
                        .max_bytes = max_bytes,
                        .hash_mask = ~(uint64_t)0};
    if (!(m->e = calloc(m->max_entries, sizeof *m->e))) return cd_fail("out of memory (reply memory)");
    pthread_mutex_init(&m->mu, NULL);
    return 0;
}

void reply_memory_free(reply_memory *m) {
    if (!m->e) return;
    for (size_t i = 0; i < m->n; i++) entry_free(&m->e[i]);
    free(m->e);
    pthread_mutex_destroy(&m->mu);
    *m = (reply_memory){0};
}

/* Drops entry i, keeping the order (the mutex held). */
static void drop(reply_memory *m, size_t i) {
    m->tokens -= m->e[i].n_ids;
    m->bytes -= m->e[i].text_len;
    entry_free(&m->e[i]);
    memmove(&m->e[i], &m->e[i + 1], (m->n - i - 1) * sizeof *m->e);
    m->n--;
}

static bool same_entry(const reply_entry *a, const reply_entry *b) {
    return a->text_len == b->text_len && same_salt(a->salt, b->salt) && !memcmp(a->text, b->text, a->text_len);
}

int reply_memory_put(reply_memory *m, const char *salt, const int32_t *ids, size_t n_ids, const char *text,
                     size_t text_len) {
    salt = namespace_of(salt);
    if (!n_ids || n_ids > m->max_tokens || text_len > m->max_bytes) return 0;
    reply_entry e = {.hash = XXH3_64bits_withSeed(text, text_len, salt_seed(salt)) & m->hash_mask,
                     .salt = salt ? strdup(salt) : NULL,
                     .ids = malloc(n_ids * sizeof *ids),
                     .n_ids = n_ids,
                     .text = malloc(text_len ? text_len : 1),
                     .text_len = text_len};
    if ((salt && !e.salt) || !e.ids || !e.text) {
        entry_free(&e);
        return cd_fail("out of memory (reply memory)");
    }
    memcpy(e.ids, ids, n_ids * sizeof *ids);
    memcpy(e.text, text, text_len);
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++)
        if (same_entry(&m->e[i], &e)) drop(m, i--);
    while (m->n && (m->n == m->max_entries || m->tokens + n_ids > m->max_tokens || m->bytes + text_len > m->max_bytes))
        drop(m, 0); /* the oldest first */
    m->e[m->n++] = e;
    m->tokens += n_ids;
    m->bytes += text_len;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* Whether len is one of ends[0..n) (ascending): its index in *at. */
static bool find_end(const size_t *ends, size_t n, size_t len, size_t *at) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ends[mid] < len) lo = mid + 1;
        else hi = mid;
    }
    *at = lo;
    return lo < n && ends[lo] == len;
}

/* h[i]: the hash of text[0..ends[i]), in one streaming pass (a digest leaves the state as it
 * was). -1 when out of memory. */
static int prefix_hashes(const char *salt, const char *text, const size_t *ends, size_t n, uint64_t mask, uint64_t *h) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) return -1;
    XXH3_64bits_reset_withSeed(st, salt_seed(salt));
    for (size_t i = 0, at = 0; i < n; at = ends[i++]) {
        XXH3_64bits_update(st, text + at, ends[i] - at);
        h[i] = XXH3_64bits_digest(st) & mask;
    }
    XXH3_freeState(st);
    return 0;
}

bool reply_memory_find(reply_memory *m, const char *salt, const char *text, const size_t *ends, size_t n_ends,
                       int32_t **ids, size_t *n_ids, size_t *end) {
    salt = namespace_of(salt);
    *ids = NULL, *n_ids = 0, *end = 0;
    uint64_t *h = n_ends ? malloc(n_ends * sizeof *h) : NULL;
    if (!h || prefix_hashes(salt, text, ends, n_ends, m->hash_mask, h)) {
        free(h);
        return false;
    }
    pthread_mutex_lock(&m->mu);
    const reply_entry *best = NULL;
    for (size_t i = 0; i < m->n; i++) { /* each entry can only be the prefix its length ends at */
        const reply_entry *e = &m->e[i];
        size_t at;
        if ((best && e->text_len <= best->text_len) || !find_end(ends, n_ends, e->text_len, &at) || h[at] != e->hash ||
            !same_salt(e->salt, salt) || memcmp(e->text, text, e->text_len))
            continue;
        best = e;
    }
    if (best && (*ids = malloc(best->n_ids * sizeof **ids))) {
        memcpy(*ids, best->ids, best->n_ids * sizeof **ids);
        *n_ids = best->n_ids;
        *end = best->text_len;
    }
    pthread_mutex_unlock(&m->mu);
    free(h);
    return *ids != NULL;
}

void reply_memory_count(reply_memory *m, size_t n_ids) {
    atomic_fetch_add(&m->hits, 1);
    atomic_fetch_add(&m->tokens_reused, n_ids);
}

void reply_memory_held(reply_memory *m, size_t *entries, size_t *tokens) {
    pthread_mutex_lock(&m->mu);
    *entries = m->n;
    *tokens = m->tokens;
    pthread_mutex_unlock(&m->mu);
}

int reply_memory_encode(reply_memory *m, const tokenizer *t, const char *salt, const char *text, size_t len,
                        int32_t **ids, size_t *n, uint32_t *reused) {
    size_t *ends = NULL, n_ends = 0, end = 0, n_head = 0, n_rest = 0;
    int32_t *head = NULL, *rest = NULL;
    *reused = 0;
    if (m && !tok_added_ends(t, text, len, true, &ends, &n_ends) && n_ends)
        reply_memory_find(m, salt, text, ends, n_ends, &head, &n_head, &end);
    free(ends);
    if (!head) return tok_encode(t, text, len, true, ids, n); /* a miss, or out of memory: no reuse */
    if (tok_encode(t, text + end, len - end, true, &rest, &n_rest)) {
        free(head);
        return -1;
    }
    int32_t *all = realloc(head, (n_head + n_rest) * sizeof *all);
    if (!all) {
        free(head), free(rest);
        return cd_fail("out of memory");
    }
    if (n_rest) memcpy(all + n_head, rest, n_rest * sizeof *rest);
    free(rest);
    *ids = all, *n = n_head + n_rest, *reused = (uint32_t)n_head;
    return 0;
}

void reply_memory_remember(reply_memory *m, const tokenizer *t, const char *salt, const int32_t *prompt,
                           size_t n_prompt, const char *prompt_text, size_t prompt_len, const int32_t *gen,
                           size_t n_gen) {
    int32_t close = tok_find(t, "<|im_end|>");
    size_t kept = n_gen;
    if (close >= 0 && kept && tok_is_eog(t, gen[kept - 1])) kept--;
    size_t n_tail = kept + (close >= 0), n = n_prompt + n_tail;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *reply = NULL, *text = NULL;
    if (!ids) return;
    memcpy(ids, prompt, n_prompt * sizeof *ids);
    if (kept) memcpy(ids + n_prompt, gen, kept * sizeof *ids);
    if (close >= 0) ids[n - 1] = close;
    if (!tok_decode(t, ids + n_prompt, n_tail, &reply)) {
        size_t reply_len = strlen(reply);
        if ((text = malloc(prompt_len + reply_len + 1))) {
            memcpy(text, prompt_text, prompt_len);
            memcpy(text + prompt_len, reply, reply_len + 1);
            reply_memory_put(m, salt, ids, n, text, prompt_len + reply_len);
        }
    }
    free(ids), free(reply), free(text);
}
