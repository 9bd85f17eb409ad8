"""The seeds (shared/seeds/000-002): their own command lines and requests, on the default
model."""

import json
import re
import shutil
import time
import unittest

from harness import (
    LOAD_TIMEOUT_S, QWEN, QWEN_SMALL, RawStream, need_model, port_or_free, request, sse_events,
    start_server)


# ---- the seeds, on the default model -----------------------------------------------------


def seed000_flags(model, port, draft=None):
    """Seed 000's llama-server command line, in its order, with local model paths (without the
    draft model's flags when draft is None)."""
    flags = ["-m", model]
    if draft:
        flags += ["-md", draft]
    flags += ["--host", "127.0.0.1", "--port", str(port), "--parallel", "1",
              "--no-cont-batching", "--threads", "4", "--threads-batch", "4", "--ctx-size", "1024",
              "--flash-attn", "on", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--mlock",
              "--temp", "0.7", "--top-p", "0.8", "--repeat-penalty", "1.05", "-n", "256"]
    if draft:
        flags += ["--draft-max", "4", "--draft-min", "2", "--draft-p-min", "0.6", "-ngld", "99"]
    return flags


class Seed000CarAssistant(unittest.TestCase):
    """shared/seeds/000: a single-user car assistant on 127.0.0.1:8899, its start script
    verbatim: `taskset -c 0-3` (where taskset exists), the 1.5B with the 0.5B as its draft
    model, and every flag of the script in its order."""

    @classmethod
    def setUpClass(cls):
        model = need_model(QWEN)
        draft = need_model(QWEN_SMALL)
        port = port_or_free(8899)
        prefix = ("taskset", "-c", "0-3") if shutil.which("taskset") else ()
        cls.srv = start_server(cls, seed000_flags(model, port, draft=draft), port=port,
                               ready=False, prefix=prefix)
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
        # what the process has locked in RAM the moment /health says ok (--mlock)
        with open("/proc/%d/status" % cls.srv.proc.pid) as f:
            cls.locked_kb_at_ok = int(re.search(r"VmLck:\s+(\d+) kB", f.read()).group(1))
        cls.srv.wait_repacked()

    def test_weights_are_locked_by_the_time_health_says_ok(self):
        # --mlock runs beside the context and the warm-up step, and is waited for before
        # ready: the 1.5B's weights (about 1 GB) and the draft model's are locked by then
        self.assertGreater(self.locked_kb_at_ok, 1000 * 1024, self.srv.log_text())
        self.assertRegex(self.srv.log_text(), r"start-up: .*mlock \(beside the context and the warm-up\) \d+ ms")

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
        # The erased conversation is gone: at most the chat template's opening (the default
        # system prompt) comes back, from an earlier request kept by --cache-ram.
        self.assertLess(r.json()["timings"]["cache_n"], 30)
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
        # the draft model: loaded, its memory billed, -ngld noted, speculation on
        self.assertIn("memory of the draft model", log)
        self.assertIn("-ngld 99", log)
        self.assertRegex(log, r"speculative decoding: draft model \S+ \(p_min 0.6")

    def test_speculation_is_reported_and_exact(self):
        # greedy: the same text as without speculation (speculative.n_max 0 turns it off for
        # one request); the draft counts in the timings, the accept rate in the log
        body = {"messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
                "max_tokens": 48, "temperature": 0}
        a = request(self.port, "POST", "/v1/chat/completions", body).json()
        # (cache_prompt false: a fresh prefill as a's. Reusing a's prompt re-evaluates its
        # last token alone, and without AMX a K-quant batch and a token alone differ in the
        # order of float additions (docs/kernels.md): a near tie may then answer otherwise,
        # which is the prompt cache's property, not speculation's.)
        b = request(self.port, "POST", "/v1/chat/completions",
                    dict(body, **{"speculative.n_max": 0, "cache_prompt": False})).json()
        self.assertEqual(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"])
        self.assertNotIn("draft_n", b["timings"])
        # the controller may turn drafting off after it measured it: a fresh request with
        # --spec-fixed semantics is not available here, so only check what was reported
        if "draft_n" in a["timings"]:
            self.assertLessEqual(a["timings"]["draft_n_accepted"], a["timings"]["draft_n"])
        self.assertRegex(self.srv.log_text(), r"accept rate \d\.\d\d|draft 0 \(speculation")
        # asking for more drafts than the server's --draft-max: refused, named
        r = request(self.port, "POST", "/v1/chat/completions", dict(body, **{"speculative.n_max": 9}))
        self.assertEqual(r.status, 400, r)
        self.assertIn("speculative.n_max", r.json()["error"]["message"])

    def test_resident_memory_within_the_seeds_budget(self):
        # seed 000: 1.5B + 0.5B + KV resident within 1.7 GB with --mlock (its cgroup limit,
        # MemoryMax=2G, counts in binary units: 1.7 GiB)
        with open(f"/proc/{self.srv.proc.pid}/status") as f:
            rss_kb = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))
        print(f"\n  seed 000 resident memory: {rss_kb / 1024:.0f} MiB ({rss_kb * 1024 / 1e9:.2f} GB)",
              flush=True)
        self.assertLessEqual(rss_kb * 1024, 1.7 * 2**30)


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
        # (logged before /health says ok, but read by a thread here)
        self.srv.wait_log(r"WARNING: listening on 0\.0\.0\.0 without --api-key", timeout=10)
        self.srv.wait_log(re.escape("2 slots of 2048 tokens"), timeout=10)

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

    def test_chat_json_object_answer(self):
        # the seed's curl, asking for JSON mode: the answer is JSON, with both fields
        body = {"model": "local", "temperature": 0.1, "response_format": {"type": "json_object"},
                "messages": [{"role": "user", "content": "返回一个 JSON，包含 name 和 age 两个字段"}]}
        r = request(self.port, "POST", "/v1/chat/completions", body, host="localhost")
        self.assertEqual(r.status, 200, r)
        choice = r.json()["choices"][0]
        self.assertEqual(choice["finish_reason"], "stop", choice)
        v = json.loads(choice["message"]["content"])
        self.assertIsInstance(v, dict, v)
        self.assertIn("name", v)
        self.assertIn("age", v)

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
