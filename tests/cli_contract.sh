#!/usr/bin/env bash
# The command-line contract scripts rely on: cinder info / tokenize / detokenize / mkmodel /
# run / bench / chat (and its --cache-dir across processes, its budget --cache-dir-max-mb, an
# injected failed write), their JSON fields, and clear errors with a non-zero status on bad input.
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/cli
mkdir -p "$tmp"
model=$tmp/tiny.gguf
source "$(dirname "$0")/check.sh"

check "mkmodel tiny" "$bin" mkmodel --preset tiny --seed 3 --out "$model"

info=$("$bin" info "$model")
check "info names the architecture" grep -q "architecture      qwen3moe" <<<"$info"
check "info prints a 64-hex fingerprint" grep -Eq "^fingerprint +[0-9a-f]{64}$" <<<"$info"
check "info lists tensors with types" grep -Eq "^blk.1.ffn_down_exps.weight +Q6_K" <<<"$info"
check "info names the chat template the file carries" grep -q "^chat template     qwen3 (the exact text cinder renders)$" <<<"$info"
# what the file is (tools/info_file.c; every line on writer-made files: tests/test_info_file.c)
check "info prints general.name" grep -q "^name              tiny$" <<<"$info"
check "info says the mix has no llama.cpp file type" grep -q "^file type         not recorded (no general.file_type" <<<"$info"
check "info counts the bytes on disk" grep -q "^bytes on disk     $(wc -c <"$model") (" <<<"$info"
check "info prints the context and RoPE settings" grep -q "^rope scaling      none$" <<<"$info"
check "... the context length" grep -Eq "^context \(train\)   [0-9]+$" <<<"$info"
# RoPE scaling from the command line (llama.cpp's flags; a YaRN file mkmodel writes: conformance_llama.sh,
# the same fingerprint from the file and the flags: tests/test_model.c)
check "info shows the RoPE as run" grep -q "^rope as run       theta 1e+06, none$" <<<"$info"
yarn_info=$("$bin" info --no-plan "$model" --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 1024)
check "info --rope-scaling yarn: YaRN with llama.cpp's attention factor" grep -q "^rope as run       theta 1e+06, yarn, factor 4, original context 1024, attention factor 1.1386$" <<<"$yarn_info"
check "... the context becomes original x factor" grep -q "^context           4096$" <<<"$yarn_info"
check "... and another fingerprint" test "$(grep ^fingerprint <<<"$yarn_info")" != "$(grep ^fingerprint <<<"$info")"
fails_with "--rope-scaling refuses a type cinder does not run" "RoPE scaling 'longrope' is not supported (cinder runs none, linear and yarn)" "$bin" run --model "$model" --tokens 1 --rope-scaling longrope
fails_with "a YaRN factor below 1 is refused" "its factor must be at least 1" "$bin" info "$model" --rope-scaling yarn --rope-scale 0.5
fails_with "mkmodel --rope-scale needs --rope-scaling" "--rope-scale and --yarn-orig-ctx need --rope-scaling" "$bin" mkmodel --preset tiny --rope-scale 4 --out "$tmp/x.gguf"
# The memory plan: before a weight is read, the weights must fit what the device has left after
# the KV pool and the work buffers (--device-memory-mb plans for a smaller card)
fails_with "a file larger than the device is refused, naming the sizes" "the weights need" \
  "$bin" run --model "$model" --tokens 1 --n 1 --device-memory-mb 1
err=$(printf 'hi\n' | "$bin" chat --model "$model" --n 1 --kv-pool-tokens 2000000 --device-memory-mb 700 2>&1 >/dev/null || true)
fit=$(sed -n 's/.*a KV pool of \([0-9]*\) tokens would leave room for them.*/\1/p' <<<"$err")
check "a KV pool too large for the device is refused, with the pool that would fit ($fit tokens)" test -n "$fit"
check "... which does: the same chat with that pool runs" bash -c "printf 'hi\n' | '$bin' chat --model '$model' --n 1 --kv-pool-tokens '$fit' --device-memory-mb 700 >/dev/null 2>&1"
# info shows that plan before any weight is read: the sizes, and what run would say where it does not fit
check "info: the memory plan fits this device" grep -Eq "^  total +[0-9.]+ (MiB|GiB) of [0-9.]+ (MiB|GiB): fits$" <<<"$info"
check "info: the plan's KV pool is 4 x the file's context" grep -q "^  KV pool         163840 tokens, .* (context 40960)$" <<<"$info"
plan_ctx=$("$bin" info "$model" --ctx 8192 --device-memory-mb 700 2>/dev/null)
check "info --ctx 8192 --device-memory-mb 700: a pool of 4 x 8192, against 700 MiB" \
  bash -c 'grep -q "^  KV pool         32768 tokens, .* (context 8192)$" <<<"$1" && grep -q "^memory plan .*: 700.0 MiB (as asked" <<<"$1"' _ "$plan_ctx"
small=$("$bin" info "$model" --device-memory-mb 1 2>/dev/null)
says=$(sed -n 's/^  cinder says     //p' <<<"$small")
check "info --device-memory-mb 1: does not fit, and says why" bash -c 'grep -q ": does not fit$" <<<"$1" && grep -q "the weights need" <<<"$2"' _ "$small" "$says"
chat_err=$(printf 'hi\n' | "$bin" chat --model "$model" --n 1 --device-memory-mb 1 2>&1 >/dev/null || true)
check "... in the words chat refuses with" grep -qF "$says" <<<"$chat_err"
serve_plan=$("$bin" info "$model" --parallel 8 2>/dev/null | sed -n 's/^  work buffers    //p')
check "info --parallel 8 (serve's default): more work buffers than one sequence's" \
  python3 -c 'import sys; mib = lambda s: float(s.split()[0]) * (1024 if "GiB" in s else 1); sys.exit(not mib(sys.argv[1]) > mib(sys.argv[2]))' \
  "$serve_plan" "$(sed -n 's/^  work buffers    //p' <<<"$info")"
