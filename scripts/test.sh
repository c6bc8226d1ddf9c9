#!/usr/bin/env bash
# Runs every test: set-up, a release build and an AddressSanitizer+UBSan build, the whole
# ctest suite in both (the llama.cpp conformance test, the whole-model GPU test, the server load
# and the prefix scenarios once, in release), and a short run of every fuzz target
# (scripts/fuzz.sh, first); with CINDER_COVERAGE=1, line coverage per directory after them
# (scripts/coverage.sh). Exits non-zero on any failure. The release run has the Vulkan validation
# layer on and required (tests/CMakeLists.txt): a missing layer or any validation message fails
# the Vulkan tests. Skipped tests are counted apart in the closing line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Disk: set-up (llama.cpp, ~1 GB), the builds, then each test's scratch folder (models, servers'
# files; removed when the test passes: tests/harness/scratch.sh), two tests at once on two cores.
# need_gb is the measured peak with room to spare (docs/RELIABILITY.md, "The test suite's
# disk"); below it the suite would fail midway on "No space left on device", so it stops here.
need_gb=${CINDER_TEST_DISK_GB:-8}
free_gb=$(df -Pk "$root" | awk 'NR == 2 {print int($4 / 1048576)}')
echo "== disk: $free_gb GB free under $root; the suite needs $need_gb GB"
if [ "$free_gb" -lt "$need_gb" ]; then
  echo "scripts/test.sh: only $free_gb GB free under $root, the test suite needs $need_gb GB" \
    "(its builds and scratch files); free some space (old build/test-tmp folders?) and rerun" >&2
  exit 1
fi
bash "$root/scripts/setup.sh"

echo "== release build"
bash "$root/scripts/build.sh" release
# The fuzz targets first: they compile sources apart from the libraries (tests/fuzz/CMakeLists.txt),
# and a list gone stale fails here in the first minutes rather than after the suites.
# 30 s: a smoke run beside the corpora every target replays under ctest (tests/fuzz/corpus*); long
# fuzzing is scripts/fuzz.sh's own job (scripts/fuzz.sh 600), not CI's.
echo "== fuzz (GGUF reader ${CINDER_FUZZ_SECONDS:-30} s, beside requests, JSON prefixes, traces, KV chunks and model loading a fifth of it each)"
bash "$root/scripts/fuzz.sh" "${CINDER_FUZZ_SECONDS:-30}"
echo "== tests (release)"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs" --output-junit "$root/build/junit.xml" | tee -a "$log"

