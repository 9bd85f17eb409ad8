#!/usr/bin/env python3
"""Integration tests of `edgellm serve`: the real binary on a free port, real HTTP, real models.

    tests/server/test_serve.py --bin build/bin/edgellm --root . [unittest options, e.g. -k Cancel]

Most protocol tests run against Gemma 3 270M (fast); the seed tests run the seeds' own
llama-server command lines and requests (shared/seeds/000-002) against the default
Qwen2.5-Coder 1.5B. A test whose model, Python package or browser is missing is skipped
with the reason printed, never passed. Every server this file starts is stopped at the
end, also when a test fails or the run is interrupted (SIGTERM from CTest's timeout
included; a child also gets SIGKILL if this process dies, via PR_SET_PDEATHSIG).

Exit code: 0 all passed (some may have skipped), 1 a failure, 77 when every test skipped
(CTest's SKIP_RETURN_CODE).
"""

import argparse
import atexit
import ctypes
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = argparse.Namespace(bin=None, root=None)

# The bound of the acceptance: generation stops within 200 ms of the disconnect.
CANCEL_BOUND_S = 0.200
LOAD_TIMEOUT_S = 180  # loading on a loaded 2-core machine: generous
REQUEST_TIMEOUT_S = 180

GEMMA = "gemma3-270m"
QWEN = "qwen2.5-coder-1.5b"


# ---- models ----------------------------------------------------------------------------

_model_paths = {}


def model_path(name):
    """The model's file from scripts/fetch-models.sh --print-path, or None when absent."""
    if name not in _model_paths:
        path = None
        try:
            r = subprocess.run([os.path.join(ARGS.root, "scripts", "fetch-models.sh"),
                                "--print-path", name], capture_output=True, text=True, timeout=60)
            candidate = r.stdout.strip()
            if r.returncode == 0 and candidate and os.path.isfile(candidate):
                path = candidate
        except (OSError, subprocess.SubprocessError):
            pass
        _model_paths[name] = path
    return _model_paths[name]


def need_model(name):
    path = model_path(name)
    if path is None:
        raise unittest.SkipTest(f"model {name} is not installed "
                                f"(scripts/fetch-models.sh {name} fetches it)")
    return path


# ---- the server process ----------------------------------------------------------------

_live_servers = set()
_live_groups = set()  # process groups of other helpers (chromedriver and its browser)


def _stop_all_servers():
    for s in list(_live_servers):
        s.stop()


atexit.register(_stop_all_servers)


def _on_sigterm(*_):
    # CTest's timeout sends SIGTERM. SystemExit would be caught by unittest as a test error
    # and the run would go on, so kill the servers here and leave at once.
    for s in list(_live_servers):
        try:
            s.proc.kill()
        except OSError:
            pass
    for pgid in list(_live_groups):
        kill_group(pgid)
    os._exit(143)


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    _live_groups.discard(pgid)


signal.signal(signal.SIGTERM, _on_sigterm)


def _die_with_parent():
    # Runs in the child between fork and exec: SIGKILL it if this test process dies.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_or_free(preferred):
    """The seed's own port when it is free here, else any free one (said on stdout)."""
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", preferred))
        return preferred
    except OSError:
        port = free_port()
        print(f"\n  note: port {preferred} is in use here; using {port} instead", flush=True)
        return port


