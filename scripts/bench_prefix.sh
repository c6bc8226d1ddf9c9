#!/usr/bin/env bash
# Prefix reuse, cinder against llama.cpp, on the same GGUF file and the same token sequences.
#   scripts/bench_prefix.sh [--model M | --preset tiny|small] [--scenario NAME]...
#                           [--page-size N] [--vulkan-only | --cpu-only]
#                           [--llama-cache-only | --cache-only] [--out DIR]
# For each scenario (scripts/scenarios/NAME.jsonl; default: multiturn_4800 agent_tool_loop
# rag_documents multi_prefix_groups):
#   1. `cinder bench --scenario NAME --json --dump-prompts FILE`: cinder's radix prefix cache;
#      FILE gets every request's token ids as cinder rendered them ("max_tokens:id,id,...").
#   2. the same with --no-prefix-cache: a full prefill for every request.
#   3. `tests/oracle/llama_oracle --replay FILE`: llama.cpp replaying those very token
#      sequences with its own prefix reuse, llama-server's per-slot prompt cache (one
#      sequence; the longest common prefix with the previous request's tokens stays in the
#      KV), and with --no-cache. On llama.cpp's Vulkan backend (GGML_VK_VISIBLE_DEVICES=0, so
#      it takes lavapipe; flash attention off: it crashes lavapipe, see scripts/bench_peer.sh)
#      and on its CPU backend (2 threads); --vulkan-only / --cpu-only pick one.
# --llama-cache-only skips llama.cpp's no-cache runs, --cache-only every no-cache run: they
# prefill every prompt in full, and on lavapipe llama.cpp's Vulkan backend does that at
# ~30-100 tok/s (multiturn_4800 alone is ~110k prompt tokens: an hour and more).
# Then a table per scenario (prompt, cached and prefilled tokens, TTFT sum, wall time, the
# TTFT ratios) and, for multiturn_4800, the TTFT of turns 1, 2, 5, 10 and 20.
# The model: --model M, or models/<preset>.gguf (default preset tiny), written with
# `cinder mkmodel` on first use. Builds build/cinder (only that target) and the oracle into
# build/oracle (CINDER_ORACLE_DIR overrides) when needed; llama.cpp itself comes from
# scripts/setup.sh. --out DIR keeps every run's JSON there. Exit status: 0 when every run
# produced its JSON (and llama.cpp ran on the backend asked for), 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  echo "usage: scripts/bench_prefix.sh [--model M | --preset tiny|small] [--scenario NAME]... [--page-size N] [--vulkan-only|--cpu-only] [--llama-cache-only|--cache-only] [--out DIR]" >&2
  exit 2
}
model="" preset="" page_size="" do_cpu=1 do_vk=1 keep="" scenarios=() cinder_nocache=1 llama_nocache=1
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=${2:?}; shift 2 ;;
    --preset) preset=${2:?}; shift 2 ;;
    --scenario) scenarios+=("${2:?}"); shift 2 ;;
    --page-size) page_size=${2:?}; shift 2 ;;
    --vulkan-only) do_cpu=0; shift ;;
    --cpu-only) do_vk=0; shift ;;
    --llama-cache-only) llama_nocache=0; shift ;;
    --cache-only) llama_nocache=0 cinder_nocache=0; shift ;;
    --out) keep=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[ -z "$model" ] || [ -z "$preset" ] || { echo "bench_prefix: give --model or --preset, not both" >&2; exit 2; }
