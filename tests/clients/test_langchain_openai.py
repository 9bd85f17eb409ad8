"""langchain-openai: ChatOpenAI invoke and stream, bind_tools (auto, required) and the
ToolMessage loop, with_structured_output in its three methods, the Responses API
(use_responses_api), and OpenAIEmbeddings."""

from common import (API_KEY, MODEL, PERSON_PROMPT, WEATHER_PROMPT, WEATHER_RESULT, WEATHER_TOOL,
                    ClientCase, need_library, person_model)


class LangChainOpenAI(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.lc = need_library(cls, "langchain_openai")
        cls.messages = need_library(cls, "langchain_core.messages")
        super().setUpClass()

    def chat(self, **kw):
        return self.lc.ChatOpenAI(model=MODEL, base_url=self.base + "/v1", api_key=API_KEY,
                                  temperature=0, max_retries=0, **kw)

    def test_invoke_and_stream(self):
        r = self.chat(max_tokens=24).invoke("Say hello in one short sentence.")
        self.assertTrue(r.content.strip())
        self.assertGreater(r.usage_metadata["output_tokens"], 0)
        self.assertIn(r.response_metadata["finish_reason"], ("stop", "length"))
        chunks = list(self.chat(max_tokens=24, stream_usage=True).stream("Count from 1 to 5."))
        self.assertGreater(len(chunks), 1)
        self.assertTrue("".join(c.content for c in chunks).strip())

    def test_tools_loop(self):
        llm = self.chat()
        auto = llm.bind_tools([WEATHER_TOOL]).invoke(WEATHER_PROMPT)
        if auto.tool_calls:
            self.assertEqual(auto.tool_calls[0]["name"], "get_weather")
        else:
            self.assertTrue(auto.content.strip())
        m = self.messages
        history = [m.HumanMessage(WEATHER_PROMPT)]
        ai = llm.bind_tools([WEATHER_TOOL], tool_choice="required").invoke(history)
        call = ai.tool_calls[0]
        self.assertEqual(call["name"], "get_weather")
        self.assertIn("paris", call["args"]["city"].lower())
        history += [ai, m.ToolMessage(WEATHER_RESULT, tool_call_id=call["id"])]
        # (tool_choice none: under auto the 0.5B model calls the tool again and again)
        final = llm.bind_tools([WEATHER_TOOL], tool_choice="none").invoke(history)
        self.assertIn("18", final.content)

    def test_structured_output(self):
        Person = person_model()
        for method in ("json_schema", "function_calling", "json_mode"):
            with self.subTest(method=method):
                prompt = PERSON_PROMPT + (" Answer in JSON with the keys name and age."
                                          if method == "json_mode" else "")
                person = self.chat().with_structured_output(Person, method=method).invoke(prompt)
                self.assertEqual((person.name, person.age), ("Alice", 31))

    def test_responses_api(self):
        llm = self.chat(use_responses_api=True)
        r = llm.invoke("Say hello in one short sentence.")
        self.assertTrue(r.text.strip())
        person = llm.with_structured_output(person_model()).invoke(PERSON_PROMPT)
        self.assertEqual((person.name, person.age), ("Alice", 31))
        ai = llm.bind_tools([WEATHER_TOOL], tool_choice="required").invoke(WEATHER_PROMPT)
        self.assertEqual(ai.tool_calls[0]["name"], "get_weather")

    def test_embeddings(self):
        # (check_embedding_ctx_length off: it would fetch tiktoken's tables from the net)
        emb = self.lc.OpenAIEmbeddings(model=MODEL, base_url=self.base + "/v1", api_key=API_KEY,
                                       check_embedding_ctx_length=False, max_retries=0)
        docs = emb.embed_documents(["a cat", "a dog"])
        query = emb.embed_query("a cat")
        self.assertEqual(len(docs), 2)
        self.assertEqual(len(docs[0]), len(query))
        self.assertAlmostEqual(sum(a * b for a, b in zip(docs[0], query)) /
                               (sum(a * a for a in query) ** 0.5 * sum(a * a for a in docs[0]) ** 0.5),
                               1.0, places=3)
