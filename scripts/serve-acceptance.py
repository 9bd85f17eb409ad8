#!/usr/bin/env python3
"""Seed 000's acceptance table, measured through the HTTP API of a running server.

Starts the server with the given command line (edgellm serve or llama-server: the same
flags), then measures what the seed's table asks for:
  - start-up to serving: from the process start until GET /health says ok;
  - first-token latency of the first real request after the warm-up request;
  - first-token latency of later turns of one conversation (prefix reuse);
  - decode speed (the server's own timings, predicted_per_second);
  - resident memory of the process after the turns.
First-token latency is measured at the client: from sending the request until the first
SSE chunk that carries text. Prints one table row per figure.

  scripts/serve-acceptance.py [--turns N] -- COMMAND...
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import port_of, wait_health  # noqa: E402

CONVERSATION = [
    "今晚吃什么好",
    "有没有清淡一点的？",
    "那做法简单吗？告诉我步骤。",
    "需要准备哪些调料？",
    "大概要多长时间？",
]
SYSTEM = "你是车载助手，回答简短口语化。"


def chat(port, messages, max_tokens=128):
    """One streaming chat turn: (reply, first-token seconds, timings)."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0.7, "top_p": 0.8})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    reply = ""
    timings = {}
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            data = event[6:]
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if "timings" in j:
                timings = j["timings"]
            for ch in j.get("choices", []):
                text = (ch.get("delta") or {}).get("content")
                if text:
                    if first is None:
                        first = time.monotonic() - t0
                    reply += text
    return reply, first, timings


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        sys.exit("give the server's command line after --")
    port = port_of(cmd)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_health(port, proc)
        startup = time.monotonic() - t0
        # The seed's warm-up request.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/chat/completions",
                  json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
                  {"Content-Type": "application/json"})
        c.getresponse().read()
        messages = [{"role": "system", "content": SYSTEM}]
        rows = []
        for turn in range(a.turns):
            messages.append({"role": "user", "content": CONVERSATION[turn % len(CONVERSATION)]})
            reply, first, t = chat(port, messages)
            messages.append({"role": "assistant", "content": reply})
            rows.append((turn + 1, first, t.get("prompt_n"), t.get("cache_n"),
                         t.get("predicted_n"), t.get("predicted_per_second")))
        rss = rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"start-up to /health ok: {startup:.2f} s")
    print("| turn | first token (client) | prompt evaluated | prompt cached | generated | decode t/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for turn, first, pn, cn, gn, tps in rows:
        ft = f"{first * 1000:.0f} ms" if first is not None else "-"
        print(f"| {turn} | {ft} | {pn} | {cn} | {gn} | {tps:.1f} |" if tps else
              f"| {turn} | {ft} | {pn} | {cn} | {gn} | - |")
    print(f"resident memory after the turns: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
