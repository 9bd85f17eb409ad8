"""Probabilities, n choices, logit_bias and the sampler's fields (Gemma 3 270M)."""

import math

from harness import (
    GemmaServer, RawStream, assert_error_shape, chat_body, sse_objects)


# ---- probabilities, n choices, logit_bias, sampler fields (Gemma 3 270M) ---------------------


class SamplingAndProbabilities(GemmaServer):
    def assert_top(self, tc_entry, k):
        """One token's entry: its top list has k entries, sorted, the chosen token first
        (greedy), and every logprob <= 0."""
        self.assertLessEqual(tc_entry["logprob"], 0.0)
        top = tc_entry["top_logprobs"]
        self.assertEqual(len(top), k, tc_entry)
        lps = [t["logprob"] for t in top]
        self.assertEqual(lps, sorted(lps, reverse=True), tc_entry)
        self.assertTrue(all(lp <= 0.0 for lp in lps), tc_entry)
        self.assertLessEqual(sum(math.exp(lp) for lp in lps), 1.0 + 1e-4, tc_entry)
        self.assertEqual(top[0]["token"], tc_entry["token"], tc_entry)
        self.assertAlmostEqual(top[0]["logprob"], tc_entry["logprob"], places=4)

    # -- logprobs --

    def test_chat_logprobs(self):
        j = self.chat("Say hello.", max_tokens=6, ignore_eos=True, temperature=0, logprobs=True, top_logprobs=3)
        c = j["choices"][0]
        content = c["logprobs"]["content"]
        self.assertIsInstance(content, list, c)
        self.assertEqual(len(content), j["usage"]["completion_tokens"], j)
        self.assertEqual(len(content), 6)
        for e in content:
            self.assertIsInstance(e["token"], str)
            self.assertEqual(bytes(e["bytes"]).decode("utf-8", "replace"), e["token"], e)
            self.assert_top(e, 3)
            for t in e["top_logprobs"]:
                self.assertIsInstance(t["bytes"], list, t)
        # the tokens, byte for byte, are the answer
        self.assertEqual(b"".join(bytes(e["bytes"]) for e in content).decode(), c["message"]["content"])
        # without logprobs there are none
        j = self.chat("Say hello.", max_tokens=2)
        self.assertIsNone(j["choices"][0]["logprobs"])
        assert_error_shape(self, self.post("/v1/chat/completions",
                                           chat_body("x", max_tokens=1, top_logprobs=2)), 400)

    def test_chat_logprobs_streamed(self):
        body = chat_body("Say hello.", max_tokens=5, ignore_eos=True, temperature=0, logprobs=True,
                         top_logprobs=2, stream=True, stream_options={"include_usage": True})
        s = RawStream(self.port, "POST", "/v1/chat/completions", body).read_all()
        self.assertEqual(s.status, 200, s.body[:300])
        objs = sse_objects(self, s)
        entries, text = [], ""
        for o in objs:
            if not o["choices"] or not o["choices"][0]["delta"].get("content"):
                continue
            lp = o["choices"][0].get("logprobs")
            self.assertTrue(lp and lp["content"], f"a content chunk without logprobs: {o}")
            entries += lp["content"]
            text += o["choices"][0]["delta"]["content"]
        self.assertEqual(len(entries), objs[-1]["usage"]["completion_tokens"])
        self.assertEqual("".join(e["token"] for e in entries), text)
        for e in entries:
            self.assert_top(e, 2)
        # the same as the whole answer's
        body.update(stream=False)
        whole = self.ok("/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
        self.assertEqual([(e["token"], round(e["logprob"], 4)) for e in entries],
                         [(e["token"], round(e["logprob"], 4)) for e in whole])

    def test_completions_logprobs(self):
        prompt = "The capital of France is"
        j = self.ok("/v1/completions", {"prompt": prompt, "max_tokens": 4, "ignore_eos": True,
                                        "temperature": 0, "logprobs": 2})
        c = j["choices"][0]
        lp = c["logprobs"]
        n = j["usage"]["completion_tokens"]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            self.assertEqual(len(lp[key]), n, lp)
        self.assertEqual("".join(lp["tokens"]), c["text"])
        self.assertIn(lp["text_offset"][0], (0, len(prompt)), lp)
        for i in range(1, n):
            self.assertEqual(lp["text_offset"][i] - lp["text_offset"][i - 1], len(lp["tokens"][i - 1]), lp)
        for tok, tlp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            self.assertLessEqual(tlp, 0.0)
            self.assertEqual(len(top), 2, top)
            self.assertIn(tok, top)
            self.assertEqual(max(top, key=top.get), tok, top)  # greedy: the top one
            self.assertAlmostEqual(top[tok], tlp, places=4)

    def test_native_n_probs(self):
        j = self.ok("/completion", {"prompt": "The capital of France is", "n_predict": 3, "ignore_eos": True,
                                    "temperature": 0, "n_probs": 2, "return_tokens": True})
        probs = j["completion_probabilities"]
        self.assertIsInstance(probs, list, j)
        self.assertEqual(len(probs), j["tokens_predicted"])
        self.assertEqual([p["id"] for p in probs], j["tokens"])
        self.assertEqual("".join(p["token"] for p in probs), j["content"])
        for p in probs:
            self.assert_top(p, 2)
            self.assertEqual(p["top_logprobs"][0]["id"], p["id"])
        self.assertNotIn("completion_probabilities", self.ok("/completion", {"prompt": "x", "n_predict": 1}))

    # -- n choices --

    def test_chat_n_two_choices(self):
        body = chat_body("Tell a story.", n=2, temperature=1, seed=42, max_tokens=8, ignore_eos=True)
        j = self.ok("/v1/chat/completions", body)
        self.assertEqual([c["index"] for c in j["choices"]], [0, 1], j)
        texts = [c["message"]["content"] for c in j["choices"]]
        self.assertNotEqual(texts[0], texts[1], "the two choices are one sample twice")
        for c in j["choices"]:
            self.assertEqual(c["finish_reason"], "length")
            self.assertEqual(c["message"]["role"], "assistant")
        self.assertEqual(j["usage"]["completion_tokens"], 16, j["usage"])
        self.assertEqual(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"] + 16)
        # the same seed, the same two choices; streamed too, each under its index
        self.assertEqual([c["message"]["content"] for c in self.ok("/v1/chat/completions", body)["choices"]], texts)
        body.update(stream=True, stream_options={"include_usage": True})
        s = RawStream(self.port, "POST", "/v1/chat/completions", body).read_all()
        self.assertEqual(s.status, 200, s.body[:300])
        objs = sse_objects(self, s)
        streamed, finishes, roles = {0: "", 1: ""}, {}, {}
        for o in objs[:-1]:
            self.assertEqual(len(o["choices"]), 1, o)
            ch = o["choices"][0]
            i = ch["index"]
            if ch["delta"].get("role"):
                roles[i] = ch["delta"]["role"]
            streamed[i] += ch["delta"].get("content") or ""
            if ch["finish_reason"]:
                self.assertNotIn(i, finishes, "two finish_reasons for one choice")
                finishes[i] = ch["finish_reason"]
        self.assertEqual(roles, {0: "assistant", 1: "assistant"})
        self.assertEqual(finishes, {0: "length", 1: "length"})
        self.assertEqual([streamed[0], streamed[1]], texts)
        self.assertEqual(objs[-1]["choices"], [])
        self.assertEqual(objs[-1]["usage"]["completion_tokens"], 16)

    def test_completions_n_and_native_refusal(self):
        j = self.ok("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 3, "n": 2,
                                        "temperature": 1, "seed": 3, "ignore_eos": True})
        self.assertEqual([c["index"] for c in j["choices"]], [0, 1], j)
        self.assertEqual(j["usage"]["completion_tokens"], 6, j)
        assert_error_shape(self, self.post("/completion", {"prompt": "x", "n": 2, "n_predict": 1}), 400)
        assert_error_shape(self, self.post("/v1/chat/completions", chat_body("x", n=17)), 400)

    # -- logit_bias --

    def first_token(self, **kw):
        j = self.chat("Say hello.", max_tokens=1, temperature=0, logprobs=True, top_logprobs=2, **kw)
        return j["choices"][0]["logprobs"]["content"][0]

    def token_id(self, text):
        ids = self.ok("/tokenize", {"content": text})["tokens"]
        self.assertEqual(len(ids), 1, f"{text!r} is more than one token: {ids}")
        return ids[0]

    def test_logit_bias_openai_form(self):
        first = self.first_token()
        banned = self.token_id(first["token"])
        second = first["top_logprobs"][1]["token"]
        after = self.first_token(logit_bias={str(banned): -100})
        self.assertNotEqual(after["token"], first["token"])
        self.assertEqual(after["token"], second, "the ban should leave the next best token")
        # on /v1/completions: banned, and forced
        j = self.ok("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0})
        plain = j["choices"][0]["text"]
        j = self.ok("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0,
                                        "logit_bias": {str(self.token_id(plain)): -100}})
        self.assertNotEqual(j["choices"][0]["text"], plain)
        j = self.ok("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0,
                                        "logit_bias": {str(self.token_id(" banana")): 100}})
        self.assertEqual(j["choices"][0]["text"], " banana banana")
        assert_error_shape(self, self.post("/v1/completions", {"prompt": "x", "logit_bias": {"5": -101}}), 400)

    def test_logit_bias_llama_cpp_form(self):
        prompt = "Hello!\nHello!\nHello!\n"
        hello = self.token_id("Hello")
        base = self.ok("/completion", {"prompt": prompt, "n_predict": 4, "temperature": 0, "return_tokens": True})
        self.assertEqual(base["tokens"][0], hello, base)  # (else this test shows nothing)
        for bias in ([["Hello", False]], [[hello, False]]):
            with self.subTest(bias=bias):
                j = self.ok("/completion", {"prompt": prompt, "n_predict": 4, "temperature": 0,
                                            "return_tokens": True, "logit_bias": bias})
                self.assertNotIn(hello, j["tokens"], j)
                self.assertFalse(j["content"].startswith("Hello"), j)
        assert_error_shape(self, self.post("/completion", {"prompt": "x", "logit_bias": [["Hello", True]]}), 400)

    # -- sampler fields --

    def samples(self, seeds=(1, 2, 3), **kw):
        """The answers to one prompt at a high temperature, unfiltered, one per seed."""
        return [self.native_text({"prompt": "Once upon a time", "n_predict": 6, "temperature": 1.5, "top_k": 0,
                                  "top_p": 1, "min_p": 0, "seed": seed, **kw}) for seed in seeds]

    def test_sampler_fields_take_effect(self):
        greedy = self.native_text({"prompt": "Once upon a time", "n_predict": 6, "temperature": 0})
        control = self.samples()
        self.assertGreater(len(set(control)), 1, f"the seeds make no difference: {control}")
        # each of these leaves one token at every step: every seed gives the same answer
        for what, kw, expect in [
                ("typical_p tiny", {"typical_p": 0.001}, None),
                ("mirostat 1, tau 0", {"mirostat": 1, "mirostat_tau": 0.0}, greedy),
                ("mirostat 2, tau 0", {"mirostat": 2, "mirostat_tau": 0.0, "mirostat_eta": 0.1}, greedy),
                ("top_n_sigma tiny", {"top_n_sigma": 0.001}, greedy),
                ("samplers with top_k, top_k 1", {"samplers": ["top_k", "temperature"], "top_k": 1}, greedy)]:
            with self.subTest(what):
                got = self.samples(seeds=(1, 2), **kw)
                self.assertEqual(got[0], got[1], f"{what}: {got}")
                if expect is not None:
                    self.assertEqual(got[0], expect, what)
        # the order is the one given: top_k left out of it does nothing
        got = self.samples(samplers=["temperature"], top_k=1)
        self.assertGreater(len(set(got)), 1, f"top_k acted though samplers left it out: {got}")
        # XTC at probability 1 takes out every likely token but the least likely of them (','
        # is 0.6 likely after this prompt, ' in' 0.1): then top_k 1 cannot pick the greedy one
        self.assertTrue(greedy.startswith(","), greedy)
        got = self.native_text({"prompt": "Once upon a time", "n_predict": 2, "temperature": 1, "top_k": 1,
                                "samplers": ["xtc", "top_k", "temperature"], "xtc_probability": 1.0,
                                "xtc_threshold": 0.05})
        self.assertFalse(got.startswith(","), got)

    def test_sampler_fields_accepted_on_chat(self):
        for kw in [{"typical_p": 0.5}, {"mirostat": 1}, {"mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.2},
                   {"xtc_probability": 0.5, "xtc_threshold": 0.1}, {"top_n_sigma": 1.0},
                   {"samplers": ["top_k", "temperature"]}, {"dry_multiplier": 0}, {"min_keep": 1},
                   {"post_sampling_probs": False}]:
            with self.subTest(**kw):
                j = self.chat("Count: one, two,", max_tokens=3, **kw)
                self.assertIsInstance(j["choices"][0]["message"]["content"], str)

    def test_unsupported_sampler_fields_are_400_naming_them(self):
        for kw, needle in [({"dry_multiplier": 0.5}, "dry_multiplier"), ({"samplers": ["bogus"]}, "bogus"),
                           ({"samplers": ["top_k", "dry"]}, "dry"), ({"min_keep": 5}, "min_keep"),
                           ({"mirostat": 3}, "mirostat"),
                           ({"typical_p": 2}, "typical_p"),
                           # this server does not speculate: asking it to is refused, named
                           ({"speculative.n_max": 4}, "speculative.n_max"),
                           ({"speculative.n_min": 2}, "speculative.n_min"),
                           ({"speculative.p_min": 0.5}, "speculative.p_min")]:
            for path, body in [("/v1/chat/completions", chat_body("x", max_tokens=2, **kw)),
                               ("/completion", {"prompt": "x", "n_predict": 2, **kw})]:
                with self.subTest(path=path, **kw):
                    err = assert_error_shape(self, self.post(path, body), 400)
                    self.assertIn(needle, err["message"])
