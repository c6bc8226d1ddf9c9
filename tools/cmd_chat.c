/* cinder chat: a multi-turn chat REPL on the Vulkan engine with the prefix cache. Each line
 * read is a user message; the reply streams out, and a line per turn shows what the cache
 * did: prompt tokens, tokens served from the cache, tokens prefilled, time to first token and
 * decode speed. --no-prefix-cache prefills the whole history every turn, for comparison.
 * A history longer than the context loses its oldest turns after the system prompt (said on
 * stderr); a message that alone does not fit is refused with both lengths, the session goes on.
 * With stdin not a terminal, lines are read the same way (scripts, tests). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/error.h"
#include "runtime/text/chat_thinking.h"
#include "runtime/text/conversation.h"
#include "engine/engine.h"
#include "tools/cli.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"
#include "tools/reply_json.h"

typedef struct chat_opts {
    const char *model, *system;
    const char *chat_template; /* --chat-template NAME, or NULL: the file's */
    chat_template_id template; /* what renders, resolved once the model is loaded */
    uint32_t max_tokens;
    engine_opts eo;
    sampler_params sp;
    chat_think_ask think; /* --think / --no-think, or the template's default */
    bool thinking;        /* decided once the template is known (chat_thinking.h) */
    bool json;
    rope_override rope; /* --rope-scaling ... over the file's */
} chat_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cinder chat [--model M] [--system TEXT] [--n N] [--ctx N] [--kv-pool-tokens N]\n"
            "                   [--page-size N] [--no-prefix-cache] [--temp T] [--top-k K] [--top-p P]\n"
            "                   [--seed S] [--think | --no-think] [--json] [--host-cache-mb N] [--cache-dir DIR]\n"
            "                   [--cache-dir-max-mb N] [--spec-tokens N] [--chat-template NAME] " CLI_MEMORY_FLAGS "\n"
            "                   " CLI_ROPE_USAGE "\n"
            "  Reads one user message per line from stdin and streams the reply. After each turn a\n"
            "  line on stderr shows prompt tokens, cached tokens, TTFT and decode speed.\n"
            "  Lines: /reset starts a new conversation (the cache keeps what it has), /stats shows\n"
            "  the cache totals, /exit (or end of input) quits.\n"
            "  --n is the most tokens per reply (256); --ctx the most tokens of one conversation\n"
            "  (the file's context length, or what fits beside the weights on this device, not below\n"
            "  4096): when the history outgrows it, the oldest turns after the system prompt are\n"
            "  dropped (a line on stderr) to leave room for a reply of --n tokens (at most half the\n"
            "  context); a message too long for the context alone is refused, the session goes on.\n"
            "  A reply cut by --n or the context end says so (finish_reason \"length\").\n"
            "  --kv-pool-tokens the KV pool shared by the conversation and the cache (4 x ctx, or\n"
            "  what leaves the weights room on the device, not below ctx);\n"
            "  --page-size tokens per KV page (16). " CLI_DEVICE_MEMORY_USAGE "\n"
            "  --json prints one JSON object per\n"
            "  turn instead of the text. Greedy unless --temp > 0. Thinking follows the template: on for\n"
            "  the hybrid Qwen3 (--no-think turns it off, --think back on), never for Qwen3-Coder.\n"
            "  --host-cache-mb N keeps evicted cache pages in N MiB of host memory and restores them\n"
            "  on a hit (0, the default: no host tier, evicted pages are recomputed).\n"
            "  --cache-dir DIR writes cached prefixes to DIR (created if missing) in chunks of 256\n"
            "  tokens, keyed by model and prefix, and serves them from there after a restart; files\n"
            "  from another model, corrupt or truncated ones are rejected (a line on stderr) and\n"
            "  recomputed. --cache-dir-max-mb N keeps the chunk files under DIR within N MiB (N >= 1; by\n"
            "  default 10%% of the file system's free space at start, at least 256 MiB): the least\n"
            "  recently used are deleted first. Both tiers need the prefix cache (not with\n"
            "  --no-prefix-cache). --spec-tokens N (0-8; 0, the default: off) guesses up to N next\n"
            "  tokens of a reply from the conversation (prompt lookup) and checks them in one pass:\n"
            "  the same reply, sooner when it repeats what was said.\n"
            "  --chat-template NAME renders with that template (qwen3, qwen3-coder) instead of the one\n"
            "  the model file carries (recognised by its text; an unknown one is refused).\n");
}

