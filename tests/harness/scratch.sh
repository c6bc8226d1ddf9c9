#!/usr/bin/env bash
# Runs one ctest test in a scratch folder of its own and removes the folder when the test
# passes (or skips): the suite writes ~16 GB of models and servers' files over a run, which a
# CI machine's disk does not hold if nothing is deleted (a run ended in "No space left on
# device", 2026-12-03). A failed test's folder stays for its post-mortem; CINDER_TEST_KEEP=1
# keeps every folder.
#   tests/harness/scratch.sh DIR COMMAND [ARG...]    (CINDER_TEST_TMP=DIR for COMMAND)
set -uo pipefail
dir=${1:?usage: tests/harness/scratch.sh DIR COMMAND [ARG...]}
shift
rm -rf "$dir" # a previous failed run's leftovers: a test starts from nothing
mkdir -p "$dir" || { echo "scratch: cannot make $dir" >&2; exit 1; }
export CINDER_TEST_TMP=$dir
"$@"
rc=$?
if { [ "$rc" = 0 ] || [ "$rc" = 77 ]; } && [ "${CINDER_TEST_KEEP:-0}" != 1 ]; then
  rm -rf "$dir"
fi
exit "$rc"
