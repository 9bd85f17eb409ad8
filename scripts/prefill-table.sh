#!/usr/bin/env bash
# The prefill goals side by side: synthetic Qwen2.5-0.5B and 1.5B Q4_K_M files (edgellm
# synth: the published files' tensor shapes and types, random weights), 2 threads.
# Per round and file: `edgellm bench -p 512 -n 128 -r REPS`, then the same test by each
# peer's llama-bench given (IK_BENCH=…/ik_llama.cpp/llama-bench, LLAMA_BENCH=…/llama.cpp's
# llama-bench), one right after the other; then long prompts on the 0.5B shape with a q8_0
# KV cache (pp512 -r REPS, pp4096 -r 1; the peers with flash attention, as the seeds run
# them). Rounds alternate the engines within minutes, so a slow spell of a shared machine
# shows as a difference between rounds instead of between engines.
#   [IK_BENCH=…] [LLAMA_BENCH=…] scripts/prefill-table.sh [ROUNDS] [REPS]
#                                         (default 2 rounds of 3 runs; Markdown on stdout)
# Run it on an otherwise idle machine: the numbers are only as quiet as the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
reps="${2:-3}"
dir="${EDGELLM_WORK:-$HOME/.cache/edgellm/work}"
bin=build/bin/edgellm
mkdir -p "$dir"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
say() { echo "prefill-table: $*" >&2; }

declare -A peer=()
[ -n "${IK_BENCH:-}" ] && peer[ik]="$IK_BENCH"
[ -n "${LLAMA_BENCH:-}" ] && peer[llama]="$LLAMA_BENCH"
for who in "${!peer[@]}"; do
  [ -x "${peer[$who]}" ] || { say "${peer[$who]}: not an executable"; exit 2; }
done

# a peer's flash-attention flag: ik_llama.cpp takes 0/1, llama.cpp on/off/auto
fa_on() { if [ "$1" = ik ]; then echo 1; else echo on; fi; }

for shape in qwen2.5-0.5b qwen2.5-1.5b; do
  f="$dir/synth-$shape-q4_k_m.gguf"
  if [ ! -f "$f" ]; then
    say "writing $f"
    "$bin" synth --arch qwen2 --shape "$shape" --type Q4_K_M -o "$f" >&2
  fi
done

for ((r = 1; r <= rounds; r++)); do
  for shape in qwen2.5-0.5b qwen2.5-1.5b; do
    f="$dir/synth-$shape-q4_k_m.gguf"
    say "round $r: edgellm $shape"
    "$bin" bench -m "$f" -p 512 -n 128 -t 2 -r "$reps" -o json 2>/dev/null > "$out/$r-ours-$shape.json"
    for who in ik llama; do
      [ -n "${peer[$who]:-}" ] || continue
      say "round $r: $who $shape"
      "${peer[$who]}" -m "$f" -p 512 -n 128 -t 2 -r "$reps" -o json 2>/dev/null \
        > "$out/$r-$who-$shape.json" || say "$who failed on $shape"
    done
  done
  f="$dir/synth-qwen2.5-0.5b-q4_k_m.gguf"
  say "round $r: edgellm long prompts"
  "$bin" bench -m "$f" -p 512 -n 0 -t 2 -r "$reps" -ctk q8_0 -ctv q8_0 -o json 2>/dev/null \
    > "$out/$r-ours-pp512.json"
  "$bin" bench -m "$f" -p 4096 -n 0 -t 2 -r 1 -ctk q8_0 -ctv q8_0 -o json 2>/dev/null \
    > "$out/$r-ours-pp4096.json"
  for who in ik llama; do
    [ -n "${peer[$who]:-}" ] || continue
    say "round $r: $who long prompts"
    fa=$(fa_on "$who")
    "${peer[$who]}" -m "$f" -p 512 -n 0 -t 2 -r "$reps" -fa "$fa" -ctk q8_0 -ctv q8_0 -o json \
      2>/dev/null > "$out/$r-$who-pp512.json" || say "$who failed at pp512"
    "${peer[$who]}" -m "$f" -p 4096 -n 0 -t 2 -r 1 -fa "$fa" -ctk q8_0 -ctv q8_0 -o json \
      2>/dev/null > "$out/$r-$who-pp4096.json" || say "$who failed at pp4096"
  done
