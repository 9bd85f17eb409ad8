#!/usr/bin/env bash
# The README's bench table: synthetic Qwen2.5-0.5B and 1.5B Q4_K_M files (edgellm synth,
# the published files' shapes and sizes), `edgellm bench -p 512 -n 128 -t 1,2`.
#   scripts/bench-table.sh [REPETITIONS]
# Run it on an otherwise idle machine: the numbers are only as quiet as the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-5}"
dir="${EDGELLM_WORK:-$HOME/.cache/edgellm/work}"
mkdir -p "$dir"
for shape in qwen2.5-0.5b qwen2.5-1.5b; do
  f="$dir/synth-$shape-q4_k_m.gguf"
  [ -f "$f" ] || build/bin/edgellm synth --arch qwen2 --shape "$shape" --type Q4_K_M -o "$f" 2>/dev/null
  build/bin/edgellm bench -m "$f" -p 512 -n 128 -t 1,2 -r "$reps" 2>/dev/null
  echo
done