static int parse(int argc, char **argv, chat_opts *o) {
    *o = (chat_opts){.max_tokens = 256, .sp = {.temperature = 0, .top_k = 40, .top_p = 0.95f, .seed = 42}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_flag(argv, i, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (cli_flag(argv, i, "--think")) {
            o->think = CHAT_THINK_ASK_ON;
            continue;
        }
        if (cli_flag(argv, i, "--no-think")) {
            o->think = CHAT_THINK_ASK_OFF;
            continue;
        }
        if (cli_flag(argv, i, "--json")) {
            o->json = true;
            continue;
        }
        int rope = cli_rope(argc, argv, &i, &o->rope), eng = rope ? 0 : cli_engine_flag("chat", argc, argv, &i, &o->eo);
        if (rope < 0 || eng < 0) return -1;
        if (rope || eng) continue;
        if (cli_value(argc, argv, &i, "--model", &v)) o->model = v;
        else if (cli_value(argc, argv, &i, "--system", &v)) o->system = v;
        else if (cli_value(argc, argv, &i, "--chat-template", &v)) o->chat_template = v;
        else if (cli_value(argc, argv, &i, "--n", &v)) {
            if (cli_u32("--n", v, &o->max_tokens)) return -1;
        } else if (cli_value(argc, argv, &i, "--temp", &v)) {
            if (cli_f32("--temp", v, &o->sp.temperature)) return -1;
        } else if (cli_value(argc, argv, &i, "--top-k", &v)) {
            if (cli_i32("--top-k", v, &o->sp.top_k)) return -1;
        } else if (cli_value(argc, argv, &i, "--top-p", &v)) {
            if (cli_f32("--top-p", v, &o->sp.top_p)) return -1;
        } else if (cli_value(argc, argv, &i, "--seed", &v)) {
            if (cli_u64("--seed", v, &o->sp.seed)) return -1;
        } else return cli_unknown("chat", a), -1;
        if (!v) return cli_error("chat", "%s needs a value", a), -1;
    }
    if (o->max_tokens == 0) return cli_error("chat", "--n must be at least 1"), -1;
    if (o->chat_template && chat_template_from_name(o->chat_template, &o->template))
        return cli_error("chat", "--chat-template: %s", cd_errmsg()), -1;
    return cli_engine_check("chat", &o->eo);
}

/* Streams reply text to stdout as tokens arrive. */
typedef struct stream {
    const tokenizer *tok;
    tok_stream ts;
    bool print;
} stream;

static bool on_token(void *ctx, int32_t id) {
    stream *s = ctx;
    if (!s->print || tok_is_eog(s->tok, id)) return true;
    char piece[1024];
    int n = tok_stream_push(s->tok, &s->ts, id, piece, sizeof piece);
    if (n > 0) {
        fwrite(piece, 1, (size_t)n, stdout);
        fflush(stdout);
    }
    return true;
}

/* The reply's text for the history: the generated tokens without the end-of-turn token. */
static char *reply_text(const tokenizer *t, const engine_reply *r) {
    size_t n = r->n && r->eog ? r->n - 1 : r->n;
    char *text = NULL;
    if (tok_decode(t, r->ids, n, &text)) return NULL;
    return text;
}

static void print_turn(const chat_opts *o, const engine *e, unsigned turn, const engine_reply *r, const char *text,
                       unsigned dropped) {
    double dec = r->n > 1 && r->decode_ms > 0 ? (r->n - 1) / (r->decode_ms / 1e3) : 0;
    bool ctx_end = r->finish == ENGINE_LENGTH && r->prompt_tokens + r->n >= engine_n_ctx(e);
    if (o->json) {
        json_t *j =
            json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:f, s:s}", "turn", turn, "prompt_tokens",
                      r->prompt_tokens, "cached_tokens", r->cached_tokens, "prefilled_tokens", r->prefilled_tokens,
                      "ttft_ms", r->ttft_ms, "decode_tok_s", dec, "generated", r->n, "evicted_pages",
                      (json_int_t)r->evicted_pages, "restored_tokens", r->restored_tokens, "demoted_pages",
                      (json_int_t)r->demoted_pages, "restore_ms", r->restore_ms, "text", text ? text : "");
        json_object_set_new(j, "finish_reason", json_string(reply_finish_name(r)));
        json_object_set_new(j, "context_full", json_boolean(ctx_end));
        json_object_set_new(j, "dropped_turns", json_integer(dropped));
        json_object_set_new(j, "n_ctx", json_integer(engine_n_ctx(e)));
        if (engine_disk_on(e)) reply_json_disk(j, r);
        char *s = json_dumps(j, JSON_COMPACT);
        puts(s);
        fflush(stdout);
        free(s);
        json_decref(j);
        return;
    }
    double hit = r->prompt_tokens ? 100.0 * r->cached_tokens / r->prompt_tokens : 0;
    char host[160] = "";
    engine_cache_info ci;
    engine_cache_info_get(e, &ci);
    if (ci.host_slots)
        snprintf(host, sizeof host, " | restored %u tok in %.1f ms, demoted %llu pages | GPU %u pages, host %u slots",
                 r->restored_tokens, r->restore_ms, (unsigned long long)r->demoted_pages, ci.gpu_cached + ci.gpu_pinned,
                 ci.host_slots - ci.host_free);
    char disk[200] = "";
    if (r->disk_tokens || r->disk_chunks_written || r->disk_rejected || r->disk_evicted_chunks)
        snprintf(disk, sizeof disk, " | disk: %u tok from %u chunks in %.1f ms, %u chunks written in %.1f ms%s%s",
                 r->disk_tokens, r->disk_chunks_read, r->disk_read_ms, r->disk_chunks_written, r->disk_write_ms,
                 r->disk_evicted_chunks ? ", older chunks evicted for the budget" : "",
                 r->disk_rejected ? ", files rejected (see above)" : "");
    const char *stopped = r->finish != ENGINE_LENGTH ? ""
        : ctx_end                                    ? " | stopped: the context is full (length)"
                                                     : " | stopped: --n tokens (length)";
    fprintf(stderr,
            "\n[turn %u | prompt %u tok | cached %u (%.0f%%) | prefilled %u | TTFT %.1f ms | decode %.2f tok/s, %u "
            "tok%s%s%s%s]\n",
            turn, r->prompt_tokens, r->cached_tokens, hit, r->prefilled_tokens, r->ttft_ms, dec, r->n, stopped,
            engine_cache_on(e) ? "" : " | prefix cache off", host, disk);
}

