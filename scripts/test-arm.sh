#!/usr/bin/env bash
# The aarch64 kernels without an ARM board (DESIGN.md, "ARM without a board"): cross-build
# arm_kernel_check with Debian's g++-aarch64-linux-gnu (static) and run it under
# qemu-aarch64-static as three CPU models. Each run checks every kernel set that CPU has
# against the scalar reference, and that start-up selection chose the right set:
#   -cpu max          every extension         -> i8mm
#   -cpu cortex-a76   dotprod, no i8mm (Pi 5) -> dotprod
#   -cpu cortex-a53   ARMv8.0, no dotprod     -> neon
# Builds only the kernels and the check program (the project's other layers are not
# needed), with -j2 (JOBS=N to change).
#   scripts/test-arm.sh [BUILD_DIR]     default: build-arm
set -euo pipefail
cd "$(dirname "$0")/.."
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
  -DCMAKE_BUILD_TYPE=Release -DEDGELLM_BUILD_TESTS=OFF -DEDGELLM_ARM_TESTS=ON >/dev/null
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
