"""outlines: its OpenAI model (outlines.from_openai over the official client) for text, a
streamed text, and a pydantic output type (the server's json_schema response_format), also
through a Generator."""

from common import API_KEY, MODEL, PERSON_PROMPT, ClientCase, need_library, person_model


class Outlines(ClientCase):

    @classmethod
    def setUpClass(cls):
        cls.outlines = need_library(cls, "outlines")
        openai = need_library(cls, "openai")
        super().setUpClass()
        cls.model = cls.outlines.from_openai(
            openai.OpenAI(base_url=cls.base + "/v1", api_key=API_KEY, max_retries=0), MODEL)

    def test_text_and_stream(self):
        self.assertTrue(self.model("Say hello in one short sentence.", max_tokens=24, temperature=0).strip())
        parts = list(self.model.stream("Count from 1 to 5.", max_tokens=24, temperature=0))
        self.assertTrue("".join(parts).strip())

    def test_pydantic_output(self):
        Person = person_model()
        person = Person.model_validate_json(self.model(PERSON_PROMPT, Person, temperature=0))
        self.assertEqual((person.name, person.age), ("Alice", 31))
        generator = self.outlines.Generator(self.model, Person)
        person = Person.model_validate_json(generator(PERSON_PROMPT, temperature=0))
        self.assertEqual((person.name, person.age), ("Alice", 31))
