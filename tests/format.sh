#!/usr/bin/env bash
# The C sources follow .clang-format: clang-format (Debian 12's, 14) changes no line of any tracked
# .c or .h file but the generated runtime/gguf/iq_grids.c (scripts/gen_iq_grids.py writes its
# tables). Fix a failure with `clang-format -i FILE`. Never skips: a missing clang-format is a
# failure (run scripts/setup.sh).
set -euo pipefail
src=${CINDER_SOURCE_DIR:?}
command -v clang-format >/dev/null || { echo "format: FAIL: clang-format is missing (run scripts/setup.sh)" >&2; exit 1; }
cd "$src"
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -vx 'runtime/gguf/iq_grids.c')
[ ${#files[@]} -gt 100 ] || { echo "format: FAIL: only ${#files[@]} C files listed (not a git checkout?)" >&2; exit 1; }
bad=0
for f in "${files[@]}"; do
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    echo "format: $f does not follow .clang-format:" >&2
    clang-format --style=file "$f" | diff "$f" - | head -20 >&2 || true
    bad=$((bad + 1))
  fi
done
[ "$bad" = 0 ] || { echo "format: FAIL: $bad of ${#files[@]} files differ from clang-format's layout" >&2; exit 1; }
echo "format: ${#files[@]} files follow .clang-format"
