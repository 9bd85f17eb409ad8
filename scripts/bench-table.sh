#!/usr/bin/env bash
# docs/benchmarks.md's speed tables: synthetic Qwen2.5-0.5B and 1.5B files (edgellm synth: the
# published files' tensor shapes, per-tensor types and sizes, random weights) in Q4_K_M,
# Q4_0, Q8_0 and Q2_K_S; `edgellm bench -p 512 -n 128 -t 1,2 -r REPS` on each, the Q4_K_M
# files also with a q8_0 KV cache, and decode at a 4096-token context against an empty
# one. With LLAMA_BENCH=/path/to/llama-bench, llama.cpp runs the same tests on the same
# files right after each of ours, and the tables show both side by side with the ratio.
#   scripts/bench-table.sh [REPS]        (default 5; prints Markdown, progress on stderr)
# Run it on an otherwise idle machine: the numbers are only as quiet as the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-5}"
dir="${EDGELLM_WORK:-$HOME/.cache/edgellm/work}"
llama="${LLAMA_BENCH:-}"
bin=build/bin/edgellm
mkdir -p "$dir"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

say() { echo "bench-table: $*" >&2; }

for shape in qwen2.5-0.5b qwen2.5-1.5b; do
  for type in q4_k_m q4_0 q8_0 q2_k_s; do
    f="$dir/synth-$shape-$type.gguf"
    if [ ! -f "$f" ]; then
      say "writing $f"
      "$bin" synth --arch qwen2 --shape "$shape" --type "${type^^}" -o "$f" >&2
    fi
    say "edgellm $shape $type"
    "$bin" bench -m "$f" -p 512 -n 128 -t 1,2 -r "$reps" -o json 2>/dev/null \
      > "$out/ours-$shape-$type-f16.json"
    if [ -n "$llama" ]; then
      say "llama.cpp $shape $type"
      "$llama" -m "$f" -p 512 -n 128 -t 1,2 -r "$reps" -o json 2>/dev/null \
        > "$out/llama-$shape-$type-f16.json"
    fi
  done
  f="$dir/synth-$shape-q4_k_m.gguf"
  say "edgellm $shape q4_k_m, q8_0 KV cache"
  "$bin" bench -m "$f" -p 512 -n 128 -t 1,2 -r "$reps" --kv-type q8_0 -o json 2>/dev/null \
    > "$out/ours-$shape-q4_k_m-q8_0.json"
  if [ -n "$llama" ]; then
    say "llama.cpp $shape q4_k_m, q8_0 KV cache"
    "$llama" -m "$f" -p 512 -n 128 -t 1,2 -r "$reps" -ctk q8_0 -ctv q8_0 -fa on -o json \
      2>/dev/null > "$out/llama-$shape-q4_k_m-q8_0.json"
  fi
done
for kv in f16 q8_0; do
  for d in 0 4096; do
    say "edgellm depth $d, $kv KV cache"
    "$bin" bench -m "$dir/synth-qwen2.5-0.5b-q4_k_m.gguf" -p 0 -n 64 -d "$d" -t 2 -r "$reps" \
      --kv-type "$kv" -o json 2>/dev/null > "$out/depth-$kv-$d.json"
    if [ -n "$llama" ]; then
      say "llama.cpp depth $d, $kv KV cache"
      "$llama" -m "$dir/synth-qwen2.5-0.5b-q4_k_m.gguf" -p 0 -n 64 -d "$d" -t 2 -r "$reps" \
        -ctk "$kv" -ctv "$kv" -fa on -o json 2>/dev/null > "$out/ldepth-$kv-$d.json"
    fi
  done
done

python3 - "$out" "$reps" "${llama:+yes}" <<'EOF'
import json, os, sys
sys.path.insert(0, "scripts")
from benchlib import cell, med, ratio, rows
out, reps, with_llama = sys.argv[1], sys.argv[2], sys.argv[3] == "yes"

names = {"q4_k_m": "Q4_K_M", "q4_0": "Q4_0", "q8_0": "Q8_0", "q2_k_s": "Q2_K_S"}
print("| model | KV | threads | test | edgellm t/s | bandwidth share |"
      + (" llama.cpp t/s | edgellm / llama.cpp |" if with_llama else ""))
print("|---|---|---:|---|---:|---:|" + ("---:|---:|" if with_llama else ""))
for shape in ["qwen2.5-0.5b", "qwen2.5-1.5b"]:
    for type in ["q4_k_m", "q4_0", "q8_0", "q2_k_s"]:
        for kv in ["f16", "q8_0"]:
            ours = rows(f"{out}/ours-{shape}-{type}-{kv}.json")
            if not ours:
                continue
            theirs = rows(f"{out}/llama-{shape}-{type}-{kv}.json")
            for threads in [1, 2]:
                for test in ["pp512", "tg128"]:
                    o = ours.get((threads, test))
                    if o is None:
                        continue
                    share = "%.0f %%" % (100 * o["bw_share"]) if o.get("bw_share") else ""
                    line = "| %s %s | %s | %d | %s | %s | %s |" % (
                        shape.replace("qwen2.5-", "Qwen2.5-").upper().replace("QWEN", "Qwen"),
                        names[type], kv, threads, test, cell(o), share)
                    if with_llama:
                        t = theirs.get((threads, test))
                        line += " %s | %s |" % (cell(t), ratio(o, t))
                    print(line)
print()
print("| 0.5B Q4_K_M, 2 threads | KV | tg64, empty | tg64 @ d4096 | change |")
print("|---|---|---:|---:|---:|")
for who, prefix in [("edgellm", "depth"), ("llama.cpp", "ldepth")]:
    for kv in ["f16", "q8_0"]:
        pa, pb = f"{out}/{prefix}-{kv}-0.json", f"{out}/{prefix}-{kv}-4096.json"
        if not (os.path.exists(pa) and os.path.getsize(pa) and os.path.exists(pb) and os.path.getsize(pb)):
            continue
        a, b = json.load(open(pa))[0], json.load(open(pb))[0]
        print("| %s | %s | %s | %s | %+.0f %% |" % (who, kv, cell(a), cell(b),
                                                    100 * (med(b) / med(a) - 1)))
print()
print("(median of %s runs after a warm-up, ± the standard deviation)" % reps)
EOF
