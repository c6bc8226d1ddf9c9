#!/usr/bin/env bash
# Batched decode, cinder against llama.cpp on the same device and the same GGUF file: N
# sequences advancing together, one token each per step, for N in 1, 8 and 32.
#   cinder:    cinder bench --agents N --rounds 1 --system-tokens 0 --tool-tokens 16 --gen TG:
#              N requests of 48 tokens submitted together, then decoded by the continuous-
#              batching scheduler; steady decode tok/s = N / the inter-token p50 (one step).
#   llama.cpp: llama_oracle --bench --parallel N --tg TG --vulkan: N sequences of 16 prompt
#              tokens, then TG llama_decode steps of N tokens (llama-server's parallel slots);
#              aggregate decode tok/s. Flash attention off (on lavapipe it crashes llama.cpp's
#              prefill path; docs/PERF.md).
#   scripts/bench_batch.sh [--model M]... [--tg N] [--seqs "1 8 32"]
# Default models: models/tiny.gguf and a one-layer model at the real shapes
# (models/qwen3-30b-a3b-l1.gguf, `cinder mkmodel --preset qwen3-30b-a3b --layers 1`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=() tg=16 seqs="1 8 32"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) models+=("${2:?}"); shift 2 ;;
    --tg) tg=${2:?}; shift 2 ;;
    --seqs) seqs=${2:?}; shift 2 ;;
    *) echo "usage: scripts/bench_batch.sh [--model M]... [--tg N] [--seqs \"1 8 32\"]" >&2; exit 2 ;;
  esac
done
bash "$root/scripts/setup.sh" >/dev/null
bash "$root/scripts/build.sh" release >/dev/null
bash "$root/tests/oracle/build.sh" "$root/build/oracle"
bin=$root/build/cinder oracle=$root/build/oracle/llama_oracle
mkdir -p "$root/models"
if [ ${#models[@]} -eq 0 ]; then
  [ -f "$root/models/tiny.gguf" ] || "$bin" mkmodel --preset tiny --out "$root/models/tiny.gguf" >/dev/null
  l1=$root/models/qwen3-30b-a3b-l1.gguf
  [ -f "$l1" ] || "$bin" mkmodel --preset qwen3-30b-a3b --layers 1 --out "$l1" >/dev/null
  models=("$root/models/tiny.gguf" "$l1")
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for m in "${models[@]}"; do
  for n in $seqs; do
    echo "== $(basename "$m"), $n sequences" >&2
    "$bin" bench --model "$m" --agents "$n" --rounds 1 --system-tokens 0 --tool-tokens 16 --gen "$tg" --json \
      > "$out/$(basename "$m").$n.cinder" || echo "cinder failed" >&2
    GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} "$oracle" "$m" --bench --parallel "$n" --tg "$tg" \
      --repeat 1 --vulkan --flash-attn off 2>/dev/null | grep '^{' > "$out/$(basename "$m").$n.llama" || echo "llama.cpp failed" >&2
  done
done
python3 - "$out" "$seqs" "${models[@]}" <<'PY'
import json, os, sys
out, seqs, models = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
def load(p):
    try:
        return json.loads(open(p).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
print("| model | sequences | cinder decode tok/s (steady) | llama.cpp Vulkan decode tok/s | cinder / llama.cpp |")
print("|---|---|---|---|---|")
for m in models:
    b = os.path.basename(m)
    for n in seqs:
        c, l = load(f"{out}/{b}.{n}.cinder"), load(f"{out}/{b}.{n}.llama")
        cs = c["decode_tok_s_steady"] if c else None
        ls = l["decode_tok_s"] if l else None
        ratio = f"{cs / ls:.2f}x" if cs and ls else "n/a"
        f = lambda v: f"{v:.2f}" if v else "failed"
        print(f"| {b} | {n} | {f(cs)} | {f(ls)} | {ratio} |")
PY
