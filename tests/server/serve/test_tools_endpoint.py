"""GET/POST /tools: the built-in tools and an MCP server beside them, and what they refuse."""

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

from harness import (
    ARGS, GEMMA, Server, need_model, request, run_cli, sse_events, start_server)


FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "data", "mcp", "mcp_fixture.py")


def mcp_json(*flags):
    return json.dumps({"mcpServers": {"fx": {"command": sys.executable,
                                             "args": [os.path.abspath(FIXTURE), *flags]}}})


class ToolsEndpoint(unittest.TestCase):
    """GET/POST /tools over real HTTP: the built-in tools in a scratch directory (the
    server's working directory: they act only inside it), an MCP server
    (tests/data/mcp/mcp_fixture.py) beside them, streaming, refusals, CORS defaulting to
    localhost once tools are on, and the CORS proxy's refusals."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.home = tempfile.mkdtemp()
        cls.addClassCleanup(shutil.rmtree, cls.home, True)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "256", "--tools", "all",
                                     "--mcp-servers-json", mcp_json(), "--ui-mcp-proxy"],
                               cwd=cls.home)
        cls.port = cls.srv.port

    def call(self, tool, params, headers=None, status=200):
        r = request(self.port, "POST", "/tools", {"tool": tool, "params": params}, headers=headers)
        self.assertEqual(r.status, status, r)
        return r.json()

    def test_listing_has_both_kinds(self):
        tools = request(self.port, "GET", "/tools").json()
        names = {t["tool"] for t in tools}
        self.assertTrue({"read_file", "write_file", "edit_file", "grep_search", "file_glob_search",
                         "exec_shell_command", "fx_echo", "fx_add"} <= names, names)
        echo = next(t for t in tools if t["tool"] == "fx_echo")
        self.assertEqual(echo["definition"]["function"]["name"], "fx_echo")

    def test_files_edit_grep_and_glob(self):
        d = tempfile.mkdtemp(dir=self.home)
        self.addCleanup(shutil.rmtree, d)
        self.assertEqual(self.call("write_file", {"path": "a.txt", "content": "one\ntwo\n"},
                                   headers={"x-tool-cwd": d})["result"], "file written successfully")
        self.assertEqual(self.call("edit_file", {"path": os.path.join(d, "a.txt"), "edits": [
            {"old_text": "two", "new_text": "2"}]})["edits_applied"], 1)
        self.assertEqual(self.call("read_file", {"path": os.path.join(d, "a.txt")})["plain_text_response"],
                         "one\n2\n")
        self.call("write_file", {"path": os.path.join(d, "dup.txt"), "content": "dup\ndup\n"})
        err = self.call("edit_file", {"path": os.path.join(d, "dup.txt"), "edits": [
            {"old_text": "dup", "new_text": "x"}]})
        self.assertIn("unique", err["error"])
        self.assertEqual(self.call("read_file", {"path": os.path.join(d, "dup.txt")})["plain_text_response"],
                         "dup\ndup\n", "a refused edit changes nothing")
        self.assertIn("Total matches: 1", self.call("grep_search", {"path": d, "pattern": "one"})["plain_text_response"])
        self.assertEqual(sorted(e["path"] for e in self.call("file_glob_search", {"path": d})["entries"]),
                         ["a.txt", "dup.txt"])
        self.assertIn("error", self.call("read_file", {"path": os.path.join(d, "missing")}))

    def test_exec_streams_and_mcp_calls(self):
        r = request(self.port, "POST", "/tools", {"tool": "exec_shell_command", "stream": True,
                                                   "params": {"command": "echo hello"}})
        events = [json.loads(e) for e in sse_events(r.body)]
        self.assertTrue(events[-1]["done"])
        self.assertIn("hello", "".join(e.get("chunk", "") for e in events))
        self.assertIn("[exit code: 0]", "".join(e.get("chunk", "") for e in events))
        self.assertEqual(self.call("fx_add", {"a": 3, "b": 5})["plain_text_response"].strip(), "8")
        self.assertIn("error", self.call("fx_fail", {}))

    def test_refusals(self):
        self.call("no_such_tool", {}, status=404)
        self.call("exec_shell_command", {"command": "echo hi"}, headers={"x-tool-runtime": "fake:x"}, status=400)
        self.call("exec_shell_command", {"command": "echo hi"},
                  headers={"x-tool-runtime": "ssh:-oProxyCommand=touch /tmp/pwned"}, status=400)
        self.assertFalse(os.path.exists("/tmp/pwned"))
        r = request(self.port, "POST", "/tools", {"tool": "fx_echo", "params": {}, "stream": True})
        self.assertEqual(r.status, 404)
        # tools act on this machine: CORS only for pages served from localhost
        pre = {"Access-Control-Request-Method": "POST"}
        r = request(self.port, "OPTIONS", "/tools", headers={**pre, "Origin": "http://evil.com"})
        self.assertNotIn("access-control-allow-origin", r.headers)
        r = request(self.port, "OPTIONS", "/tools", headers={**pre, "Origin": "http://localhost:8080"})
        self.assertEqual(r.headers.get("access-control-allow-origin"), "http://localhost:8080")

    def test_file_tools_stay_in_the_servers_directory(self):
        outside = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, outside)
        with open(os.path.join(outside, "secret.txt"), "w") as f:
            f.write("SECRET\n")
        link = os.path.join(self.home, "link_out")
        os.symlink(os.path.join(outside, "secret.txt"), link)
        self.addCleanup(os.unlink, link)
        for path in ("/etc/passwd", os.path.join(outside, "secret.txt"), "../" + os.path.basename(outside),
                     "link_out"):
            self.assertIn("outside the working directory", self.call("read_file", {"path": path})["error"], path)
        self.assertIn("error", self.call("write_file", {"path": os.path.join(outside, "w.txt"), "content": "x"}))
        self.assertFalse(os.path.exists(os.path.join(outside, "w.txt")))
        # x-tool-cwd may narrow, never widen: 403 naming it
        r = request(self.port, "POST", "/tools", {"tool": "get_info", "params": {}},
                    headers={"x-tool-cwd": outside})
        self.assertEqual(r.status, 403, r)
        self.assertIn("x-tool-cwd " + outside, r.json()["error"]["message"])

    def test_a_third_command_at_once_is_refused(self):
        done = []
        threads = [threading.Thread(target=lambda: done.append(self.call("exec_shell_command", {"command": "sleep 3"})))
                   for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1)
        r = request(self.port, "POST", "/tools", {"tool": "exec_shell_command", "params": {"command": "echo 3"}})
        for t in threads:
            t.join()
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.headers.get("retry-after"), "1")
        self.assertIn("at once", r.json()["error"]["message"])
        self.assertEqual(len(done), 2)

    def test_cors_proxy_never_reaches_metadata_link_local_or_this_server(self):
        for url, why in [("http://169.254.169.254/latest/meta-data/", "metadata"),
                         ("http://[::ffff:169.254.169.254]/", "metadata"),
                         ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
                         ("http://169.254.10.20:8080/", "link-local"),
                         (f"http://127.0.0.1:{self.port}/health", "this server itself"),
                         (f"http://localhost:{self.port}/slots", "this server itself"),
                         (f"http://0.0.0.0:{self.port}/props", "this machine")]:
            t0 = time.monotonic()
            r = request(self.port, "GET", "/cors-proxy?url=" + url)
            self.assertEqual(r.status, 403, (url, r))
            self.assertIn(why, r.json()["error"]["message"], url)
            self.assertLess(time.monotonic() - t0, 2, url)  # refused, not tried

    def test_without_tools_it_is_403(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "256"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        self.assertEqual(request(srv.port, "GET", "/tools").status, 403)
        r = run_cli(["-m", self.model, "--port", "0", "--tools", "read_file,teleport"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("teleport", r.stderr)


class ToolsOffThisMachine(unittest.TestCase):
    """Tools that write on a --host other machines reach, without --api-key: serve exits 2
    naming them (the built-in ones from the flags; an MCP server's at start-up, unless each of
    its tools is declared readOnlyHint), unless --tools-allow-remote or a key. A router (no
    -m) starts no model, so this is quick."""

    def test_built_in_tools_that_write_are_refused(self):
        r = run_cli(["--host", "0.0.0.0", "--port", "0", "--tools", "all"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("exec_shell_command", r.stderr)
        self.assertIn("--tools-allow-remote", r.stderr)
        for ok in (["--tools-allow-remote"], ["--api-key", "k"]):
            srv = Server(["--host", "0.0.0.0", "--port", "0", "--tools", "all", *ok])
            self.addCleanup(srv.stop)
            self.assertEqual(request(srv.port, "GET", "/tools",
                                     headers={"Authorization": "Bearer k"}).status, 200)

    def test_mcp_tools_not_declared_read_only_are_refused(self):
        r = run_cli(["--host", "0.0.0.0", "--port", "0", "--mcp-servers-json", mcp_json("--read-only=echo")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("fx_add", r.stderr)
        self.assertIn("readOnlyHint", r.stderr)
        self.assertNotIn("fx_echo", r.stderr)
        srv = Server(["--host", "0.0.0.0", "--port", "0", "--mcp-servers-json", mcp_json("--read-only=all")])
        self.addCleanup(srv.stop)
        tools = request(srv.port, "GET", "/tools").json()
        self.assertTrue(tools and all(t["permissions"]["write"] is False for t in tools), tools)
