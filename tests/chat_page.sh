#!/usr/bin/env bash
# The chat page at / (server/page/, issue 51): tests/server/page.test.mjs against cinder serve on
# the tiny preset and on a scripted model whose reply is hostile markup, first over plain HTTP
# (content types, the Content-Security-Policy, no external address in the script), then in
# Debian's Chromium driven headless by playwright-core (streaming, stop, the per-turn cache
# figure against /v1/cache, markup shown as text, edit and regenerate). The last conversation's
# screenshot is left at $CINDER_TEST_TMP/chat_page/conversation.png.
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/chat_page
root=${CINDER_SOURCE_DIR:?}
rm -rf "$tmp"
mkdir -p "$tmp"
model=$tmp/tiny.gguf
"$bin" mkmodel --preset tiny --seed 11 --out "$model" >/dev/null
# after the generation prompt's last token ("\n\n", thinking off) the reply is markup that would
# run script if the page let it through
# (a scripted model's tokens must be distinct: one tag of each kind)
script=$'\n\n<img src=x onerror=alert(1)> <script>go() **bold**<|im_end|>'
hostile=$tmp/hostile.gguf
"$bin" mkmodel --preset tiny --seed 12 --script "$script" --out "$hostile" >/dev/null

pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
serve() { # name, model, then flags
  local name=$1 file=$2; shift 2
  "$bin" serve --model "$file" --port 0 --port-file "$tmp/$name.port" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  echo $! >"$tmp/$name.pid"
}
port_of() {
  for _ in $(seq 600); do
    if [ -s "$tmp/$1.port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/$1.port")/health" >/dev/null; then
      cat "$tmp/$1.port"; return 0
    fi
    kill -0 "$(cat "$tmp/$1.pid")" 2>/dev/null || { cat "$tmp/$1.log" >&2; return 1; }
    sleep 0.5
  done
  echo "server $1 did not become healthy" >&2; return 1
}
serve main "$model" --ctx 4096 --parallel 2 --api-key page-key
serve hostile "$hostile" --ctx 1024 --no-think
main=$(port_of main) hostile_port=$(port_of hostile)
CINDER_PAGE_URL="http://127.0.0.1:$main" CINDER_HOSTILE_URL="http://127.0.0.1:$hostile_port" CINDER_PAGE_KEY=page-key \
  CINDER_PAGE_SHOT="$tmp/conversation.png" NODE_PATH="$root/third_party/npm/node_modules" \
  node --test "$root/tests/server/page.test.mjs"
for name in main hostile; do
  pid=$(cat "$tmp/$name.pid") rc=0
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  [ $rc -eq 0 ] || { echo "FAIL server $name exited with status $rc" >&2; cat "$tmp/$name.log" >&2; exit 1; }
done
echo "chat page: all checks passed"
