#!/usr/bin/env python3
"""Speculative decoding through the HTTP API: decode speed and accept rate per prompt class.

Starts a server with the given command line (edgellm serve or llama-server, the same
flags), waits for GET /health, then sends each prompt class (chat in Chinese and English as
seed 000's car assistant gets them, a code edit, JSON, quoting a given text) --runs times
after one warm-up, greedy unless --seed-sampling, and reads the server's own timings
(predicted_per_second, draft_n, draft_n_accepted). Prints one line per class:

  label  class  tokens/s  tokens  accept rate  [plain tokens/s  speed-up]

  scripts/spec-bench.py [--runs N] [--max-tokens N] [--label NAME] [--paired] -- COMMAND...

With --paired (a server started with speculative decoding), each run sends the request
twice, first with "speculative.n_max": 0 (plain decoding, the same process) and then as
is, and the speed-up is the median of the pairs' ratios: on a machine whose speed drifts
between runs (a shared VM), only pairs taken seconds apart compare.
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import port_of, post, wait_health  # noqa: E402

CLASSES = [
    ("chat (zh)", "你是车载助手，回答简短口语化。", "今晚吃什么好？给我推荐三个菜，说说理由。"),
    ("chat (en)", "You are a helpful in-car assistant. Answer briefly.",
     "What should I cook tonight? Give me three quick ideas and why."),
    ("code edit", "You are a coding assistant.",
     "Rename the variable `total` to `acc` in this function and return the whole function, "
     "nothing else:\n```python\ndef summarize(orders):\n    total = 0\n    count = 0\n"
     "    for order in orders:\n        if order.status != \"paid\":\n            continue\n"
     "        total += order.amount\n        count += 1\n    if count == 0:\n"
     "        return {\"total\": 0, \"average\": 0}\n"
     "    return {\"total\": total, \"average\": total / count}\n```"),
    ("json", "You convert text to JSON.",
     "Turn this into a JSON array of objects with keys name, city and age, nothing else:\n"
     "Alice Zhang lives in Shanghai and is 34. Bob Li lives in Shenzhen and is 28. "
     "Carol Wang lives in Chengdu and is 41. David Chen lives in Hangzhou and is 25."),
    ("quote", "You answer from the given text.",
     "Repeat the following paragraph word for word, then stop:\n"
     "The navigation system recalculates the route whenever traffic conditions change. "
     "Drivers can choose between the fastest route, the shortest route, and a route that "
     "avoids toll roads. Voice guidance announces each turn two hundred meters in advance."),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--label", default="")
    ap.add_argument("--paired", action="store_true",
                    help="also plain decoding (speculative.n_max 0) in the same server, paired")
    ap.add_argument("--seed-sampling", action="store_true",
                    help="the server's sampling flags (seed 000: temp 0.7) instead of greedy")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("give the server's command line after --")
    port = port_of(cmd)
    log = open(f"/tmp/spec-bench-{port}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_health(port, proc)
        post(port, "/v1/chat/completions",
             {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        for name, system, user in CLASSES:
            body = {"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": user}],
                    "max_tokens": a.max_tokens}
            if not a.seed_sampling:
                body["temperature"] = 0
            speeds, plain, ratios, tokens, drafted, accepted = [], [], [], [], 0, 0
            for run in range(a.runs + 1):
                if a.paired:
                    jp = post(port, "/v1/chat/completions", dict(body, **{"speculative.n_max": 0}))
                    tp = jp.get("timings", {}).get("predicted_per_second", 0.0)
                j = post(port, "/v1/chat/completions", body)
                t = j.get("timings", {})
                if run == 0:
                    continue  # warm-up (the controller and caches learn this class)
                speeds.append(t.get("predicted_per_second", 0.0))
                tokens.append(t.get("predicted_n", 0))
                drafted += t.get("draft_n", 0)
                accepted += t.get("draft_n_accepted", 0)
                if a.paired:
                    plain.append(tp)
                    if tp > 0:
                        ratios.append(speeds[-1] / tp)
            rate = f"{accepted / drafted:.2f}" if drafted else "-"
            line = f"{a.label}\t{name}\t{statistics.median(speeds):.2f}\t{statistics.median(tokens)}\t{rate}"
            if a.paired:
                line += f"\t{statistics.median(plain):.2f}\t{statistics.median(ratios):.2f}x"
            print(line, flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
