#!/usr/bin/env python3
"""Start-up and the cold first turn, measured through the HTTP API, for any server command
line (edgellm serve, llama-server, ik_llama.cpp's llama-server: the same flags).

Each round starts the server, times it from the process start until GET /health says ok,
sends the seed's warm-up request (one token), then the cold turn: a system prompt of about
300 tokens plus 12 user tokens, as token ids through /completion (so every server
evaluates the same tokens), one token generated; the first token's time is the request's
time at the client. The medians of the rounds are printed.

  scripts/cold-turn-bench.py [--rounds N] [--vocab V] -- COMMAND...
"""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import port_of, wait_health  # noqa: E402


def complete(port, body):
    """POST /completion; the status and the JSON answer. (A server may fail to encode a
    generated token of a random-weight model as UTF-8 after computing it - ik_llama.cpp
    answers 500 then: the time still counts, the reason is printed.)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=151936, help="token ids are drawn below this")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        sys.exit("give the server's command line after --")
    port = port_of(cmd)
    starts, firsts, evaluated = [], [], []
    for rnd in range(a.rounds):
        rng = random.Random(rnd)
        # ids from the middle of the vocabulary: ordinary tokens, no control tokens
        prompt = [rng.randrange(1000, min(a.vocab, 100000)) for _ in range(312)]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_health(port, proc)
            starts.append(time.monotonic() - t0)
            complete(port, {"prompt": [1000, 1001], "n_predict": 1})
            t1 = time.monotonic()
            status, r = complete(port, {"prompt": prompt, "n_predict": 1, "cache_prompt": True})
            firsts.append(time.monotonic() - t1)
            evaluated.append(r.get("timings", {}).get("prompt_n")
                             if status == 200 else f"status {status}: {str(r)[:120]}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print(f"round {rnd + 1}: healthy {starts[-1]:.2f} s, cold turn {firsts[-1]:.3f} s "
              f"({evaluated[-1]} prompt tokens evaluated)", file=sys.stderr)
    print(f"start-up to healthy: median {statistics.median(starts):.2f} s "
          f"(min {min(starts):.2f}, max {max(starts):.2f})")
    print(f"first token of the cold 312-token turn: median {statistics.median(firsts):.3f} s "
          f"(min {min(firsts):.3f}, max {max(firsts):.3f})")


if __name__ == "__main__":
    main()
