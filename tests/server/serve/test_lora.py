"""LoRA adapters: --lora, the scale per request and for the server."""

import os
import shutil
import tempfile
import unittest

from harness import (
    GEMMA, chat_body, need_model, request, run_cli, start_server)


def write_lora_gguf(path, arch, matrices, alpha=0.0, seed=3, std=0.05):
    """A LoRA adapter file as llama.cpp writes them (GGUF v3): for each (name, n_in, n_out,
    rank), NAME.lora_a [n_in, rank] and NAME.lora_b [rank, n_out], random f32."""
    import random
    import struct
    rng = random.Random(seed)

    def string(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    kv = [("general.architecture", 8, string(arch)), ("general.type", 8, string("adapter")),
          ("adapter.type", 8, string("lora")), ("adapter.lora.alpha", 6, struct.pack("<f", alpha))]
    tensors = []
    for name, n_in, n_out, rank in matrices:
        a = [rng.gauss(0, std) for _ in range(n_in * rank)]
        b = [rng.gauss(0, std) for _ in range(rank * n_out)]
        tensors.append((name + ".lora_a", [n_in, rank], struct.pack(f"<{len(a)}f", *a)))
        tensors.append((name + ".lora_b", [rank, n_out], struct.pack(f"<{len(b)}f", *b)))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, typ, val in kv:
        head += string(key) + struct.pack("<I", typ) + val
    offset, data = 0, b""
    for name, ne, blob in tensors:
        head += string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", 0, offset)  # F32
        pad = (-len(blob)) % 32
        data += blob + b"\0" * pad
        offset += len(blob) + pad
    head += b"\0" * ((-len(head)) % 32)
    with open(path, "wb") as f:
        f.write(head + data)


# Gemma 3 270M's matrices an adapter may change: (name, n_in, n_out)
GEMMA_LORA = [("blk.0.attn_q.weight", 640, 1024), ("blk.3.ffn_up.weight", 640, 2048),
              ("blk.17.ffn_down.weight", 2048, 640)]


class LoraAdapters(unittest.TestCase):
    """--lora: an adapter applied at load, its scale per request ("lora") and for the server
    (POST /lora-adapters); the same prompt greedily gives the base model's text at scale 0."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-lora-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.adapter = os.path.join(cls.tmp, "strong.gguf")
        write_lora_gguf(cls.adapter, "gemma3", [(n, i, o, 8) for n, i, o in GEMMA_LORA], alpha=16.0, std=0.08)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-c", "512", "-np", "2", "-t", "2",
                                     "--lora", cls.adapter])
        cls.port = cls.srv.port

    def complete(self, **kw):
        r = request(self.port, "POST", "/completion",
                    {"prompt": "The capital of France is", "n_predict": 12, "temperature": 0, **kw})
        self.assertEqual(r.status, 200, r)
        return r.json()["content"]

    def test_scales_per_request_and_for_the_server(self):
        r = request(self.port, "GET", "/lora-adapters")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()[0]["id"], 0)
        self.assertEqual(r.json()[0]["path"], self.adapter)
        self.assertEqual(r.json()[0]["scale"], 1.0)
        base = self.complete(lora=[{"id": 0, "scale": 0.0}])
        applied = self.complete()  # the server's scale: 1
        self.assertNotEqual(base, applied, "the adapter changed nothing: the test cannot tell")
        self.assertEqual(self.complete(lora=[]), base)  # not listed: scale 0
        self.assertEqual(self.complete(lora=[{"id": 0, "scale": 1.0}]), applied)
        self.assertEqual(self.complete(), applied)  # the prefix cached under scale 0 is not reused
        r = request(self.port, "POST", "/lora-adapters", [{"id": 0, "scale": 0}])
        self.assertEqual(r.status, 200, r)
        try:
            self.assertEqual(self.complete(), base)
            self.assertEqual(request(self.port, "GET", "/lora-adapters").json()[0]["scale"], 0.0)
        finally:
            request(self.port, "POST", "/lora-adapters", [{"id": 0, "scale": 1}])
        chat = request(self.port, "POST", "/v1/chat/completions",
                       {**chat_body("Hi", max_tokens=4, temperature=0), "lora": [{"id": 0, "scale": 0.5}]})
        self.assertEqual(chat.status, 200, chat)

    def test_bad_lora_fields_are_400s(self):
        for lora, why in (([{"id": 1, "scale": 1}], "lora id 1 does not exist"),
                          ({"id": 0}, '"lora" must be an array'),
                          ([{"scale": 1}], '"lora" must be an array'),
                          ([{"id": 0, "scale": "big"}], '"lora" must be an array')):
            r = request(self.port, "POST", "/completion", {"prompt": "x", "n_predict": 1, "lora": lora})
            self.assertEqual(r.status, 400, (lora, r))
            self.assertIn(why, r.json()["error"]["message"])
        r = request(self.port, "POST", "/lora-adapters", [{"id": 5, "scale": 1}])
        self.assertEqual(r.status, 400, r)

    def test_without_adapters_a_lora_request_is_refused(self):
        srv = start_server(type(self), ["-m", self.model, "--port", "0", "-c", "256", "-t", "2"])
        r = request(srv.port, "POST", "/completion", {"prompt": "x", "n_predict": 1, "lora": [{"id": 0, "scale": 1}]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("--lora", r.json()["error"]["message"])
        r = request(srv.port, "POST", "/completion", {"prompt": "x", "n_predict": 1, "lora": []})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(request(srv.port, "GET", "/lora-adapters").json(), [])
        srv.stop()

    def test_init_without_apply_and_embeddings_with_a_lora(self):
        srv = start_server(type(self), ["-m", self.model, "--port", "0", "-c", "512", "-t", "2", "--embedding",
                                        "--lora", self.adapter, "--lora-init-without-apply"])
        self.assertEqual(request(srv.port, "GET", "/lora-adapters").json()[0]["scale"], 0.0)

        def complete(**kw):
            r = request(srv.port, "POST", "/completion",
                        {"prompt": "The capital of France is", "n_predict": 12, "temperature": 0, **kw})
            self.assertEqual(r.status, 200, r)
            return r.json()["content"]

        base = complete(lora=[{"id": 0, "scale": 0.0}])
        self.assertEqual(complete(), base)  # loaded, not applied
        self.assertNotEqual(complete(lora=[{"id": 0, "scale": 1.0}]), base)

        def embed(**kw):
            r = request(srv.port, "POST", "/v1/embeddings", {"input": "a red apple", **kw})
            self.assertEqual(r.status, 200, r)
            return r.json()["data"][0]["embedding"]

        plain = embed()
        self.assertEqual(embed(lora=[{"id": 0, "scale": 0}]), plain)
        self.assertNotEqual(embed(lora=[{"id": 0, "scale": 1}]), plain)  # a request's "lora" is honoured
        r = request(srv.port, "POST", "/v1/embeddings", {"input": "x", "lora": [{"id": 2, "scale": 1}]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("lora id 2 does not exist", r.json()["error"]["message"])
        srv.stop()

    def test_an_adapter_of_another_model_is_refused_at_start(self):
        wrong = os.path.join(self.tmp, "llama.gguf")
        write_lora_gguf(wrong, "llama", [("blk.0.attn_q.weight", 640, 1024, 4)])
        r = run_cli(["-m", self.model, "--port", "0", "--lora", wrong])
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("an adapter for llama, the model is gemma3", r.stderr)
        shape = os.path.join(self.tmp, "shape.gguf")
        write_lora_gguf(shape, "gemma3", [("blk.0.attn_q.weight", 512, 1024, 4)])
        r = run_cli(["-m", self.model, "--port", "0", "--lora-scaled", shape + ":0.5"])
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("do not fit", r.stderr)
        r = run_cli(["-m", self.model, "--port", "0", "--lora-scaled", shape])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("FILE:SCALE", r.stderr)
