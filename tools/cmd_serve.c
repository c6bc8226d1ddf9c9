/* cinder serve: the OpenAI-compatible server (server/server.h). Flags follow llama-server's
 * where they mean the same thing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/text/chat_template.h"
#include "server/kv_wire.h"
#include "server/server.h"
#include "tools/cli.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: cinder serve [--model M] [--host ADDR] [--port N] [--parallel N] [--queue N] [--ctx N]\n"
        "                    [--kv-pool-tokens N] [--page-size N] [--host-cache-mb N] [--cache-dir DIR]\n"
        "                    [--cache-dir-max-mb N] " CLI_MEMORY_FLAGS "\n"
        "                    [--no-prefix-cache] [--api-key KEY] [--alias NAME] [--chunk-tokens N]\n"
        "                    [--max-body-kb N] [--max-header-kb N] [--max-conns N] [--idle-timeout S]\n"
        "                    [--port-file F] [--preserve-reasoning] [--strict-template] [--spec-tokens N]\n"
        "                    [--chat-template NAME] [--think | --no-think]\n"
        "                    " CLI_ROPE_USAGE "\n"
        "                    [--kv-events tcp://HOST:PORT [--kv-events-replay tcp://HOST:PORT] [--kv-events-id ID]\n"
        "                     [--kv-events-encoding array|map]]\n"
        "  An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions (streaming with\n"
        "  \"stream\": true), GET /v1/models, /health, /metrics (Prometheus), /v1/cache.\n"
        "  --host 127.0.0.1 and --port 8080 by default (loopback only; --port 0 picks a free port and\n"
        "  --port-file writes it). --parallel requests run at once (8), sharing the KV pool\n"
        "  (--kv-pool-tokens; 4 x ctx, or what leaves the weights room on the device) and the prefix\n"
        "  cache; --queue more wait (64), beyond that 503. --ctx is the most tokens of one request (the file's\n"
        "  context length, or what fits beside the weights on this device, not below 4096).\n"
        "  " CLI_DEVICE_MEMORY_USAGE "\n"
        "  --api-key requires\n"
        "  \"Authorization: Bearer KEY\" (not on /health). --alias names the model (the file name).\n"
        "  Limits: request body --max-body-kb (8192), headers --max-header-kb (64), --max-conns (256),\n"
        "  --idle-timeout seconds (600). SIGINT/SIGTERM cancel running requests and exit 0.\n"
        "  Thinking follows the template: on for the hybrid Qwen3 unless a request's\n"
        "  chat_template_kwargs.enable_thinking is false (a JSON response_format or a demanded tool\n"
        "  call that does not say: off), never for Qwen3-Coder. --no-think / --think set it for the\n"
        "  other requests that do not say.\n"
        "  History is rendered as the model generated it (with thinking off, an assistant turn keeps\n"
        "  the empty <think></think> block it was generated after), so each turn continues the cached\n"
        "  tokens; --strict-template renders it exactly as the Qwen3 template does instead.\n"
        "  --preserve-reasoning keeps reasoning_content of every assistant turn in the history.\n"
        "  --chat-template NAME (qwen3, qwen3-coder) renders requests and parses replies with that\n"
        "  template instead of the one the model file carries (recognised by its text; `cinder info`\n"
        "  names it; an unknown one is refused).\n"
        "  --host-cache-mb N keeps evicted cache pages in N MiB of host memory; --cache-dir DIR writes\n"
        "  cached prefixes to DIR in 256-token chunks and serves them after a restart, within\n"
        "  --cache-dir-max-mb N MiB (N >= 1; default 10%% of the free space at start, at least 256 MiB;\n"
        "  least recently used chunks deleted first; counters on /metrics).\n"
        "  --spec-tokens N (0-8, default 0: off) guesses up to N next tokens of each reply from its own\n"
        "  history (prompt lookup) and checks them in the same pass: the same tokens, more of them a\n"
        "  pass when replies copy their context (tool calls, quoted text, JSON).\n"
        "  --kv-events tcp://HOST:PORT publishes the prefix cache's KV cache events in vLLM's format\n"
        "  (ZeroMQ PUB; bound for HOST * or 0.0.0.0, else connected to a subscriber that binds, as\n"
        "  llm-d's does), topic kv@ID@MODEL (ID: --kv-events-id, host:port by default);\n"
        "  --kv-events-replay binds a ROUTER socket that resends missed batches (docs/FLEET.md).\n"
        "  --kv-events-encoding: each event an array (vLLM's array_like structs, the default) or a map\n"
        "  of its fields by name, the tag under \"type\" (msgspec's tagged structs).\n");
}

typedef struct serve_opts {
    const char *model;
    server_opts so;
    engine_opts eo;
} serve_opts;

static int parse_u16(const char *opt, const char *v, uint16_t *out) {
    uint32_t x;
    if (cli_u32(opt, v, &x)) return -1;
    if (x > 65535) return cli_error("serve", "%s must be at most 65535", opt), -1;
    *out = (uint16_t)x;
    return 0;
}

static int parse(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.so = {.host = "127.0.0.1",
                             .port = 8080,
                             .queue = 64,
                             .max_body_kb = 8192,
                             .max_header_kb = 64,
                             .max_conns = 256,
                             .idle_s = 600},
                      .eo = {.max_seqs = 8, .build_pipelines = true}};
    bool encoding_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_flag(argv, i, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (cli_flag(argv, i, "--preserve-reasoning")) {
            o->so.preserve_reasoning = true;
            continue;
        }
        if (cli_flag(argv, i, "--strict-template")) {
            o->so.strict_template = true;
            continue;
        }
        if (cli_flag(argv, i, "--think")) {
            o->so.think = CHAT_THINK_ASK_ON;
            continue;
        }
        if (cli_flag(argv, i, "--no-think")) {
            o->so.think = CHAT_THINK_ASK_OFF;
            continue;
        }
        int rope = cli_rope(argc, argv, &i, &o->so.rope),
            eng = rope ? 0 : cli_engine_flag("serve", argc, argv, &i, &o->eo);
        if (rope < 0 || eng < 0) return -1;
        if (rope || eng) continue;
        if (cli_value(argc, argv, &i, "--model", &v)) o->model = v;
        else if (cli_value(argc, argv, &i, "--host", &v)) o->so.host = v;
        else if (cli_value(argc, argv, &i, "--port", &v)) {
            if (parse_u16("--port", v, &o->so.port)) return -1;
        } else if (cli_value(argc, argv, &i, "--port-file", &v)) o->so.port_file = v;
        else if (cli_value(argc, argv, &i, "--parallel", &v)) {
            if (cli_u32("--parallel", v, &o->eo.max_seqs)) return -1;
        } else if (cli_value(argc, argv, &i, "--queue", &v)) {
            if (cli_u32("--queue", v, &o->so.queue)) return -1;
        } else if (cli_value(argc, argv, &i, "--chunk-tokens", &v)) {
            if (cli_u32("--chunk-tokens", v, &o->eo.chunk_tokens)) return -1;
        } else if (cli_value(argc, argv, &i, "--api-key", &v)) o->so.api_key = v;
        else if (cli_value(argc, argv, &i, "--alias", &v)) o->so.alias = v;
        else if (cli_value(argc, argv, &i, "--kv-events", &v)) o->so.kv_events = v;
        else if (cli_value(argc, argv, &i, "--kv-events-replay", &v)) o->so.kv_events_replay = v;
        else if (cli_value(argc, argv, &i, "--kv-events-id", &v)) o->so.kv_events_id = v;
        else if (cli_value(argc, argv, &i, "--kv-events-encoding", &v)) {
            if (strcmp(v, "array") && strcmp(v, "map"))
                return cli_error("serve", "--kv-events-encoding %s: array or map", v), -1;
            o->so.kv_events_map = !strcmp(v, "map");
            encoding_set = true;
        } else if (cli_value(argc, argv, &i, "--chat-template", &v)) o->so.chat_template = v;
        else if (cli_value(argc, argv, &i, "--max-body-kb", &v)) {
            if (cli_u32("--max-body-kb", v, &o->so.max_body_kb)) return -1;
        } else if (cli_value(argc, argv, &i, "--max-header-kb", &v)) {
            if (cli_u32("--max-header-kb", v, &o->so.max_header_kb)) return -1;
        } else if (cli_value(argc, argv, &i, "--max-conns", &v)) {
            if (cli_u32("--max-conns", v, &o->so.max_conns)) return -1;
        } else if (cli_value(argc, argv, &i, "--idle-timeout", &v)) {
            if (cli_u32("--idle-timeout", v, &o->so.idle_s)) return -1;
        } else return cli_unknown("serve", a), -1;
        if (!v) return cli_error("serve", "%s needs a value", a), -1;
    }
    if (o->eo.max_seqs == 0 || o->eo.max_seqs > 256) return cli_error("serve", "--parallel must be 1 to 256"), -1;
    if (o->so.max_body_kb == 0 || o->so.max_header_kb < 4 || o->so.max_conns == 0)
        return cli_error("serve", "--max-body-kb and --max-conns must be at least 1, --max-header-kb at least 4"), -1;
    if (o->so.max_body_kb > 1024 * 1024 || o->so.max_header_kb > 1024 * 1024)
        return cli_error("serve", "--max-body-kb and --max-header-kb are at most 1048576"), -1;
    if (o->so.api_key && !*o->so.api_key) return cli_error("serve", "--api-key must not be empty"), -1;
    chat_template_id tmpl;
    if (o->so.chat_template && chat_template_from_name(o->so.chat_template, &tmpl))
        return cli_error("serve", "--chat-template: %s", cd_errmsg()), -1;
    if ((o->so.kv_events_replay || o->so.kv_events_id || encoding_set) && !o->so.kv_events)
        return cli_error("serve", "%s needs --kv-events",
                         o->so.kv_events_replay   ? "--kv-events-replay"
                             : o->so.kv_events_id ? "--kv-events-id"
                                                  : "--kv-events-encoding"),
               -1;
    if (o->so.kv_events && o->eo.no_prefix_cache)
        return cli_error("serve", "--kv-events needs the prefix cache: not with --no-prefix-cache"), -1;
    bool bind;
    if (o->so.kv_events && kv_wire_endpoint("--kv-events", o->so.kv_events, &bind))
        return cli_error("serve", "%s", cd_errmsg()), -1;
    if (o->so.kv_events_replay && kv_wire_endpoint("--kv-events-replay", o->so.kv_events_replay, &bind))
        return cli_error("serve", "%s", cd_errmsg()), -1;
    return cli_engine_check("serve", &o->eo);
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    if (parse(argc, argv, &o)) return 1;
    if (!o.model) {
        if (cli_ensure_default_model()) return 1;
        o.model = cli_default_model();
    }
    if (server_run(o.model, &o.so, &o.eo)) return cli_error("serve", "%s", cd_errmsg());
    return 0;
}
