#!/usr/bin/env bash
# A short agent load through cinder serve (scripts/serve_agents.mjs, the official openai client):
# 8 agents x 3 rounds of a tool loop on a shared 2,000-token system prompt, streamed. Every
# request must succeed, replies replayed one at a time must equal the batched ones, and /v1/cache
# must show nothing running, pinned or leaked afterwards. The full 32 x 10 run is a benchmark
# (docs/PERF.md). Release build only (scripts/test.sh): lavapipe under ASan is too slow for it;
# tests/server_api.sh covers concurrency and cancellation under ASan.
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/server_load
root=${CINDER_SOURCE_DIR:?}
rm -rf "$tmp"
mkdir -p "$tmp"
model=$tmp/tiny.gguf
"$bin" mkmodel --preset tiny --seed 13 --out "$model" >/dev/null

source "$root/tests/lib/serve.sh"
serve_start "$model" serve --ctx 4096 --parallel 32 --kv-pool-tokens 40960
port=$(serve_port serve)

node "$root/scripts/serve_agents.mjs" --url "http://127.0.0.1:$port" --agents 8 --rounds 3 \
  --system-tokens 2000 --gen 12 --check-serial 8 --check-cache

serve_stop serve
