#!/usr/bin/env bash
# llama.cpp as cinder's performance peer, on the same GGUF file: llama-bench-style pp/tg
# numbers from tests/oracle/llama_oracle --bench, for llama.cpp's CPU backend (2 threads) and
# its Vulkan backend on this machine's Vulkan device (lavapipe here: llama.cpp skips Vulkan
# devices of CPU type unless GGML_VK_VISIBLE_DEVICES names them, so it is set to 0).
#   scripts/bench_peer.sh MODEL.gguf [--pp N] [--tg N] [--repeat N] [--threads N]
#                         [--vk-flash-attn auto|on|off] [--cpu-only | --vulkan-only]
#                         [--sample | --grammar FILE.gbnf] [--score]
# --sample / --grammar: each decode step's token chosen greedily (by the grammar first) from its
# logits, not a random id (llama_oracle --bench; against `cinder bench --json-object`).
# --score: the prefill's logits at every position, each position's next token scored (against
# `cinder bench --prompt-logprobs 1`: echo + logprobs, what evaluation harnesses send).
# Prints one JSON line per backend (see tests/oracle/llama_oracle.c for the fields). The
# Vulkan run uses --flash-attn off by default: with flash attention (llama.cpp's auto resolves
# it to enabled) llama.cpp's Vulkan backend crashes inside lavapipe (Mesa 22.3, SIGSEGV in
# libvulkan_lvp.so) for prefill batches of 32 tokens or more; docs/PERF.md has the details.
# Builds the oracle into build/oracle if needed (CINDER_ORACLE_DIR overrides). Exit status:
# 0 when every requested run printed its line from the backend asked for, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: scripts/bench_peer.sh MODEL.gguf [--pp N] [--tg N] [--repeat N] [--threads N] [--vk-flash-attn auto|on|off] [--cpu-only|--vulkan-only] [--sample|--grammar FILE.gbnf] [--score]" >&2; exit 2; }
[ $# -ge 1 ] || usage
model=$1; shift
[ -f "$model" ] || { echo "bench_peer: no such model file: $model" >&2; exit 2; }
pp=512 tg=128 repeat=3 threads=2 vk_fa=off do_cpu=1 do_vk=1 choose=() score=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pp) pp=${2:?}; shift 2 ;;
    --tg) tg=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --vk-flash-attn) vk_fa=${2:?}; shift 2 ;;
    --cpu-only) do_vk=0; shift ;;
    --vulkan-only) do_cpu=0; shift ;;
    --sample) choose=(--sample); shift ;;
    --grammar) choose=(--grammar "${2:?}"); shift 2 ;;
    --score) score=(--score); shift ;;
    *) usage ;;
  esac
done

dir=${CINDER_ORACLE_DIR:-$root/build/oracle}
"$root/tests/oracle/build.sh" "$dir" || { echo "bench_peer: building the oracle failed" >&2; exit 1; }
oracle=$dir/llama_oracle
common=(--bench --pp "$pp" --tg "$tg" --repeat "$repeat" --threads "$threads" "${choose[@]}" "${score[@]}")
status=0
err=$(mktemp); trap 'rm -f "$err"' EXIT

# run NAME EXPECTED_BACKEND [env and args...]: prints the JSON line, or says why there is none
run() {
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>"$err"); rc=$?
  if [ $rc -ne 0 ] || [ -z "$out" ]; then
    echo "bench_peer: llama.cpp $name run failed (exit $rc$( [ $rc -gt 128 ] && echo ", signal $((rc - 128))" )); last lines of its stderr:" >&2
    tail -n 15 "$err" | sed 's/^/  | /' >&2
    status=1
    return
  fi
  echo "$out"
  case "$out" in
    *"\"backend\": \"$want\""*) ;;
    *'"backend": "mixed"'*)
      echo "bench_peer: llama.cpp $name run was hybrid: it kept some matmul weights on the CPU and ran those matmuls there (see \"matmuls_by_device\" above; on lavapipe the tensors over its 128 MiB maxStorageBufferRange): not a $want-only figure" >&2 ;;
    *) echo "bench_peer: llama.cpp $name run did not run on $want (see \"backend\" above): it fell back" >&2; status=1 ;;
  esac
}

[ $do_cpu = 1 ] && run cpu cpu env -u GGML_VK_VISIBLE_DEVICES "$oracle" "$model" "${common[@]}"
[ $do_vk = 1 ] && run vulkan vulkan env GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} \
  "$oracle" "$model" "${common[@]}" --vulkan --flash-attn "$vk_fa"
exit $status
