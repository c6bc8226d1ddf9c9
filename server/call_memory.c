#include "server/call_memory.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

enum { MAX_CALL_BYTES = 64 * 1024 };

static void entry_free(call_entry *e) {
    free(e->id);
    free(e->name);
    free(e->args);
    free(e->text);
    *e = (call_entry){0};
}

int call_memory_init(call_memory *m, size_t cap) {
    *m = (call_memory){.cap = cap ? cap : 1};
    m->ring = calloc(m->cap, sizeof *m->ring);
    if (!m->ring) return cd_fail("out of memory (tool call memory)");
    pthread_mutex_init(&m->mu, NULL);
    return 0;
}

void call_memory_free(call_memory *m) {
    if (!m->ring) return;
    for (size_t i = 0; i < m->cap; i++) entry_free(&m->ring[i]);
    free(m->ring);
    pthread_mutex_destroy(&m->mu);
    *m = (call_memory){0};
}

int call_memory_put(call_memory *m, const char *id, const char *name, const char *args, const char *text,
                    size_t text_len) {
    if (text_len > MAX_CALL_BYTES) return 0;
    call_entry e = {.id = strdup(id),
                    .name = strdup(name),
                    .args = strdup(args),
                    .text = malloc(text_len + 1),
                    .text_len = text_len};
    if (!e.id || !e.name || !e.args || !e.text) {
        entry_free(&e);
        return cd_fail("out of memory (tool call memory)");
    }
    memcpy(e.text, text, text_len);
    e.text[text_len] = 0;
    pthread_mutex_lock(&m->mu);
    entry_free(&m->ring[m->next]);
    m->ring[m->next] = e;
    m->next = (m->next + 1) % m->cap;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* The arguments as sent back equal the generated ones: the same text (OpenAI's shape, a
 * string), or the same JSON value. */
static bool same_arguments(const char *generated, const json_t *sent) {
    if (json_is_string(sent)) return !strcmp(json_string_value(sent), generated);
    json_t *g = json_loads(generated, 0, NULL);
    bool same = g && json_equal(g, sent);
    json_decref(g);
    return same;
}

bool call_memory_lookup(void *ctx, const char *id, const char *name, const json_t *arguments, char **text,
                        size_t *len) {
    call_memory *m = ctx;
    bool found = false;
    if (!id || !*id) return false;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->cap && !found; i++) {
        const call_entry *e = &m->ring[i];
        if (!e->id || strcmp(e->id, id) || strcmp(e->name, name) || !same_arguments(e->args, arguments)) continue;
        if ((*text = malloc(e->text_len + 1))) {
            memcpy(*text, e->text, e->text_len + 1);
            *len = e->text_len;
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return found;
}
