#!/usr/bin/env bash
# The README's speed table for the families: synthetic files in the published models' shapes
# (`edgellm synth --shape S --type Q4_K_M`: their tensor shapes and per-tensor types, random
# weights — speed depends only on those), `edgellm bench -p 512 -n 128 -t 2 -r REPS` on each,
# and llama.cpp's llama-bench (scripts/reference.sh builds it) on the same file right after,
# without its weight repacking (--repack 0) and with it (its default). The whole run holds the
# machine's build lock, so no build runs beside it.
#   scripts/family-bench.sh [-r REPS] [-t THREADS] [SHAPE...]
#     default: -r 3 -t 2, llama-3.2-1b phi-4-mini smollm3-3b gemma4-e2b
# Files go to ~/.cache/edgellm/synth (EDGELLM_SYNTH to change); prints Markdown, progress on
# stderr. The bandwidth share: the bytes a generated token reads (each weight matrix once, a
# lazily read table not at all, the KV cache) against what `bench` measured just before.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=3 threads=2 shapes=()
while [ $# -gt 0 ]; do
  case "$1" in
    -r) reps="$2"; shift 2 ;;
    -t) threads="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "family-bench: unknown option '$1'" >&2; exit 2 ;;
    *) shapes+=("$1"); shift ;;
  esac
done
[ ${#shapes[@]} -gt 0 ] || shapes=(llama-3.2-1b phi-4-mini smollm3-3b gemma4-e2b)
bin="${EDGELLM_BIN:-build/bin/edgellm}"
dir="${EDGELLM_SYNTH:-$HOME/.cache/edgellm/synth}"
llama=$(scripts/reference.sh --bin llama-bench)
say() { echo "family-bench: $*" >&2; }
mkdir -p "$dir"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

exec 9>>/tmp/edgellm-build.lock
flock 9
for s in "${shapes[@]}"; do
  f="$dir/$s-q4_k_m.gguf"
  if [ ! -f "$f" ]; then
    say "writing $f"
    "$bin" synth --shape "$s" --type Q4_K_M -o "$f.tmp" >&2 && mv "$f.tmp" "$f"
  fi
  say "edgellm $s"
  "$bin" bench -m "$f" -p 512 -n 128 -t "$threads" -r "$reps" -o json 2>/dev/null > "$out/ours-$s.json" ||
    say "edgellm bench failed on $s"
  for repack in 0 1; do
    say "llama.cpp $s --repack $repack"
    "$llama" -m "$f" -p 512 -n 128 -t "$threads" -r "$reps" --repack "$repack" -o json 2>/dev/null \
      > "$out/llama$repack-$s.json" || say "llama-bench --repack $repack failed on $s"
  done
done
flock -u 9

python3 - "$out" "$dir" "$reps" "$threads" "${shapes[@]}" <<'EOF'
import os, sys
sys.path.insert(0, "scripts")
from benchlib import cell, ratio, rows
out, dir, reps, threads, shapes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
print("| model (Q4_K_M) | size | test | edgellm t/s | bandwidth share | llama.cpp t/s | × | llama.cpp repacking t/s | × |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
for s in shapes:
    ours = rows(f"{out}/ours-{s}.json")
    l0, l1 = rows(f"{out}/llama0-{s}.json"), rows(f"{out}/llama1-{s}.json")
    size = os.path.getsize(f"{dir}/{s}-q4_k_m.gguf") / 2**20
    for key in sorted(ours, key=lambda k: k[1][:2] != "pp"):
        o = ours[key]
        share = "%.0f %%" % (100 * o["bw_share"]) if o.get("bw_share") else ""
        print("| %s | %.0f MiB | %s | %s | %s | %s | %s | %s | %s |" % (
            s, size, key[1], cell(o), share, cell(l0.get(key)), ratio(o, l0.get(key)),
            cell(l1.get(key)), ratio(o, l1.get(key))))
print()
print("(%s threads; median of %s runs after a warm-up, ± the standard deviation)" % (
    threads, reps))
EOF
