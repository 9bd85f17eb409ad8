#!/usr/bin/env python3
"""Golden logits from the llama.cpp reference, in the format of reference/golden/cases.json.

For each model (any architecture llama.cpp loads) and each KV cache type, the reference's
dump_logits (scripts/reference.sh builds it) evaluates the tokens as one batch at positions
0..n-1 and writes raw little-endian float32 [rows][n_vocab]; a JSON names the tokens and, per
case, the model, the KV type, the logits file, n_tokens and n_vocab (what
tests/model/test_golden.cpp reads), plus the model's sha256 and the exact command.

  scripts/golden.py --model A.gguf [--model B.gguf ...]
                    (--tokens 1,2,3 | --tokens-file FILE | --text TEXT | --cases CASES.json)
                    [--kv f16[,q8_0]] [--last N] [--threads 2] [--repack]
                    [--out-dir DIR] [--json cases.json] [--check]

--cases takes the tokens and the (model, KV type) cases of an existing cases.json (its
models relative to its folder), --check then compares each new file with that case's
logits (normalized RMSE and top-1 agreement, as test_golden does). --text is tokenized by
llama.cpp (BOS added, special tokens parsed unless --no-bos / --no-parse-special); every
model must tokenize it alike. An existing --json with the same tokens keeps its other cases.
Python's standard library only.
"""
import argparse
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fail(why):
    sys.exit("golden: " + why)


