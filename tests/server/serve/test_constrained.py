"""Constrained output: grammar, json_schema and response_format per request (Gemma 3
270M), and serve's --grammar-file and --json-schema for every request."""

import json
import os
import shutil
import tempfile
import unittest

from harness import (
    GEMMA, GemmaServer, RawStream, Server, assert_error_shape, chat_body, need_model, request,
    run_cli, sse_objects)


# ---- constrained output: grammar, json_schema, response_format (Gemma 3 270M) ----------------

YES_NO = 'root ::= "yes" | "no"'

# Every field bounded, so a constrained answer ends well within max_tokens.
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "color": {"enum": ["red", "green", "blue"]},
        "pets": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
    },
    "required": ["name", "age", "color"],
    "additionalProperties": False,
}


def assert_person(tc, text):
    """The text is one JSON value that PERSON_SCHEMA admits (checked here, and by jsonschema too
    when it is installed)."""
    try:
        v = json.loads(text)
    except ValueError as e:
        tc.fail(f"not JSON ({e}): {text!r}")
    tc.assertIsInstance(v, dict, text)
    tc.assertLessEqual(set(v), {"name", "age", "color", "pets"}, text)
    tc.assertIsInstance(v.get("name"), str, text)
    tc.assertTrue(1 <= len(v["name"]) <= 12, text)
    tc.assertIs(type(v.get("age")), int, text)
    tc.assertTrue(0 <= v["age"] <= 120, text)
    tc.assertIn(v.get("color"), ("red", "green", "blue"), text)
    if "pets" in v:
        tc.assertIsInstance(v["pets"], list, text)
        tc.assertLessEqual(len(v["pets"]), 2, text)
        for p in v["pets"]:
            tc.assertIsInstance(p, str, text)
            tc.assertLessEqual(len(p), 8, text)
    try:
        import jsonschema
    except ImportError:
        return v
    jsonschema.validate(v, PERSON_SCHEMA)
    return v


