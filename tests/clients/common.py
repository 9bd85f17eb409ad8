"""What the client-library tests share: a real `edgellm serve` (Qwen2.5-Coder 0.5B, with
--embedding so one process answers chat, the Responses API, Anthropic messages and
embeddings) per test class, the skip when a library or the model is missing, and the
schemas and tools the tests use.

The server process comes from tests/server/serve/harness.py (its Server class, its stop of
every server at exit, on SIGTERM and when this process dies); run_clients.py fills its ARGS.
"""

import importlib
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server", "serve"))

import harness  # noqa: E402  (after the path above)
from harness import ARGS, QWEN_SMALL, model_path, start_server  # noqa: E402,F401  (ARGS: for run_clients)

MODEL = "qwen"  # the alias the server answers to (-a)
API_KEY = "sk-edgellm-test"  # clients insist on one; the server has no --api-key

# LiteLLM fetches a price list from GitHub at import unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# No tracing exports (openai-agents) and no telemetry from any library.
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


def need_library(test_class, module):
    """The imported module, or skips the class with the reason printed."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001  (a broken install is a skip with its reason too)
        raise unittest.SkipTest(f"{module} is not importable ({type(e).__name__}: {e}); "
                                f"run scripts/setup-clients.sh")


class ClientCase(unittest.TestCase):
    """A test class with its own server; self.base is http://127.0.0.1:PORT."""

    @classmethod
    def setUpClass(cls):
        path = model_path(QWEN_SMALL)
        if path is None:
            raise unittest.SkipTest(f"model {QWEN_SMALL} is not installed "
                                    f"(scripts/fetch-models.sh {QWEN_SMALL})")
        cls.server = start_server(cls, ["-m", path, "-a", MODEL, "--port", "0", "--embedding",
                                        "--ctx-size", "4096"])
        cls.base = f"http://127.0.0.1:{cls.server.port}"

    def assert_schema_valid(self, value, schema):
        import jsonschema
        if isinstance(value, str):
            value = json.loads(value)
        jsonschema.validate(value, schema)
        return value


# ---- what the tests ask for ------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}
WEATHER_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
WEATHER_RESULT = '{"city": "Paris", "temperature_c": 18, "sky": "sunny"}'

PERSON_PROMPT = "Extract the person: Alice is 31 years old and lives in Berlin."
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def person_model():
    """The pydantic class of PERSON_SCHEMA (pydantic comes with every library here)."""
    import pydantic

    class Person(pydantic.BaseModel):
        name: str
        age: int

    return Person
