#!/usr/bin/env python3
"""The prompt cache's goals, measured through the HTTP API (issue: first token after a
restart).

In seed 000's configuration (the 1.5B, 2 threads, q8_0 KV, -c 1024) with a system prompt
of about 300 tokens, each round, back to back:

  plain    start without --prompt-cache: time to a healthy /health; a first turn; then a
           second turn (the warm reference: its prefix is in the slot)
  cached   start with --prompt-cache DIR, a first turn, stop; start again (the restart):
           time to healthy, then the second turn as the first request after the restart

and prints the medians: restart first token / warm second turn first token (goal <= 1.5)
and start-up with the cache / without (goal <= 1.2). With --drop-caches the page cache is
dropped before each start (a reboot: the model file comes from the disk; needs root).

Then an agent on one slot alternating between three system prompts (three rounds): the
prompt tokens each request evaluated, and how many requests paid a full prefill (goal:
one per system prompt).

  scripts/restart-bench.py [--rounds N] [--drop-caches] [--bin build/bin/edgellm] [--model M]
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import post, wait_health  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SYSTEM = ("你是一个车载语音助手，运行在车机本地。请遵守以下规则：" + "".join(
    f"规则{i}：回答要简短、口语化，不超过两句话；涉及驾驶安全时先提醒注意安全；"
    f"不知道的事情直接说不知道，不要编造。" for i in range(1, 9)) +
    " You may also answer in English when the driver speaks English.")
TURN1 = "帮我把空调调到二十二度。"
TURN2 = "再打开座椅加热。"


def default_model():
    r = subprocess.run([os.path.join(ROOT, "scripts", "fetch-models.sh"), "--print-path",
                        "qwen2.5-coder-1.5b"], capture_output=True, text=True)
    return r.stdout.strip()


def drop_caches():
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class Serve:
    """edgellm serve in seed 000's configuration with 2 threads (plus `extra` flags)."""

    def __init__(self, args, port, drop):
        if drop:
            drop_caches()
        self.port = port
        t0 = time.monotonic()
        self.proc = subprocess.Popen([args.bin, "serve", "-m", args.model, "--port", str(port),
                                      "-t", "2", "-c", "1024", "-ctk", "q8_0", "-ctv", "q8_0",
                                      "-n", "256", "--temp", "0", *self.extra],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        wait_health(port, self.proc)
        self.startup_ms = (time.monotonic() - t0) * 1000

    def stop(self):
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=60)
        return err


def serve(args, port, drop, extra=()):
    s = Serve.__new__(Serve)
    s.extra = list(extra)
    Serve.__init__(s, args, port, drop)
    return s


def ttft(port, messages, max_tokens=16):
    """Streams a chat; the client-side time to the first content token (ms) and the reply."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first, text, cache_n = None, "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        j = json.loads(line[5:])
        if j.get("choices") and j["choices"][0]["delta"].get("content"):
            if first is None:
                first = (time.monotonic() - t0) * 1000
            text += j["choices"][0]["delta"]["content"]
        if "timings" in j:
            cache_n = j["timings"].get("cache_n")
    c.close()
    return first, text, cache_n


def conversation(port):
    m1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURN1}]
    t1, a1, _ = ttft(port, m1)
    m2 = m1 + [{"role": "assistant", "content": a1}, {"role": "user", "content": TURN2}]
    return t1, m2


def agent(args, port):
    s = serve(args, port, False, ["-np", "1"])
    topics = ["导航", "音乐", "空调"]
    rows = []
    for rnd in range(3):
        for t in topics:
            sysmsg = f"你是{t}助手。" + SYSTEM
            j = post(port, "/v1/chat/completions",
                     {"messages": [{"role": "system", "content": sysmsg},
                                   {"role": "user", "content": f"第{rnd + 1}个关于{t}的问题？"}],
                      "max_tokens": 8, "temperature": 0})
            n, cached = j["usage"]["prompt_tokens"], j["timings"]["cache_n"]
            rows.append((t, n, n - cached))
    s.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "edgellm"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=8097)
    ap.add_argument("--drop-caches", action="store_true")
    args = ap.parse_args()
    args.model = args.model or default_model()
    if not os.path.isfile(args.model):
        sys.exit(f"no model at {args.model!r} (scripts/fetch-models.sh qwen2.5-coder-1.5b)")
    n_sys = None
    warm, restart, up_plain, up_cached = [], [], [], []
    for rnd in range(args.rounds):
        d = tempfile.mkdtemp(prefix="edgellm-restart-")
        try:
            # The cache's first life: a first turn, written to DIR.
            s1 = serve(args, args.port, False, ["--prompt-cache", d])
            _, m2 = conversation(args.port)
            s1.stop()
            # Without the cache (both measured starts follow a stop, and a dropped page cache).
            s = serve(args, args.port, args.drop_caches)
            if n_sys is None:
                n_sys = len(post(args.port, "/tokenize", {"content": SYSTEM})["tokens"])
            t_first, m2_plain = conversation(args.port)
            t_warm, _, c_warm = ttft(args.port, m2_plain)
            s.stop()
            # The restart with the cache: the second turn is its first request.
            s2 = serve(args, args.port, args.drop_caches, ["--prompt-cache", d])
            t_restart, _, c_restart = ttft(args.port, m2)
            s2.stop()
        finally:
            shutil.rmtree(d, ignore_errors=True)
        warm.append(t_warm)
        restart.append(t_restart)
        up_plain.append(s.startup_ms)
        up_cached.append(s2.startup_ms)
        print(f"round {rnd + 1}: start-up {s.startup_ms:.0f} ms, first turn {t_first:.0f} ms, "
              f"warm second turn {t_warm:.0f} ms (cache_n {c_warm}) | with --prompt-cache: "
              f"start-up {s2.startup_ms:.0f} ms, second turn after the restart {t_restart:.0f} ms "
              f"(cache_n {c_restart})", flush=True)
    med = statistics.median
    print(f"system prompt: {n_sys} tokens; page cache {'dropped before each start' if args.drop_caches else 'warm'}")
    print(f"first token after a restart / warm second turn: {med(restart):.0f} / {med(warm):.0f} ms "
          f"= {med(restart) / med(warm):.2f} (goal <= 1.5)")
    print(f"start-up to healthy with / without the cache: {med(up_cached):.0f} / {med(up_plain):.0f} ms "
          f"= {med(up_cached) / med(up_plain):.2f} (goal <= 1.2)")
    rows = agent(args, args.port)
    full = sum(1 for _, n, ev in rows if ev > n // 2)
    print("agent, three system prompts alternating on one slot: prompt tokens evaluated per "
          "request: " + ", ".join(f"{t} {ev}/{n}" for t, n, ev in rows))
    print(f"full prefills: {full} (goal: 3, one per system prompt)")


if __name__ == "__main__":
    main()