class Server:
    """`edgellm serve ARGS` as a child process, its stderr collected line by line.

    The port: with `port=None` the args must hold `--port 0` and the port is read from the
    `listening on http://HOST:PORT` line; otherwise the given port (for --log-disable).
    """

    def __init__(self, args, port=None):
        self.args = [str(a) for a in args]
        self.lines = []  # (monotonic time, text)
        self.cond = threading.Condition()
        self.eof = False
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([ARGS.bin, "serve", *self.args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=_die_with_parent)
        _live_servers.add(self)
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()
        if port is None:
            try:
                m = self.wait_log(r"listening on http://\S+:(\d+)", timeout=30)
            except BaseException:
                self.stop()
                raise
            self.port = int(m.group(1))
        else:
            self.port = port

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.cond:
                self.lines.append((time.monotonic(), line))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def log_text(self):
        with self.cond:
            return "\n".join(t for _, t in self.lines)

    def log_count(self):
        with self.cond:
            return len(self.lines)

    def wait_log(self, pattern, timeout=30, start=0):
        """The first stderr line from index `start` on that matches; fails after `timeout`."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for _, text in self.lines[start:]:
                    m = rx.search(text)
                    if m:
                        return m
                if self.eof:
                    raise AssertionError(f"edgellm serve exited ({self.proc.poll()}) before "
                                         f"logging /{pattern}/:\n{self.log_text_locked()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no log line /{pattern}/ within {timeout} s:\n"
                                         f"{self.log_text_locked()}")
                self.cond.wait(left)

    def log_text_locked(self, last=60):
        return "\n".join(t for _, t in self.lines[-last:])

    def wait_ready(self, timeout=LOAD_TIMEOUT_S):
        """Polls GET /health until 200; returns every (status, body) seen before it."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.1)
                raise AssertionError(f"edgellm serve exited with {self.proc.returncode}:\n"
                                     f"{self.log_text()}")
            try:
                r = request(self.port, "GET", "/health", timeout=10)
                seen.append((r.status, r.body))
                if r.status == 200:
                    return seen
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"the server was not ready within {timeout} s:\n{self.log_text()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.reader.join(timeout=5)
        if self.proc.stderr:
            self.proc.stderr.close()
        _live_servers.discard(self)


def start_server(test_class, args, port=None, ready=True):
    """Starts a server for a test class and registers its stop (runs even if setUpClass fails)."""
    s = Server(args, port=port)
    test_class.addClassCleanup(s.stop)
    if ready:
        s.health_seen = s.wait_ready()
    return s


# ---- HTTP ------------------------------------------------------------------------------


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


def request(port, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT_S,
            host="127.0.0.1"):
    """One request on a fresh connection. A dict or list body is sent as JSON."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    if isinstance(body, str):
        body = body.encode("utf-8")
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


class KeepAlive:
    """A connection opened once and reused, so polling costs no connect (cancel timings)."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def get_json(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        return r.status, r.read()

    def close(self):
        self.conn.close()


def slot_busy(ka, slot_id=0):
    status, body = ka.get_json("/slots")
    assert status == 200, body
    return json.loads(body)[slot_id]["is_processing"]


def metrics_values(port):
    """GET /metrics parsed: {name: value} of every unlabelled sample."""
    r = request(port, "GET", "/metrics")
    assert r.status == 200, r
    out = {}
    for line in r.body.decode().splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


class RawStream:
    """A request on a plain socket whose response is read here, byte for byte.

    The chunked transfer coding is decoded by hand, so `body` holds exactly the bytes the
    server sent as payload and `chunks` each HTTP chunk with its arrival time.
    """

    def __init__(self, port, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.sock.sendall(head.encode() + b"\r\n" + (body or b""))
        self.buf = b""
        self.status = None
        self.headers = {}
        self.body = b""
        self.chunks = []  # (monotonic time, bytes)
        self.finished = False
        self.closed_at = None

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_head(self):
        if self.status is not None:
            return
        status_line = self._line().decode()
        self.status = int(status_line.split(" ")[1])
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            self.headers[k.strip().lower()] = v.strip()

    def read_chunk(self):
        """The next chunk's payload, or None at the end of the body."""
        self.read_head()
        if self.finished:
            return None
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._fill()
            self.body, self.buf = self.buf[:n], self.buf[n:]
            self.chunks.append((time.monotonic(), self.body))
            self.finished = True
            return self.body if n else None
        size = int(self._line().split(b";")[0], 16)
        while len(self.buf) < size + 2:
            self._fill()
        data, tail, self.buf = self.buf[:size], self.buf[size:size + 2], self.buf[size + 2:]
        assert tail == b"\r\n", f"chunk not followed by CRLF: {tail!r}"
        if size == 0:
            self.finished = True
            return None
        self.body += data
        self.chunks.append((time.monotonic(), data))
        return data

    def read_all(self):
        while self.read_chunk() is not None:
            pass
        self.close()
        return self

    def read_until_events(self, n):
        """Reads chunks until the body holds at least n complete SSE events."""
        while self.body.count(b"\n\n") < n:
            if self.read_chunk() is None:
                n = self.body.count(b"\n\n")
                raise AssertionError(f"stream ended after {n} events: {self.body[-500:]!r}")

    def abort(self):
        """Closes the connection abruptly (RST, no FIN): a client that died or was killed."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()
        self.closed_at = time.monotonic()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


SSE_EVENT = re.compile(rb"data: ([^\n]*)\n\n")


def sse_events(body):
    """Splits an SSE body, asserting that it is exactly a run of `data: <payload>\\n\\n`."""
    events, at = [], 0
    while at < len(body):
        m = SSE_EVENT.match(body, at)
        if not m:
            raise AssertionError(f"SSE framing broken at byte {at}: {body[at:at + 200]!r}")
        events.append(m.group(1).decode())
        at = m.end()
    return events


def chat_body(content, **kw):
    return {"messages": [{"role": "user", "content": content}], **kw}


def assert_error_shape(tc, reply, status):
    tc.assertEqual(reply.status, status, reply)
    tc.assertTrue(reply.headers.get("content-type", "").startswith("application/json"), reply.headers)
    j = reply.json()
    tc.assertIn("error", j, j)
    err = j["error"]
    for key in ("code", "message", "type"):
        tc.assertIn(key, err, j)
    tc.assertEqual(err["code"], status, j)
    tc.assertIsInstance(err["message"], str)
    tc.assertTrue(err["message"], j)
    tc.assertIsInstance(err["type"], str)
    return err


def assert_timings(tc, t):
    for key in ("cache_n", "prompt_n", "prompt_ms", "prompt_per_second", "predicted_n",
                "predicted_ms", "predicted_per_second"):
        tc.assertIn(key, t, t)


# ---- the protocol, on Gemma 3 270M, one slot -------------------------------------------


class OneSlotServer(unittest.TestCase):
    """One server (-np 1, --metrics, --slot-save-path) for most protocol tests."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.slot_dir = tempfile.mkdtemp(prefix="edgellm-slots-")
        cls.addClassCleanup(lambda: shutil.rmtree(cls.slot_dir, ignore_errors=True))
        cls.n_ctx = 2048
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", cls.n_ctx,
                                     "--metrics", "--slot-save-path", cls.slot_dir])
        cls.port = cls.srv.port

    def post(self, path, body, **kw):
        return request(self.port, "POST", path, body, **kw)

    def get(self, path, **kw):
        return request(self.port, "GET", path, **kw)

    def wait_idle(self, timeout=30):
        ka = KeepAlive(self.port)
        try:
            deadline = time.monotonic() + timeout
            while slot_busy(ka):
                self.assertLess(time.monotonic(), deadline, "slot 0 stays busy")
                time.sleep(0.01)
        finally:
            ka.close()

    def tearDown(self):
        self.wait_idle()  # no test leaves a generation running for the next

    # -- health, models, props, page, 404 --

    def test_health_503_while_loading_then_ok(self):
        seen = self.srv.health_seen
        self.assertEqual(seen[-1][0], 200)
        self.assertEqual(json.loads(seen[-1][1]), {"status": "ok"})
        loading = [(s, b) for s, b in seen if s != 200]
        self.assertTrue(loading, "GET /health right after start did not see the model loading "
                                 f"(503): {seen[:3]}")
        for status, body in loading:
            self.assertEqual(status, 503, body)
            err = json.loads(body)["error"]
            self.assertEqual(err["code"], 503)
            self.assertEqual(err["type"], "unavailable_error")
        r = self.get("/v1/health")
        self.assertEqual((r.status, r.json()), (200, {"status": "ok"}))

    def test_models(self):
        r = self.get("/v1/models")
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "list")
        self.assertEqual(len(j["data"]), 1)
        self.assertEqual(j["data"][0]["id"], os.path.basename(self.model))
        self.assertEqual(j["data"][0]["object"], "model")
        self.assertEqual(self.get("/models").json()["data"][0]["id"], j["data"][0]["id"])

    def test_props(self):
        j = self.get("/props").json()
        self.assertEqual(j["default_generation_settings"]["n_ctx"], self.n_ctx)
        self.assertEqual(j["total_slots"], 1)
        self.assertEqual(j["model_path"], self.model)
        # this GGUF has no tokenizer.chat_template: the built-in gemma format is used
        self.assertIsInstance(j["chat_template"], str)
        self.assertEqual(j["bos_token"], "<bos>")
        params = j["default_generation_settings"]["params"]
        self.assertAlmostEqual(params["temperature"], 0.8, places=5)

    def test_chat_page(self):
        r = self.get("/")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.headers["content-type"].startswith("text/html"))
        page = r.body.decode()
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        for needle in ('id="send"', 'id="stop"', "/v1/chat/completions", "tokens/s"):
            self.assertIn(needle, page)

    def test_unknown_routes_are_404(self):
        for method, path in [("GET", "/nope"), ("POST", "/v1/nope"), ("GET", "/v1/chat/completions"),
                             ("POST", "/slots/7?action=erase"), ("DELETE", "/slots/x")]:
            with self.subTest(method=method, path=path):
                assert_error_shape(self, request(self.port, method, path, body=b"{}"), 404)

    # -- generation, whole answers --

    def test_chat_completion(self):
        r = self.post("/v1/chat/completions", chat_body("Say hi.", max_tokens=6))
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "chat.completion")
        self.assertTrue(j["id"].startswith("chatcmpl-"))
        self.assertEqual(j["model"], os.path.basename(self.model))
        choice = j["choices"][0]
        self.assertEqual(choice["message"]["role"], "assistant")
        self.assertIsInstance(choice["message"]["content"], str)
        self.assertIn(choice["finish_reason"], ("stop", "length"))
        u = j["usage"]
        self.assertTrue(1 <= u["completion_tokens"] <= 6, u)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertIn("cached_tokens", u["prompt_tokens_details"])
        assert_timings(self, j["timings"])
        self.assertEqual(j["timings"]["predicted_n"], u["completion_tokens"])
        self.assertEqual(j["timings"]["prompt_n"] + j["timings"]["cache_n"], u["prompt_tokens"])
        if choice["finish_reason"] == "length":
            self.assertEqual(u["completion_tokens"], 6)

    def test_completions(self):
        r = self.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 5})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "text_completion")
        self.assertIsInstance(j["choices"][0]["text"], str)
        self.assertIn(j["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertLessEqual(j["usage"]["completion_tokens"], 5)
        assert_timings(self, j["timings"])

    def test_native_completion_text_prompt(self):
        r = self.post("/completion", {"prompt": "Once upon a time", "n_predict": 5, "stream": False})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertIsInstance(j["content"], str)
        self.assertTrue(j["stop"])
        self.assertTrue(1 <= j["tokens_predicted"] <= 5, j)
        self.assertIn(j["stop_type"], ("eos", "limit", "word"))
        self.assertEqual(j["prompt"], "Once upon a time")
        self.assertGreater(j["tokens_per_second"], 0)
        assert_timings(self, j["timings"])
        self.assertEqual(j["generation_settings"]["n_predict"], 5)

    def test_native_completion_token_ids(self):
        ids = self.post("/tokenize", {"content": "The sky is", "add_special": True}).json()["tokens"]
        self.assertTrue(all(isinstance(t, int) for t in ids))
        r = self.post("/completion", {"prompt": ids, "n_predict": 4, "return_tokens": True})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["tokens_evaluated"], len(ids))  # taken as given: no BOS added
        self.assertEqual(len(j["tokens"]), j["tokens_predicted"])
        detok = self.post("/detokenize", {"tokens": j["tokens"]}).json()["content"]
        self.assertEqual(detok, j["content"])
        # streamed, with the ids as the prompt
        s = RawStream(self.port, "POST", "/completion", {"prompt": ids, "n_predict": 4, "stream": True}).read_all()
        self.assertEqual(s.status, 200)
        last = json.loads(sse_events(s.body)[-1])
        self.assertTrue(last["stop"])
        self.assertEqual(last["tokens_evaluated"], len(ids))
        # an id outside the vocabulary
        n_vocab = self.get("/v1/models").json()["data"][0]["meta"]["n_vocab"]
        assert_error_shape(self, self.post("/completion", {"prompt": [2, n_vocab], "n_predict": 1}), 400)

    def test_tokenize_detokenize(self):
        text = "Hello world, héllo 世界"
        plain = self.post("/tokenize", {"content": text}).json()["tokens"]
        with_bos = self.post("/tokenize", {"content": text, "add_special": True}).json()["tokens"]
        self.assertEqual(with_bos[1:], plain)
        self.assertEqual(len(with_bos), len(plain) + 1)
        pieces = self.post("/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
        self.assertEqual([p["id"] for p in pieces], plain)
        joined = b""
        for p in pieces:
            joined += p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
        self.assertEqual(joined.decode(), text)
        self.assertEqual(self.post("/detokenize", {"tokens": plain}).json()["content"], text)
        assert_error_shape(self, self.post("/detokenize", {"tokens": [-1]}), 400)
        assert_error_shape(self, self.post("/tokenize", {"content": 5}), 400)

    def test_apply_template(self):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
        r = self.post("/apply-template", {"messages": msgs})
        self.assertEqual(r.status, 200, r)
        prompt = r.json()["prompt"]
        self.assertIn("<start_of_turn>user\n", prompt)
        self.assertIn("Hi there", prompt)
        self.assertIn("Be brief.", prompt)
        self.assertTrue(prompt.endswith("<start_of_turn>model\n"), prompt)
        assert_error_shape(self, self.post("/apply-template", {"messages": [{"role": "x", "content": "y"}]}), 400)

    # -- SSE framing, byte for byte --

    def test_chat_stream_framing_with_usage(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Count: one, two,", max_tokens=8, stream=True,
                                stream_options={"include_usage": True})).read_all()
        self.assertEqual(s.status, 200)
        self.assertEqual(s.headers["content-type"], "text/event-stream")
        self.assertEqual(s.headers["transfer-encoding"], "chunked")
        events = sse_events(s.body)
        self.assertTrue(s.body.endswith(b"\n\ndata: [DONE]\n\n"))
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        ids = {o["id"] for o in objs}
        self.assertEqual(len(ids), 1, "every chunk carries the same id")
        for o in objs:
            self.assertEqual(o["object"], "chat.completion.chunk")
        role, *texts, final, usage = objs
        self.assertEqual(role["choices"][0]["delta"]["role"], "assistant")
        self.assertIsNone(role["choices"][0]["finish_reason"])
        self.assertTrue(texts, "no content chunk")
        for t in texts:
            self.assertIsNone(t["choices"][0]["finish_reason"])
            self.assertIsInstance(t["choices"][0]["delta"]["content"], str)
        self.assertIn(final["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertEqual(final["choices"][0]["delta"], {})
        assert_timings(self, final["timings"])
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], final["timings"]["predicted_n"])
        self.assertLessEqual(usage["usage"]["completion_tokens"], 8)
        self.assertEqual(usage["usage"]["total_tokens"],
                         usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"])
        # each event is one HTTP chunk, sent as it was made
        self.assertEqual(len(s.chunks), len(events))

    def test_chat_stream_framing_without_usage(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Hello", max_tokens=4, stream=True)).read_all()
        events = sse_events(s.body)
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        self.assertEqual(objs[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertIn(objs[-1]["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertTrue(all(o["choices"] for o in objs), "a usage chunk was not asked for")
        self.assertFalse(any("usage" in o for o in objs))

    def test_completions_stream_framing(self):
        s = RawStream(self.port, "POST", "/v1/completions",
                      {"prompt": "1, 2, 3,", "max_tokens": 6, "stream": True,
                       "stream_options": {"include_usage": True}}).read_all()
        events = sse_events(s.body)
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        *texts, final, usage = objs
        for t in texts:
            self.assertEqual(t["object"], "text_completion")
            self.assertIsNone(t["choices"][0]["finish_reason"])
        self.assertIn(final["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertEqual(usage["choices"], [])
        self.assertTrue("".join(t["choices"][0]["text"] for t in texts))

    def test_native_stream_framing(self):
        s = RawStream(self.port, "POST", "/completion",
                      {"prompt": "The alphabet: a b c", "n_predict": 6, "stream": True}).read_all()
        self.assertEqual(s.status, 200)
        self.assertEqual(s.headers["content-type"], "text/event-stream")
        events = sse_events(s.body)
        self.assertNotIn("[DONE]", events, "llama.cpp's /completion stream has no [DONE]")
        objs = [json.loads(e) for e in events]
        *pieces, last = objs
        self.assertTrue(pieces)
        for p in pieces:
            self.assertIs(p["stop"], False)
            self.assertIsInstance(p["content"], str)
        self.assertIs(last["stop"], True)
        self.assertEqual(last["content"], "")
        self.assertTrue(1 <= len(pieces) <= last["tokens_predicted"] <= 6)
        assert_timings(self, last["timings"])

    # -- errors --

    def test_errors_400(self):
        cases = {
            "malformed JSON": b'{"messages": [',
            "not an object": b"[1, 2]",
            "messages missing": {"max_tokens": 1},
            "messages of the wrong type": {"messages": "hi"},
            "max_tokens of the wrong type": chat_body("hi", max_tokens="5"),
            "stream of the wrong type": chat_body("hi", stream="yes"),
            "unknown role": {"messages": [{"role": "wizard", "content": "hi"}]},
            "temperature above 2": chat_body("hi", temperature=3),
            "temperature below 0": chat_body("hi", temperature=-0.5),
            "top_p above 1": chat_body("hi", top_p=1.5),
            "n > 1": chat_body("hi", n=2),
            "content of the wrong type": {"messages": [{"role": "user", "content": 7}]},
        }
        for what, body in cases.items():
            with self.subTest(what):
                err = assert_error_shape(self, self.post("/v1/chat/completions", body), 400)
                self.assertEqual(err["type"], "invalid_request_error")
        err = assert_error_shape(self, self.post("/v1/chat/completions",
                                                 {"messages": [{"role": "wizard", "content": "hi"}]}), 400)
        self.assertIn("wizard", err["message"])
        err = assert_error_shape(self, self.post("/v1/chat/completions", chat_body("hi", temperature=3)), 400)
        self.assertIn("temperature", err["message"])
        assert_error_shape(self, self.post("/completion", {"prompt": 5}), 400)
        assert_error_shape(self, self.post("/v1/completions", {"prompt": "x", "top_p": -1}), 400)

    def test_body_too_large_is_413(self):
        # The declared length alone is refused: the server answers without reading 9 MiB.
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 9437184\r\n\r\n{\"messages\":")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 413 "), head)
            n = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
            while len(rest) < n:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
            err = json.loads(rest[:n])["error"]
            self.assertEqual(err["code"], 413)
        finally:
            s.close()
        # a real oversized chunked body too
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            big = b'{"prompt": "' + b"a" * ((8 << 20) + (64 << 10)) + b'"}'
            step = 1 << 20
            conn.request("POST", "/completion", body=iter([big[i:i + step] for i in range(0, len(big), step)]),
                         headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
                         encode_chunked=True)
            r = conn.getresponse()
            self.assertEqual(r.status, 413)
            self.assertEqual(json.loads(r.read())["error"]["code"], 413)
        except (BrokenPipeError, ConnectionResetError):
            self.fail("the server reset the connection instead of answering 413")
        finally:
            conn.close()

    def test_prompt_longer_than_context_is_400_with_both_counts(self):
        prompt = "hello world " * 1200  # ~2400 tokens, a 2048-token slot
        n = len(self.post("/tokenize", {"content": prompt, "add_special": True}).json()["tokens"])
        self.assertGreater(n, self.n_ctx)
        err = assert_error_shape(self, self.post("/completion", {"prompt": prompt, "n_predict": 4}), 400)
        self.assertIn(str(n), err["message"])
        self.assertIn(str(self.n_ctx), err["message"])
        err = assert_error_shape(self, self.post("/v1/chat/completions", chat_body(prompt, max_tokens=4)), 400)
        self.assertIn(str(self.n_ctx), err["message"])
        self.assertRegex(err["message"], r"\b2[0-9]{3}\b")

    # -- metrics --

    def test_metrics(self):
        before = metrics_values(self.port)
        r = self.get("/metrics")
        self.assertTrue(r.headers["content-type"].startswith("text/plain"))
        text = r.body.decode()
        for name in ("edgellm_requests_total", "edgellm_requests_cancelled_total",
                     "edgellm_prompt_tokens_cached_total", "edgellm_generated_tokens_total",
                     "edgellm_queue_depth", "edgellm_resident_memory_bytes", "edgellm_kv_cache_bytes",
                     "edgellm_prefill_tokens_per_second", "edgellm_decode_tokens_per_second",
                     "llamacpp:prompt_tokens_total"):
            self.assertIn(f"\n# TYPE {name} ", "\n" + text)
        self.assertIn('edgellm_time_to_first_token_seconds_bucket{le="+Inf"}', text)
        self.post("/completion", {"prompt": "Metrics", "n_predict": 3})
        after = metrics_values(self.port)
        self.assertEqual(after["edgellm_requests_total"], before["edgellm_requests_total"] + 1)
        self.assertGreater(after["edgellm_generated_tokens_total"], before["edgellm_generated_tokens_total"])
        self.assertEqual(after["edgellm_time_to_first_token_seconds_count"],
                         before["edgellm_time_to_first_token_seconds_count"] + 1)
        self.assertGreater(after["edgellm_resident_memory_bytes"], 100e6)
        self.post("/v1/chat/completions", b"{")
        self.assertEqual(metrics_values(self.port)["edgellm_requests_failed_total"],
                         after["edgellm_requests_failed_total"] + 1)

    # -- slots --

    def test_slots_get(self):
        slots = self.get("/slots").json()
        self.assertEqual(len(slots), 1)
        self.assertEqual(slots[0]["id"], 0)
        self.assertEqual(slots[0]["n_ctx"], self.n_ctx)
        self.assertIs(slots[0]["is_processing"], False)

    def test_slot_save_restore_erase(self):
        prompt = "Slot save test: the quick brown fox jumps over the lazy dog."
        self.post("/completion", {"prompt": prompt, "n_predict": 2})
        n_cached = self.get("/slots").json()[0]["n_cached"]
        self.assertGreater(n_cached, 10)
        r = self.post("/slots/0?action=save", {"filename": "s1.bin"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_saved"], n_cached)
        self.assertTrue(os.path.isfile(os.path.join(self.slot_dir, "s1.bin")))
        r = self.post("/slots/0?action=erase", None)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_erased"], n_cached)
        self.assertEqual(self.get("/slots").json()[0]["n_cached"], 0)
        r = self.post("/slots/0?action=restore", {"filename": "s1.bin"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_restored"], n_cached)
        self.assertEqual(self.get("/slots").json()[0]["n_cached"], n_cached)
        # the restored KV is used: the same prompt again only evaluates its last token
        j = self.post("/completion", {"prompt": prompt, "n_predict": 1}).json()
        self.assertEqual(j["timings"]["cache_n"], j["tokens_evaluated"] - 1)
        # restoring a file that is not there
        assert_error_shape(self, self.post("/slots/0?action=restore", {"filename": "missing.bin"}), 400)
        # path traversal: refused, nothing written outside the directory
        outside = os.path.join(os.path.dirname(self.slot_dir), "edgellm-escape-" + uuid.uuid4().hex)
        for name in ["../" + os.path.basename(outside), outside, "a/b.bin", "..", ".", "", "a\\b"]:
            with self.subTest(filename=name):
                assert_error_shape(self, self.post("/slots/0?action=save", {"filename": name}), 400)
                assert_error_shape(self, self.post("/slots/0?action=restore", {"filename": name}), 400)
        self.assertFalse(os.path.exists(outside))
        self.assertEqual(sorted(os.listdir(self.slot_dir)), ["s1.bin"])
        assert_error_shape(self, self.post("/slots/0?action=fly", {"filename": "x"}), 400)
        assert_error_shape(self, self.post("/slots/0", {"filename": "x"}), 400)
        assert_error_shape(self, self.post("/slots/3?action=save", {"filename": "x"}), 404)

    def test_delete_slot(self):
        self.post("/completion", {"prompt": "Something to cache", "n_predict": 2})
        n = self.get("/slots").json()[0]["n_cached"]
        self.assertGreater(n, 0)
        r = request(self.port, "DELETE", "/slots/0")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_erased"], n)
        self.assertEqual(self.get("/slots").json()[0]["n_cached"], 0)
        j = self.post("/completion", {"prompt": "Something to cache", "n_predict": 1}).json()
        self.assertEqual(j["timings"]["cache_n"], 0)

    # -- prefix reuse --

    def test_second_turn_reuses_the_first(self):
        self.assertEqual(request(self.port, "DELETE", "/slots/0").status, 200)
        turn1 = [{"role": "system", "content": "You answer in a few words."},
                 {"role": "user", "content": "Name three colors."}]
        r1 = self.post("/v1/chat/completions", {"messages": turn1, "max_tokens": 8}).json()
        self.assertEqual(r1["timings"]["cache_n"], 0)
        reply = r1["choices"][0]["message"]["content"]
        turn2 = turn1 + [{"role": "assistant", "content": reply},
                         {"role": "user", "content": "And three animals?"}]
        # the shared prefix, in tokens, of the two prompts the server renders
        p1 = self.post("/apply-template", {"messages": turn1}).json()["prompt"]
        p2 = self.post("/apply-template", {"messages": turn2}).json()["prompt"]
        self.assertTrue(p2.startswith(p1))
        t1 = self.post("/tokenize", {"content": p1}).json()["tokens"]
        t2 = self.post("/tokenize", {"content": p2}).json()["tokens"]
        shared = 0
        while shared < min(len(t1), len(t2)) and t1[shared] == t2[shared]:
            shared += 1
        self.assertGreaterEqual(shared, r1["usage"]["prompt_tokens"] - 1)
        r2 = self.post("/v1/chat/completions", {"messages": turn2, "max_tokens": 4}).json()
        cache_n = r2["timings"]["cache_n"]
        self.assertGreaterEqual(cache_n, shared, r2)
        self.assertEqual(r2["usage"]["prompt_tokens_details"]["cached_tokens"], cache_n)
        self.assertEqual(r2["timings"]["prompt_n"], r2["usage"]["prompt_tokens"] - cache_n)
        self.assertLess(r2["timings"]["prompt_n"], r2["usage"]["prompt_tokens"] - r1["usage"]["prompt_tokens"] + 8)
        self.srv.wait_log(rf"POST /v1/chat/completions 200 .*\(cached {cache_n}\)", timeout=10)

    # -- cancellation --
    #
    # How the stop is timed: a keep-alive connection to GET /slots is opened before the
    # disconnect, and polled back to back from the moment the socket is closed. A slot's
    # is_processing turns false only when its generation has returned and the slot has
    # been released, so the first false seen bounds the server-side stop from above; the
    # error is one poll (a few ms on loopback). The per-request log line must also say the
    # request was cancelled; mid-stream, a second bound comes from it: the tokens decoded
    # after the last one the client had received, at the decode speed the line reports,
    # took less than the bound too (tokens in flight at the close count as decoded after
    # it, so this also errs on the long side).

    def measure_stop(self, ka, closed_at, timeout=10):
        while True:
            if not slot_busy(ka):
                took = time.monotonic() - closed_at
                print(f"[stopped {took * 1000:.0f} ms after the disconnect] ", end="", flush=True)
                return took
            if time.monotonic() - closed_at > timeout:
                self.fail(f"slot 0 still generating {timeout} s after the client went away")

    def test_cancel_mid_stream_stops_within_200ms(self):
        before = metrics_values(self.port)
        ka = KeepAlive(self.port)
        try:
            self.assertFalse(slot_busy(ka))
            log_at = self.srv.log_count()
            s = RawStream(self.port, "POST", "/v1/chat/completions",
                          chat_body("Tell me a very long story.", max_tokens=2000, ignore_eos=True,
                                    stream=True))
            s.read_until_events(4)  # the role chunk and three tokens
            self.assertTrue(slot_busy(ka))
            s.abort()
            stopped_after = self.measure_stop(ka, s.closed_at)
        finally:
            ka.close()
        self.assertLess(stopped_after, CANCEL_BOUND_S,
                        f"generation went on for {stopped_after * 1000:.0f} ms after the disconnect")
        received = s.body.count(b"\n\n") - 1  # content events, after the role chunk
        m = self.srv.wait_log(r"POST /v1/chat/completions .*generated (\d+), ([\d.]+) t/s.*cancelled",
                              start=log_at)
        generated, tokens_per_s = int(m.group(1)), float(m.group(2))
        self.assertGreaterEqual(generated, received)
        self.assertLess((generated - received) / tokens_per_s, CANCEL_BOUND_S,
                        f"{generated - received} tokens decoded after the client's last one, at "
                        f"{tokens_per_s} t/s")
        after = metrics_values(self.port)
        self.assertEqual(after["edgellm_requests_cancelled_total"],
                         before["edgellm_requests_cancelled_total"] + 1)
        # the KV keeps the prompt and the reply so far, for the next turn
        self.assertGreaterEqual(self.get("/slots").json()[0]["n_cached"], generated)

    def test_cancel_non_streaming_during_prefill(self):
        before = metrics_values(self.port)
        # ~1500 new tokens (a fresh nonce first, so nothing is cached): seconds of prefill
        prompt = uuid.uuid4().hex + " " + "The quick brown fox jumps over the lazy dog. " * 150
        ka = KeepAlive(self.port)
        try:
            log_at = self.srv.log_count()
            s = RawStream(self.port, "POST", "/completion", {"prompt": prompt, "n_predict": 50})
            deadline = time.monotonic() + 10
            while not slot_busy(ka):
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.005)
            time.sleep(0.3)  # well into the prompt
            slot = json.loads(ka.get_json("/slots")[1])[0]
            self.assertTrue(slot["is_processing"])
            self.assertEqual(slot["next_token"]["n_decoded"], 0, "prefill already finished")
            s.abort()
            stopped_after = self.measure_stop(ka, s.closed_at)
        finally:
            ka.close()
        self.assertLess(stopped_after, CANCEL_BOUND_S,
                        f"prefill went on for {stopped_after * 1000:.0f} ms after the disconnect")
        self.srv.wait_log(r"POST /completion .*generated 0,.*cancelled", start=log_at)
        self.assertEqual(metrics_values(self.port)["edgellm_requests_cancelled_total"],
                         before["edgellm_requests_cancelled_total"] + 1)

    def test_cancel_while_queued(self):
        before = metrics_values(self.port)
        a = RawStream(self.port, "POST", "/completion",
                      {"prompt": "Count to a thousand:", "n_predict": 2000, "ignore_eos": True, "stream": True})
        try:
            a.read_until_events(2)
            log_at = self.srv.log_count()
            b = RawStream(self.port, "POST", "/completion", {"prompt": "Queued", "n_predict": 4})
            deadline = time.monotonic() + 10
            while metrics_values(self.port)["edgellm_queue_depth"] != 1:
                self.assertLess(time.monotonic(), deadline, "request B never queued")
                time.sleep(0.01)
            b.abort()
            while metrics_values(self.port)["edgellm_queue_depth"] != 0:
                self.assertLess(time.monotonic() - b.closed_at, CANCEL_BOUND_S,
                                "the queued request stayed in the queue after its client left")
                time.sleep(0.005)
            self.srv.wait_log(r"POST /completion .*cancelled while waiting for a slot", start=log_at)
            self.assertTrue(json.loads(request(self.port, "GET", "/slots").body)[0]["is_processing"],
                            "the running request A is untouched")
        finally:
            a.abort()
        self.wait_idle()
        self.assertEqual(metrics_values(self.port)["edgellm_requests_cancelled_total"],
                         before["edgellm_requests_cancelled_total"] + 2)

    # -- one slot: in order; a bounded queue --

    def test_one_slot_two_requests_complete_in_order(self):
        results = {}

        def run(name, body):
            s = RawStream(self.port, "POST", "/v1/chat/completions", body)
            s.read_all()
            results[name] = s

        body = chat_body("List some fruits.", max_tokens=12, ignore_eos=True, stream=True)
        ta = threading.Thread(target=run, args=("a", body))
        ta.start()
        ka = KeepAlive(self.port)
        try:
            deadline = time.monotonic() + 30
            while not slot_busy(ka):
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.002)
        finally:
            ka.close()
        tb = threading.Thread(target=run, args=("b", body))
        tb.start()
        ta.join(120)
        tb.join(120)
        for name in "ab":
            events = sse_events(results[name].body)
            self.assertEqual(events[-1], "[DONE]")
            final = json.loads(events[-2])
            self.assertEqual(final["choices"][0]["finish_reason"], "length")
            self.assertEqual(final["timings"]["predicted_n"], 12)

        def token_times(s):
            return [t for t, data in s.chunks
                    if b'"content":"' in data or b'"content": "' in data]

        # a content chunk per token (but for tokens that end no UTF-8 character)
        a_tokens, b_tokens = token_times(results["a"]), token_times(results["b"])
        self.assertTrue(a_tokens and b_tokens)
        self.assertGreater(b_tokens[0], a_tokens[-1],
                           "with -np 1 the second request generated before the first ended")

    def test_queue_is_bounded(self):
        # The default bound (--max-queue 16): one request on the slot, 16 waiting, and every
        # further one is refused at once with 503.
        max_queue, extra = 16, 4
        a = RawStream(self.port, "POST", "/completion",
                      {"prompt": "Count to a thousand:", "n_predict": 2000, "ignore_eos": True, "stream": True})
        waiting = []
        try:
            a.read_until_events(2)
            for i in range(max_queue + extra):
                waiting.append(RawStream(self.port, "POST", "/completion",
                                         {"prompt": f"queued {i}", "n_predict": 1}))
            # the refused ones answer at once; the queued ones say nothing while A runs
            refused = []
            deadline = time.monotonic() + 30
            while len(refused) < extra and time.monotonic() < deadline:
                ready, _, _ = select.select([w.sock for w in waiting if w not in refused], [], [], 0.5)
                for w in waiting:
                    if w.sock in ready:
                        w.read_all()
                        refused.append(w)
            time.sleep(0.3)
            ready, _, _ = select.select([w.sock for w in waiting if w not in refused], [], [], 0)
            self.assertEqual(ready, [], "a queued request was answered while the slot was busy")
            self.assertEqual(len(refused), extra)
            for w in refused:
                self.assertEqual(w.status, 503)
                err = json.loads(w.body)["error"]
                self.assertEqual(err["code"], 503)
                self.assertIn("busy", err["message"])
            self.assertEqual(metrics_values(self.port)["edgellm_queue_depth"], max_queue)
            a.abort()
            # the 16 queued ones are then served, one after the other
            for w in waiting:
                if w not in refused:
                    w.read_all()
                    self.assertEqual(w.status, 200, w.body)
            self.assertEqual(metrics_values(self.port)["edgellm_queue_depth"], 0)
        finally:
            a.close()
            for w in waiting:
                w.close()

    # -- the official openai client --

    def openai_client(self):
        try:
            import openai
        except ImportError:
            self.skipTest(f"the openai package is not installed for {sys.executable} "
                          "(scripts/setup.sh installs it into build/venv; CTest runs this file "
                          "with build/venv/bin/python3)")
        return openai, openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="anything",
                                     timeout=120, max_retries=0)

    def test_openai_chat(self):
        openai, client = self.openai_client()
        r = client.chat.completions.create(model="local", max_tokens=6,
                                           messages=[{"role": "user", "content": "Say hello."}])
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertLessEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.model, "local")
        with self.assertRaises(openai.BadRequestError) as cm:
            client.chat.completions.create(model="local", messages=[{"role": "user", "content": "x"}],
                                           temperature=5)
        self.assertEqual(cm.exception.status_code, 400)

    def test_openai_streaming_chat(self):
        _, client = self.openai_client()
        stream = client.chat.completions.create(
            model="local", max_tokens=8, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Count from one."}])
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertTrue(text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finishes), 1)
        self.assertEqual(chunks[-1].choices, [])
        # a chunk per token, but for tokens that end no character (part of a UTF-8 sequence)
        n_content = len([c for c in chunks if c.choices and c.choices[0].delta.content])
        self.assertTrue(1 <= n_content <= chunks[-1].usage.completion_tokens <= 8)

    def test_openai_completions(self):
        _, client = self.openai_client()
        r = client.completions.create(model="local", prompt="The capital of France is", max_tokens=5)
        self.assertIsInstance(r.choices[0].text, str)
        self.assertLessEqual(r.usage.completion_tokens, 5)
        text = "".join(c.choices[0].text for c in client.completions.create(
            model="local", prompt="One, two,", max_tokens=4, stream=True) if c.choices)
        self.assertTrue(text)


# ---- two slots ---------------------------------------------------------------------------


class TwoSlotServer(unittest.TestCase):
    """-np 2, an alias, no --metrics, no --slot-save-path, no chat page."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "2", "-c", "2048",
                                     "-a", "tiny-gemma", "--no-webui"])
        cls.port = cls.srv.port

    def test_two_requests_interleave(self):
        results = {}

        def run(name):
            s = RawStream(self.port, "POST", "/completion",
                          {"prompt": f"Story {name}:", "n_predict": 40, "ignore_eos": True, "stream": True})
            s.read_all()
            results[name] = s

        threads = [threading.Thread(target=run, args=(n,)) for n in "ab"]
        for t in threads:
            t.start()
        both_busy = False
        ka = KeepAlive(self.port)
        try:
            deadline = time.monotonic() + 60
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                slots = json.loads(ka.get_json("/slots")[1])
                if all(s["is_processing"] for s in slots):
                    both_busy = True
                time.sleep(0.01)
        finally:
            ka.close()
        for t in threads:
            t.join(60)
        self.assertTrue(both_busy, "the two slots never generated at the same time")
        a = [t for t, d in results["a"].chunks if b'"stop":false' in d]
        b = [t for t, d in results["b"].chunks if b'"stop":false' in d]
        self.assertTrue(len(a) > 20 and len(b) > 20, (len(a), len(b)))
        for r in results.values():
            self.assertEqual(json.loads(sse_events(r.body)[-1])["tokens_predicted"], 40)
        # interleaved: each started before the other ended, and most of B's tokens arrived
        # while A was still generating (one after the other, none would)
        self.assertLess(a[0], b[-1])
        self.assertLess(b[0], a[-1])
        self.assertGreaterEqual(sum(a[0] <= t <= a[-1] for t in b), len(b) // 2)
        slots_used = {json.loads(sse_events(r.body)[-1])["id_slot"] for r in results.values()}
        self.assertEqual(slots_used, {0, 1})

    def test_slots_and_alias(self):
        slots = request(self.port, "GET", "/slots").json()
        self.assertEqual([s["id"] for s in slots], [0, 1])
        self.assertEqual({s["n_ctx"] for s in slots}, {1024})  # -c is shared by the slots
        self.assertEqual(request(self.port, "GET", "/v1/models").json()["data"][0]["id"], "tiny-gemma")
        j = request(self.port, "POST", "/v1/chat/completions", chat_body("hi", max_tokens=1)).json()
        self.assertEqual(j["model"], "tiny-gemma")

    def test_metrics_off_is_501(self):
        err = assert_error_shape(self, request(self.port, "GET", "/metrics"), 501)
        self.assertIn("--metrics", err["message"])

    def test_slot_save_needs_a_path(self):
        assert_error_shape(self, request(self.port, "POST", "/slots/0?action=save", {"filename": "a"}), 501)

    def test_no_webui(self):
        assert_error_shape(self, request(self.port, "GET", "/"), 404)


# ---- API keys ----------------------------------------------------------------------------


THINK_TEMPLATE = ("{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n"
                  "{% endfor %}<start_of_turn>model\n<think>\n")


class ServerOptions(unittest.TestCase):
    """Flags no other class exercises: --max-queue, --chat-template (a built-in name and
    Jinja source), --reasoning-format. A template that opens a <think> block in the
    generation prompt makes any model's reply a thinking model's reply."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def start(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", "-c", "512", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv.port

    def chat(self, port, stream=False):
        body = {"messages": [{"role": "user", "content": "Why is the sky blue?"}],
                "max_tokens": 8, "ignore_eos": True, "temperature": 0, "stream": stream}
        r = request(port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        return r

    def test_max_queue_zero_refuses_while_the_slot_is_busy(self):
        port = self.start("-np", "1", "--max-queue", "0")
        # an idle slot still serves a request at once
        r = request(port, "POST", "/completion", {"prompt": "hi", "n_predict": 1})
        self.assertEqual(r.status, 200, r)
        a = RawStream(port, "POST", "/completion",
                      {"prompt": "Count to a thousand:", "n_predict": 2000, "ignore_eos": True,
                       "stream": True})
        try:
            a.read_until_events(2)
            r = request(port, "POST", "/completion", {"prompt": "second", "n_predict": 1})
            self.assertEqual(r.status, 503, r)
            self.assertIn("busy", r.json()["error"]["message"])
        finally:
            a.close()

    def test_gpu_layers_are_accepted_and_said_once(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "512", "-ngl", "99"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        self.assertEqual(srv.log_text().count("-ngl: edgellm runs on the CPU"), 1, srv.log_text())

    def test_builtin_chat_template_by_name(self):
        port = self.start("--chat-template", "chatml")
        r = request(port, "POST", "/apply-template",
                    {"messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")

    def test_reasoning_goes_out_as_reasoning_content(self):
        port = self.start("--chat-template", THINK_TEMPLATE)
        r = request(port, "POST", "/apply-template",
                    {"messages": [{"role": "user", "content": "hi"}]})
        # (jinja2 drops a template's one trailing newline, as transformers renders it)
        self.assertTrue(r.json()["prompt"].endswith("<start_of_turn>model\n<think>"), r.json())
        # 8 tokens that never close the block: all of them reasoning, no content
        msg = self.chat(port).json()["choices"][0]["message"]
        self.assertTrue(msg.get("reasoning_content"), msg)
        self.assertEqual(msg["content"], "")
        events = [json.loads(e[6:]) for e in self.chat(port, stream=True).body.decode().split("\n\n")
                  if e.startswith("data: {")]
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        self.assertTrue(any(d.get("reasoning_content") for d in deltas))
        self.assertFalse(any(d.get("content") for d in deltas))
        self.assertEqual("".join(d.get("reasoning_content") or "" for d in deltas),
                         msg["reasoning_content"])

    def test_reasoning_format_none_keeps_it_in_the_content(self):
        port = self.start("--chat-template", THINK_TEMPLATE, "--reasoning-format", "none")
        msg = self.chat(port).json()["choices"][0]["message"]
        self.assertNotIn("reasoning_content", msg)
        self.assertTrue(msg["content"], msg)


class ApiKey(unittest.TestCase):
    KEY = "sk-test-" + uuid.uuid4().hex

    @classmethod
    def setUpClass(cls):
        model = need_model(GEMMA)
        keydir = tempfile.mkdtemp(prefix="edgellm-keys-")
        cls.addClassCleanup(lambda: shutil.rmtree(keydir, ignore_errors=True))
        cls.file_key = "file-key-" + uuid.uuid4().hex
        keyfile = os.path.join(keydir, "keys.txt")
        with open(keyfile, "w") as f:
            f.write(f"# a comment\n\n{cls.file_key}\n")
        cls.flag = start_server(cls, ["-m", model, "--port", "0", "--api-key", cls.KEY, "--no-warmup"])
        cls.file = start_server(cls, ["-m", model, "--port", "0", "--api-key-file", keyfile, "--no-warmup"])

    def check(self, srv, key):
        body = chat_body("hi", max_tokens=1)
        for path, b in [("/v1/chat/completions", body), ("/completion", {"prompt": "x", "n_predict": 1}),
                        ("/tokenize", {"content": "x"})]:
            with self.subTest(path=path, key="none"):
                err = assert_error_shape(self, request(srv.port, "POST", path, b), 401)
                self.assertEqual(err["type"], "authentication_error")
            with self.subTest(path=path, key="wrong"):
                assert_error_shape(self, request(srv.port, "POST", path, b,
                                                 headers={"Authorization": "Bearer " + key + "x"}), 401)
                assert_error_shape(self, request(srv.port, "POST", path, b,
                                                 headers={"Authorization": "Bearer " + key[:-1]}), 401)
                assert_error_shape(self, request(srv.port, "POST", path, b,
                                                 headers={"Authorization": key}), 401)
        for endpoint in ["/slots", "/props"]:
            assert_error_shape(self, request(srv.port, "GET", endpoint), 401)
        r = request(srv.port, "POST", "/v1/chat/completions", body, headers={"Authorization": "Bearer " + key})
        self.assertEqual(r.status, 200, r)
        r = request(srv.port, "POST", "/v1/chat/completions", body, headers={"X-Api-Key": key})
        self.assertEqual(r.status, 200, r)
        # public without a key
        self.assertEqual(request(srv.port, "GET", "/health").status, 200)
        self.assertEqual(request(srv.port, "GET", "/v1/models").status, 200)

    def test_api_key_flag(self):
        self.check(self.flag, self.KEY)

    def test_api_key_file(self):
        self.check(self.file, self.file_key)
        assert_error_shape(self, request(self.file.port, "GET", "/slots",
                                         headers={"Authorization": "Bearer # a comment"}), 401)

    def test_no_warning_on_loopback_with_key(self):
        self.assertNotIn("WARNING", self.flag.log_text())


# ---- the command line --------------------------------------------------------------------


def run_cli(args, timeout=60):
    return subprocess.run([ARGS.bin, "serve", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


SEED000_DRAFT_FLAGS = ["-md", "/data/ai/models/qwen2.5-0.5b-instruct-q4_k_m.gguf",
                       "--draft-max", "4", "--draft-min", "2", "--draft-p-min", "0.6", "-ngld", "99"]


def seed000_flags(model, port):
    """Seed 000's llama-server command line without its -m (given) and draft flags."""
    return ["-m", model, "--host", "127.0.0.1", "--port", str(port), "--parallel", "1",
            "--no-cont-batching", "--threads", "4", "--threads-batch", "4", "--ctx-size", "1024",
            "--flash-attn", "on", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--mlock",
            "--temp", "0.7", "--top-p", "0.8", "--repeat-penalty", "1.05", "-n", "256"]


class CommandLine(unittest.TestCase):
    def test_unknown_flag_is_named(self):
        r = run_cli(["--port", "0", "--frobnicate", "3"])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--frobnicate", r.stderr)

    def test_seed000_draft_flags_are_refused(self):
        # seed 000's whole command line, draft model included: refused before loading anything
        flags = seed000_flags("/data/ai/models/qwen2.5-1.5b-instruct-q4_k_m.gguf", 0)
        flags[2:2] = SEED000_DRAFT_FLAGS[:2]
        r = run_cli(flags + SEED000_DRAFT_FLAGS[2:])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("speculative decoding", r.stderr)
        self.assertIn("-md", r.stderr)
        # each alone, named in the message (an alias by its first name: --model-draft is -md)
        for flag, named in [("--draft-max", "--draft-max"), ("--draft-min", "--draft-min"),
                            ("--draft-p-min", "--draft-p-min"), ("-ngld", "-ngld"),
                            ("--model-draft", "-md"), ("--n-gpu-layers-draft", "-ngld")]:
            with self.subTest(flag=flag):
                r = run_cli(["--port", "0", flag, "1"])
                self.assertEqual(r.returncode, 2, r)
                self.assertIn(named + ":", r.stderr)
                self.assertIn("not supported", r.stderr)

    def test_bad_values(self):
        for flags, needle in [(["--port", "70000"], "--port"), (["-np", "0"], "-np"),
                              (["--cache-type-k", "q4_0"], "--cache-type-k"),
                              (["--flash-attn", "maybe"], "--flash-attn"),
                              (["--api-key-file", "/nonexistent/keys"], "/nonexistent/keys")]:
            with self.subTest(flags=flags):
                r = run_cli(["-m", "/nonexistent/model.gguf"] + flags)
                self.assertEqual(r.returncode, 2, r)
                self.assertIn(needle, r.stderr)

    def test_missing_model_file(self):
        r = run_cli(["-m", "/nonexistent/model.gguf", "--port", "0"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/nonexistent/model.gguf", r.stderr)

    def test_corrupt_model_file_is_a_clear_error(self):
        # a file that starts like a GGUF and then is garbage: /health says loading, then the
        # process ends with exit code 1 and a reason; never a crash
        with tempfile.NamedTemporaryFile(suffix=".gguf", delete=False) as f:
            f.write(b"GGUF" + struct.pack("<I", 3) + struct.pack("<QQ", 7, 1 << 40) + os.urandom(4096))
            path = f.name
        try:
            r = run_cli(["-m", path, "--port", "0"])
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("cannot load the model", r.stderr)
            self.assertNotIn("internal error", r.stderr)
        finally:
            os.unlink(path)

    def test_without_model_flag_serves_the_default_model(self):
        # `edgellm serve` without -m serves what scripts/fetch-models.sh installed
        qwen = model_path(QWEN)
        if not qwen:
            self.skipTest(f"the default model {QWEN} is not installed (scripts/fetch-models.sh)")
        env = dict(os.environ, EDGELLM_MODELS=os.path.dirname(qwen))
        env.pop("EDGELLM_MODEL", None)
        proc = subprocess.Popen([ARGS.bin, "serve", "--port", "0", "-c", "256"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        try:
            port = None
            for raw in proc.stderr:
                m = re.search(r"listening on http://\S+:(\d+)", raw.decode("utf-8", "replace"))
                if m:
                    port = int(m.group(1))
                    break
            self.assertIsNotNone(port, "no 'listening on' line")
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    if request(port, "GET", "/health", timeout=10).status == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            r = request(port, "GET", "/v1/models")
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.body)["data"][0]["id"], os.path.basename(qwen))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            proc.stderr.close()


# ---- the seeds, on the default model -----------------------------------------------------


class Seed000CarAssistant(unittest.TestCase):
    """shared/seeds/000: a single-user car assistant on 127.0.0.1:8899."""

    @classmethod
    def setUpClass(cls):
        model = need_model(QWEN)
        port = port_or_free(8899)
        cls.srv = start_server(cls, seed000_flags(model, port), port=port, ready=False)
        cls.port = port
        # the seed's warm-up script: until curl -s /health | grep -q ok; do sleep 1; done
        cls.health_bodies = []
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, "never healthy:\n" + cls.srv.log_text()
            try:
                r = request(cls.port, "GET", "/health", timeout=10)
                cls.health_bodies.append((r.status, r.body))
                if b"ok" in r.body:
                    break
            except OSError:
                pass
            time.sleep(0.05)

    def test_health_poll_sees_ok_only_when_ready(self):
        status, _ = self.health_bodies[-1]
        self.assertEqual(status, 200, "the seed's grep -q ok matched a body that was not ready")
        self.assertTrue(any(s == 503 for s, _ in self.health_bodies), self.health_bodies[:2])

    def test_warmup_then_stream_then_broken_stream(self):
        # 1. warm-up: one token
        r = request(self.port, "POST", "/v1/chat/completions",
                    b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}',
                    headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["usage"]["completion_tokens"], 1)
        # 2. the streaming chat, exactly as the seed sends it
        body = """{
    "messages": [
      {"role": "system", "content": "你是车载助手，回答简短口语化。"},
      {"role": "user", "content": "今晚吃什么好"}
    ],
    "max_tokens": 128,
    "stream": true
  }"""
        s = RawStream(self.port, "POST", "/v1/chat/completions", body).read_all()
        self.assertEqual(s.status, 200)
        events = sse_events(s.body)
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        self.assertEqual(objs[0]["choices"][0]["delta"]["role"], "assistant")
        text = "".join(o["choices"][0]["delta"].get("content") or "" for o in objs)
        self.assertRegex(text, r"[\u4e00-\u9fff]", "the answer has no Chinese")
        self.assertIn(objs[-1]["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertLessEqual(objs[-1]["timings"]["predicted_n"], 128)
        # 3. a second turn: the history is kept, so its prefix comes from the cache
        history = json.loads(body)["messages"] + [{"role": "assistant", "content": text},
                                                  {"role": "user", "content": "换一个"}]
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      {"messages": history, "max_tokens": 2, "stream": True}).read_all()
        final = json.loads(sse_events(s.body)[-2])
        self.assertGreater(final["timings"]["cache_n"], 20)
        # 4. a broken stream, then DELETE /slots/0 as the seed's client does
        s = RawStream(self.port, "POST", "/v1/chat/completions", body)
        s.read_until_events(3)
        s.abort()
        r = request(self.port, "DELETE", "/slots/0")
        self.assertEqual(r.status, 200, r)
        slot = request(self.port, "GET", "/slots").json()[0]
        self.assertEqual((slot["is_processing"], slot["n_cached"]), (False, 0))
        r = request(self.port, "POST", "/v1/chat/completions",
                    b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}')
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["timings"]["cache_n"], 0)
        self.assertIn("cancelled", self.srv.log_text())

    def test_flags_took_effect(self):
        j = request(self.port, "GET", "/props").json()
        settings = j["default_generation_settings"]
        self.assertEqual(settings["n_ctx"], 1024)
        self.assertEqual(j["total_slots"], 1)
        p = settings["params"]
        self.assertAlmostEqual(p["temperature"], 0.7, places=5)
        self.assertAlmostEqual(p["top_p"], 0.8, places=5)
        self.assertAlmostEqual(p["repeat_penalty"], 1.05, places=5)
        self.assertEqual(p["n_predict"], 256)
        self.assertIn("<|im_start|>", j["chat_template"])

    def test_startup_log(self):
        log = self.srv.log_text()
        self.assertIn("1 slot of 1024 tokens", log)
        self.assertIn("KV q8_0", log)
        self.assertNotIn("WARNING", log)  # loopback only


class Seed001RaspberryPi(unittest.TestCase):
    """shared/seeds/001: a Raspberry Pi server on 0.0.0.0:8088 with --log-disable."""

    @classmethod
    def setUpClass(cls):
        model = need_model(QWEN)
        # --log-disable: no "listening" line to read a port from, so the seed's own port
        # 8088 when it is free here.
        port = port_or_free(8088)
        cls.srv = start_server(cls, ["--model", model, "--host", "0.0.0.0", "--port", port,
                                     "--ctx-size", "2048", "--threads", "3", "--n-gpu-layers", "0",
                                     "--batch-size", "256", "--mlock", "--log-disable"], port=port)
        cls.port = port

    def test_completion_as_the_seed_reads_it(self):
        body = """{
    "prompt": "解释Rust中的所有权系统",
    "n_predict": 128,
    "temperature": 0.7,
    "stream": false
  }"""
        r = request(self.port, "POST", "/completion", body, headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        # curl ... | jq -r '.content'
        self.assertIsInstance(j["content"], str)
        self.assertRegex(j["content"], r"[\u4e00-\u9fff]")
        # the Rust client: struct CompletionResponse { content: String, tokens_predicted: u32,
        # tokens_per_second: f64 }
        self.assertIsInstance(j["tokens_predicted"], int)
        self.assertTrue(1 <= j["tokens_predicted"] <= 128)
        self.assertIsInstance(j["tokens_per_second"], float)
        self.assertGreater(j["tokens_per_second"], 0)
        self.assertAlmostEqual(j["tokens_per_second"], j["timings"]["predicted_per_second"], places=6)
        self.assertAlmostEqual(j["generation_settings"]["temperature"], 0.7, places=5)

    def test_log_disable_and_warning(self):
        request(self.port, "GET", "/v1/models")
        log = self.srv.log_text()
        self.assertNotIn("GET /v1/models", log)
        self.assertNotIn("listening on http://", log)
        # the safety warning is not a log line: it is printed even with --log-disable
        self.assertIn("WARNING: listening on 0.0.0.0 without --api-key", log)


class Seed002Agent(unittest.TestCase):
    """shared/seeds/002: an OpenAI-compatible endpoint for an agent, -np 2 on 0.0.0.0:8080."""

    @classmethod
    def setUpClass(cls):
        model = need_model(QWEN)
        port = port_or_free(8080)
        cls.srv = start_server(cls, ["-m", model, "-c", "4096", "-t", "4", "--host", "0.0.0.0",
                                     "--port", port, "-np", "2"], port=port)
        cls.port = port

    def test_startup_warns_about_listening_beyond_loopback(self):
        self.assertRegex(self.srv.log_text(),
                         r"WARNING: listening on 0\.0\.0\.0 without --api-key")
        self.assertIn("2 slots of 2048 tokens", self.srv.log_text())

    def test_chat_json_answer(self):
        body = """{ "model": "local", "messages": [{"role": "user", "content": "返回一个 JSON包含 name 和 age 两个字段"}], "temperature": 0.1 }"""
        # curl http://localhost:8080/... : localhost, as the seed writes it
        r = request(self.port, "POST", "/v1/chat/completions", body, host="localhost",
                    headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["model"], "local")
        msg = j["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        self.assertEqual(j["choices"][0]["finish_reason"], "stop")
        self.assertIn('"name"', msg["content"])
        self.assertIn('"age"', msg["content"])

    WEATHER_TOOL = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}

    def test_tool_call(self):
        # An agent's tool call comes back as OpenAI's tool_calls (the model writes it as
        # text; the server finds it), with finish_reason tool_calls and the arguments as a
        # JSON string; streamed, as one tool_calls delta before the final chunk.
        body = {"model": "local", "temperature": 0, "tools": [self.WEATHER_TOOL],
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
        r = request(self.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        choice = r.json()["choices"][0]
        self.assertEqual(choice["finish_reason"], "tool_calls", choice)
        call = choice["message"]["tool_calls"][0]
        self.assertEqual(call["type"], "function")
        self.assertTrue(call["id"].startswith("call_"))
        self.assertEqual(call["function"]["name"], "get_weather")
        self.assertEqual(json.loads(call["function"]["arguments"]).get("city"), "Paris")

        body["stream"] = True
        r = request(self.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        events = [e for e in r.body.decode().split("\n\n") if e.startswith("data: {")]
        chunks = [json.loads(e[6:]) for e in events]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        self.assertFalse(any(d.get("content") for d in deltas),
                         "the call must not leak out as content")
        calls = [d["tool_calls"] for d in deltas if "tool_calls" in d]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][0]["function"]["name"], "get_weather")
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "tool_calls")

        # The openai package reads it as a tool call, and the next turn (the tool's answer)
        # renders and answers.
        try:
            import openai
        except ImportError:
            self.skipTest("the openai package is not installed (scripts/setup.sh makes build/venv)")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x")
        out = client.chat.completions.create(model="local", temperature=0, tools=[self.WEATHER_TOOL],
                                             messages=body["messages"])
        tc = out.choices[0].message.tool_calls[0]
        self.assertEqual(tc.function.name, "get_weather")
        follow = client.chat.completions.create(
            model="local", temperature=0, max_tokens=40, tools=[self.WEATHER_TOOL],
            messages=body["messages"] + [
                {"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
                {"role": "tool", "tool_call_id": tc.id, "content": "sunny, 24 C"}])
        # (what the 1.5B model makes of the tool's answer varies; the turn must be taken)
        msg = follow.choices[0].message
        self.assertTrue(msg.content or msg.tool_calls, follow)


# ---- the chat page in headless Chromium --------------------------------------------------


def find_browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    return chromium, driver


class ChatPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        chromium, driver = find_browser()
        if not chromium or not driver:
            raise unittest.SkipTest("chromium or chromedriver is not installed (Debian packages "
                                    "chromium, chromium-driver; scripts/setup.sh installs them)")
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError:
            raise unittest.SkipTest(f"selenium is not importable by {sys.executable} (Debian package "
                                    "python3-selenium; build/venv sees it)")
        model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", model, "--port", "0", "-n", "48"])
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1000,800"):
            opts.add_argument(a)
        # chromedriver and the browser it starts in a process group of their own, killed
        # whole at the end (also on SIGTERM), and with this process (PR_SET_PDEATHSIG)
        service = Service(driver, popen_kw={"start_new_session": True, "preexec_fn": _die_with_parent})
        cls.driver = webdriver.Chrome(service=service, options=opts)
        pgid = service.process.pid
        _live_groups.add(pgid)
        cls.addClassCleanup(kill_group, pgid)
        cls.addClassCleanup(cls.driver.quit)

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = predicate()
            if v:
                return v
            time.sleep(0.02)
        self.fail(f"timed out waiting for {what}; page: "
                  f"{self.driver.find_element('id', 'log').text[:500]!r}")

    def test_send_streams_an_answer_then_stop(self):
        d = self.driver
        from selenium.webdriver.common.by import By
        d.get(f"http://127.0.0.1:{self.srv.port}/")
        self.wait(lambda: d.find_element(By.ID, "model").text, 30, "the model name")
        # record every change of the reply's text, to see it arrive in pieces
        d.execute_script("""
            window.__updates = [];
            new MutationObserver(() => {
              const r = document.querySelector('.msg.assistant:last-of-type');
              if (r) window.__updates.push(r.textContent.length);
            }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
        """)
        d.find_element(By.ID, "input").send_keys("Write a short poem about the sea.")
        d.find_element(By.ID, "send").click()
        self.wait(lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant.done"), 120, "the answer")
        reply = d.find_element(By.CSS_SELECTOR, ".msg.assistant.done").text
        self.assertTrue(reply.strip(), "empty answer")
        updates = [n for n in d.execute_script("return window.__updates;") if n > 0]
        self.assertGreater(len(set(updates)), 2, f"the answer did not stream: {updates}")
        stats = d.find_element(By.CSS_SELECTOR, ".stats").text
        self.assertRegex(stats, r"\d+ tokens, [\d.]+ tokens/s")
        self.assertEqual(d.find_element(By.CSS_SELECTOR, ".msg.user").text,
                         "Write a short poem about the sea.")

        # Stop: the page's fetch is given max_tokens and ignore_eos for this message so that
        # the answer is long for sure; the Stop button is what is tested.
        d.execute_script("""
            const orig = window.fetch;
            window.fetch = (url, opts) => {
              if (url === '/v1/chat/completions') {
                const b = JSON.parse(opts.body); b.max_tokens = 3000; b.ignore_eos = true;
                opts = Object.assign({}, opts, {body: JSON.stringify(b)});
              }
              return orig(url, opts);
            };
        """)
        log_at = self.srv.log_count()
        d.find_element(By.ID, "input").send_keys("Now a long one.")
        d.find_element(By.ID, "send").click()
        replies = lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        self.wait(lambda: len(replies()) == 2 and len(replies()[1].text) > 5, 60, "the second answer")
        self.assertTrue(request(self.srv.port, "GET", "/slots").json()[0]["is_processing"])
        d.find_element(By.ID, "stop").click()
        self.wait(lambda: any(e.text == "stopped" for e in d.find_elements(By.CSS_SELECTOR, ".stats")),
                  10, "the page to say stopped")
        self.assertTrue(d.find_element(By.ID, "send").is_enabled())
        m = self.srv.wait_log(r"POST /v1/chat/completions .*generated (\d+).*cancelled", start=log_at,
                              timeout=10)
        self.assertLess(int(m.group(1)), 3000)
        self.assertFalse(request(self.srv.port, "GET", "/slots").json()[0]["is_processing"])


# ---- main --------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--bin", default=None)
    parser.add_argument("--root", default=None)
    ours, rest = parser.parse_known_args()
    ARGS.root = os.path.abspath(ours.root or os.path.join(HERE, "..", ".."))
    ARGS.bin = os.path.abspath(ours.bin or os.path.join(ARGS.root, "build", "bin", "edgellm"))
    if not os.access(ARGS.bin, os.X_OK):
        print(f"test_serve: {ARGS.bin} is not an executable; build it first", file=sys.stderr)
        return 1
    print(f"test_serve: {ARGS.bin} with {sys.executable}", flush=True)
    t0 = time.monotonic()
    prog = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2)
    r = prog.result
    # A class skipped in setUpClass counts once in r.skipped and not in r.testsRun.
    skipped_cases = sum(1 for t, _ in r.skipped if isinstance(t, unittest.TestCase))
    passed = r.testsRun - skipped_cases - len(r.failures) - len(r.errors)
    print(f"test_serve: {passed} passed, {len(r.failures) + len(r.errors)} failed, "
          f"{skipped_cases} tests and {len(r.skipped) - skipped_cases} classes skipped "
          f"in {time.monotonic() - t0:.0f} s", flush=True)
    _stop_all_servers()
    if not r.wasSuccessful():
        return 1
    if r.skipped and passed == 0:
        return 77  # everything skipped: CTest's SKIP_RETURN_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
