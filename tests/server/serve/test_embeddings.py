"""Embeddings and reranking (--embedding, --reranking, --pooling)."""

import unittest

from harness import (
    GEMMA, GemmaServer, Server, assert_error_shape, need_model, request, run_cli)


class Embeddings(GemmaServer):
    """--reranking (and so --embedding) on Gemma 3 270M with two slots: the vectors' shapes
    and norms, the input forms, errors, reranking's order, and generation still served."""

    FLAGS = ["--reranking", "-np", "2", "--pooling", "mean"]
    DOCS = ["A machine is a physical system that uses power to apply forces and control "
            "movement to perform an action, such as engines or motors.",
            "Learning is the process of acquiring new understanding, knowledge, behaviors "
            "and skills.",
            "Machine learning is a field of study in artificial intelligence concerned with "
            "statistical algorithms that learn from data and generalize to unseen data.",
            "Paris, capitale de la France, est une grande ville européenne et un centre "
            "mondial de l'art, de la mode et de la gastronomie."]

    def embed(self, body, path="/v1/embeddings"):
        return self.ok(path, body)

    def test_openai_shape_normalized_and_counted(self):
        tokens = len(request(self.port, "POST", "/tokenize",
                             {"content": "I believe the meaning of life is",
                              "add_special": True}).json()["tokens"])
        d = self.embed({"input": "I believe the meaning of life is", "model": "any"})
        self.assertEqual(d["object"], "list")
        self.assertEqual(len(d["data"]), 1)
        v = d["data"][0]["embedding"]
        self.assertEqual(len(v), 640)  # Gemma 3 270M's width
        self.assertAlmostEqual(sum(x * x for x in v), 1.0, places=4)
        self.assertEqual(d["usage"], {"prompt_tokens": tokens, "total_tokens": tokens})

    def test_input_forms_and_same_text_same_vector(self):
        d = self.embed({"input": ["hello world",
                                  {"content": [{"type": "text", "text": "hello "},
                                               {"type": "text", "text": "world"}]},
                                  {"prompt_string": "hello world"},
                                  [2, 17534, 1902], [2, 17534, "x"]]})
        self.assertEqual([e["index"] for e in d["data"]], [0, 1, 2, 3, 4])
        vs = [e["embedding"] for e in d["data"]]
        self.assertEqual(vs[0], vs[1])
        self.assertEqual(vs[0], vs[2])
        self.assertNotEqual(vs[0], vs[4])
        one = self.embed({"input": [12, 34, "string", 56]})  # ids and text: one input
        self.assertEqual(len(one["data"]), 1)

    def test_base64_is_the_same_vector(self):
        import base64, struct
        plain = self.embed({"input": "Test base64"})["data"][0]["embedding"]
        b = self.embed({"input": "Test base64", "encoding_format": "base64"})["data"][0]["embedding"]
        raw = base64.b64decode(b)
        floats = struct.unpack(f"<{len(raw) // 4}f", raw)
        self.assertEqual(len(floats), len(plain))
        for x, y in zip(floats, plain):
            self.assertAlmostEqual(x, y, places=5)

    def test_native_endpoint_and_normalization_off(self):
        r = self.post("/embedding", {"content": "hello hello hello", "embd_normalize": -1})
        self.assertEqual(r.status, 200, r)
        d = r.json()
        self.assertIsInstance(d, list)
        v = d[0]["embedding"][0]  # llama.cpp's shape: a list of vectors
        self.assertGreater(abs(sum(x * x for x in v) - 1.0), 1e-3)

    def test_refusals_name_the_problem(self):
        for body in ({"input": []}, {"input": {"content": "string"}},
                     {"input": {"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}},
                     {"input": [1, -5]}, {"input": [1, 999999999]},
                     {"input": "x", "encoding_format": "int8"}, {"input": "x", "dimensions": 7}):
            r = self.post("/v1/embeddings", body)
            assert_error_shape(self, r, 400)
        r = self.post("/v1/embeddings", {"input": "This is a test " * 600})
        assert_error_shape(self, r, 400)
        self.assertIn("too large", r.json()["error"]["message"])
        r = self.post("/v1/embeddings", "{not json")
        assert_error_shape(self, r, 400)

    def test_rerank_orders_by_relevance(self):
        d = self.ok("/rerank", {"query": "Machine learning is", "documents": self.DOCS})
        self.assertEqual(len(d["results"]), 4)
        order = [r["index"] for r in d["results"]]
        self.assertEqual(order[0], 2, d)   # the definition of machine learning
        self.assertEqual(order[-1], 3, d)  # the French text about Paris
        scores = [r["relevance_score"] for r in d["results"]]
        self.assertEqual(scores, sorted(scores, reverse=True))
        self.assertGreater(d["usage"]["prompt_tokens"], 40)
        top = self.ok("/v1/rerank", {"query": "Machine learning is", "documents": self.DOCS,
                                     "top_n": 2})
        self.assertEqual([r["index"] for r in top["results"]], order[:2])
        tei = self.ok("/rerank", {"query": "Machine learning is", "texts": self.DOCS,
                                  "return_text": True})
        self.assertEqual([r["index"] for r in tei], order)
        self.assertEqual(tei[0]["text"], self.DOCS[2])
        for bad in ([], None, 123, [1, 2, 3]):
            assert_error_shape(self, self.post("/rerank", {"query": "q", "documents": bad}), 400)

    def test_generation_still_served_and_beside_embeddings(self):
        import threading
        results = []
        def gen():
            results.append(self.post("/completion", {"prompt": "Once upon a time",
                                                     "n_predict": 24, "ignore_eos": True,
                                                     "temperature": 0}))
        t = threading.Thread(target=gen)
        t.start()
        for _ in range(4):
            self.embed({"input": "while another slot generates"})
        t.join()
        self.assertEqual(results[0].status, 200, results[0])
        alone = self.post("/completion", {"prompt": "Once upon a time", "n_predict": 24,
                                          "ignore_eos": True, "temperature": 0})
        self.assertEqual(alone.json()["content"], results[0].json()["content"])


class EmbeddingFlags(unittest.TestCase):
    """Without --embedding the endpoints answer 400 naming it; --pooling none gives one
    vector per token on /embedding and is refused on the OpenAI endpoint."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def start(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", "-c", "512", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv.port

    def test_off_by_default_and_the_error_names_the_flag(self):
        port = self.start()
        r = request(port, "POST", "/v1/embeddings", {"input": "x"})
        assert_error_shape(self, r, 400)
        self.assertIn("--embedding", r.json()["error"]["message"])
        r = request(port, "POST", "/rerank", {"query": "q", "documents": ["a"]})
        assert_error_shape(self, r, 400)
        self.assertIn("--reranking", r.json()["error"]["message"])

    def test_pooling_none_and_bad_values(self):
        port = self.start("--embedding", "--pooling", "none")
        n = len(request(port, "POST", "/tokenize", {"content": "hello hello hello",
                                                    "add_special": True}).json()["tokens"])
        r = request(port, "POST", "/embeddings", {"input": "hello hello hello"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(r.json()[0]["embedding"]), n)
        assert_error_shape(self, request(port, "POST", "/v1/embeddings", {"input": "x"}), 400)
        for flags in (["--embedding", "--pooling", "max"], ["--pooling", "mean"]):
            r = run_cli(["-m", self.model, "--port", "0", *flags])
            self.assertEqual(r.returncode, 2, r)
            self.assertIn("--pooling", r.stderr)
