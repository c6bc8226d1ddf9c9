#!/usr/bin/env bash
# Line coverage per directory: a gcc --coverage build in build-cov/, the release ctest suite in it
# minus the slow whole-model GPU tests (their code runs in the engine tests too), then gcovr
# (Debian's gcovr package, scripts/setup.sh) summed per top-level directory of our sources.
# scripts/test.sh runs it last when CINDER_COVERAGE=1 (not by default: it takes as long as a
# second release run). Usage:
#
#   scripts/coverage.sh [ctest -E regex]     (default: the list below)
#
# Prints a table (directory, lines, covered, %) and the total; the per-file report is in
# build-cov/coverage.txt. Record the figures in docs/RELIABILITY.md with the date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-cov
exclude=${1:-'conformance_llama|test_gpu_model|server_load|prefix_scenarios'}
jobs=$(nproc 2>/dev/null || echo 2)
command -v gcovr >/dev/null || { echo "coverage.sh: gcovr is missing (scripts/setup.sh installs it)" >&2; exit 1; }

# -O1 as the ASan build: lines still map to code, the CPU-side tests stay fast enough. Atomic
# counters: OpenMP threads (the weight hash, the CPU reference) share them, and racing
# increments leave negative branch counts that gcovr cannot read. Longer test timeouts: the
# instrumented engine tests run several times slower than release.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1 --coverage -fprofile-update=atomic" \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCINDER_TEST_TIMEOUT=3600 -DCINDER_SCRIPT_TEST_TIMEOUT=3600 >/dev/null
cmake --build "$build" -j "$jobs"
find "$build" -name '*.gcda' -delete
echo "== tests (coverage build, without: $exclude)"
ctest --test-dir "$build" -j "$jobs" -E "$exclude" --output-on-failure || echo "coverage.sh: some tests failed (coverage still reported)" >&2

# One row per file (gcovr's JSON summary), summed per directory: runtime/<layer>, kv, radix,
# server, tools. Generated sources (embedded shaders), tests and system headers are left out.
gcovr --gcov-ignore-parse-errors --root "$root" --object-directory "$build" --filter "$root/(runtime|engine|kv|radix|server|tools)/" \
    --json-summary "$build/coverage.json" --txt "$build/coverage.txt" >/dev/null
python3 - "$build/coverage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
dirs = {}
for f in d["files"]:
    parts = f["filename"].split("/")
    key = "/".join(parts[:2]) if parts[0] == "runtime" else parts[0]
    t = dirs.setdefault(key, [0, 0])
    t[0] += f["line_total"]
    t[1] += f["line_covered"]
print(f"{'directory':<16} {'lines':>7} {'covered':>8} {'%':>6}")
tot = [0, 0]
for k in sorted(dirs):
    n, c = dirs[k]
    tot[0] += n
    tot[1] += c
    print(f"{k:<16} {n:>7} {c:>8} {100 * c / n if n else 0:>6.1f}")
print(f"{'total':<16} {tot[0]:>7} {tot[1]:>8} {100 * tot[1] / tot[0]:>6.1f}")
PY
