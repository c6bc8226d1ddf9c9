#!/usr/bin/env bash
# Reuse through the real chat template, token for token, where people meet it first: `cinder
# chat` and the chat traces `cinder bench` replays. A random model's tokens are rarely the
# canonical encoding of their text, so a reply re-encoded from its text diverges from the cached
# ids; each turn must instead be served from the cache up to the previous turn's last generated
# token (cached = previous prompt + previous reply - 1: the last token chosen is never fed).
# Also chat's lines (/reset, /exit), its thinking flags, and bench --dump-prompts.
# Run by ctest with CINDER_BIN, CINDER_SOURCE_DIR and CINDER_TEST_TMP.
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/chat_reuse
root=${CINDER_SOURCE_DIR:?}
mkdir -p "$tmp"
model=$tmp/tiny.gguf
"$bin" mkmodel --preset tiny --seed 21 --out "$model" >/dev/null

# four turns, /reset, the first message again, /exit, and a line after it that must not run
printf 'Tell me a story\nAnd then what happened\nWhy\nGo on\n/reset\nTell me a story\n/exit\nnever sent\n' |
  "$bin" chat --model "$model" --n 24 --json >"$tmp/chat.jsonl" 2>"$tmp/chat.err" ||
  { cat "$tmp/chat.err" >&2; echo "FAIL cinder chat failed"; exit 1; }
python3 - "$tmp/chat.jsonl" <<'PY'
import json, sys
turns = [json.loads(l) for l in open(sys.argv[1])]
fail = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fail.append(what)
check(len(turns) == 5, f"chat: four turns, one after /reset, none after /exit ({len(turns)} replies)")
if len(turns) == 5:
    for k in (1, 2, 3):
        a, b = turns[k - 1], turns[k]
        want = a["prompt_tokens"] + a["generated"] - 1
        check(b["cached_tokens"] == want,
              f"chat turn {k + 1}: cached {b['cached_tokens']} = turn {k}'s prompt + reply - 1 ({want})")
    first, again = turns[0], turns[4]
    check(again["turn"] == 1 and again["prompt_tokens"] == first["prompt_tokens"],
          "/reset: a new conversation (turn 1, the first turn's prompt again)")
    check(again["cached_tokens"] == first["prompt_tokens"] - 1, "/reset keeps the cache: the whole prompt but its last token cached")
    check(again["text"] == first["text"], "the same reply from the cache as from scratch")
sys.exit(1 if fail else 0)
PY

# thinking follows the template (the tiny preset's is Qwen3's hybrid one: on by default);
# --no-think adds the empty think block to the generation prompt
think_tokens() { printf 'hi\n' | "$bin" chat --model "$model" --n 1 --json "$@" 2>/dev/null |
  python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["prompt_tokens"])'; }
default=$(think_tokens)
on=$(think_tokens --think)
off=$(think_tokens --no-think)
if [ "$default" = "$on" ] && [ "$off" -gt "$on" ]; then
  echo "ok   thinking on by default ($on prompt tokens, as --think); --no-think adds the empty block ($off)"
else
  echo "FAIL thinking flags: default $default, --think $on, --no-think $off"; exit 1
fi

# a chat trace (one session, ~4,800-token system prompt, 20 turns): every turn from the cache up to
# the previous reply's last token
"$bin" bench --model "$model" --scenario multiturn_4800 --json >"$tmp/multiturn.json"
python3 - "$tmp/multiturn.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["requests"]
short = [(k + 2, b["cached_tokens"], a["prompt_tokens"] + len(a["generated"]) - 1)
         for k, (a, b) in enumerate(zip(r, r[1:])) if b["cached_tokens"] != a["prompt_tokens"] + len(a["generated"]) - 1]
if len(r) != 20 or short:
    sys.exit(f"FAIL multiturn_4800: {len(r)} requests; turns not served up to the previous reply (turn, cached, want): {short}")
print(f"ok   multiturn_4800: turns 2-20 each cached up to the previous reply's last token")
PY

# bench --dump-prompts: each request's max_tokens and prompt ids, one line each, as the replay ran them
"$bin" bench --model "$model" --scenario shared_prefix_basic --json --dump-prompts "$tmp/prompts.txt" >"$tmp/shared.json"
python3 - "$tmp/shared.json" "$tmp/prompts.txt" "$root/scripts/scenarios/shared_prefix_basic.jsonl" <<'PY'
import json, sys
req = json.load(open(sys.argv[1]))["requests"]
lines = open(sys.argv[2]).read().splitlines()
trace = [json.loads(l) for l in open(sys.argv[3])][1:]  # the header first
ok = len(lines) == len(req) == len(trace)
for q, t, line in zip(req, trace, lines):
    mt, _, ids = line.partition(":")
    ok = ok and int(mt) == t.get("max_tokens", 16) and [int(x) for x in ids.split(",")] == t["prompt_tokens"]
if not ok:
    sys.exit(f"FAIL --dump-prompts: {len(lines)} lines for {len(req)} requests, or not each request's max_tokens:ids")
print(f"ok   bench --dump-prompts: {len(lines)} lines, each request's max_tokens and prompt ids")
PY