check "info --no-plan: no plan" bash -c '! "$1" info --no-plan "$2" | grep -q "^memory plan"' _ "$bin" "$model"
# Experts in host memory (--n-cpu-moe / --cpu-moe, or the plan's choice): the device's kernels read
# the same bytes there, so the same tokens. A model whose experts weigh: 64 of 512 per layer.
moe=$tmp/moe64.gguf
check "mkmodel a model with 64 experts of 512" "$bin" mkmodel --preset tiny --seed 5 --experts 64 --ff 512 --quant q8_0 --out "$moe"
run_moe() { "$bin" run --model "$moe" --tokens 9707,11,1879 --n 6 --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
want=$(run_moe)
check "--cpu-moe: every layer's experts in host memory, the same tokens" test "$(run_moe --cpu-moe)" = "$want"
check "--n-cpu-moe 1: the first layer's, the same tokens" test "$(run_moe --n-cpu-moe 1)" = "$want"
# The plan's choice on a card simulated between the two sizes: the weights with no experts in host
# memory (A) and with both layers' (B) from the refusals, the work buffers (W); a card of W + (A + B) / 2
# + 1 MiB holds the weights with one layer's experts in host memory and not with none.
mib() { sed -n "s/.*$1 \([0-9.]*\) MiB.*/\1/p"; }
none=$("$bin" run --model "$moe" --tokens 1 --n 1 --n-cpu-moe 0 --device-memory-mb 1 2>&1 || true)
both=$("$bin" run --model "$moe" --tokens 1 --n 1 --cpu-moe --device-memory-mb 1 2>&1 || true)
a=$(mib "the weights need" <<<"$none") b=$(mib "the weights need" <<<"$both") w=$(mib "the work buffers" <<<"$none")
check "the refusals name the sizes (weights $a / $b MiB, work buffers $w MiB)" test -n "$a" -a -n "$b" -a -n "$w"
card=$(python3 -c "import math; print(math.ceil($w + ($a + $b) / 2 + 1))")
err=$("$bin" run --model "$moe" --tokens 9707,11,1879 --n 6 --json --device-memory-mb "$card" 2>&1 >"$tmp/moe.json")
check "a $card MiB card: the plan keeps one layer's experts in host memory, and says so" grep -q "the experts of 1 of 2 layers (.*) stay in host memory" <<<"$err"
check "... with the same tokens" test "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$tmp/moe.json")" = "$want"
fails_with "--n-cpu-moe 0 on that card: refused, naming the sizes" "the weights need" \
  "$bin" run --model "$moe" --tokens 1 --n 1 --n-cpu-moe 0 --device-memory-mb "$card"
# The KV pool of chat and serve: 4 x ctx where the device has the room; else the pool that leaves
# room for every weight (not below one context), and only then experts in host memory. The
# tokens never change with the pool's size. (At --ctx 8192: the default context has checks of its own below.)
chat_text() { printf 'hi\n' | "$bin" chat --n 4 --json --ctx 8192 "$@" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["text"])'; }
full=$(printf 'hi\n' | "$bin" chat --model "$model" --n 1 --n-cpu-moe 0 --device-memory-mb 1 2>&1 >/dev/null || true)
a=$(mib "the weights need" <<<"$full") w=$(mib "the work buffers" <<<"$full")
small=$(python3 -c "import math; print(math.ceil($a + $w + 1))")
big=$(printf 'hi\n' | "$bin" chat --model "$model" --n 1 --n-cpu-moe 0 --kv-pool-tokens 32768 --device-memory-mb "$small" 2>&1 >/dev/null || true)
x=$(sed -n 's/.*the KV pool (32768 tokens) holds \([0-9.]*\) MiB.*/\1/p' <<<"$big")
check "the refusals name the sizes (weights $a MiB, work buffers $w MiB, a pool of 4 x ctx $x MiB)" test -n "$a" -a -n "$w" -a -n "$x"
card=$(python3 -c "import math; print(math.floor($a + $w + $x / 2))")
want=$(chat_text --model "$model")
err=$(chat_text --model "$model" --device-memory-mb "$card" 2>&1 >"$tmp/pool.txt")
pool=$(sed -n 's/^cinder: a KV pool of \([0-9]*\) tokens .* leaves room for the weights on this device, not 32768 .*/\1/p' <<<"$err")
check "a $card MiB card: chat's pool shrinks to what leaves room for the weights ($pool tokens), and says so" \
  test -n "$pool" -a "${pool:-0}" -ge 8192 -a "${pool:-0}" -lt 32768
check "... every weight on the device" test -z "$(grep 'stay in host memory' <<<"$err")"
check "... the same reply" test "$(cat "$tmp/pool.txt")" = "$want"
fails_with "... and a pool asked for stays as asked: refused" "a KV pool of" \
  bash -c "printf 'hi\n' | '$bin' chat --model '$model' --n 1 --kv-pool-tokens 32768 --device-memory-mb '$card'"
