#!/usr/bin/env bash
# cinder serve through the official `openai` npm client (tests/server/api.test.mjs): servers on
# the tiny preset (every endpoint, streaming, errors, concurrency and cancellation; the disk
# tier's counters on /metrics) and on a scripted tiny model that answers with a tool call; then
# SIGTERM must end each with status 0 (under ASan: with no leak). TEST_FILTER=regex runs only the
# tests whose names match (node --test-name-pattern).
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/server
root=${CINDER_SOURCE_DIR:?}
rm -rf "$tmp"
mkdir -p "$tmp"
model=$tmp/tiny.gguf
"$bin" mkmodel --preset tiny --seed 11 --out "$model" >/dev/null
# a scripted model (mkmodel --script): after the generation prompt's last token ("\n\n", thinking
# off: its server runs with --no-think) it makes a tool call, so the tool-call path runs end to
# end (the script's tokens distinct)
script=$'\n\n<tool_call>\n{"name":"get_weather","arguments":{"city": "Paris"}}\n</tool_call><|im_end|>'
script_model=$tmp/script.gguf
"$bin" mkmodel --preset tiny --seed 12 --script "$script" --out "$script_model" >/dev/null
# a scripted model that carries Qwen3-Coder's template: after its generation prompt's last token
# ("\n") it calls a tool in the XML layout (the parser's leniencies keep the tokens distinct: no
# closing tags but the block's); the server recognises the template from the file
coder_script=$'\n<tool_call><function=get_weather>\n <parameter=days>3</tool_call><|im_end|>'
coder_model=$tmp/coder.gguf
"$bin" mkmodel --preset tiny --seed 13 --script "$coder_script" \
  --chat-template-file "$root/third_party/llama/src/models/templates/Qwen3-Coder.jinja" --out "$coder_model" >/dev/null

source "$root/tests/lib/serve.sh"

# while the weights load the server listens (/health says 503 loading): a request then is a 503
# too, not a crash (the tokenizer it would be checked with is not there yet)
serve_start "$model" loading --ctx 1024
for _ in $(seq 600); do [ -s "$tmp/loading.port" ] && break; sleep 0.01; done
loading_url="http://127.0.0.1:$(cat "$tmp/loading.port")"
if [ "$(curl -s -o /dev/null -w '%{http_code}' "$loading_url/health")" = 503 ]; then
  code=$(curl -s -o "$tmp/loading.reply" -w '%{http_code}' "$loading_url/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}')
  [ "$code" = 503 ] && grep -q 'the model is loading' "$tmp/loading.reply" ||
    { echo "FAIL a request while loading answered $code: $(cat "$tmp/loading.reply")"; cat "$tmp/loading.log"; exit 1; }
  echo "ok   a request while the model loads is a 503"
fi
# /health until it is 200: each 503 on the way says how far the weights' upload has come, a
# fraction that never goes back (how many are seen depends on the machine's speed)
: >"$tmp/loading.health"
for _ in $(seq 3000); do
  code=$(curl -s -o "$tmp/health.body" -w '%{http_code}' "$loading_url/health") || code=000
  echo "$code $(cat "$tmp/health.body" 2>/dev/null)" >>"$tmp/loading.health"
  [ "$code" = 200 ] && break
  sleep 0.01
done
python3 - "$tmp/loading.health" <<'PY' || { cat "$tmp/loading.health"; exit 1; }
import json, sys
last, n = 0.0, 0
for line in open(sys.argv[1]):
    code, _, body = line.strip().partition(" ")
    if code == "000":
        continue  # between connections: nothing answered
    b = json.loads(body)
    if code == "200":
        assert b == {"status": "ok"}, b
        print(f"ok   /health while loading: {n} 503s with a progress fraction in [0, 1] that never went back, then 200")
        sys.exit(0)
    assert code == "503" and b["status"] == "loading", line
    p = b["progress"]
    assert 0.0 <= p <= 1.0 and p >= last, (p, last)
    last, n = p, n + 1
sys.exit("FAIL /health never answered 200")
PY
serve_port loading >/dev/null
serve_stop loading

# main and script guess tokens (speculative decoding): every reply they give is compared with
# one computed without (cinder run, the busy server, requests one at a time)
serve_start "$model" main --ctx 1024 --parallel 8 --api-key test-key --alias tiny-test --spec-tokens 4
# a pool smaller than the context: the engine refuses long prompts; a disk tier with a budget
serve_start "$model" busy --ctx 1024 --parallel 1 --queue 1 --kv-pool-tokens 512 --cache-dir "$tmp/cache-dir" --cache-dir-max-mb 1
serve_start "$script_model" script --ctx 1024 --parallel 2 --spec-tokens 4 --no-think
serve_start "$coder_model" coder --ctx 1024 --parallel 2
main_port=$(serve_port main)
busy_port=$(serve_port busy)
script_port=$(serve_port script)
coder_port=$(serve_port coder)
grep -q "chat template qwen3-coder" "$tmp/coder.log" || { echo "FAIL the coder server does not say it renders qwen3-coder"; exit 1; }

CINDER_URL="http://127.0.0.1:$main_port" CINDER_BUSY_URL="http://127.0.0.1:$busy_port" CINDER_KEY=test-key \
  CINDER_MODEL="$model" CINDER_SCRIPT_URL="http://127.0.0.1:$script_port" CINDER_SCRIPT_MODEL="$script_model" \
  CINDER_SCRIPT="$script" CINDER_CODER_URL="http://127.0.0.1:$coder_port" CINDER_CODER_MODEL="$coder_model" \
  CINDER_CODER_SCRIPT="$coder_script" CINDER_TEST_DIR="$tmp" NODE_PATH="$root/third_party/npm/node_modules" \
  node --test --test-reporter=spec ${TEST_FILTER:+--test-name-pattern="$TEST_FILTER"} "$root/tests/server/api.test.mjs"

# the disk tier's counters and gauges on /metrics (only with --cache-dir), and in /v1/cache
metrics=$(curl -sf "http://127.0.0.1:$busy_port/metrics")
for name in cinder_disk_chunks_read_total cinder_disk_chunks_written_total cinder_disk_rejected_total \
            cinder_disk_evicted_chunks_total cinder_disk_evicted_bytes_total cinder_disk_over_budget_chunks_total \
            cinder_disk_bytes; do
  grep -Eq "^# TYPE $name (counter|gauge)$" <<<"$metrics" && grep -Eq "^$name [0-9]+$" <<<"$metrics" ||
    { echo "FAIL /metrics has no $name"; exit 1; }
done
grep -q "^cinder_disk_budget_bytes 1048576$" <<<"$metrics" || { echo "FAIL /metrics: the disk budget is not 1 MiB"; exit 1; }
curl -sf "http://127.0.0.1:$busy_port/v1/cache" | python3 -c 'import json,sys; d=json.load(sys.stdin)["disk"]; assert d["budget_bytes"] == 1048576 and "evicted_chunks" in d, d' ||
  { echo "FAIL /v1/cache has no disk object"; exit 1; }
curl -sf "http://127.0.0.1:$main_port/metrics" -H "Authorization: Bearer test-key" | grep -q cinder_disk_ &&
  { echo "FAIL /metrics of a server without --cache-dir shows disk counters"; exit 1; }
echo "ok   /metrics and /v1/cache report the disk tier (counters, bytes, the budget) only with --cache-dir"

serve_stop main
serve_stop busy
serve_stop script
serve_stop coder
