"""instructor: a pydantic answer (response_model) in each mode it offers for an OpenAI-style
server (TOOLS, JSON, JSON_SCHEMA, MD_JSON, RESPONSES_TOOLS) and over the Anthropic
client (TOOLS, JSON: instructor 1.17 takes the provider from the client), a list of them, and a streamed partial."""

from common import API_KEY, MODEL, PERSON_PROMPT, ClientCase, need_library, person_model


class InstructorLibrary(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.instructor = need_library(cls, "instructor")
        openai = need_library(cls, "openai")
        super().setUpClass()
        cls.openai_client = openai.OpenAI(base_url=cls.base + "/v1", api_key=API_KEY, max_retries=0)
        cls.Person = person_model()

    def extract(self, mode):
        client = self.instructor.from_openai(self.openai_client, mode=mode)
        create = client.responses.create if mode == self.instructor.Mode.RESPONSES_TOOLS \
            else client.chat.completions.create
        person = create(model=MODEL, response_model=self.Person, max_retries=0, temperature=0,
                        messages=[{"role": "user", "content": PERSON_PROMPT}])
        self.assertIsInstance(person, self.Person)
        self.assertEqual((person.name, person.age), ("Alice", 31))

    def test_openai_modes(self):
        Mode = self.instructor.Mode
        for mode in (Mode.TOOLS, Mode.JSON, Mode.JSON_SCHEMA, Mode.MD_JSON,
                     Mode.RESPONSES_TOOLS):
            with self.subTest(mode=mode.name):
                self.extract(mode)

    def test_anthropic_modes(self):
        anthropic = need_library(type(self), "anthropic")
        Mode = self.instructor.Mode
        for mode in (Mode.TOOLS, Mode.JSON):
            with self.subTest(mode=mode.name):
                client = self.instructor.from_anthropic(
                    anthropic.Anthropic(base_url=self.base, api_key=API_KEY, max_retries=0), mode=mode)
                person = client.messages.create(model=MODEL, max_tokens=128, response_model=self.Person,
                                                max_retries=0,
                                                messages=[{"role": "user", "content": PERSON_PROMPT}])
                self.assertEqual((person.name, person.age), ("Alice", 31))

    def test_iterable_and_partial(self):
        client = self.instructor.from_openai(self.openai_client, mode=self.instructor.Mode.TOOLS)
        people = client.chat.completions.create(
            model=MODEL, response_model=list[self.Person], max_retries=0, temperature=0,
            messages=[{"role": "user", "content": "Extract every person: Alice is 31, Bob is 42."}])
        self.assertEqual(sorted((p.name, p.age) for p in people), [("Alice", 31), ("Bob", 42)])
        last = None
        for partial in client.chat.completions.create_partial(
                model=MODEL, response_model=self.Person, max_retries=0, temperature=0,
                messages=[{"role": "user", "content": PERSON_PROMPT}]):
            last = partial
        self.assertEqual((last.name, last.age), ("Alice", 31))
