#!/usr/bin/env bash
# Fuzzes the GGUF reader (and writer round trips), then the server's request bodies
# (fuzz_request) and request traces (fuzz_trace), each half the time, with libFuzzer:
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
cmake --build "$build" --target fuzz_gguf fuzz_request fuzz_trace -j"$(nproc)"

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
echo "fuzzing GGUF for ${secs}s (log: $log)"
set +e
"$build/tests/fuzz/fuzz_gguf" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -dict="$dict" -artifact_prefix="$build/findings/" -print_final_stats=1 "$@" "$run" >"$log" 2>&1
rc=$?
set -e
grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)' "$log" || true
report fuzz_gguf "$rc" "$log" "$run"

# A text target over a scratch copy of its seeds, for half the time: run_text TARGET SEEDS WHAT
run_text() {
    local run=$root/tests/fuzz/$2-run log=$build/$1.log secs_half=$(( secs / 2 > 10 ? secs / 2 : 10 )) rc
    rm -rf "$run"
    mkdir -p "$run"
    cp "$root/tests/fuzz/$2/"* "$run/"
    echo "fuzzing $3 for ${secs_half}s (log: $log)"
    set +e
    "$build/tests/fuzz/$1" -max_total_time="$secs_half" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$build/findings/" -print_final_stats=1 "$run" >"$log" 2>&1
    rc=$?
    set -e
    report "$1" "$rc" "$log" "$run"
}

# The server's request bodies (JSON, fields, chat template, tokenizer), then request traces
# (`cinder bench --trace`: lines, header, token ids, chat sessions through the template).
run_text fuzz_request corpus_request "request bodies"
run_text fuzz_trace corpus_trace "request traces"
