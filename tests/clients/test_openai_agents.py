"""openai-agents: an Agent on OpenAIChatCompletionsModel and on OpenAIResponsesModel (over
an AsyncOpenAI client pointed at the server): a text answer, streamed events, a
function_tool it calls and answers from, and a typed final_output."""

import asyncio

from common import (API_KEY, MODEL, PERSON_PROMPT, WEATHER_PROMPT, WEATHER_RESULT, ClientCase,
                    need_library, person_model)


class OpenAIAgents(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.agents = need_library(cls, "agents")
        cls.openai = need_library(cls, "openai")
        super().setUpClass()
        cls.agents.set_tracing_disabled(True)

    def agent(self, responses=False, settings=None, **kw):
        a = self.agents
        client = self.openai.AsyncOpenAI(base_url=self.base + "/v1", api_key=API_KEY, max_retries=0)
        model = (a.OpenAIResponsesModel if responses else a.OpenAIChatCompletionsModel)(
            model=MODEL, openai_client=client)
        kw.setdefault("instructions", "You are a helpful assistant.")
        return a.Agent(name="assistant", model=model,
                       model_settings=a.ModelSettings(temperature=0, max_tokens=200, **(settings or {})),
                       **kw)

    def test_text_on_both_models(self):
        for responses in (False, True):
            with self.subTest(responses=responses):
                r = self.agents.Runner.run_sync(self.agent(responses), "Say hello in one short sentence.")
                self.assertTrue(r.final_output.strip())

    def test_streamed(self):
        async def run():
            result = self.agents.Runner.run_streamed(self.agent(), "Count from 1 to 5.")
            kinds = [e.type async for e in result.stream_events()]
            return kinds, result.final_output
        kinds, final = asyncio.run(run())
        self.assertIn("raw_response_event", kinds)
        self.assertTrue(final.strip())

    def test_tool_then_answer(self):
        calls = []

        # Enabled until it has been called (is_enabled: the SDK's way to offer a tool per
        # turn): the 0.5B model would call it again and again.
        @self.agents.function_tool(is_enabled=lambda ctx, agent: not calls)
        def get_weather(city: str) -> str:
            """Get the current weather in a city."""
            calls.append(city)
            return WEATHER_RESULT

        for responses in (False, True):
            with self.subTest(responses=responses):
                calls.clear()
                # (one call per reply: else the 0.5B model repeats the call in its first)
                agent = self.agent(responses, tools=[get_weather], settings={"parallel_tool_calls": False})
                r = self.agents.Runner.run_sync(agent, WEATHER_PROMPT, max_turns=4)
                self.assertEqual(len(calls), 1)
                self.assertIn("paris", calls[0].lower())
                self.assertIn("18", r.final_output)

    def test_typed_output(self):
        Person = person_model()
        for responses in (False, True):
            with self.subTest(responses=responses):
                r = self.agents.Runner.run_sync(self.agent(responses, output_type=Person), PERSON_PROMPT)
                self.assertEqual((r.final_output.name, r.final_output.age), ("Alice", 31))

    def test_refused_setting_is_a_400_naming_it(self):
        # truncation "auto" (cut the conversation to fit) is refused: edgellm never cuts
        agent = self.agent(True, settings={"truncation": "auto"})
        with self.assertRaises(self.openai.BadRequestError) as cm:
            self.agents.Runner.run_sync(agent, "hi")
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("truncation", str(cm.exception))
