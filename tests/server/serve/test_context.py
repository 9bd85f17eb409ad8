"""A conversation longer than the context: --context-shift and --context-policy summarize."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import (
    ARGS, GEMMA, Server, assert_error_shape, need_model, request, run_cli, sse_events, start_server)


class ContextShift(unittest.TestCase):
    """--context-shift: a reply goes on past a full context, keeping the first --keep tokens
    (Gemma 3: its sliding-window layers keep a ring, -b 64 makes it smaller than -c)."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def start(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", "-c", "2048", "-b", "64", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv

    def long_prompt(self, port):
        text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(125))
        prompt = "Repeat these lines and go on counting:\n" + text
        n = len(request(port, "POST", "/tokenize", {"content": prompt}).json()["tokens"])
        self.assertGreater(n, 1800)
        self.assertLess(n, 2000)
        return prompt, n

    def test_a_full_context_ends_the_reply_without_it(self):
        srv = self.start()
        prompt, n = self.long_prompt(srv.port)
        r = request(srv.port, "POST", "/completion",
                    {"prompt": prompt, "n_predict": 300, "ignore_eos": True, "temperature": 0})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["tokens_predicted"], 2048 - j["tokens_evaluated"] + 1)
        self.assertIs(j["truncated"], False)
        self.assertNotIn("context", j)

    def test_the_reply_goes_on_past_the_context(self):
        srv = self.start("--context-shift", "--keep", "16")
        prompt, n = self.long_prompt(srv.port)
        r = request(srv.port, "POST", "/completion",
                    {"prompt": prompt, "n_predict": 300, "ignore_eos": True, "temperature": 0})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["tokens_predicted"], 300)
        self.assertIs(j["truncated"], True)
        self.assertEqual(j["context"]["policy"], "shift")
        self.assertGreaterEqual(j["context"]["shifts"], 1)
        self.assertEqual(j["context"]["n_keep"], 16 + 1, "--keep, and the BOS")
        self.assertGreater(j["context"]["n_discarded"], 900)
        srv.wait_log(r"context shift: \d+x, dropped \d+ tokens after the first 17", timeout=5)
        # the text after the shift still reads as the lines it was repeating
        self.assertRegex(j["content"][-400:], r"Line \d+")
        # the request's n_keep wins over --keep; chat works the same way
        r = request(srv.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": prompt}], "max_tokens": 200,
                     "ignore_eos": True, "temperature": 0, "n_keep": 40})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["usage"]["completion_tokens"], 200)
        self.assertEqual(j["context"]["n_keep"], 41)
        self.assertEqual(j["choices"][0]["finish_reason"], "length")

    def test_n_keep_without_context_shift_is_a_400(self):
        srv = self.start()
        for field in ("n_keep", "n_discard"):
            r = request(srv.port, "POST", "/completion", {"prompt": "hi", "n_predict": 1, field: 8})
            assert_error_shape(self, r, 400)
            self.assertIn(field, r.json()["error"]["message"])
        r = request(srv.port, "POST", "/completion", {"prompt": "hi", "n_predict": 1, "n_keep": 0})
        self.assertEqual(r.status, 200, r)

    def test_flags(self):
        for flags, msg in ((["--keep", "4"], "--keep needs --context-shift"),
                           (["--context-shift", "--no-context-shift"], "contradict")):
            r = run_cli(["-m", self.model, *flags])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(msg, r.stderr)


