#!/usr/bin/env bash
# cinder profile on the tiny preset: the JSON report and the Chrome trace agree with each other
# and with what was recorded (one GPU slice per dispatch and copy, every slice inside its step,
# the dispatches' time no more than the step's span and equal to the reported busy fraction,
# every op described with bytes), the roofline is bytes over the peak given, and bad options fail
# with a clear message; bench --plot and --restore-bench (tools that share the profile's plotting
# and timing) on small runs. The accounting itself is tests/test_step_cost.c.
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/profile
mkdir -p "$tmp"
model=$tmp/tiny.gguf
"$bin" mkmodel --preset tiny --seed 5 --out "$model" >/dev/null 2>&1

"$bin" profile --model "$model" --context 5 --prompt-tokens 37 --gen 3 --batch 3 --peak-gbps 10 --peak-tflops 1 --json \
  --trace "$tmp/trace.json" --plot "$tmp/ops.svg" >"$tmp/report.json"
# bench --plot: a 3-request trace replayed with the cache on and off, TTFT per request
printf '%s\n' '{"scenario": "plot", "kind": "tokens"}' \
  '{"prompt_tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18], "max_tokens": 2}' \
  '{"prompt_tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19], "max_tokens": 2}' \
  '{"prompt_tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 20], "max_tokens": 2}' >"$tmp/plot.jsonl"
"$bin" bench --model "$model" --trace "$tmp/plot.jsonl" --plot "$tmp/ttft.svg" >"$tmp/bench_plot.txt"

python3 - "$tmp/report.json" "$tmp/trace.json" "$tmp/ops.svg" "$tmp/ttft.svg" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
rep = json.load(open(sys.argv[1]))
trace = json.load(open(sys.argv[2]))
ev = [e for e in trace["traceEvents"] if e["ph"] == "X"]
fail = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fail.append(what)

pre, dec = rep["prefill"], rep["decode"]
check(rep["rope"] == "theta 1e+06, none", "the RoPE as run: the file's")
check(pre["steps"] == 1 and pre["tokens"] == 37, "one prefill pass of 37 tokens")
check(dec["steps"] == 3 and dec["tokens"] == 9, "3 decode steps of batch 3")
ts = rep["timestamps"]
check(ts["dropped"] == 0, "no span dropped")
disp = [e for e in ev if e.get("cat") == "dispatch"]
copies = [e for e in ev if e.get("cat") == "copy"]
check(len(disp) == ts["dispatches"] and len(disp) > 0, f"one slice per recorded dispatch ({len(disp)})")
check(len(copies) == ts["copies"], f"one slice per recorded copy ({len(copies)})")

