#!/usr/bin/env bash
# The llama.cpp reference, built outside the repository: llama.cpp as vendored in PyPI's
# llama-cpp-python source package (scripts/llama-cpp-source.sh pins it; the unpacked copy is
# shared with scripts/llama-server-suite.sh), CPU backend only (GGML_NATIVE, Release, no
# HTTPS, no downloads), with its tools and our scripts/reference/dump_logits.cpp compiled
# against its libllama. Everything goes to $REF_DIR (default ~/.cache/edgellm/llama.cpp-ref);
# each target builds under `flock /tmp/edgellm-build.lock` with -j2 (the machine's build
# lock; one target at a time, so no one holds it for the whole first build, ~15-20 min on 2
# cores). Idempotent: a run that finds everything built builds nothing.
#
#   scripts/reference.sh                    builds what is missing, prints where the binaries are
#   scripts/reference.sh --bin NAME         builds NAME only if missing, prints its path alone
#   scripts/reference.sh --with-converter   also makes $REF_DIR/../convert-venv for
#                                           llama.cpp's convert_hf_to_gguf.py (CPU torch)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
REF_DIR="${REF_DIR:-$HOME/.cache/edgellm/llama.cpp-ref}"
build="$REF_DIR/build"
lock=/tmp/edgellm-build.lock
say() { echo "reference: $*" >&2; }

targets=(llama-bench llama-quantize llama-perplexity llama-tokenize llama-server llama-cli
         llama-completion dump_logits)
only="" converter=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) only="${2:?--bin needs a name}"; shift 2 ;;
    --with-converter) converter=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) say "unknown argument '$1' (--bin NAME, --with-converter)"; exit 2 ;;
  esac
done
if [ -n "$only" ]; then
  case " ${targets[*]} " in
    *" $only "*) targets=("$only") ;;
    *) say "--bin: one of ${targets[*]}"; exit 2 ;;
  esac
fi

. scripts/llama-cpp-source.sh
src=$(llama_cpp_source "$LLAMA_CPP_SOURCE_DIR")
dump_src="$root/scripts/reference/dump_logits.cpp"

# what is missing (dump_logits also when its source changed)
missing=()
for t in "${targets[@]}"; do
  if [ ! -x "$build/bin/$t" ] || { [ "$t" = dump_logits ] && [ "$dump_src" -nt "$build/bin/$t" ]; }; then
    missing+=("$t")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ ! -f "$build/build.ninja" ]; then
    say "configuring $src into $build"
    flock "$lock" cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  fi
  for t in "${missing[@]}"; do
    if [ "$t" = dump_logits ]; then
      flock "$lock" cmake --build "$build" -j2 --target llama >&2
      say "compiling dump_logits"
      flock "$lock" g++ -std=c++20 -O2 -Wall -Wextra -Werror -I"$src/include" -I"$src/ggml/include" \
        "$dump_src" -o "$build/bin/dump_logits" -L"$build/bin" -lllama -lggml -lggml-base \
        -Wl,-rpath,"$build/bin"
    else
      say "building $t (-j2 under $lock)"
      flock "$lock" cmake --build "$build" -j2 --target "$t" >&2
    fi
  done
fi

if [ -n "$only" ]; then
  echo "$build/bin/$only"
else
  say "llama.cpp of llama-cpp-python $LLAMA_CPP_PYTHON_VERSION, binaries in $build/bin:"
  for t in "${targets[@]}"; do echo "$build/bin/$t"; done
fi

[ $converter = 1 ] && exec scripts/reference-converter.sh
exit 0