class ConstrainedOutput(GemmaServer):
    # -- grammar --

    def test_grammar_yes_no_on_every_endpoint(self):
        # a base model left alone never answers just "yes" or "no"; seeded sampling (not
        # greedy) so the grammar, not the argmax, decides
        for seed in (1, 2):
            with self.subTest(seed=seed):
                j = self.ok("/completion", {"prompt": "Is the sky blue? Answer:", "n_predict": 8,
                                            "grammar": YES_NO, "seed": seed, "temperature": 1})
                self.assertIn(j["content"], ("yes", "no"), j)
                self.assertEqual(j["stop_type"], "eos", j)
                j = self.ok("/v1/completions", {"prompt": "Is the sky blue? Answer:", "max_tokens": 8,
                                                "grammar": YES_NO, "seed": seed, "temperature": 1})
                self.assertIn(j["choices"][0]["text"], ("yes", "no"), j)
                self.assertEqual(j["choices"][0]["finish_reason"], "stop", j)
                j = self.chat("Is the sky blue?", max_tokens=8, grammar=YES_NO, seed=seed, temperature=1)
                self.assertIn(j["choices"][0]["message"]["content"], ("yes", "no"), j)
                self.assertEqual(j["choices"][0]["finish_reason"], "stop", j)
        # streamed: the pieces make "yes" or "no" too
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Is the sky blue?", max_tokens=8, grammar=YES_NO, stream=True)).read_all()
        self.assertEqual(s.status, 200, s.body[:300])
        objs = sse_objects(self, s)
        text = "".join(o["choices"][0]["delta"].get("content") or "" for o in objs if o["choices"])
        self.assertIn(text, ("yes", "no"), s.body[-600:])

    def test_grammar_with_repetition_and_classes(self):
        g = 'root ::= "(" [a-z]{3} ") " num ("," num){2}\nnum ::= [0-9] | [1-9] [0-9]'
        for path, body in [("/completion", {"prompt": "Data:", "n_predict": 32, "grammar": g}),
                           ("/v1/completions", {"prompt": "Data:", "max_tokens": 32, "grammar": g})]:
            with self.subTest(path=path):
                j = self.ok(path, body)
                text = j["content"] if path == "/completion" else j["choices"][0]["text"]
                self.assertRegex(text, r"\A\([a-z]{3}\) (?:[0-9]|[1-9][0-9])(?:,(?:[0-9]|[1-9][0-9])){2}\Z")

    def test_bad_grammar_is_400_with_line_and_column(self):
        cases = [('root ::= "yes" | nope', "line 1, column 18"),  # nope: never defined
                 ('root :: "a"', "line 1, column"),
                 ('root ::= "a"\nnum ::= [0-9', "line 2, column")]
        for grammar, where in cases:
            for path, body in [("/completion", {"prompt": "x", "n_predict": 4, "grammar": grammar}),
                               ("/v1/completions", {"prompt": "x", "max_tokens": 4, "grammar": grammar}),
                               ("/v1/chat/completions", chat_body("x", max_tokens=4, grammar=grammar))]:
                with self.subTest(grammar=grammar, path=path):
                    err = assert_error_shape(self, self.post(path, body), 400)
                    self.assertIn(where, err["message"])
                    self.assertEqual(err.get("param"), "grammar", err)
        err = assert_error_shape(self, self.post("/completion", {"prompt": "x", "grammar": 5}), 400)
        self.assertIn("grammar", err["message"])
        # one constraint at a time
        err = assert_error_shape(self, self.post("/v1/chat/completions", chat_body(
            "x", grammar=YES_NO, response_format={"type": "json_object"})), 400)
        self.assertIn("grammar", err["message"])

    # -- JSON schemas --

    def test_json_schema_field_on_every_endpoint(self):
        for path, body in [
                ("/completion", {"prompt": "A person as JSON:", "n_predict": 96, "json_schema": PERSON_SCHEMA}),
                ("/v1/completions", {"prompt": "A person as JSON:", "max_tokens": 96,
                                     "json_schema": PERSON_SCHEMA}),
                ("/v1/chat/completions", chat_body("Describe a person as JSON.", max_tokens=96,
                                                   json_schema=PERSON_SCHEMA))]:
            with self.subTest(path=path):
                j = self.ok(path, body)
                if path == "/completion":
                    text = j["content"]
                    self.assertEqual(j["stop_type"], "eos", j)
                else:
                    c = j["choices"][0]
                    text = c["text"] if "text" in c else c["message"]["content"]
                    self.assertEqual(c["finish_reason"], "stop", j)
                assert_person(self, text)

    def test_response_format_json_schema_strict(self):
        rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}}
        for seed in (3, 4):
            with self.subTest(seed=seed):
                j = self.chat("Describe a person as JSON.", max_tokens=96, seed=seed, response_format=rf)
                self.assertEqual(j["choices"][0]["finish_reason"], "stop", j)
                assert_person(self, j["choices"][0]["message"]["content"])
        j = self.ok("/v1/completions", {"prompt": "A person as JSON:", "max_tokens": 96, "response_format": rf})
        self.assertEqual(j["choices"][0]["finish_reason"], "stop", j)
        assert_person(self, j["choices"][0]["text"])
        # streamed: the pieces make the same kind of object
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Describe a person as JSON.", max_tokens=96, stream=True,
                                response_format=rf)).read_all()
        self.assertEqual(s.status, 200, s.body[:300])
        objs = sse_objects(self, s)
        assert_person(self, "".join(o["choices"][0]["delta"].get("content") or "" for o in objs if o["choices"]))

    def test_response_format_json_object(self):
        j = self.chat('Example: {"name": "Bob", "age": 3}\nExample:', max_tokens=64, temperature=0,
                      response_format={"type": "json_object"})
        self.assertEqual(j["choices"][0]["finish_reason"], "stop", j)
        v = json.loads(j["choices"][0]["message"]["content"])
        self.assertIsInstance(v, dict, j)
        # (sampled at the default temperature: a seed of its own, so that a run does not
        # depend on the draw - an unlucky one wrote past 64 tokens before closing)
        j = self.ok("/v1/completions", {"prompt": 'Example: {"name": "Bob", "age": 3}\nExample:',
                                        "max_tokens": 64, "seed": 7,
                                        "response_format": {"type": "json_object"}})
        self.assertEqual(j["choices"][0]["finish_reason"], "stop", j)
        self.assertIsInstance(json.loads(j["choices"][0]["text"]), dict, j)
        # "text" is no constraint
        j = self.chat("Say hi.", max_tokens=4, response_format={"type": "text"})
        self.assertIsInstance(j["choices"][0]["message"]["content"], str)
        assert_error_shape(self, self.post("/v1/chat/completions",
                                           chat_body("x", response_format={"type": "xml"})), 400)

    def test_unenforceable_schema_keyword_is_400_naming_it(self):
        cases = [
            ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not", "$.properties.a.not"),
            ({"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}},
             "format", "$.properties.u.format"),
            ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
             "patternProperties", "$.patternProperties"),
            ({"if": {"type": "string"}, "then": {"maxLength": 3}}, "if", "$.if"),
        ]
        for schema, keyword, path in cases:
            for where, url, body in [
                    ("json_schema", "/completion", {"prompt": "x", "n_predict": 4, "json_schema": schema}),
                    ("json_schema", "/v1/completions", {"prompt": "x", "max_tokens": 4, "json_schema": schema}),
                    ("json_schema", "/v1/chat/completions", chat_body("x", max_tokens=4, json_schema=schema)),
                    ("response_format.json_schema.schema", "/v1/chat/completions", chat_body(
                        "x", max_tokens=4, response_format={"type": "json_schema", "json_schema": {
                            "name": "t", "schema": schema, "strict": True}}))]:
                with self.subTest(keyword=keyword, url=url, field=where):
                    err = assert_error_shape(self, self.post(url, body), 400)
                    self.assertEqual(err.get("keyword"), keyword, err)
                    self.assertEqual(err.get("path"), path, err)
                    self.assertEqual(err.get("param"), where, err)


