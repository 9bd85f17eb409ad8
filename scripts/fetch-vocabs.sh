#!/usr/bin/env bash
# llama.cpp's vocabulary-only GGUFs and its tokenizer test cases for them
# (models/ggml-vocab-<name>.gguf, .gguf.inp, .gguf.out), taken from the llama-cpp-python
# source package on PyPI (pinned in scripts/llama-cpp-source.sh: the llama.cpp edgellm follows) into $EDGELLM_VOCABS
# (default ~/.cache/edgellm/vocab), never into the repository. tests/text/test_tokenizer.cpp
# checks every vocabulary there against llama.cpp's ids; without them those tests skip and
# say so. Idempotent: nothing is downloaded once the files of this version are in place.
#   scripts/fetch-vocabs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/llama-cpp-source.sh
VERSION=$LLAMA_CPP_PYTHON_VERSION
dest="${EDGELLM_VOCABS:-$HOME/.cache/edgellm/vocab}"
stamp="$dest/.llama-cpp-python-$VERSION"
if [ -f "$stamp" ]; then
  echo "fetch-vocabs: llama.cpp's vocabularies ($VERSION) already in $dest"
  exit 0
fi
# (the source package, fetched once from PyPI and checked; shared with the reference build)
src=$(llama_cpp_source "$LLAMA_CPP_SOURCE_DIR")
mkdir -p "$dest"
n=0
for f in "$src"/models/ggml-vocab-*; do
  cp -f "$f" "$dest/"
  n=$((n + 1))
done
if [ "$n" -eq 0 ]; then
  echo "fetch-vocabs: no models/ggml-vocab-* in $src" >&2
  exit 1
fi
touch "$stamp"
echo "fetch-vocabs: $n files in $dest"