# A 64-expert card with room for one context's pool only beside one layer's experts in host
# memory: the pool is one context, and the plan hosts that layer's experts.
mfull=$(printf 'hi\n' | "$bin" chat --model "$moe" --n 1 --n-cpu-moe 0 --device-memory-mb 1 2>&1 >/dev/null || true)
ma=$(mib "the weights need" <<<"$mfull") mw=$(mib "the work buffers" <<<"$mfull")
mcard=$(python3 -c "import math; print(math.ceil($mw + ($ma + $b) / 2 + $x / 4 + 1))")
mwant=$(chat_text --model "$moe")
err=$(chat_text --model "$moe" --device-memory-mb "$mcard" 2>&1 >"$tmp/pool.txt")
check "a $mcard MiB card: a pool of one context (8192 tokens)" grep -q "^cinder: a KV pool of 8192 tokens .* holds one context" <<<"$err"
check "... beside one layer's experts in host memory" grep -q "the experts of 1 of 2 layers (.*) stay in host memory" <<<"$err"
check "... the same reply" test "$(cat "$tmp/pool.txt")" = "$mwant"
# The default context: the file's, or on a card without room for one context beside the weights
# what fits (not below 4096 tokens), said on stderr; a context asked for stays as asked.
chat_ctx() { printf 'hi\n' | "$bin" chat --n 4 --json "$@" | python3 -c 'import json,sys; t = json.loads(sys.stdin.readline()); print(t["n_ctx"], t["text"])'; }
file_ctx=$(sed -n 's/^context  *\([0-9]*\)$/\1/p' <<<"$info")
roomy=$(chat_ctx --model "$model")
check "chat's default context is the file's ($file_ctx tokens)" test -n "$file_ctx" -a "${roomy%% *}" = "$file_ctx"
card=$(python3 -c "import math; print(math.floor($a + $w + $x / 2))") # room for ~16,384 tokens of KV
err=$(chat_ctx --model "$model" --device-memory-mb "$card" 2>&1 >"$tmp/ctx.txt")
fitted=$(sed -n "s/^cinder: a context of \([0-9]*\) tokens fits this device, not the file's $file_ctx (--ctx sets it)$/\1/p" <<<"$err")
check "a $card MiB card: the default context shrinks to what fits ($fitted tokens), and says so" \
  test -n "$fitted" -a "${fitted:-0}" -ge 4096 -a "${fitted:-0}" -lt "$file_ctx"
check "... the engine runs that context" test "$(cut -d' ' -f1 "$tmp/ctx.txt")" = "$fitted"
check "... every weight on the device" test -z "$(grep 'stay in host memory' <<<"$err")"
check "... the same reply" test "$(cut -d' ' -f2- "$tmp/ctx.txt")" = "${roomy#* }"
fails_with "... and a context asked for stays as asked: refused" "the weights need" \
  bash -c "printf 'hi\n' | '$bin' chat --model '$model' --n 1 --n-cpu-moe 0 --ctx $file_ctx --device-memory-mb '$card'"
check "info's type histogram adds up to the tensor count" grep -q "^tensor types      7 types, 27 tensors, [0-9]* bytes$" <<<"$info"
check "info's type histogram has a row per type" grep -Eq "^  Q6_K +5 +[0-9]+ +[0-9.]+%$" <<<"$info"
# mkmodel --chat-template-file: any text; info, chat and serve recognise it or refuse it
coder_tmpl=${CINDER_SOURCE_DIR:?}/third_party/llama/src/models/templates/Qwen3-Coder.jinja
check "mkmodel --chat-template-file" "$bin" mkmodel --preset tiny --seed 3 --layers 1 --chat-template-file "$coder_tmpl" --out "$tmp/coder.gguf"
check "info recognises Qwen3-Coder's template" grep -q "^chat template     qwen3-coder (the exact text cinder renders)$" <<<"$("$bin" info --no-plan "$tmp/coder.gguf")"
sed 's/You are Qwen, a helpful AI assistant/You are a helpful assistant/' "$coder_tmpl" >"$tmp/coder_variant.jinja"
"$bin" mkmodel --preset tiny --seed 3 --layers 1 --chat-template-file "$tmp/coder_variant.jinja" --out "$tmp/coder_variant.gguf" 2>/dev/null
check "info says a changed Coder template is unknown, a variant of qwen3-coder" grep -q "^chat template     unknown, a variant of qwen3-coder by its markers (" <<<"$("$bin" info --no-plan "$tmp/coder_variant.gguf")"
fails_with "chat refuses a variant, saying which --chat-template renders it" "its markers say it is a variant of qwen3-coder (Qwen3-Coder, XML tool calls); render it with that layout by passing --chat-template qwen3-coder" "$bin" chat --model "$tmp/coder_variant.gguf" </dev/null
printf '{%% for m in messages %%}{{ m.content }}{%% endfor %%}' >"$tmp/odd.jinja"
"$bin" mkmodel --preset tiny --seed 3 --layers 1 --chat-template-file "$tmp/odd.jinja" --out "$tmp/odd.gguf" 2>/dev/null
check "info says an unknown template is unknown" grep -q "^chat template     unknown (50 bytes, hash [0-9a-f]\{16\}): serve and chat need --chat-template NAME$" <<<"$("$bin" info --no-plan "$tmp/odd.gguf")"
fails_with "chat refuses an unknown template, naming the known ones" "is none cinder renders; cinder knows qwen3 (Qwen3 hybrid thinking), qwen3-coder (Qwen3-Coder, XML tool calls): pick one with --chat-template NAME" "$bin" chat --model "$tmp/odd.gguf" </dev/null
fails_with "serve refuses an unknown template" "is none cinder renders; cinder knows qwen3" "$bin" serve --model "$tmp/odd.gguf" --port 0
check "chat --chat-template NAME renders a file's unknown template with NAME" "$bin" chat --model "$tmp/odd.gguf" --chat-template qwen3 --n 2 <<<"hi"
fails_with "--chat-template takes a known name" 'chat: --chat-template: unknown chat template "llama3"; cinder knows qwen3 (' "$bin" chat --model "$model" --chat-template llama3 </dev/null
fails_with "serve --chat-template takes a known name" 'unknown chat template "Qwen3"' "$bin" serve --model "$model" --chat-template Qwen3 --port 0
fails_with "bench --chat-template takes a known name" 'unknown chat template "x"' "$bin" bench --model "$model" --scenario agent_tool_loop --chat-template x
fails_with "mkmodel --chat-template-file needs a readable file" "--chat-template-file $tmp/none.jinja: No such file or directory" "$bin" mkmodel --preset tiny --out "$tmp/x.gguf" --chat-template-file "$tmp/none.jinja"
dev=$("$bin" info --device)
check "info --device prints the 32-hex code id" grep -Eq "^  code id +[0-9a-f]{32} \(" <<<"$dev"
check "the code id is the same on a second run" test "$(grep "code id" <<<"$dev")" = "$("$bin" info --device | grep "code id")"

