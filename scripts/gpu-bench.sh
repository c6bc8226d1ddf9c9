#!/usr/bin/env bash
# One command for a machine with a real GPU (and nothing installed but what the repo's set-up
# installs): set-up, release build, the model, then side by side on the same file
#   cinder profile --device      the device card (bandwidth, transfers, FMA/int8 rates, limits)
#   cinder profile               per-op time, bytes, FLOPs, roofline (+ a Perfetto trace), and
#                                at --batch N for the batched decode step
#   cinder bench                 pp/tg tok/s (and with --int-dot on: the integer family)
#   llama.cpp (node-llama-cpp)   its Vulkan build on the same file (scripts/bench_peer.sh)
#   cinder bench --agents N      batched decode: N agents one at a time, then all N together
#   cinder.base (--bundle)       a bundle made with --baseline REV: that cinder and this one timed
#                                alternately (bench, batched decode, profile), before/after
#   --spec                       speculative decoding (bench --spec-tokens 0, 4, 8) on a scripted
#                                model of the same preset whose reply copies its prompt (every
#                                guess right: what a pass of 5 or 9 rows buys on this GPU)
#   --score                      scoring a prompt (echo + logprobs: bench --prompt-logprobs 1, every
#                                position's log-probability) against llama.cpp's all-logits prefill
#                                (llama_oracle --bench --score), pp tokens each
#   --tests                      the test programs on this device (kernels against the CPU
#                                reference, the model, batch and cache invariance)
#   --shapes                     the decode step's profile over shapes of the few-token matmul
#                                kernels (--few-shape at --batch N agents, --one-shape at batch 1)
#                                and of the batched lm_head (--head-shape), and the prefill's over
#                                tiles of the tiled kernel (--big-tile):
#                                shapes.md tabulates step and per-op times to choose the defaults
#                                (~40 profile runs: --shapes-only does them and the device card
#                                alone, to fit one call of a lent machine)
# and writes every table into one directory ($OUT if set, else gpu-bench-<date>/), ending with
# summary.md (the ratios). On lavapipe try it with --preset small (the default is the real
# model, qwen3-30b-a3b at q4_k_m: 18.6 GB, written in 213 s on 16 cores).
# --bundle DIR: on a machine with a GPU driver but no network or packages, the binaries and
# libraries scripts/gpu-bundle.sh packed into DIR instead of set-up and a build (as root: it
# unpacks the Vulkan loader's packages into /).
#   scripts/gpu-bench.sh [--preset P[:QUANT]] [--layers N] [--pp N] [--tg N] [--repeat N]
#                        [--profile-gen D] [--batch B] [--agents N] [--spec] [--score] [--tests]
#                        [--shapes | --shapes-only]
#                        [--bundle DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
preset=qwen3-30b-a3b quant=q4_k_m layers="" pp=512 tg=128 repeat=3 pgen=16 batch=1 agents=8 tests=0 shapes=0 bundle="" spec=0 score=0
only=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) p=${2:?}; preset=${p%%:*}; [ "${p#*:}" = "$p" ] || quant=${p#*:}; shift 2 ;;
    --layers) layers=${2:?}; shift 2 ;;
    --pp) pp=${2:?}; shift 2 ;;
    --tg) tg=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    --profile-gen) pgen=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --agents) agents=${2:?}; shift 2 ;;
    --tests) tests=1; shift ;;
    --spec) spec=1; shift ;;
    --score) score=1; shift ;;
    --shapes) shapes=1; shift ;;
    --shapes-only) shapes=1 only=1; shift ;;
    --bundle) bundle=$(cd "${2:?}" && pwd); shift 2 ;;
    *) usage ;;
  esac
