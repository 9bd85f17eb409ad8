#!/usr/bin/env python3
"""Validity suite for grammar-constrained output: tool calls and response_format JSON.

Runs the cases in tests/validity/ against an edgellm server (or any OpenAI-compatible
chat server) and measures how often the replies are well-formed:

  tool cases (tests/validity/tool_cases.json): in-car assistant requests with 1-6 tools.
    Per reply: a tool call was made (choices[0].message.tool_calls), its
    function.arguments is a JSON string that parses to an object, the object validates
    against that tool's `parameters` schema, the right tool was chosen (or no call when
    the case's expected_tool is null), and the case's expected_args (a subset of argument
    values) match.
  schema cases (tests/validity/schemas.json): requests for structured JSON output.
    Per reply: the content parses as JSON and validates against the case's schema.

Each case is run twice:
  constrained    tools: "tools" + "tool_choice": "auto";
                 schemas: "response_format": {"type": "json_schema", "json_schema":
                 {"name": id, "schema": schema, "strict": true}}.
  unconstrained  tools: the same request plus edgellm's extension field
                 "constrain": false (no grammar; tool calls still parsed from the text);
                 schemas: no response_format, the schema appended to the system prompt
                 as text ("Reply with JSON only, matching this JSON schema: ...").
Sampling: temperature 0, max_tokens 256, seed 1, not streamed. Every request also sends
"cache_prompt": false (llama.cpp's field, which edgellm reads), so each run evaluates its
whole prompt and the latencies of the two modes compare (otherwise the unconstrained run
of a tool case would reuse the constrained run's prompt from the cache); --cache-prompt
allows the reuse for a faster run.

Validation uses jsonschema's Draft202012Validator with its FormatChecker (formats are
asserted, not just annotations). jsonschema checks "date", "email" and "uuid" itself;
"date-time" and "time" need the optional package rfc3339-validator: when it is missing
this script checks them with its own RFC 3339 check and says so; a format used by the
cases that nothing can check is reported as unchecked, never silently passed.

Needs: Python 3.11, the standard library, and jsonschema:
    build/venv/bin/pip install jsonschema          (optionally also rfc3339-validator)

Usage:
    build/venv/bin/python scripts/validity.py --url http://127.0.0.1:8080
    build/venv/bin/python scripts/validity.py --server build/bin/edgellm \
        --model ~/.cache/edgellm/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --threads 2
  options: --cases N (first N of each file), --only tools|schemas,
           --mode both|constrained|unconstrained, --out report.json, --no-fail.

What the percentages count: for tool cases, parse % and valid % are over the replies that
made or tried to make a call (text that holds a call the server did not turn into
tool_calls, e.g. a malformed <tool_call> block, is a parse failure) plus failed requests;
right tool % is over all cases (a reply without a call is right when expected_tool is
null); args match % is over the cases with expected_args (a wrong tool is a mismatch).
For schema cases, parse % and valid % are over all cases; the output also says how many
replies would parse once code fences or text around the JSON are allowed.

Prints a markdown table (one row per model x kind x constrained) and writes every run's
outcome to the JSON report (--out). Exit status: 0 when every constrained row has 100 %
parse and 100 % valid, else 1 (always 0 with --no-fail); 2 for bad arguments or a server
that does not start. A request that fails (HTTP error, timeout, malformed answer) counts
as a failure of every measure, and its error body is kept in the report.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

try:
    import jsonschema
    from jsonschema import Draft202012Validator, FormatChecker
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit("validity.py needs the jsonschema package: build/venv/bin/pip install jsonschema")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TOOL_CASES = REPO / "tests" / "validity" / "tool_cases.json"
DEFAULT_SCHEMA_CASES = REPO / "tests" / "validity" / "schemas.json"

SAMPLING = {"temperature": 0, "max_tokens": 256, "seed": 1, "stream": False}
SCHEMA_PROMPT = "Reply with JSON only, matching this JSON schema: "


# --------------------------------------------------------------------------------------
# Format checking
# --------------------------------------------------------------------------------------

# RFC 3339 (section 5.6) full-date "T" full-time, and full-time alone (JSON Schema's
# "date-time" and "time"). Only used when jsonschema cannot check them itself.
_RFC3339_TIME = r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))"
_RFC3339_DATETIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt]" + _RFC3339_TIME + r"$")
_RFC3339_TIME_RE = re.compile(r"^" + _RFC3339_TIME + r"$")


def _time_fields_ok(h, m, s, oh, om) -> bool:
    ok = int(h) < 24 and int(m) < 60 and int(s) <= 60  # 60: a leap second
    if oh is not None:
        ok = ok and int(oh) < 24 and int(om) < 60
    return ok


def _fallback_datetime(value) -> bool:
    if not isinstance(value, str):
        return True  # formats apply to strings only
    mt = _RFC3339_DATETIME_RE.match(value)
    if not mt:
        return False
    y, mo, d, h, mi, s, _frac, _off, oh, om = mt.groups()
    try:
        dt.date(int(y), int(mo), int(d))
    except ValueError:
        return False
    return _time_fields_ok(h, mi, s, oh, om)


def _fallback_time(value) -> bool:
    if not isinstance(value, str):
        return True
    mt = _RFC3339_TIME_RE.match(value)
    if not mt:
        return False
    h, mi, s, _frac, _off, oh, om = mt.groups()
    return _time_fields_ok(h, mi, s, oh, om)


FALLBACKS = {"date-time": _fallback_datetime, "time": _fallback_time}


def formats_used(node, acc: set[str]) -> set[str]:
    """Every "format" keyword value in a schema (walks all nested dicts and lists)."""
    if isinstance(node, dict):
        f = node.get("format")
        if isinstance(f, str):
            acc.add(f)
        for v in node.values():
            formats_used(v, acc)
    elif isinstance(node, list):
        for v in node:
            formats_used(v, acc)
    return acc


def make_format_checker(used: set[str]) -> tuple[FormatChecker, dict]:
    """Draft 2020-12's format checker, plus this script's fallbacks for missing formats.

    Returns the checker and a description of what is checked how (for the output)."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    info = {"jsonschema": sorted(f for f in used if f in checker.checkers), "fallback": [], "unchecked": [],
            "notes": []}
    for f in sorted(used):
        if f in checker.checkers:
            continue
        if f in FALLBACKS:
            checker.checks(f)(FALLBACKS[f])
            info["fallback"].append(f)
        else:
            info["unchecked"].append(f)
    if info["fallback"]:
        info["notes"].append(
            "format %s: jsonschema cannot check it without the optional package rfc3339-validator "
            "(not installed); checked by this script's RFC 3339 check instead"
            % ", ".join(repr(f) for f in info["fallback"]))
    if info["unchecked"]:
        info["notes"].append(
            "format %s: NOT CHECKED (jsonschema needs an optional package for it); such values pass "
            "unchecked" % ", ".join(repr(f) for f in info["unchecked"]))
    if "email" in used:
        info["notes"].append("format 'email': jsonschema only checks that the value contains '@'")
    return checker, info