static void print_stats(const engine *e) {
    const engine_stats st = engine_stats_get(e), *s = &st;
    engine_cache_info ci;
    engine_cache_info_get(e, &ci);
    uint64_t pages = (uint64_t)ci.gpu_cached + ci.gpu_pinned;
    fprintf(stderr,
            "[%llu requests | prompt %llu tok, cached %llu (%.0f%%), prefilled %llu | cache: %llu pages in %llu nodes, "
            "%llu evicted, %.1f bytes/token of index]\n",
            (unsigned long long)s->requests, (unsigned long long)s->prompt_tokens, (unsigned long long)s->cached_tokens,
            s->prompt_tokens ? 100.0 * s->cached_tokens / s->prompt_tokens : 0, (unsigned long long)s->prefilled_tokens,
            (unsigned long long)pages, (unsigned long long)ci.nodes, (unsigned long long)s->evicted_pages,
            pages ? (double)ci.index_bytes / ((double)pages * ci.page_tokens) : 0);
    if (ci.host_slots)
        fprintf(stderr,
                "[host tier: %u of %u slots in use | %llu pages demoted, %llu restored (%llu tokens) | "
                "%.1f MiB to host, %.1f MiB to GPU | restore %.1f ms]\n",
                ci.host_slots - ci.host_free, ci.host_slots, (unsigned long long)s->demoted_pages,
                (unsigned long long)s->restored_pages, (unsigned long long)s->restored_tokens,
                ci.host_bytes_to_host / 1048576.0, ci.host_bytes_to_gpu / 1048576.0, s->restore_ms);
    if (ci.disk)
        fprintf(stderr,
                "[disk tier %s: %llu tokens served | %llu chunks read (%.2f MiB, %.1f ms), %llu written (%.2f MiB, "
                "%.1f ms) | %llu files rejected | budget %.1f MiB, %.2f MiB used, %llu chunks (%.2f MiB) evicted, "
                "%llu over budget]\n",
                ci.disk_dir, (unsigned long long)s->disk_tokens, (unsigned long long)s->disk_chunks_read,
                s->disk_bytes_read / 1048576.0, s->disk_read_ms, (unsigned long long)s->disk_chunks_written,
                s->disk_bytes_written / 1048576.0, s->disk_write_ms, (unsigned long long)s->disk_rejected,
                ci.disk_budget_bytes / 1048576.0, ci.disk_bytes / 1048576.0, (unsigned long long)s->disk_evicted_chunks,
                s->disk_evicted_bytes / 1048576.0, (unsigned long long)s->disk_over_budget);
}

