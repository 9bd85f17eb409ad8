"""The limits against slow and greedy clients: each flag (--max-header-bytes,
--max-body-bytes, --header-timeout, --body-timeout, --idle-timeout, --max-connections and its
llama-server spelling --threads-http, --max-queue) answers its status, and the log says so
once, naming the peer and the flag; the router applies them to its own connections too."""

import json
import os
import re
import shutil
import socket
import tempfile
import time
import unittest

from harness import GEMMA, RawStream, Server, need_model, request


class Conn:
    """A raw connection: the server gets exactly the bytes sent."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def readable(self):
        self.sock.setblocking(False)
        try:
            data = self.sock.recv(65536)
            self.buf += data
            return True  # bytes, or the end (b"")
        except BlockingIOError:
            return False
        finally:
            self.sock.setblocking(True)

    def reply(self):
        """(status, headers with lower-case names, body) of the next answer."""
        while b"\r\n\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError(f"closed without an answer: {self.buf!r}")
            self.buf += data
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                break
            self.buf += data
        body, self.buf = self.buf[:n], self.buf[n:]
        return int(lines[0].split(" ")[1]), headers, body

    def closed_within(self, seconds):
        """True once the server closed the connection (unread answer bytes skipped)."""
        self.sock.settimeout(seconds)
        try:
            while self.sock.recv(65536):
                pass
            return True
        except (socket.timeout, TimeoutError):
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


class LimitsTestCase(unittest.TestCase):
    srv = None  # set by each class

    def assert_logged_once(self, flag, text):
        """The log has one refusal line naming `flag`, and it says `text`: looked for once
        every line before a fresh request's access-log line has been read (so a second
        line, had it been written, is seen)."""
        marker = f"/no-such-path-{time.monotonic_ns()}"
        request(self.srv.port, "GET", marker)
        self.srv.wait_log(re.escape(marker))
        lines = [ln for ln in self.srv.log_text().splitlines()
                 if "refused 127.0.0.1: " in ln and (f", {flag})" in ln or f", {flag};" in ln)]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn(text, lines[0])

    def assert_error(self, status, body, code):
        self.assertEqual(status, code, body)
        self.assertEqual(json.loads(body)["error"]["code"], code)


class ServeLimits(LimitsTestCase):
    """One server with small limits; each test exercises one limit (the log rate-limits
    a peer's refusals per limit, so each limit's line is looked for once)."""

    @classmethod
    def setUpClass(cls):
        model = need_model(GEMMA)
        cls.srv = Server(["-m", model, "--port", "0", "-c", "512", "-np", "1", "--max-queue", "0",
                          "--max-header-bytes", "4K", "--max-body-bytes", "64KiB",
                          "--header-timeout", "1", "--body-timeout", "2", "--idle-timeout", "3",
                          "--threads-http", "4", "-to", "600"])
        cls.addClassCleanup(cls.srv.stop)
        cls.port = cls.srv.port
        cls.srv.wait_ready()

    def setUp(self):
        # Room for every test: an earlier test's connections (a stream being cancelled, held
        # ones just closed) leave their threads a moment after the client closes; four served
        # at once show they are gone, and their own threads end at once on close.
        for c in self.hold(4):
            c.close()
        time.sleep(0.5)

    def test_head_larger_than_max_header_bytes_is_431(self):
        for _ in range(3):
            c = Conn(self.port)
            c.send(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
            status, headers, body = c.reply()
            self.assert_error(status, body, 431)
            self.assertEqual(headers["connection"], "close")
            self.assertTrue(c.closed_within(5))
            c.close()
        self.assert_logged_once(  # three refusals, one line
            "--max-header-bytes", "request head larger than 4096 bytes (431, --max-header-bytes)")

    def test_body_larger_than_max_body_bytes_is_413_declared_or_chunked(self):
        c = Conn(self.port)
        c.send(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 70000\r\n\r\n{\"prompt\":")
        status, _, body = c.reply()
        self.assert_error(status, body, 413)
        c.close()
        c = Conn(self.port)
        chunk = b"a" * 40000
        c.send(b"POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
               b"%x\r\n%s\r\n" % (len(chunk), chunk) + b"%x\r\n" % len(chunk))
        status, _, body = c.reply()
        self.assert_error(status, body, 413)
        self.assertIn(b"larger than 65536 bytes", body)
        c.close()
        self.assert_logged_once(
            "--max-body-bytes",
            "request body of 70000 bytes is larger than 65536 (413, --max-body-bytes)")

    def test_slow_head_is_408_at_the_header_timeout_while_others_are_served(self):
        slow = Conn(self.port)
        t0 = time.monotonic()
        slow.send(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        other_served_meanwhile = False
        for i in range(25):  # a header byte every 200 ms, until the server answers
            if slow.readable():
                break
            slow.send(b"x")
            if i == 1:
                r = request(self.port, "GET", "/health", timeout=10)
                self.assertEqual(r.status, 200, r)
                other_served_meanwhile = not slow.readable()
            time.sleep(0.2)
        status, _, body = slow.reply()
        elapsed = time.monotonic() - t0
        self.assert_error(status, body, 408)
        self.assertTrue(slow.closed_within(5))
        slow.close()
        self.assertGreaterEqual(elapsed, 0.9)
        self.assertLess(elapsed, 2.5, "the trickle must not push the deadline back")
        self.assertTrue(other_served_meanwhile, "GET /health waited for the slow client")
        self.assert_logged_once(
            "--header-timeout", "request head not received within 1 s (408, --header-timeout)")

    def test_slow_body_is_408_at_the_body_timeout(self):
        c = Conn(self.port)
        c.send(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 1000\r\n\r\n")
        t0 = time.monotonic()
        for _ in range(50):  # a body byte every 100 ms
            if c.readable():
                break
            c.send(b" ")
            time.sleep(0.1)
        status, _, body = c.reply()
        elapsed = time.monotonic() - t0
        self.assert_error(status, body, 408)
        c.close()
        self.assertGreaterEqual(elapsed, 1.9)  # the body's own deadline, past the head's 1 s
        self.assertLess(elapsed, 4)
        self.assert_logged_once(
            "--body-timeout",
            "request body not received within 2 s of its head (408, --body-timeout)")

    def test_idle_keep_alive_closes_after_the_idle_timeout(self):
        c = Conn(self.port)
        c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = c.reply()
        self.assertEqual(status, 200)
        self.assertEqual(headers["connection"], "keep-alive")
        t0 = time.monotonic()
        self.assertTrue(c.closed_within(10))
        self.assertGreaterEqual(time.monotonic() - t0, 2.5)  # --idle-timeout 3, not --header-timeout 1
        c.close()

    def hold(self, n):
        """n connections, each served once and kept alive (idle), so each holds its place.
        Tried again while an earlier test's connection still holds one (a refused client's
        is drained for up to half a second)."""
        for _ in range(20):
            held = [Conn(self.port) for _ in range(n)]
            for c in held:
                c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            if all(c.reply()[0] == 200 for c in held):
                return held
            for c in held:
                c.close()
            time.sleep(0.3)
        self.fail(f"{n} connections were not served")

    def test_connections_beyond_threads_http_get_503_with_retry_after(self):
        held = self.hold(4)
        try:
            extra = Conn(self.port)
            extra.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body = extra.reply()
            self.assert_error(status, body, 503)
            self.assertEqual(headers["retry-after"], "1")
            self.assertIn(b"at most 4 are served at once", body)
            self.assertTrue(extra.closed_within(5))
            extra.close()
        finally:
            for c in held:
                c.close()
        self.assert_logged_once("--max-connections", "(503, --max-connections)")

    def test_full_queue_is_503_with_retry_after(self):
        a = RawStream(self.port, "POST", "/completion",
                      {"prompt": "Count to a thousand:", "n_predict": 2000, "ignore_eos": True,
                       "stream": True})
        try:
            a.read_until_events(2)  # the one slot is busy, and --max-queue 0 lets none wait
            r = request(self.port, "POST", "/completion", {"prompt": "second", "n_predict": 1})
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.headers["retry-after"], "5")
            self.assertIn("busy", r.json()["error"]["message"])
        finally:
            a.close()
        m = self.srv.wait_log(r"POST /completion 503 \| refused 127\.0\.0\.1: .*\(503, --max-queue\)")
        self.assertIn("already waiting for a slot", m.group(0))


class RouterLimits(LimitsTestCase):
    """The router answers on the same transport: the limits are its own too."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-limits-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        models = os.path.join(cls.tmp, "models")
        cache = os.path.join(cls.tmp, "llama-cache")
        os.makedirs(models)
        os.makedirs(cache)
        env = {"EDGELLM_MODELS": models, "EDGELLM_MODEL": "", "LLAMA_CACHE": cache, "HOME": cls.tmp}
        cls.srv = Server(["--port", "0", "--max-header-bytes", "4K", "--header-timeout", "1"],
                         env=env)
        cls.addClassCleanup(cls.srv.stop)

    def test_the_router_refuses_a_large_head_with_431_and_logs_it(self):
        c = Conn(self.srv.port)
        c.send(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
        status, _, body = c.reply()
        self.assert_error(status, body, 431)
        c.close()
        m = self.srv.wait_log(r"edgellm router: refused 127\.0\.0\.1: request head larger than 4096 "
                              r"bytes \(431, --max-header-bytes\)")
        self.assertTrue(m)


if __name__ == "__main__":
    unittest.main()