def dump_logits_bin():
    r = subprocess.run([os.path.join(ROOT, "scripts", "reference.sh"), "--bin", "dump_logits"],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("scripts/reference.sh could not build dump_logits")
    return r.stdout.strip()


def parse_ids(text, where):
    ids = [t for t in text.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    try:
        out = [int(t) for t in ids]
    except ValueError:
        fail("%s: token ids are integers separated by commas or spaces" % where)
    if not out:
        fail("%s: no token ids" % where)
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_f32(path):
    a = array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def distance(ours, gold, n_vocab):
    """normalized RMSE over all positions and top-1 agreement (test_golden's measure)"""
    num = sum((o - g) * (o - g) for o, g in zip(ours, gold))
    den = sum(g * g for g in gold)
    rows = len(gold) // n_vocab
    agree = 0
    for r in range(rows):
        a, b = ours[r * n_vocab:(r + 1) * n_vocab], gold[r * n_vocab:(r + 1) * n_vocab]
        agree += max(range(n_vocab), key=a.__getitem__) == max(range(n_vocab), key=b.__getitem__)
    return math.sqrt(num / den) if den else float("inf"), agree / rows


def logits_name(model, kv, last):
    stem = os.path.basename(model)
    stem = stem[:-5] if stem.endswith(".gguf") else stem
    kvpart = "" if kv == "f16" else ".kvq8" if kv == "q8_0" else ".kv" + kv
    return "%s%s.public%s.f32" % (stem, kvpart, "-last%d" % last if last else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="a GGUF (repeatable)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="token ids, comma-separated")
    src.add_argument("--tokens-file", help="a file of token ids (commas, spaces, a JSON array, or "
                     "a JSON object's \"tokens\")")
    src.add_argument("--text", help="a text llama.cpp tokenizes")
    src.add_argument("--cases", help="an existing cases.json: its tokens and cases")
    ap.add_argument("--kv", default="f16", help="KV cache types, comma-separated (default f16)")
    ap.add_argument("--last", type=int, default=0, help="only the logits of the last N positions")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repack", action="store_true", help="let llama.cpp repack the weights")
    ap.add_argument("--no-bos", action="store_true", help="--text: no BOS")
    ap.add_argument("--no-parse-special", action="store_true", help="--text: special tokens as text")
    ap.add_argument("--out-dir", default=".", help="where the .f32 files and the JSON go")
    ap.add_argument("--json", default="cases.json", help="the JSON's name in --out-dir")
    ap.add_argument("--check", action="store_true", help="--cases: compare with its logits")
    a = ap.parse_args()
    if a.last < 0 or a.threads < 1:
        fail("--last is >= 0 and --threads >= 1")
    if a.check and not a.cases:
        fail("--check compares with the logits of --cases")
    kvs = [k for k in a.kv.split(",") if k]
    if not kvs:
        fail("--kv names at least one type")

    dump = dump_logits_bin()
    # the cases: (model path, KV type, logits file of --cases or None)
    cases = []
    if a.cases:
        with open(a.cases) as f:
            given = json.load(f)
        tokens = [int(t) for t in given["tokens"]]
        base = os.path.dirname(os.path.abspath(a.cases))
        for c in given["cases"]:
            cases.append((os.path.join(base, c["model"]), c["kv_type"], os.path.join(base, c["logits"])))
    else:
        if not a.model:
            fail("--model is required (unless --cases)")
        for m in a.model:
            cases += [(m, kv, None) for kv in kvs]
        if a.tokens:
            tokens = parse_ids(a.tokens, "--tokens")
        elif a.tokens_file:
            with open(a.tokens_file) as f:
                text = f.read()
            try:  # a JSON with "tokens" (a cases.json) too
                text = json.dumps(json.loads(text)["tokens"])
            except (ValueError, KeyError, TypeError):
                pass
            tokens = parse_ids(text, a.tokens_file)
        else:
            tokens = None
            for m in a.model:
                cmd = [dump, "--model", m, "--tokenize", a.text] + (["--no-bos"] if a.no_bos else []) + \
                      (["--no-parse-special"] if a.no_parse_special else [])
                r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
                if r.returncode != 0:
                    fail("tokenizing with %s failed" % m)
                ids = parse_ids(r.stdout, m)
                if tokens is not None and ids != tokens:
                    fail("%s tokenizes the text unlike %s" % (m, a.model[0]))
                tokens = ids
    for m, _, _ in cases:
        if not os.path.isfile(m):
            fail("no model file %s" % m)

    os.makedirs(a.out_dir, exist_ok=True)
    out_dir = os.path.abspath(a.out_dir)
    json_path = os.path.join(out_dir, a.json)
    doc = {"tokens": tokens, "cases": []}
    if os.path.exists(json_path):
        with open(json_path) as f:
            doc = json.load(f)
        if doc.get("tokens") != tokens:
            fail("%s holds other tokens: give another --json" % json_path)
    doc["how"] = ("llama.cpp from llama-cpp-python 0.3.36's source (vendor/llama.cpp, upstream "
                  "0c1e57098), CPU, scripts/reference/dump_logits: the tokens as one batch at "
                  "positions 0..n-1, flash attention only with a quantized KV cache, weights %s; "
                  "each case's command says exactly how" % ("repacked" if a.repack else "not repacked"))

    worst = 0.0
    for model, kv, gold in cases:
        name = logits_name(model, kv, a.last)
        out = os.path.join(out_dir, name)
        cmd = [dump, "--model", model, "--tokens", ",".join(map(str, tokens)), "--out", out,
               "--threads", str(a.threads), "--kv", kv]
        if a.last:
            cmd += ["--last", str(a.last)]
        if a.repack:
            cmd.append("--repack")
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            fail("dump_logits failed on %s (kv %s): %s" % (model, kv, shlex.join(cmd)))
        info = json.loads(r.stdout)
        # (test_golden opens the JSON's folder / model: relative inside it, else absolute)
        path = os.path.abspath(model)
        if os.path.commonpath([path, out_dir]) == out_dir:
            path = os.path.relpath(path, out_dir)
        case = {"model": path, "kv_type": kv, "logits": name,
                "n_tokens": info["n_tokens"], "n_vocab": info["n_vocab"]}
        if a.last:
            case["last_n"] = a.last
        case["model_sha256"] = sha256(model)
        case["command"] = shlex.join(["dump_logits"] + cmd[1:])
        doc["cases"] = [c for c in doc["cases"] if c["logits"] != name] + [case]
        line = "%-40s kv %-5s -> %s" % (os.path.basename(model), kv, name)
        if a.check:
            ours, theirs = read_f32(out), read_f32(gold)
            if a.last:  # the golden's last rows
                theirs = theirs[len(theirs) - len(ours):]
            if len(ours) != len(theirs):
                fail("%s has %d floats, %s %d" % (out, len(ours), gold, len(theirs)))
            nrmse, top1 = distance(ours, theirs, info["n_vocab"])
            worst = max(worst, nrmse)
            line += "  against %s: nrmse %.2e top1 %.3f" % (os.path.basename(gold), nrmse, top1)
        print(line)
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("golden: %d case(s) in %s" % (len(cases), json_path))
    if a.check:
        print("golden: largest nrmse against the given logits %.2e" % worst)


if __name__ == "__main__":
    main()
