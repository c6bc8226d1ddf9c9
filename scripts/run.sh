#!/usr/bin/env bash
# The Quick start's main job: set up, build, and chat with cinder on the default model (a
# synthetic Qwen3-MoE written on first use). Type a message per line; after each reply a line
# shows prompt tokens, tokens served from the prefix cache, TTFT and decode speed. Ctrl-D
# quits. Extra arguments go to `cinder chat` (e.g. --no-prefix-cache, --system TEXT, --n 64).
# Lines piped into stdin are read as the user's messages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" release >/dev/null
exec "$root/build/cinder" chat "$@"