def validation_errors(schema, instance, checker) -> list[str]:
    """Messages of every way `instance` breaks `schema` (empty when it validates)."""
    v = Draft202012Validator(schema, format_checker=checker)
    out = []
    for e in sorted(v.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
        where = "/" + "/".join(str(p) for p in e.absolute_path)
        msg = e.message if len(e.message) <= 200 else e.message[:200] + "..."
        out.append(f"{where}: {msg}")
    return out


# --------------------------------------------------------------------------------------
# JSON helpers
# --------------------------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str):
    """json.loads that rejects NaN / Infinity (Python accepts them, JSON does not)."""
    return json.loads(text, parse_constant=_reject_constant)


_FENCE_RE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)


def lenient_json(text: str):
    """The JSON a reply holds when code fences or text around it are allowed (or raises)."""
    m = _FENCE_RE.match(text)
    if m:
        return strict_json(m.group(1))
    try:
        return strict_json(text)
    except ValueError:
        pass
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise ValueError("no JSON object in the text")
    i = min(starts)
    j = max(text.rfind("}"), text.rfind("]"))
    return strict_json(text[i:j + 1])


# --------------------------------------------------------------------------------------
# expected_args matching
# --------------------------------------------------------------------------------------

def _norm(s: str) -> str:
    """Casefolded, whitespace collapsed, quotes and book-title marks dropped."""
    s = re.sub(r"\s+", " ", s.casefold()).strip()
    return s.strip("\"'“”‘’《》「」 ")


