#!/usr/bin/env bash
# Configures and builds one build directory. Usage: scripts/build.sh [release|asan] (default release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-release}
jobs=$(nproc 2>/dev/null || echo 2)
case "$kind" in
  release) dir="$root/build"; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  # -O1 keeps the sanitizer build fast enough for the model tests; asserts stay on (Debug).
  asan) dir="$root/build-asan"; flags=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" -DCINDER_SANITIZE=ON) ;;
  *) echo "usage: scripts/build.sh [release|asan]" >&2; exit 2 ;;
esac
cmake -S "$root" -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
