#!/usr/bin/env bash
# cinder against llama.cpp, side by side on the same device and the same GGUF file:
# `cinder bench` (Vulkan) and llama.cpp's Vulkan and CPU backends (scripts/bench_peer.sh),
# then one table with the ratios. This is the script to run on a lent GPU machine.
#   scripts/bench.sh [--preset P[:QUANT]]... [--pp N] [--tg N] [--repeat N]
# Presets default to tiny and small (lavapipe-sized); on a GPU add --preset qwen3-30b-a3b.
# Models are written to models/<preset>-<quant>.gguf on first use (the 30B preset needs
# ~18 GB of disk and some minutes). Set-up and the release build run first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
presets=() pp=512 tg=128 repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) presets+=("${2:?}"); shift 2 ;;
    --pp) pp=${2:?}; shift 2 ;;
    --tg) tg=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    *) echo "usage: scripts/bench.sh [--preset P[:QUANT]]... [--pp N] [--tg N] [--repeat N]" >&2; exit 2 ;;
  esac
done
[ ${#presets[@]} -gt 0 ] || presets=(tiny small)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" release >/dev/null
bin=$root/build/cinder
mkdir -p "$root/models"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for spec in "${presets[@]}"; do
  preset=${spec%%:*} quant=${spec#*:}
  [ "$quant" != "$spec" ] || quant=""
  model=$root/models/$preset${quant:+-$quant}.gguf
  if [ ! -f "$model" ]; then
    "$bin" mkmodel --preset "$preset" ${quant:+--quant "$quant"} --out "$model.tmp"
    mv "$model.tmp" "$model"
  fi
  echo "== $preset${quant:+ ($quant)}: $model"
  "$bin" bench --model "$model" --prompt-tokens "$pp" --gen "$tg" --repeat "$repeat" --json | tee "$out/$preset.cinder"
  bash "$root/scripts/bench_peer.sh" "$model" --pp "$pp" --tg "$tg" --repeat "$repeat" | tee "$out/$preset.peer" || true
done

python3 - "$out" "$pp" "$tg" "${presets[@]}" <<'EOF'
import json, os, sys
out, pp, tg, presets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def lines(p):
    try:
        return [json.loads(l) for l in open(p) if l.startswith("{")]
    except OSError:
        return []
print(f"\n| model | engine | pp{pp} tok/s | tg{tg} tok/s | cinder / this (pp, tg) |")
print("|---|---|---|---|---|")
for spec in presets:
    p = spec.split(":")[0]
    c = lines(os.path.join(out, p + ".cinder"))
    if not c:
        print(f"| {spec} | cinder | failed | failed | |")
        continue
    c = c[0]
    print(f"| {spec} | cinder (Vulkan, {c['device']}) | {c['prefill_tok_s']:.2f} | {c['decode_tok_s']:.2f} | |")
    for r in lines(os.path.join(out, p + ".peer")):
        name = f"llama.cpp {r.get('backend', '?')} ({r.get('device', '?')})"
        rp = c["prefill_tok_s"] / r["prefill_tok_s"] if r.get("prefill_tok_s") else float("nan")
        rt = c["decode_tok_s"] / r["decode_tok_s"] if r.get("decode_tok_s") else float("nan")
        print(f"| {spec} | {name} | {r.get('prefill_tok_s', 0):.2f} | {r.get('decode_tok_s', 0):.2f} | {rp:.2f}x, {rt:.2f}x |")
EOF
