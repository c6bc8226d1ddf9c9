#!/usr/bin/env bash
# cinder serve's limits and rendering flags, each against what it promises: --max-header-kb
# (a larger header is refused, the server goes on), --max-conns (a connection past the limit
# gets no answer until one closes), --idle-timeout (an idle connection is closed),
# --chunk-tokens (a prompt prefilled in 16-token chunks gives the same tokens as in one),
# max_completion_tokens (OpenAI's name for max_tokens, and the one that wins), --strict-template
# (the history rendered as the template says: no empty think block in earlier turns) and
# --preserve-reasoning (earlier turns keep their reasoning_content).
# Run by ctest with CINDER_BIN and CINDER_TEST_TMP.
set -euo pipefail
bin=${CINDER_BIN:?}
tmp=${CINDER_TEST_TMP:?}/server_flags
root=${CINDER_SOURCE_DIR:?}
rm -rf "$tmp"
mkdir -p "$tmp"
model=$tmp/tiny.gguf
"$bin" mkmodel --preset tiny --seed 23 --out "$model" >/dev/null 2>&1
source "$root/tests/lib/serve.sh"

serve_start "$model" limits --ctx 1024 --no-think --max-header-kb 4 --max-conns 3 --chunk-tokens 16
serve_start "$model" plain --ctx 1024 --no-think
serve_start "$model" strict --ctx 1024 --no-think --strict-template
serve_start "$model" keep --ctx 1024 --no-think --preserve-reasoning --idle-timeout 2 # (and the idle test)
limits=http://127.0.0.1:$(serve_port limits)
plain=http://127.0.0.1:$(serve_port plain)
strict=http://127.0.0.1:$(serve_port strict)
keep=http://127.0.0.1:$(serve_port keep)
fail() { echo "FAIL $*"; exit 1; }

# --max-header-kb 4: a 6 KB header is refused with a 4xx; a small request still answers
big=$(head -c 6000 /dev/zero | tr '\0' a)
code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $big" "$limits/health" || true)
[[ $code == 4* ]] || fail "--max-header-kb 4: a 6 KB header answered $code"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$limits/health")" = 200 ] || fail "the server after a refused header"
echo "ok   --max-header-kb 4: a 6 KB header is refused ($code), the next request answered"

# --max-conns 3 (limits) and --idle-timeout 2 (keep), with idle sockets that send nothing
python3 - "${limits#http://}" "${keep#http://}" <<'PY'
import socket, sys, time
host, port = sys.argv[1].split(":")
def conn():
    s = socket.create_connection((host, int(port)), timeout=30)
    return s
def answers(s):
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    s.settimeout(5)
    try:
        return s.recv(64).startswith(b"HTTP/1.1 200")
    except (socket.timeout, ConnectionError):
        return False
idle = [conn() for _ in range(3)]
time.sleep(0.3)  # the server has taken all three
extra = conn()
if answers(extra):
    sys.exit("FAIL --max-conns 3: a fourth connection was answered while three were open")
for s in idle: s.close()
extra.close()
for _ in range(50):  # the server notices the closes
    time.sleep(0.1)
    s = conn()
    ok = answers(s)
    s.close()
    if ok: break
else:
    sys.exit("FAIL --max-conns 3: no answer after the three closed")
print("ok   --max-conns 3: a fourth connection gets no answer; after the three close, one does")
host, port = sys.argv[2].split(":")
s = conn()
s.settimeout(20)  # ten times the timeout: the server closes first (recv gives b"")
try:
    data = s.recv(64)
except socket.timeout:
    sys.exit("FAIL --idle-timeout 2: an idle connection still open after 20 s")
if data:
    sys.exit(f"FAIL --idle-timeout 2: an idle connection was sent {data!r}")
print("ok   --idle-timeout 2: an idle connection is closed by the server")
PY

# --chunk-tokens 16: a ~150-token prompt in 16-token chunks gives the tokens of one pass
body='{"messages":[{"role":"user","content":"'"$(printf 'word %.0s' $(seq 120))"'"}],"max_tokens":8,"temperature":0}'
a=$(curl -sf "$limits/v1/chat/completions" -d "$body")
b=$(curl -sf "$plain/v1/chat/completions" -d "$body")
python3 - "$a" "$b" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
ta, tb = (x["choices"][0]["message"]["content"] for x in (a, b))
pa = a["usage"]["prompt_tokens"]
if pa <= 16 * 4 or ta != tb:
    sys.exit(f"FAIL --chunk-tokens 16: {pa} prompt tokens, {ta!r} vs one pass's {tb!r}")
print(f"ok   --chunk-tokens 16: {pa} prompt tokens in chunks, the same reply as in one pass")
PY

# max_completion_tokens: the reply's length, and it wins over max_tokens (the end tokens banned,
# <|endoftext|> and <|im_end|>, so the reply runs to the limit)
for req in '"max_completion_tokens":3' '"max_completion_tokens":3,"max_tokens":9'; do
  r=$(curl -sf "$plain/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Count"}],'"$req"',"temperature":0,"logit_bias":{"151643":-100,"151645":-100}}')
  python3 -c '
import json, sys
r = json.loads(sys.argv[1]); c = r["choices"][0]
if r["usage"]["completion_tokens"] != 3 or c["finish_reason"] != "length":
    sys.exit("FAIL %s: %s %s" % (sys.argv[2], r["usage"], c["finish_reason"]))
print(f"ok   {sys.argv[2]}: 3 tokens, finish_reason length")' "$r" "$req"
done

# the history as generated (default), as the template says (--strict-template: the earlier
# turn without its empty think block), or with its reasoning kept (--preserve-reasoning)
history='{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello there","reasoning_content":"The user greets me"},{"role":"user","content":"More"}],"max_tokens":1}'
n_plain=$(curl -sf "$plain/v1/chat/completions" -d "$history" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])')
n_strict=$(curl -sf "$strict/v1/chat/completions" -d "$history" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])')
n_keep=$(curl -sf "$keep/v1/chat/completions" -d "$history" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])')
think=$(curl -sf "$plain/tokenize" -d '{"prompt":"<think>\n\n</think>\n\n"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])')
[ "$n_strict" -eq $((n_plain - think)) ] ||
  fail "--strict-template: $n_strict prompt tokens, want the default's $n_plain less the empty think block's $think"
echo "ok   --strict-template: the earlier turn without its empty think block ($n_plain - $think = $n_strict tokens)"
[ "$n_keep" -gt "$n_plain" ] || fail "--preserve-reasoning: $n_keep prompt tokens, not more than the default's $n_plain"
echo "ok   --preserve-reasoning: the earlier turn keeps its reasoning ($n_keep tokens against $n_plain)"

for s in limits plain strict keep; do serve_stop "$s"; done
