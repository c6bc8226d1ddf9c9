#!/usr/bin/python3
"""A fleet on loopback: three `cinder serve` replicas on 127.0.0.2-4 (KV pools small enough to
overflow) and agents on a shared system prompt, each agent a loop of turns whose history grows,
routed three ways: haproxy round robin, nginx's consistent hash of X-Session-Id, and a picker fed
by the replicas' KV cache events with llm-d's default scoring (precise prefix 2, KV cache
utilization 1, queue 1; docs/FLEET.md). For each: the cluster's prompt tokens, the tokens served
from a replica's cache (usage.prompt_tokens_details.cached_tokens) and so the tokens prefilled.
Checks: every request answered; each replica's mirror, built from its events alone, equals its
page listing after the run; the picker reuses at least what the session hash does (less a page
per request) and prefills at most 3/4 of what round robin prefills.
Usage: fleet.py CINDER_BIN MODEL TMPDIR [AGENTS ROUNDS]. Loopback only; every wait is bounded."""
import atexit, json, os, random, re, socket, subprocess, sys, threading, time, urllib.request

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_mirror import Mirror  # noqa: E402

BIN, MODEL, TMP = sys.argv[1:4]
AGENTS = int(sys.argv[4]) if len(sys.argv) > 4 else 12
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 6
PAGE = 16
POOL = 2048  # tokens per replica: the agents' histories together need several times that
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
fails = []
lock = threading.Lock()
started = []  # every process this script starts, killed at exit whatever the outcome


@atexit.register
def kill_started():
    for p in started:
        if p.poll() is None:
            p.kill()


def spawn(cmd, log):
    p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    started.append(p)
    return p


def check(ok, what):
    if not ok:
        with lock:
            fails.append(what)
        print("FAIL:", what, flush=True)


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def get(url, timeout=30):
    return urllib.request.urlopen(url, timeout=timeout).read()


def post(base, path, body, headers={}):
    rq = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json", **headers})
    return json.load(urllib.request.urlopen(rq, timeout=300))


def wait_healthy(base, proc, log_path, what):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit("%s exited: %s" % (what, open(log_path).read()[-3000:]))
        try:
            get(base + "/health", timeout=5)
            return
        except Exception:
            time.sleep(0.2)
    sys.exit("%s did not become healthy" % what)


class Events:
    """One SUB socket the replicas connect to (as llm-d's indexer binds), and a mirror per
    replica (by topic), kept current by a thread that sits in recv."""

    def __init__(self, ctx):
        self.sub = ctx.socket(zmq.SUB)
        self.port = self.sub.bind_to_random_port("tcp://127.0.0.1")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sub.RCVTIMEO = 200
        self.mirrors = {}  # topic -> Mirror
        self.done = threading.Event()
        threading.Thread(target=self.receive, daemon=True).start()

    def receive(self):
        while not self.done.is_set():
            try:
                topic, seq, payload = self.sub.recv_multipart()
            except zmq.Again:
                continue
            with lock:
                if topic not in self.mirrors or int.from_bytes(seq, "big", signed=True) == 0:
                    self.mirrors[topic] = Mirror(PAGE, check)  # a (re)started replica
                self.mirrors[topic].apply(topic, seq, payload)

    def mirror(self, host, port):
        with lock:
            return self.mirrors.get(("kv@%s:%d@m" % (host, port)).encode())

    def close(self):
        self.done.set()


def start_replicas(name, events):
    reps = []
    for i, host in enumerate(HOSTS):
        port_file = os.path.join(TMP, "%s-%d.port" % (name, i))
        log = os.path.join(TMP, "%s-%d.log" % (name, i))
        if os.path.exists(port_file):
            os.remove(port_file)  # a previous run's port is not this server's
        p = spawn([BIN, "serve", "--model", MODEL, "--host", host, "--port", "0", "--port-file", port_file, "--alias", "m",
                   "--kv-pool-tokens", str(POOL), "--page-size", str(PAGE), "--parallel", "2",
                   "--kv-events", "tcp://127.0.0.1:%d" % events.port], log)
        reps.append({"proc": p, "host": host, "port_file": port_file, "log": log})
    for r in reps:
        for _ in range(600):
            if os.path.exists(r["port_file"]) and open(r["port_file"]).read().strip():
                break
            if r["proc"].poll() is not None:
                break
            time.sleep(0.1)
        r["port"] = int(open(r["port_file"]).read()) if os.path.exists(r["port_file"]) else 0
        r["base"] = "http://%s:%d" % (r["host"], r["port"])
        wait_healthy(r["base"], r["proc"], r["log"], "replica %s" % r["host"])
    return reps


