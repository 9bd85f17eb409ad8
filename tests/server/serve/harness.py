"""What the end-to-end tests of `edgellm serve` share (tests/server/test_serve.py runs them).

The argument namespace ARGS (--bin, --root; filled in place by the runner's main()), the
models' lookup and the skip when one is missing, the server as a child process (`Server`,
`start_server`) and the stopping of every one of them at exit, on SIGTERM (CTest's
timeout) and, via PR_SET_PDEATHSIG, when this process dies; HTTP on a fresh connection
(`request`), on a kept-alive one (`KeepAlive`) and byte for byte (`RawStream`); SSE
framing; the error and timings shapes; `run_cli`; a Gemma 3 270M server for a class
(`GemmaServer`); the tools of the tool-call tests.

State (the live servers, the models' paths, ARGS) exists once, here: the feature files
import these names and never rebind them.
"""

import argparse
import atexit
import ctypes
import glob
import http.client
import importlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import types
import unittest

ARGS = argparse.Namespace(bin=None, root=None)

# The bound of the acceptance: generation stops within 200 ms of the disconnect.
CANCEL_BOUND_S = 0.200
LOAD_TIMEOUT_S = 180  # loading on a loaded 2-core machine: generous
REQUEST_TIMEOUT_S = 180

GEMMA = "gemma3-270m"
QWEN = "qwen2.5-coder-1.5b"
QWEN_SMALL = "qwen2.5-coder-0.5b"  # tool calls: follows tool prompts, faster than the 1.5B


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

    def __init__(self, args, port=None, prefix=(), env=None, cwd=None):
        self.args = [str(a) for a in args]
        self.lines = []  # (monotonic time, text)
        self.cond = threading.Condition()
        self.eof = False
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([*prefix, ARGS.bin, "serve", *self.args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=_die_with_parent, cwd=cwd,
                                     env=None if env is None else dict(os.environ, **env))
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

    def wait_ready(self, timeout=LOAD_TIMEOUT_S, wait_repacked=True):
        """Polls GET /health until 200, then (wait_repacked) waits for the repack after
        start-up; returns every (status, body) seen before the 200."""
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
                    if wait_repacked:
                        self.wait_repacked()
                    return seen
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"the server was not ready within {timeout} s:\n{self.log_text()}")

    def wait_repacked(self, timeout=120):
        """On a first start (no repack cache file) the weights are repacked for decode after
        /health says ok, and requests answered before the switch may differ from later ones
        in the last bits of decode (docs/kernels.md): tests that compare answers start
        after every model's switch."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                text = "\n".join(t for _, t in self.lines)
                # (a model refused after loading, e.g. over --memory-limit, is never
                # repacked: its load's lines end with "cannot use the model")
                left_for_later = sum(
                    1 for load in text.split("edgellm serve: loading ")
                    if "repacking for decode left for after start-up" in load
                    and "error: cannot use the model" not in load)
                done = len(re.findall(r"repacked \d+ MiB of weights for decode after start-up|"
                                      r"no memory to repack the weights", text))
                if done >= left_for_later:
                    return
                if self.eof:
                    raise AssertionError(f"edgellm serve exited ({self.proc.poll()}) before its "
                                         f"repack was done:\n{self.log_text_locked()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the repack was not done within {timeout} s:\n"
                                         f"{self.log_text_locked()}")
                self.cond.wait(left)

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


def memory_cgroup(test, name, limit_bytes):
    """A memory cgroup of its own under ours with this limit, removed at the test's end (v1
    here; v2 needs the memory controller delegated to a child, which a shell's cgroup
    usually cannot do), and the command prefix that runs a program in it (a shell that
    moves itself, then execs). Skips the test where none can be made."""
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    base = None
    for line in lines:
        if ":memory:" in line:
            base = ("/sys/fs/cgroup/memory" + line.split(":memory:", 1)[1], "memory.limit_in_bytes")
        elif line.startswith("0::") and base is None:
            base = ("/sys/fs/cgroup" + line[3:], "memory.max")
    if base is None:
        test.skipTest("no cgroup entry in /proc/self/cgroup")
    cg = os.path.join(base[0], "%s-%d" % (name, os.getpid()))
    try:
        os.mkdir(cg)
        test.addCleanup(lambda: os.path.isdir(cg) and os.rmdir(cg))
        if not os.path.exists(os.path.join(cg, base[1])):
            test.skipTest("no memory controller in a child cgroup of %s" % base[0])
        with open(os.path.join(cg, base[1]), "w") as f:
            f.write(str(limit_bytes))
    except OSError as e:
        test.skipTest("cannot make a memory cgroup here: %s" % e)
    return cg, ("sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$0" "$@"' % cg)


def start_server(test_class, args, port=None, ready=True, prefix=(), cwd=None):
    """Starts a server for a test class and registers its stop (runs even if setUpClass fails)."""
    s = Server(args, port=port, prefix=prefix, cwd=cwd)
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


# ---- Gemma 3 270M for a class, SSE objects (constrained output, sampling, embeddings) ----


def sse_objects(tc, reply, done=True):
    """The JSON payloads of an SSE body; with done, it ends with exactly one [DONE]."""
    events = sse_events(reply.body)
    if done:
        tc.assertEqual(events[-1], "[DONE]", events[-3:])
        tc.assertEqual(events.count("[DONE]"), 1)
        events = events[:-1]
    return [json.loads(e) for e in events]


class GemmaServer(unittest.TestCase):
    """A base: one Gemma 3 270M server for the class (-np 1), and short helpers."""

    FLAGS = []

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", "2048",
                                     *cls.FLAGS])
        cls.port = cls.srv.port

    def post(self, path, body):
        return request(self.port, "POST", path, body)

    def ok(self, path, body):
        r = self.post(path, body)
        self.assertEqual(r.status, 200, f"{path} {body}: {r}")
        return r.json()

    def chat(self, content, **kw):
        return self.ok("/v1/chat/completions", chat_body(content, **kw))

    def native_text(self, body):
        return self.ok("/completion", body)["content"]


# ---- the tools of the tool-call tests (tool calls and the openai client) -----------------

MUSIC_TOOL = {"type": "function", "function": {
    "name": "play_music", "description": "Play a song",
    "parameters": {"type": "object", "properties": {
        "song": {"type": "string"}, "volume": {"type": "integer", "minimum": 0, "maximum": 10}},
        "required": ["song"]}}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOLS = [MUSIC_TOOL, WEATHER_TOOL]


# ---- the command line --------------------------------------------------------------------


def run_cli(args, timeout=60):
    return subprocess.run([ARGS.bin, "serve", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


# ---- the runners (tests/server/test_serve.py, tests/clients/run_clients.py) ---------------


def collect_test_classes(directory, name):
    """One module object holding the unittest classes of every test_*.py in `directory` (on
    sys.path), for unittest.main: its loader takes them in the order of their names."""
    tests = types.ModuleType(name)
    for path in sorted(glob.glob(os.path.join(directory, "test_*.py"))):
        module = importlib.import_module(os.path.basename(path)[:-3])
        for cls_name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase) \
                    and obj.__module__ == module.__name__:
                if hasattr(tests, cls_name):
                    raise SystemExit(f"{name}: two test classes named {cls_name} "
                                     f"({getattr(tests, cls_name).__module__}.py and {path})")
                setattr(tests, cls_name, obj)
    return tests


def run_test_classes(name, here, collect, show_skips=False, **main_kw):
    """--bin/--root, then unittest.main (main_kw: its own options) over collect() with the rest
    of the command line, a
    summary line, every server stopped. The exit status: 1 on a failure, 77 (CTest's
    SKIP_RETURN_CODE) when everything was skipped, else 0."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--bin", default=None)
    parser.add_argument("--root", default=None)
    ours, rest = parser.parse_known_args()
    ARGS.root = os.path.abspath(ours.root or os.path.join(here, "..", ".."))
    ARGS.bin = os.path.abspath(ours.bin or os.path.join(ARGS.root, "build", "bin", "edgellm"))
    if not os.access(ARGS.bin, os.X_OK):
        print(f"{name}: {ARGS.bin} is not an executable; build it first", file=sys.stderr)
        return 1
    print(f"{name}: {ARGS.bin} with {sys.executable}", flush=True)
    t0 = time.monotonic()
    prog = unittest.main(module=collect(), argv=[sys.argv[0], *rest], exit=False, verbosity=2, **main_kw)
    r = prog.result
    # A class skipped in setUpClass counts once in r.skipped and not in r.testsRun.
    skipped_cases = sum(1 for t, _ in r.skipped if isinstance(t, unittest.TestCase))
    passed = r.testsRun - skipped_cases - len(r.failures) - len(r.errors)
    if show_skips:
        for test, reason in r.skipped:
            print(f"{name}: skipped {test}: {reason}", flush=True)
    print(f"{name}: {passed} passed, {len(r.failures) + len(r.errors)} failed, "
          f"{skipped_cases} tests and {len(r.skipped) - skipped_cases} classes skipped "
          f"in {time.monotonic() - t0:.0f} s", flush=True)
    _stop_all_servers()
    if not r.wasSuccessful():
        return 1
    if r.skipped and passed == 0:
        return 77
    return 0