[ $do_cpu = 1 ] || [ $do_vk = 1 ] || { echo "bench_prefix: --vulkan-only and --cpu-only exclude each other" >&2; exit 2; }
[ ${#scenarios[@]} -gt 0 ] || scenarios=(multiturn_4800 agent_tool_loop rag_documents multi_prefix_groups)
for s in "${scenarios[@]}"; do
  [ -f "$root/scripts/scenarios/$s.jsonl" ] || { echo "bench_prefix: no scenario $s (scripts/scenarios/$s.jsonl)" >&2; exit 2; }
done

log() { echo "bench_prefix: $*" >&2; }
# cinder: configure once, then build only the cinder target
bin=$root/build/cinder
{ [ -f "$root/build/CMakeCache.txt" ] || cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null; } &&
  cmake --build "$root/build" --target cinder -j "$(nproc 2>/dev/null || echo 2)" >/dev/null ||
  { log "building cinder failed"; exit 1; }
oracle_dir=${CINDER_ORACLE_DIR:-$root/build/oracle}
"$root/tests/oracle/build.sh" "$oracle_dir" || { log "building the oracle failed"; exit 1; }
oracle=$oracle_dir/llama_oracle

if [ -z "$model" ]; then
  preset=${preset:-tiny}
  case "$preset" in tiny|small) ;; *) usage ;; esac
  model=$root/models/$preset.gguf
  if [ ! -f "$model" ]; then
    mkdir -p "$root/models"
    "$bin" mkmodel --preset "$preset" --out "$model.tmp" >&2 && mv "$model.tmp" "$model" || { log "mkmodel failed"; exit 1; }
  fi
fi
[ -f "$model" ] || { log "no such model file: $model"; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0

# run LABEL OUTFILE [env and args...]: the command's JSON line into OUTFILE, or says why there is none
run() {
  local label=$1 file=$2; shift 2
  local t0=$SECONDS rc
  log "$label ..."
  "$@" >"$file.raw" 2>"$file.err"; rc=$?
  grep '^{' "$file.raw" | tail -n 1 >"$file"
  if [ $rc -ne 0 ] || [ ! -s "$file" ]; then
    log "$label failed (exit $rc$( [ $rc -gt 128 ] && echo ", signal $((rc - 128))" )); last lines of its stderr:"
    tail -n 15 "$file.err" | sed 's/^/  | /' >&2
    rm -f "$file"
    status=1
    return 1
  fi
  log "$label done in $((SECONDS - t0)) s"
}

# the llama.cpp runs of one scenario: BACKEND (cpu|vulkan), cache and no-cache
run_llama() {
  local s=$1 be=$2 prompts=$3
  local args=("$oracle" "$model" --replay "$prompts")
  local envs=(env -u GGML_VK_VISIBLE_DEVICES)
  if [ "$be" = vulkan ]; then
    envs=(env GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0})
    args+=(--vulkan --flash-attn off)
  fi
  local modes=(cache)
  [ $llama_nocache = 1 ] && modes+=(nocache)
  for mode in "${modes[@]}"; do
    local extra=() f=$out/$s.llama-$be-$mode.json
    [ $mode = nocache ] && extra=(--no-cache)
    run "$s: llama.cpp $be ($([ $mode = cache ] && echo prompt cache || echo no cache))" "$f" \
      "${envs[@]}" "${args[@]}" "${extra[@]}" || continue
    grep -q "\"backend\": \"$be\"" "$f" || { log "$s: llama.cpp $be run did not run on $be (see \"backend\" in $f): it fell back"; status=1; }
  done
}

log "model $model"
for s in "${scenarios[@]}"; do
  prompts=$out/$s.prompts
  cargs=("$bin" bench --model "$model" --scenario "$s" --json ${page_size:+--page-size "$page_size"})
  run "$s: cinder (prefix cache)" "$out/$s.cinder-cache.json" "${cargs[@]}" --dump-prompts "$prompts"
  [ $cinder_nocache = 1 ] && run "$s: cinder (no prefix cache)" "$out/$s.cinder-nocache.json" "${cargs[@]}" --no-prefix-cache
  if [ ! -s "$prompts" ]; then
    log "$s: no prompts dumped by cinder; skipping llama.cpp"
    status=1
    continue
  fi
  [ $do_vk = 1 ] && run_llama "$s" vulkan "$prompts"
  [ $do_cpu = 1 ] && run_llama "$s" cpu "$prompts"
done
if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$out"/* "$keep"/ && log "raw output kept in $keep"; fi

python3 - "$out" "$model" "${scenarios[@]}" <<'EOF'
import json, os, sys
out, model, scenarios = sys.argv[1], sys.argv[2], sys.argv[3:]

def load(s, name):
    try:
        with open(os.path.join(out, f"{s}.{name}.json")) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None

def fmt(x, spec=",.1f"):
    return "–" if x is None else format(x, spec)

