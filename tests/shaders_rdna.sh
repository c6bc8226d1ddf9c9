#!/usr/bin/env bash
# Every pipeline of the GPU device plan, compiled by RDNA's own compiler (ACO, through RADV's
# null device: RADV_FORCE_FAMILY, no card) for RDNA3 (gfx1100) and RDNA2 (navi21), on models of
# the Q4_K_M type mix and of the 4-8-bit mix, and for RDNA3 on one of the low-bit types (mix-lowbit:
# Q2_K .. IQ1_M, each type's decoder in every kernel) (cinder profile --shaders --family F --json):
#   - no pipeline spills (VGPRs, SGPRs) or uses scratch, and none needs more than 64 KiB of LDS;
#   - a pipeline that asked for a subgroup size was compiled at it, and the decode rows kernels
#     run as wave32 (pinned), so no decode workgroup is smaller than its compiled subgroup;
#   - the rows kernels' weight loops issue 16-byte loads;
#   - the plan is whole: matmul, matmul_rows, attn_prefill, moe_group, rmsnorm, head_norm_rope.
# The table itself, and the targets not yet met (lanes resident per SIMD), are in docs/PERF.md
# ("RDNA's compiler").
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/shaders_rdna
mkdir -p "$tmp"
"$bin" mkmodel --preset small --quant q4_k_m --layers 1 --seed 3 --out "$tmp/q4km.gguf" >/dev/null 2>&1
"$bin" mkmodel --preset small --quant mix --layers 2 --seed 4 --out "$tmp/mix.gguf" >/dev/null 2>&1
"$bin" mkmodel --preset tiny --quant mix-lowbit --seed 5 --out "$tmp/lowbit.gguf" >/dev/null 2>&1
for fam in gfx1100 navi21; do
  for m in q4km mix; do
    "$bin" profile --shaders --family "$fam" --model "$tmp/$m.gguf" --json >"$tmp/$fam-$m.json"
  done
done
"$bin" profile --shaders --family gfx1100 --model "$tmp/lowbit.gguf" --json >"$tmp/gfx1100-lowbit.json"
# a family RADV does not know, and a device without the statistics, fail naming the problem
if "$bin" profile --shaders --family nosuchgpu --model "$tmp/q4km.gguf" >"$tmp/bad.out" 2>&1; then
  echo "FAIL: --family nosuchgpu succeeded"; exit 1
fi
grep -q "cinder profile" "$tmp/bad.out" || { echo "FAIL: no clear error for an unknown family"; cat "$tmp/bad.out"; exit 1; }

python3 - "$tmp"/*-q4km.json "$tmp"/*-mix.json "$tmp"/gfx1100-lowbit.json <<'PY'
import json, sys
fail = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fail.append(what)
for path in sys.argv[1:]:
    rep = json.load(open(path))
    ps = rep["pipelines"]
    tag = path.rsplit("/", 1)[1]
    check("Null hardware (RADV" in rep["device"], f"{tag}: compiled on RADV's null device ({rep['device']})")
    names = {p["name"] for p in ps}
    for want in ("matmul", "matmul_rows", "attn_prefill", "moe_group", "rmsnorm", "head_norm_rope"):
        check(want in names, f"{tag}: the plan has {want}")
    for p in ps:
        key = f"{tag}: {p['name']} {p['shape']}"
        check(p["vgprs"] > 0 and p["instructions"] > 0, f"{key}: statistics reported")
        check(p["spilled_vgprs"] == 0 and p["spilled_sgprs"] == 0 and p["scratch_bytes"] == 0, f"{key}: no spills, no scratch")
        check(0 <= p["lds_bytes"] <= 65536, f"{key}: LDS {p['lds_bytes']} within 64 KiB")
        if p["required_subgroup"]:
            check(p["subgroup"] == p["required_subgroup"], f"{key}: compiled at the subgroup size asked ({p['required_subgroup']})")
        if p["name"] == "matmul_rows":
            check(p["required_subgroup"] == 32 and p["workgroup"] >= p["subgroup"], f"{key}: wave32, workgroup {p['workgroup']} >= subgroup {p['subgroup']}")
            check(p["loads"]["b128"] > 0, f"{key}: 16-byte loads ({p['loads']['b128']})")
print(f"{len(fail)} failed")
sys.exit(1 if fail else 0)
PY
