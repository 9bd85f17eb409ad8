#!/usr/bin/env python3
"""Writes tests/data/tokenizer/vocab-cases-llama-cpp.json: more texts for llama.cpp's
vocabulary-only GGUFs (scripts/fetch-vocabs.sh) with the ids llama.cpp's own tokenizer gives
them (no BOS, special tokens not parsed): scripts, combining marks, spacing and digits the
test cases of llama.cpp's models/ leave out. Needs llama-tokenize built from the llama.cpp
the project follows (0c1e57098):

    python3 tests/data/tokenizer/make-vocab-cases.py LLAMA_TOKENIZE VOCAB_DIR > \
        tests/data/tokenizer/vocab-cases-llama-cpp.json
"""
import json
import os
import subprocess
import sys

VOCABS = ["llama-bpe", "llama-spm", "phi-3", "qwen2", "qwen35", "gemma-4", "bert-bge", "gpt-2",
          "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact", "command-r", "mpt"]

TEXTS = [
    "مَرْحَبًا بِكُمْ في العالم",
    "ภาษาไทย ทดสอบ",
    "नमस्ते दुनिया, क्षमा करें",
    "Tiếng Việt có dấu",
    "Tie\u0302\u0301ng Vie\u0323\u0302t (decomposed)",
    "שָׁלוֹם עוֹלָם",
    "한국어 텍스트입니다",
    "日本語のテキスト、カタカナ。",
    "👩\u200d👩\u200d👧\u200d👦 family 🏳️\u200d🌈 flag",
    "x\u00a0y\u2003z\u3000w\u202fv",
    "line1\r\nline2\r\n\r\n  indented\ttab",
    "1234567890 3.14159 1,000,000 ½ ¾ ² ١٢٣ ௧௨",
    "def f(x):\n    return x**2  # comment\n\n\n",
    "It's, they're, WE'LL, I'D, you've; don’t",
    "Ελληνικά κείμενα",
    "Привет, мир! Ёжик",
    "ÀÉÎÕÜ àéîõü ÇçÑñ ß ẞ",
    "zero\u200bwidth\u200cnon\u200djoin",
    "ℌ𝔢𝔩𝔩𝔬 𝕨𝕠𝕣𝕝𝕕",
    "    \n\n\n    \t\t  \n ",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３！",
    "<html><body class=\"x\">&amp;</body></html>",
    "ﬁ ﬂ ǅ ǈ İstanbul",
    "Ⅻ ⑩ ㊿",
    "abc123def4567ghi",
    "\u0301leading combining mark",
    "a\u0308\u0323 stacked marks",
    "\u0000nul \u0007bell \u001bescape \u007fdel \u0085nel",
    "trailing spaces   ",
    "   ",
]


def tokenize(tool, gguf, text):
    r = subprocess.run([tool, "-m", gguf, "--stdin", "--ids", "--no-bos", "--no-parse-special",
                        "--log-disable"], input=text.encode("utf-8"), capture_output=True,
                       check=True)
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--reformat":
        with open(sys.argv[2]) as f:
            write(json.load(f), sys.stdout)
        return
    tool, vocab_dir = sys.argv[1], sys.argv[2]
    out = {"source": "llama.cpp 0c1e57098 (the source of PyPI's llama-cpp-python 0.3.36): "
                     "llama-tokenize -m ggml-vocab-NAME.gguf --stdin --ids --no-bos "
                     "--no-parse-special (tests/data/tokenizer/make-vocab-cases.py)",
           "texts": TEXTS, "ids": {}}
    for v in VOCABS:
        gguf = os.path.join(vocab_dir, "ggml-vocab-%s.gguf" % v)
        out["ids"][v] = [tokenize(tool, gguf, t) for t in TEXTS]
    write(out, sys.stdout)


def write(out, f):
    """One text, or one text's ids, to a line."""
    dump = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    f.write('{\n "source": %s,\n "texts": [\n' % dump(out["source"]))
    f.write(",\n".join("  " + dump(t) for t in out["texts"]) + '\n ],\n "ids": {\n')
    f.write(",\n".join('  %s: [\n%s\n  ]' % (dump(v), ",\n".join("   " + dump(i) for i in ids))
                       for v, ids in out["ids"].items()))
    f.write("\n }\n}\n")


main()