def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "–"

runs = [("cinder-cache", "cinder, prefix cache (radix)"), ("cinder-nocache", "cinder, no prefix cache"),
        ("llama-vulkan-cache", "llama.cpp Vulkan, prompt cache (1 slot)"), ("llama-vulkan-nocache", "llama.cpp Vulkan, no cache"),
        ("llama-cpu-cache", "llama.cpp CPU, prompt cache (1 slot)"), ("llama-cpu-nocache", "llama.cpp CPU, no cache")]

print(f"\nmodel: {model}")
for s in scenarios:
    res = {k: load(s, k) for k, _ in runs}
    c = res["cinder-cache"]
    head = f"\n### {s}"
    if c:
        head += f" ({len(c['requests'])} requests, cinder page size {c.get('page_size')}, KV pool {c.get('kv_pool_tokens')} tokens; cinder device {c.get('device')})"
    print(head + "\n")
    print("| engine | prompt tok | cached tok | hit % | TTFT sum ms | wall ms | TTFT sum / cinder's |")
    print("|---|---|---|---|---|---|---|")
    c_ttft = c["totals"]["ttft_ms_sum"] if c else None
    for k, label in runs:
        r = res[k]
        if r is None:
            if os.path.exists(os.path.join(out, f"{s}.{k}.json.err")):
                print(f"| {label} | failed | | | | | |")
            continue
        t = r["totals"]
        be = k.split("-")[1]
        if k.startswith("llama") and r.get("backend") != be:
            label += f" [really ran on {r.get('backend')}]"
        hit = 100.0 * t["cached_tokens"] / t["prompt_tokens"] if t["prompt_tokens"] else 0.0
        print(f"| {label} | {t['prompt_tokens']:,} | {t['cached_tokens']:,} | {hit:.1f} | {t['ttft_ms_sum']:,.1f} | "
              f"{t['wall_ms']:,.1f} | {ratio(t['ttft_ms_sum'], c_ttft) if k != 'cinder-cache' else ''} |")
    print()
    n = res["cinder-nocache"]
    if c and n:
        print(f"- cinder no prefix cache / cinder prefix cache, TTFT sum: {ratio(n['totals']['ttft_ms_sum'], c_ttft)}"
              f" (wall {ratio(n['totals']['wall_ms'], c['totals']['wall_ms'])})")
    for be in ("vulkan", "cpu"):
        lc, ln = res[f"llama-{be}-cache"], res[f"llama-{be}-nocache"]
        if lc and c:
            print(f"- llama.cpp {be} (prompt cache) / cinder (prefix cache), TTFT sum: {ratio(lc['totals']['ttft_ms_sum'], c_ttft)}"
                  f" (wall {ratio(lc['totals']['wall_ms'], c['totals']['wall_ms'])})")
        if lc and ln:
            print(f"- llama.cpp {be} no cache / prompt cache, TTFT sum: {ratio(ln['totals']['ttft_ms_sum'], lc['totals']['ttft_ms_sum'])}")
        if lc and c:
            same = sum(a.get("generated") == b.get("generated") for a, b in zip(lc["requests"], c["requests"]))
            print(f"- llama.cpp {be} greedy output identical to cinder's on {same}/{len(c['requests'])} requests")

    if s == "multiturn_4800" and c:
        cols = [(k, label) for k, label in runs if res[k]]
        print(f"\n#### {s}: TTFT per turn (ms; cached tokens in parentheses)\n")
        print("| turn | prompt tok | " + " | ".join(label for _, label in cols) + " |")
        print("|---|---|" + "---|" * len(cols))
        for turn in (1, 2, 5, 10, 20):
            if turn > len(c["requests"]):
                continue
            cells = []
            for k, _ in cols:
                reqs = res[k]["requests"]
                if turn > len(reqs):
                    cells.append("–")
                    continue
                q = reqs[turn - 1]
                cells.append(f"{q['ttft_ms']:,.1f} ({q['cached_tokens']:,})")
            print(f"| {turn} | {c['requests'][turn - 1]['prompt_tokens']:,} | " + " | ".join(cells) + " |")
EOF
exit $status