static bool is_user(const json_t *messages, size_t i) {
    const char *role = json_string_value(json_object_get(json_array_get(messages, i), "role"));
    return role && !strcmp(role, "user");
}

/* The oldest turn after the system prompt (a turn: a user message and the replies up to the
 * next user message): [*first, *end). false when the only turn left is the last one, the
 * message being answered. */
static bool oldest_turn(const json_t *messages, size_t *first, size_t *end) {
    size_t n = json_array_size(messages), f = 0;
    while (f < n && !is_user(messages, f)) f++;
    size_t next = f + 1;
    while (next < n && !is_user(messages, next)) next++;
    if (next >= n) return false;
    *first = f;
    *end = next;
    return true;
}

/* The prompt for the conversation's last message, made to fit the context: the oldest turns
 * after the system prompt are dropped (a line on stderr says how many) until the prompt leaves
 * room for a reply of --n tokens (at most half the context), or until only the system prompt
 * and the last message are left. A message that does not fit even then fails, naming both
 * lengths, and the history is left as it was. *dropped counts the turns dropped. *ids is the
 * caller's to free, also on failure. */
static int fit_prompt(const chat_opts *o, const engine *e, conversation *c, int32_t **ids, size_t *n,
                      unsigned *dropped) {
    const uint32_t n_ctx = engine_n_ctx(e), room = o->max_tokens < n_ctx / 2 ? o->max_tokens : n_ctx / 2;
    *dropped = 0;
    if (conv_prompt(c, engine_tokenizer(e), o->thinking, ids, n)) return -1;
    if (*n + room <= n_ctx) return 0;
    /* the least this turn can be: the system prompt and the last message */
    size_t first, end, n_least = *n;
    if (oldest_turn(c->messages, &first, &end)) {
        size_t last = json_array_size(c->messages) - 1;
        conversation least = {.messages = json_array(), .tools = c->tools};
        int rc = least.messages ? 0 : cd_fail("out of memory");
        for (size_t i = 0; !rc && i <= last; i++)
            if ((i < first || i == last) && json_array_append(least.messages, json_array_get(c->messages, i)))
                rc = cd_fail("out of memory");
        int32_t *least_ids = NULL;
        if (!rc) rc = conv_prompt(&least, engine_tokenizer(e), o->thinking, &least_ids, &n_least);
        json_decref(least.messages);
        free(least_ids);
        if (rc) return -1;
    }
    if (n_least >= n_ctx) {
        free(*ids);
        *ids = NULL;
        return cd_fail("the message needs %zu prompt tokens%s; the context holds %u (--ctx): not sent", n_least,
                       o->system ? " with the system prompt" : "", n_ctx);
    }
    size_t n_before = *n;
    while (*n + room > n_ctx && oldest_turn(c->messages, &first, &end)) {
        for (size_t k = first; k < end; k++) json_array_remove(c->messages, first);
        (*dropped)++;
        free(*ids);
        *ids = NULL;
        if (conv_prompt(c, engine_tokenizer(e), o->thinking, ids, n)) return -1;
    }
    if (*dropped)
        fprintf(stderr,
                "chat: context full: dropped the %u oldest turn%s (%zu tokens); the prompt is %zu of %u tokens\n",
                *dropped, *dropped == 1 ? "" : "s", n_before - *n, *n, n_ctx);
    return 0;
}