# ---- --grammar-file and --json-schema on serve ------------------------------------------------

# A tool call as one JSON object, bounded so it ends within max_tokens.
TOOL_GBNF = r"""# a tool call, as one JSON object
root ::= "{" ws "\"tool\":" ws tool "," ws "\"args\":" ws args ws "}"
tool ::= "\"" ("search" | "calc") "\""
args ::= "{" ws (pair ("," ws pair)?)? ws "}"
pair ::= key ":" ws (key | num)
key  ::= "\"" [a-z]{1,6} "\""
num  ::= "0" | [1-9] [0-9]{0,2}
ws   ::= " "?
"""
_TOOL_PAIR = r'"[a-z]{1,6}": ?(?:"[a-z]{1,6}"|0|[1-9][0-9]{0,2})'
TOOL_RX = r'\A\{ ?"tool": ?"(?:search|calc)", ?"args": ?\{ ?(?:' + _TOOL_PAIR + r"(?:, ?" + _TOOL_PAIR + r")?)? ?\} ?\}\Z"


class ServeGrammarFlags(unittest.TestCase):
    """serve --grammar-file / --json-schema: a default constraint on every request."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.dir = tempfile.mkdtemp(prefix="edgellm-grammar-")
        cls.addClassCleanup(lambda: shutil.rmtree(cls.dir, ignore_errors=True))

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", "-np", "1", "-c", "1024", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv.port

    def texts(self, port, max_tokens):
        """The answer of each endpoint to a plain request (no constraint of its own)."""
        out = {}
        for path, body in [("/completion", {"prompt": "Call a tool:", "n_predict": max_tokens}),
                           ("/v1/completions", {"prompt": "Call a tool:", "max_tokens": max_tokens}),
                           ("/v1/chat/completions", chat_body("Hi there.", max_tokens=max_tokens))]:
            r = request(port, "POST", path, body)
            self.assertEqual(r.status, 200, r)
            j = r.json()
            out[path] = (j["content"] if path == "/completion" else
                         j["choices"][0]["text"] if path == "/v1/completions" else j["choices"][0]["message"]["content"])
        return out

    def test_grammar_file_constrains_every_request(self):
        port = self.start("--grammar-file", self.write("tool.gbnf", TOOL_GBNF))
        for path, text in self.texts(port, 64).items():
            with self.subTest(path=path):
                self.assertRegex(text, TOOL_RX)
                v = json.loads(text)
                self.assertIn(v["tool"], ("search", "calc"))
                self.assertIsInstance(v["args"], dict)
        # a request's own grammar takes its place
        r = request(port, "POST", "/completion", {"prompt": "Is it?", "n_predict": 8, "grammar": YES_NO})
        self.assertIn(r.json()["content"], ("yes", "no"), r)

    def test_grammar_file_with_a_syntax_error_exits_2_naming_line_and_column(self):
        path = self.write("bad.gbnf", '# a comment\nroot ::= "{" body "}"\nbody ::= [a-z]+ missing\n')
        r = run_cli(["-m", self.model, "--port", "0", "--grammar-file", path])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("line 3, column 17", r.stderr)
        self.assertIn("missing", r.stderr)
        self.assertIn(path, r.stderr)
        path = self.write("bad2.gbnf", 'root ::= "a" (\n')
        r = run_cli(["-m", self.model, "--port", "0", "--grammar-file", path])
        self.assertEqual(r.returncode, 2, r)
        self.assertRegex(r.stderr, r"line \d+, column \d+")

    def test_json_schema_flag_constrains_every_request(self):
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
        port = self.start("--json-schema", json.dumps(schema))
        for path, text in self.texts(port, 64).items():
            with self.subTest(path=path):
                v = json.loads(text)
                self.assertIsInstance(v, dict, text)
                self.assertIs(type(v.get("a")), int, text)

    def test_bad_json_schema_flag_exits_2(self):
        r = run_cli(["-m", self.model, "--port", "0", "--json-schema",
                     '{"type":"object","properties":{"a":{"not":{"type":"string"}}}}'])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--json-schema", r.stderr)
        self.assertIn("$.properties.a.not", r.stderr)
        r = run_cli(["-m", self.model, "--port", "0", "--json-schema", '{"type":'])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--json-schema", r.stderr)
