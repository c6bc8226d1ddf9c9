#!/usr/bin/env bash
# Three cinder serve replicas on loopback behind haproxy (round robin), nginx (a consistent hash
# of X-Session-Id) and a picker fed by their KV cache events with llm-d's scoring, 12 agents x 6
# rounds each (tests/server/fleet.py). Never skips: a missing haproxy or nginx is a failure (run
# scripts/setup.sh).
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/fleet
for tool in haproxy nginx; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null ||
    { echo "fleet: FAIL: $tool is missing (run scripts/setup.sh)" >&2; exit 1; }
done
export PATH=$PATH:/usr/sbin
rm -rf "$tmp"
mkdir -p "$tmp"
"$bin" mkmodel --preset tiny --seed 11 --out "$tmp/tiny.gguf" >/dev/null
exec /usr/bin/python3 "${CINDER_SOURCE_DIR:?}/tests/server/fleet.py" "$bin" "$tmp/tiny.gguf" "$tmp"
