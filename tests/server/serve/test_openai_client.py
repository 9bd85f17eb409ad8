"""The acceptance through the official openai client (Qwen2.5-Coder 0.5B)."""

import json
import sys
import unittest

from harness import (
    QWEN_SMALL, TOOLS, need_model, request, start_server)


class OpenAIClientConstrained(unittest.TestCase):
    """The acceptance through the official openai client: tools with each tool_choice,
    response_format of both kinds, logprobs, n and logit_bias, as an application using the
    client sees them (Qwen2.5-Coder 0.5B)."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", "2048"])
        cls.port = cls.srv.port

    def client(self):
        try:
            import openai
        except ImportError:
            self.skipTest(f"the openai package is not installed for {sys.executable} "
                          "(scripts/setup.sh installs it into build/venv)")
        return openai, openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1",
                                     api_key="anything", timeout=120, max_retries=0)

    def create(self, content, **kw):
        _, c = self.client()
        kw = {"temperature": 0, "max_tokens": 64, **kw}
        return c.chat.completions.create(model="local",
                                         messages=[{"role": "user", "content": content}], **kw)

    def test_each_tool_choice(self):
        r = self.create("What is the weather in Paris?", tools=TOOLS, tool_choice="auto")
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments).get("city"), "Paris")
        r = self.create("Tell me a joke.", tools=TOOLS, tool_choice="required", max_tokens=96)
        self.assertEqual(r.choices[0].finish_reason, "tool_calls", r)
        self.assertIsInstance(json.loads(r.choices[0].message.tool_calls[0].function.arguments), dict)
        r = self.create("What is the weather in Paris?", tools=TOOLS,
                        tool_choice={"type": "function", "function": {"name": "play_music"}})
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "play_music")
        self.assertIsInstance(json.loads(call.function.arguments).get("song"), str)
        r = self.create("What is the weather in Paris?", tools=TOOLS, tool_choice="none",
                        max_tokens=16)
        self.assertFalse(r.choices[0].message.tool_calls)
        self.assertTrue(r.choices[0].message.content)
        openai, _ = self.client()
        with self.assertRaises(openai.BadRequestError) as cm:  # a 400: the client does not retry
            self.create("x", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertIn("nope", str(cm.exception))

    def test_response_format_both_kinds(self):
        r = self.create("Return a JSON object with the keys name and age.",
                        response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        schema = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                  "properties": {"name": {"type": "string"},
                                 "age": {"type": "integer", "minimum": 0, "maximum": 150}}}
        r = self.create("Describe a person as JSON.", response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
        obj = json.loads(r.choices[0].message.content)
        self.assertEqual(set(obj), {"name", "age"}, obj)
        self.assertIsInstance(obj["name"], str)
        self.assertIs(type(obj["age"]), int)
        self.assertTrue(0 <= obj["age"] <= 150, obj)
        openai, _ = self.client()
        with self.assertRaises(openai.BadRequestError) as cm:
            self.create("x", response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "array", "uniqueItems": True}}})
        self.assertIn("uniqueItems", str(cm.exception))

    def test_logprobs(self):
        r = self.create("Say hello.", logprobs=True, top_logprobs=3, max_tokens=8)
        content = r.choices[0].logprobs.content
        self.assertTrue(content)
        # one entry per generated token (the end-of-turn token is not text and has none)
        stop = 1 if r.choices[0].finish_reason == "stop" else 0
        self.assertEqual(len(content), r.usage.completion_tokens - stop)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertEqual(t.top_logprobs[0].token, t.token, "greedy: the chosen token is the best")
            lps = [x.logprob for x in t.top_logprobs]
            self.assertEqual(lps, sorted(lps, reverse=True))
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)

    def test_n_choices(self):
        r = self.create("Name a colour.", n=2, temperature=1.0, seed=3, max_tokens=8)
        self.assertEqual([c.index for c in r.choices], [0, 1])
        self.assertTrue(all(c.message.content for c in r.choices))

    def test_logit_bias(self):
        first = self.create("Say hello.", max_tokens=1, logprobs=True)
        token = first.choices[0].logprobs.content[0].token
        ids = request(self.port, "POST", "/tokenize", {"content": token}).json()["tokens"]
        self.assertEqual(len(ids), 1, ids)
        banned = self.create("Say hello.", max_tokens=1, logprobs=True,
                             logit_bias={str(ids[0]): -100})
        self.assertNotEqual(banned.choices[0].logprobs.content[0].token, token)
