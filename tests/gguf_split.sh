#!/usr/bin/env bash
# Split models end to end (runtime/gguf/gguf_split.c): the tiny model cut by `cinder mkmodel
# --split-max-tensors` and by llama.cpp's own gguf-split (built from the source bundle against
# node-llama-cpp's libraries: tests/oracle/build_gguf_split.sh) in its three ways (by tensor
# count, by size, metadata alone in the first shard) gives the unsplit file's greedy tokens on
# the CPU reference and on the Vulkan engine, and its fingerprint; llama.cpp merges cinder's
# shards back into the same model; a later, missing, foreign or misplaced shard is an error
# that names it, on info and run alike. Never skips: a missing llama.cpp is a failure.
set -euo pipefail
bin=${CINDER_BIN:?}
src=${CINDER_SOURCE_DIR:?}
tmp=${CINDER_TEST_TMP:?}/gguf_split
rm -rf "$tmp"
mkdir -p "$tmp"
source "$(dirname "$0")/check.sh"
tokens() { "$bin" run --model "$1" --tokens 1,2,3,4,5 --n 8 --json --ignore-eos "${@:2}" | json_field 'd["tokens"]'; }
fingerprint() { "$bin" info --no-plan "$1" | sed -nE 's/^fingerprint +([0-9a-f]{64})$/\1/p'; }

"$src/tests/oracle/build_gguf_split.sh" "$tmp/oracle" || { echo "gguf_split: FAIL: cannot build llama.cpp's gguf-split" >&2; exit 1; }
split=$tmp/oracle/llama-gguf-split

one=$tmp/one.gguf
"$bin" mkmodel --preset tiny --seed 3 --out "$one" 2>/dev/null
want_cpu=$(tokens "$one" --cpu)
want_gpu=$(tokens "$one" --gpu)
want_fp=$(fingerprint "$one")
check "the unsplit model: the CPU and the GPU agree" test "$want_cpu" = "$want_gpu"

first=$("$bin" mkmodel --preset tiny --seed 3 --split-max-tensors 10 --out "$tmp/ours.gguf" 2>/dev/null)
check "mkmodel --split-max-tensors prints the first shard" test "$first" = "$tmp/ours-00001-of-00003.gguf"
check "... and writes 27 tensors in 3 shards" test -f "$tmp/ours-00003-of-00003.gguf" -a ! -e "$tmp/ours.gguf"
"$split" --split --split-max-tensors 7 "$one" "$tmp/ll_tensors" >/dev/null
"$split" --split --split-max-size 45M "$one" "$tmp/ll_size" >/dev/null
"$split" --split --split-max-tensors 9 --no-tensor-first-split "$one" "$tmp/ll_meta" >/dev/null

for m in "$first" "$tmp/ll_tensors-00001-of-00004.gguf" "$tmp"/ll_size-00001-of-*.gguf "$tmp/ll_meta-00001-of-00004.gguf"; do
  name=$(basename "$m")
  n=$(sed -E 's/.*-of-0*([0-9]+)\.gguf$/\1/' <<<"$name")
  info=$("$bin" info --no-plan "$m")
  check "$name: info says it is split in $n" grep -q "^split             $n shards, " <<<"$info"
  check "$name: info counts the bytes of every shard" grep -q "^bytes on disk     $(cat "${m%-00001-of-*}"-000*-of-*.gguf | wc -c) " <<<"$info"
  check "$name: the unsplit model's fingerprint" test "$(fingerprint "$m")" = "$want_fp"
  check "$name: the unsplit model's tokens on the CPU reference" test "$(tokens "$m" --cpu)" = "$want_cpu"
  check "$name: the unsplit model's tokens on the GPU" test "$(tokens "$m" --gpu)" = "$want_gpu"
done

# llama.cpp reads cinder's shards: gguf-split --merge checks split.count and split.no of each
"$split" --merge "$first" "$tmp/merged.gguf" >/dev/null
check "llama.cpp merges cinder's shards back into the same model" test "$(fingerprint "$tmp/merged.gguf")" = "$want_fp"

fails_with "a later shard names the first" "shard 2 of 3 of a split model: open the first shard, $tmp/ours-00001-of-00003.gguf" \
  "$bin" info --no-plan "$tmp/ours-00002-of-00003.gguf"
mv "$tmp/ours-00003-of-00003.gguf" "$tmp/away.gguf"
fails_with "a missing shard is named" "shard 3 of 3, $tmp/ours-00003-of-00003.gguf: cannot open: No such file" \
  "$bin" run --model "$first" --tokens 1 --n 1
cp "$tmp/ll_tensors-00002-of-00004.gguf" "$tmp/ours-00003-of-00003.gguf"
fails_with "a shard of another cut" "shard 3 of 3, $tmp/ours-00003-of-00003.gguf: split.count is 4, the first shard's 3" \
  "$bin" info --no-plan "$first"
cp "$tmp/ours-00002-of-00003.gguf" "$tmp/ours-00003-of-00003.gguf"
fails_with "a shard in another's place" "shard 3 of 3, $tmp/ours-00003-of-00003.gguf: split.no is 1 but its name makes it shard 3" \
  "$bin" run --model "$first" --tokens 1 --n 1 --cpu
cp "$tmp/away.gguf" "$tmp/ours-00003-of-00003.gguf"
"$bin" mkmodel --preset tiny --layers 3 --seed 3 --split-max-tensors 13 --out "$tmp/other.gguf" >/dev/null 2>&1
cp "$tmp/other-00002-of-00003.gguf" "$tmp/ours-00002-of-00003.gguf"
fails_with "a shard of another model" "shard 2 of 3, $tmp/ours-00002-of-00003.gguf: split.tensors.count is 39, the first shard's 27" \
  "$bin" info --no-plan "$first"
cp "$first" "$tmp/renamed.gguf"
fails_with "a first shard renamed" "split.count is 3 but the name does not end in -00001-of-00003.gguf" \
  "$bin" info --no-plan "$tmp/renamed.gguf"

check_summary
