#!/usr/bin/env python3
"""Logits of edgellm and llama.cpp on the same real-shaped files (issue 46's "the real shapes
in a script"): for each synthetic file scripts/family-bench.sh wrote (random weights in the
published models' shapes, Q4_K_M), the same N token ids (fixed seed, within the vocabulary)
evaluated as one batch by `edgellm logits` and by llama.cpp's dump_logits (scripts/reference.sh
builds it; weights in the file's layout, --repack 0, or its default repacking with
--llama-repack), and per file the normalized RMSE of the last rows and how many of their
top-1 tokens agree. Under the build lock, as the benchmarks.

  scripts/family-logits.py [--tokens 64] [--last 8] [--llama-repack] [SHAPE ...]
      default shapes: llama-3.2-1b phi-4-mini smollm3-3b gemma4-e2b (their files in
      ~/.cache/edgellm/synth, EDGELLM_SYNTH to change)

Random Q4_K_M weights in 16 to 36 layers amplify any rounding difference (one int8 of an
activation quantized the other way), so these land near 1e-2 where the tiny F32 goldens of
tests/modelfile/test_family_golden.cpp hold 1e-4; a wrong formula lands near 1.
"""
import argparse
import fcntl
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("shapes", nargs="*", default=["llama-3.2-1b", "phi-4-mini", "smollm3-3b", "gemma4-e2b"])
ap.add_argument("--tokens", type=int, default=64)
ap.add_argument("--last", type=int, default=8)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--llama-repack", action="store_true")
args = ap.parse_args()

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ours = os.environ.get("EDGELLM_BIN", os.path.join(root, "build/bin/edgellm"))
synth = os.environ.get("EDGELLM_SYNTH", os.path.expanduser("~/.cache/edgellm/synth"))
dump = subprocess.run([os.path.join(root, "scripts/reference.sh"), "--bin", "dump_logits"],
                      check=True, capture_output=True, text=True).stdout.strip()


def n_vocab(path):
    out = subprocess.run([ours, "inspect", "-m", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "vocab" in line.lower():
            for w in line.replace(",", " ").replace(":", " ").split():
                if w.isdigit() and int(w) > 1000:
                    return int(w)
    raise SystemExit("family-logits: no vocabulary size in `edgellm inspect` of " + path)


def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)


lock = open("/tmp/edgellm-build.lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("| model (Q4_K_M, random weights) | tokens | rows compared | nRMSE | top-1 agree |")
print("|---|---:|---:|---:|---:|")
with tempfile.TemporaryDirectory() as tmp:
    for s in args.shapes:
        f = os.path.join(synth, s + "-q4_k_m.gguf")
        if not os.path.exists(f):
            print("family-logits: no %s (scripts/family-bench.sh %s writes it)" % (f, s), file=sys.stderr)
            continue
        nv = n_vocab(f)
        rng = random.Random(46)
        toks = [rng.randrange(10, min(nv, 100000)) for _ in range(args.tokens)]
        a, b = os.path.join(tmp, "ours.f32"), os.path.join(tmp, "llama.f32")
        subprocess.run([ours, "logits", "-m", f, "--tokens", " ".join(map(str, toks)), "-o", a,
                        "-t", str(args.threads)], check=True, capture_output=True)
        cmd = [dump, "--model", f, "--tokens", ",".join(map(str, toks)), "--out", b,
               "--threads", str(args.threads), "--last", str(args.last)]
        if args.llama_repack:
            cmd.append("--repack")
        subprocess.run(cmd, check=True, capture_output=True)
        x = floats(a)[-args.last * nv:]
        y = floats(b)
        assert len(x) == len(y) == args.last * nv, (len(x), len(y))
        num = sum((p - q) ** 2 for p, q in zip(x, y))
        den = sum(q * q for q in y)  # (as tests/model/test_golden.cpp: ||ours - theirs|| / ||theirs||)
        argmax = lambda v, r: max(range(nv), key=lambda i: v[r * nv + i])
        top = sum(1 for r in range(args.last) if argmax(x, r) == argmax(y, r))
        print("| %s | %d | %d | %.1e | %d of %d |" % (s, args.tokens, args.last, math.sqrt(num / den), top, args.last),
              flush=True)
