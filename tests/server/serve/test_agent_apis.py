"""Anthropic's /v1/messages and OpenAI's /v1/responses (Qwen2.5-Coder 0.5B)."""

import json
import unittest

from harness import (
    QWEN_SMALL, assert_error_shape, need_model, request, start_server)


class AgentApis(unittest.TestCase):
    """Anthropic's /v1/messages (+ count_tokens) and OpenAI's /v1/responses on the chat path,
    with the openai and plain-HTTP clients, on Qwen2.5-Coder 0.5B."""

    TOOL = {"name": "get_weather", "description": "Get the weather of a city",
            "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                             "required": ["location"]}}

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "4096", "--api-key", "k"])
        cls.port = cls.srv.port

    def post(self, path, body, key=True):
        return request(self.port, "POST", path, body, headers={"x-api-key": "k"} if key else None)

    def test_messages_basic_system_and_usage(self):
        r = self.post("/v1/messages", {"model": "claude", "max_tokens": 16, "system": "Answer briefly.",
                                       "messages": [{"role": "user", "content": "Say hello"}]})
        self.assertEqual(r.status, 200, r)
        d = r.json()
        self.assertEqual((d["type"], d["role"], d["model"]), ("message", "assistant", "claude"))
        self.assertEqual(d["content"][0]["type"], "text")
        self.assertIn(d["stop_reason"], ("end_turn", "max_tokens"))
        self.assertGreater(d["usage"]["output_tokens"], 0)
        self.assertNotIn("timings", d)
        n = self.post("/v1/messages/count_tokens", {"model": "claude", "system": "Answer briefly.",
                                                    "messages": [{"role": "user", "content": "Say hello"}]})
        self.assertEqual(n.status, 200, n)
        self.assertEqual(n.json()["input_tokens"],
                         d["usage"]["input_tokens"] + d["usage"]["cache_read_input_tokens"])
        self.assertEqual(self.post("/v1/messages", {"max_tokens": 4, "messages": []}).status, 400)
        self.assertEqual(self.post("/v1/messages", {"max_tokens": 4, "messages": [
            {"role": "user", "content": "x"}]}, key=False).status, 401)
        img = self.post("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]})
        self.assertEqual(img.status, 400, img)
        self.assertEqual(img.json()["type"], "error")
        self.assertIn("image input is not supported", img.json()["error"]["message"])

    def test_messages_stream_events_in_order(self):
        r = self.post("/v1/messages", {"max_tokens": 8, "stream": True,
                                       "messages": [{"role": "user", "content": "Count: one, two,"}]})
        self.assertEqual(r.status, 200, r)
        events = [json.loads(line[6:]) for line in r.body.decode().splitlines() if line.startswith("data: ")]
        types = [e["type"] for e in events]
        self.assertEqual(types[0], "message_start")
        self.assertEqual(types[1], "content_block_start")
        self.assertEqual(types[-3:], ["content_block_stop", "message_delta", "message_stop"])
        self.assertTrue(all(t == "content_block_delta" for t in types[2:-3]))
        self.assertGreater(events[0]["message"]["usage"]["input_tokens"], 0)
        # every text delta is at least one token (an end-of-turn token is counted, not sent)
        self.assertGreaterEqual(events[-2]["usage"]["output_tokens"], len(types) - 5)
        self.assertLessEqual(events[-2]["usage"]["output_tokens"], 8)

    def test_messages_tool_use_and_result(self):
        r = self.post("/v1/messages", {"max_tokens": 80, "tools": [self.TOOL],
                                       "tool_choice": {"type": "tool", "name": "get_weather"},
                                       "messages": [{"role": "user", "content": "Weather in Paris?"}]})
        self.assertEqual(r.status, 200, r)
        d = r.json()
        self.assertEqual(d["stop_reason"], "tool_use")
        call = next(b for b in d["content"] if b["type"] == "tool_use")
        self.assertEqual(call["name"], "get_weather")
        self.assertIsInstance(call["input"]["location"], str)
        back = self.post("/v1/messages", {"max_tokens": 24, "tools": [self.TOOL],
                                          "tool_choice": {"type": "none"}, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                          "content": "sunny, 25 C"}]}]})
        self.assertEqual(back.status, 200, back)
        self.assertEqual(back.json()["content"][0]["type"], "text")

    def test_messages_structured_output(self):
        import jsonschema
        schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
                  "required": ["city", "population"], "additionalProperties": False}
        ask = [{"role": "user", "content": "Name a big city and its population."}]
        # output_config.format (what anthropic's messages.parse sends), plain and streamed,
        # and the beta's output_format
        for extra in ({"output_config": {"format": {"type": "json_schema", "schema": schema}}},
                      {"output_format": {"type": "json_schema", "schema": schema}}):
            r = self.post("/v1/messages", {"max_tokens": 60, "temperature": 0, "messages": ask, **extra})
            self.assertEqual(r.status, 200, r)
            d = r.json()
            self.assertEqual(d["stop_reason"], "end_turn", d)
            jsonschema.validate(json.loads(d["content"][0]["text"]), schema)
        r = self.post("/v1/messages", {"max_tokens": 60, "temperature": 0, "messages": ask, "stream": True,
                                       "output_config": {"format": {"type": "json_schema", "schema": schema}}})
        self.assertEqual(r.status, 200, r)
        text = "".join(e["delta"].get("text", "") for e in
                       (json.loads(line[6:]) for line in r.body.decode().splitlines() if line.startswith("data: "))
                       if e["type"] == "content_block_delta")
        jsonschema.validate(json.loads(text), schema)
        # with tools: a tool_use valid against its input_schema, or the typed answer
        for q in ("Weather in Paris?", "Name a big city and its population."):
            r = self.post("/v1/messages", {"max_tokens": 80, "temperature": 0, "tools": [self.TOOL],
                                           "messages": [{"role": "user", "content": q}],
                                           "output_config": {"format": {"type": "json_schema", "schema": schema}}})
            self.assertEqual(r.status, 200, r)
            d = r.json()
            if d["stop_reason"] == "tool_use":
                call = next(b for b in d["content"] if b["type"] == "tool_use")
                jsonschema.validate(call["input"], self.TOOL["input_schema"])
            else:
                jsonschema.validate(json.loads(d["content"][0]["text"]), schema)
        n = self.post("/v1/messages/count_tokens", {"messages": ask, "output_config": {
            "format": {"type": "json_schema", "schema": schema}}})
        self.assertEqual(n.status, 200, n)
        # what it cannot honour is a 400 naming it
        for bad, word in (({"output_config": {"effort": "high"}}, "output_config.effort"),
                          ({"output_config": {"format": {"type": "text"}}}, "output_config.format"),
                          ({"output_format": {"type": "json_schema", "schema": {"type": "string", "format": "uri"}}},
                           "format")):
            r = self.post("/v1/messages", {"max_tokens": 8, "messages": ask, **bad})
            self.assertEqual(r.status, 400, r)
            self.assertIn(word, r.json()["error"]["message"])

    def test_responses_text_stream_and_function_call(self):
        from openai import OpenAI
        client = OpenAI(api_key="k", base_url=f"http://127.0.0.1:{self.port}/v1")
        r = client.responses.create(model="m", input="Say hello", max_output_tokens=12,
                                    instructions="Answer briefly.")
        self.assertGreater(len(r.output_text), 0)
        self.assertGreater(r.usage.output_tokens, 0)
        kinds = [e.type for e in client.responses.create(model="m", input="Say hi",
                                                         max_output_tokens=200, stream=True)]
        self.assertEqual(kinds[0], "response.created")
        self.assertIn("response.output_text.delta", kinds)
        self.assertEqual(kinds[-1], "response.completed")
        tool = {"type": "function", "name": "get_weather", "parameters": self.TOOL["input_schema"]}
        f = client.responses.create(model="m", input="Weather in Paris?", tools=[tool],
                                    tool_choice="required", max_output_tokens=80)
        call = next(o for o in f.output if o.type == "function_call")
        self.assertEqual(call.name, "get_weather")
        self.assertIn("location", json.loads(call.arguments))
        bad = self.post("/v1/responses", {"input": "x", "previous_response_id": "resp_1"})
        assert_error_shape(self, bad, 400)

    def test_responses_tools_with_a_typed_answer(self):
        # what openai-agents and instructor send: tools and text.format together
        import jsonschema
        from openai import OpenAI
        client = OpenAI(api_key="k", base_url=f"http://127.0.0.1:{self.port}/v1")
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
                  "additionalProperties": False}
        tool = {"type": "function", "name": "get_weather", "parameters": self.TOOL["input_schema"]}
        fmt = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
        for q, choice in (("Weather in Paris?", "auto"), ("Say hello.", "auto"), ("Say hello.", "none")):
            with self.subTest(q=q, choice=choice):
                r = client.responses.create(model="m", input=q, tools=[tool], tool_choice=choice, text=fmt,
                                            max_output_tokens=80, temperature=0)
                calls = [o for o in r.output if o.type == "function_call"]
                if calls:
                    self.assertNotEqual(choice, "none")
                    jsonschema.validate(json.loads(calls[0].arguments), self.TOOL["input_schema"])
                else:
                    jsonschema.validate(json.loads(r.output_text), schema)
