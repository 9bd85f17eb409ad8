"""Tool calls: tools and tool_choice, the calls constrained to each function's parameters
(Qwen2.5-Coder 0.5B; Qwen3.5's XML form on the 1.5B given Qwen3.5's template)."""

import json
import os
import sys
import unittest

from harness import (
    ARGS, QWEN, QWEN_SMALL, TOOLS, WEATHER_TOOL, assert_error_shape, chat_body, need_model, request,
    sse_objects, start_server)


class ToolCalls(unittest.TestCase):
    """tools and tool_choice; a model that follows tool prompts, the calls constrained to
    each function's parameters."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", "2048"])
        cls.port = cls.srv.port

    def chat(self, content, status=200, **kw):
        r = request(self.port, "POST", "/v1/chat/completions",
                    chat_body(content, **{"temperature": 0, "max_tokens": 64, "tools": TOOLS, **kw}))
        if status != 200:
            return assert_error_shape(self, r, status)
        self.assertEqual(r.status, 200, r)
        return r.json()["choices"][0]

    def assert_call(self, choice, name=None):
        """The one call of a choice: its arguments JSON with the function's required keys
        of the right types. Returns (name, arguments)."""
        self.assertEqual(choice["finish_reason"], "tool_calls", choice)
        self.assertFalse(choice["message"].get("content"), choice)
        calls = choice["message"]["tool_calls"]
        self.assertTrue(calls, choice)
        call = calls[0]
        self.assertEqual(call["type"], "function")
        self.assertTrue(call["id"].startswith("call_"), call)
        fn = call["function"]["name"]
        if name:
            self.assertEqual(fn, name, choice)
        self.assertIn(fn, ("play_music", "get_weather"), choice)
        args = json.loads(call["function"]["arguments"])
        self.assertIsInstance(args, dict, call)
        if fn == "play_music":
            self.assertIsInstance(args.get("song"), str, args)
            if "volume" in args:
                self.assertIs(type(args["volume"]), int, args)
                self.assertTrue(0 <= args["volume"] <= 10, args)
        else:
            self.assertIsInstance(args.get("city"), str, args)
        return fn, args

    def test_auto(self):
        fn, args = self.assert_call(self.chat("What is the weather in Paris?", tool_choice="auto"))
        self.assertEqual(fn, "get_weather")
        self.assertEqual(args["city"], "Paris")

    def test_none_gives_plain_content(self):
        c = self.chat("What is the weather in Paris?", tool_choice="none", max_tokens=16)
        self.assertNotIn("tool_calls", c["message"], c)
        self.assertNotEqual(c["finish_reason"], "tool_calls", c)
        self.assertTrue(c["message"]["content"], c)

    def test_required_calls_even_for_a_joke(self):
        self.assert_call(self.chat("Tell me a joke.", tool_choice="required"))

    def test_named_function(self):
        choice = {"type": "function", "function": {"name": "play_music"}}
        # even for a question that is about another tool
        self.assert_call(self.chat("What is the weather in Paris?", tool_choice=choice), name="play_music")
        err = self.chat("x", status=400, tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertIn("nope", err["message"])
        self.chat("x", status=400, tool_choice="sometimes")

    def test_unenforceable_parameters_are_400_naming_the_keyword(self):
        bad = {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}
        r = request(self.port, "POST", "/v1/chat/completions", chat_body("x", tools=[WEATHER_TOOL, bad]))
        err = assert_error_shape(self, r, 400)
        self.assertEqual(err.get("keyword"), "not", err)
        self.assertEqual(err.get("path"), "$.tools[1].function.parameters.properties.a.not", err)

    def openai_client(self):
        try:
            import openai
        except ImportError:
            self.skipTest(f"the openai package is not installed for {sys.executable} "
                          "(scripts/setup.sh installs it into build/venv)")
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="anything",
                             timeout=120, max_retries=0)

    def streamed_call(self, **kw):
        """A streamed call read by the openai client: (name, id, argument fragments)."""
        client = self.openai_client()
        chunks = list(client.chat.completions.create(
            model="local", temperature=0, max_tokens=64, stream=True, tools=TOOLS,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}], **kw))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        self.assertFalse(any(d.content for d in deltas), "the call leaked out as content")
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        self.assertTrue(calls, deltas)
        first, rest = calls[0], calls[1:]
        self.assertEqual(first.index, 0)
        self.assertTrue(first.id and first.id.startswith("call_"), first)
        self.assertEqual(first.function.name, "get_weather")
        for tc in rest:
            self.assertEqual(tc.index, 0)
            self.assertFalse(tc.id, "an id after the first delta")
            self.assertFalse(tc.function.name, "a name after the first delta")
        fragments = [first.function.arguments or ""] + [tc.function.arguments or "" for tc in rest]
        args = json.loads("".join(fragments))
        self.assertEqual(args.get("city"), "Paris", fragments)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, ["tool_calls"])
        return fragments

    def test_streamed_call_with_the_openai_client(self):
        # required: constrained from the first token, so the arguments stream as written
        fragments = self.streamed_call(tool_choice="required")
        self.assertGreater(len([f for f in fragments if f]), 1, f"arguments in one piece: {fragments}")
        # auto: the call comes out the same way (in one piece or more)
        self.streamed_call(tool_choice="auto")


ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
                 "required": ["answer", "confidence"], "additionalProperties": False}
MIX_PROMPTS = ["What is the weather in Paris?", "Play the song Yesterday at volume 5.", "What is 2+2?",
               "Say hello in French.", "Write a haiku about the sea."]


class ToolsWithATypedAnswer(unittest.TestCase):
    """tools together with response_format (json_schema): OpenAI's and llama.cpp's mix, the
    reply is calls valid against their parameters or an answer valid against the schema."""

    setUpClass = classmethod(ToolCalls.setUpClass.__func__)  # (a server of its own)

    def mix(self, content, tool_choice, stream=False, fmt=None):
        """(tool calls, content) of one reply, streamed or not (one call at most: a small model
        asked for calls may repeat them until max_tokens)."""
        fmt = fmt or {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
        body = chat_body(content, temperature=0, max_tokens=96, tools=TOOLS, tool_choice=tool_choice,
                         response_format=fmt, stream=stream, parallel_tool_calls=False)
        r = request(self.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        if not stream:
            choice = r.json()["choices"][0]
            self.assertNotEqual(choice["finish_reason"], "length", choice)
            return choice["message"].get("tool_calls") or [], choice["message"].get("content")
        calls, text = {}, ""
        for ev in sse_objects(self, r):
            if not ev.get("choices"):
                continue
            d = ev["choices"][0]["delta"]
            text += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"function": {"name": "", "arguments": ""}})
                c["function"]["name"] += tc["function"].get("name") or ""
                c["function"]["arguments"] += tc["function"].get("arguments") or ""
            self.assertNotEqual(ev["choices"][0].get("finish_reason"), "length", ev)
        return list(calls.values()), text or None

    def assert_valid_calls(self, calls):
        import jsonschema
        by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for c in calls:
            self.assertIn(c["function"]["name"], by_name, c)
            jsonschema.validate(json.loads(c["function"]["arguments"]), by_name[c["function"]["name"]])

    def test_auto_every_reply_is_a_valid_call_or_a_valid_answer(self):
        import jsonschema
        for stream in (False, True):
            for prompt in MIX_PROMPTS:
                with self.subTest(prompt=prompt, stream=stream):
                    calls, content = self.mix(prompt, "auto", stream=stream)
                    if calls:
                        self.assertFalse(content, "a call and text")
                        self.assert_valid_calls(calls)
                    else:
                        jsonschema.validate(json.loads(content), ANSWER_SCHEMA)

    def test_required_only_calls_and_none_only_the_answer(self):
        import jsonschema
        for prompt in MIX_PROMPTS[2:]:
            with self.subTest(prompt=prompt):
                calls, content = self.mix(prompt, "required")
                self.assertTrue(calls, content)
                self.assert_valid_calls(calls)
                calls, content = self.mix(prompt, "none")
                self.assertFalse(calls)
                jsonschema.validate(json.loads(content), ANSWER_SCHEMA)
        calls, _ = self.mix("Say hello.", {"type": "function", "function": {"name": "get_weather"}})
        self.assertEqual([c["function"]["name"] for c in calls], ["get_weather"])

    def test_json_object_with_tools(self):
        calls, content = self.mix("Say hello in French.", "none", fmt={"type": "json_object"})
        self.assertIsInstance(json.loads(content), dict)

    def test_a_gbnf_grammar_with_tools_is_refused_naming_it(self):
        r = request(self.port, "POST", "/v1/chat/completions",
                    chat_body("Hi", tools=TOOLS, grammar='root ::= "yes"', max_tokens=4))
        err = assert_error_shape(self, r, 400)
        self.assertIn("grammar", err["message"])
        self.assertIn("response_format", err["message"])


class Qwen35XmlToolCalls(unittest.TestCase):
    """Qwen3.5's template (tests/data/templates/qwen35.jinja) given to a model that never saw
    its XML call form (Qwen2.5-Coder 1.5B; no Qwen3.5 weights are packaged): the grammar
    makes the reply calls in that form, and the server reads them back as OpenAI's
    tool_calls, whole and streamed. Thinking off (--reasoning off: the template writes an
    empty thinking block), as this model does not think."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN)
        template = os.path.join(ARGS.root, "tests", "data", "templates", "qwen35.jinja")
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", "2048",
                                     "--chat-template-file", template, "--reasoning", "off"])
        cls.port = cls.srv.port

    def chat(self, content, **kw):
        body = chat_body(content, **{"temperature": 0, "max_tokens": 96, "tools": TOOLS, **kw})
        r = request(self.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        return r

    def assert_valid_calls(self, calls):
        import jsonschema
        by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for c in calls:
            self.assertTrue(c["id"].startswith("call_"), c)
            self.assertIn(c["function"]["name"], by_name, c)
            jsonschema.validate(json.loads(c["function"]["arguments"]), by_name[c["function"]["name"]])

    def test_the_prompt_asks_for_the_xml_form(self):
        r = request(self.port, "POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "tools": TOOLS})
        prompt = r.json()["prompt"]
        self.assertIn("<function=example_function_name>", prompt)
        self.assertTrue(prompt.endswith("<think>\n\n</think>\n\n"), prompt[-60:])

    def test_required_and_named_calls_are_parsed(self):
        for choice, want in (("required", None), ({"type": "function", "function": {"name": "play_music"}},
                                                  "play_music")):
            with self.subTest(tool_choice=choice):
                c = self.chat("Play Yesterday by the Beatles, loud.", tool_choice=choice,
                              parallel_tool_calls=False).json()["choices"][0]
                self.assertEqual(c["finish_reason"], "tool_calls", c)
                self.assertFalse(c["message"].get("content"), c)
                calls = c["message"]["tool_calls"]
                self.assertEqual(len(calls), 1, calls)
                self.assert_valid_calls(calls)
                if want:
                    self.assertEqual(calls[0]["function"]["name"], want)

    def test_thinking_then_a_call(self):
        # The prompt opens the thinking block (enable_thinking): the grammar has it closed
        # before the call, and it comes back as reasoning_content.
        c = self.chat("What is the weather in Oslo?", tool_choice="required", parallel_tool_calls=False,
                      max_tokens=160, chat_template_kwargs={"enable_thinking": True}).json()["choices"][0]
        self.assertEqual(c["finish_reason"], "tool_calls", c)
        self.assertTrue(c["message"].get("reasoning_content"), c)
        self.assertNotIn("<tool_call>", c["message"]["reasoning_content"])
        self.assert_valid_calls(c["message"]["tool_calls"])

    def test_streamed_call(self):
        r = self.chat("What is the weather in Paris?", tool_choice="required", stream=True, parallel_tool_calls=False)
        name, args, text, pieces, finish = "", "", "", 0, None
        for ev in sse_objects(self, r):
            if not ev.get("choices"):
                continue
            d = ev["choices"][0]["delta"]
            text += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                self.assertEqual(tc["index"], 0, tc)
                name += tc["function"].get("name") or ""
                if tc["function"].get("arguments"):
                    args += tc["function"]["arguments"]
                    pieces += 1
            finish = ev["choices"][0].get("finish_reason") or finish
        self.assertEqual(text, "", "the call leaked out as content")
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(name, "get_weather")
        self.assertEqual(json.loads(args).get("city"), "Paris", args)
        self.assertGreater(pieces, 1, "the arguments in one piece")

    def test_auto_is_text_or_valid_calls_and_a_typed_answer_holds(self):
        for prompt in ("What is the weather in Paris?", "Say hello in French."):
            with self.subTest(prompt=prompt):
                c = self.chat(prompt, tool_choice="auto", parallel_tool_calls=False).json()["choices"][0]
                calls = c["message"].get("tool_calls") or []
                self.assert_valid_calls(calls)
                self.assertNotIn("<tool_call>", c["message"].get("content") or "", c)
                if calls:
                    self.assertEqual(c["finish_reason"], "tool_calls", c)
        import jsonschema
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
                  "additionalProperties": False}
        fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        c = self.chat("What is 2+2?", tool_choice="auto", response_format=fmt,
                      parallel_tool_calls=False).json()["choices"][0]
        calls = c["message"].get("tool_calls") or []
        if calls:
            self.assert_valid_calls(calls)
        else:
            jsonschema.validate(json.loads(c["message"]["content"]), schema)
