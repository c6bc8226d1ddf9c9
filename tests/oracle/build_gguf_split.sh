#!/usr/bin/env bash
# Builds llama.cpp's own gguf-split (tools/gguf-split/gguf-split.cpp from the source bundle)
# against node-llama-cpp's prebuilt libllama, libllama-common and libggml-base, which export
# everything it calls: one C++ file, about a second, instead of building llama.cpp.
#   tests/oracle/build_gguf_split.sh BUILD_DIR   -> BUILD_DIR/llama-gguf-split
# Rebuilds only when the source is newer than the binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out_dir=${1:?usage: tests/oracle/build_gguf_split.sh BUILD_DIR}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
lib=$root/third_party/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
inc=$root/third_party/llama/src
src=$inc/tools/gguf-split/gguf-split.cpp

fail() { echo "gguf-split build: $*; run scripts/setup.sh to install llama.cpp (npm node-llama-cpp)" >&2; exit 1; }
[ -f "$src" ] || fail "missing $src"
libs=()
for l in 'libllama.*.so' libllama-common.so libggml-base.so 'libggml.*.so'; do
  f=$(ls $lib/$l 2>/dev/null | head -1)
  [ -n "$f" ] || fail "missing $lib/$l"
  libs+=("$f")
done
bin=$out_dir/llama-gguf-split
if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$0" ]; then exit 0; fi
${CXX:-c++} -std=c++17 -O1 -I"$inc/include" -I"$inc/ggml/include" -I"$inc/common" -o "$bin.tmp" "$src" \
  "${libs[@]}" -Wl,-rpath,"$lib"
mv "$bin.tmp" "$bin"
