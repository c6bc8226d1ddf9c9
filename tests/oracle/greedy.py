#!/usr/bin/env python3
"""Greedy generation against llama.cpp on the same file, token by token.

cinder generates N tokens greedily from each prompt, on the CPU reference (--cpu) and on the
Vulkan engine (--gpu). llama.cpp then scores every prefix (the prompt plus the first i tokens
cinder generated) in one run, and each of cinder's tokens must be llama.cpp's top-1 there or
a near tie: llama.cpp's top-1 ahead of cinder's token by less than --tie logits, where the two
may rightly choose differently (llama.cpp's CPU matmuls round activations to 8 bits; cinder
computes in float). Both score the same prefix at every step (cinder's tokens), so the
comparison goes on past a tie, to the last token. A token llama.cpp puts further behind
fails, unless llama.cpp on the same weights dequantized to F32 by ggml (no activation
rounding: llama_oracle --dequantize) puts cinder's token first or within --tie there: then the
8-bit activations alone made llama.cpp choose otherwise, which is counted as such. Near ties and
those together in more than --max-tie-share of a file's steps fail too, so that neither rule
can make the test pass by comparing nothing.

Prints one line per prompt and device; exits 1 on any failure."""
import argparse
import json
import os
import subprocess
import sys


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def cinder_greedy(a, device, prompt):
    r = run([a.cinder, "run", "--" + device, "--model", a.model, "--tokens", ",".join(map(str, prompt)),
             "--n", str(a.n), "--ignore-eos", "--json"])
    if r.returncode:
        raise RuntimeError(f"cinder run --{device} failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)["tokens"]


def llama_top(a, lists, tag):
    path = os.path.join(a.work, f"{a.label}-{tag}.txt")
    with open(path, "w") as f:
        for ids in lists:
            f.write(",".join(map(str, ids)) + "\n")
    r = run([a.oracle, a.model, "--logits", "@" + path, "--top", "8"])
    if r.returncode:
        raise RuntimeError(f"llama_oracle --logits failed: {r.stderr.strip()[-2000:]}")
    # per list: llama.cpp's top 8 as {id: logit}, best first (dicts keep insertion order)
    return [{t: v for t, v in json.loads(line)["top"]} for line in r.stdout.splitlines()]


def first_or_tie(tok, top, tie):
    best, best_logit = next(iter(top.items()))
    return tok == best or (tok in top and best_logit - top[tok] < tie)


def agreement(tokens, tops, tie, f32_top):
    """(tokens equal to llama.cpp's top-1, the near ties and activation roundings as text, the
    first failure or None). f32_top(i): llama.cpp's top at step i on the F32 weights."""
    equal, ties = 0, []
    for i, (tok, top) in enumerate(zip(tokens, tops)):
        best, best_logit = next(iter(top.items()))
        behind = f"by {best_logit - top[tok]:.3f}" if tok in top else "not in its top 8"
        if tok == best:
            equal += 1
        elif tok in top and best_logit - top[tok] < tie:
            ties.append(f"{i} (llama.cpp {best} by {best_logit - top[tok]:.3f})")
        elif first_or_tie(tok, f32_top(i), tie):
            ties.append(f"{i} (llama.cpp {best} {behind}, but cinder's on the F32 weights: its 8-bit activations)")
        else:
            return equal, ties, f"token {i}: cinder {tok}, llama.cpp {best} ({behind}, on the F32 weights too)"
    return equal, ties, None


def f32_scorer(a):
    """llama.cpp's top at a prefix on the F32 copy of the model (made on first use)."""
    f32 = os.path.join(a.work, f"{a.label}-f32.gguf")

    def score(ids, tag):
        if not os.path.exists(f32):
            r = run([a.oracle, a.model, "--dequantize", f32])
            if r.returncode:
                raise RuntimeError(f"llama_oracle --dequantize failed: {r.stderr.strip()[-2000:]}")
        saved, a.model = a.model, f32
        try:
            return llama_top(a, [ids], tag)[0]
        finally:
            a.model = saved
    return score


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cinder", required=True)
    p.add_argument("--oracle", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--label", default="model")
    p.add_argument("--prompt", action="append", required=True, help="comma-separated token ids")
    p.add_argument("--n", type=int, default=12)
    p.add_argument("--tie", type=float, default=1.0)
    p.add_argument("--max-tie-share", type=float, default=0.25)
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    prompts = [[int(t) for t in s.split(",")] for s in a.prompt]
    ok = True
    f32 = f32_scorer(a)
    for device in ("cpu", "gpu"):
        gens = [cinder_greedy(a, device, pr) for pr in prompts]
        lists = [pr + g[:i] for pr, g in zip(prompts, gens) for i in range(len(g))]
        tops = llama_top(a, lists, device)
        at, n_steps, n_ties = 0, 0, 0
        for k, (pr, g) in enumerate(zip(prompts, gens)):
            equal, ties, bad = agreement(g, tops[at:at + len(g)], a.tie,
                                         lambda i, pr=pr, g=g: f32(pr + g[:i], "f32"))
            at += len(g)
            n_steps, n_ties = n_steps + len(g), n_ties + len(ties)
            ok &= bad is None
            tie_text = f", near ties at {', '.join(ties)}" if ties else ""
            print(f"[{a.label}] {device} prompt {k} ({len(pr)} tokens): {equal}/{len(g)} greedy tokens are "
                  f"llama.cpp's top-1{tie_text}{'  FAIL: ' + bad if bad else ''}")
        if n_ties > a.max_tie_share * n_steps:
            ok = False
            print(f"[{a.label}] {device}: FAIL: near ties at {n_ties} of {n_steps} steps (more than {a.max_tie_share:.0%})")
    f32_path = os.path.join(a.work, f"{a.label}-f32.gguf")
    if os.path.exists(f32_path):
        os.remove(f32_path)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
