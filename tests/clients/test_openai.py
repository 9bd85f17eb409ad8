"""openai (the official Python client): chat, streaming, tools (auto, required, a two-step
loop), structured output (parse with a pydantic class, json_object), the Responses API
(text, parse, tools), embeddings (the client's default base64 encoding), and a refused
option as a 400 that names it."""

import json

from common import (API_KEY, MODEL, PERSON_PROMPT, PERSON_SCHEMA, WEATHER_PROMPT,
                    WEATHER_RESULT, WEATHER_TOOL, ClientCase, need_library, person_model)


class OpenAIClient(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.openai = need_library(cls, "openai")
        super().setUpClass()
        cls.client = cls.openai.OpenAI(base_url=cls.base + "/v1", api_key=API_KEY, max_retries=0)

    def chat(self, content, **kw):
        return self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content}], **kw)

    def test_chat(self):
        r = self.chat("Say hello in one short sentence.", max_tokens=24, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertTrue(r.choices[0].message.content.strip())
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertGreater(r.usage.completion_tokens, 0)

    def test_stream(self):
        stream = self.chat("Count from 1 to 5.", max_tokens=24, temperature=0, stream=True,
                           stream_options={"include_usage": True})
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        self.assertTrue(text.strip())
        self.assertIn(finish, ("stop", "length"))
        self.assertIsNotNone(usage)
        self.assertGreater(usage.completion_tokens, 0)

    def test_tools_auto(self):
        r = self.chat(WEATHER_PROMPT, tools=[WEATHER_TOOL], tool_choice="auto", temperature=0)
        message = r.choices[0].message
        # auto: a call or an answer, and a call is one the tool can take
        if message.tool_calls:
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
            call = message.tool_calls[0]
            self.assertEqual(call.function.name, "get_weather")
            self.assertIsInstance(json.loads(call.function.arguments)["city"], str)
        else:
            self.assertTrue(message.content.strip())

    def test_tools_required_then_answer(self):
        """The agent loop: the call (required), its result back, the model's answer."""
        messages = [{"role": "user", "content": WEATHER_PROMPT}]
        r = self.client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL],
                                                tool_choice="required", temperature=0)
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertIn("paris", json.loads(call.function.arguments)["city"].lower())
        self.assertTrue(call.id)
        messages.append(r.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": WEATHER_RESULT})
        # (tool_choice none: under auto the 0.5B model calls the tool again and again)
        r = self.client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL],
                                                tool_choice="none", temperature=0, max_tokens=60)
        answer = r.choices[0].message.content
        self.assertFalse(r.choices[0].message.tool_calls)
        self.assertIn("18", answer)

    def test_tool_named(self):
        r = self.chat(WEATHER_PROMPT, tools=[WEATHER_TOOL], temperature=0,
                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
        self.assertEqual(r.choices[0].message.tool_calls[0].function.name, "get_weather")

    def test_parse_pydantic(self):
        Person = person_model()
        r = self.client.chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": PERSON_PROMPT}],
            response_format=Person, temperature=0)
        person = r.choices[0].message.parsed
        self.assertIsInstance(person, Person)
        self.assertEqual((person.name, person.age), ("Alice", 31))

    def test_json_schema_strict_and_json_object(self):
        r = self.chat(PERSON_PROMPT, temperature=0, response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}})
        self.assert_schema_valid(r.choices[0].message.content, PERSON_SCHEMA)
        r = self.chat(PERSON_PROMPT + " Answer in JSON.", temperature=0, max_tokens=80,
                      response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)

    def test_tools_with_parse(self):
        """Tools and a typed answer together: a call of the tool or a valid Person."""
        Person = person_model()
        # parse() takes strict tools only
        strict = {"type": "function", "function": dict(WEATHER_TOOL["function"], strict=True, parameters=dict(
            WEATHER_TOOL["function"]["parameters"], additionalProperties=False))}
        r = self.client.chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": PERSON_PROMPT}],
            tools=[strict], response_format=Person, temperature=0)
        message = r.choices[0].message
        if message.tool_calls:
            self.assertEqual(message.tool_calls[0].function.name, "get_weather")
        else:
            self.assertIsInstance(message.parsed, Person)

    def test_responses(self):
        r = self.client.responses.create(model=MODEL, input="Say hello in one short sentence.",
                                         max_output_tokens=24, temperature=0)
        self.assertEqual(r.status, "completed")
        self.assertTrue(r.output_text.strip())
        events = [e.type for e in self.client.responses.create(
            model=MODEL, input="Say hi.", max_output_tokens=12, stream=True)]
        self.assertEqual(events[0], "response.created")
        self.assertIn("response.output_text.delta", events)
        self.assertEqual(events[-1], "response.completed")

    def test_responses_parse_and_tools(self):
        Person = person_model()
        r = self.client.responses.parse(model=MODEL, input=PERSON_PROMPT, text_format=Person,
                                        temperature=0)
        self.assertEqual((r.output_parsed.name, r.output_parsed.age), ("Alice", 31))
        tool = {"type": "function", **WEATHER_TOOL["function"]}
        r = self.client.responses.create(model=MODEL, input=WEATHER_PROMPT, tools=[tool],
                                         tool_choice="required", temperature=0)
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertEqual(calls[0].name, "get_weather")
        self.assertIn("paris", json.loads(calls[0].arguments)["city"].lower())
        # the second step: the call's output back, a text answer
        r = self.client.responses.create(model=MODEL, tools=[tool], tool_choice="none", temperature=0,
                                         max_output_tokens=60,
                                         input=[{"role": "user", "content": WEATHER_PROMPT}, calls[0],
                                                {"type": "function_call_output", "call_id": calls[0].call_id,
                                                 "output": WEATHER_RESULT}])
        self.assertIn("18", r.output_text)

    def test_embeddings(self):
        # the client asks for base64 unless told and decodes it: both must agree
        r = self.client.embeddings.create(model=MODEL, input=["a cat", "a dog"])
        self.assertEqual([d.index for d in r.data], [0, 1])
        dim = len(r.data[0].embedding)
        self.assertGreater(dim, 100)
        self.assertEqual(len(r.data[1].embedding), dim)
        f = self.client.embeddings.create(model=MODEL, input="a cat", encoding_format="float")
        self.assertEqual(len(f.data[0].embedding), dim)
        for a, b in zip(f.data[0].embedding, r.data[0].embedding):
            self.assertAlmostEqual(a, b, places=4)

    def test_refused_option_is_a_400_naming_it(self):
        with self.assertRaises(self.openai.BadRequestError) as cm:
            self.chat("hi", max_tokens=4, response_format={"type": "xml"})
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("response_format", str(cm.exception))
