#!/bin/sh
# Seed 000's warm-up, run after the server is ready (ExecStartPost, or the Android start
# script): one 1-token request through the whole path, so the first real question finds
# every page and code path warm. PORT and LOG may be set in the environment.
PORT="${PORT:-8899}"
LOG="${LOG:-/var/log/edgellm/warmup.log}"
until curl -s "http://127.0.0.1:${PORT}/health" | grep -q ok; do sleep 1; done
curl -s "http://127.0.0.1:${PORT}/v1/chat/completions" \
  -H "Content-Type: application/json" \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}' > /dev/null
echo "$(date) warmup done" >> "$LOG" 2>/dev/null || true
