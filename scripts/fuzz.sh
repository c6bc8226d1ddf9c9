#!/usr/bin/env bash
# Fuzzes the GGUF reader (and writer round trips) for the given time and, alongside it (on a
# second core: the same fuzzing in half the wall time), for a fifth of it each one after the
# other: the server's request bodies (fuzz_request), the JSON prefix automaton against jansson
# and client JSON schemas compiled and followed (fuzz_json_prefix), request traces
# (fuzz_trace), the disk tier's chunk files (fuzz_kv_chunk), model + tokenizer loading from
# whole GGUF files (fuzz_model) and split models' shard sets (fuzz_gguf_split), with libFuzzer:
#
#   scripts/fuzz.sh [seconds [libFuzzer flags...]]      (default 60 s)
#   e.g. scripts/fuzz.sh 600 -use_value_profile=1
#
# Configures build-fuzz with clang and CINDER_FUZZ=ON, builds fuzz_gguf (ASan + UBSan), and
# runs it for the given time over tests/fuzz/corpus-run, a scratch copy of the seed corpus
# tests/fuzz/corpus (which stays as committed). Exits non-zero if the fuzzer finds a crash,
# leak, timeout or out-of-memory; the input that triggered it is saved in build-fuzz/findings/
# (reproduce with: build-fuzz/tests/fuzz/fuzz_gguf build-fuzz/findings/crash-...). A finding,
# once fixed, belongs in tests/fuzz/corpus so it is replayed by ctest forever.
set -euo pipefail

secs=${1:-60}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
run=$root/tests/fuzz/corpus-run

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCINDER_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_gguf fuzz_request fuzz_json_prefix fuzz_trace fuzz_kv_chunk fuzz_model fuzz_gguf_split -j"$(nproc)"

rm -rf "$run"
mkdir -p "$run" "$build/findings"
cp "$root"/tests/fuzz/corpus/* "$run/"

# Tokens the mutator should know: the magic, the alignment key, value types as u32, and
# u64 lengths/counts at the edges.
dict=$build/gguf.dict
cat >"$dict" <<'DICT'
"GGUF"
"general.alignment"
"general.architecture"
"\x02\x00\x00\x00"
"\x03\x00\x00\x00"
"\x04\x00\x00\x00"
"\x06\x00\x00\x00"
"\x07\x00\x00\x00"
"\x08\x00\x00\x00"
"\x09\x00\x00\x00"
"\x0a\x00\x00\x00"
"\x0c\x00\x00\x00"
"\x0d\x00\x00\x00"
"\x0c\x00\x00\x00\x0e\x00\x00\x00"
"\x00\x00\x00\x00\x00\x00\x00\x00"
"\x01\x00\x00\x00\x00\x00\x00\x00"
"\x20\x00\x00\x00\x00\x00\x00\x00"
"\x00\x01\x00\x00\x00\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x00\x00\x00\x00\x00\x00\x00\x80"
"\x00\x00\x00\x00\x00\x00\x00\x40"
"\xff\xff\xff\xff"
DICT

report() { # target, exit status, log, corpus: the outcome of one run (exit 1 on a finding)
    grep -E '^#[0-9]+ +DONE' "$3" | tail -1 || true
    if [ "$2" -ne 0 ]; then
        echo "$1 FOUND A PROBLEM (exit $2):" >&2
        grep -E 'ERROR|SUMMARY|check failed|Test unit written' "$3" >&2 || tail -40 "$3" >&2
        exit 1
    fi
    echo "no findings; corpus grew to $(ls "$4" | wc -l) inputs"
}

log=$build/fuzz.log
echo "fuzzing GGUF for ${secs}s in the background (log: $log)"
"$build/tests/fuzz/fuzz_gguf" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -dict="$dict" -artifact_prefix="$build/findings/" -print_final_stats=1 "$@" "$run" >"$log" 2>&1 &
gguf_pid=$!
trap 'kill "$gguf_pid" 2>/dev/null || true' EXIT

# A target over a scratch copy of its seeds, for a fifth of the time (at least 10 s):
# run_one TARGET SEEDS WHAT MAX_LEN
run_one() {
    local run=$root/tests/fuzz/$2-run log=$build/$1.log part=$(( secs / 5 > 10 ? secs / 5 : 10 )) rc
    rm -rf "$run"
    mkdir -p "$run"
    cp "$root/tests/fuzz/$2/"* "$run/"
    echo "fuzzing $3 for ${part}s (log: $log)"
    set +e
    "$build/tests/fuzz/$1" -max_total_time="$part" -max_len="$4" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$build/findings/" -print_final_stats=1 "$run" >"$log" 2>&1
    rc=$?
    set -e
    report "$1" "$rc" "$log" "$run"
}

# The server's request bodies (JSON, fields, chat template, tokenizer), request traces
# (`cinder bench --trace`: lines, header, token ids, chat sessions through the template), the
# disk tier's chunk files (header, sizes, MAC, tokens, chain hashes: never served wrong) and
# model files (config, tensor shapes, tokenizer metadata; the seeds are ~40-64 KB models).
run_one fuzz_request corpus_request "request bodies" 4096
run_one fuzz_json_prefix corpus_json "JSON prefixes (against jansson) and JSON schemas" 4096
run_one fuzz_trace corpus_trace "request traces" 4096
run_one fuzz_kv_chunk corpus_kv "disk-tier chunk files" 1024
run_one fuzz_model corpus_model "model + tokenizer loading" 70000
run_one fuzz_gguf_split corpus_split "split models' shard sets" 4096

set +e
wait "$gguf_pid"
rc=$?
set -e
trap - EXIT
echo "fuzz_gguf:"
grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)' "$log" || true
report fuzz_gguf "$rc" "$log" "$run"