ids=$("$bin" tokenize --model "$model" "<|im_start|>user
Hello, world!<|im_end|>")
check "tokenize parses special tokens" test "${ids%%,*}" = 151644
plain=$("$bin" tokenize --model "$model" --no-special "<|im_start|>")
check "--no-special tokenizes them as text" test "$plain" != 151644
text=$("$bin" detokenize --model "$model" "$ids")
check "detokenize inverts tokenize" test "$text" = "<|im_start|>user
Hello, world!<|im_end|>"
n=$("$bin" tokenize --model "$model" --json "a b c" | json_field 'd["n_tokens"]')
check "tokenize --json" test "$n" = 3

out=$("$bin" run --model "$model" --tokens 1,2,3,4,5 --n 6 --json --logits 5 --ignore-eos --cpu)
has=$(json_field 'all(k in d for k in ["tokens","text","prompt_tokens","ttft_ms","prefill_tok_s","decode_tok_s","logits"])' <<<"$out")
check "run --json has the contract fields" test "$has" = True
check "run generated --n tokens" test "$(json_field 'len(d["tokens"])' <<<"$out")" = 6
check "run --logits gives top-K pairs, best first" test "$(json_field 'len(d["logits"]) == 5 and d["logits"][0][1] >= d["logits"][4][1] and d["logits"][0][0] == d["tokens"][0]' <<<"$out")" = True
again=$("$bin" run --model "$model" --tokens 1,2,3,4,5 --n 6 --json --ignore-eos --cpu | json_field 'd["tokens"]')
check "greedy run is deterministic" test "$again" = "$(json_field 'd["tokens"]' <<<"$out")"
gpu=$("$bin" run --model "$model" --tokens 1,2,3,4,5 --n 6 --json --logits 5 --ignore-eos)
check "run defaults to the vulkan backend" test "$(json_field 'd["backend"]' <<<"$gpu")" = vulkan
check "run on the GPU generates the CPU reference's greedy tokens" test "$(json_field 'd["tokens"]' <<<"$gpu")" = "$(json_field 'd["tokens"]' <<<"$out")"
check "run on the GPU gives the CPU's top-5 ids" test "$(json_field '[p[0] for p in d["logits"]]' <<<"$gpu")" = "$(json_field '[p[0] for p in d["logits"]]' <<<"$out")"
fp_info=$(sed -nE 's/^fingerprint +([0-9a-f]{64})$/\1/p' <<<"$info")
check "run --json reports the fingerprint info computes" test "$(json_field 'd["fingerprint"]' <<<"$out")" = "$fp_info"
check "the GPU upload's hash gives the same fingerprint (no second pass)" test "$(json_field 'd["fingerprint"]' <<<"$gpu")" = "$fp_info"
s1=$("$bin" run --model "$model" --tokens 1,2,3 --n 8 --temp 1.0 --seed 9 --json --ignore-eos | json_field 'd["tokens"]')
s2=$("$bin" run --model "$model" --tokens 1,2,3 --n 8 --temp 1.0 --seed 9 --json --ignore-eos | json_field 'd["tokens"]')
check "seeded sampling on the GPU is reproducible" test "$s1" = "$s2"
s3=$("$bin" run --model "$model" --tokens 1,2,3 --n 8 --temp 1.0 --seed 9 --json --ignore-eos --cpu | json_field 'd["tokens"]')
check "seeded sampling on the CPU is reproducible" test "$s3" = "$("$bin" run --model "$model" --tokens 1,2,3 --n 8 --temp 1.0 --seed 9 --json --ignore-eos --cpu | json_field 'd["tokens"]')"

bench=$("$bin" bench --model "$model" --prompt-tokens 20 --gen 4 --repeat 2 --json)
check "bench --json reports prefill and decode tok/s" test "$(json_field 'd["prefill_tok_s"] > 0 and d["decode_tok_s"] > 0 and d["prompt_tokens"] == 20' <<<"$bench")" = True
check "bench --json lists each repeat, the medians theirs" test "$(json_field 'len(d["prefill_runs"]) == 2 and len(d["decode_runs"]) == 2 and abs(sum(d["prefill_runs"]) / 2 - d["prefill_tok_s"]) < 1e-3 * d["prefill_tok_s"] and abs(sum(d["decode_runs"]) / 2 - d["decode_tok_s"]) < 1e-3 * d["decode_tok_s"]' <<<"$bench")" = True
fails_with "bench past the context" "exceed the model's context" "$bin" bench --model "$model" --prompt-tokens 999999 --gen 1
bench_opts=$("$bin" bench --model "$model" --prompt-tokens 12 --gen 3 --repeat 1 --json-object --logprobs 5 --json)
check "bench --json-object --logprobs 5 runs" test "$(json_field 'd["decode_tok_s"] > 0' <<<"$bench_opts")" = True
fails_with "bench --logprobs past 20" "--logprobs is at most 20" "$bin" bench --model "$model" --logprobs 21
bench_score=$("$bin" bench --model "$model" --prompt-tokens 70 --gen 2 --repeat 1 --prompt-logprobs 1 --json)
check "bench --prompt-logprobs runs and says so" test "$(json_field 'd["prompt_logprobs"] == 1 and d["prefill_tok_s"] > 0' <<<"$bench_score")" = True
fails_with "bench --prompt-logprobs past 20" "--prompt-logprobs is at most 20" "$bin" bench --model "$model" --prompt-logprobs 21
echo '{"type": "object", "properties": {"a": {"enum": [1, 2]}}, "required": ["a"]}' >"$tmp/schema.json"
bench_schema=$("$bin" bench --model "$model" --prompt-tokens 12 --gen 3 --repeat 1 --json-schema "$tmp/schema.json" --json)
check "bench --json-schema runs" test "$(json_field 'd["decode_tok_s"] > 0' <<<"$bench_schema")" = True
echo '{"type": "integer", "multipleOf": 3}' >"$tmp/strict.json"
fails_with "bench --json-schema names what it cannot enforce" "multipleOf is not supported" "$bin" bench --model "$model" --json-schema "$tmp/strict.json"
fails_with "bench --json-schema and --json-object exclude each other" "not with --json-object" "$bin" bench --model "$model" --json-schema "$tmp/schema.json" --json-object
bench_spec=$("$bin" bench --model "$model" --prompt-text "one two one two one two one" --gen 6 --repeat 1 --spec-tokens 4 --json)
check "bench --spec-tokens --prompt-text runs and reports its guesses" test "$(json_field 'd["spec_tokens"] == 4 and d["accepted_tokens"] <= d["draft_tokens"] and d["prompt_tokens"] == 7' <<<"$bench_spec")" = True
fails_with "bench --spec-tokens past 8" "--spec-tokens is at most 8" "$bin" bench --model "$model" --spec-tokens 9
fails_with "serve --spec-tokens past 8" "--spec-tokens is at most 8" "$bin" serve --model "$model" --spec-tokens 9
fails_with "chat --spec-tokens past 8" "--spec-tokens is at most 8" "$bin" chat --model "$model" --spec-tokens 9 </dev/null
chat_plain=$(printf 'Say one two one two\n' | "$bin" chat --model "$model" --n 12 --json 2>/dev/null)
chat_spec=$(printf 'Say one two one two\n' | "$bin" chat --model "$model" --n 12 --json --spec-tokens 4 2>/dev/null)
check "chat --spec-tokens gives the same reply" test -n "$chat_plain" -a "$(json_field 'd["text"]' <<<"$chat_spec")" = "$(json_field 'd["text"]' <<<"$chat_plain")"
fails_with "bench --gate-up-pairs names the choices" "--gate-up-pairs maybe: auto, on or off" "$bin" bench --model "$model" --gate-up-pairs maybe
fails_with "profile --gate-up-pairs names the choices" "--gate-up-pairs yes: auto, on or off" "$bin" profile --model "$model" --gate-up-pairs yes
fails_with "bench --int-dot names the choices" "--int-dot 2: auto, on or off" "$bin" bench --model "$model" --int-dot 2
fails_with "profile --few-shape needs three or four numbers" "--few-shape 4,8: 3 or 4 comma-separated numbers" "$bin" profile --model "$model" --few-shape 4,8
fails_with "profile --head-shape takes at most four numbers" "--head-shape 8,8,4,2,1: 3 or 4 comma-separated numbers" "$bin" profile --model "$model" --head-shape 8,8,4,2,1
fails_with "profile --one-shape refuses a sign" "--one-shape -4,8: 2 comma-separated numbers" "$bin" profile --model "$model" --one-shape -4,8

# thinking follows the template (the tiny model carries the hybrid Qwen3 one): on by default, so
# the generation prompt has no empty think block; --no-think adds its 4 tokens, --think is the default
think_tokens() { printf 'Hello there\n' | "$bin" chat --model "$model" --n 1 --json "$@" | json_field 'd["prompt_tokens"]'; }
think_default=$(think_tokens)
check "chat thinks by default, as the hybrid template does: --no-think adds the empty think block" \
  test "$(think_tokens --no-think)" = "$((think_default + 4))" -a "$(think_tokens --think)" = "$think_default"
chat=$(printf 'Hello there\nAnd a second question\n/stats\nA third\n' | "$bin" chat --model "$model" --n 4 --page-size 4 --json)
check "chat: one JSON line per turn" test "$(wc -l <<<"$chat")" = 3
check "chat: later turns are served from the prefix cache" test "$(python3 -c '
import json, sys
t = [json.loads(l) for l in sys.stdin]
print(all(x["cached_tokens"] + x["prefilled_tokens"] == x["prompt_tokens"] for x in t)
      and t[1]["cached_tokens"] > 0 and t[2]["cached_tokens"] > t[1]["cached_tokens"] and t[2]["prompt_tokens"] > t[1]["prompt_tokens"])' <<<"$chat")" = True
nocache=$(printf 'Hello there\nAnd a second question\n' | "$bin" chat --model "$model" --n 4 --json --no-prefix-cache)
check "chat --no-prefix-cache prefills every turn" test "$(python3 -c '
import json, sys
print([json.loads(l)["cached_tokens"] for l in sys.stdin])' <<<"$nocache")" = "[0, 0]"
check "chat gives the same replies with and without the cache" test \
  "$(python3 -c 'import json,sys; print([json.loads(l)["text"] for l in sys.stdin][:2])' <<<"$chat")" = \
  "$(python3 -c 'import json,sys; print([json.loads(l)["text"] for l in sys.stdin])' <<<"$nocache")"
# a chat longer than the context: the oldest turns after the system prompt are dropped (said on
# stderr), every turn is answered; a message too long alone is refused with both lengths and the
# session goes on; a reply that reaches the context end stops with finish_reason length
printf 'Tell me about the weather in the mountains today please\nAnd what about the sea and the rivers near the coast\nAnd the forests in the north of the country in winter\nOne more question about the desert\n' |
  "$bin" chat --model "$model" --n 4 --ctx 64 --page-size 4 --json --system "You are terse." >"$tmp/drop.json" 2>"$tmp/drop.err" || true
check "chat past --ctx: every turn answered" test "$(wc -l <"$tmp/drop.json")" = 4
check "chat past --ctx: the oldest turns are dropped, said on stderr" grep -Eq "^chat: context full: dropped the [0-9]+ oldest turns? \([0-9]+ tokens\); the prompt is [0-9]+ of 64 tokens$" "$tmp/drop.err"
check "chat past --ctx: each prompt leaves room for the reply" test "$(python3 -c '
import json, sys
t = [json.loads(l) for l in open(sys.argv[1])]
print(all(x["prompt_tokens"] + 4 <= 64 for x in t) and sum(x["dropped_turns"] for x in t) >= 1 and all(x["finish_reason"] in ("stop", "length") for x in t))' "$tmp/drop.json")" = True
printf 'Tell me about the weather in the mountains today please\nAnd what about the sea and the rivers near the coast\n' |
  "$bin" chat --model "$model" --n 4 --ctx 44 --page-size 4 --json >"$tmp/drop2.json" 2>"$tmp/drop2.err" || true
check "chat past --ctx without a system prompt: the first turn is dropped too" test "$(wc -l <"$tmp/drop2.json")-$(grep -c "^chat: context full: dropped the 1 oldest turn " "$tmp/drop2.err")" = 2-1
long=$(python3 -c 'print(" ".join("word%d" % i for i in range(60)))')
rc=0
printf 'Hello\n%s\nHi again\n' "$long" | "$bin" chat --model "$model" --n 4 --ctx 64 --page-size 4 --json --system "You are terse." >"$tmp/long.json" 2>"$tmp/long.err" || rc=$?
check "chat: a message too long alone is refused with both lengths" grep -Eq "the message needs [0-9]+ prompt tokens with the system prompt; the context holds 64 \(--ctx\): not sent" "$tmp/long.err"
check "chat: ... the exit status says a turn failed" test $rc -ne 0
check "chat: ... and the next message is answered with the history intact" test "$(python3 -c '
import json, sys
t = [json.loads(l) for l in open(sys.argv[1])]
print(len(t) == 2 and t[1]["turn"] == 2 and t[1]["dropped_turns"] == 0 and t[1]["cached_tokens"] > t[0]["prompt_tokens"] // 2)' "$tmp/long.json")" = True
ctxend=$(printf 'Hello\n' | "$bin" chat --model "$model" --n 200 --ctx 64 --page-size 4 --json)
check "chat: a reply that reaches the context end stops with finish_reason length" test "$(json_field 'd["finish_reason"] == "length" and d["context_full"] and d["prompt_tokens"] + d["generated"] == 64' <<<"$ctxend")" = True
printf 'Hello\n' | "$bin" chat --model "$model" --n 200 --ctx 64 --page-size 4 >/dev/null 2>"$tmp/ctxend.err"
check "chat: ... and the turn line says so" grep -q "stopped: the context is full (length)" "$tmp/ctxend.err"
trace_full=$("$bin" bench --model "$model" --scenario shared_prefix_basic --ctx 28 --json)
check "bench --scenario --json: finish_reason per request, length at the context end" test "$(json_field 'all(r["finish_reason"] in ("stop", "length") for r in d["requests"]) and any(r["prompt_tokens"] + len(r["generated"]) == 28 and r["finish_reason"] == "length" for r in d["requests"])' <<<"$trace_full")" = True
fails_with "bench --scenario: a prompt past --ctx names both lengths" "request 1: the prompt has 24 tokens; the context holds 20" "$bin" bench --model "$model" --scenario shared_prefix_basic --ctx 20

# the disk tier: a second process serves the first run's prompt chunks (a 256-token chunk of
# the long system prompt) from --cache-dir, with the same reply; a corrupt file is rejected
sys=$(python3 -c "print(' '.join('Rule %d: answer briefly, politely and in plain words.' % i for i in range(30)))")
cdir=$tmp/cache-dir
rm -rf "$cdir"
d1=$(printf 'Hello there\n' | "$bin" chat --model "$model" --n 4 --json --system "$sys" --cache-dir "$cdir")
d2=$(printf 'Hello there\n' | "$bin" chat --model "$model" --n 4 --json --system "$sys" --cache-dir "$cdir")
check "chat --cache-dir: the first run writes chunks" test "$(json_field 'd["disk_chunks_written"] > 0 and d["disk_tokens"] == 0 and d["cached_tokens"] == 0' <<<"$d1")" = True
check "chat --cache-dir: a fresh process serves the prompt's chunks from disk" test "$(json_field 'd["disk_tokens"] >= 256 and d["cached_tokens"] == d["disk_tokens"] and d["disk_rejected"] == 0' <<<"$d2")" = True
check "chat --cache-dir: the same reply" test "$(json_field 'd["text"]' <<<"$d1")" = "$(json_field 'd["text"]' <<<"$d2")"
python3 - "$cdir" <<'PY'
import glob, sys
for f in glob.glob(sys.argv[1] + "/*/*.kv"):
    b = bytearray(open(f, "rb").read()); b[len(b) // 2] ^= 0x40; open(f, "wb").write(b)
PY
d3err=$(printf 'Hello there\n' | "$bin" chat --model "$model" --n 4 --json --system "$sys" --cache-dir "$cdir" 2>&1 >"$tmp/d3.json")
check "chat --cache-dir: a corrupt chunk file is named and rejected on stderr" grep -q "\.kv: corrupt or forged (MAC mismatch: not written with this directory's key); removed, recomputing" <<<"$d3err"
check "chat --cache-dir: ... and recomputed (nothing from disk)" test "$(json_field 'd["disk_tokens"] == 0 and d["disk_rejected"] >= 1' <"$tmp/d3.json")" = True
check "chat --cache-dir: ... with the same reply" test "$(json_field 'd["text"]' <"$tmp/d3.json")" = "$(json_field 'd["text"]' <<<"$d1")"
check "chat --cache-dir: the directory is created 0700, its key 0600" test "$(stat -c %a "$cdir") $(stat -c %a "$cdir/key")" = "700 600"
chmod 0770 "$cdir"
fails_with "chat --cache-dir: a group-writable directory is refused, named" "--cache-dir: $cdir is writable by its group (mode 0770): refusing to use it" "$bin" chat --model "$model" --cache-dir "$cdir"
chmod 0700 "$cdir"
fails_with "chat --cache-dir with --no-prefix-cache" "--cache-dir needs the prefix cache" "$bin" chat --model "$model" --cache-dir "$cdir" --no-prefix-cache
fails_with "chat --host-cache-mb with --no-prefix-cache" "--host-cache-mb N (N > 0) needs the prefix cache" "$bin" chat --model "$model" --host-cache-mb 4 --no-prefix-cache
fails_with "bench --cache-dir with --no-prefix-cache" "--cache-dir needs the prefix cache" "$bin" bench --model "$model" --scenario shared_prefix_basic --cache-dir "$cdir" --no-prefix-cache
fails_with "chat --cache-dir-max-mb 0 is refused, saying why" "--cache-dir-max-mb 0: the disk tier's budget is at least 1 MiB (there is no unlimited budget); leave the flag out for the default" "$bin" chat --model "$model" --cache-dir "$cdir" --cache-dir-max-mb 0
fails_with "serve --cache-dir-max-mb 0 is refused" "--cache-dir-max-mb 0: the disk tier's budget is at least 1 MiB" "$bin" serve --model "$model" --cache-dir "$cdir" --cache-dir-max-mb 0
fails_with "bench --cache-dir-max-mb needs --cache-dir" "--cache-dir-max-mb needs --cache-dir DIR" "$bin" bench --model "$model" --scenario shared_prefix_basic --cache-dir-max-mb 4
fails_with "chat --cache-dir-max-mb: not a number" "--cache-dir-max-mb" "$bin" chat --model "$model" --cache-dir "$cdir" --cache-dir-max-mb lots

# the disk budget and an injected failed write, through bench --trace: five 258-token prompts
# (one 256-token chunk file each, 263,376 bytes for the tiny model) in a 1 MiB budget (three
# files); the second chunk's write fails (CINDER_FAULT_DISK=write:2:enospc): one line on stderr,
# no temp file left; the fifth write evicts the least recently used file; the directory stays
# within the budget and every reply equals the replay without a disk tier
python3 - "$tmp/budget.jsonl" <<'PY'
import json, random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"scenario": "budget", "kind": "tokens", "description": "5 prompts of one disk chunk"}) + "\n")
    for _ in range(5):
        f.write(json.dumps({"prompt_tokens": [random.randrange(100, 20000) for _ in range(258)], "max_tokens": 2}) + "\n")
