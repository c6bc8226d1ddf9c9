#!/usr/bin/env bash
# cinder serve against llama.cpp (scripts/peer_server.mjs, node-llama-cpp) through the same OpenAI
# API on the agent workload (scripts/serve_agents.mjs): same file, same device, same run, one
# JSON line per server and agent count.
#
#   scripts/bench_serve.sh [--model M] [--agents "1 8 32"] [--rounds 3] [--system-tokens 2000] [--gen 16]
#                          [--no-prefix-cache] [--peer-gpu vulkan|cpu]
#
# Both servers get the same prompts (the peer renders history as generated, like cinder) and a
# warm-up request first. --no-prefix-cache runs both without their prompt caches (cinder
# --no-prefix-cache; the peer --no-prompt-cache, llama-server's "cache_prompt": false).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/models/tiny.gguf agents="1 8 32" rounds=3 sys=2000 gen=16 nocache="" peer_gpu=vulkan
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --agents) agents=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --system-tokens) sys=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --no-prefix-cache) nocache=--no-prefix-cache; shift ;;
    --peer-gpu) peer_gpu=$2; shift 2 ;;
    *) echo "usage: scripts/bench_serve.sh [--model M] [--agents \"1 8 32\"] [--rounds R] [--system-tokens S] [--gen G] [--no-prefix-cache] [--peer-gpu vulkan|cpu]" >&2; exit 2 ;;
  esac
done
bin=$root/build/cinder
[ -x "$bin" ] || bash "$root/scripts/build.sh" release >/dev/null
[ -f "$model" ] || "$bin" mkmodel --preset tiny --out "$model" >/dev/null
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
max=0; for a in $agents; do [ "$a" -gt "$max" ] && max=$a; done
ctx=$((sys + rounds * 200 + 512))

wait_up() { # port file: waits for /health 200
  for _ in $(seq 1200); do
    [ -s "$1" ] && curl -sf "http://127.0.0.1:$(cat "$1")/health" >/dev/null && return 0
    kill -0 $pid 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

bench() { # name: warm up, then each agent count
  local port
  port=$(cat "$tmp/port")
  curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"warm up","max_tokens":4}' >/dev/null
  local out
  for a in $agents; do
    # serve_agents exits non-zero when requests failed, after printing its JSON: keep the JSON
    out=$(node "$root/scripts/serve_agents.mjs" --url "http://127.0.0.1:$port" --agents "$a" \
      --rounds "$rounds" --system-tokens "$sys" --gen "$gen" --json) || true
    echo "{\"server\":\"$1\",\"result\":${out:-null}}"
  done
}

"$bin" serve --model "$model" --port 0 --port-file "$tmp/port" --ctx "$ctx" --parallel "$max" \
  --kv-pool-tokens $((ctx * (max + 2))) $nocache >"$tmp/cinder.log" 2>&1 &
pid=$!
wait_up "$tmp/port" || { cat "$tmp/cinder.log" >&2; exit 1; }
bench "cinder${nocache:+ (no prefix cache)}"
kill -TERM $pid; wait $pid || true
rm -f "$tmp/port"

node "$root/scripts/peer_server.mjs" --model "$model" --port 0 --port-file "$tmp/port" --parallel "$max" --ctx "$ctx" \
  --gpu "$peer_gpu" --as-generated ${nocache:+--no-prompt-cache} >"$tmp/peer.log" 2>&1 &
pid=$!
wait_up "$tmp/port" || { cat "$tmp/peer.log" >&2; exit 1; }
bench "llama.cpp (node-llama-cpp $peer_gpu)${nocache:+ (no prompt cache)}"
kill $pid; wait $pid 2>/dev/null || true
pid=""