def stop(router, reps):
    """SIGTERM: a replica ends with 0 (the proxies' own exit codes are theirs)."""
    procs = ([router] if router else []) + [r["proc"] for r in reps]
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            rc = p.wait(timeout=60)
            check(p is router or rc == 0, "a replica ended by SIGTERM exits 0 (%d)" % rc)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, "a process ended within 60 s of SIGTERM")


def haproxy(reps):
    port = free_port()
    cfg = os.path.join(TMP, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("defaults\n    mode http\n    timeout connect 5s\n    timeout client 300s\n    timeout server 300s\n"
                "frontend fe\n    bind 127.0.0.1:%d\n    default_backend cinder\n"
                "backend cinder\n    balance roundrobin\n" % port)
        for i, r in enumerate(reps):
            f.write("    server c%d %s:%d\n" % (i, r["host"], r["port"]))
    log = os.path.join(TMP, "haproxy.log")
    p = spawn(["haproxy", "-db", "-f", cfg], log)
    base = "http://127.0.0.1:%d" % port
    wait_healthy(base, p, log, "haproxy")
    return p, base


def nginx(reps):
    port = free_port()
    prefix = os.path.join(TMP, "nginx")
    os.makedirs(prefix, exist_ok=True)
    cfg = os.path.join(prefix, "nginx.conf")
    servers = "".join("    server %s:%d;\n" % (r["host"], r["port"]) for r in reps)
    temps = "".join("  %s_temp_path %s/%s;\n" % (t, prefix, t) for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    with open(cfg, "w") as f:
        f.write("daemon off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log;\nevents {}\n"
                "http {\n  access_log off;\n  client_body_buffer_size 1m;\n%s  upstream cinder {\n    hash $http_x_session_id consistent;\n%s  }\n"
                "  server {\n    listen 127.0.0.1:%d;\n    location / {\n      proxy_pass http://cinder;\n"
                "      proxy_buffering off;\n      proxy_read_timeout 300s;\n    }\n  }\n}\n"
                % (prefix, prefix, temps, servers, port))
    log = os.path.join(TMP, "nginx.log")
    p = spawn(["nginx", "-p", prefix, "-e", os.path.join(prefix, "error.log"), "-c", cfg], log)
    base = "http://127.0.0.1:%d" % port
    wait_healthy(base, p, log, "nginx")
    return p, base


def metric(text, name):
    """The first sample of name in a Prometheus text page (0 when absent)."""
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else 0.0


def metric_sum(text, name):
    """The sum of every sample of name (all its label sets)."""
    return sum(float(v) for v in re.findall(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M))


class Picker:
    """llm-d's endpoint picker with its default profile: precise prefix x2, KV cache utilization
    x1, queue x1, the best sum wins, ties at random. Prefix: the pages of /render's ids that a
    replica's mirror holds, from the first, min-max normalized over the replicas with a match (all
    equal: 1) and 0 for those without, as llm-d's precise-prefix-cache-scorer normalizes its
    indexer's counts; KV: 1 - vllm:kv_cache_usage_perc; queue: vllm:num_requests_waiting, min-max
    normalized and inverted (all equal: 1)."""

    def __init__(self, reps, events, seed):
        self.reps, self.events, self.rng = reps, events, random.Random(seed)

    def prefix_scores(self, ids):
        hits = []
        for r in self.reps:
            mirror = self.events.mirror(r["host"], r["port"])
            with lock:
                hits.append(mirror.cached(ids) // PAGE if mirror else 0)
        hit = [h for h in hits if h > 0]
        if not hit:
            return [0.0] * len(hits)
        lo, hi = min(hit), max(hit)
        return [0.0 if h == 0 else 1.0 if hi == lo else (h - lo) / (hi - lo) for h in hits]

    def pick(self, body):
        ids = post(self.reps[0]["base"], "/v1/chat/completions/render", body)["token_ids"]
        metrics = [get(r["base"] + "/metrics").decode() for r in self.reps]
        waiting = [metric(t, "vllm:num_requests_waiting") for t in metrics]
        lo, hi = min(waiting), max(waiting)
        scores = []
        for prefix, text, q in zip(self.prefix_scores(ids), metrics, waiting):
            usage = metric(text, "vllm:kv_cache_usage_perc")
            queue_score = 1.0 if hi == lo else (hi - q) / (hi - lo)
            scores.append(2 * prefix + (1 - usage) + queue_score)
        best = max(scores)
        with lock:
            return self.rng.choice([r for r, s in zip(self.reps, scores) if s == best])["base"]


WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
         "phi chi psi omega river stone cloud forest ember copper lantern harbor meadow signal").split()
SYSTEM = ("You are a coding agent. Follow the repository's conventions, call tools to read files before "
          "editing them, and answer briefly. " + " ".join(WORDS[i % len(WORDS)] for i in range(280)))


def agent(a, route, results):
    """One agent's loop: a first task, then ROUNDS - 1 tool results, each turn on the whole history."""
    rng = random.Random(1000 + a)
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "You are agent %d. Task: %s" % (a, " ".join(rng.choice(WORDS) for _ in range(40)))}]
    for r in range(ROUNDS):
        body = {"model": "m", "messages": msgs, "max_tokens": 8, "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": False}}
        try:
            reply = route(body, {"X-Session-Id": "agent-%d" % a})
        except Exception as e:  # a refused or failed request is a failure, not a skipped one
            check(False, "agent %d round %d: %s" % (a, r, e))
            return
        usage = reply["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        check(0 <= cached <= usage["prompt_tokens"], "cached_tokens within the prompt")
        results.append((usage["prompt_tokens"], cached))
        msgs.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"] or ""})
        msgs.append({"role": "user", "content": "Tool result %d: %s" % (r, " ".join(rng.choice(WORDS) for _ in range(60)))})


def run_agents(route):
    results, threads = [], []
    for a in range(AGENTS):
        t = threading.Thread(target=agent, args=(a, route, results))
        t.start()
        threads.append(t)
        time.sleep(0.05)  # agents arrive one after another
    for t in threads:
        t.join(timeout=1200)
        check(not t.is_alive(), "an agent finished within 20 minutes")
    check(len(results) == AGENTS * ROUNDS, "every request answered (%d of %d)" % (len(results), AGENTS * ROUNDS))
    return results


def mirrors_current(reps, events):
    """Each replica's mirror, from its events alone, equals its own page listing."""
    for r in reps:
        pages = json.loads(get(r["base"] + "/v1/cache?pages=1"))["pages"]
        ok = False
        for _ in range(100):
            m = events.mirror(r["host"], r["port"])
            with lock:
                ok = m is not None and m.same_as(pages)
            if ok:
                break
            time.sleep(0.1)
        check(ok, "%s: the mirror built from its events equals its pages (%d GPU pages)" % (r["host"], len(pages["gpu"])))


def policy(name, events, make_route):
    reps = start_replicas(name, events)
    router, route = make_route(reps)
    t0 = time.monotonic()
    results = run_agents(route)
    secs = time.monotonic() - t0
    mirrors_current(reps, events)
    evicted = sum(json.loads(get(r["base"] + "/v1/cache"))["evicted_pages"] for r in reps)
    served = [int(metric_sum(get(r["base"] + "/metrics").decode(), "cinder_requests_total")) for r in reps]
    stop(router, reps)
    prompt = sum(p for p, _ in results)
    cached = sum(c for _, c in results)
    print("fleet %-13s %d agents x %d rounds on 3 replicas: %6d prompt tokens, %6d cached (%4.1f%%), %6d prefilled, "
          "requests %s, %d pages evicted, %.0f s" % (name, AGENTS, ROUNDS, prompt, cached, 100.0 * cached / max(1, prompt),
                                                        prompt - cached, "/".join(map(str, served)), evicted, secs),
          flush=True)
    return prompt, cached


def proxied(start_proxy):
    def make(reps):
        p, base = start_proxy(reps)
        return p, lambda body, headers: post(base, "/v1/chat/completions", body, headers)
    return make


def picked(events):
    def make(reps):
        picker = Picker(reps, events, seed=7)
        return None, lambda body, headers: post(picker.pick(body), "/v1/chat/completions", body, headers)
    return make


ctx = zmq.Context()
events = Events(ctx)
rr = policy("round-robin", events, proxied(haproxy))
sh = policy("session-hash", events, proxied(nginx))
pk = policy("events-picker", events, picked(events))
events.close()
requests = AGENTS * ROUNDS
check(pk[1] >= sh[1] - PAGE * requests,
      "the picker reuses about what the session hash does (%d vs %d cached tokens)" % (pk[1], sh[1]))
check((pk[0] - pk[1]) * 4 <= (rr[0] - rr[1]) * 3,
      "the picker prefills at most 3/4 of round robin's tokens (%d vs %d)" % (pk[0] - pk[1], rr[0] - rr[1]))
print("fleet: %d checks failed" % len(fails) if fails else "fleet: all checks passed")
sys.exit(1 if fails else 0)
