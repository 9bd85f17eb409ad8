"""GET/POST /tools: the built-in tools and an MCP server beside them."""

import json
import os
import shutil
import sys
import unittest

from harness import (
    ARGS, GEMMA, Server, need_model, request, run_cli, sse_events, start_server)


class ToolsEndpoint(unittest.TestCase):
    """GET/POST /tools over real HTTP: the built-in tools on a scratch directory, an MCP
    server (tests/data/mcp/mcp_fixture.py) beside them, streaming, refusals, and CORS
    defaulting to localhost once tools are on."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        fixture = os.path.join(ARGS.root, "tests", "data", "mcp", "mcp_fixture.py")
        cfg = json.dumps({"mcpServers": {"fx": {"command": sys.executable, "args": [fixture]}}})
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "256", "--tools", "all",
                                     "--mcp-servers-json", cfg])
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
        import tempfile
        d = tempfile.mkdtemp()
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

    def test_without_tools_it_is_403(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "256"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        self.assertEqual(request(srv.port, "GET", "/tools").status, 403)
        r = run_cli(["-m", self.model, "--port", "0", "--tools", "read_file,teleport"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("teleport", r.stderr)
