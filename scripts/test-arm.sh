#!/usr/bin/env bash
# edgellm on aarch64 without an ARM board (DESIGN.md, "ARM without a board"), with Debian's
# g++-aarch64-linux-gnu (static binaries) and qemu-aarch64-static:
#  1. arm_kernel_check as three CPU models: every kernel set the CPU has against the scalar
#     reference, and start-up selection choosing the right set:
#       -cpu max          every extension         -> i8mm
#       -cpu cortex-a76   dotprod, no i8mm (Pi 5) -> dotprod
#       -cpu cortex-a53   ARMv8.0, no dotprod     -> neon
#  2. the static release binary, started as `serve` under -cpu cortex-a76, answering a request;
#  3. the test suite, cross-built and run by CTest under qemu -cpu cortex-a76: the light set
#     (the cases in tests/qemu-slow.txt left out, real models not offered so their cases skip)
#     or, with --full, every case with the fetched models too. Timings under qemu mean nothing.
# Steps 2 and 3 need the target's PCRE2 (libpcre2-dev:arm64, scripts/setup.sh installs it);
# without it they are skipped with a message.
#   scripts/test-arm.sh [--full] [BUILD_DIR]     default: build-arm; -j2 (JOBS=N to change)
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi
build="${1:-build-arm}"
jobs="${JOBS:-2}"

for tool in aarch64-linux-gnu-g++ qemu-aarch64-static; do
  if ! command -v "$tool" >/dev/null; then
    echo "test-arm: $tool not found (scripts/setup.sh installs it)" >&2
    exit 1
  fi
done

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DEDGELLM_BUILD_TESTS=ON -DEDGELLM_ARM_TESTS=ON -DEDGELLM_STATIC=ON \
  -DEDGELLM_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target arm_kernel_check
echo "test-arm: cross build took $(($(date +%s) - start)) s"

failed=()
for run in max:i8mm cortex-a76:dotprod cortex-a53:neon; do
  cpu="${run%%:*}" want="${run#*:}"
  echo "== qemu-aarch64-static -cpu $cpu (expect $want)"
  if ! qemu-aarch64-static -cpu "$cpu" "$build/bin/arm_kernel_check" --expect "$want"; then
    failed+=("$cpu")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test-arm: FAILED under -cpu ${failed[*]}" >&2
  exit 1
fi
echo "test-arm: all three CPU models passed"

# The static aarch64 release: the whole binary (it needs the target's PCRE2, Debian's
# libpcre2-dev:arm64, which scripts/setup.sh installs), started under qemu as a Pi 5's CPU
# and answering a request with the tiny golden model. (Timings under qemu mean nothing.)
if ! grep -q "edgellm_cli" "$build/build.ninja" 2>/dev/null; then
  echo "test-arm: SKIPPED the aarch64 release: no aarch64 libpcre2-8 (libpcre2-dev:arm64;" \
       "scripts/setup.sh installs it where the mirror has arm64)" >&2
  exit 0
fi
cmake --build "$build" -j"$jobs" --target edgellm_cli
file "$build/bin/edgellm" | grep -q "ARM aarch64.*statically linked" ||
  { echo "test-arm: $build/bin/edgellm is not a static aarch64 binary" >&2; exit 1; }
model="${EDGELLM_SHARED_DIR:-$(pwd)/../shared}/reference/golden/tiny-qwen2-q8_0.gguf"
if [ ! -f "$model" ]; then
  echo "test-arm: no golden tiny model at $model: serve under qemu not run" >&2
  exit 0
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
qemu-aarch64-static -cpu cortex-a76 "$build/bin/edgellm" serve -m "$model" --port "$port" -c 256 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 300); do
  curl -s "http://127.0.0.1:$port/health" | grep -q ok && break
  sleep 0.2
done
out=$(curl -s "http://127.0.0.1:$port/completion" -d '{"prompt": "hello", "n_predict": 4}')
if ! grep -q '"tokens_predicted":4' <<<"$out"; then
  echo "test-arm: serve under qemu did not answer: $out" >&2
  cat "$log" >&2
  exit 1
fi
kill -TERM $pid
wait $pid || { echo "test-arm: serve under qemu did not stop cleanly" >&2; exit 1; }
trap - EXIT
rm -f "$log"
echo "test-arm: the static aarch64 binary served a request under qemu -cpu cortex-a76"

# The test suite under qemu.
start=$(date +%s)
cmake --build "$build" -j"$jobs"
echo "test-arm: cross build of the test suite took $(($(date +%s) - start)) s"
start=$(date +%s)
if [ $full = 1 ]; then
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 1800
else
  slow=$(grep -v '^#' tests/qemu-slow.txt | sed '/^$/d; s/.*/^&$/' | paste -sd'|')
  nomodels=$(mktemp -d)
  EDGELLM_MODELS="$nomodels" ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900 -E "$slow"
  rmdir "$nomodels"
fi
echo "test-arm: the aarch64 test suite passed under qemu -cpu cortex-a76 ($(($(date +%s) - start)) s;" \
     "$([ $full = 1 ] && echo "every case" || echo "light set: tests/qemu-slow.txt and real-model cases left out"))"
