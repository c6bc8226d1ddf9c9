#!/usr/bin/env bash
# Builds tests/oracle/llama_oracle against the llama.cpp headers and prebuilt libraries that
# scripts/setup.sh installs (node-llama-cpp's npm packages and source bundle).
#   tests/oracle/build.sh BUILD_DIR      -> BUILD_DIR/llama_oracle
# libllama is dlopen()ed at run time from the CPU or the Vulkan bins folder (one binary for
# both); the two folders are compiled in (override: --libdir or CINDER_LLAMA_LIBDIR).
# Rebuilds only when the source is newer than the binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out_dir=${1:?usage: tests/oracle/build.sh BUILD_DIR}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

npm=$root/third_party/npm/node_modules/@node-llama-cpp
cpu_dir=$npm/linux-x64/bins/linux-x64
vk_dir=$npm/linux-x64-vulkan/bins/linux-x64-vulkan
inc=$root/third_party/llama/src

fail() { echo "oracle build: $*" >&2; echo "oracle build: run scripts/setup.sh to install llama.cpp (npm node-llama-cpp)" >&2; exit 1; }
[ -f "$inc/include/llama.h" ] || fail "missing $inc/include/llama.h"
[ -f "$inc/ggml/include/ggml-backend.h" ] || fail "missing $inc/ggml/include/ggml-backend.h"
ls "$cpu_dir"/libllama.*.so >/dev/null 2>&1 || fail "missing libllama in $cpu_dir"
[ -d "$vk_dir" ] || echo "oracle build: note: no Vulkan build at $vk_dir (--vulkan will not work)" >&2

src=$root/tests/oracle/llama_oracle.c
bin=$out_dir/llama_oracle
if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$0" ]; then exit 0; fi
${CC:-cc} -std=c17 -O2 -g -Wall -Wextra -Werror=implicit-function-declaration \
  -I"$inc/include" -I"$inc/ggml/include" \
  -DORACLE_CPU_LIBDIR="\"$cpu_dir\"" -DORACLE_VULKAN_LIBDIR="\"$vk_dir\"" \
  -o "$bin.tmp" "$src" -ldl -lm
mv "$bin.tmp" "$bin"
