#!/usr/bin/env bash
# The files people download, as llama.cpp's own quantizer makes them: one F16 tiny model
# quantized by llama_model_quantize (llama-quantize's whole per-tensor policy) to every preset
# whose types cinder computes with. For each: `cinder info` names the preset, and every token of
# greedy generation on the CPU reference and on the Vulkan engine is llama.cpp's top-1 on the
# same file and prefix, or a near tie (tests/oracle/greedy.py says which ties, and caps them). A preset with a type cinder does not
# compute with is refused by `cinder run`, naming the type.
# Run by ctest with CINDER_SOURCE_DIR, CINDER_TEST_TMP and CINDER_BIN. Never skips: a missing
# llama.cpp is a failure (run scripts/setup.sh).
set -euo pipefail
source "$(dirname "$0")/oracle/test_env.sh"
oracle_test_env presets_llama presets

f16=$tmp/tiny-f16.gguf
"$bin" mkmodel --preset tiny --quant f16 --out "$f16" 2>"$tmp/mkmodel.log" ||
  { cat "$tmp/mkmodel.log" >&2; fail "cinder mkmodel --preset tiny --quant f16 failed"; }

quantize() { # preset -> the quantized file's path
  local out=$tmp/tiny-$1.gguf
  "$oracle" "$f16" --quantize "$1" --out "$out" >"$tmp/quantize.log" 2>&1 ||
    { cat "$tmp/quantize.log" >&2; fail "llama_model_quantize to $1 failed"; }
  echo "$out"
}

# One prompt, a chat turn's opening, and 16 greedy tokens: a second prompt cost each preset two
# more cinder processes (~3 s, most of it the Vulkan engine's start on lavapipe) for 10 steps;
# conformance_llama covers more prompts on fewer types.
prompts=(--prompt 151644,872,198,3838,374,279,6722,315,9625,30,151645,198)
# Every preset llama-quantize makes without an importance matrix whose types cinder computes:
# K-quants, legacy, IQ4, MXFP4 and IQ3_S / IQ3_M (the IQ1/IQ2, IQ3_XXS/IQ3_XS and Q2_K_S presets
# need an imatrix; IQ3_XXS weights are checked by test_quant, the kernel tests and mkmodel's
# iq3 mix in cli_contract).
supported=(Q8_0 Q6_K Q5_K_M Q5_K_S Q4_K_M Q4_K_S Q3_K_L Q3_K_M Q3_K_S Q2_K Q5_1 Q5_0 Q4_1 Q4_0 IQ4_XS IQ4_NL MXFP4_MOE
  IQ3_S IQ3_M)
status=0
for p in "${supported[@]}"; do
  model=$(quantize "$p")
  "$bin" info --no-plan "$model" >"$tmp/info.txt" 2>&1 || { cat "$tmp/info.txt" >&2; fail "cinder info on the $p file failed"; }
  grep -q "^file type  *$p (" "$tmp/info.txt" || { cat "$tmp/info.txt" >&2; fail "cinder info does not name the $p preset"; }
  python3 "$src/tests/oracle/greedy.py" --cinder "$bin" --oracle "$oracle" --model "$model" --work "$tmp/work" \
    --label "$p" --n 16 "${prompts[@]}" || status=1
  rm -f "$model" # one preset's file on disk at a time
done

# A preset of a type cinder does not compute (TQ1_0, ternary): refused by name, nothing run.
model=$(quantize TQ1_0)
if "$bin" run --cpu --model "$model" --tokens 1,2 --n 1 >"$tmp/run.txt" 2>&1; then
  fail "cinder run accepted a TQ1_0 file"
fi
grep -q "has type TQ1_0, which cinder does not compute with" "$tmp/run.txt" ||
  { cat "$tmp/run.txt" >&2; fail "the TQ1_0 refusal does not name TQ1_0"; }
echo "[TQ1_0] refused: $(tail -1 "$tmp/run.txt")"

[ "$status" = 0 ] && echo "presets_llama: all checks passed" || fail "greedy tokens differ from llama.cpp's (above)"