PY
bdir=$tmp/budget-dir
rm -rf "$bdir"
b0=$("$bin" bench --model "$model" --trace "$tmp/budget.jsonl" --json)
b1=$(CINDER_FAULT_DISK=write:2:enospc "$bin" bench --model "$model" --trace "$tmp/budget.jsonl" --cache-dir "$bdir" --cache-dir-max-mb 1 --json 2>"$tmp/budget.err")
check "bench --cache-dir-max-mb: the same replies as without a disk tier" test "$(json_field '[r["generated"] for r in d["requests"]]' <<<"$b1")" = "$(json_field '[r["generated"] for r in d["requests"]]' <<<"$b0")"
check "bench --cache-dir-max-mb: 4 chunks written, 1 evicted (JSON totals), budget 1 MiB" test "$(json_field '(lambda t: t["disk_chunks_written"] == 4 and t["disk_evicted_chunks"] == 1 and t["disk_evicted_bytes"] == 263376 and t["disk_over_budget"] == 0 and t["disk_budget_bytes"] == 1048576 and t["disk_used_bytes"] == 3 * 263376)(d["totals"])' <<<"$b1")" = True
check "bench --cache-dir-max-mb: the directory's chunk files fit the budget" test "$(cat "$bdir"/*/*.kv | wc -c)" -le 1048576
check "bench --cache-dir-max-mb: no temp file left" test -z "$(ls "$bdir"/*/ | grep '\.tmp$' || true)"
check "CINDER_FAULT_DISK=write:2:enospc: one line on stderr, naming the chunk" test "$(grep -c '\.kv: cannot write: No space left on device; the chunk stays uncached on disk' "$tmp/budget.err")" = 1
check "CINDER_FAULT_DISK=write:2:enospc: the second request wrote nothing, the others one chunk each" test "$(json_field '[r["disk_chunks_written"] for r in d["requests"]]' <<<"$b1")" = "[1, 0, 1, 1, 1]"