steps = [e for e in ev if e["tid"] == 1]
check(len(steps) == 4, "a step slice per pass")
gpu = [e for e in ev if e["tid"] in (2, 3)]
eps = 0.01  # microseconds
def inside(e, s): return s["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + eps
owners = [[s for s in steps if inside(e, s)] for e in gpu]
check(all(len(o) == 1 for o in owners), "every GPU slice lies inside exactly one step")
for s in steps:
    busy = sum(e["dur"] for e, o in zip(gpu, owners) if o and o[0] is s and e["cat"] in ("dispatch", "copy"))
    check(busy <= s["dur"] * (1 + 1e-9) + eps and busy > 0, f"{s['name']}: dispatches {busy:.0f} us within the span {s['dur']:.0f} us")
for name, phase, sel in (("prefill", pre, lambda s: "prefill" in s["name"]), ("decode", dec, lambda s: "decode" in s["name"])):
    span = sum(s["dur"] for s in steps if sel(s))
    busy = sum(e["dur"] for e, o in zip(gpu, owners) if o and sel(o[0]) and e["cat"] in ("dispatch", "copy"))
    check(abs(busy / span - phase["busy_fraction"]) < 1e-3, f"{name}: trace busy fraction {busy/span:.4f} = reported {phase['busy_fraction']:.4f}")

ops = [e for e in ev if e.get("cat") == "op"]
check(all(e["args"].get("bytes", 0) > 0 for e in ops), f"every op slice carries its bytes ({len(ops)} ops)")
check(all(-1 <= e["args"]["layer"] < 2 for e in ops), "layers in range")
calls = {r["op"]: r["calls"] for r in dec["ops"]}
per_layer = ["moe_combine_norm", "attn_q", "attn_k", "attn_v", "attention", "attn_output", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
check(all(calls.get(o) == 2 * 3 for o in per_layer), "each layer op once per layer per decode step")
check(calls.get("output") == 3 and calls.get("token_embd") == 3, "one head and one embedding per step")
check(calls.get("attn_norm") == 3 and "output_norm" not in calls,
      "attn_norm only in layer 0: each MoE combine writes the next norm (the last one output_norm)")
check(abs(sum(r["bytes"] for r in dec["ops"]) - dec["bytes"]) == 0, "op bytes add up to the phase's bytes")
ideal = dec["bytes"] / dec["steps"] / 10e9 * 1e3
check(abs(rep["roofline"]["ideal_ms"] - ideal) <= 1e-5 * ideal, "roofline = bytes per step / --peak-gbps (JSON reals carry 6 digits)")
check(rep["roofline"]["achieved_ms"] > 0 and abs(rep["roofline"]["fraction"] - ideal / rep["roofline"]["achieved_ms"]) < 1e-6,
      "roofline fraction = ideal / achieved")
svg = "{http://www.w3.org/2000/svg}"
ops_svg = ET.parse(sys.argv[3]).getroot()
n_ops = len(pre["ops"]) + len(dec["ops"])
check(len(ops_svg.findall(svg + "rect")) == 1 + n_ops, f"--plot: one bar per op and phase ({n_ops})")
check(any((t.text or "").startswith("decode output") for t in ops_svg.findall(svg + "text")), "--plot labels the ops")
ttft = ET.parse(sys.argv[4]).getroot()
check(len(ttft.findall(svg + "rect")) == 1 + 2 + 2 * 3, "bench --plot: two bars per request and a legend")
sys.exit(1 if fail else 0)
PY

# bench --restore-bench on a 1,024-token context (the 512-token size only): a prefix restored
# from the host tier and from disk, and recomputed, whole chunks on disk
"$bin" mkmodel --preset tiny --seed 5 --ctx 1024 --out "$tmp/tiny1k.gguf" >/dev/null 2>&1
"$bin" bench --model "$tmp/tiny1k.gguf" --restore-bench --repeat 1 --json >"$tmp/restore.json"
python3 - "$tmp/restore.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fail = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fail.append(what)
s = r["sizes"]
check(len(s) == 1 and s[0]["tokens"] == 512 and s[0]["pages"] == 32, "restore bench: one size, 512 tokens in 32 pages")
w = s[0]
# the times are printed, not compared: which is faster is a benchmark's finding (docs/PERF.md), and
# a clock in a test fails on a loaded machine
check(w["recompute_ms"] > 0 and w["restore_ms"] > 0, "restore from the host tier and recompute both timed")
check(w["disk_tokens"] == 512 and w["disk_bytes"] > w["bytes"], "two whole chunks on disk (headers and MACs besides the pages)")
check(w["disk_ms"] > 0 and w["disk_cold_ms"] > 0, "reading from disk timed, warm and cold")
sys.exit(1 if fail else 0)
PY

# A replay through the engine: every pass timed, each request's cache work and latencies
"$bin" profile --model "$model" --trace-file "$tmp/plot.jsonl" --batch 2 --peak-gbps 10 --peak-tflops 1 --json \
  --trace "$tmp/replay_trace.json" >"$tmp/replay.json"
python3 - "$tmp/replay.json" "$tmp/replay_trace.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t = json.load(open(sys.argv[2]))
ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
reqs = sorted(r["requests"], key=lambda q: q["request"])
fail = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fail.append(what)
check([q["request"] for q in reqs] == [1, 2, 3], "replay: every request reported")
check(reqs[0]["cached_tokens"] == 0 and all(16 <= q["cached_tokens"] <= 17 for q in reqs[1:]), "replay: the shared prefix (and a tail) is cached for requests 2 and 3")
check(all(0 <= q["queued_ms"] and 0 <= q["acquire_ms"] <= q["ttft_ms"] <= q["e2e_ms"] for q in reqs), "replay: acquire within TTFT within e2e")
passes = r["prefill"]["steps"] + r["decode"]["steps"]
check(len([e for e in ev if e["tid"] == 1]) == passes and passes > 0, f"replay: a step slice per pass ({passes})")
check(len([e for e in ev if e.get("cat") == "dispatch"]) == r["timestamps"]["dispatches"], "replay: one slice per dispatch")
# a dispatch is named by its pipeline, read at collect time: the replay reports after the engine is gone
check(all(e["args"]["kernel"] and e["name"].startswith(e["args"]["kernel"]) for e in ev if e.get("cat") == "dispatch"), "replay: every dispatch named by its pipeline")
check(len([e for e in ev if e["tid"] == 5]) == 4 * 3 and len([e for e in ev if e["name"] == "tokenize"]) == 3, "replay: request, ttft, queued, acquire and tokenize slices per request")
sys.exit(1 if fail else 0)
PY

# Without peaks on the command line they come from the device card: measured on the first run
# (into this test's own cache directory), read from the cache on the next; --device prints it.
export CINDER_CACHE_DIR=$tmp/cache
rm -rf "$CINDER_CACHE_DIR"
for want in "device card, measured" "device card, cached"; do
  "$bin" profile --model "$model" --prompt-tokens 8 --gen 1 --json >"$tmp/card_run.json"
  python3 - "$tmp/card_run.json" "$want" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r["peak_source"] == sys.argv[2] and r["peak_gbps"] > 0 and r["peak_tflops"] > 0 and r["roofline"]["ideal_ms"] > 0
print(("ok   " if ok else "FAIL ") + f"peaks from the {sys.argv[2]}: {r['peak_gbps']:.2f} GB/s, {r['peak_tflops']:.4f} TFLOP/s")
sys.exit(0 if ok else 1)
PY
done
"$bin" profile --device --json >"$tmp/card.json"
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if c['cached'] else 1)" "$tmp/card.json" \
  && echo "ok   profile --device reads the cached card" || { echo "FAIL profile --device"; exit 1; }

fails_with() { # expected stderr substring, command...
  local want=$1; shift
  local err rc=0
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$err"; then echo "ok   fails with: $want"
  else echo "FAIL wanted '$want' (status $rc): $err"; exit 1; fi
}
fails_with "--batch must be >= 1" "$bin" profile --model "$model" --batch 0
fails_with "exceed the model's context" "$bin" profile --model "$model" --context 100000 --gen 2
# the RoPE flags: the profile runs the model as they make it (its context is YaRN's original x factor)
fails_with "exceed the model's context (8192)" "$bin" profile --model "$model" --context 9000 --gen 2 \
  --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 2048
"$bin" profile --model "$model" --prompt-tokens 4 --gen 1 --peak-gbps 1 --peak-tflops 1 --json \
  --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 2048 >"$tmp/yarn.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['rope']; sys.exit(0 if r == 'theta 1e+06, yarn, factor 4, original context 2048, attention factor 1.1386' else 1)" \
  "$tmp/yarn.json" && echo "ok   profile --rope-scaling yarn reports the RoPE it ran" || { echo "FAIL profile's RoPE"; exit 1; }
fails_with "unknown option" "$bin" profile --model "$model" --bogus
fails_with "--gen" "$bin" profile --model "$model" --gen
fails_with "cannot open" "$bin" profile --model "$tmp/missing.gguf"
fails_with "--plot goes with --trace or --scenario" "$bin" bench --model "$model" --plot "$tmp/x.svg"
fails_with "cannot create" "$bin" profile --model "$model" --prompt-tokens 4 --gen 1 --peak-gbps 1 --peak-tflops 1 --plot "$tmp/no/such/dir.svg"
