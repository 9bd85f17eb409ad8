"""The protocol on one slot (Gemma 3 270M): the endpoints, streaming's framing, errors,
/metrics, /slots, slot save and restore, prefix reuse, cancellation, the queue and the
openai client."""

import http.client
import json
import os
import re
import select
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest
import uuid

from harness import (
    CANCEL_BOUND_S, GEMMA, KeepAlive, RawStream, assert_error_shape, assert_timings, chat_body,
    metrics_values, need_model, request, slot_busy, sse_events, start_server)


# ---- the protocol, on Gemma 3 270M, one slot -------------------------------------------


class OneSlotServer(unittest.TestCase):
    """One server (-np 1, --metrics, --slot-save-path) for most protocol tests."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.slot_dir = tempfile.mkdtemp(prefix="edgellm-slots-")
        cls.addClassCleanup(lambda: shutil.rmtree(cls.slot_dir, ignore_errors=True))
        cls.n_ctx = 2048
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "1", "-c", cls.n_ctx,
                                     "--metrics", "--slot-save-path", cls.slot_dir])
        cls.port = cls.srv.port

    def post(self, path, body, **kw):
        return request(self.port, "POST", path, body, **kw)

    def get(self, path, **kw):
        return request(self.port, "GET", path, **kw)

    def wait_idle(self, timeout=30):
        ka = KeepAlive(self.port)
        try:
            deadline = time.monotonic() + timeout
            while slot_busy(ka):
                self.assertLess(time.monotonic(), deadline, "slot 0 stays busy")
                time.sleep(0.01)
        finally:
            ka.close()

    def tearDown(self):
        self.wait_idle()  # no test leaves a generation running for the next

    # -- health, models, props, page, 404 --

    def test_health_503_while_loading_then_ok(self):
        seen = self.srv.health_seen
        self.assertEqual(seen[-1][0], 200)
        self.assertEqual(json.loads(seen[-1][1]), {"status": "ok", "state": "ready"})
        loading = [(s, b) for s, b in seen if s != 200]
        self.assertTrue(loading, "GET /health right after start did not see the model loading "
                                 f"(503): {seen[:3]}")
        for status, body in loading:
            self.assertEqual(status, 503, body)
            err = json.loads(body)["error"]
            self.assertIn(json.loads(body)["status"], ("loading", "warming"))
            self.assertEqual(err["code"], 503)
            self.assertEqual(err["type"], "unavailable_error")
        r = self.get("/v1/health")
        self.assertEqual((r.status, r.json()), (200, {"status": "ok", "state": "ready"}))

    def test_models(self):
        r = self.get("/v1/models")
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "list")
        self.assertEqual(len(j["data"]), 1)
        self.assertEqual(j["data"][0]["id"], os.path.basename(self.model))
        self.assertEqual(j["data"][0]["object"], "model")
        self.assertEqual(self.get("/models").json()["data"][0]["id"], j["data"][0]["id"])

    def test_props(self):
        j = self.get("/props").json()
        self.assertEqual(j["default_generation_settings"]["n_ctx"], self.n_ctx)
        self.assertEqual(j["total_slots"], 1)
        self.assertEqual(j["model_path"], self.model)
        # this GGUF has no tokenizer.chat_template: the built-in gemma format is used
        self.assertIsInstance(j["chat_template"], str)
        self.assertEqual(j["bos_token"], "<bos>")
        params = j["default_generation_settings"]["params"]
        self.assertAlmostEqual(params["temperature"], 0.8, places=5)

    def test_chat_page(self):
        r = self.get("/")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.headers["content-type"].startswith("text/html"))
        page = r.body.decode()
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        # (the API by a relative URL, so the page works under --api-prefix too)
        for needle in ('id="send"', 'id="stop"', 'fetch("v1/chat/completions"', "tokens/s"):
            self.assertIn(needle, page)

    def test_unknown_routes_are_404(self):
        for method, path in [("GET", "/nope"), ("POST", "/v1/nope"), ("GET", "/v1/chat/completions"),
                             ("POST", "/slots/7?action=erase"), ("DELETE", "/slots/x")]:
            with self.subTest(method=method, path=path):
                assert_error_shape(self, request(self.port, method, path, body=b"{}"), 404)

    # -- generation, whole answers --

    def test_chat_completion(self):
        r = self.post("/v1/chat/completions", chat_body("Say hi.", max_tokens=6))
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "chat.completion")
        self.assertTrue(j["id"].startswith("chatcmpl-"))
        self.assertEqual(j["model"], os.path.basename(self.model))
        choice = j["choices"][0]
        self.assertEqual(choice["message"]["role"], "assistant")
        self.assertIsInstance(choice["message"]["content"], str)
        self.assertIn(choice["finish_reason"], ("stop", "length"))
        u = j["usage"]
        self.assertTrue(1 <= u["completion_tokens"] <= 6, u)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertIn("cached_tokens", u["prompt_tokens_details"])
        assert_timings(self, j["timings"])
        self.assertEqual(j["timings"]["predicted_n"], u["completion_tokens"])
        self.assertEqual(j["timings"]["prompt_n"] + j["timings"]["cache_n"], u["prompt_tokens"])
        if choice["finish_reason"] == "length":
            self.assertEqual(u["completion_tokens"], 6)

    def test_completions(self):
        r = self.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 5})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "text_completion")
        self.assertIsInstance(j["choices"][0]["text"], str)
        self.assertIn(j["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertLessEqual(j["usage"]["completion_tokens"], 5)
        assert_timings(self, j["timings"])

    def test_native_completion_text_prompt(self):
        r = self.post("/completion", {"prompt": "Once upon a time", "n_predict": 5, "stream": False})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertIsInstance(j["content"], str)
        self.assertTrue(j["stop"])
        self.assertTrue(1 <= j["tokens_predicted"] <= 5, j)
        self.assertIn(j["stop_type"], ("eos", "limit", "word"))
        self.assertEqual(j["prompt"], "Once upon a time")
        self.assertGreater(j["tokens_per_second"], 0)
        assert_timings(self, j["timings"])
        self.assertEqual(j["generation_settings"]["n_predict"], 5)

    def test_native_completion_token_ids(self):
        ids = self.post("/tokenize", {"content": "The sky is", "add_special": True}).json()["tokens"]
        self.assertTrue(all(isinstance(t, int) for t in ids))
        r = self.post("/completion", {"prompt": ids, "n_predict": 4, "return_tokens": True})
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["tokens_evaluated"], len(ids))  # taken as given: no BOS added
        self.assertEqual(len(j["tokens"]), j["tokens_predicted"])
        detok = self.post("/detokenize", {"tokens": j["tokens"]}).json()["content"]
        self.assertEqual(detok, j["content"])
        # streamed, with the ids as the prompt
        s = RawStream(self.port, "POST", "/completion", {"prompt": ids, "n_predict": 4, "stream": True}).read_all()
        self.assertEqual(s.status, 200)
        last = json.loads(sse_events(s.body)[-1])
        self.assertTrue(last["stop"])
        self.assertEqual(last["tokens_evaluated"], len(ids))
        # an id outside the vocabulary
        n_vocab = self.get("/v1/models").json()["data"][0]["meta"]["n_vocab"]
        assert_error_shape(self, self.post("/completion", {"prompt": [2, n_vocab], "n_predict": 1}), 400)

    def test_tokenize_detokenize(self):
        text = "Hello world, héllo 世界"
        plain = self.post("/tokenize", {"content": text}).json()["tokens"]
        with_bos = self.post("/tokenize", {"content": text, "add_special": True}).json()["tokens"]
        self.assertEqual(with_bos[1:], plain)
        self.assertEqual(len(with_bos), len(plain) + 1)
        pieces = self.post("/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
        self.assertEqual([p["id"] for p in pieces], plain)
        joined = b""
        for p in pieces:
            joined += p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
        self.assertEqual(joined.decode(), text)
        self.assertEqual(self.post("/detokenize", {"tokens": plain}).json()["content"], text)
        assert_error_shape(self, self.post("/detokenize", {"tokens": [-1]}), 400)
        assert_error_shape(self, self.post("/tokenize", {"content": 5}), 400)

    def test_apply_template(self):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
        r = self.post("/apply-template", {"messages": msgs})
        self.assertEqual(r.status, 200, r)
        prompt = r.json()["prompt"]
        self.assertIn("<start_of_turn>user\n", prompt)
        self.assertIn("Hi there", prompt)
        self.assertIn("Be brief.", prompt)
        self.assertTrue(prompt.endswith("<start_of_turn>model\n"), prompt)
        assert_error_shape(self, self.post("/apply-template", {"messages": [{"role": "x", "content": "y"}]}), 400)

    # -- SSE framing, byte for byte --

    def test_chat_stream_framing_with_usage(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Count: one, two,", max_tokens=8, stream=True,
                                stream_options={"include_usage": True})).read_all()
        self.assertEqual(s.status, 200)
        self.assertEqual(s.headers["content-type"], "text/event-stream")
        self.assertEqual(s.headers["transfer-encoding"], "chunked")
        events = sse_events(s.body)
        self.assertTrue(s.body.endswith(b"\n\ndata: [DONE]\n\n"))
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        ids = {o["id"] for o in objs}
        self.assertEqual(len(ids), 1, "every chunk carries the same id")
        for o in objs:
            self.assertEqual(o["object"], "chat.completion.chunk")
        role, *texts, final, usage = objs
        self.assertEqual(role["choices"][0]["delta"]["role"], "assistant")
        self.assertIsNone(role["choices"][0]["finish_reason"])
        self.assertTrue(texts, "no content chunk")
        for t in texts:
            self.assertIsNone(t["choices"][0]["finish_reason"])
            self.assertIsInstance(t["choices"][0]["delta"]["content"], str)
        self.assertIn(final["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertEqual(final["choices"][0]["delta"], {})
        assert_timings(self, final["timings"])
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], final["timings"]["predicted_n"])
        self.assertLessEqual(usage["usage"]["completion_tokens"], 8)
        self.assertEqual(usage["usage"]["total_tokens"],
                         usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"])
        # each event is one HTTP chunk, sent as it was made
        self.assertEqual(len(s.chunks), len(events))

    def test_chat_stream_framing_without_usage(self):
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Hello", max_tokens=4, stream=True)).read_all()
        events = sse_events(s.body)
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        self.assertEqual(objs[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertIn(objs[-1]["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertTrue(all(o["choices"] for o in objs), "a usage chunk was not asked for")
        self.assertFalse(any("usage" in o for o in objs))

    def test_completions_stream_framing(self):
        s = RawStream(self.port, "POST", "/v1/completions",
                      {"prompt": "1, 2, 3,", "max_tokens": 6, "stream": True,
                       "stream_options": {"include_usage": True}}).read_all()
        events = sse_events(s.body)
        self.assertEqual(events[-1], "[DONE]")
        objs = [json.loads(e) for e in events[:-1]]
        *texts, final, usage = objs
        for t in texts:
            self.assertEqual(t["object"], "text_completion")
            self.assertIsNone(t["choices"][0]["finish_reason"])
        self.assertIn(final["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertEqual(usage["choices"], [])
        self.assertTrue("".join(t["choices"][0]["text"] for t in texts))

    def test_native_stream_framing(self):
        s = RawStream(self.port, "POST", "/completion",
                      {"prompt": "The alphabet: a b c", "n_predict": 6, "stream": True}).read_all()
        self.assertEqual(s.status, 200)
        self.assertEqual(s.headers["content-type"], "text/event-stream")
        events = sse_events(s.body)
        self.assertNotIn("[DONE]", events, "llama.cpp's /completion stream has no [DONE]")
        objs = [json.loads(e) for e in events]
        *pieces, last = objs
        self.assertTrue(pieces)
        for p in pieces:
            self.assertIs(p["stop"], False)
            self.assertIsInstance(p["content"], str)
        self.assertIs(last["stop"], True)
        self.assertEqual(last["content"], "")
        self.assertTrue(1 <= len(pieces) <= last["tokens_predicted"] <= 6)
        assert_timings(self, last["timings"])

    # -- errors --

    def test_errors_400(self):
        cases = {
            "malformed JSON": b'{"messages": [',
            "not an object": b"[1, 2]",
            "messages missing": {"max_tokens": 1},
            "messages of the wrong type": {"messages": "hi"},
            "max_tokens of the wrong type": chat_body("hi", max_tokens="5"),
            "stream of the wrong type": chat_body("hi", stream="yes"),
            "unknown role": {"messages": [{"role": "wizard", "content": "hi"}]},
            "temperature above 2": chat_body("hi", temperature=3),
            "temperature below 0": chat_body("hi", temperature=-0.5),
            "top_p above 1": chat_body("hi", top_p=1.5),
            "n above 16": chat_body("hi", n=17),
            "content of the wrong type": {"messages": [{"role": "user", "content": 7}]},
        }
        for what, body in cases.items():
            with self.subTest(what):
                err = assert_error_shape(self, self.post("/v1/chat/completions", body), 400)
                self.assertEqual(err["type"], "invalid_request_error")
        err = assert_error_shape(self, self.post("/v1/chat/completions",
                                                 {"messages": [{"role": "wizard", "content": "hi"}]}), 400)
        self.assertIn("wizard", err["message"])
        err = assert_error_shape(self, self.post("/v1/chat/completions", chat_body("hi", temperature=3)), 400)
        self.assertIn("temperature", err["message"])
        assert_error_shape(self, self.post("/completion", {"prompt": 5}), 400)
        assert_error_shape(self, self.post("/v1/completions", {"prompt": "x", "top_p": -1}), 400)

    def test_body_too_large_is_413(self):
        # The declared length alone is refused: the server answers without reading 9 MiB.
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 9437184\r\n\r\n{\"messages\":")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 413 "), head)
            n = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
            while len(rest) < n:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
            err = json.loads(rest[:n])["error"]
            self.assertEqual(err["code"], 413)
        finally:
            s.close()
        # a real oversized chunked body too
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            big = b'{"prompt": "' + b"a" * ((8 << 20) + (64 << 10)) + b'"}'
            step = 1 << 20
            conn.request("POST", "/completion", body=iter([big[i:i + step] for i in range(0, len(big), step)]),
                         headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
                         encode_chunked=True)
            r = conn.getresponse()
            self.assertEqual(r.status, 413)
            self.assertEqual(json.loads(r.read())["error"]["code"], 413)
        except (BrokenPipeError, ConnectionResetError):
            self.fail("the server reset the connection instead of answering 413")
        finally:
            conn.close()

    def test_prompt_longer_than_context_is_400_with_both_counts(self):
        prompt = "hello world " * 1200  # ~2400 tokens, a 2048-token slot
        n = len(self.post("/tokenize", {"content": prompt, "add_special": True}).json()["tokens"])
        self.assertGreater(n, self.n_ctx)
        err = assert_error_shape(self, self.post("/completion", {"prompt": prompt, "n_predict": 4}), 400)
        self.assertIn(str(n), err["message"])
        self.assertIn(str(self.n_ctx), err["message"])
        err = assert_error_shape(self, self.post("/v1/chat/completions", chat_body(prompt, max_tokens=4)), 400)
        self.assertIn(str(self.n_ctx), err["message"])
        self.assertRegex(err["message"], r"\b2[0-9]{3}\b")

    # -- metrics --

    def test_metrics(self):
        before = metrics_values(self.port)
        r = self.get("/metrics")
        self.assertTrue(r.headers["content-type"].startswith("text/plain"))
        text = r.body.decode()
        for name in ("edgellm_requests_total", "edgellm_requests_cancelled_total",
                     "edgellm_prompt_tokens_cached_total", "edgellm_generated_tokens_total",
                     "edgellm_queue_depth", "edgellm_resident_memory_bytes", "edgellm_kv_cache_bytes",
                     "edgellm_prefill_tokens_per_second", "edgellm_decode_tokens_per_second",
                     "llamacpp:prompt_tokens_total"):
            self.assertIn(f"\n# TYPE {name} ", "\n" + text)
        self.assertIn('edgellm_time_to_first_token_seconds_bucket{le="+Inf"}', text)
        self.post("/completion", {"prompt": "Metrics", "n_predict": 3})
        after = metrics_values(self.port)
        self.assertEqual(after["edgellm_requests_total"], before["edgellm_requests_total"] + 1)
        self.assertGreater(after["edgellm_generated_tokens_total"], before["edgellm_generated_tokens_total"])
        self.assertEqual(after["edgellm_time_to_first_token_seconds_count"],
                         before["edgellm_time_to_first_token_seconds_count"] + 1)
        self.assertGreater(after["edgellm_resident_memory_bytes"], 100e6)
        self.post("/v1/chat/completions", b"{")
        self.assertEqual(metrics_values(self.port)["edgellm_requests_failed_total"],
                         after["edgellm_requests_failed_total"] + 1)

    # -- slots --

    def test_slots_get(self):
        slots = self.get("/slots").json()
        self.assertEqual(len(slots), 1)
        self.assertEqual(slots[0]["id"], 0)
        self.assertEqual(slots[0]["n_ctx"], self.n_ctx)
        self.assertIs(slots[0]["is_processing"], False)

    def test_slot_save_restore_erase(self):
        prompt = "Slot save test: the quick brown fox jumps over the lazy dog."
        self.post("/completion", {"prompt": prompt, "n_predict": 2})
        n_cached = self.get("/slots").json()[0]["n_cached"]
        self.assertGreater(n_cached, 10)
        r = self.post("/slots/0?action=save", {"filename": "s1.bin"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_saved"], n_cached)
        self.assertTrue(os.path.isfile(os.path.join(self.slot_dir, "s1.bin")))
        r = self.post("/slots/0?action=erase", None)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_erased"], n_cached)
        self.assertEqual(self.get("/slots").json()[0]["n_cached"], 0)
        r = self.post("/slots/0?action=restore", {"filename": "s1.bin"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_restored"], n_cached)
        self.assertEqual(self.get("/slots").json()[0]["n_cached"], n_cached)
        # the restored KV is used: the same prompt again only evaluates its last token
        j = self.post("/completion", {"prompt": prompt, "n_predict": 1}).json()
        self.assertEqual(j["timings"]["cache_n"], j["tokens_evaluated"] - 1)
        # restoring a file that is not there
        assert_error_shape(self, self.post("/slots/0?action=restore", {"filename": "missing.bin"}), 400)
        # path traversal: refused, nothing written outside the directory
        outside = os.path.join(os.path.dirname(self.slot_dir), "edgellm-escape-" + uuid.uuid4().hex)
        for name in ["../" + os.path.basename(outside), outside, "a/b.bin", "..", ".", "", "a\\b"]:
            with self.subTest(filename=name):
                assert_error_shape(self, self.post("/slots/0?action=save", {"filename": name}), 400)
                assert_error_shape(self, self.post("/slots/0?action=restore", {"filename": name}), 400)
        self.assertFalse(os.path.exists(outside))
        self.assertEqual(sorted(os.listdir(self.slot_dir)), ["s1.bin"])
        assert_error_shape(self, self.post("/slots/0?action=fly", {"filename": "x"}), 400)
        assert_error_shape(self, self.post("/slots/0", {"filename": "x"}), 400)
        assert_error_shape(self, self.post("/slots/3?action=save", {"filename": "x"}), 404)

    def test_delete_slot(self):
        self.post("/completion", {"prompt": "Something to cache", "n_predict": 2})
        n = self.get("/slots").json()[0]["n_cached"]
        self.assertGreater(n, 0)
        r = request(self.port, "DELETE", "/slots/0")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_erased"], n)
        self.assertEqual(self.get("/slots").json()[0]["n_cached"], 0)
        j = self.post("/completion", {"prompt": "Something to cache", "n_predict": 1}).json()
        self.assertEqual(j["timings"]["cache_n"], 0)

    # -- prefix reuse --

    def test_second_turn_reuses_the_first(self):
        self.assertEqual(request(self.port, "DELETE", "/slots/0").status, 200)
        turn1 = [{"role": "system", "content": "You answer in a few words."},
                 {"role": "user", "content": "Name three colors."}]
        r1 = self.post("/v1/chat/completions", {"messages": turn1, "max_tokens": 8}).json()
        self.assertEqual(r1["timings"]["cache_n"], 0)
        reply = r1["choices"][0]["message"]["content"]
        turn2 = turn1 + [{"role": "assistant", "content": reply},
                         {"role": "user", "content": "And three animals?"}]
        # the shared prefix, in tokens, of the two prompts the server renders
        p1 = self.post("/apply-template", {"messages": turn1}).json()["prompt"]
        p2 = self.post("/apply-template", {"messages": turn2}).json()["prompt"]
        self.assertTrue(p2.startswith(p1))
        t1 = self.post("/tokenize", {"content": p1}).json()["tokens"]
        t2 = self.post("/tokenize", {"content": p2}).json()["tokens"]
        shared = 0
        while shared < min(len(t1), len(t2)) and t1[shared] == t2[shared]:
            shared += 1
        self.assertGreaterEqual(shared, r1["usage"]["prompt_tokens"] - 1)
        r2 = self.post("/v1/chat/completions", {"messages": turn2, "max_tokens": 4}).json()
        cache_n = r2["timings"]["cache_n"]
        self.assertGreaterEqual(cache_n, shared, r2)
        self.assertEqual(r2["usage"]["prompt_tokens_details"]["cached_tokens"], cache_n)
        self.assertEqual(r2["timings"]["prompt_n"], r2["usage"]["prompt_tokens"] - cache_n)
        self.assertLess(r2["timings"]["prompt_n"], r2["usage"]["prompt_tokens"] - r1["usage"]["prompt_tokens"] + 8)
        self.srv.wait_log(rf"POST /v1/chat/completions 200 .*\(cached {cache_n}\)", timeout=10)

    # -- cancellation --
    #
    # How the stop is timed: a keep-alive connection to GET /slots is opened before the
    # disconnect, and polled back to back from the moment the socket is closed. A slot's
    # is_processing turns false only when its generation has returned and the slot has
    # been released, so the first false seen bounds the server-side stop from above; the
    # error is one poll (a few ms on loopback). The per-request log line must also say the
    # request was cancelled; mid-stream, a second bound comes from it: the tokens decoded
    # after the last one the client had received, at the decode speed the line reports,
    # took less than the bound too (tokens in flight at the close count as decoded after
    # it, so this also errs on the long side).

    def measure_stop(self, ka, closed_at, timeout=10):
        while True:
            if not slot_busy(ka):
                took = time.monotonic() - closed_at
                print(f"[stopped {took * 1000:.0f} ms after the disconnect] ", end="", flush=True)
                return took
            if time.monotonic() - closed_at > timeout:
                self.fail(f"slot 0 still generating {timeout} s after the client went away")

    def test_cancel_mid_stream_stops_within_200ms(self):
        # At most two tries, the second only when the first overran: on the 2-core VMs here
        # a full test run has twice shown one stop of 245-273 ms that never came back alone
        # (19-46 ms); a server that does not stop in time fails both.
        before = metrics_values(self.port)
        tries = 0
        ka = KeepAlive(self.port)
        try:
            while True:
                tries += 1
                self.assertFalse(slot_busy(ka))
                log_at = self.srv.log_count()
                s = RawStream(self.port, "POST", "/v1/chat/completions",
                              chat_body("Tell me a very long story.", max_tokens=2000,
                                        ignore_eos=True, stream=True))
                s.read_until_events(4)  # the role chunk and three tokens
                self.assertTrue(slot_busy(ka))
                s.abort()
                stopped_after = self.measure_stop(ka, s.closed_at)
                if stopped_after < CANCEL_BOUND_S or tries == 2:
                    break
        finally:
            ka.close()
        self.assertLess(stopped_after, CANCEL_BOUND_S,
                        f"generation went on for {stopped_after * 1000:.0f} ms after the disconnect")
        received = s.body.count(b"\n\n") - 1  # content events, after the role chunk
        m = self.srv.wait_log(r"POST /v1/chat/completions .*generated (\d+), ([\d.]+) t/s.*cancelled",
                              start=log_at)
        generated, tokens_per_s = int(m.group(1)), float(m.group(2))
        self.assertGreaterEqual(generated, received)
        self.assertLess((generated - received) / tokens_per_s, CANCEL_BOUND_S,
                        f"{generated - received} tokens decoded after the client's last one, at "
                        f"{tokens_per_s} t/s")
        after = metrics_values(self.port)
        self.assertEqual(after["edgellm_requests_cancelled_total"],
                         before["edgellm_requests_cancelled_total"] + tries)
        # the KV keeps the prompt and the reply so far, for the next turn
        self.assertGreaterEqual(self.get("/slots").json()[0]["n_cached"], generated)

    def test_cancel_non_streaming_during_prefill(self):
        before = metrics_values(self.port)
        # ~1500 new tokens (a fresh nonce first, so nothing is cached): seconds of prefill
        prompt = uuid.uuid4().hex + " " + "The quick brown fox jumps over the lazy dog. " * 150
        ka = KeepAlive(self.port)
        try:
            log_at = self.srv.log_count()
            s = RawStream(self.port, "POST", "/completion", {"prompt": prompt, "n_predict": 50})
            deadline = time.monotonic() + 10
            while not slot_busy(ka):
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.005)
            time.sleep(0.3)  # well into the prompt
            slot = json.loads(ka.get_json("/slots")[1])[0]
            self.assertTrue(slot["is_processing"])
            self.assertEqual(slot["next_token"][0]["n_decoded"], 0, "prefill already finished")
            s.abort()
            stopped_after = self.measure_stop(ka, s.closed_at)
        finally:
            ka.close()
        self.assertLess(stopped_after, CANCEL_BOUND_S,
                        f"prefill went on for {stopped_after * 1000:.0f} ms after the disconnect")
        self.srv.wait_log(r"POST /completion .*generated 0,.*cancelled", start=log_at)
        self.assertEqual(metrics_values(self.port)["edgellm_requests_cancelled_total"],
                         before["edgellm_requests_cancelled_total"] + 1)

    def test_cancel_while_queued(self):
        before = metrics_values(self.port)
        a = RawStream(self.port, "POST", "/completion",
                      {"prompt": "Count to a thousand:", "n_predict": 2000, "ignore_eos": True, "stream": True})
        try:
            a.read_until_events(2)
            log_at = self.srv.log_count()
            b = RawStream(self.port, "POST", "/completion", {"prompt": "Queued", "n_predict": 4})
            deadline = time.monotonic() + 10
            while metrics_values(self.port)["edgellm_queue_depth"] != 1:
                self.assertLess(time.monotonic(), deadline, "request B never queued")
                time.sleep(0.01)
            b.abort()
            while metrics_values(self.port)["edgellm_queue_depth"] != 0:
                self.assertLess(time.monotonic() - b.closed_at, CANCEL_BOUND_S,
                                "the queued request stayed in the queue after its client left")
                time.sleep(0.005)
            self.srv.wait_log(r"POST /completion .*cancelled while waiting for a slot", start=log_at)
            self.assertTrue(json.loads(request(self.port, "GET", "/slots").body)[0]["is_processing"],
                            "the running request A is untouched")
        finally:
            a.abort()
        self.wait_idle()
        self.assertEqual(metrics_values(self.port)["edgellm_requests_cancelled_total"],
                         before["edgellm_requests_cancelled_total"] + 2)

    # -- one slot: in order; a bounded queue --

    def test_one_slot_two_requests_complete_in_order(self):
        results = {}

        def run(name, body):
            s = RawStream(self.port, "POST", "/v1/chat/completions", body)
            s.read_all()
            results[name] = s

        body = chat_body("List some fruits.", max_tokens=12, ignore_eos=True, stream=True)
        ta = threading.Thread(target=run, args=("a", body))
        ta.start()
        ka = KeepAlive(self.port)
        try:
            deadline = time.monotonic() + 30
            while not slot_busy(ka):
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.002)
        finally:
            ka.close()
        tb = threading.Thread(target=run, args=("b", body))
        tb.start()
        ta.join(120)
        tb.join(120)
        for name in "ab":
            events = sse_events(results[name].body)
            self.assertEqual(events[-1], "[DONE]")
            final = json.loads(events[-2])
            self.assertEqual(final["choices"][0]["finish_reason"], "length")
            self.assertEqual(final["timings"]["predicted_n"], 12)

        def token_times(s):
            return [t for t, data in s.chunks
                    if b'"content":"' in data or b'"content": "' in data]

        # a content chunk per token (but for tokens that end no UTF-8 character)
        a_tokens, b_tokens = token_times(results["a"]), token_times(results["b"])
        self.assertTrue(a_tokens and b_tokens)
        self.assertGreater(b_tokens[0], a_tokens[-1],
                           "with -np 1 the second request generated before the first ended")

    def test_queue_is_bounded(self):
        # The default bound (--max-queue 16): one request on the slot, 16 waiting, and every
        # further one is refused at once with 503.
        max_queue, extra = 16, 4
        a = RawStream(self.port, "POST", "/completion",
                      {"prompt": "Count to a thousand:", "n_predict": 2000, "ignore_eos": True, "stream": True})
        waiting = []
        try:
            a.read_until_events(2)
            for i in range(max_queue + extra):
                waiting.append(RawStream(self.port, "POST", "/completion",
                                         {"prompt": f"queued {i}", "n_predict": 1}))
            # the refused ones answer at once; the queued ones say nothing while A runs
            refused = []
            deadline = time.monotonic() + 30
            while len(refused) < extra and time.monotonic() < deadline:
                ready, _, _ = select.select([w.sock for w in waiting if w not in refused], [], [], 0.5)
                for w in waiting:
                    if w.sock in ready:
                        w.read_all()
                        refused.append(w)
            time.sleep(0.3)
            ready, _, _ = select.select([w.sock for w in waiting if w not in refused], [], [], 0)
            self.assertEqual(ready, [], "a queued request was answered while the slot was busy")
            self.assertEqual(len(refused), extra)
            for w in refused:
                self.assertEqual(w.status, 503)
                err = json.loads(w.body)["error"]
                self.assertEqual(err["code"], 503)
                self.assertIn("busy", err["message"])
            self.assertEqual(metrics_values(self.port)["edgellm_queue_depth"], max_queue)
            a.abort()
            # the 16 queued ones are then served, one after the other
            for w in waiting:
                if w not in refused:
                    w.read_all()
                    self.assertEqual(w.status, 200, w.body)
            self.assertEqual(metrics_values(self.port)["edgellm_queue_depth"], 0)
        finally:
            a.close()
            for w in waiting:
                w.close()

    # -- the official openai client --

    def openai_client(self):
        try:
            import openai
        except ImportError:
            self.skipTest(f"the openai package is not installed for {sys.executable} "
                          "(scripts/setup.sh installs it into build/venv; CTest runs this file "
                          "with build/venv/bin/python3)")
        return openai, openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="anything",
                                     timeout=120, max_retries=0)

    def test_openai_chat(self):
        openai, client = self.openai_client()
        r = client.chat.completions.create(model="local", max_tokens=6,
                                           messages=[{"role": "user", "content": "Say hello."}])
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertLessEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.model, "local")
        with self.assertRaises(openai.BadRequestError) as cm:
            client.chat.completions.create(model="local", messages=[{"role": "user", "content": "x"}],
                                           temperature=5)
        self.assertEqual(cm.exception.status_code, 400)

    def test_openai_streaming_chat(self):
        _, client = self.openai_client()
        stream = client.chat.completions.create(
            model="local", max_tokens=8, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Count from one."}])
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertTrue(text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finishes), 1)
        self.assertEqual(chunks[-1].choices, [])
        # a chunk per token, but for tokens that end no character (part of a UTF-8 sequence)
        n_content = len([c for c in chunks if c.choices and c.choices[0].delta.content])
        self.assertTrue(1 <= n_content <= chunks[-1].usage.completion_tokens <= 8)

    def test_openai_completions(self):
        _, client = self.openai_client()
        r = client.completions.create(model="local", prompt="The capital of France is", max_tokens=5)
        self.assertIsInstance(r.choices[0].text, str)
        self.assertLessEqual(r.usage.completion_tokens, 5)
        text = "".join(c.choices[0].text for c in client.completions.create(
            model="local", prompt="One, two,", max_tokens=4, stream=True) if c.choices)
        self.assertTrue(text)
