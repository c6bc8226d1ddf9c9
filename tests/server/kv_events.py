#!/usr/bin/python3
"""cinder serve's KV cache events (--kv-events), decoded strictly as vLLM's schema defines them
(vllm/distributed/kv_events.py, array_like tagged structs) by a subscriber that binds, as llm-d's
does, while the server connects to it. Checks: every frame [topic, 8-byte big-endian seq, msgpack
KVEventBatch]; seq contiguous from 0; 7-field BlockStored / 3-field BlockRemoved /
1-field AllBlocksCleared; len(token_ids) = blocks x page size; hashes < 2^63; media GPU/CPU; a
mirror index built from the events alone (llm-d's rules: a stored block's parent must resolve,
removal by the engine's key) equals the server's own page listing (/v1/cache?pages=1) after a
multi-turn trace that evicts, demotes and restores, and predicts each request's cached tokens
from the request's /render ids to within one page (a router's use of it); replay from k gives
k.. then seq -1; the
shutdown removes every page; a restarted server starts with AllBlocksCleared at seq 0; and every
trace in scripts/scenarios/ run through a server of its own leaves the mirror equal to the
server's pages (every other trace in the map encoding: the same fields by name); the encoding
flag's misuse is refused by name.
Loopback only; every wait is bounded. Usage: kv_events.py CINDER_BIN MODEL TMPDIR"""
import atexit, glob, json, os, queue, socket, subprocess, sys, threading, time, urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_mirror import Mirror  # noqa: E402

BIN, MODEL, TMP = sys.argv[1:4]
PAGE = 16
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL:", what, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub_port = sub.bind_to_random_port("tcp://127.0.0.1")
sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
sub.RCVTIMEO = 200
frames = queue.Queue()
done = threading.Event()


def receive():
    # A SUB socket hands its subscription to a publisher that connected only while its own thread
    # is in a call on it: a subscriber must sit in recv (as llm-d's does), or the publisher drops
    # what it sends meanwhile (PUB sends only to subscribed peers). This thread does.
    while not done.is_set():
        try:
            frames.put(sub.recv_multipart())
        except zmq.Again:
            pass


threading.Thread(target=receive, daemon=True).start()
replay_ep = "tcp://127.0.0.1:%d" % free_port()


started = []  # every server this script starts, killed at exit whatever the outcome
atexit.register(lambda: [p.kill() for p in started if p.poll() is None])


def start(name, pool=512, encoding="array"):
    port_file = os.path.join(TMP, name + ".port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen([BIN, "serve", "--model", MODEL, "--port", "0", "--port-file", port_file, "--alias", "m",
                          "--kv-pool-tokens", str(pool), "--page-size", str(PAGE), "--host-cache-mb", "1", "--parallel", "2",
                          "--kv-events", "tcp://127.0.0.1:%d" % sub_port, "--kv-events-replay", replay_ep,
                          "--kv-events-encoding", encoding],
                         stdout=log, stderr=subprocess.STDOUT)
    started.append(p)
    for _ in range(600):
        if p.poll() is not None:
            sys.exit("server %s exited: %s" % (name, open(log.name).read()))
        try:
            port = int(open(port_file).read())
            urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5)
            return p, port
        except Exception:
            time.sleep(0.2)
    sys.exit("server %s did not become healthy" % name)


def post(port, path, body, headers={}):
    rq = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json", **headers})
    return json.load(urllib.request.urlopen(rq, timeout=120))


def listing(port):
    return json.load(urllib.request.urlopen("http://127.0.0.1:%d/v1/cache?pages=1" % port, timeout=30))["pages"]


def drain(mirror, until, timeout_s=20, topic=None):
    """Applies batches until until() holds or nothing came for timeout_s; with topic, only that
    replica's (a stopped server's last batches may still be queued)."""
    while not until():
        try:
            frame = frames.get(timeout=timeout_s)
        except queue.Empty:
            return False
        if topic is None or frame[0] == topic:
            mirror.apply(*frame)
    return True


