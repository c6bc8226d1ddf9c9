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
shutdown removes every page; a restarted server starts with AllBlocksCleared at seq 0.
Loopback only; every wait is bounded. Usage: kv_events.py CINDER_BIN MODEL TMPDIR"""
import json, os, queue, socket, subprocess, sys, threading, time, urllib.request

import msgpack
import zmq

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


def start(name):
    port_file = os.path.join(TMP, name + ".port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen([BIN, "serve", "--model", MODEL, "--port", "0", "--port-file", port_file, "--alias", "m",
                          "--kv-pool-tokens", "512", "--page-size", str(PAGE), "--host-cache-mb", "1", "--parallel", "2",
                          "--kv-events", "tcp://127.0.0.1:%d" % sub_port, "--kv-events-replay", replay_ep],
                         stdout=log, stderr=subprocess.STDOUT)
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


class Mirror:
    """A router's index of one replica, from its events alone."""

    def __init__(self):
        self.media = {"GPU": set(), "CPU": set()}
        self.next_seq = 0
        self.topic = None
        self.batches = {}  # seq -> payload, for the replay check
        self.kinds = set()
        self.block = {}  # (parent hash, page's token ids) -> hash: what a router matches prompts by

    def apply(self, topic, seq_b, payload):
        check(len(seq_b) == 8, "seq frame of 8 bytes")
        seq = int.from_bytes(seq_b, "big", signed=True)
        check(seq == self.next_seq, "seq %d contiguous (expected %d)" % (seq, self.next_seq))
        self.next_seq = seq + 1
        self.topic = topic
        self.batches[seq] = payload
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        check(isinstance(batch, list) and len(batch) == 3, "batch [ts, events, rank]")
        ts, events, rank = batch
        check(isinstance(ts, float) and rank == 0 and isinstance(events, list) and events, "batch fields")
        for ev in events:
            self.event(seq, ev)
        return seq, events

    def event(self, seq, ev):
        tag = ev[0]
        self.kinds.add(tag)
        if tag == "AllBlocksCleared":
            check(len(ev) == 1, "AllBlocksCleared arity")
            for m in self.media.values():
                m.clear()
            return
        if tag == "BlockStored":
            check(len(ev) == 7, "BlockStored has 7 fields")
            _, hashes, parent, tokens, block_size, lora_id, medium = ev
            check(block_size == PAGE and lora_id is None, "block_size is the page size, lora_id nil")
            check(len(tokens) == len(hashes) * PAGE and len(tokens) % PAGE == 0, "token_ids: blocks x page size")
            check(all(isinstance(t, int) and t >= 0 for t in tokens), "token ids")
            check(medium in self.media, "medium GPU/CPU")
            check(parent is None or (0 < parent < 2**63 and any(parent in m for m in self.media.values())),
                  "seq %d: the parent %s resolves" % (seq, parent))
            for i, h in enumerate(hashes):
                check(isinstance(h, int) and 0 < h < 2**63, "hash < 2^63")
                check(h not in self.media[medium], "seq %d: %d stored twice in %s" % (seq, h, medium))
                self.media[medium].add(h)
                self.block[(parent, tuple(tokens[i * PAGE:(i + 1) * PAGE]))] = h
                parent = h
            return
        check(tag == "BlockRemoved" and len(ev) == 3, "BlockRemoved has 3 fields (got %r)" % (ev[:1],))
        _, hashes, medium = ev
        check(medium in self.media, "medium GPU/CPU")
        for h in hashes:
            check(h in self.media[medium], "seq %d: removed %d was in %s" % (seq, h, medium))
            self.media[medium].discard(h)


    def cached(self, ids):
        """Tokens of ids a router expects this replica to reuse: whole pages whose chain of
        stored blocks, from the root, is on the GPU or in host memory."""
        parent, n = None, 0
        while n + PAGE <= len(ids):
            h = self.block.get((parent, tuple(ids[n:n + PAGE])))
            if h is None or not (h in self.media["GPU"] or h in self.media["CPU"]):
                break
            parent, n = h, n + PAGE
        return n


def drain(mirror, until, timeout_s=20):
    """Applies batches until until() holds or nothing came for timeout_s."""
    while not until():
        try:
            mirror.apply(*frames.get(timeout=timeout_s))
        except queue.Empty:
            return False
    return True


def same(mirror, pages):
    return mirror.media["GPU"] == set(pages["gpu"]) and mirror.media["CPU"] == set(pages["cpu"])


# ---- one server: a multi-turn trace over a pool small enough to evict, demote and restore ----
srv, port = start("a")
m = Mirror()
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
        check(drain(m, lambda: same(m, now)), "turn %d, session %d: the mirror is current" % (turn, s))
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
check(drain(m, lambda: same(m, pages)), "the mirror equals the server's pages (gpu %d/%d, cpu %d/%d)" %
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
m2 = Mirror()
check(drain(m2, lambda: m2.next_seq >= 1), "the restarted server's first batch arrives")
check(msgpack.unpackb(m2.batches[0])[1] == [["AllBlocksCleared"]], "a restarted server sends AllBlocksCleared at seq 0")
srv.terminate()
check(srv.wait(timeout=60) == 0, "SIGTERM ends the second server with 0")
log = open(os.path.join(TMP, "a.log")).read()
check("X-Session-Id: session-3" in log, "the session header is logged with the request")

done.set()
print("kv_events: %d checks failed" % len(fails) if fails else "kv_events: all checks passed")
sys.exit(1 if fails else 0)
