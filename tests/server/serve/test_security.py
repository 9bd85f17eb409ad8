"""Nothing outside gets in (docs/security.md): the Host check against DNS rebinding and the
Origin check against cross-site requests, on the server and through the router; the API
key on every route but health and the chat page, never in a log, /props or the router's
model list, and required by the router's children too."""

import os
import re
import shutil
import tempfile
import time
import unittest

from harness import GEMMA, LOAD_TIMEOUT_S, Server, need_model, request


def shell(port, command, host, origin=None, headers=None):
    """The issue's request: exec_shell_command through POST /tools, with the Host (and the
    Origin) a browser sends."""
    h = {"Host": host, **(headers or {})}
    if origin:
        h["Origin"] = origin
    return request(port, "POST", "/tools", {"tool": "exec_shell_command", "params": {"command": command}},
                   headers=h)


class DnsRebinding(unittest.TestCase):
    """`serve --tools all` on 127.0.0.1, and a router with the same tools: a page that
    pointed its own name at 127.0.0.1 runs nothing."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-security-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.server = Server(["-m", gemma, "--host", "127.0.0.1", "--port", "0", "-c", "256", "-t", "2",
                             "--tools", "all", "--allowed-hosts", "llm.home"])
        cls.addClassCleanup(cls.server.stop)
        empty = os.path.join(cls.tmp, "empty")
        os.makedirs(empty)
        cls.router = Server(["--host", "127.0.0.1", "--port", "0", "--no-models-autoload", "--tools", "all"],
                            env={"EDGELLM_MODELS": empty, "EDGELLM_MODEL": "", "LLAMA_CACHE": empty})
        cls.addClassCleanup(cls.router.stop)
        cls.server.wait_ready()
        cls.router.wait_ready()

    def both(self):
        return (("server", self.server), ("router", self.router))

    def test_the_rebinding_request_is_refused_and_runs_nothing(self):
        for name, srv in self.both():
            with self.subTest(name):
                marker = os.path.join(self.tmp, f"pwned-{name}")
                host = f"evil.example:{srv.port}"
                start = srv.log_count()
                r = shell(srv.port, f"touch {marker}", host, origin=f"http://{host}")
                self.assertEqual(r.status, 403, r)
                err = r.json()["error"]
                self.assertEqual(err["type"], "permission_error")
                self.assertIn("evil.example", err["message"])
                self.assertIn("--allowed-hosts", err["message"])
                # a second try: refused again, logged once
                self.assertEqual(shell(srv.port, f"touch {marker}", host).status, 403)
                time.sleep(0.5)
                self.assertFalse(os.path.exists(marker), "the command ran")
                lines = srv.log_text().splitlines()[start:]
                self.assertEqual(sum(1 for l in lines if "refused Host evil.example" in l), 1, "\n".join(lines))

    def test_a_page_of_another_origin_cannot_post_to_the_right_name(self):
        # cross-site request forgery: a "simple" POST CORS never stops
        for name, srv in self.both():
            with self.subTest(name):
                marker = os.path.join(self.tmp, f"csrf-{name}")
                r = shell(srv.port, f"touch {marker}", f"127.0.0.1:{srv.port}", origin="http://evil.example")
                self.assertEqual(r.status, 403, r)
                self.assertIn("--cors-origins", r.json()["error"]["message"])
                time.sleep(0.3)
                self.assertFalse(os.path.exists(marker), "the command ran")

    def test_the_names_of_the_server_still_work(self):
        for name, srv in self.both():
            for host in (f"127.0.0.1:{srv.port}", f"localhost:{srv.port}", f"[::1]:{srv.port}"):
                with self.subTest(name, host=host):
                    r = shell(srv.port, "echo ok-$((40+2))", host, origin=f"http://{host}")
                    self.assertEqual(r.status, 200, r)
                    self.assertIn("ok-42", r.json()["plain_text_response"])
        # --allowed-hosts adds a name (a reverse proxy's, a LAN name)
        r = shell(self.server.port, "echo ok", f"llm.home:{self.server.port}")
        self.assertEqual(r.status, 200, r)

    def test_with_tools_on_every_route_checks_the_host(self):
        evil = {"Host": f"evil.example:{self.server.port}"}
        r = request(self.server.port, "POST", "/tokenize", {"content": "hi"}, headers=evil)
        self.assertEqual(r.status, 403, r)
        r = request(self.server.port, "POST", "/tokenize", {"content": "hi"})
        self.assertEqual(r.status, 200, r)


class AdminRoutesAlways(unittest.TestCase):
    """Without tools, the routes that act on the server still check the Host."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-security-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.srv = Server(["-m", gemma, "--port", "0", "-c", "256", "-t", "2", "--slot-save-path", cls.tmp])
        cls.addClassCleanup(cls.srv.stop)
        cls.srv.wait_ready()

    def test_admin_routes_refuse_a_foreign_host(self):
        port = self.srv.port
        evil = {"Host": "evil.example"}
        for method, path, body in (("GET", "/slots", None),
                                   ("POST", "/slots/0?action=save", {"filename": "x.bin"}),
                                   ("POST", "/slots/0?action=erase", {}),
                                   ("GET", "/lora-adapters", None),
                                   ("POST", "/lora-adapters", []),
                                   ("POST", "/models/load", {"model": "x.gguf"})):
            with self.subTest(path=path):
                r = request(port, method, path, body, headers=evil)
                self.assertEqual(r.status, 403, r)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.bin")))
        # a page of another site cannot administer it either, though --cors-origins is * (any
        # page may chat): a "simple" POST the browser sends without asking
        r = request(port, "POST", "/slots/0?action=erase", {}, headers={"Origin": "http://evil.example"})
        self.assertEqual(r.status, 403, r)
        r = request(port, "POST", "/tokenize", {"content": "hi"}, headers={"Origin": "http://evil.example"})
        self.assertEqual(r.status, 200, r)
        # a route that only answers still answers any name (a reverse proxy's own)
        r = request(port, "POST", "/tokenize", {"content": "hi"}, headers=evil)
        self.assertEqual(r.status, 200, r)
        r = request(port, "GET", "/slots", headers={"Host": f"localhost:{port}"})
        self.assertEqual(r.status, 200, r)

    def test_the_chat_page_cannot_be_framed_or_reach_elsewhere(self):
        r = request(self.srv.port, "GET", "/")
        self.assertEqual(r.status, 200, r)
        csp = r.headers.get("content-security-policy", "")
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertIn("connect-src 'self'", csp)
        self.assertEqual(r.headers.get("x-frame-options"), "DENY")
        self.assertEqual(r.headers.get("x-content-type-options"), "nosniff")


