/* JSON fields of an engine reply that more than one command prints (cinder chat --json,
 * cinder bench --json), so both spell them alike. */
#pragma once
#include <jansson.h>

#include "engine/engine.h"

/* The disk tier's per-request fields (disk_tokens, chunks and bytes read/written, rejected
 * files, read/write ms) into j. Only meaningful with --cache-dir. */
void reply_json_disk(json_t *j, const engine_reply *r);

/* "stop", "length" (--n or the context end), "cancelled" or "error": OpenAI's finish_reason. */
const char *reply_finish_name(const engine_reply *r);