class HybridContext(unittest.TestCase):
    """A hybrid model (tiny-lfm2: short convolutions with a recurrent state, and attention)
    under --context-shift: its state cannot drop tokens, so the start-up says the shift is
    off, a request asking for one (n_keep) or needing one (max_tokens past the context) is a
    400 naming the reason, and a reply without max_tokens ends at a full context. The chat
    renders LFM2.5's template."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="edgellm-lfm2-")
        cls.model = os.path.join(cls.dir, "tiny-lfm2.gguf")
        subprocess.run([ARGS.bin, "synth", "--shape", "tiny-lfm2", "--type", "Q8_0", "-o", cls.model],
                       check=True, capture_output=True)
        template = os.path.join(ARGS.root, "tests", "data", "templates", "lfm25.jinja")
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "128", "-t", "2",
                                     "--context-shift", "--chat-template-file", template])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_the_start_up_says_the_shift_is_off(self):
        self.srv.wait_log(r"warning: context shift is off: this lfm2 model is a hybrid", timeout=5)
        self.srv.wait_log(r"recurrent state 8 KiB \(4 layers\)", timeout=5)

    def test_a_shift_asked_for_or_needed_is_a_400_naming_why(self):
        msgs = [{"role": "user", "content": "Hi"}]
        for body, what in (({"messages": msgs, "max_tokens": 4, "n_keep": 8}, "n_keep"),
                           ({"messages": msgs, "max_tokens": 4, "n_discard": 8}, "n_discard"),
                           ({"messages": msgs, "max_tokens": 500}, "max_tokens 500")):
            r = request(self.srv.port, "POST", "/v1/chat/completions", body)
            assert_error_shape(self, r, 400)
            message = r.json()["error"]["message"]
            self.assertIn(what, message)
            self.assertIn("hybrid", message)
            self.assertIn("no position can be dropped", message)

    def test_a_reply_without_max_tokens_ends_at_the_full_context(self):
        r = request(self.srv.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0,
                     "ignore_eos": True})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["choices"][0]["finish_reason"], "length")
        self.assertEqual(j["usage"]["total_tokens"], 128 + 1)

    def test_the_chat_renders_lfm25s_template(self):
        r = request(self.srv.port, "POST", "/apply-template",
                    {"messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Hi"}]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["prompt"],
                         "<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n"
                         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")

    def test_speculation_on_a_hybrid_does_not_start_naming_the_flag(self):
        # (drafts would be taken back through the recurrent state, which cannot drop them)
        for flags, name in ((["--spec-type", "ngram"], "--spec-type ngram"),
                            (["-md", self.model], "-md")):
            p = subprocess.run([ARGS.bin, "serve", "-m", self.model, "--port", "0", "-c", "128",
                                "-t", "2", *flags], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(name + ": speculative decoding is not supported on this model", p.stderr)
            self.assertIn("hybrid", p.stderr)


class ContextSummarize(unittest.TestCase):
    """--context-policy summarize (Gemma 3): a chat history too long for the context and the
    reply has its oldest turns condensed by the model into the system prompt; the latest
    turns and the system prompt stay; the next turn reuses the summary and the KV cache."""

    FACTS = ["My name is Lin and I drive a blue sedan.",
             "We are going to Hangzhou for my sister's wedding on Saturday.",
             "The battery is at 30 percent.", "My daughter gets car sick.",
             "I like jazz.", "We must arrive before 3 pm.", "The hotel is the Lakeview Inn.",
             "Remind me to buy flowers."]

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "1024", "-n", "200",
                                     "--context-policy", "summarize"])
        cls.port = cls.srv.port

    def history(self, n_facts):
        msgs = [{"role": "system", "content": "You are a helpful in-car assistant. Be brief."}]
        for f in self.FACTS[:n_facts]:
            msgs.append({"role": "user", "content": f + " Please remember this detail. " * 8})
            msgs.append({"role": "assistant", "content": "Noted. " + "I will remember that. " * 14})
        return msgs

    def chat(self, messages, **kw):
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": messages, "max_tokens": 40, "temperature": 0, **kw})
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_a_short_chat_is_left_alone(self):
        j = self.chat(self.history(1) + [{"role": "user", "content": "Hi"}])
        self.assertNotIn("context", j)

    def test_long_history_is_summarized_and_the_summary_reused(self):
        msgs = self.history(8) + [{"role": "user", "content": "Where are we going?"}]
        j = self.chat(msgs)
        c = j["context"]
        self.assertEqual(c["policy"], "summarize")
        self.assertGreater(c["prompt_tokens_before"], 1024 - 40)
        self.assertEqual(c["prompt_tokens"], j["usage"]["prompt_tokens"])
        self.assertLessEqual(c["prompt_tokens"] + 40, 1024, "room for the reply (max_tokens)")
        self.assertGreaterEqual(c["summarized_messages"], 2)
        self.assertEqual(c["summarized_messages"] % 2, 0, "whole turns: the rest starts with a user turn")
        self.assertTrue(c["summary"].strip())
        self.assertIs(c["summary_cached"], False)
        self.srv.wait_log(r"context: summarized the %d oldest messages \(%d -> %d prompt tokens; summary \d+ tokens" %
                          (c["summarized_messages"], c["prompt_tokens_before"], c["prompt_tokens"]), timeout=5)
        # The same history again: the summary is kept, and the prompt comes from the KV cache.
        j2 = self.chat(msgs)
        self.assertIs(j2["context"]["summary_cached"], True)
        self.assertEqual(j2["context"]["summary"], c["summary"])
        self.assertGreaterEqual(j2["timings"]["cache_n"], j2["usage"]["prompt_tokens"] - 1)
        # The next turn of the conversation still fits after the same summary: its prefix is
        # the previous prompt's.
        nxt = msgs + [{"role": "assistant", "content": j2["choices"][0]["message"]["content"]},
                      {"role": "user", "content": "And when must we arrive?"}]
        j3 = self.chat(nxt, max_tokens=8)
        self.assertEqual(j3["context"]["summary"], c["summary"])
        self.assertGreater(j3["timings"]["cache_n"], c["prompt_tokens"] - 20)
        # Streaming says the same in its last chunk.
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": msgs, "max_tokens": 4, "temperature": 0, "stream": True})
        final = json.loads(sse_events(r.body)[-2])
        self.assertEqual(final["context"]["policy"], "summarize")

    def test_what_cannot_be_summarized_is_a_400(self):
        # one user message larger than the context: nothing older to condense
        big = "word " * 1500
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": big}], "max_tokens": 4})
        assert_error_shape(self, r, 400)
        self.assertEqual(r.json()["error"]["type"], "exceed_context_size_error")
        # the completions API has no turns to condense
        r = request(self.port, "POST", "/v1/completions", {"prompt": big, "max_tokens": 4})
        assert_error_shape(self, r, 400)

    def test_policy_flag(self):
        r = run_cli(["-m", self.model, "--context-policy", "squeeze"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--context-policy takes error, shift or summarize", r.stderr)
        r = run_cli(["-m", self.model, "--context-policy", "summarize", "--context-shift"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("contradicts", r.stderr)
