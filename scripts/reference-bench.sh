#!/usr/bin/env bash
# One GGUF, edgellm and the llama.cpp reference side by side in the same run: `edgellm bench`
# then llama.cpp's llama-bench (scripts/reference.sh builds it, once), the same tests on the
# same file, one right after the other under the machine's build lock (so no build runs
# beside them), and a table of both with the ratio (scripts/benchlib.py, as bench-table.sh).
#   scripts/reference-bench.sh MODEL.gguf [-p 512] [-n 128] [-t 2] [-r 3] [--kv T] [--llama-repack]
# llama-bench runs with --repack 0 (its weights in the file's layout, as dump_logits: its
# repacked Q4_1 crashes on AMX machines) unless --llama-repack, its default, which lets it
# repack Q4_0, Q4_K, Q2_K, Q5_K, Q6_K, IQ4_NL and Q8_0 for faster kernels; edgellm runs as
# shipped. --kv T: a T KV cache for both (llama.cpp with flash attention, which it needs for a
# quantized one). EDGELLM_BIN names another edgellm (default build/bin/edgellm).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "reference-bench: $*" >&2; }
p=512 n=128 t=2 r=3 kv=f16 repack=0 model=""
while [ $# -gt 0 ]; do
  case "$1" in
    -p) p="$2"; shift 2 ;;
    -n) n="$2"; shift 2 ;;
    -t) t="$2"; shift 2 ;;
    -r) r="$2"; shift 2 ;;
    --kv) kv="$2"; shift 2 ;;
    --llama-repack) repack=1; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) say "unknown option '$1'"; exit 2 ;;
    *) [ -z "$model" ] || { say "one model"; exit 2; }; model="$1"; shift ;;
  esac
done
[ -n "$model" ] || { say "usage: scripts/reference-bench.sh MODEL.gguf [options] (--help)"; exit 2; }
[ -f "$model" ] || { say "no model file $model"; exit 2; }
ours="${EDGELLM_BIN:-build/bin/edgellm}"
[ -x "$ours" ] || { say "no edgellm at $ours (build it, or set EDGELLM_BIN)"; exit 2; }
llama=$(scripts/reference.sh --bin llama-bench)

llama_kv=(-ctk "$kv" -ctv "$kv")
case "$kv" in f32|f16|bf16) ;; *) llama_kv+=(-fa on) ;; esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
say "edgellm bench, then llama-bench, on $model (-p $p -n $n -t $t -r $r, $kv KV)"
exec 9>>/tmp/edgellm-build.lock
flock 9
"$ours" bench -m "$model" -p "$p" -n "$n" -t "$t" -r "$r" --kv-type "$kv" -o json > "$out/ours.json" ||
  say "edgellm bench failed"
"$llama" -m "$model" -p "$p" -n "$n" -t "$t" -r "$r" "${llama_kv[@]}" --repack "$repack" -o json \
  > "$out/llama.json" || say "llama-bench failed"
flock -u 9

python3 - "$out" "$model" "$kv" "$repack" "$r" <<'EOF'
import os, sys
sys.path.insert(0, "scripts")
from benchlib import cell, ratio, rows
out, model, kv, repack, reps = sys.argv[1:6]
ours, theirs = rows(out + "/ours.json"), rows(out + "/llama.json")
print("%s (%.1f MiB), %s KV; llama.cpp %s" % (os.path.basename(model), os.path.getsize(model) / 2**20, kv,
      "repacking (its default)" if repack == "1" else "without repacking (--repack 0)"))
print()
print("| threads | test | edgellm t/s | llama.cpp t/s | edgellm / llama.cpp |")
print("|---:|---|---:|---:|---:|")
for key in sorted(set(ours) | set(theirs), key=lambda k: (k[0], k[1][:2] != "pp", k[1])):
    o, t = ours.get(key), theirs.get(key)
    print("| %d | %s | %s | %s | %s |" % (key[0], key[1], cell(o), cell(t), ratio(o, t)))
print()
print("(median of %s runs after a warm-up, ± the standard deviation)" % reps)
sys.exit(0 if ours and theirs else 1)
EOF
