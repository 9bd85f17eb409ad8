"""anthropic (the official Python client) on /v1/messages: a message, the streaming helper,
tools (auto, any, the tool_result loop), structured output (messages.parse with a pydantic
class, output_config.format as JSON), count_tokens, and a refused option as a 400 naming it."""

import json

from common import (API_KEY, MODEL, PERSON_PROMPT, PERSON_SCHEMA, WEATHER_PROMPT,
                    WEATHER_RESULT, WEATHER_TOOL, ClientCase, need_library, person_model)

TOOL = {"name": "get_weather", "description": WEATHER_TOOL["function"]["description"],
        "input_schema": WEATHER_TOOL["function"]["parameters"]}
# anthropic 2.x has no temperature argument; the API still takes one, and greedy answers
# keep the tests' checks stable
GREEDY = {"temperature": 0}


class AnthropicClient(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.anthropic = need_library(cls, "anthropic")
        super().setUpClass()
        cls.client = cls.anthropic.Anthropic(base_url=cls.base, api_key=API_KEY, max_retries=0)

    def create(self, content, **kw):
        kw.setdefault("max_tokens", 64)
        return self.client.messages.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                           extra_body=GREEDY, **kw)

    def test_message(self):
        r = self.create("Say hello in one short sentence.", max_tokens=24,
                        system="You are a friendly assistant.")
        self.assertEqual((r.type, r.role), ("message", "assistant"))
        self.assertEqual(r.content[0].type, "text")
        self.assertTrue(r.content[0].text.strip())
        self.assertIn(r.stop_reason, ("end_turn", "max_tokens"))
        self.assertGreater(r.usage.input_tokens, 0)
        self.assertGreater(r.usage.output_tokens, 0)

    def test_stream(self):
        with self.client.messages.stream(model=MODEL, max_tokens=24, extra_body=GREEDY,
                                         messages=[{"role": "user", "content": "Count from 1 to 5."}]) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        self.assertTrue(text.strip())
        self.assertEqual(final.content[0].text, text)
        self.assertIn(final.stop_reason, ("end_turn", "max_tokens"))

    def test_tools_auto(self):
        r = self.create(WEATHER_PROMPT, tools=[TOOL], tool_choice={"type": "auto"})
        uses = [b for b in r.content if b.type == "tool_use"]
        if uses:
            self.assertEqual(r.stop_reason, "tool_use")
            self.assertEqual(uses[0].name, "get_weather")
            self.assertIsInstance(uses[0].input["city"], str)
        else:
            self.assertTrue(r.content[0].text.strip())

    def test_tools_any_then_answer(self):
        """The agent loop: a tool_use (tool_choice any), the tool_result back, the answer."""
        messages = [{"role": "user", "content": WEATHER_PROMPT}]
        r = self.client.messages.create(model=MODEL, max_tokens=64, extra_body=GREEDY, messages=messages,
                                        tools=[TOOL], tool_choice={"type": "any"})
        self.assertEqual(r.stop_reason, "tool_use")
        use = next(b for b in r.content if b.type == "tool_use")
        self.assertEqual(use.name, "get_weather")
        self.assertIn("paris", use.input["city"].lower())
        self.assertTrue(use.id)
        messages += [{"role": "assistant", "content": r.content},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": WEATHER_RESULT}]}]
        # (tool_choice none: under auto the 0.5B model calls the tool again and again)
        r = self.client.messages.create(model=MODEL, max_tokens=60, extra_body=GREEDY, messages=messages,
                                        tools=[TOOL], tool_choice={"type": "none"})
        self.assertEqual(r.stop_reason, "end_turn")
        self.assertIn("18", "".join(b.text for b in r.content if b.type == "text"))

    def test_tool_named_streamed(self):
        with self.client.messages.stream(model=MODEL, max_tokens=64, extra_body=GREEDY, tools=[TOOL],
                                         tool_choice={"type": "tool", "name": "get_weather"},
                                         messages=[{"role": "user", "content": WEATHER_PROMPT}]) as s:
            final = s.get_final_message()
        use = next(b for b in final.content if b.type == "tool_use")
        self.assertEqual(use.name, "get_weather")
        self.assertIsInstance(use.input["city"], str)

    def test_parse(self):
        Person = person_model()
        r = self.client.messages.parse(model=MODEL, max_tokens=64, extra_body=GREEDY, output_format=Person,
                                       messages=[{"role": "user", "content": PERSON_PROMPT}])
        self.assertIsInstance(r.parsed_output, Person)
        self.assertEqual((r.parsed_output.name, r.parsed_output.age), ("Alice", 31))

    def test_output_config_format(self):
        r = self.create(PERSON_PROMPT, output_config={"format": {"type": "json_schema", "schema": PERSON_SCHEMA}})
        self.assert_schema_valid(r.content[0].text, PERSON_SCHEMA)

    def test_count_tokens(self):
        n = self.client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Hello"}])
        more = self.client.messages.count_tokens(model=MODEL, tools=[TOOL],
                                                 messages=[{"role": "user", "content": "Hello"}])
        self.assertGreater(n.input_tokens, 0)
        self.assertGreater(more.input_tokens, n.input_tokens)

    def test_automatic_prompt_caching(self):
        """top-level cache_control: the prefix is kept (it always is), and usage says so."""
        system = "You are a weather assistant for travellers. " * 8
        first = self.create("Is it sunny in Paris?", max_tokens=4, system=system,
                            cache_control={"type": "ephemeral"})
        second = self.create("Is it sunny in Rome?", max_tokens=4, system=system,
                             cache_control={"type": "ephemeral"})
        self.assertGreater(first.usage.input_tokens, 0)
        self.assertGreater(second.usage.cache_read_input_tokens, 20, second.usage)

    def test_refused_option_is_a_400_naming_it(self):
        with self.assertRaises(self.anthropic.BadRequestError) as cm:
            self.create("hi", output_config={"format": {"type": "xml"}})
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("output_config.format", str(cm.exception))
        json.loads(cm.exception.response.text)  # the error is JSON
        # the SDK's arguments for Anthropic's own platform: refused by name, not dropped
        for name, value in (("inference_geo", "us"), ("speed", "fast")):
            with self.subTest(name=name), self.assertRaises(self.anthropic.BadRequestError) as cm:
                self.create("hi", max_tokens=4, **{name: value})
            self.assertEqual(cm.exception.status_code, 400)
            self.assertIn(name, str(cm.exception))
