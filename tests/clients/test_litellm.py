"""litellm: completion (openai/ prefix, api_base), streaming, tools and the loop,
response_format with a pydantic class, the Anthropic route (anthropic/ prefix on
/v1/messages), and embedding."""

import json

from common import (API_KEY, MODEL, PERSON_PROMPT, WEATHER_PROMPT, WEATHER_RESULT, WEATHER_TOOL,
                    ClientCase, need_library, person_model)


class LiteLLMLibrary(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.litellm = need_library(cls, "litellm")
        super().setUpClass()

    def completion(self, content, **kw):
        kw.setdefault("messages", [{"role": "user", "content": content}])
        return self.litellm.completion(model="openai/" + MODEL, api_base=self.base + "/v1",
                                       api_key=API_KEY, temperature=0, **kw)

    def test_completion_and_stream(self):
        r = self.completion("Say hello in one short sentence.", max_tokens=24)
        self.assertTrue(r.choices[0].message.content.strip())
        self.assertGreater(r.usage.completion_tokens, 0)
        text = "".join(c.choices[0].delta.content or "" for c in
                       self.completion("Count from 1 to 5.", max_tokens=24, stream=True))
        self.assertTrue(text.strip())

    def test_tools_loop(self):
        messages = [{"role": "user", "content": WEATHER_PROMPT}]
        r = self.completion(None, messages=messages, tools=[WEATHER_TOOL], tool_choice="required")
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertIn("paris", json.loads(call.function.arguments)["city"].lower())
        messages += [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": WEATHER_RESULT}]
        r = self.completion(None, messages=messages, tools=[WEATHER_TOOL], tool_choice="none",
                            max_tokens=60)
        self.assertIn("18", r.choices[0].message.content)

    def test_response_format_pydantic(self):
        Person = person_model()
        r = self.completion(PERSON_PROMPT, response_format=Person)
        person = Person.model_validate_json(r.choices[0].message.content)
        self.assertEqual((person.name, person.age), ("Alice", 31))

    def test_anthropic_route(self):
        r = self.litellm.completion(model="anthropic/" + MODEL, api_base=self.base, api_key=API_KEY,
                                    max_tokens=24, messages=[{"role": "user", "content": "Say hello."}])
        self.assertTrue(r.choices[0].message.content.strip())

    def test_embedding(self):
        r = self.litellm.embedding(model="openai/" + MODEL, api_base=self.base + "/v1", api_key=API_KEY,
                                   input=["a cat", "a dog"])
        self.assertEqual(len(r.data), 2)
        self.assertGreater(len(r.data[0]["embedding"]), 100)
