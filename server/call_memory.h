/* The tool calls this server generated, by call id, with the exact bytes each was generated
 * as: a client sends a call back in the next request (an agent loop), and the renderer writes
 * those bytes instead of the template's re-serialisation (chat_options.generated_call), so the
 * next prompt continues the cached tokens even when the model did not keep the template's
 * layout (whitespace, key order). Only a call returned unchanged (same id, name and arguments)
 * is rendered so; anything else renders as the template says.
 *
 * A ring of the last `cap` calls (oldest forgotten first); a call over 64 KiB is not kept.
 * Thread-safe: replies are recorded and requests rendered on connection threads. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

typedef struct call_entry {
    char *id, *name, *args; /* args: the arguments text as the reply gave it */
    char *text;             /* the block's inner text as generated */
    size_t text_len;
} call_entry;

typedef struct call_memory {
    pthread_mutex_t mu;
    call_entry *ring;
    size_t cap, next;
} call_memory;

int call_memory_init(call_memory *m, size_t cap);
void call_memory_free(call_memory *m);
/* Records one generated call (copies everything); -1 only when out of memory. */
int call_memory_put(call_memory *m, const char *id, const char *name, const char *args, const char *text,
                    size_t text_len);
/* chat_options.generated_call: ctx is the call_memory. */
bool call_memory_lookup(void *ctx, const char *id, const char *name, const json_t *arguments, char **text, size_t *len);
