#!/usr/bin/env bash
# The llama.cpp reference, built outside the repository: llama.cpp as vendored in PyPI's
# llama-cpp-python source package (scripts/llama-cpp-source.sh pins it; the unpacked copy is
# shared with scripts/llama-server-suite.sh), CPU backend only (GGML_NATIVE, Release, no
# HTTPS, no downloads), with its tools and our scripts/reference/dump_logits.cpp compiled
# against its libllama. Everything goes to $REF_DIR (default ~/.cache/edgellm/llama.cpp-ref);
# each target builds under `flock /tmp/edgellm-build.lock` with -j2 (the machine's build
# lock; one target at a time, so no one holds it for the whole first build, 10-20 min on 2
# cores). Idempotent: a run that finds everything built builds nothing.
#
#   scripts/reference.sh                    builds what is missing, prints where the binaries are
#   scripts/reference.sh --bin NAME         builds NAME only if missing, prints its path alone
#   scripts/reference.sh --with-converter   also makes ~/.cache/edgellm/convert-venv
#                                           (CONVERT_VENV) for convert_hf_to_gguf.py
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

[ $converter = 1 ] || exit 0

# llama.cpp's convert_hf_to_gguf.py imports torch at module level (it converts through torch
# tensors even for safetensors), pinned as in the source's requirements-convert_hf_to_gguf.txt.
# PyPI's torch for Linux x86_64 is CUDA-linked: it installs with --no-deps and imports on a
# machine without a GPU once every library it links is found. This machine kind's CUDA
# toolkit (/usr/local/cuda-13.0) has most; the few it lacks come from their small nvidia-*
# wheels; elsewhere torch's full dependencies (~3 GB of CUDA wheels) are installed instead.
venv="${CONVERT_VENV:-$HOME/.cache/edgellm/convert-venv}"
torch_version=2.11.0
gguf_version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$src/gguf-py/pyproject.toml")
check="import importlib.metadata as m, torch, transformers, safetensors, sentencepiece, numpy, gguf
assert m.version('torch').split('+')[0] == '$torch_version', 'torch'
assert m.version('transformers') == '4.57.6', 'transformers'
assert m.version('gguf') == '$gguf_version', 'gguf'"
if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
  say "making $venv (torch $torch_version from PyPI, ~2 GB)"
  python3 -m venv "$venv"
  pip=("$venv/bin/pip" install -q --disable-pip-version-check)
  "${pip[@]}" --no-deps "torch==$torch_version"
  "${pip[@]}" filelock 'typing-extensions>=4.10.0' 'setuptools<82' 'sympy>=1.13.3' 'networkx>=2.5.1' \
    jinja2 'fsspec>=0.8.5'
  # the libraries torch links that the machine lacks, and the wheels that carry them
  missing=$(cd "$venv"/lib/python3*/site-packages/torch/lib &&
            ldd ./*.so 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) => not found$/\1/p' | sort -u)
  wheels=()
  for lib in $missing; do
    case "$lib" in
      libcufile.so.*) wheels+=('nvidia-cufile==1.15.1.6.*') ;;
      libcusparseLt.so.*) wheels+=('nvidia-cusparselt-cu13==0.8.0') ;;
      libnvshmem_host.so.*) wheels+=('nvidia-nvshmem-cu13==3.4.5') ;;
      libcuda.so.*) ;;  # the driver: only libcaffe2_nvrtc needs it, loaded on a GPU alone
      *) wheels=(all); break ;;
    esac
  done
  if [ "${wheels[*]:-}" = all ]; then
    say "this machine has no CUDA $torch_version libraries: installing torch's own (~3 GB)"
    "${pip[@]}" "torch==$torch_version"
  elif [ ${#wheels[@]} -gt 0 ]; then
    "${pip[@]}" --no-deps "${wheels[@]}"
  fi
  "${pip[@]}" 'numpy~=2.2.6' 'sentencepiece>=0.1.98,<0.3.0' 'transformers==4.57.6' \
    'protobuf>=4.21.0,<5.0.0' safetensors "$src/gguf-py"
  "$venv/bin/python" -c "$check" || { say "the converter's venv does not import"; exit 1; }
  say "(pip's complaints above about torch's CUDA packages are expected: it runs on the CPU)"
fi
say "converter: $venv/bin/python $src/convert_hf_to_gguf.py HF_DIR --outtype f16 --outfile OUT.gguf"
