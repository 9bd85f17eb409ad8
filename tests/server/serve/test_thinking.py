"""Thinking that obeys (issue 47): the budget of a thinking block forces its end and the
answer follows, off means off, in every dialect's spelling. Qwen2.5-Coder 0.5B under
Qwen 3.5's template (tests/data/templates/qwen35.jinja), whose generation prompt opens the
block ("<think>\\n"): a model that was never taught to close it thinks until max_tokens, so
whatever closes it here is the budget. Qwen 3's template for the off switch's prompt."""

import json
import os
import unittest

from harness import (
    ARGS, QWEN_SMALL, Server, assert_error_shape, chat_body, need_model, request, run_cli,
    sse_objects, start_server)

QUESTION = "What is 2+2? Answer with a number."
# A request the model answers at length: it never closes the block by itself.
POEM = "Write a short poem about the sea."


def template(name):
    return os.path.join(ARGS.root, "tests", "data", "templates", name)


class ThinkingBudget(unittest.TestCase):
    """One Qwen2.5-Coder 0.5B server with Qwen 3.5's template, thinking on (the default)."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", "1024",
                                     "--chat-template-file", template("qwen35.jinja")])
        cls.port = cls.srv.port

    def post(self, path, body):
        r = request(self.port, "POST", path, body)
        self.assertEqual(r.status, 200, f"{path} {body}: {r}")
        return r.json()

    def chat(self, content=POEM, **kw):
        return self.post("/v1/chat/completions", chat_body(content, **{"temperature": 0, "max_tokens": 40, **kw}))

    def test_budget_forces_the_end_and_the_answer_follows(self):
        free = self.chat()
        msg = free["choices"][0]["message"]
        # Without a budget the block does not close: every token is reasoning, no answer.
        self.assertTrue(msg.get("reasoning_content"), free)
        self.assertFalse(msg.get("content"), free)
        self.assertEqual(free["usage"]["completion_tokens_details"]["reasoning_tokens"],
                         free["usage"]["completion_tokens"], free["usage"])
        for budget in (4, 9):
            r = self.chat(reasoning_budget_tokens=budget)
            msg = r["choices"][0]["message"]
            u = r["usage"]
            self.assertEqual(u["completion_tokens_details"]["reasoning_tokens"], budget, u)
            # the reasoning is where the free run's began, cut after the budget
            self.assertTrue(free["choices"][0]["message"]["reasoning_content"].startswith(
                msg["reasoning_content"].rstrip()), (msg, free))
            self.assertNotIn("</think>", msg["reasoning_content"])
            self.assertTrue(msg.get("content"), f"the answer follows the forced </think>: {r}")
            # the forced end and the answer are generated tokens like the others
            self.assertGreater(u["completion_tokens"], budget + 1, u)
            self.assertEqual(r["timings"]["predicted_n"], u["completion_tokens"], r["timings"])

    def test_every_spelling_of_the_budget(self):
        want = self.chat(reasoning_budget_tokens=6)["choices"][0]["message"]
        for kw in ({"thinking_budget_tokens": 6}, {"reasoning_budget_tokens": 6, "thinking_budget_tokens": 6}):
            got = self.chat(**kw)["choices"][0]["message"]
            self.assertEqual(got, want, kw)
        # Anthropic's thinking.budget_tokens: a thinking block, then the text
        m = self.post("/v1/messages", {"model": "x", "max_tokens": 40, "temperature": 0,
                                       "messages": [{"role": "user", "content": POEM}],
                                       "thinking": {"type": "enabled", "budget_tokens": 6}})
        kinds = [b["type"] for b in m["content"]]
        self.assertEqual(kinds, ["thinking", "text"], m)
        self.assertEqual(m["content"][0]["thinking"], want["reasoning_content"])
        self.assertEqual(m["content"][1]["text"], want["content"])
        # The Responses API passes the field on; its usage counts the reasoning
        r = self.post("/v1/responses", {"input": POEM, "max_output_tokens": 40, "temperature": 0,
                                        "reasoning_budget_tokens": 6})
        self.assertEqual(r["usage"]["output_tokens_details"]["reasoning_tokens"], 6, r["usage"])
        self.assertEqual([o["type"] for o in r["output"]], ["reasoning", "message"], r["output"])

    def test_streaming_sends_the_reasoning_then_the_answer(self):
        whole = self.chat(reasoning_budget_tokens=5)["choices"][0]["message"]
        r = request(self.port, "POST", "/v1/chat/completions",
                    chat_body(POEM, temperature=0, max_tokens=40, reasoning_budget_tokens=5, stream=True,
                              stream_options={"include_usage": True}))
        self.assertEqual(r.status, 200, r)
        chunks = sse_objects(self, r)
        order, reasoning, content = [], "", ""
        for c in chunks:
            if not c.get("choices"):
                continue
            d = c["choices"][0]["delta"]
            for key in ("reasoning_content", "content"):
                if d.get(key):
                    if not order or order[-1] != key:
                        order.append(key)
            reasoning += d.get("reasoning_content") or ""
            content += d.get("content") or ""
        self.assertEqual(order, ["reasoning_content", "content"])
        self.assertEqual((reasoning, content), (whole["reasoning_content"], whole["content"]))
        self.assertEqual(chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"], 5)

    def test_off_means_off(self):
        on = request(self.port, "POST", "/apply-template", chat_body(QUESTION)).json()["prompt"]
        self.assertTrue(on.endswith("<think>\n"), on)
        for kw in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"},
                   {"reasoning_effort": "minimal"}, {"reasoning_budget_tokens": 0}):
            prompt = request(self.port, "POST", "/apply-template", chat_body(QUESTION, **kw)).json()["prompt"]
            self.assertTrue(prompt.endswith("<think>\n\n</think>\n\n"), (kw, prompt))
            r = self.chat(QUESTION, **kw)
            msg = r["choices"][0]["message"]
            self.assertFalse(msg.get("reasoning_content"), (kw, r))
            self.assertTrue(msg.get("content"), (kw, r))
            self.assertEqual(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 0, kw)
        # an effort that thinks, and the request's template variable over its effort
        for kw in ({"reasoning_effort": "high"},
                   {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}}):
            prompt = request(self.port, "POST", "/apply-template", chat_body(QUESTION, **kw)).json()["prompt"]
            self.assertTrue(prompt.endswith("<think>\n"), (kw, prompt))

    def test_schema_answer_after_the_thinking(self):
        # The grammar waits while the block is open and holds the answer after it.
        schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
                  "required": ["answer"], "additionalProperties": False}
        r = self.chat(QUESTION, reasoning_budget_tokens=6, max_tokens=60,
                      response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
        msg = r["choices"][0]["message"]
        self.assertTrue(msg.get("reasoning_content"), r)
        v = json.loads(msg["content"])
        self.assertEqual(set(v), {"answer"}, msg)
        self.assertIsInstance(v["answer"], int)

    def test_bad_values_are_400_naming_the_field(self):
        for kw, field in (({"reasoning_budget_tokens": -5}, "reasoning_budget_tokens"),
                          ({"thinking_budget_tokens": "lots"}, "thinking_budget_tokens"),
                          ({"reasoning_effort": "extreme"}, "reasoning_effort"),
                          ({"chat_template_kwargs": {"enable_thinking": "no"}}, "enable_thinking")):
            r = request(self.port, "POST", "/v1/chat/completions", chat_body(QUESTION, **kw))
            err = assert_error_shape(self, r, 400)
            self.assertIn(field, err["message"])
        r = request(self.port, "POST", "/v1/messages", {
            "model": "x", "max_tokens": 40, "messages": [{"role": "user", "content": QUESTION}],
            "thinking": {"type": "enabled", "budget_tokens": -1}})
        self.assertEqual(r.status, 400, r)
        self.assertIn("budget_tokens", r.body.decode())


class ThinkingServerFlags(unittest.TestCase):
    """--reasoning-budget and --reasoning-effort: the server's defaults for every request."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)

    def start(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", "-np", "1", "-c", "512", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv.port

    def chat(self, port, **kw):
        r = request(port, "POST", "/v1/chat/completions", chat_body(POEM, temperature=0, max_tokens=24, **kw))
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_reasoning_budget_flag(self):
        port = self.start("--chat-template-file", template("qwen35.jinja"), "--reasoning-budget", "3")
        r = self.chat(port)
        self.assertEqual(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 3, r)
        self.assertTrue(r["choices"][0]["message"].get("content"), r)
        r = self.chat(port, reasoning_budget_tokens=7)  # the request's own
        self.assertEqual(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 7, r)
        r = self.chat(port, reasoning_budget_tokens=-1)  # the server's
        self.assertEqual(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 3, r)
        for bad in ("-2", "many"):
            cli = run_cli(["-m", self.model, "--port", "0", "--reasoning-budget", bad])
            self.assertEqual(cli.returncode, 2, cli.stderr)
            self.assertIn("--reasoning-budget", cli.stderr)

    def test_reasoning_effort_flag_and_qwen3_template(self):
        port = self.start("--chat-template-file", template("qwen3.jinja"), "--reasoning-effort", "none")
        prompt = request(port, "POST", "/apply-template", chat_body(QUESTION)).json()["prompt"]
        self.assertTrue(prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), prompt)
        prompt = request(port, "POST", "/apply-template",
                         chat_body(QUESTION, reasoning_effort="low")).json()["prompt"]
        self.assertTrue(prompt.endswith("<|im_start|>assistant\n"), prompt)
        r = self.chat(port)
        self.assertFalse(r["choices"][0]["message"].get("reasoning_content"), r)
        cli = run_cli(["-m", self.model, "--port", "0", "--reasoning-effort", "extreme"])
        self.assertEqual(cli.returncode, 2, cli.stderr)
        self.assertIn("--reasoning-effort", cli.stderr)
        cli = run_cli(["-m", self.model, "--port", "0", "--chat-template-kwargs", '{"enable_thinking": "no"}'])
        self.assertEqual(cli.returncode, 2, cli.stderr)
        self.assertIn("enable_thinking", cli.stderr)