KEY = "sk-security-test-7f3a91"


class KeyEverywhere(unittest.TestCase):
    """--api-key on the server and on a router with a running child."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-security-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.server = Server(["-m", gemma, "--port", "0", "-c", "256", "-t", "2", "--api-key", KEY, "-v",
                             "--slot-save-path", cls.tmp, "--metrics"])
        cls.addClassCleanup(cls.server.stop)
        models = os.path.join(cls.tmp, "models")
        os.makedirs(models)
        os.symlink(gemma, os.path.join(models, "small.gguf"))
        cls.router = Server(["--port", "0", "-c", "256", "-t", "2", "--api-key", KEY, "--no-models-autoload",
                             "--models-dir", models],
                            env={"EDGELLM_MODELS": models, "EDGELLM_MODEL": "", "LLAMA_CACHE": models})
        cls.addClassCleanup(cls.router.stop)
        cls.server.wait_ready()
        cls.router.wait_ready()
        cls.auth = {"Authorization": "Bearer " + KEY}

    def test_each_admin_route_needs_the_key(self):
        for method, path, body in (("GET", "/slots", None), ("POST", "/slots/0?action=erase", {}),
                                   ("GET", "/lora-adapters", None), ("POST", "/lora-adapters", []),
                                   ("POST", "/models/load", {"model": "x.gguf"}), ("GET", "/props", None),
                                   ("GET", "/metrics", None), ("GET", "/v1/models", None),
                                   ("GET", "/tools", None), ("POST", "/cors-proxy", {})):
            with self.subTest(path=path):
                r = request(self.server.port, method, path, body)
                self.assertEqual(r.status, 401, r)
                r = request(self.server.port, method, path, body, headers={"Authorization": "Bearer " + KEY[:-1]})
                self.assertEqual(r.status, 401, r)
        for method, path, body in (("POST", "/models/load", {"model": "small"}), ("POST", "/models/unload", {}),
                                   ("POST", "/models/reload", {}), ("GET", "/props", None),
                                   ("GET", "/v1/models", None), ("GET", "/slots?model=small", None)):
            with self.subTest("router", path=path):
                self.assertEqual(request(self.router.port, method, path, body).status, 401)
        self.assertEqual(request(self.server.port, "GET", "/health").status, 200)
        self.assertEqual(request(self.router.port, "GET", "/health").status, 200)

    def test_the_key_is_never_shown(self):
        # a few requests, with the key, with a wrong one, with the key in odd places
        request(self.server.port, "POST", "/tokenize", {"content": KEY}, headers=self.auth)
        request(self.server.port, "POST", "/v1/chat/completions", {"messages": []},
                headers={"Authorization": "Bearer " + KEY + "x"})
        request(self.server.port, "GET", "/slots", headers={"x-api-key": KEY})
        for path in ("/props", "/slots", "/v1/models", "/metrics"):
            r = request(self.server.port, "GET", path, headers=self.auth)
            self.assertEqual(r.status, 200, r)
            self.assertNotIn(KEY, r.body.decode("utf-8", "replace"), path)
        r = request(self.server.port, "POST", "/v1/chat/completions", {"messages": []},
                    headers={"Authorization": "Bearer " + KEY + "x"})
        self.assertNotIn(KEY, r.body.decode())
        # (the tokenize request's content is the user's text, not the key: -v logs no prompt of it)
        log = self.server.log_text().replace('"content": "' + KEY + '"', "")
        self.assertNotIn(KEY, log)

    def test_the_router_and_its_children_agree(self):
        r = request(self.router.port, "POST", "/models/load", {"model": "small"}, headers=self.auth)
        self.assertEqual(r.status, 200, r)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            r = request(self.router.port, "GET", "/v1/models", headers=self.auth)
            state = {m["id"]: m["status"]["value"] for m in r.json()["data"]}
            if state.get("small") == "loaded":
                break
            time.sleep(0.2)
        self.assertEqual(state.get("small"), "loaded", r)
        # the key is in no listing: not the model list's child command lines, not the log
        self.assertNotIn(KEY, r.body.decode())
        args = next(m for m in r.json()["data"] if m["id"] == "small")["status"].get("args", [])
        self.assertNotIn("--api-key", args)
        # a request through the router works with the key, not without
        body = {"model": "small", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        self.assertEqual(request(self.router.port, "POST", "/v1/chat/completions", body).status, 401)
        r = request(self.router.port, "POST", "/v1/chat/completions", body, headers=self.auth)
        self.assertEqual(r.status, 200, r)
        # the child, found on its loopback port, answers nobody but the router: not without a
        # key, and not with the client's key either
        m = re.search(r"model small: loaded in \d+ ms \(port (\d+)\)", self.router.log_text())
        self.assertIsNotNone(m, self.router.log_text())
        child = int(m.group(1))
        self.assertEqual(request(child, "GET", "/health").status, 200)
        for headers in (None, self.auth):
            self.assertEqual(request(child, "POST", "/v1/chat/completions", body, headers=headers).status, 401)
            self.assertEqual(request(child, "GET", "/slots", headers=headers).status, 401)
        self.assertNotIn(KEY, self.router.log_text())


if __name__ == "__main__":
    unittest.main()
