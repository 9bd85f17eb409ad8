#!/usr/bin/env bash
# Set up (dependencies + Release build) and run every test. This is the README's test
# command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j1 "$@"
