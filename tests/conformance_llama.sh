#!/usr/bin/env bash
# Conformance with llama.cpp, the independent oracle (see docs/CONFORMANCE.md).
# For the tiny preset in three quant mixes: llama.cpp loads the file; its tokenizer agrees
# with `cinder tokenize` on every corpus string; its CPU last-position logits agree with
# `cinder run` (the CPU reference) within the bound of that mix. Then a YaRN model at
# positions past its original context.
# Run by ctest with CINDER_SOURCE_DIR, CINDER_TEST_TMP and CINDER_BIN. Never skips: a
# missing llama.cpp is a failure (run scripts/setup.sh).
set -euo pipefail
source "$(dirname "$0")/oracle/test_env.sh"
oracle_test_env conformance_llama conformance

corpus=(--corpus "$src/tests/data/conformance_prompts.txt")
[ -f "$src/tests/data/tokenizer_corpus.json" ] && corpus+=(--corpus "$src/tests/data/tokenizer_corpus.json")

# Bounds per quant mix (docs/CONFORMANCE.md has the measured numbers and the reasons):
#   f32: both sides compute in float32 (cinder accumulates in double): rel L2 <= 1e-4 and
#     equal top-1 on every prompt (measured ~3e-7).
#   mix, q4_k_m, mix-lowbit (Q2_K, Q3_K, Q4_0 .. Q5_1, IQ4_NL, IQ4_XS, IQ3_*, IQ2_*, IQ1_*, MXFP4), mxfp4_moe: first against llama.cpp on the same weights dequantized to F32 by ggml, to
#     the f32 bound: this tests cinder's dequantization and forward pass exactly. Then
#     against llama.cpp on the quantized file, whose CPU matmuls round activations to
#     Q8_K/Q8_0 (F16/BF16 for F16/BF16 weights): ~1.4% logit error (worst 2.0% over 120
#     random prompts), bound 0.06, median bound 0.03; top-1 equal except near ties (within
#     3x the RMS logit difference). Now and then the rounding changes which experts a layer
#     picks for some position (llama.cpp's quantized and F32 runs disagree: a "flip"); such
#     a prompt is held only to rel L2 <= 0.6 (worst measured 0.26) and may change its top-1.
# quant  max-rel-L2  flip-max-rel-L2  tie-rms
cases=(
  "f32    1e-4  1e-4  0"
  "mix    0.06  0.6   3"
  "q4_k_m 0.06  0.6   3"
  "mix-lowbit 0.06 0.6 3"
  "mxfp4_moe 0.06 0.6 3"
)

status=0
rm -f "$tmp/summary.jsonl"
for c in "${cases[@]}"; do
  read -r quant max_rel flip_max_rel tie_rms <<<"$c"
  model=$tmp/tiny-$quant.gguf
  "$bin" mkmodel --preset tiny --quant "$quant" --out "$model" 2>"$tmp/mkmodel.log" ||
    { cat "$tmp/mkmodel.log" >&2; fail "cinder mkmodel --preset tiny --quant $quant failed"; }
  exact=() deq=
  if [ "$quant" != f32 ]; then
    deq=$tmp/tiny-$quant-f32.gguf
    "$oracle" "$model" --dequantize "$deq" || fail "llama_oracle --dequantize $model failed"
    exact=(--dequantized "$deq" --exact-max-rel-l2 1e-4 --flip-max-rel-l2 "$flip_max_rel")
  fi
  python3 "$src/tests/oracle/conformance.py" --cinder "$bin" --oracle "$oracle" --model "$model" \
    --work "$tmp/work" --label "tiny-$quant" --max-rel-l2 "$max_rel" --tie-rms "$tie_rms" \
    --summary "$tmp/summary.jsonl" "${exact[@]}" "${corpus[@]}" || status=1
  rm -f "$model" ${deq:+"$deq"} # the next mix's files in their place: the disk holds one mix at a time
  echo
done
# YaRN (rope.scaling.type yarn, factor 4, original context 64, context 256), llama.cpp reading
# it from the file: one prompt within the original context, two past it (the last at position 254,
# ~4x out), to the f32 bound. The same model without YaRN is ~0.2 off at 200 tokens, so a RoPE
# that ignored the scaling (or scaled it wrong) fails here.
model=$tmp/tiny-yarn.gguf
"$bin" mkmodel --preset tiny --quant f32 --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 64 \
  --out "$model" 2>"$tmp/mkmodel.log" || { cat "$tmp/mkmodel.log" >&2; fail "cinder mkmodel (YaRN) failed"; }
python3 "$src/tests/oracle/conformance.py" --cinder "$bin" --oracle "$oracle" --model "$model" \
  --work "$tmp/work" --label "tiny-yarn" --max-rel-l2 1e-4 --lengths 40,130,255 \
  --summary "$tmp/summary.jsonl" || status=1
echo
[ $status -eq 0 ] && echo "conformance_llama: all checks passed" || echo "conformance_llama: FAILED" >&2
exit $status
