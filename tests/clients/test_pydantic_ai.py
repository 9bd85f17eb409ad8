"""pydantic-ai (pydantic-ai-slim[openai]): an Agent on OpenAIChatModel with a text answer,
streamed text, a plain tool it calls and answers from, the three output modes (ToolOutput,
NativeOutput, PromptedOutput), and on OpenAIResponsesModel."""

import asyncio

from common import (API_KEY, MODEL, PERSON_PROMPT, WEATHER_PROMPT, WEATHER_RESULT, ClientCase,
                    need_library, person_model)


class PydanticAI(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.pai = need_library(cls, "pydantic_ai")
        cls.models = need_library(cls, "pydantic_ai.models.openai")
        cls.providers = need_library(cls, "pydantic_ai.providers.openai")
        super().setUpClass()

    def model(self, responses=False):
        provider = self.providers.OpenAIProvider(base_url=self.base + "/v1", api_key=API_KEY)
        cls = self.models.OpenAIResponsesModel if responses else self.models.OpenAIChatModel
        return cls(MODEL, provider=provider)

    def agent(self, responses=False, **kw):
        return self.pai.Agent(self.model(responses), model_settings={"temperature": 0, "max_tokens": 200}, **kw)

    def test_text_and_stream(self):
        r = self.agent().run_sync("Say hello in one short sentence.")
        self.assertTrue(r.output.strip())
        self.assertGreater(r.usage.output_tokens, 0)

        async def streamed():
            async with self.agent().run_stream("Count from 1 to 5.") as s:
                return [t async for t in s.stream_text(delta=True)]
        parts = asyncio.run(streamed())
        self.assertTrue("".join(parts).strip())

    def test_tool_then_answer(self):
        for responses in (False, True):
            with self.subTest(responses=responses):
                agent = self.agent(responses)
                calls = []

                # The tool is offered until it has been called (prepare: pydantic-ai's way to
                # shape the tools per step): the 0.5B model would call it again and again.
                async def once(ctx, tool_def):
                    return None if calls else tool_def

                @agent.tool_plain(prepare=once)
                def get_weather(city: str) -> str:
                    """Get the current weather in a city."""
                    calls.append(city)
                    return WEATHER_RESULT

                r = agent.run_sync(WEATHER_PROMPT, usage_limits=self.pai.UsageLimits(request_limit=4))
                self.assertEqual(len(calls), 1)
                self.assertIn("paris", calls[0].lower())
                self.assertIn("18", r.output)

    def test_output_modes(self):
        Person = person_model()
        for name, output in (("ToolOutput", self.pai.ToolOutput(Person)),
                             ("NativeOutput", self.pai.NativeOutput(Person)),
                             ("PromptedOutput", self.pai.PromptedOutput(Person))):
            with self.subTest(mode=name):
                person = self.agent(output_type=output).run_sync(PERSON_PROMPT).output
                self.assertEqual((person.name, person.age), ("Alice", 31))

    def test_responses_model(self):
        r = self.agent(responses=True).run_sync("Say hello in one short sentence.")
        self.assertTrue(r.output.strip())
        person = self.agent(responses=True, output_type=self.pai.NativeOutput(person_model())) \
            .run_sync(PERSON_PROMPT).output
        self.assertEqual((person.name, person.age), ("Alice", 31))
