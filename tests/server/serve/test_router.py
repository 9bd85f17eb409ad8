"""Router mode: `edgellm serve` without -m, each model in its own process; presets."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import (
    GEMMA, LOAD_TIMEOUT_S, RawStream, Server, chat_body, need_model, request, sse_events)


class RouterMode(unittest.TestCase):
    """`edgellm serve` without -m: a router over the model directory, each model in its own
    process; the request's "model" chooses, --models-max 1 evicts the idle one."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-router-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.models_dir = os.path.join(cls.tmp, "models")
        os.makedirs(cls.models_dir)
        for name in ("alpha.gguf", "beta.gguf"):  # two names, one small model
            os.symlink(gemma, os.path.join(cls.models_dir, name))
        cache = os.path.join(cls.tmp, "llama-cache")  # no llama.cpp downloads
        os.makedirs(cache)
        # HOME: the repacked weights of these temporary paths go to the temporary
        # directory's ~/.cache, not to the user's
        env = {"EDGELLM_MODELS": cls.models_dir, "EDGELLM_MODEL": os.path.join(cls.models_dir, "alpha.gguf"),
               "LLAMA_CACHE": cache, "HOME": cls.tmp}
        cls.srv = Server(["--port", "0", "-c", "256", "-t", "2", "--models-max", "1"], env=env)
        cls.addClassCleanup(cls.srv.stop)
        cls.port = cls.srv.port
        cls.srv.wait_ready()

    def models(self):
        r = request(self.port, "GET", "/models")
        self.assertEqual(r.status, 200, r)
        return {m["id"]: m for m in r.json()["data"]}

    def wait_status(self, model_id, want, timeout=LOAD_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.models()[model_id]["status"]["value"]
            if status == want:
                return
            time.sleep(0.05)
        self.fail(f"{model_id} not {want} within {timeout} s (last: {status})\n{self.srv.log_text()}")

    def chat(self, model=None, **kw):
        body = chat_body("Say hello.", max_tokens=4, temperature=0, **kw)
        if model:
            body["model"] = model
        return request(self.port, "POST", "/v1/chat/completions", body)

    def test_a_props_say_router_and_the_default(self):
        r = request(self.port, "GET", "/props")
        self.assertEqual(r.status, 200, r)
        p = r.json()
        self.assertEqual(p["role"], "router")
        self.assertEqual(p["max_instances"], 1)
        self.assertIs(p["models_autoload"], True)
        self.assertEqual(p["default_model"], "alpha.gguf")
        self.assertTrue(p["build_info"].startswith("b"), p)
        ids = list(r.json() for r in [request(self.port, "GET", "/v1/models")])[0]["data"]
        self.assertEqual([m["id"] for m in ids][:1], ["alpha.gguf"])  # the default first
        self.assertIn("beta.gguf", [m["id"] for m in ids])

    def test_b_no_model_named_gets_the_default(self):
        r = self.chat()
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model"], "alpha.gguf")
        self.assertTrue(r.json()["choices"][0]["message"]["content"])
        self.assertEqual(self.models()["alpha.gguf"]["status"]["value"], "loaded")

    def test_c_named_model_starts_and_the_idle_one_is_evicted(self):
        r = self.chat("beta")  # (with or without .gguf: the same model)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model"], "beta.gguf")  # the id it goes by
        m = self.models()
        self.assertEqual(m["beta.gguf"]["status"]["value"], "loaded")
        self.assertEqual(m["alpha.gguf"]["status"]["value"], "unloaded")  # --models-max 1
        r = self.chat("alpha.gguf")
        self.assertEqual(r.status, 200, r)
        m = self.models()
        self.assertEqual(m["alpha.gguf"]["status"]["value"], "loaded")
        self.assertEqual(m["beta.gguf"]["status"]["value"], "unloaded")

    def test_d_unknown_model_is_a_404_naming_the_models(self):
        r = self.chat("gpt-4o")
        self.assertEqual(r.status, 404, r)
        self.assertIn("alpha.gguf", r.json()["error"]["message"])
        r = request(self.port, "POST", "/v1/chat/completions", {**chat_body("Hi"), "model": 7})
        self.assertEqual(r.status, 400, r)
        self.assertIn('"model" must be a string', r.json()["error"]["message"])

    def test_e_stream_passes_through_as_it_comes(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      {**chat_body("Count to five.", max_tokens=12, temperature=0, stream=True), "model": "alpha"})
        s.read_all()
        self.assertEqual(s.status, 200)
        self.assertTrue(s.headers.get("content-type", "").startswith("text/event-stream"), s.headers)
        events = sse_events(s.body)
        self.assertEqual(events[-1], "[DONE]")
        self.assertGreater(len(s.chunks), 3)  # chunk by chunk, not one body at the end
        text = "".join((json.loads(e)["choices"][0]["delta"].get("content") or "")
                       for e in events[:-1] if json.loads(e)["choices"])
        self.assertTrue(text)

    def test_f_client_gone_stops_the_models_generation(self):
        self.assertEqual(self.chat("alpha").status, 200)
        log_at = self.srv.log_count()
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      {**chat_body("Tell me a very long story.", max_tokens=2000, ignore_eos=True, stream=True),
                       "model": "alpha"})
        s.read_until_events(4)
        s.abort()
        # the model's own server saw its client (the router) go: its line says cancelled
        self.srv.wait_log(r"\[alpha\.gguf\] .*POST /v1/chat/completions .*cancelled", start=log_at, timeout=30)

    def test_g_unload_and_load(self):
        self.assertEqual(self.chat("alpha").status, 200)
        r = request(self.port, "POST", "/models/unload", {"model": "alpha.gguf"})
        self.assertEqual(r.status, 200, r)
        self.assertIs(r.json()["success"], True)
        self.assertEqual(self.models()["alpha.gguf"]["status"]["value"], "unloaded")
        r = request(self.port, "POST", "/models/unload", {"model": "alpha.gguf"})
        self.assertEqual(r.status, 400, r)  # not loaded
        r = request(self.port, "POST", "/models/load", {"model": "beta.gguf"})
        self.assertEqual(r.status, 200, r)
        self.wait_status("beta.gguf", "loaded")
        r = request(self.port, "POST", "/models/load", {"model": "nope"})
        self.assertEqual(r.status, 404, r)
        r = request(self.port, "POST", "/models", {"model": "org/repo:Q8_0"})
        self.assertEqual(r.status, 400, r)  # edgellm never downloads
        self.assertIn("never downloads", r.json()["error"]["message"])

    def test_i_resumable_stream_through_the_router(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      {**chat_body("Say hello.", max_tokens=8, temperature=0, stream=True), "model": "alpha"},
                      headers={"X-Conversation-Id": "router-conv"})
        s.read_all()
        self.assertEqual(s.status, 200)
        r = request(self.port, "GET", "/v1/stream?conv_id=router-conv&from=0")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body, s.body)  # the child's session, replayed through the router
        r = request(self.port, "POST", "/v1/streams/lookup", {"conversation_ids": ["router-conv"]})
        self.assertEqual(r.json()[0]["conversation_id"], "router-conv")
        self.assertEqual(request(self.port, "DELETE", "/v1/stream?conv_id=router-conv").status, 204)
        self.assertEqual(request(self.port, "GET", "/v1/stream?conv_id=router-conv").status, 404)

    def test_h_a_crashed_model_is_failed_then_started_again(self):
        self.assertEqual(self.chat("beta").status, 200)
        r = subprocess.run(["pgrep", "-f", "--", "--alias beta.gguf"], capture_output=True, text=True)
        pids = [int(p) for p in r.stdout.split()]
        self.assertTrue(pids, "no child serving beta.gguf")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        self.wait_status("beta.gguf", "failed", timeout=30)
        self.assertIn("signal 9", self.models()["beta.gguf"]["status"]["error"])
        r = self.chat("beta")
        self.assertEqual(r.status, 200, r)  # a request starts it again
        self.assertEqual(self.models()["beta.gguf"]["status"]["value"], "loaded")


