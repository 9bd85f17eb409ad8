#!/system/bin/sh
# Seed 000's start script for an Android head unit (SA8295), run by init (edgellm.rc):
# the server on the big cores (taskset, and edgellm's own --cpus), in the foreground so
# init restarts it when it dies, then the warm-up in the background once it is healthy.
# Paths as the seed lays them out; override with the environment.
AI="${AI:-/data/ai}"
MODEL="${MODEL:-$AI/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}"
DRAFT="${DRAFT:-$AI/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}"
CPUS="${CPUS:-0-3}"
mkdir -p "$AI/logs" "$AI/cache"
draft_flags=""
if [ -f "$DRAFT" ]; then
  draft_flags="-md $DRAFT --draft-max 4 --draft-min 2 --draft-p-min 0.6 -ngld 99"
fi
PORT=8899 LOG="$AI/logs/warmup.log" "$AI/warmup.sh" &
# shellcheck disable=SC2086  # draft_flags is a list of flags
exec taskset -c "$CPUS" "$AI/edgellm" serve \
  -m "$MODEL" $draft_flags \
  --host 127.0.0.1 --port 8899 --parallel 1 --no-cont-batching \
  --threads 4 --threads-batch 4 --cpus "$CPUS" \
  --ctx-size 1024 --flash-attn on --cache-type-k q8_0 --cache-type-v q8_0 --mlock \
  --temp 0.7 --top-p 0.8 --repeat-penalty 1.05 -n 256 \
  --prompt-cache "$AI/cache" --memory-limit 1900M \
  --log-file "$AI/logs/llm_server.log" --pid-file "$AI/llm_server.pid"
