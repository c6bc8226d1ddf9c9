#include "server/job.h"

#include <stdlib.h>
#include <string.h>

job *job_new(void) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->refs = 2; /* the connection and the engine thread */
    if (pthread_cond_init(&j->cv, NULL)) {
        free(j);
        return NULL;
    }
    return j;
}

void job_unref(job *j) {
    if (!j || --j->refs > 0) return;
    free(j->ids);
    for (uint32_t i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->forced);
    json_decref((json_t *)j->calls.tools);
    free(j->cache_salt);
    free(j->echo_text);
    free(j->prompt_text);
    free(j->gen);
    free(j->plp);
    logit_adjust_free(&j->adjust);
    json_schema_unref(j->schema);
    coder_tools_unref(j->coder_tools);
    free(j->lp);
    free(j->text);
    pthread_cond_destroy(&j->cv);
    job *first = j->first;
    free(j);
    job_unref(first);
}

void job_signal(job *j) { pthread_cond_broadcast(job_cv(j)); }

static char *dup_or_null(const char *s, bool *ok) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *ok = false;
    return d;
}

job *job_copy(const job *j) {
    job *c = job_new();
    if (!c) return NULL;
    bool ok = (c->ids = malloc(j->n_ids * sizeof *j->ids)) != NULL;
    if (ok) memcpy(c->ids, j->ids, j->n_ids * sizeof *j->ids);
    c->n_ids = j->n_ids;
    c->max_tokens = j->max_tokens;
    c->sp = j->sp;
    ok = ok && !logit_adjust_copy(&c->adjust, &j->adjust);
    c->logprobs = j->logprobs;
    c->top_logprobs = j->top_logprobs;
    c->json_object = j->json_object;
    c->schema = j->schema ? json_schema_ref(j->schema) : NULL;
    for (uint32_t i = 0; i < j->n_stop; i++) c->stop[c->n_stop++] = dup_or_null(j->stop[i], &ok);
    c->forced = dup_or_null(j->forced, &ok);
    c->calls = j->calls;
    c->calls.tools = json_incref((json_t *)j->calls.tools);
    if (j->forced_json && c->forced) c->forced_json = c->forced + (j->forced_json - j->forced);
    c->json_tail = j->json_tail; /* a literal */
    c->json_lazy = j->json_lazy;
    c->json_once = j->json_once;
    c->json_trigger = j->json_trigger;
    c->coder_tools = j->coder_tools ? coder_tools_ref(j->coder_tools) : NULL;
    c->cache_salt = dup_or_null(j->cache_salt, &ok);
    c->echo = j->echo;
    c->vllm_prompt_logprobs = j->vllm_prompt_logprobs;
    c->prompt_top = j->prompt_top;
    c->keep_gen = j->keep_gen;
    if (!ok) {
        c->refs = 1;
        job_unref(c);
        return NULL;
    }
    return c;
}

/* Choice k of j's request: seed + k; it signals root's cv. */
static job *copy_request(job *j, uint32_t k, job *root) {
    job *c = job_copy(j);
    if (!c) return NULL;
    c->sp.seed = j->sp.seed + k;
    c->first = root;
    root->refs++;
    return c;
}

int job_choices(job **prompts, uint32_t n_prompts, uint32_t n, job **out) {
    for (uint32_t i = 0; i < n_prompts * n; i++) {
        uint32_t p = i / n, k = i % n;
        if ((out[i] = k ? copy_request(prompts[p], k, prompts[0]) : prompts[p])) continue;
        while (i-- > 0)
            if (i % n) out[i]->refs = 1, job_unref(out[i]);
        return -1;
    }
    for (uint32_t p = 1; p < n_prompts; p++) prompts[p]->first = prompts[0], prompts[0]->refs++;
    return 0;
}

static bool reserve(job *j, size_t more) {
    if (j->len + more + 1 <= j->cap) return true;
    size_t cap = j->cap ? j->cap : 256;
    while (cap < j->len + more + 1) cap *= 2;
    char *p = realloc(j->text, cap);
    if (!p) return false;
    j->text = p;
    j->cap = cap;
    return true;
}

/* The longest tail of text[0..len) that begins some stop string (it may yet become one). */
static size_t held_back(const job *j) {
    size_t hold = 0;
    for (uint32_t i = 0; i < j->n_stop; i++) {
        size_t m = strlen(j->stop[i]);
        for (size_t k = m - 1; k > hold && k > 0; k--)
            if (k <= j->len && !memcmp(j->text + j->len - k, j->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

bool job_append(job *j, const char *s, size_t n) {
    if (!reserve(j, n)) return true; /* out of memory: the text stops growing; the request goes on */
    size_t from = j->len;
    memcpy(j->text + j->len, s, n);
    j->len += n;
    j->text[j->len] = 0;
    /* the earliest stop string that now appears; it may begin before the new piece */
    size_t cut = j->len;
    for (uint32_t i = 0; i < j->n_stop; i++) {
        size_t m = strlen(j->stop[i]);
        size_t start = from >= m ? from - m + 1 : 0;
        char *hit = memmem(j->text + start, j->len - start, j->stop[i], m);
        if (hit && (size_t)(hit - j->text) < cut) cut = (size_t)(hit - j->text);
    }
    if (cut < j->len) {
        j->len = cut;
        j->text[cut] = 0;
        j->stable = cut;
        j->stopped_by_string = true;
        return false;
    }
    j->stable = j->len - held_back(j);
    return true;
}
