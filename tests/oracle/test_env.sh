# Sourced by the llama.cpp tests (conformance_llama.sh, presets_llama.sh) after `set -euo
# pipefail` with their name and work folder: checks what ctest passes, defines fail(), builds
# tests/oracle/llama_oracle and sets src, tmp (made), bin and oracle. Never skips: a missing
# llama.cpp is a failure (run scripts/setup.sh).
oracle_test_env() { # name, folder under CINDER_TEST_TMP
  test_name=$1
  src=${CINDER_SOURCE_DIR:?CINDER_SOURCE_DIR is not set}
  tmp=${CINDER_TEST_TMP:?CINDER_TEST_TMP is not set}/$2
  bin=${CINDER_BIN:?CINDER_BIN is not set}
  mkdir -p "$tmp"
  [ -x "$bin" ] || fail "no cinder binary at $bin"
  command -v python3 >/dev/null || fail "python3 is missing (run scripts/setup.sh)"
  "$src/tests/oracle/build.sh" "$tmp/oracle" ||
    fail "cannot build tests/oracle/llama_oracle: llama.cpp (npm node-llama-cpp and its headers) is missing; run scripts/setup.sh"
  oracle=$tmp/oracle/llama_oracle
}
fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }
