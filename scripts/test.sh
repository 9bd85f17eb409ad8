#!/usr/bin/env bash
# Set up (dependencies + Release build) and run every test. This is the README's test
# command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# the default model, Qwen2.5-Coder 0.5B (the tool-call tests) and Gemma 3 270M (small) for the gemma3 and protocol tests
SETUP_MODELS="${SETUP_MODELS:-qwen2.5-coder-1.5b qwen2.5-coder-0.5b gemma3-270m smollm2-135m}" scripts/setup.sh
# the client libraries' venv (tests/clients/, CTest client_libraries: ~5 min); without it,
# or with SETUP_SKIP_CLIENTS=1, that test is skipped and says so
if [ "${SETUP_SKIP_CLIENTS:-0}" != "1" ]; then
  scripts/setup-clients.sh || echo "test: WARNING: scripts/setup-clients.sh failed; client_libraries will skip"
fi
ctest --test-dir build --output-on-failure -j1 "$@"
