#!/usr/bin/env bash
# cinder serve --kv-events on the tiny preset, checked by a strict subscriber in vLLM's schema
# (tests/server/kv_events.py: Debian's python3-zmq and python3-msgpack, run by Debian's python).
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/kv_events
rm -rf "$tmp"
mkdir -p "$tmp"
"$bin" mkmodel --preset tiny --seed 11 --out "$tmp/tiny.gguf" >/dev/null
exec /usr/bin/python3 "${CINDER_SOURCE_DIR:?}/tests/server/kv_events.py" "$bin" "$tmp/tiny.gguf" "$tmp"