# ---- one server: a multi-turn trace over a pool small enough to evict, demote and restore ----
srv, port = start("a")
m = Mirror(PAGE, check)
check(drain(m, lambda: m.next_seq >= 1), "the first batch arrives")
first = msgpack.unpackb(m.batches[0])
check(first[1] == [["AllBlocksCleared"]], "seq 0 is AllBlocksCleared")
check(m.topic == ("kv@127.0.0.1:%d@m" % port).encode(), "topic kv@host:port@alias (%r)" % m.topic)

words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
sessions = [[{"role": "system", "content": "You are agent %d. " % s + " ".join(words[s:] + words[:s]) * 2}]
            for s in range(6)]
hits = exact = 0
tokens = [0, 0]  # predicted, cached
for turn in range(3):
    for s, msgs in enumerate(sessions):
        msgs.append({"role": "user", "content": "turn %d of session %d: %s" % (turn, s, " ".join(words[turn:turn + 6]))})
        body = {"model": "m", "messages": msgs, "max_tokens": 12, "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": False}}
        # the router's prediction: the mirror, current with the server's pages, over /render's ids
        ids = post(port, "/v1/chat/completions/render", body)["token_ids"]
        now = listing(port)
        check(drain(m, lambda: m.same_as(now)), "turn %d, session %d: the mirror is current" % (turn, s))
        predicted = m.cached(ids)
        r = post(port, "/v1/chat/completions", body, {"X-Session-Id": "session-%d" % s})
        usage = r["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        check(usage["prompt_tokens"] == len(ids), "turn %d, session %d: /render's ids are the prompt run (%d)" %
              (turn, s, len(ids)))
        check(abs(cached - predicted) < PAGE, "turn %d, session %d: %d tokens predicted from the events, %d cached" %
              (turn, s, predicted, cached))
        hits += predicted > 0
        exact += predicted == cached
        tokens[0] += predicted
        tokens[1] += cached
        msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""})
check(hits == 12, "the events predicted reuse in every later turn (%d of the 12)" % hits)
print("prediction: reuse in %d of 18 requests, exact in %d; %d tokens predicted, %d cached" %
      (hits, exact, tokens[0], tokens[1]), flush=True)
pages = listing(port)
check(drain(m, lambda: m.same_as(pages)), "the mirror equals the server's pages (gpu %d/%d, cpu %d/%d)" %
      (len(m.media["GPU"]), len(pages["gpu"]), len(m.media["CPU"]), len(pages["cpu"])))
check({"BlockStored", "BlockRemoved"} <= m.kinds, "stores and removals seen")
cache = json.load(urllib.request.urlopen("http://127.0.0.1:%d/v1/cache" % port, timeout=30))
check(cache["evicted_pages"] > 0 and pages["cpu"], "the trace evicted and demoted (cpu pages %d)" % len(pages["cpu"]))
check(cache["kv_events"]["dropped_batches"] == 0, "no batch dropped")

# ---- replay from k: k.. then the end marker ----
last = m.next_seq - 1
k = last // 2
dealer = ctx.socket(zmq.DEALER)
dealer.connect(replay_ep)
dealer.send_multipart([b"", k.to_bytes(8, "big")])
dealer.RCVTIMEO = 20000
got = []
while True:
    fr = dealer.recv_multipart()
    check(len(fr) == 3 and fr[0] == b"", "replay frames [empty, seq, payload]")
    seq = int.from_bytes(fr[1], "big", signed=True)
    if seq == -1:
        check(fr[2] == b"", "the end marker has an empty payload")
        break
    check(fr[2] == m.batches.get(seq), "replayed batch %d is the one published" % seq)
    got.append(seq)
check(got == list(range(k, last + 1)), "replay from %d gives %d..%d (got %s..)" % (k, k, last, got[:3]))

