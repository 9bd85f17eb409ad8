"""The API details llama.cpp's own server suite checks (Qwen2.5-Coder 0.5B)."""

import json
import unittest

from harness import (
    QWEN_SMALL, assert_error_shape, metrics_values, need_model, request, sse_events, start_server)


class LlamaServerApi(unittest.TestCase):
    """The API details llama.cpp's own server suite checks, on Qwen2.5-Coder 0.5B with two
    slots: continuing the last message, __verbose, token counting, /completions' native
    shape, batches of prompts, JSON prompts, prompt progress and per-token timings,
    generation_settings.logit_bias, /models aliases and tags, two listening addresses,
    /slots' and /metrics' llama.cpp shapes."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "2", "-c", "2048",
                                     "-b", "32", "--metrics", "--host", "127.0.0.1,::1",
                                     "--alias", "qwen,coder", "--tags", "small,chat"])
        cls.port = cls.srv.port

    def post(self, path, body):
        return request(self.port, "POST", path, body)

    def ok(self, path, body):
        r = self.post(path, body)
        self.assertEqual(r.status, 200, f"{path} {body}: {r}")
        return r.json()

    MSGS = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]

    def test_assistant_prefill_and_continue_final_message(self):
        msgs = self.MSGS + [{"role": "assistant", "content": "The best book is"}]
        d = self.ok("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "verbose": True})
        prompt = d["__verbose"]["prompt"]
        self.assertTrue(prompt.endswith("<|im_start|>assistant\nThe best book is"), prompt[-80:])
        # parts of a continued message are joined with a blank line, as llama.cpp does
        parts = self.MSGS + [{"role": "assistant", "content": [{"type": "text", "text": "Wh"},
                                                                {"type": "text", "text": "ill"}]}]
        d = self.ok("/v1/chat/completions", {"messages": parts, "max_tokens": 2, "verbose": True})
        self.assertTrue(d["__verbose"]["prompt"].endswith("assistant\nWh\n\nill"))
        same = self.ok("/apply-template", {"messages": msgs, "add_generation_prompt": False,
                                           "continue_final_message": True})["prompt"]
        self.assertEqual(same, prompt)
        both = self.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2,
                                                  "add_generation_prompt": True,
                                                  "continue_final_message": True})
        assert_error_shape(self, both, 400)
        self.assertIn("add_generation_prompt", both.json()["error"]["message"])
        two = self.post("/v1/chat/completions", {"messages": msgs + [{"role": "assistant", "content": "x"}],
                                                 "max_tokens": 2})
        assert_error_shape(self, two, 400)
        no_gen = self.ok("/apply-template", {"messages": self.MSGS, "add_generation_prompt": False})["prompt"]
        self.assertFalse(no_gen.rstrip().endswith("<|im_start|>assistant"), no_gen[-60:])
        self.assertTrue(self.ok("/apply-template", {"messages": self.MSGS})["prompt"].endswith(
            "<|im_start|>assistant\n"))

    def test_verbose_only_when_asked(self):
        d = self.ok("/v1/chat/completions", {"messages": self.MSGS, "max_tokens": 2})
        self.assertNotIn("__verbose", d)
        d = self.ok("/v1/chat/completions", {"messages": self.MSGS, "max_tokens": 2, "verbose": True})
        self.assertIn("Book", d["__verbose"]["prompt"])
        self.assertEqual(d["__verbose"]["content"], d["choices"][0]["message"]["content"])

    def test_input_tokens_counts_the_rendered_prompt(self):
        prompt = self.ok("/apply-template", {"messages": self.MSGS})["prompt"]
        n = len(self.ok("/tokenize", {"content": prompt, "add_special": True})["tokens"])
        for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
            self.assertEqual(self.ok(path, {"messages": self.MSGS})["input_tokens"], n)
        assert_error_shape(self, self.post("/v1/chat/completions/input_tokens", {"messages": 5}), 400)

    def test_completions_without_v1_is_the_native_api(self):
        d = self.ok("/completions", {"prompt": "def add(a, b):", "n_predict": 4})
        self.assertIn("content", d)
        self.assertIn("generation_settings", d)
        o = self.ok("/v1/completions", {"prompt": "def add(a, b):", "max_tokens": 4})
        self.assertEqual(o["object"], "text_completion")

    def test_batches_and_json_prompts(self):
        ids = self.ok("/tokenize", {"content": "def add(a, b):", "add_special": True})["tokens"]
        one = self.ok("/completion", {"prompt": ids, "n_predict": 6, "temperature": 0})["content"]
        batch = self.ok("/completion", {"prompt": [ids, "def add(a, b):", {"prompt_string": "def add(a, b):"}],
                                        "n_predict": 6, "temperature": 0})
        self.assertIsInstance(batch, list)
        self.assertEqual([b["index"] for b in batch], [0, 1, 2])
        self.assertEqual([b["content"] for b in batch], [one] * 3)
        mixed = self.ok("/completion", {"prompt": ids[:2] + ["(a, b):"], "n_predict": 2, "verbose": True})
        self.assertIn("content", mixed)  # ids and text in one prompt
        oai = self.ok("/v1/completions", {"prompt": ["def add(a, b):", "def sub(a, b):"],
                                          "max_tokens": 3, "temperature": 0})
        self.assertEqual([c["index"] for c in oai["choices"]], [0, 1])
        self.assertEqual(oai["usage"]["completion_tokens"], 6)
        bad = self.post("/completion", {"prompt": ["ok", [1, -1]], "n_predict": 2})
        assert_error_shape(self, bad, 400)
        self.assertIn("prompt 1", bad.json()["error"]["message"])
        assert_error_shape(self, self.post("/completion", {"prompt": ["a", "b"], "stream": True}), 400)
        assert_error_shape(self, self.post("/completion", {"prompt": {"multimodal_data": ["x"],
                                                                      "prompt_string": "y"}}), 400)

    def test_prompt_progress_and_per_token_timings(self):
        body = {"prompt": "word " * 100, "n_predict": 4, "stream": True, "return_progress": True,
                "timings_per_token": True, "cache_prompt": False}
        r = self.post("/completion", body)
        self.assertEqual(r.status, 200, r)
        events = [json.loads(e) for e in sse_events(r.body) if e != "[DONE]"]
        progress = [e for e in events if "prompt_progress" in e]
        self.assertGreaterEqual(len(progress), 4, "one before the prompt and one per 32-token step")
        first = progress[0]
        self.assertEqual(first["prompt_progress"]["processed"], first["prompt_progress"]["cache"])
        self.assertEqual(first["timings"]["prompt_ms"], 0.0)
        done = [p["prompt_progress"]["processed"] for p in progress]
        self.assertEqual(done, sorted(done))
        self.assertEqual(done[-1], progress[-1]["prompt_progress"]["total"])
        texts = [e for e in events if e.get("content") and "prompt_progress" not in e]
        self.assertTrue(texts and all("timings" in e for e in texts))
        self.assertEqual(texts[-1]["timings"]["predicted_n"], len(texts))
        chat = self.post("/v1/chat/completions", {"messages": self.MSGS, "max_tokens": 3, "stream": True,
                                                  "stream_options": {"include_usage": True},
                                                  "timings_per_token": True})
        ev = [json.loads(e) for e in sse_events(chat.body) if e != "[DONE]"]
        self.assertNotIn("timings", ev[0])  # the role chunk comes before anything ran
        self.assertIn("timings", ev[-1])     # the usage chunk

    def test_post_sampling_probs(self):
        d = self.ok("/completion", {"prompt": "Today I would finally become a", "n_probs": 10, "n_predict": 5,
                                    "temperature": 1.0, "top_k": 3, "post_sampling_probs": True})
        probs = d["completion_probabilities"]
        self.assertEqual(len(probs), 5)
        for tok in probs:
            self.assertTrue(0.0 < tok["prob"] <= 1.0)
            self.assertNotIn("logprob", tok)
            top = tok["top_probs"]
            self.assertLessEqual(len(top), 3, "what top-k removed has no probability")
            self.assertAlmostEqual(sum(t["prob"] for t in top), 1.0, places=4)
            self.assertIn(tok["id"], [t["id"] for t in top])
        pre = self.ok("/completion", {"prompt": "Today I would finally become a", "n_probs": 10, "n_predict": 2,
                                      "temperature": 1.0, "top_k": 3})
        self.assertEqual(len(pre["completion_probabilities"][0]["top_logprobs"]), 10, "the model's own, unfiltered")
        assert_error_shape(self, self.post("/completion", {"prompt": "x", "post_sampling_probs": "yes"}), 400)

    def test_generation_settings_logit_bias(self):
        d = self.ok("/completion", {"prompt": "x", "n_predict": 2, "ignore_eos": True,
                                    "logit_bias": [[15, 2.0]]})
        bias = d["generation_settings"]["logit_bias"]
        self.assertIn({"token": 15, "bias": 2.0}, bias)
        self.assertTrue(any(b["bias"] is None for b in bias), "end-of-generation tokens at -inf")
        d = self.ok("/completion", {"prompt": "x", "n_predict": 2})
        self.assertEqual(d["generation_settings"]["logit_bias"], [])

    def test_models_aliases_tags_and_both_addresses(self):
        for host in ("127.0.0.1", "::1"):
            m = request(self.port, "GET", "/v1/models", host=host).json()["data"][0]
            self.assertEqual(m["id"], "coder")  # the first in sorted order
            self.assertEqual(m["aliases"], ["coder", "qwen"])
            self.assertEqual(m["tags"], ["chat", "small"])

    def test_slots_and_metrics_shapes(self):
        self.ok("/completion", {"prompt": "I believe", "n_predict": 8})
        slots = request(self.port, "GET", "/slots").json()
        for s in slots:
            self.assertNotIn("params", s)
            self.assertEqual(s["next_token"][0]["n_remain"], -1)
            self.assertEqual(s["next_token"][0]["n_decoded"], 0)
        r = request(self.port, "GET", "/metrics")
        self.assertGreater(int(r.headers["process-start-time-unix"]), 1700000000)
        text = r.body.decode()
        for name in ("llamacpp:prompt_tokens_cached_total", "llamacpp:n_decode_total",
                     "llamacpp:n_tokens_max", "llamacpp:spec_decode_num_drafts_total",
                     "llamacpp:n_busy_slots_per_decode"):
            self.assertIn(f"# TYPE {name} ", text)
        self.ok("/completion", {"prompt": "I believe", "n_predict": 8})
        rate = lambda: metrics_values(self.port)["llamacpp:predicted_tokens_seconds"]
        self.assertGreater(rate(), 0)  # the window since the previous scrape had a generation
        self.assertEqual(rate(), 0)    # this one had none

    def test_generation_rate_counts_decode_steps(self):
        t = self.ok("/completion", {"prompt": "I believe", "n_predict": 1})["timings"]
        self.assertEqual(t["predicted_per_second"], 0.0)
        t = self.ok("/completion", {"prompt": "I believe", "n_predict": 16, "ignore_eos": True})["timings"]
        self.assertAlmostEqual(t["predicted_per_second"], 1e3 / t["predicted_ms"] * 15, places=6)