trace=$("$bin" bench --model "$model" --scenario shared_prefix_basic --json)
check "bench --scenario --json: requests and totals" test "$(json_field 'len(d["requests"]) == 8 and d["totals"]["prompt_tokens"] == 192 and all("ttft_ms" in r and "generated" in r for r in d["requests"])' <<<"$trace")" = True
# batch invariance end to end: the same generated ids with requests in flight together
trace4=$("$bin" bench --model "$model" --scenario shared_prefix_basic --concurrency 4 --json)
check "bench --scenario --concurrency 4: the generated ids of --concurrency 1" test \
  "$(json_field '[r["generated"] for r in d["requests"]]' <<<"$trace4")" = "$(json_field '[r["generated"] for r in d["requests"]]' <<<"$trace")"
agents=$("$bin" bench --model "$model" --agents 3 --rounds 2 --system-tokens 40 --tool-tokens 8 --gen 4 --json)
check "bench --agents --json: the fields and counts" test "$(json_field 'd["requests"] == 6 and d["generated_tokens"] == 24 and d["cached_tokens"] > 0 and all(k in d for k in ("decode_tok_s_total", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99", "prompt_tokens"))' <<<"$agents")" = True
fails_with "bench --agents with --scenario" "--agents does not go with" "$bin" bench --model "$model" --agents 2 --scenario shared_prefix_basic
printf '{"kind": "tokens"}\n{"prompt_tokens": [1, -5]}\n' >"$tmp/bad.jsonl"
fails_with "bench --trace: bad token id" "prompt_tokens[1]" "$bin" bench --model "$model" --trace "$tmp/bad.jsonl"
printf '{"kind": "tokens"}\nnot json\n' >"$tmp/bad2.jsonl"
fails_with "bench --trace: malformed line" "bad2.jsonl:2" "$bin" bench --model "$model" --trace "$tmp/bad2.jsonl"
fails_with "bench --scenario: unknown name" "no_such.jsonl: cannot open" "$bin" bench --model "$model" --scenario no_such
fails_with "bench --trace: missing file" "cannot open" "$bin" bench --model "$model" --trace "$tmp/none.jsonl"
fails_with "bench --kv-pool-tokens too small" "KV pool too small" "$bin" bench --model "$model" --scenario shared_prefix_basic --kv-pool-tokens 16

