#!/usr/bin/env bash
# The Quick start's main job: set up, build, and run cinder on the default model (a
# synthetic Qwen3-MoE written on first use). Extra arguments go to `cinder run`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" release >/dev/null
if [ $# -eq 0 ]; then
  set -- --prompt "<|im_start|>user
Write a haiku about a small fire.<|im_end|>
<|im_start|>assistant
" --n 48
fi
exec "$root/build/cinder" run "$@"
