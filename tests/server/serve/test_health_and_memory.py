"""Health states, --memory-limit and --fit, the fallbacks (model and reply) and swapping
the model while serving."""

import json
import os
import re
import shutil
import struct
import tempfile
import threading
import time
import unittest
import uuid

from harness import (
    ARGS, GEMMA, QWEN, QWEN_SMALL, Server, assert_error_shape, model_path, need_model, request,
    run_cli, sse_events, start_server)


class HealthStates(unittest.TestCase):
    """GET /health: loading, then warming (the weights' pages, one forward pass, the prompt
    cache), then ready; degraded (still 200 and "ok", with the reason) when the server runs
    with less than it was asked for."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def test_states_in_order(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "512"])
        self.addCleanup(srv.stop)
        seen = srv.wait_ready()
        states = [json.loads(b)["status"] for st, b in seen if st == 503]
        self.assertTrue(states, seen[:3])
        order = {"loading": 0, "warming": 1}
        self.assertEqual(states, sorted(states, key=order.__getitem__), "never back to loading")
        self.assertEqual(request(srv.port, "GET", "/health").json(), {"status": "ok", "state": "ready"})

    def test_degraded_names_its_reason(self):
        d = tempfile.mkdtemp(prefix="edgellm-health-")
        self.addCleanup(lambda: shutil.rmtree(d, ignore_errors=True))
        blocker = os.path.join(d, "a-file")
        with open(blocker, "w") as f:
            f.write("not a directory")
        srv = Server(["-m", self.model, "--port", "0", "-c", "512", "--prompt-cache",
                      os.path.join(blocker, "cache")])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        r = request(srv.port, "GET", "/health")
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual((j["status"], j["state"]), ("ok", "degraded"))
        self.assertIn("prompt cache", j["reason"])
        self.assertIn("a-file", j["reason"])
        # it still serves
        r = request(srv.port, "POST", "/completion", {"prompt": "Hello", "n_predict": 2})
        self.assertEqual(r.status, 200, r)

    def test_a_context_above_the_training_context_is_warned_about(self):
        tiny = os.path.join(ARGS.root, "..", "shared", "reference", "golden", "tiny-qwen2-q8_0.gguf")
        if not os.path.isfile(tiny):
            self.skipTest(f"no golden tiny model at {tiny}")
        srv = Server(["-m", tiny, "--port", "0", "-c", "4096"])  # trained with 2048
        self.addCleanup(srv.stop)
        srv.wait_ready()
        self.assertRegex(srv.log_text(), r"warning: -c 4096 is above the 2048 tokens the model was trained with")
        j = request(srv.port, "GET", "/health").json()
        self.assertEqual(j["state"], "degraded")
        self.assertIn("training context of 2048", j["reason"])


class MemoryLimit(unittest.TestCase):
    """--memory-limit checks weights + KV + scratch + --cache-ram before allocating: refused
    with the bill, or with --fit a smaller context; --fallback-model serves when the model
    cannot be loaded or does not fit."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def test_over_the_limit_is_refused_with_the_bill(self):
        r = run_cli(["-m", self.model, "--port", "0", "-c", "4096", "--memory-limit", "100M"])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"it needs weights \d+ MiB \+ KV cache \d+ MiB \(4096 tokens.*"
                                   r"more than --memory-limit 100 MiB \(--fit shrinks")

    def test_fit_shrinks_the_context_and_says_so(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "32768", "--memory-limit", "400MiB",
                      "--fit"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        m = srv.wait_log(r"--fit: a context of (\d+) tokens a slot instead of 32768")
        n = int(m.group(1))
        self.assertLess(n, 32768)
        self.assertGreater(n, 128)
        self.assertEqual(request(srv.port, "GET", "/props").json()["default_generation_settings"]["n_ctx"], n)
        j = request(srv.port, "GET", "/health").json()
        self.assertEqual(j["state"], "degraded")
        self.assertIn("--fit", j["reason"])
        # the same limit with room to spare: no change, not degraded
        srv2 = Server(["-m", self.model, "--port", "0", "-c", "1024", "--memory-limit", "2G", "--fit", "on"])
        self.addCleanup(srv2.stop)
        srv2.wait_ready()
        srv2.wait_log(re.escape("within --memory-limit 2048 MiB"), timeout=10)
        self.assertEqual(request(srv2.port, "GET", "/health").json()["state"], "ready")

    def test_fallback_model_serves_when_the_model_cannot(self):
        missing = os.path.join(tempfile.gettempdir(), "edgellm-no-such-model.gguf")
        srv = Server(["-m", missing, "--port", "0", "-c", "512", "--fallback-model", self.model])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        j = request(srv.port, "GET", "/health").json()
        self.assertEqual((j["status"], j["state"]), ("ok", "degraded"))
        self.assertIn("fallback model " + os.path.basename(self.model), j["reason"])
        self.assertIn(missing, j["reason"])
        self.assertEqual(request(srv.port, "GET", "/v1/models").json()["data"][0]["id"],
                         os.path.basename(self.model))
        r = request(srv.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        self.assertEqual(r.status, 200, r)

    def test_fallback_model_serves_when_the_model_does_not_fit(self):
        big = model_path(QWEN)
        if not big:
            self.skipTest(f"model {QWEN} is not installed")
        srv = Server(["-m", big, "--port", "0", "-c", "1024", "--memory-limit", "700M",
                      "--fallback-model", self.model])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        j = request(srv.port, "GET", "/health").json()
        self.assertEqual(j["state"], "degraded")
        self.assertIn("more than --memory-limit 700 MiB", j["reason"])
        self.assertEqual(request(srv.port, "GET", "/v1/models").json()["data"][0]["id"],
                         os.path.basename(self.model))

    def test_flags(self):
        for flags, msg in ((["--fit"], "--fit needs --memory-limit"),
                           (["--memory-limit", "lots"], "--memory-limit takes a size"),
                           (["--memory-limit", "1G", "--fit", "maybe"], "unexpected argument maybe")):
            r = run_cli(["-m", self.model, *flags])
            self.assertEqual(r.returncode, 2, (flags, r.stderr))
            self.assertIn(msg, r.stderr)


class FallbackReply(unittest.TestCase):
    """--timeout-first-token MS --fallback-reply TEXT: a reply not started in time is
    stopped and answered with the text (streamed or not); one started in time is left be."""

    REPLY = "抱歉，请稍后再试。"

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "4096",
                                     "--timeout-first-token", "300", "--fallback-reply", cls.REPLY,
                                     "--cache-ram", "0"])
        cls.port = cls.srv.port

    def slow_messages(self):
        # a prompt that takes well over 300 ms to evaluate, new each time (no cached prefix)
        text = uuid.uuid4().hex + " " + " ".join(f"Item {i} is a red box on a table." for i in range(300))
        return [{"role": "user", "content": text + " How many items?"}]

    def test_a_slow_first_token_gets_the_fallback_reply(self):
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": self.slow_messages(), "max_tokens": 20})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["choices"][0]["message"]["content"], self.REPLY)
        self.assertEqual(j["choices"][0]["finish_reason"], "stop")
        self.assertIn("--timeout-first-token 300 ms", j["fallback"]["reason"])
        self.assertLess(j["fallback"]["after_ms"], 2000, "answered soon after the deadline")
        self.srv.wait_log(r"fallback reply: no first token within 300 ms", timeout=5)
        # streamed: the text as content, then the end as usual
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": self.slow_messages(), "max_tokens": 20, "stream": True})
        events = sse_events(r.body)
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        text = "".join(o["choices"][0]["delta"].get("content") or "" for o in objs)
        self.assertEqual(text, self.REPLY)
        self.assertIn("fallback", objs[-1])

    def test_a_quick_reply_is_left_alone(self):
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertNotIn("fallback", j)
        self.assertNotEqual(j["choices"][0]["message"]["content"], self.REPLY)

    def test_flags_go_together(self):
        r = run_cli(["-m", self.model, "--timeout-first-token", "500"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("go together", r.stderr)


class ModelSwap(unittest.TestCase):
    """POST /models/load: another model loads while the current one serves, the switch
    happens between requests (none fails under load), and a failed load leaves the current
    model serving; GET /models lists what is loaded."""

    @classmethod
    def setUpClass(cls):
        cls.gemma = need_model(GEMMA)
        cls.qwen = need_model(QWEN_SMALL)

    def start(self, *flags):
        srv = Server(["-m", self.gemma, "--port", "0", "-c", "1024", "-np", "2", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv

    def served(self, port):
        return request(port, "GET", "/v1/models").json()["data"][0]["id"]

    def test_swap_under_load(self):
        srv = self.start()
        statuses, models, stop = [], [], threading.Event()

        def load():
            while not stop.is_set():
                r = request(srv.port, "POST", "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4})
                statuses.append(r.status)
                if r.status == 200:
                    models.append(r.json()["model"])

        health = []

        def poll_health():
            while not stop.is_set():
                health.append(request(srv.port, "GET", "/health").json().get("state"))
                time.sleep(0.05)

        workers = [threading.Thread(target=load) for _ in range(2)] + [threading.Thread(target=poll_health)]
        for w in workers:
            w.start()
        time.sleep(1.0)
        r = request(srv.port, "POST", "/models/load", {"model": self.qwen}, timeout=300)
        time.sleep(1.0)
        stop.set()
        for w in workers:
            w.join(60)
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["model"], os.path.basename(self.qwen))
        self.assertEqual(j["previous"], os.path.basename(self.gemma))
        self.assertTrue(statuses, "no requests ran")
        self.assertEqual(set(statuses), {200}, "a request failed during the swap")
        self.assertEqual(set(health), {"ready"}, "/health while the other model loaded")
        self.assertIn(os.path.basename(self.gemma), models)
        self.assertEqual(models[-1], os.path.basename(self.qwen), "requests after the swap use the new model")
        self.assertEqual(self.served(srv.port), os.path.basename(self.qwen))
        listed = request(srv.port, "GET", "/models").json()["data"]
        self.assertEqual(listed[0]["status"]["value"], "loaded")
        srv.wait_log(r"switched from %s to %s \(loaded in \d+ ms, switched in" %
                     (re.escape(os.path.basename(self.gemma)), re.escape(os.path.basename(self.qwen))))

    def test_a_failed_swap_is_rolled_back(self):
        bad_dir = tempfile.mkdtemp(prefix="edgellm-bad-model-")
        self.addCleanup(lambda: shutil.rmtree(bad_dir, ignore_errors=True))
        srv = self.start("--models-allow-dir", bad_dir)
        bad = os.path.join(bad_dir, "bad.gguf")
        with open(bad, "wb") as f:
            f.write(b"GGUF" + struct.pack("<I", 3) + struct.pack("<QQ", 7, 1 << 40) + os.urandom(2048))
        for body, needle in (({"model": bad}, "keeps serving"),
                             ({"model": os.path.join(bad_dir, "nonexistent.gguf")}, "no model file"),
                             ({"model": self.qwen, "ctx_size": 99}, "only"),
                             ({}, "give")):
            with self.subTest(body=body):
                r = request(srv.port, "POST", "/models/load", body)
                assert_error_shape(self, r, 400)
                self.assertIn(needle, r.json()["error"]["message"])
        self.assertEqual(self.served(srv.port), os.path.basename(self.gemma))
        r = request(srv.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model"], os.path.basename(self.gemma))
        self.assertEqual(request(srv.port, "GET", "/health").json()["status"], "ok")

    def test_both_models_must_fit_the_memory_limit(self):
        srv = self.start("--memory-limit", "700M")
        r = request(srv.port, "POST", "/models/load", {"model": self.qwen})
        assert_error_shape(self, r, 400)
        self.assertIn("beside the", r.json()["error"]["message"])
        self.assertEqual(self.served(srv.port), os.path.basename(self.gemma))