done
out=${OUT:-$root/gpu-bench-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"
if [ -n "$bundle" ]; then
  b=$(mktemp -d)
  tar -C "$b" -xJf "$bundle/bundle.tar.xz"
  for f in "$bundle"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CINDER_TOKENIZER_DIR=$b/tok
  for j in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
    [ -n "${VK_DRIVER_FILES:-}" ] || { [ -f "$j" ] && export VK_DRIVER_FILES=$j; }
  done
  bin=$b/bin/cinder tests_dir=$b/bin/tests base_bin=""
  [ -x "$b/bin/cinder.base" ] && base_bin=$b/bin/cinder.base
  peer() { "$b/bin/llama_oracle" "$model" --bench --pp "$pp" --tg "$tg" --repeat "$repeat" --vulkan --libdir "$b/llama" "$@"; }
else
  bash "$root/scripts/setup.sh"
  bash "$root/scripts/build.sh" release >/dev/null
  bin=$root/build/cinder tests_dir=$root/build/tests base_bin=""
  peer() { bash "$root/scripts/bench_peer.sh" "$model" --pp "$pp" --tg "$tg" --repeat "$repeat" --vulkan-only "$@"; }
fi
mkdir -p "$root/models"
model=$root/models/$preset-$quant${layers:+-l$layers}.gguf
if [ ! -f "$model" ]; then
  "$bin" mkmodel --preset "$preset" --quant "$quant" ${layers:+--layers "$layers"} --threads "$(nproc)" --out "$model.tmp"
  mv "$model.tmp" "$model"
fi
echo "== $(date -u +%FT%TZ) $model -> $out"
{ uname -a; "$bin" info "$model" | head -n 20; } >"$out/machine.txt" 2>&1 || true

run() { # name, command...: stdout to $out/name, stderr to $out/name.err, shown as it goes
  local name=$1; shift
  echo "== $name: $*"
  "$@" 2>"$out/$name.err" | tee "$out/$name" || { echo "gpu-bench: $name failed (see $out/$name.err)" >&2; return 1; }
}
status=0
run device.txt "$bin" profile --device || status=1
run device.json "$bin" profile --device --json >/dev/null || status=1
if [ "$only" = 0 ]; then
run profile.txt "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$batch" \
  --trace "$out/profile.trace.json" || status=1
run profile.json "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$batch" --json >/dev/null || status=1
run bench.json "$bin" bench --model "$model" --prompt-tokens "$pp" --gen "$tg" --repeat "$repeat" --json || status=1
# the integer family (docs/kernels/xq8.md): whether it earns its place as this device's default
run bench-int.json "$bin" bench --model "$model" --prompt-tokens "$pp" --gen "$tg" --repeat "$repeat" --int-dot on \
  --json || status=1
run profile-int.txt "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$batch" --int-dot on \
  || status=1
# the batched decode step's ops (the agents' case): few-token matmuls, attention over 8 tables
if [ "$agents" -gt 1 ] && [ "$batch" != "$agents" ]; then
  run profile-b$agents.txt "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" \
    --batch "$agents" || status=1
fi
run peer.json peer || status=1
fi
if [ "$shapes" = 1 ]; then # BN,BM,KL of the 2-16-token kernel at batch N, then BM,KL of the one-token kernel
  for s in 8,8,4 8,4,8 8,8,8 8,16,4 8,32,4 8,2,16 4,8,4 4,4,8 4,8,8 2,4,8 2,8,8 1,4,8 4,16,4,2 8,16,4,2; do
    "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$agents" --few-shape $s \
      >"$out/shape-b$agents-${s//,/x}.txt" 2>>"$out/shapes.err" || status=1
  done
  for s in 4,8 8,8 2,16 8,4 4,16 16,8 1,32 8,4,2 8,8,2; do
    "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch 1 --one-shape $s \
      >"$out/shape-b1-${s//,/x}.txt" 2>>"$out/shapes.err" || status=1
  done
  # BN,BM,KL of a GPU's lm_head over 2-16 tokens (the batched decode step's)
  for h in 8,8,4 8,16,2 8,16,4 8,32,2 16,8,4 8,4,8 4,16,4 8,16,4,2 8,32,4,4 16,16,4,2; do
    "$bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$agents" --head-shape $h \
      >"$out/head-b$agents-${h//,/x}.txt" 2>>"$out/shapes.err" || status=1
  done
  # BM,BN,BK,TM,TN of the tiled kernel: the pp-token prefill (dense projections, busy experts)
  for t in 64,64,32,4,4 64,64,16,8,8 128,64,16,8,4 64,128,16,4,8 128,64,32,8,8 128,128,16,8,8 128,128,32,8,8; do
    "$bin" profile --model "$model" --prompt-tokens "$pp" --gen 1 --big-tile $t \
      >"$out/tile-${t//,/x}.txt" 2>>"$out/shapes.err" || status=1
  done
  python3 - "$out" >"$out/shapes.md" <<'PY'
import glob, os, re, sys
def table(title, pattern, phase, ops):  # one row per profile file: its phase's step and ops' us
    print(f"\n| {title} | {phase} step ms | " + " | ".join(o + " us" for o in ops) + " |")
    print("|---" * (2 + len(ops)) + "|")
    for f in sorted(glob.glob(os.path.join(sys.argv[1], pattern))):
        name = re.match(pattern.replace("*", "(.*)"), os.path.basename(f)).group(1)
        text = open(f).read().split(f"\n{phase}:", 1)
        if len(text) < 2: print(f"| {name} | failed |"); continue
        part = text[1].split("\ndecode:", 1)[0] if phase == "prefill" else text[1]
        step = re.search(r"([\d.]+) ms of GPU time per step", part)
        us = {l.split()[0]: l.split()[5] for l in part.splitlines() if l.strip() and l.split()[0] in ops}
        print(f"| {name.replace('x', ',')} | {step.group(1) if step else '?'} | " + " | ".join(us.get(o, "-") for o in ops) + " |")
dec = ("attn_q", "attn_k", "attn_output", "ffn_gate_inp", "ffn_gate_up_exps", "ffn_down_exps", "output")
table("batch-shape (BN,BM,KL[,TM])", "shape-b*.txt", "decode", dec)
table("batch-lm_head shape (BN,BM,KL[,TM])", "head-b*.txt", "decode", ("output",))
table("prefill tile BM,BN,BK,TM,TN", "tile-*.txt", "prefill",
      ("attn_q", "attn_output", "ffn_gate_inp", "ffn_gate_up_exps", "ffn_down_exps", "moe_route_group"))
PY
  cat "$out/shapes.md"
fi
agents_run() { # cinder binary, concurrency
  "$1" bench --model "$model" --agents "$agents" --rounds 1 --system-tokens "$pp" --tool-tokens 64 \
    --gen "$tg" --concurrency "$2" --json
}
if [ "$agents" -gt 0 ] && [ "$only" = 0 ]; then
  run agents-c1.json agents_run "$bin" 1 || status=1
  run agents-cN.json agents_run "$bin" "$agents" || status=1
fi
if [ "$spec" = 1 ]; then # a reply that copies its prompt: every guess kept (PERF.md, session 31)
  words=" alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon alpha"
  spec_model=$root/models/$preset-$quant${layers:+-l$layers}-cycle.gguf
  [ -f "$spec_model" ] || { "$bin" mkmodel --preset "$preset" --quant "$quant" ${layers:+--layers "$layers"} --threads "$(nproc)" \
    --script "$words" --out "$spec_model.tmp" && mv "$spec_model.tmp" "$spec_model"; } || status=1
  for k in 0 4 8; do
    run spec-$k.json "$bin" bench --model "$spec_model" --prompt-text "$words" --gen "$tg" --repeat "$repeat" \
      --spec-tokens $k --json || status=1
  done
fi
if [ "$score" = 1 ]; then # every position's log-probability: cinder's 64 rows a pass against llama.cpp's all logits
  run score.json "$bin" bench --model "$model" --prompt-tokens "$pp" --gen 1 --repeat "$repeat" --prompt-logprobs 1 --json || status=1
  tg=1 run peer-score.json peer --score || status=1
fi
if [ -n "$base_bin" ] && [ "$only" = 0 ]; then # before/after on this machine: base, this, base, this
  echo "baseline: $(cat "$b/bin/cinder.base.rev" 2>/dev/null)" >"$out/baseline.txt"
  for i in 1 2; do
    for v in base this; do
      c=$bin; [ $v = base ] && c=$base_bin
      "$c" bench --model "$model" --prompt-tokens "$pp" --gen "$tg" --repeat 1 --json >>"$out/ab-bench-$v.jsonl" 2>>"$out/ab.err" || status=1
      [ "$agents" -gt 0 ] && for cc in 1 "$agents"; do
        agents_run "$c" "$cc" >>"$out/ab-agents-$v-c$cc.jsonl" 2>>"$out/ab.err" || status=1
      done
    done
  done
  "$base_bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$batch" >"$out/ab-profile-base.txt" 2>&1 || status=1
  [ "$agents" -gt 1 ] && { "$base_bin" profile --model "$model" --prompt-tokens "$pp" --gen "$pgen" --batch "$agents" \
    >"$out/ab-profile-base-b$agents.txt" 2>&1 || status=1; }
  tail -n 2 "$out"/ab-bench-*.jsonl
fi
if [ "$tests" = 1 ]; then # each test in its own directory, all at once, 10 minutes at most each
  # as ctest runs them (tests/CMakeLists.txt): under the validation layer where it is installed
  # (the bundle carries Debian's), the host tier and the device test under synchronization
  # validation; a dedicated transfer queue, which lavapipe lacks, is what the GPU adds there.
  # Not the CPU-only tests that need the npm packages (the tokenizer, ggml): CI runs those.
  mkdir -p "$out/tests"
  validation=0
  # the layer needs the machine's libstdc++ to be new enough: tried once, the tests go without it if not
  CINDER_VK_VALIDATION=1 "$bin" info --device >"$out/tests-validation.txt" 2>&1 && validation=1
  echo "validation layer: $validation" | tee -a "$out/tests-validation.txt"
  export CINDER_SOURCE_DIR=$root tests_dir out validation
  ls "$tests_dir" | grep -E '^test_[a-z0-9_]+$' | grep -v -x -E 'test_(chat|fp16|gguf|quant|tokenizer)' |
    xargs -P "$(nproc)" -I{} bash -c '
    d=$(mktemp -d); s=$(date +%s); v=$validation
    case {} in test_host_tier|test_vk_device) [ "$v" = 1 ] && v=sync ;; esac
    (cd "$d" && CINDER_TEST_TMP=$d CINDER_VK_VALIDATION=$v timeout 600 "$tests_dir/{}" >"$out/tests/{}.log" 2>&1)
    echo "{} rc=$? $(( $(date +%s) - s ))s"; rm -rf "$d"' | sort >"$out/tests.txt"
  cat "$out/tests.txt"
  ! grep -v -E 'rc=(0|77) ' "$out/tests.txt" >/dev/null || status=1
fi

python3 - "$out" "$model" "$pp" "$tg" >"$out/summary.md" <<'PY'
import json, os, sys
out, model, pp, tg = sys.argv[1:5]
def load(name):  # one JSON document per file (pretty or not), or JSON lines
    try:
        text = open(os.path.join(out, name)).read()
    except OSError:
        return []
    try:
        return [json.loads(text)]
    except ValueError:
        return [json.loads(l) for l in text.splitlines() if l.startswith("{")]
card, prof, bench, peer = load("device.json"), load("profile.json"), load("bench.json"), load("peer.json")
bench_int = load("bench-int.json")
a1, an = load("agents-c1.json"), load("agents-cN.json")
print(f"# gpu-bench: {os.path.basename(model)}\n")
if card:
    c = card[0]
    m, d = c.get("measured", {}), c.get("device", {})
    print(f"device: {d.get('name', '?')}, driver {d.get('driver_name', '?')} {d.get('driver_info', '')}\n")
    print("| figure | value |\n|---|---|")
    for k, v in sorted(m.items()):
        if k.endswith(("_gbps", "_gflops", "_gops")): print(f"| {k} | {v:.3f} |")
if prof:
    p = prof[0]; r = p["roofline"]
    print(f"\ndecode roofline (batch {p['batch']}): {r['ideal_ms']:.3f} ms ideal at {p['peak_gbps']:.1f} GB/s "
          f"({p['peak_source']}), {r['achieved_ms']:.3f} ms achieved: **{100 * r['fraction']:.1f}%**\n")
    for phase in ("prefill", "decode"):
        ops = sorted(p[phase]["ops"], key=lambda o: -o["total_ms"])[:8]
        print(f"\n{phase}: top ops by time\n\n| op | kernel | share | GB/s | GFLOP/s |\n|---|---|---|---|---|")
        for o in ops:
            print(f"| {o['op']} | {o['kernel']} | {100 * o['share']:.1f}% | {o['gb_s']:.1f} | {o['gflop_s']:.1f} |")
print(f"\n| engine | pp{pp} tok/s | tg{tg} tok/s | cinder / this (pp, tg) |\n|---|---|---|---|")
if bench:
    c = bench[0]
    print(f"| cinder (Vulkan, {c['device']}) | {c['prefill_tok_s']:.2f} | {c['decode_tok_s']:.2f} | |")
    for i in bench_int:
        print(f"| cinder --int-dot on | {i['prefill_tok_s']:.2f} | {i['decode_tok_s']:.2f} | "
              f"{c['prefill_tok_s'] / i['prefill_tok_s']:.2f}x, {c['decode_tok_s'] / i['decode_tok_s']:.2f}x |")
    for r in peer:
        rp = c["prefill_tok_s"] / r["prefill_tok_s"] if r.get("prefill_tok_s") else float("nan")
        rt = c["decode_tok_s"] / r["decode_tok_s"] if r.get("decode_tok_s") else float("nan")
        print(f"| llama.cpp {r.get('backend', '?')} ({r.get('device', '?')}) | {r.get('prefill_tok_s', 0):.2f} | "
              f"{r.get('decode_tok_s', 0):.2f} | {rp:.2f}x, {rt:.2f}x |")
if a1 and an:
    x, y = a1[0], an[0]
    print(f"\nbatched decode ({y['agents']} agents, {y['system_tokens']}-token system prompt, {y['gen']} tokens each): "
          f"steady {x['decode_tok_s_steady']:.1f} tok/s one at a time, {y['decode_tok_s_steady']:.1f} all together "
          f"(**{y['decode_tok_s_steady'] / x['decode_tok_s_steady']:.2f}x**); ITL p50 {y['itl_ms_p50']:.2f} ms")
spec = [r for k in (0, 4, 8) for r in load(f"spec-{k}.json")]
if spec:
    print(f"\nspeculative decoding, a reply that copies its prompt:\n\n| spec tokens | tg tok/s | kept / guessed | vs 0 |\n|---|---|---|---|")
    for r in spec:
        print(f"| {r['spec_tokens']} | {r['decode_tok_s']:.2f} | {r['accepted_tokens']} / {r['draft_tokens']} | "
              f"{r['decode_tok_s'] / spec[0]['decode_tok_s']:.2f}x |")
score, peer_score = load("score.json"), load("peer-score.json")
if score:
    c = score[0]
    print(f"\nscoring {pp} prompt tokens (every position's log-probability and best token):\n\n"
          f"| engine | tok/s | cinder / this |\n|---|---|---|\n| cinder | {c['prefill_tok_s']:.2f} | |")
    for r in peer_score:
        print(f"| llama.cpp {r.get('backend', '?')}, all logits | {r.get('prefill_tok_s', 0):.2f} | "
              f"{c['prefill_tok_s'] / r['prefill_tok_s'] if r.get('prefill_tok_s') else float('nan'):.2f}x |")
    if bench: print(f"\n(plain prefill: {bench[0]['prefill_tok_s']:.2f} tok/s; scoring runs at "
                    f"{c['prefill_tok_s'] / bench[0]['prefill_tok_s']:.2f}x of it)")
ab = {v: load(f"ab-bench-{v}.jsonl") for v in ("base", "this")}
if ab["base"] and ab["this"]:
    rev = open(os.path.join(out, "baseline.txt")).read().strip()
    print(f"\nbefore/after, alternated ({rev}; this tree):\n\n| build | pp{pp} tok/s | tg{tg} tok/s |\n|---|---|---|")
    for v in ("base", "this"):
        pps = " / ".join("%.1f" % r["prefill_tok_s"] for r in ab[v])
        tgs = " / ".join("%.1f" % r["decode_tok_s"] for r in ab[v])
        print(f"| {v} | {pps} | {tgs} |")
tests = os.path.join(out, "tests.txt")
if os.path.exists(tests):
    rows = open(tests).read().split("\n")
    rows = [r for r in rows if r]
    bad = [r for r in rows if " rc=0 " not in r and " rc=77 " not in r]
    print(f"\ntests on this device: {len(rows) - len(bad)} of {len(rows)} passed or skipped" +
          "".join(f"\n- failed: {r}" for r in bad))
PY
cat "$out/summary.md"
exit $status