static int turn(const chat_opts *o, engine *e, conversation *c, unsigned n_turn) {
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned dropped = 0;
    if (fit_prompt(o, e, c, &ids, &n, &dropped)) {
        free(ids);
        return cli_error("chat", "%s", cd_errmsg());
    }
    stream s = {.tok = engine_tokenizer(e), .print = !o->json};
    engine_request rq = {.ids = ids, .n = (uint32_t)n, .max_tokens = o->max_tokens, .on_token = on_token, .ctx = &s};
    engine_reply r;
    int rc = n > UINT32_MAX ? cd_fail("prompt too long") : engine_generate(e, &rq, &r);
    free(ids);
    if (rc) {
        engine_reply_free(&r);
        return cli_error("chat", "%s", cd_errmsg());
    }
    char tail[8];
    int nt = s.print ? tok_stream_flush(&s.ts, tail, sizeof tail) : 0;
    if (nt > 0) fwrite(tail, 1, (size_t)nt, stdout);
    char *text = reply_text(engine_tokenizer(e), &r);
    rc = text && !conv_reply(c, engine_tokenizer(e), text, r.ids, r.n) ? 0 : cli_error("chat", "%s", cd_errmsg());
    print_turn(o, e, n_turn, &r, text, dropped);
    free(text);
    engine_reply_free(&r);
    return rc;
}

/* A conversation whose replies come back as the ids generated (reply_memory.h): a model's
 * tokens need not be the canonical encoding of their text, and the next turn continues the
 * cached ids only with them. */
static int new_conversation(const chat_opts *o, conversation *c, reply_memory *replies) {
    conv_free(c);
    if (conv_init(c) || (o->system && conv_add(c, "system", o->system))) return cli_error("chat", "%s", cd_errmsg());
    c->template = o->template;
    c->replies = replies;
    return 0;
}

static int repl(const chat_opts *o, engine *e) {
    conversation c = {0};
    reply_memory replies; /* one conversation at a time: its last replies are enough */
    if (reply_memory_init(&replies, 16, 1u << 20, 16u << 20)) return cli_error("chat", "%s", cd_errmsg());
    if (new_conversation(o, &c, &replies)) {
        reply_memory_free(&replies);
        return -1;
    }
    bool tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    unsigned n_turn = 0;
    int rc = 0;
    for (;;) {
        if (tty) fputs("\n> ", stderr);
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/stats")) {
            print_stats(e);
            continue;
        }
        if (!strcmp(line, "/reset")) {
            if ((rc = new_conversation(o, &c, &replies))) break;
            n_turn = 0;
            continue;
        }
        if (conv_add(&c, "user", line)) {
            rc = cli_error("chat", "%s", cd_errmsg());
            continue;
        }
        if (turn(o, e, &c, ++n_turn)) {
            /* the failed message leaves the history; the session goes on */
            json_array_remove(c.messages, json_array_size(c.messages) - 1);
            n_turn--;
            rc = -1;
        }
    }
    free(line);
    conv_free(&c);
    reply_memory_free(&replies);
    if (!o->json) print_stats(e);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    if (parse(argc, argv, &o)) return 1;
    if (!o.model) {
        if (cli_ensure_default_model()) return 1;
        o.model = cli_default_model();
    }
    model *m;
    if (model_load(&m, o.model, (model_load_opts){.skip_weight_hash = true, .rope = o.rope}))
        return cli_error("chat", "%s", cd_errmsg());
    chat_template_match how;
    if (chat_template_resolve(m->chat_template.ptr, (size_t)m->chat_template.len, o.chat_template, &o.template, &how) ||
        chat_thinking(o.template, o.think, CHAT_REPLY_FREE, &o.thinking)) {
        model_free(m);
        return cli_error("chat", "%s: %s", o.model, cd_errmsg());
    }
    engine e;
    int rc = engine_init(&e, m, &o.eo) || engine_warm_up(&e) || engine_set_sampler(&e, &o.sp)
        ? cli_error("chat", "%s", cd_errmsg())
        : 0;
    if (!rc) rc = repl(&o, &e);
    engine_free(&e);
    model_free(m);
    return rc ? 1 : 0;
}
