"""Speculative decoding: the 1.5B with the 0.5B drafting."""

import re
import threading
import time
import unittest

from harness import (
    QWEN, QWEN_SMALL, RawStream, need_model, request, start_server)


class SpeculativeDecoding(unittest.TestCase):
    """The 1.5B with the 0.5B drafting, two slots, --spec-fixed (every step drafts, so the
    checks below always exercise drafts), prompt lookup before the draft model, and the
    draft model's own context and KV type."""

    EDIT = ("Rename the variable `total` to `acc` in this function and return the whole "
            "function, nothing else:\n```python\ndef summarize(orders):\n    total = 0\n"
            "    for order in orders:\n        total += order.amount\n    return total\n```")

    @classmethod
    def setUpClass(cls):
        model, draft = need_model(QWEN), need_model(QWEN_SMALL)
        cls.srv = start_server(cls, ["-m", model, "-md", draft, "--spec-type", "ngram,draft",
                                     "--port", "0", "-np", "2", "-c", "2048", "--draft-max", "4",
                                     "--spec-ngram-simple-size-m", "6", "-cd", "1024",
                                     "-ctkd", "q8_0", "-ctvd", "q8_0", "--spec-fixed",
                                     "--metrics"])
        cls.port = cls.srv.port

    def chat(self, content, **extra):
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 40,
                "temperature": 0}
        body.update(extra)
        r = request(self.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_the_draft_flags_took_effect(self):
        log = self.srv.log_text()
        # -cd 1024 over two slots, -ctkd q8_0; lookup up to 6 a step, the draft model up to 4
        self.assertRegex(log, r"memory of the draft model: .*\(q8_0, 512 tokens a slot\)")
        self.assertIn("prompt lookup of 5..3 tokens (up to 6 per step)", log)
        self.assertRegex(log, r"then draft model \S+ \(p_min 0.00, up to 4 per step\)")
        self.assertIn("always the most (--spec-fixed)", log)
        # a request may ask for up to the most a step carries (6), not more
        j = self.chat("Count to five.", **{"speculative.n_max": 6})
        self.assertIn(j["choices"][0]["finish_reason"], ("stop", "length"))
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "hi"}], "speculative.n_max": 7})
        self.assertEqual(r.status, 400, r)
        self.assertIn("speculative.n_max", r.json()["error"]["message"])

    def test_greedy_output_is_the_same_as_without_drafts(self):
        spec = self.chat(self.EDIT)
        plain = self.chat(self.EDIT, **{"speculative.n_max": 0})
        self.assertEqual(spec["choices"][0]["message"]["content"],
                         plain["choices"][0]["message"]["content"])
        t = spec["timings"]
        self.assertGreater(t["draft_n"], 0)
        self.assertGreater(t["draft_n_accepted"], 0)
        self.assertNotIn("draft_n", plain["timings"])
        m = request(self.port, "GET", "/metrics").body.decode()
        drafted = float(re.search(r"^edgellm_draft_tokens_total (\S+)", m, re.M).group(1))
        kept = float(re.search(r"^edgellm_draft_tokens_accepted_total (\S+)", m, re.M).group(1))
        self.assertGreaterEqual(drafted, t["draft_n"])
        self.assertGreaterEqual(kept, t["draft_n_accepted"])
        # the request's log line has the drafted and kept counts and the accept rate
        self.srv.wait_log(r"draft %d, accepted %d, accept rate \d\.\d\d" %
                          (t["draft_n"], t["draft_n_accepted"]), timeout=5)

    def test_two_slots_speculate_at_once(self):
        prompts = [self.EDIT, "List the first ten prime numbers, comma-separated."]
        alone = [self.chat(p, **{"speculative.n_max": 0})["choices"][0]["message"]["content"]
                 for p in prompts]
        out = {}

        def run(i):
            out[i] = self.chat(prompts[i], id_slot=i)

        ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        for i in range(2):
            self.assertEqual(out[i]["choices"][0]["message"]["content"], alone[i])
            self.assertGreater(out[i]["timings"]["draft_n"], 0)

    def test_a_client_that_goes_away_while_drafting_frees_its_slot(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": self.EDIT}], "max_tokens": 200,
                       "temperature": 0, "stream": True, "id_slot": 1})
        s.read_until_events(3)
        s.abort()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            slot = request(self.port, "GET", "/slots").json()[1]
            if not slot["is_processing"]:
                break
            time.sleep(0.02)
        self.assertFalse(slot["is_processing"], "the slot still generates for a client that left")
        # and it serves the next request, speculating again
        j = self.chat(self.EDIT, id_slot=1)
        self.assertGreater(j["timings"]["draft_n"], 0)
        self.srv.wait_log(r"cancelled: the client went away", timeout=5)
