"""Server options: --max-queue, chat templates, reasoning, CORS, --api-key and the
llama-server flags from its own test suite."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import uuid

from harness import (
    ARGS, GEMMA, LOAD_TIMEOUT_S, RawStream, Server, assert_error_shape, chat_body, free_port,
    metrics_values, need_model, request, run_cli, start_server)


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

    def test_llama_server_spellings_no_ui_and_offline(self):
        # current llama.cpp's --no-ui is --no-webui; --offline (no downloads) is always true
        port = self.start("--no-ui", "--offline")
        assert_error_shape(self, request(port, "GET", "/"), 404)
        r = request(port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        self.assertEqual(r.status, 200, r)

    def test_cors_preflight_and_answers(self):
        pre = {"Origin": "http://web.mydomain.fr", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "Authorization"}
        port = self.start("--api-key", "k")
        r = request(port, "OPTIONS", "/v1/chat/completions", headers=pre)  # no key needed
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers["access-control-allow-origin"], "http://web.mydomain.fr")
        self.assertEqual(r.headers["access-control-allow-credentials"], "true")
        self.assertEqual(r.headers["access-control-allow-methods"], "GET, POST, DELETE, OPTIONS")
        self.assertEqual(r.headers["access-control-allow-headers"], "*")
        # every answer carries it: JSON, errors, streams
        h = {"Origin": "http://web.mydomain.fr", "Authorization": "Bearer k"}
        for body in ({"prompt": "hi", "n_predict": 1}, {"prompt": "hi", "n_predict": 1, "stream": True},
                     {"prompt": 5}):
            r = request(port, "POST", "/completion", body, headers=h)
            self.assertEqual(r.headers.get("access-control-allow-origin"), "http://web.mydomain.fr", r)
        r = request(port, "POST", "/completion", {"prompt": "hi"}, headers={"Origin": "http://x.y"})
        self.assertEqual(r.status, 401)
        self.assertEqual(r.headers.get("access-control-allow-origin"), "http://x.y")

        local = self.start("--cors-origins", "localhost", "--no-cors-credentials")
        for origin, allowed in (("http://localhost:3000", True), ("http://[::1]", True),
                                ("http://localhost.evil.com", False), ("http://evil.com", False)):
            r = request(local, "OPTIONS", "/completion", headers={**pre, "Origin": origin})
            self.assertEqual(r.status, 200)
            self.assertEqual(r.headers.get("access-control-allow-origin"),
                             origin if allowed else None, origin)
            self.assertEqual(r.headers["access-control-allow-credentials"], "false")

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
        # public without a key: health only (the model list needs it, as llama-server's)
        self.assertEqual(request(srv.port, "GET", "/health").status, 200)
        assert_error_shape(self, request(srv.port, "GET", "/v1/models"), 401)

    def test_api_key_flag(self):
        self.check(self.flag, self.KEY)

    def test_api_key_file(self):
        self.check(self.file, self.file_key)
        assert_error_shape(self, request(self.file.port, "GET", "/slots",
                                         headers={"Authorization": "Bearer # a comment"}), 401)

    def test_no_warning_on_loopback_with_key(self):
        self.assertNotIn("WARNING", self.flag.log_text())


class ServeFlags17(unittest.TestCase):
    """llama-server flags from its test suite: --reasoning, built-in template names,
    --kv-unified."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def start(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv.port

    def test_reasoning_off_sets_enable_thinking(self):
        import tempfile
        tpl = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
               "{% if add_generation_prompt %}<assistant><think>\n"
               "{% if not enable_thinking %}</think>{% endif %}{% endif %}")
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write(tpl)
        self.addCleanup(os.unlink, f.name)
        msgs = {"messages": [{"role": "user", "content": "hi"}]}
        for mode, end in (("auto", "<think>\n"), ("on", "<think>\n"), ("off", "<think>\n</think>")):
            port = self.start("-c", "256", "--reasoning", mode, "--chat-template-file", f.name)
            prompt = request(port, "POST", "/apply-template", msgs).json()["prompt"]
            self.assertTrue(prompt.endswith(end), (mode, prompt))
        port = self.start("-c", "256", "--reasoning", "off", "--chat-template-file", f.name)
        kw = dict(msgs, chat_template_kwargs={"enable_thinking": True})
        self.assertTrue(request(port, "POST", "/apply-template", kw).json()["prompt"].endswith("<think>\n"))
        r = run_cli(["-m", self.model, "--port", "0", "--reasoning", "maybe"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--reasoning", r.stderr)

    def test_templates_get_todays_date(self):
        import datetime, tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write("{{ date_string }}|{{ datetime }}|{% for m in messages %}{{ m.content }}{% endfor %}")
        self.addCleanup(os.unlink, f.name)
        port = self.start("-c", "256", "--chat-template-file", f.name)
        msgs = {"messages": [{"role": "user", "content": "hi"}]}
        before = datetime.date.today()
        prompt = request(port, "POST", "/apply-template", msgs).json()["prompt"]
        days = {before, datetime.date.today()}  # (midnight may pass)
        self.assertIn(prompt.split("|")[0], {d.strftime("%d %b %Y") for d in days})
        self.assertIn(prompt.split("|")[1], {d.strftime("%b %d %Y") for d in days})
        kw = dict(msgs, chat_template_kwargs={"date_string": "1 Jan 2000"})
        self.assertTrue(request(port, "POST", "/apply-template", kw).json()["prompt"].startswith("1 Jan 2000|"))

    def test_firefunction_templates_get_the_tools_as_functions(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write("functools[{{ functions }}]{% for m in messages %}{{ m.content }}{% endfor %}")
        self.addCleanup(os.unlink, f.name)
        port = self.start("-c", "512", "--chat-template-file", f.name)
        msgs = [{"role": "user", "content": "hi"}]
        self.assertEqual(request(port, "POST", "/apply-template", {"messages": msgs}).json()["prompt"],
                         "functools[]hi")
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        p = request(port, "POST", "/apply-template", {"messages": msgs, "tools": [tool]}).json()["prompt"]
        self.assertEqual(json.loads(p[len("functools["):p.rindex("]")]), [tool])

    def test_builtin_template_names(self):
        port = self.start("-c", "256", "--chat-template", "command-r")
        p = request(port, "POST", "/apply-template", {"messages": [
            {"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]}).json()
        self.assertEqual(p["prompt"], "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
                                      "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                                      "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
        r = run_cli(["-m", self.model, "--port", "0", "--chat-template", "no-such-format"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("mistral-v7", r.stderr)  # the error lists the names

    def test_sleep_unloads_and_the_next_request_loads_again(self):
        port = self.start("-c", "1024", "--metrics", "--sleep-idle-seconds", "1")
        d = request(port, "POST", "/completion", {"prompt": "Once", "n_predict": 4, "temperature": 0}).json()
        # a request refused for a wrong type leaves nothing in flight (else it would never sleep)
        bad = request(port, "POST", "/completion", {"prompt": ["a", "b"], "stream": "yes"})
        assert_error_shape(self, bad, 400)
        awake = metrics_values(port)
        self.assertFalse(request(port, "GET", "/props").json()["is_sleeping"])
        deadline = time.monotonic() + 15
        while not request(port, "GET", "/props").json()["is_sleeping"]:
            self.assertLess(time.monotonic(), deadline, "the server did not go to sleep")
            time.sleep(0.1)
        # the read-only endpoints answer without waking it
        self.assertEqual(request(port, "GET", "/health").status, 200)
        self.assertEqual(request(port, "GET", "/v1/models").json()["data"][0]["id"], os.path.basename(self.model))
        asleep = metrics_values(port)
        self.assertTrue(request(port, "GET", "/props").json()["is_sleeping"])
        self.assertLess(asleep["edgellm_resident_memory_bytes"], awake["edgellm_resident_memory_bytes"] - 100e6,
                        "the weights' memory went back to the system")
        self.assertEqual(asleep["llamacpp:tokens_predicted_total"], awake["llamacpp:tokens_predicted_total"])
        # any other request loads it again
        r = request(port, "POST", "/tokenize", {"content": "hello"})
        self.assertEqual(r.status, 200, r)
        self.assertFalse(request(port, "GET", "/props").json()["is_sleeping"])
        again = request(port, "POST", "/completion", {"prompt": "Once", "n_predict": 4, "temperature": 0}).json()
        self.assertEqual(again["content"], d["content"])
        self.assertGreater(metrics_values(port)["llamacpp:n_decode_total"], awake["llamacpp:n_decode_total"])

    def test_cors_proxy_forwards_only_the_named_headers(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        import threading
        seen = {}

        class Target(BaseHTTPRequestHandler):
            def do_GET(self):
                seen.update({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"target says hi")

            def do_POST(self):
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a):
                pass

        target = ThreadingHTTPServer(("127.0.0.1", 0), Target)
        threading.Thread(target=target.serve_forever, daemon=True).start()
        self.addCleanup(target.server_close)
        self.addCleanup(target.shutdown)
        url = f"/cors-proxy?url=http://127.0.0.1:{target.server_port}/x"
        off = self.start("-c", "256")
        self.assertEqual(request(off, "GET", url).status, 403)
        port = self.start("-c", "256", "--ui-mcp-proxy", "--api-key", "k")
        r = request(port, "GET", url, headers={"Authorization": "Bearer k", "Cookie": "s=1",
                                               "X-Api-Key": "k",
                                               "x-llama-server-proxy-header-accept": "text/plain",
                                               "x-llama-server-proxy-header-authorization": "Bearer other"})
        self.assertEqual((r.status, r.body), (200, b"target says hi"))
        self.assertEqual(seen.get("accept"), "text/plain")
        self.assertEqual(seen.get("authorization"), "Bearer other")
        self.assertNotIn("cookie", seen)
        self.assertNotIn("x-api-key", seen)
        self.assertEqual(request(port, "POST", url, {"a": 1}, headers={"Authorization": "Bearer k"}).status, 204)
        self.assertEqual(request(port, "GET", url).status, 401)  # the server's key still applies
        bad = request(port, "GET", "/cors-proxy?url=https://example.com", headers={"Authorization": "Bearer k"})
        assert_error_shape(self, bad, 400)

    def test_offload_and_projector_flags_are_said_to_do_nothing(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "256", "-nkvo", "-ts", "1,1", "-sm", "row",
                      "-mm", "proj.gguf", "--no-mmproj", "--media-path", "/tmp", "--rpc", "h:1"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        log = srv.log_text()
        for flag in ("-nkvo", "-ts", "-sm", "-mm", "--media-path", "--rpc"):
            self.assertRegex(log, rf"{re.escape(flag)}: no effect", flag)
        img = request(srv.port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}], "max_tokens": 2})
        assert_error_shape(self, img, 400)
        for flags, word in ((["--model-url", "http://x/m.gguf"], "never downloads"),
                            (["--grp-attn-n", "4"], "--grp-attn-n"), (["--device", "cuda0"], "--device")):
            r = run_cli(["-m", self.model, "--port", "0", *flags])
            self.assertEqual(r.returncode, 2, (flags, r.stderr))
            self.assertIn(word, r.stderr)
        r = run_cli(["--list-devices"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("CPU", r.stdout)

    def test_api_prefix_cache_prompt_and_ignore_eos_defaults(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "512", "--api-prefix", "/llm",
                      "--no-cache-prompt", "--ignore-eos"])
        self.addCleanup(srv.stop)
        port = srv.port
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while request(port, "GET", "/llm/health").status != 200:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        self.assertEqual(request(port, "GET", "/health").status, 404)
        r = request(port, "GET", "/llm")
        self.assertEqual((r.status, r.headers.get("location")), (308, "/llm/"))  # the chat page's base
        self.assertEqual(request(port, "GET", "/llm/").status, 200)
        body = {"prompt": "The quick brown fox", "n_predict": 3}
        for _ in range(2):
            d = request(port, "POST", "/llm/completion", body).json()
        self.assertEqual(d["timings"]["cache_n"], 0, "--no-cache-prompt: the prefix is evaluated again")
        self.assertTrue(d["generation_settings"]["ignore_eos"])
        d = request(port, "POST", "/llm/completion", dict(body, cache_prompt=True)).json()
        self.assertGreater(d["timings"]["cache_n"], 0)

    def test_vertex_ai_predict_route(self):
        port = free_port()
        env = dict(os.environ, AIP_MODE="PREDICTION", AIP_HTTP_PORT=str(port), AIP_HEALTH_ROUTE="/ping")
        proc = subprocess.Popen([ARGS.bin, "serve", "-m", self.model, "--port", "0", "-c", "512", "-np", "2"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.terminate(), proc.wait(30)))
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:  # AIP_HTTP_PORT overrides --port; AIP_HEALTH_ROUTE answers as /health
            try:
                if request(port, "GET", "/ping").status == 200:
                    break
            except OSError:
                pass
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        r = request(port, "POST", "/predict", {"instances": [
            {"@requestFormat": "chatCompletions", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
            {"@requestFormat": "completion", "prompt": "Once", "n_predict": 3},
            {"@requestFormat": "teleport"},
            {"@requestFormat": "chatCompletions", "messages": 5}]})
        self.assertEqual(r.status, 200, r)
        p = r.json()["predictions"]
        self.assertEqual(p[0]["choices"][0]["message"]["role"], "assistant")
        self.assertIn("content", p[1])
        self.assertIn("teleport", p[2]["error"]["message"])
        self.assertIn("messages", p[3]["error"]["message"])
        assert_error_shape(self, request(port, "POST", "/predict", {"nothing": 1}), 400)

    def test_kv_unified_lets_one_slot_use_the_whole_context(self):
        port = self.start("-c", "512", "-np", "4", "--kv-unified")
        self.assertEqual(request(port, "GET", "/slots").json()[0]["n_ctx"], 512)
        d = request(port, "POST", "/completion", {"prompt": "A", "n_predict": 300, "ignore_eos": True}).json()
        self.assertEqual(d["timings"]["predicted_n"], 300)  # more than 512 / 4
        plain = self.start("-c", "512", "-np", "4")
        self.assertEqual(request(plain, "GET", "/slots").json()[0]["n_ctx"], 128)
