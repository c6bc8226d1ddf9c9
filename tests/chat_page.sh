#!/usr/bin/env bash
# The chat page at / (server/page/, issue 51): tests/server/page.test.mjs against cinder serve on
# the tiny preset and on a scripted model whose reply is hostile markup, first over plain HTTP
# (content types, the Content-Security-Policy, no external address in the script), then in
# Debian's Chromium driven headless by playwright-core (streaming, stop, the per-turn cache
# figure against /v1/cache, markup shown as text, edit and regenerate, four turns of a scripted
# model with its chart). That conversation's screenshot is left at
# $CINDER_TEST_TMP/chat_page/conversation.png.
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

# a readable reply for the screenshot (docs/img/chat_page.png is one such, curated)
show_script=$'\n\nLyon grew where two rivers meet: the **Rhone** and Saone.\n\n```\nrivers = 2\n```<|im_end|>'
show=$tmp/show.gguf
"$bin" mkmodel --preset tiny --seed 14 --script "$show_script" --out "$show" >/dev/null

source "$root/tests/lib/serve.sh"
serve_start "$model" main --ctx 4096 --parallel 2 --api-key page-key
serve_start "$hostile" hostile --ctx 1024 --no-think
serve_start "$show" show --ctx 2048 --no-think --host 0.0.0.0 # all interfaces: the page is the same
main=$(serve_port main) hostile_port=$(serve_port hostile) show_port=$(serve_port show)
CINDER_PAGE_URL="http://127.0.0.1:$main" CINDER_HOSTILE_URL="http://127.0.0.1:$hostile_port" \
  CINDER_SHOW_URL="http://127.0.0.1:$show_port" CINDER_PAGE_KEY=page-key \
  CINDER_PAGE_SHOT="$tmp/conversation.png" NODE_PATH="$root/third_party/npm/node_modules" \
  node --test "$root/tests/server/page.test.mjs"
serve_stop main
serve_stop hostile
serve_stop show
echo "chat page: all checks passed"