done

python3 - "$out" "$rounds" "$reps" <<'EOF'
import json, os, statistics, sys
out, rounds, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def load(name):
    p = os.path.join(out, name)
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        return {}
    # (ik_llama.cpp's llama-bench prints a warning of its allocator into the JSON)
    text = "".join(l for l in open(p) if not l.startswith("WARNING"))
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    res = {}
    for r in data:
        test = "pp%d" % r["n_prompt"] if r["n_gen"] == 0 else "tg%d" % r["n_gen"]
        res[test] = r
    return res

def med(r):
    return statistics.median(r["samples_ts"]) if r else None

def each(vals, fmt):
    return " / ".join(fmt % v if v is not None else "—" for v in vals)

peers = [w for w in ("ik", "llama") if any(load(f"{r}-{w}-qwen2.5-0.5b.json") for r in range(1, rounds + 1))]
title = {"ik": "ik_llama.cpp", "llama": "llama.cpp"}
head = "| model | test | edgellm t/s | int8 share |"
rule = "|---|---|---:|---:|"
for w in peers:
    head += " %s t/s | edgellm / %s |" % (title[w], title[w])
    rule += "---:|---:|"
print(head)
print(rule)

def line(label, test, ours_files, peer_files):
    ours = [load(f).get(test) for f in ours_files]
    share = each([100 * o["int8_share"] if o and o.get("int8_share") else None for o in ours], "%.0f")
    s = "| %s | %s | %s | %s %% |" % (label, test, each([med(o) for o in ours], "%.1f"),
                                       share) if test.startswith("pp") else \
        "| %s | %s | %s | |" % (label, test, each([med(o) for o in ours], "%.1f"))
    for w in peers:
        theirs = [load(f.replace("ours", w)).get(test) for f in peer_files]
        ratios = [med(o) / med(t) if o and t else None for o, t in zip(ours, theirs)]
        s += " %s | %s |" % (each([med(t) for t in theirs], "%.1f"), each(ratios, "%.2f×"))
    print(s)

for shape, label in (("qwen2.5-0.5b", "Qwen2.5-0.5B Q4_K_M"), ("qwen2.5-1.5b", "Qwen2.5-1.5B Q4_K_M")):
    files = [f"{r}-ours-{shape}.json" for r in range(1, rounds + 1)]
    for test in ("pp512", "tg128"):
        line(label, test, files, files)
label = "Qwen2.5-0.5B Q4_K_M, q8_0 KV"
line(label, "pp512", [f"{r}-ours-pp512.json" for r in range(1, rounds + 1)],
     [f"{r}-ours-pp512.json" for r in range(1, rounds + 1)])
line(label, "pp4096", [f"{r}-ours-pp4096.json" for r in range(1, rounds + 1)],
     [f"{r}-ours-pp4096.json" for r in range(1, rounds + 1)])
print()
print("pp4096 / pp512 (q8_0 KV):", end="")
for who in ["ours"] + peers:
    ratios = []
    for r in range(1, rounds + 1):
        a, b = load(f"{r}-{who}-pp512.json").get("pp512"), load(f"{r}-{who}-pp4096.json").get("pp4096")
        ratios.append(med(b) / med(a) if a and b else None)
    print(" %s %s;" % ("edgellm" if who == "ours" else title[who], each(ratios, "%.2f×")), end="")
print()
print()
print("(each cell: round 1 / round 2 …; a figure is the median of %s runs after a warm-up, "
      "pp4096 one run)" % reps)
EOF
