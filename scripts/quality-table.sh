#!/usr/bin/env bash
# docs/models.md's quality table: perplexity and KL divergence of each quant type that
# `edgellm quantize` makes from a real model, on the Debian-packaged Tom Sawyer text.
#   scripts/quality-table.sh MODEL.gguf [CHUNKS] [TYPES...]
# The packaged models are already Q4_K_M, so the reference is the same weights expanded to
# F16 (quantize --allow-requantize F16): its logits equal the packaged model's, and every
# other type is quantized from it. Work files go to ${EDGELLM_WORK:-$HOME/.cache/edgellm/work}.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: scripts/quality-table.sh MODEL.gguf [CHUNKS] [TYPES...]}"
chunks="${2:-8}"
shift $(( $# >= 2 ? 2 : 1 ))
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M Q2_K)
text=/usr/share/gocode/src/github.com/pierrec/lz4/testdata/Mark.Twain-Tom.Sawyer.txt
[ -f "$text" ] || { echo "quality-table: $text missing (apt-get install golang-github-pierrec-lz4-dev)" >&2; exit 1; }
bin=build/bin/edgellm
work="${EDGELLM_WORK:-$HOME/.cache/edgellm/work}"
mkdir -p "$work"
base="$(basename "$model" .gguf)"
ref="$work/$base-f16.gguf"
kl="$work/$base.kl"
[ -f "$ref" ] || "$bin" quantize "$model" "$ref" F16 --allow-requantize 2>/dev/null
"$bin" perplexity -m "$ref" -f "$text" -c 512 --chunks "$chunks" --kl-save "$kl" > "$work/$base-f16.ppl" 2>/dev/null
refppl=$(sed -n 's/^PPL = //p' "$work/$base-f16.ppl")
size_mib() { python3 -c "import os,sys; print('%.1f' % (os.path.getsize(sys.argv[1]) / 2**20))" "$1"; }
echo "| model | type | size MiB | PPL | PPL ratio | mean KLD | top-1 agreement |"
echo "|---|---|---:|---:|---:|---:|---:|"
echo "| $base | F16 (reference) | $(size_mib "$ref") | $refppl | 1 | 0 | 100 % |"
for t in "${types[@]}"; do
  q="$work/$base-$t.gguf"
  "$bin" quantize "$ref" "$q" "$t" 2>/dev/null
  out="$("$bin" perplexity -m "$q" -f "$text" -c 512 --kl-base "$kl" 2>/dev/null)"
  ppl=$(sed -n 's/^PPL = //p' <<<"$out")
  ratio=$(sed -n 's/^PPL ratio = //p' <<<"$out")
  kld=$(sed -n 's/^mean KLD = //p' <<<"$out")
  top1=$(sed -n 's/^top-1 agreement = //p' <<<"$out")
  echo "| $base | $t | $(size_mib "$q") | $ppl | $ratio | $kld | $top1 |"
  rm -f "$q"
done