class RouterPresetNoAutoload(unittest.TestCase):
    """--models-preset with per-model flags, --no-models-autoload and --api-key."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-router-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        empty = os.path.join(cls.tmp, "empty")
        os.makedirs(empty)
        cls.preset = os.path.join(cls.tmp, "models.ini")
        with open(cls.preset, "w") as f:
            f.write(f"[*]\nctx-size = 512\n\n[small]\nmodel = {gemma}\nctx-size = 384\n\n"
                    f"[broken]\nmodel = {gemma}\nwarp-speed = 9\n\n[remote]\nhf-repo = org/missing-GGUF\n")
        env = {"EDGELLM_MODELS": empty, "EDGELLM_MODEL": "", "LLAMA_CACHE": empty}
        cls.srv = Server(["--port", "0", "-t", "2", "--models-preset", cls.preset, "--no-models-autoload",
                          "--api-key", "sk-router", "--tools", "read_file,get_info"], env=env,
                         cwd=cls.tmp)  # (the file tools act only inside the server's directory)
        cls.addClassCleanup(cls.srv.stop)
        cls.port = cls.srv.port
        cls.srv.wait_ready()
        cls.key = {"Authorization": "Bearer sk-router"}

    def test_tools_are_the_routers_own(self):
        # no model runs (autoload is off): /tools needs none
        r = request(self.port, "GET", "/tools", headers=self.key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(sorted(t["tool"] for t in r.json()), ["get_info", "read_file"])
        r = request(self.port, "POST", "/tools", {"tool": "read_file", "params": {"path": self.preset}},
                    headers=self.key)
        self.assertEqual(r.status, 200, r)
        self.assertIn("[small]", json.dumps(r.json()))
        self.assertEqual(request(self.port, "GET", "/tools").status, 401)

    def test_preset_models_and_why_some_cannot_start(self):
        r = request(self.port, "GET", "/v1/models", headers=self.key)
        self.assertEqual(r.status, 200, r)
        by_id = {m["id"]: m for m in r.json()["data"]}
        self.assertEqual(set(by_id), {"small", "broken", "remote"})
        self.assertIn("warp-speed", by_id["broken"]["unavailable"])
        self.assertIn("never downloads", by_id["remote"]["unavailable"])
        r = request(self.port, "POST", "/models/load", {"model": "broken"}, headers=self.key)
        self.assertEqual(r.status, 400, r)
        self.assertIn("warp-speed", r.json()["error"]["message"])

    def test_key_autoload_off_then_load_and_the_presets_flags(self):
        body = {**chat_body("Hi", max_tokens=2), "model": "small"}
        r = request(self.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 401, r)
        r = request(self.port, "POST", "/v1/chat/completions", body, headers=self.key)
        self.assertEqual(r.status, 400, r)  # not loaded, and autoload is off
        self.assertIn("POST /models/load", r.json()["error"]["message"])
        r = request(self.port, "POST", "/models/load", {"model": "small"})
        self.assertEqual(r.status, 401, r)
        r = request(self.port, "POST", "/models/load", {"model": "small"}, headers=self.key)
        self.assertEqual(r.status, 200, r)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            r = request(self.port, "POST", "/v1/chat/completions", body, headers=self.key)
            if r.status == 200:
                break
            time.sleep(0.1)
        self.assertEqual(r.status, 200, r)
        r = request(self.port, "GET", "/props?model=small", headers=self.key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["default_generation_settings"]["n_ctx"], 384)  # the section's, not [*]'s
        r = request(self.port, "POST", "/v1/chat/completions", {**chat_body("Hi", max_tokens=2)}, headers=self.key)
        self.assertEqual(r.status, 400, r)  # no default model: name one
        self.assertIn("small", r.json()["error"]["message"])