sz=$("$bin" mkmodel --preset qwen3-30b-a3b --dry-run | sed -E 's/.*: ([0-9]+) bytes.*/\1/')
check "qwen3-30b-a3b preset is about 17 GB at q4_k_m ($sz bytes)" python3 -c "import sys; sys.exit(not 16e9 < $sz < 19.5e9)"
check "mkmodel --dense writes a dense qwen3" "$bin" mkmodel --preset tiny --dense --ff 512 --quant q8_0 --out "$tmp/dense.gguf"
dense_info=$("$bin" info --no-plan "$tmp/dense.gguf")
check "info on the dense model" grep -q "architecture      qwen3$" <<<"$dense_info"
check "info names the file type as llama.cpp does" grep -q "^file type         Q8_0 (LLAMA_FTYPE_MOSTLY_Q8_0, general.file_type 7)$" <<<"$dense_info"
dense=$("$bin" run --model "$tmp/dense.gguf" --tokens 5,6,7 --n 3 --json --ignore-eos | json_field 'len(d["tokens"])')
check "run on the dense model" test "$dense" = 3

# mkmodel --script: a model whose greedy continuation is the script, after any prompt ending
# with its first token (runtime/model/synth.c, "Scripted models")
script=$'</think>\n\n<tool_call>\n{"name":"get_weather","arguments":{"city": "Paris"}}\n</tool_call><|im_end|>'
check "mkmodel --script" "$bin" mkmodel --preset tiny --seed 5 --script "$script" --out "$tmp/script.gguf"
want=$("$bin" tokenize --model "$tmp/script.gguf" "$script")
want=${want#*,}
for prompt in $'<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>' $'Anything else at all </think>'; do
  for backend in --gpu --cpu; do
    got=$("$bin" run --model "$tmp/script.gguf" --prompt "$prompt" --n 40 --json $backend)
    check "a scripted model generates its script ($backend, prompt ${#prompt} bytes)" \
      test "$(json_field '",".join(map(str, d["tokens"])) + " " + d["finish_reason"]' <<<"$got")" = "$want stop"
  done
done
got=$("$bin" run --model "$tmp/script.gguf" --prompt "x </think>" --n 40 --json --temp 1 --seed 3 | json_field '",".join(map(str, d["tokens"]))')
check "a scripted model's margin holds when sampling at temperature 1" test "$got" = "$want"
fails_with "mkmodel --script refuses a repeated token, naming it" $'script token 6, \'":"\' (id 3252), repeats token 2' \
  "$bin" mkmodel --preset tiny --script '{"a":"b","c":"d"}' --out "$tmp/x.gguf"
fails_with "mkmodel --script refuses a one-token script" "the script has 1 token(s)" "$bin" mkmodel --preset tiny --script a --out "$tmp/x.gguf"

fails_with "missing model file" "no-such.gguf" "$bin" run --model "$tmp/no-such.gguf" --tokens 1 --n 1
head -c 1000 "$model" >"$tmp/truncated.gguf"
fails_with "truncated model" "truncated.gguf" "$bin" info "$tmp/truncated.gguf"
fails_with "token id out of range" "out of range" "$bin" run --model "$model" --tokens 1,999999999 --n 1
fails_with "malformed --tokens" "not a comma-separated list" "$bin" run --model "$model" --tokens 1,x --n 1
fails_with "run: an oversize prompt names both lengths" "the prompt has 6 tokens; the context holds 6 (--ctx)" "$bin" run --model "$model" --tokens 1,2,3,4,5,6 --n 4 --ctx 6
fails_with "run: --ctx past the trained context" "more than the model was trained for" "$bin" run --model "$model" --tokens 1 --n 1 --ctx 99999999
full=$("$bin" run --model "$model" --tokens 1,2,3,4 --n 4 --ctx 6 --json --ignore-eos 2>"$tmp/full.err")
check "run: decode stops at the context end with finish_reason length" test "$(json_field 'd["generated_tokens"] == 2 and d["finish_reason"] == "length" and d["context_full"] and d["n_ctx"] == 6' <<<"$full")" = True
check "run: ... and says so on stderr" grep -q "stopped at the end of the context (6 tokens): 2 of --n 4" "$tmp/full.err"
roomy=$("$bin" run --model "$model" --tokens 1,2,3,4 --n 2 --ctx 16 --json --ignore-eos)
check "run: --n reached is finish_reason length too, not context_full" test "$(json_field 'd["generated_tokens"] == 2 and d["finish_reason"] == "length" and not d["context_full"]' <<<"$roomy")" = True
fails_with "unknown option" "unknown option" "$bin" run --model "$model" --bogus
fails_with "unknown command" "unknown command" "$bin" frobnicate
fails_with "serve: --parallel 0" "--parallel must be 1 to 256" "$bin" serve --model "$model" --parallel 0
fails_with "serve: a bad --port" "--port must be at most 65535" "$bin" serve --model "$model" --port 70000
fails_with "serve: an unknown flag" "--bogus" "$bin" serve --bogus
fails_with "serve: a --host that is not an address" "--host not-a-host.invalid" "$bin" serve --model "$model" --host not-a-host.invalid --port 0
fails_with "unknown preset" "unknown preset" "$bin" mkmodel --preset huge --out "$tmp/x.gguf"
fails_with "inconsistent dimensions" "head_count_kv" "$bin" mkmodel --preset tiny --kv-heads 3 --out "$tmp/x.gguf"

check_summary