# ---- shutdown removes every page; a restart starts cleared ----
srv.terminate()
check(srv.wait(timeout=60) == 0, "SIGTERM ends the server with 0")
check(drain(m, lambda: not m.media["GPU"] and not m.media["CPU"]), "the shutdown's events empty the mirror")
srv, port = start("b")
m2 = Mirror(PAGE, check)
check(drain(m2, lambda: m2.next_seq >= 1), "the restarted server's first batch arrives")
check(msgpack.unpackb(m2.batches[0])[1] == [["AllBlocksCleared"]], "a restarted server sends AllBlocksCleared at seq 0")
srv.terminate()
check(srv.wait(timeout=60) == 0, "SIGTERM ends the second server with 0")
log = open(os.path.join(TMP, "a.log")).read()
check("X-Session-Id: session-3" in log, "the session header is logged with the request")

# ---- every trace in scripts/scenarios/: the mirror equals the server's pages after each ----
# One server a trace (a trace's kv_pool_tokens, or a pool that holds its longest prompt), token
# traces through /v1/completions with the ids as the prompt, chat traces through
# /v1/chat/completions, each session's history growing by the replies as generated.
scenarios = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "scenarios")
# Every other trace's server writes the map encoding, whose events must decode to the same mirror.
for k, path in enumerate(sorted(glob.glob(os.path.join(scenarios, "*.jsonl")))):
    lines = [json.loads(line) for line in open(path) if line.strip()]
    head, trace = lines[0], lines[1:]
    name = head["scenario"]
    encoding = "map" if k % 2 == 0 else "array"
    srv, port = start("scenario-" + name, head.get("kv_pool_tokens", 16384), encoding)
    topic = ("kv@127.0.0.1:%d@m" % port).encode()
    ms = Mirror(PAGE, check)
    check(drain(ms, lambda: ms.next_seq >= 1, topic=topic), "%s: the first batch arrives" % name)
    sessions = {}
    for rq in trace:
        if head["kind"] == "tokens":
            post(port, "/v1/completions", {"model": "m", "prompt": rq["prompt_tokens"], "max_tokens": rq["max_tokens"],
                                           "temperature": 0})
            continue
        h = sessions.setdefault(rq["session"], {"messages": [], "tools": None})
        h["tools"] = rq.get("tools", h["tools"])
        h["messages"] += rq["append"]
        body = {"model": "m", "messages": h["messages"], "max_tokens": rq["max_tokens"], "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": False}}
        if h["tools"]:
            body["tools"] = h["tools"]
        reply = post(port, "/v1/chat/completions", body)["choices"][0]["message"]
        h["messages"].append({k: v for k, v in reply.items() if v is not None})
    pages = listing(port)
    check(drain(ms, lambda: ms.same_as(pages), topic=topic),
          "%s: the mirror equals the server's pages after the trace (gpu %d/%d, cpu %d/%d)" %
          (name, len(ms.media["GPU"]), len(pages["gpu"]), len(ms.media["CPU"]), len(pages["cpu"])))
    maps = all(isinstance(e, dict) for b in ms.batches.values() for e in msgpack.unpackb(b)[1])
    arrays = all(isinstance(e, list) for b in ms.batches.values() for e in msgpack.unpackb(b)[1])
    check(maps if encoding == "map" else arrays, "%s: every event in the %s encoding" % (name, encoding))
    print("%s (%s encoding): %d requests, mirror of %d GPU and %d host pages equal to the server's" %
          (name, encoding, len(trace), len(pages["gpu"]), len(pages["cpu"])), flush=True)
    srv.terminate()
    check(srv.wait(timeout=60) == 0, "%s: SIGTERM ends the server with 0" % name)

# ---- the flags: refused by name ----
for args, says in ((["--kv-events-encoding", "map"], "--kv-events-encoding needs --kv-events"),
                   (["--kv-events", "tcp://127.0.0.1:1", "--kv-events-encoding", "json"], "--kv-events-encoding json: array or map")):
    r = subprocess.run([BIN, "serve", "--model", MODEL] + args, capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and says in r.stderr, "serve %s is refused saying %r (%r)" % (" ".join(args), says, r.stderr[-200:]))

done.set()
print("kv_events: %d checks failed" % len(fails) if fails else "kv_events: all checks passed")
sys.exit(1 if fails else 0)