def args_match(expected, actual, schema=None) -> bool:
    """Whether `actual` (the call's arguments) has the values in `expected` (a subset).

    - objects: every expected key is present and matches (extra keys are fine);
    - arrays: every expected element matches some actual element (order-free);
    - numbers: numerically equal; booleans: equal;
    - strings: equal after normalisation (case, whitespace, quotes); where the schema gives
      no enum/const, also when the expected text is contained in the actual one
      ("Golden Gate" matches "Golden Gate Bridge");
    - {"$any": [a, b, ...]}: any of the alternatives matches.
    `schema` is the tool's parameters schema at the same place (for enum / const)."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(expected, dict) and set(expected) == {"$any"}:
        return any(args_match(alt, actual, schema) for alt in expected["$any"])
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return False
        props = schema.get("properties", {})
        return all(k in actual and args_match(v, actual[k], props.get(k)) for k, v in expected.items())
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        items = schema.get("items")
        return all(any(args_match(e, a, items) for a in actual) for e in expected)
    if isinstance(expected, bool):
        return isinstance(actual, bool) and actual == expected
    if isinstance(expected, (int, float)):
        return (isinstance(actual, (int, float)) and not isinstance(actual, bool)
                and math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9))
    if isinstance(expected, str):
        if not isinstance(actual, str):
            return False
        e, a = _norm(expected), _norm(actual)
        if e == a:
            return True
        closed = "enum" in schema or "const" in schema
        return not closed and len(e) >= 2 and e in a
    return expected == actual


# --------------------------------------------------------------------------------------
# HTTP and the server process
# --------------------------------------------------------------------------------------

def http_json(method: str, url: str, body=None, timeout: float = 600.0):
    """(status, parsed JSON or None, raw text). Network errors raise OSError."""
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:  # 4xx / 5xx: keep the error body
        status, raw = e.code, e.read()
    text = raw.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return status, parsed, text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`edgellm serve` started by this script; stopped (by its own pid) in stop()."""

    def __init__(self, binary: str, model: str, threads: int, ctx: int, extra: list[str]):
        self.port = free_port()
        self.cmd = [binary, "serve", "-m", model, "--port", str(self.port), "-t", str(threads),
                    "-c", str(ctx)] + extra
        self.log = tempfile.NamedTemporaryFile(prefix="validity-server-", suffix=".log", delete=False)
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float) -> None:
        print("starting: " + shlex.join(self.cmd), file=sys.stderr)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {self.proc.returncode}\n{self.log_tail()}")
            try:
                status, _, _ = http_json("GET", self.url + "/health", timeout=2)
                if status == 200:
                    print(f"server ready after {time.monotonic() - t0:.1f} s (log: {self.log.name})",
                          file=sys.stderr)
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"GET /health was not 200 within {timeout:.0f} s\n{self.log_tail()}")

    def log_tail(self, n: int = 20) -> str:
        try:
            return "".join(Path(self.log.name).read_text(errors="replace").splitlines(True)[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------

def with_schema_prompt(messages: list, schema) -> list:
    """The messages with the schema as text at the end of the system prompt (one is added
    at the front when there is none)."""
    text = SCHEMA_PROMPT + json.dumps(schema, ensure_ascii=False)
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0].get("role") == "system" and isinstance(msgs[0].get("content"), str):
        msgs[0]["content"] = msgs[0]["content"] + "\n\n" + text
    else:
        msgs.insert(0, {"role": "system", "content": text})
    return msgs


def tool_request(case: dict, constrained: bool) -> dict:
    body = {"messages": case["messages"], "tools": case["tools"], "tool_choice": "auto", **SAMPLING}
    if not constrained:
        body["constrain"] = False  # edgellm extension: no grammar, calls still parsed from text
    return body


def schema_request(case: dict, constrained: bool, schema_in_prompt: bool) -> dict:
    if constrained:
        msgs = with_schema_prompt(case["messages"], case["schema"]) if schema_in_prompt else case["messages"]
        return {"messages": msgs, **SAMPLING,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": case["id"], "schema": case["schema"], "strict": True}}}
    return {"messages": with_schema_prompt(case["messages"], case["schema"]), **SAMPLING}


def send(base_url: str, body: dict, timeout: float) -> dict:
    """One chat completion. Returns the run's transport fields: http_status, error,
    latency_s, message, finish_reason, usage, timings."""
    out = {"http_status": None, "error": None, "latency_s": None, "message": None,
           "finish_reason": None, "usage": None, "timings": None}
    t0 = time.monotonic()
    try:
        status, parsed, text = http_json("POST", base_url + "/v1/chat/completions", body, timeout)
    except (OSError, TimeoutError) as e:  # connection refused, reset, timed out
        out["latency_s"] = time.monotonic() - t0
        out["error"] = f"request failed: {e!r}"
        return out
    out["latency_s"] = time.monotonic() - t0
    out["http_status"] = status
    if status != 200:
        out["error"] = f"HTTP {status}: {text[:2000]}"
        return out
    try:
        choice = parsed["choices"][0]
        msg = choice["message"]
        if not isinstance(msg, dict):
            raise TypeError("message is not an object")
    except (TypeError, KeyError, IndexError) as e:
        out["error"] = f"malformed answer ({e!r}): {text[:2000]}"
        return out
    out["message"] = msg
    out["finish_reason"] = choice.get("finish_reason")
    out["usage"] = parsed.get("usage")
    out["timings"] = parsed.get("timings")
    return out


# --------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------

def tool_schema(case: dict, name):
    for t in case["tools"]:
        if t.get("function", {}).get("name") == name:
            return t["function"].get("parameters", {"type": "object"})
    return None


def looks_like_call(content: str, names: list[str]) -> bool:
    """A reply whose text tried to call a tool (the server did not accept it as a call)."""
    if "<tool_call>" in content or "<|python_tag|>" in content:
        return True
    alts = "|".join(re.escape(n) for n in names)
    return bool(re.search(r'"name"\s*:\s*"(?:%s)"' % alts, content))


def score_tool(case: dict, run: dict, checker) -> dict:
    """Outcome of one tool run. `attempted`: the reply made (or tried to make) a call;
    parse / valid are measured over attempted calls and failed requests."""
    expected = case.get("expected_tool")
    has_args = "expected_args" in case
    o = {"has_call": False, "attempted": False, "parsed": None, "valid": None, "right_tool": False,
         "args_match": False if has_args else None, "called": [], "arguments": [], "errors": []}
    if run["error"]:
        # a failed request fails every measure
        o.update(attempted=True, parsed=False, valid=False)
        return o
    msg = run["message"]
    calls = msg.get("tool_calls") or []
    content = msg.get("content") or ""
    if not isinstance(calls, list):
        calls = []
        o["errors"].append("tool_calls is not an array")
    names = [t["function"]["name"] for t in case["tools"]]
    if not calls:
        if isinstance(content, str) and looks_like_call(content, names):
            o.update(attempted=True, parsed=False, valid=False)
            o["errors"].append("the reply's text holds a tool call the server did not parse")
        o["right_tool"] = expected is None and not o["attempted"]
        if expected is None and has_args:
            o["args_match"] = None
        return o
    o.update(has_call=True, attempted=True, parsed=True, valid=True)
    first_args = None
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        raw = fn.get("arguments") if isinstance(fn, dict) else None
        o["called"].append(name)
        o["arguments"].append(raw)
        if not isinstance(raw, str):
            o.update(parsed=False, valid=False)
            o["errors"].append(f"call {i}: function.arguments is not a JSON string ({type(raw).__name__})")
            continue
        try:
            args = strict_json(raw)
        except ValueError as e:
            o.update(parsed=False, valid=False)
            o["errors"].append(f"call {i}: arguments do not parse: {e}")
            continue
        if not isinstance(args, dict):
            o.update(parsed=False, valid=False)
            o["errors"].append(f"call {i}: arguments are not a JSON object")
            continue
        if i == 0:
            first_args = args
        schema = tool_schema(case, name)
        if schema is None:
            o["valid"] = False
            o["errors"].append(f"call {i}: {name!r} is not one of the request's tools")
            continue
        errs = validation_errors(schema, args, checker)
        if errs:
            o["valid"] = False
            o["errors"] += [f"call {i} ({name}): {e}" for e in errs[:10]]
    o["right_tool"] = expected is not None and o["called"][0] == expected
    if has_args and expected is not None:
        o["args_match"] = bool(o["right_tool"] and first_args is not None and
                               args_match(case["expected_args"], first_args, tool_schema(case, expected)))
    return o


def score_schema(case: dict, run: dict, checker) -> dict:
    o = {"parsed": False, "valid": False, "lenient_parsed": False, "lenient_valid": False, "errors": []}
    if run["error"]:
        return o
    content = run["message"].get("content")
    if not isinstance(content, str):
        o["errors"].append("message.content is not a string")
        return o
    try:
        value = strict_json(content)
        o["parsed"] = True
    except ValueError as e:
        o["errors"].append(f"content does not parse as JSON: {e}")
        value = None
    if o["parsed"]:
        errs = validation_errors(case["schema"], value, checker)
        o["valid"] = not errs
        o["errors"] += errs[:10]
    # also: does it parse once code fences / text around the JSON are allowed?
    try:
        lv = lenient_json(content)
        o["lenient_parsed"] = True
        o["lenient_valid"] = not validation_errors(case["schema"], lv, checker)
    except ValueError:
        pass
    if run["finish_reason"] == "length":
        o["errors"].append("the reply stopped at max_tokens")
    return o


# --------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------

def ratio(n: int, d: int) -> dict:
    return {"n": n, "d": d, "pct": (100.0 * n / d) if d else None}


def fmt(r: dict | None) -> str:
    if r is None:
        return "—"
    if r["d"] == 0:
        return "n/a"
    return f"{r['pct']:.1f} ({r['n']}/{r['d']})"


def summarize(model: str, kind: str, mode: str, runs: list[dict]) -> dict:
    ok_lat = [r["latency_s"] for r in runs if r["error"] is None and r["latency_s"] is not None]
    row = {"model": model, "kind": kind, "constrained": mode == "constrained", "cases": len(runs),
           "http_errors": sum(1 for r in runs if r["error"]),
           "length_stops": sum(1 for r in runs if r["finish_reason"] == "length"),
           "mean_latency_s": (sum(ok_lat) / len(ok_lat)) if ok_lat else None,
           "mean_decode_tps": mean_decode_speed(runs)}
    outs = [r["outcome"] for r in runs]
    if kind == "tools":
        att = [o for o in outs if o["attempted"]]
        row["parse"] = ratio(sum(1 for o in att if o["parsed"]), len(att))
        row["valid"] = ratio(sum(1 for o in att if o["valid"]), len(att))
        row["right_tool"] = ratio(sum(1 for o in outs if o["right_tool"]), len(outs))
        with_args = [o for o in outs if o["args_match"] is not None]
        row["args_match"] = ratio(sum(1 for o in with_args if o["args_match"]), len(with_args))
    else:
        row["parse"] = ratio(sum(1 for o in outs if o["parsed"]), len(outs))
        row["valid"] = ratio(sum(1 for o in outs if o["valid"]), len(outs))
        row["right_tool"] = None
        row["args_match"] = None
        row["lenient_parse"] = ratio(sum(1 for o in outs if o["lenient_parsed"]), len(outs))
        row["lenient_valid"] = ratio(sum(1 for o in outs if o["lenient_valid"]), len(outs))
    return row


def mean_decode_speed(runs: list[dict]) -> float | None:
    """Mean of the server's own decode speed (timings.predicted_per_second), when it sends it."""
    v = [r["timings"].get("predicted_per_second") for r in runs
         if r["error"] is None and isinstance(r.get("timings"), dict)]
    v = [x for x in v if isinstance(x, (int, float)) and x > 0]
    return sum(v) / len(v) if v else None


def breakdown(runs: list[dict]) -> list[dict]:
    """Right-tool rate of tool runs by mode x language and mode x number of tools."""
    out = []
    groups: dict[tuple, list] = {}
    for r in runs:
        if r["kind"] != "tools":
            continue
        n = r["n_tools"]
        bucket = "1-2 tools" if n <= 2 else "3-4 tools" if n <= 4 else "5-6 tools"
        groups.setdefault((r["mode"], "lang " + r["lang"]), []).append(r)
        groups.setdefault((r["mode"], bucket), []).append(r)
        if r["expected_tool"] is None:
            groups.setdefault((r["mode"], "no tool expected"), []).append(r)
    for (mode, group), rs in sorted(groups.items()):
        out.append({"mode": mode, "group": group,
                    "right_tool": ratio(sum(1 for r in rs if r["outcome"]["right_tool"]), len(rs))})
    return out


def print_table(rows: list[dict]) -> None:
    print("| model | kind | constrained | cases | parse % | valid % | right tool % | args match % "
          "| mean latency | decode tok/s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lat = f"{r['mean_latency_s']:.2f} s" if r["mean_latency_s"] is not None else "—"
        tps = f"{r['mean_decode_tps']:.1f}" if r["mean_decode_tps"] is not None else "—"
        print(f"| {r['model']} | {r['kind']} | {'yes' if r['constrained'] else 'no'} | {r['cases']} "
              f"| {fmt(r['parse'])} | {fmt(r['valid'])} | {fmt(r['right_tool'])} | {fmt(r['args_match'])} "
              f"| {lat} | {tps} |")


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

def load_cases(path: Path, n: int | None) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    return cases[:n] if n else cases


def model_name(base_url: str) -> str:
    try:
        status, parsed, _ = http_json("GET", base_url + "/v1/models", timeout=10)
        if status == 200:
            return parsed["data"][0]["id"]
    except (OSError, KeyError, IndexError, TypeError):
        pass
    return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8080")
    where.add_argument("--server", help="the edgellm binary to start (with --model)")
    ap.add_argument("--model", help="GGUF model for --server")
    ap.add_argument("--threads", type=int, default=2, help="-t for --server (default 2)")
    ap.add_argument("--ctx", type=int, default=4096, help="-c for --server (default 4096)")
    ap.add_argument("--server-args", default="", help="more flags for --server, one shell-quoted string")
    ap.add_argument("--startup-timeout", type=float, default=300, help="seconds to wait for /health")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request (default 600)")
    ap.add_argument("--model-name", help="the model column (default: --model's file name or /v1/models)")
    ap.add_argument("--tool-cases", type=Path, default=DEFAULT_TOOL_CASES)
    ap.add_argument("--schema-cases", type=Path, default=DEFAULT_SCHEMA_CASES)
    ap.add_argument("--cases", type=int, help="run only the first N cases of each file")
    ap.add_argument("--only", choices=["tools", "schemas"], help="run only one kind of case")
    ap.add_argument("--mode", choices=["both", "constrained", "unconstrained"], default="both")
    ap.add_argument("--schema-in-prompt", action="store_true",
                    help="constrained schema runs also get the schema as text in the system prompt")
    ap.add_argument("--cache-prompt", action="store_true",
                    help="let the server reuse cached prompt prefixes (faster; latencies then differ by order)")
    ap.add_argument("--out", type=Path, help="write the JSON report here")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 whatever the results")
    args = ap.parse_args()
    if args.server and not args.model:
        ap.error("--server needs --model")
    if args.cases is not None and args.cases < 1:
        ap.error("--cases must be at least 1")

    kinds = [args.only] if args.only else ["tools", "schemas"]
    modes = ["constrained", "unconstrained"] if args.mode == "both" else [args.mode]
    tool_cases = load_cases(args.tool_cases, args.cases) if "tools" in kinds else []
    schema_cases = load_cases(args.schema_cases, args.cases) if "schemas" in kinds else []

    # Which formats the cases use, and how each is checked.
    used: set[str] = set()
    for c in tool_cases:
        for t in c["tools"]:
            formats_used(t["function"].get("parameters", {}), used)
    for c in schema_cases:
        formats_used(c["schema"], used)
    checker, fmt_info = make_format_checker(used)
    for note in fmt_info["notes"]:
        print("note: " + note, file=sys.stderr)

    server = None
    if args.server:
        server = Server(args.server, os.path.expanduser(args.model), args.threads, args.ctx,
                        shlex.split(args.server_args))
        try:
            server.start(args.startup_timeout)
        except (RuntimeError, OSError) as e:
            server.stop()
            print(f"validity.py: {e}", file=sys.stderr)
            return 2
        base_url = server.url
        model = args.model_name or Path(args.model).name
    else:
        base_url = args.url.rstrip("/")
        if base_url.endswith("/v1"):
            base_url = base_url[:-3]
        model = args.model_name or model_name(base_url)

    # The runs: each case constrained then unconstrained (the two share a prompt prefix
    # for tool cases, so the second reuses the server's cache).
    plan = [("tools", c, m) for c in tool_cases for m in modes] + \
           [("schemas", c, m) for c in schema_cases for m in modes]
    runs: list[dict] = []
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    interrupted = False
    try:
        for i, (kind, case, mode) in enumerate(plan, 1):
            constrained = mode == "constrained"
            if kind == "tools":
                body = tool_request(case, constrained)
            else:
                body = schema_request(case, constrained, args.schema_in_prompt)
            body["cache_prompt"] = args.cache_prompt
            run = {"kind": kind, "id": case["id"], "lang": case.get("lang"), "mode": mode,
                   "n_tools": len(case.get("tools", [])), "expected_tool": case.get("expected_tool"),
                   **send(base_url, body, args.timeout)}
            if kind == "tools":
                run["expected_args"] = case.get("expected_args")
                run["outcome"] = score_tool(case, run, checker)
                o = run["outcome"]
                verdict = ("ERROR" if run["error"] else
                           f"call={','.join(map(str, o['called'])) or '-'} parse={o['parsed']} "
                           f"valid={o['valid']} right={o['right_tool']} args={o['args_match']}")
            else:
                run["outcome"] = score_schema(case, run, checker)
                o = run["outcome"]
                verdict = "ERROR" if run["error"] else f"parse={o['parsed']} valid={o['valid']}"
            lat = f"{run['latency_s']:.1f}s" if run["latency_s"] is not None else "-"
            print(f"[{i}/{len(plan)}] {kind:7} {mode:13} {case['id']:32} {lat:>7} {verdict}", file=sys.stderr)
            if run["error"]:
                print("    " + run["error"][:300], file=sys.stderr)
            runs.append(run)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: summarising the runs so far", file=sys.stderr)
    finally:
        if server:
            server.stop()

    rows = []
    for kind in kinds:
        for mode in modes:
            rs = [r for r in runs if r["kind"] == kind and r["mode"] == mode]
            if rs:
                rows.append(summarize(model, kind, mode, rs))

    print()
    print_table(rows)
    for r in rows:
        if r["kind"] == "schemas":
            print(f"\n{r['kind']} {'constrained' if r['constrained'] else 'unconstrained'}: "
                  f"parse {fmt(r['lenient_parse'])}, valid {fmt(r['lenient_valid'])} "
                  "when code fences / text around the JSON are allowed", end="")
    bd = breakdown(runs)
    if bd:
        print("\n\n| mode | group | right tool % |\n|---|---|---:|")
        for b in bd:
            print(f"| {b['mode']} | {b['group']} | {fmt(b['right_tool'])} |")
    for note in fmt_info["notes"]:
        print(f"\nnote: {note}", end="")
    print()

    # Pass: every constrained row has 100 % parse and 100 % valid. (A row with no calls
    # at all has nothing to parse: n/a, not a failure of these two measures.)
    failed = [r for r in rows if r["constrained"] and
              any(r[k]["d"] and r[k]["n"] != r[k]["d"] for k in ("parse", "valid"))]
    if interrupted:
        print("the run was interrupted: the figures cover the cases run so far")
    if not any(r["constrained"] for r in rows):
        print("no constrained runs: nothing to pass or fail")
    elif failed:
        print("FAIL: constrained " + ", ".join(r["kind"] for r in failed) + " below 100 % parse/valid")
    else:
        print("PASS: constrained rows at 100 % parse and valid")

    if args.out:
        report = {
            "model": model, "url": base_url, "server_cmd": server.cmd if server else None,
            "started": started, "interrupted": interrupted,
            "settings": {**SAMPLING, "cases": args.cases, "only": args.only, "mode": args.mode,
                         "schema_in_prompt": args.schema_in_prompt, "cache_prompt": args.cache_prompt,
                         "jsonschema": _pkg_version()},
            "formats": fmt_info, "summary": rows, "breakdown": bd, "runs": runs,
            "passed": not failed and not interrupted,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"report: {args.out}", file=sys.stderr)

    if args.no_fail:
        return 0
    return 1 if (failed or interrupted) else 0


def _pkg_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("jsonschema")
    except Exception:  # noqa: BLE001 - only informative
        return None


if __name__ == "__main__":
    sys.exit(main())