echo "== AddressSanitizer + UBSan build"
bash "$root/scripts/build.sh" asan
echo "== tests (asan+ubsan)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# lavapipe and the LLVM/libxml2 it links hold one-time globals; the Vulkan loader dlcloses the
# driver at vkDestroyInstance, those become unreachable and LeakSanitizer reports them from an
# "unknown module" (128 bytes, not ours). Preloading the driver and its libraries keeps them
# mapped to the end, so only leaks of our own remain visible.
lvp=$(ls /usr/lib/*/libvulkan_lvp.so 2>/dev/null | head -n 1 || true)
preload=""
if [ -n "$lvp" ]; then
  preload="$lvp:$(ldd "$lvp" | awk '$3 ~ /^\// {print $3}' | paste -sd: -)"
  export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
fi
# The llama.cpp conformance, the whole-model GPU test and the server load run once, in release:
# lavapipe's JIT inside an ASan process takes too long for them. The GPU host code still runs
# under ASan through cli_contract's `run` and `bench` (the Vulkan engine by default).
# prefix_scenarios too: it checks token accounting (deterministic logic, the same in both builds)
# over 15 `bench --scenario` processes (~270 s under ASan); the code it drives runs under ASan in
# cli_contract (bench --scenario, --cache-dir), test_prefix_cache (host tier, small pools),
# test_scheduler and test_engine_random. gguf_split too (~50 s under ASan: mkmodel, llama.cpp's
# gguf-split, a dozen `run`s): the split reader runs under ASan in test_gguf_split (every broken
# shard set, shards cut at every length and mutated at every byte) and fuzz_gguf_split.
# kv_events (a subscriber and eleven servers, the scenario traces among them, ~100 s in release)
# runs in release only, for CI's time: its C code runs under ASan in test_kv_events (page events
# against the tree, the wire encoding, endpoints); the publisher thread (server/kv_events.c) runs
# in the release run only. fleet too
# (nine servers and 216 requests behind haproxy, nginx and an event-fed picker, ~55 s in release):
# it measures routing, the same in both builds; the server code it drives runs under ASan in
# server_api and test_kv_events.
# presets_llama too (19 llama-quantize presets, each run by llama.cpp, cinder's CPU reference and
# its Vulkan engine: ~440 s under ASan, the longest test there after cli_contract): what it adds is
# conformance with llama.cpp's files, the same in both builds; under ASan the reader of those files
# runs in test_gguf and fuzz_gguf, and every type's CPU decoder on ggml's own quantizer output in
# test_quant.
# The kernel-numerics tests too (test_vk_attn_prefill, test_vk_matmul, test_vk_matvec,
# test_vk_moe_group, test_gpu_batch): each is lavapipe running one kernel family over many shapes
# and configurations against the CPU reference, and under ASan it is that JIT code (not
# instrumented) run slower; their host code (runtime/vk/op_*.c: arguments, descriptors,
# dispatch sizes) runs under ASan on every step of the engine tests (test_scheduler,
# test_prefix_cache, test_disk_tier, test_engine_random, test_oom, cli_contract), and the smaller
# kernel tests (rmsnorm, eltwise, get_rows, moe_route, moe_combine, sample, ...) stay in it.
# chat_reuse too (a 20-turn chat trace over a ~4,800-token system prompt, ~25 s in release): the
# conversation and reply memory it drives run under ASan in test_tokenizer (a reply split as no
# encoder would, reused token for token) and test_reply_memory, the server's in server_api.
asan_excluded='conformance_llama|test_gpu_model|server_load|prefix_scenarios|^gguf_split$|^kv_events$|presets_llama|^fleet$'
asan_excluded+='|^chat_reuse$'
asan_excluded+='|test_vk_attn_prefill|test_vk_matmul|test_vk_matvec|test_vk_moe_group|test_gpu_batch'
LD_PRELOAD="$preload" ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" \
  --output-junit "$root/build-asan/junit.xml" -E "$asan_excluded" | tee -a "$log"

# Line coverage per directory, when asked (CINDER_COVERAGE=1): a third, instrumented build and
# run of the suite (scripts/coverage.sh; about as long as the release run, so not in CI's default
# run). Its table goes to the log; record it in docs/RELIABILITY.md.
if [ "${CINDER_COVERAGE:-0}" = 1 ]; then
  echo "== line coverage (scripts/coverage.sh)"
  bash "$root/scripts/coverage.sh"
fi

# One closing line over both ctest runs (set -o pipefail above already failed on any failure).
# ctest counts a skipped test (exit 77: tests/CMakeLists.txt) as not failed and lists it under
# "The following tests did not run"; it is counted here as skipped, not as passed.
total=$(grep -Eo 'tests failed out of [0-9]+' "$log" | awk '{s += $5} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ tests failed out of' "$log" | awk '{s += $1} END {print s + 0}')
skipped=$(grep -Ec '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$log" || true)
# What did not run, and why: the tests the ASan run leaves out (run in release only, above), and
# each skipped test with the reason it gave (tu_skip's "SKIP: ..." line), from ctest's JUnit files.
echo "not run under ASan (release only): $(ctest --test-dir "$root/build-asan" -N -R "$asan_excluded" |
  awk '/Test +#/ {print $3}' | paste -sd' ' -)"
python3 - "$root/build/junit.xml" "$root/build-asan/junit.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
for path, run in zip(sys.argv[1:], ("release", "asan")):
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is None: continue
        out = case.findtext("system-out") or ""
        why = next((l[6:] for l in out.splitlines() if l.startswith("SKIP: ")), "no reason given")
        print(f"skipped ({run}): {case.get('name')}: {why}")
PY
echo "tests: $((total - failed - skipped)) passed, $skipped skipped, $failed failed"
