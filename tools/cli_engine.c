#include "tools/cli_engine.h"

#include "tools/cli.h"

int cli_engine_flag(const char *cmd, int argc, char **argv, int *i, engine_opts *eo) {
    if (cli_flag(argv, *i, "--no-prefix-cache")) return eo->no_prefix_cache = true, 1;
    int mem = cli_memory(argc, argv, i, eo);
    if (mem) return mem;
    const char *a = argv[*i], *v = NULL;
    int bad = 0;
    if (cli_value(argc, argv, i, "--ctx", &v)) bad = v && cli_u32("--ctx", v, &eo->n_ctx);
    else if (cli_value(argc, argv, i, "--kv-pool-tokens", &v))
        bad = v && cli_u32("--kv-pool-tokens", v, &eo->pool_tokens);
    else if (cli_value(argc, argv, i, "--page-size", &v)) bad = v && cli_u32("--page-size", v, &eo->page_tokens);
    else if (cli_value(argc, argv, i, "--spec-tokens", &v)) bad = v && cli_u32("--spec-tokens", v, &eo->spec_tokens);
    else if (cli_value(argc, argv, i, "--host-cache-mb", &v))
        bad = v && cli_u32("--host-cache-mb", v, &eo->host_cache_mb);
    else if (cli_value(argc, argv, i, "--cache-dir", &v)) eo->cache_dir = v;
    else if (cli_value(argc, argv, i, "--cache-dir-max-mb", &v)) {
        uint32_t mb = 0;
        bad = v && cli_cache_dir_max_mb(cmd, v, &mb);
        eo->cache_dir_max_bytes = (uint64_t)mb << 20;
    } else return 0;
    if (!v) return cli_error(cmd, "%s needs a value", a), -1;
    return bad ? -1 : 1;
}

int cli_engine_check(const char *cmd, const engine_opts *eo) {
    if (eo->page_tokens > 256) return cli_error(cmd, "--page-size is at most 256"), -1;
    if (eo->spec_tokens > ENGINE_SPEC_MAX) return cli_error(cmd, "--spec-tokens is at most %d", ENGINE_SPEC_MAX), -1;
    if (eo->no_prefix_cache && (eo->cache_dir || eo->host_cache_mb))
        return cli_error(cmd, "%s needs the prefix cache: not with --no-prefix-cache",
                         eo->cache_dir ? "--cache-dir" : "--host-cache-mb N (N > 0)"),
               -1;
    if (eo->cache_dir_max_bytes && !eo->cache_dir)
        return cli_error(cmd, "--cache-dir-max-mb needs --cache-dir DIR"), -1;
    return 0;
}
