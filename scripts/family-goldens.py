#!/usr/bin/env python3
"""Golden logits for the families without packaged weights: `edgellm synth` writes a tiny
model of each in its family's real layout (random weights, fixed seed: the same bytes every
time), llama.cpp's reference (scripts/reference.sh: dump_logits) evaluates the golden tokens
on it, and tests/data/golden/ keeps the last rows of its logits with families.json, which
names each case's synth command, the file's sha256, the context size and the KV type.
tests/modelfile/test_family_golden.cpp makes the same files again and compares.

  scripts/family-goldens.py [--bin build/bin/edgellm] [--only NAME,...]

Run it again after a change to synth's output for a family (the test says so: the sha256
no longer matches); --only remakes the named synthetic cases (CASES) and keeps every other
case of families.json as it is. Python's standard library only.
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden")
ROWS = 16  # the last rows kept (the 32 golden tokens' second half)

# name, synth shape, --arch (None: the shape's), type, context, KV type
CASES = [
    ("llama3-rope", "tiny", "llama", "F32", 256, "f16"),     # Llama 3's rope_freqs factors
    ("smollm3", "tiny", "smollm3", "F32", 256, "f16"),       # NoPE on every 4th layer
    ("phi3-long", "tiny-longrope", None, "F32", 1024, "f16"),  # LongRoPE's long factors
    ("phi3-short", "tiny-longrope", None, "F32", 256, "f16"),  # ... and its short ones
    ("phi3-q8_0", "tiny-longrope", None, "Q8_0", 1024, "f16"),  # fused matrices quantized
    # Gemma 4: sliding layers (window 8, crossed) and global ones with heads of their own,
    # layers 6-8 reading layers 4 and 5's caches, per-layer embeddings, soft-capped logits.
    # Quantized, with an f32 cache: the two agree to the bit there (1e-7). With an f16 cache
    # the two differ in a rounding here and there (a probability's last bit), which the
    # next matrices' quantized activations amplify: 2e-2, and 2 of 16 top-1 differ.
    ("gemma4", "tiny-gemma4", None, "F32", 256, "f16"),
    ("gemma4-kv-f32", "tiny-gemma4", None, "F32", 256, "f32"),
    ("gemma4-q8_0", "tiny-gemma4", None, "Q8_0", 256, "f32"),
    # LFM2: short convolutions (3 taps, their window carried over the 32 tokens) on layers
    # 0, 1, 3 and 4, attention with q/k norms on 2 and 5
    ("lfm2", "tiny-lfm2", None, "F32", 256, "f16"),
    ("lfm2-q8_0", "tiny-lfm2", None, "Q8_0", 256, "f16"),
]


# Real files the packages ship (scripts/fetch-models.sh NAME): llama.cpp's tokens of the text
# (the test checks edgellm's tokenizer gives the same), the last REAL_ROWS rows as float16.
REAL = [
    ("smollm2-135m", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
     "What is the capital of France, and why is it famous? Answer in two sentences.<|im_end|>\n"
     "<|im_start|>assistant\nThe capital of France is Paris. It is famous for", 1024, "f16"),
]
REAL_ROWS = 4

# Synthetic weights with a real vocabulary (llama.cpp's vocabulary-only GGUFs,
# scripts/fetch-vocabs.sh): name, shape, --arch, type, context, KV type, vocabulary, text.
VOCAB_CASES = [
    ("phi3-vocab", "tiny-longrope", None, "F32", 1024, "f16", "phi-3",
     "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nWhat is the capital of France?"
     "<|end|>\n<|assistant|>\nThe capital of France is Paris."),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "edgellm"))
    ap.add_argument("--only", default="", help="remake these synthetic cases only (comma-separated)")
    a = ap.parse_args()
    only = [n for n in a.only.split(",") if n]
    unknown = [n for n in only if n not in [c[0] for c in CASES]]
    if unknown:
        sys.exit("family-goldens: no case %s (cases: %s)" % (", ".join(unknown), ", ".join(c[0] for c in CASES)))
    dump = subprocess.run([os.path.join(ROOT, "scripts", "reference.sh"), "--bin", "dump_logits"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    with open(os.path.join(os.path.dirname(ROOT), "shared", "reference", "golden", "cases.json")) as f:
        tokens = json.load(f)["tokens"]
    out = {"tokens": tokens, "rows": ROWS, "how": "scripts/family-goldens.py: llama.cpp %s "
           "(llama-cpp-python 0.3.36's vendor/llama.cpp), dump_logits, 2 threads, no repacking, "
           "flash attention off" % "0c1e57098", "cases": []}
    kept = {}
    if only:
        with open(os.path.join(OUT, "families.json")) as f:
            old = json.load(f)
        if old["tokens"] != tokens:
            sys.exit("family-goldens: the golden tokens changed: remake every case (no --only)")
        kept = {c["name"]: c for c in old["cases"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape, arch, ftype, ctx, kv in CASES:
            if only and name not in only:
                if name not in kept:
                    sys.exit("family-goldens: %s is not in families.json yet: --only it too" % name)
                out["cases"].append(kept[name])
                continue
            model = os.path.join(tmp, name + ".gguf")
            synth = ["synth", "--shape", shape, "--type", ftype, "--seed", "1"]
            if arch:
                synth += ["--arch", arch]
            subprocess.run([a.bin] + synth + ["-o", model], check=True, stderr=subprocess.DEVNULL)
            logits = os.path.join(tmp, name + ".f32")
            subprocess.run([dump, "--model", model, "--tokens", ",".join(map(str, tokens)),
                            "--out", logits, "--threads", "2", "--ctx", str(ctx), "--kv", kv,
                            "--last", str(ROWS)], check=True, stdout=subprocess.DEVNULL)
            data = open(logits, "rb").read()
            n_vocab = len(data) // 4 // ROWS
            with open(os.path.join(OUT, name + ".last16.f32"), "wb") as f:
                f.write(data)
            out["cases"].append({"name": name, "synth": synth, "sha256": sha256(model), "ctx": ctx,
                                 "kv_type": kv, "n_vocab": n_vocab,
                                 "logits": name + ".last16.f32"})
            print("%-16s %s %s ctx %d: %d rows x %d" % (name, shape, ftype, ctx, ROWS, n_vocab))
    if only:
        for part in ("vocab_cases", "real"):
            out[part] = old[part]
        with open(os.path.join(OUT, "families.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        return
    out["vocab_cases"] = []
    vocab_dir = os.environ.get("EDGELLM_VOCABS", os.path.expanduser("~/.cache/edgellm/vocab"))
    for name, shape, arch, ftype, ctx, kv, vocab_name, text in VOCAB_CASES:
        vocab = os.path.join(vocab_dir, "ggml-vocab-%s.gguf" % vocab_name)
        if not os.path.isfile(vocab):
            sys.exit("family-goldens: no %s (scripts/fetch-vocabs.sh)" % vocab)
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, name + ".gguf")
            synth = ["synth", "--shape", shape, "--type", ftype, "--seed", "1"]
            if arch:
                synth += ["--arch", arch]
            subprocess.run([a.bin] + synth + ["--vocab", vocab, "-o", model], check=True,
                           stderr=subprocess.DEVNULL)
            ids = subprocess.run([dump, "--model", model, "--tokenize", text], stdout=subprocess.PIPE,
                                 text=True, check=True).stdout.strip().splitlines()[-1]
            logits = os.path.join(tmp, "l.f32")
            subprocess.run([dump, "--model", model, "--tokens", ids, "--out", logits, "--threads", "2",
                            "--ctx", str(ctx), "--kv", kv, "--last", str(REAL_ROWS)], check=True,
                           stdout=subprocess.DEVNULL)
            data = open(logits, "rb").read()
            digest = sha256(model)
        floats = struct.unpack("<%df" % (len(data) // 4), data)
        with open(os.path.join(OUT, name + ".last%d.f16" % REAL_ROWS), "wb") as f:
            f.write(struct.pack("<%de" % len(floats), *floats))
        out["vocab_cases"].append({"name": name, "synth": synth, "vocab": "ggml-vocab-%s.gguf" % vocab_name,
                                   "sha256": digest, "text": text,
                                   "tokens": [int(t) for t in ids.split(",")], "ctx": ctx,
                                   "kv_type": kv, "rows": REAL_ROWS,
                                   "n_vocab": len(floats) // REAL_ROWS,
                                   "logits": name + ".last%d.f16" % REAL_ROWS})
        print("%-12s %s + %s: %d tokens, %d rows x %d" % (name, shape, vocab_name, len(ids.split(",")),
                                                       REAL_ROWS, len(floats) // REAL_ROWS))
    out["real"] = []
    for name, text, ctx, kv in REAL:
        r = subprocess.run([os.path.join(ROOT, "scripts", "fetch-models.sh"), "--print-path", name],
                           stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit("family-goldens: %s is not fetched (scripts/fetch-models.sh %s)" % (name, name))
        model = r.stdout.strip()
        ids = subprocess.run([dump, "--model", model, "--tokenize", text], stdout=subprocess.PIPE,
                             text=True, check=True).stdout.strip().splitlines()[-1]
        with tempfile.TemporaryDirectory() as tmp:
            logits = os.path.join(tmp, "l.f32")
            subprocess.run([dump, "--model", model, "--tokens", ids, "--out", logits, "--threads", "2",
                            "--ctx", str(ctx), "--kv", kv, "--last", str(REAL_ROWS)], check=True,
                           stdout=subprocess.DEVNULL)
            data = open(logits, "rb").read()
        floats = struct.unpack("<%df" % (len(data) // 4), data)
        with open(os.path.join(OUT, name + ".last%d.f16" % REAL_ROWS), "wb") as f:
            f.write(struct.pack("<%de" % len(floats), *floats))
        out["real"].append({"name": name, "file": os.path.basename(model), "text": text, "tokens": [int(t) for t in ids.split(",")],
                            "sha256": sha256(model), "ctx": ctx, "kv_type": kv, "rows": REAL_ROWS,
                            "n_vocab": len(floats) // REAL_ROWS,
                            "logits": name + ".last%d.f16" % REAL_ROWS})
        print("%-12s real: %d tokens, %d rows x %d" % (name, len(ids.split(",")), REAL_ROWS,
                                                      len(floats) // REAL_ROWS))
    with open(os.path.join(OUT, "families.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
