"""Two slots (interleaving, an alias, what is off without its flag) and resumable
streams (X-Conversation-Id)."""

import json
import re
import threading
import time
import unittest

from harness import (
    GEMMA, KeepAlive, RawStream, assert_error_shape, chat_body, need_model, request, sse_events,
    start_server)


# ---- two slots ---------------------------------------------------------------------------


class TwoSlotServer(unittest.TestCase):
    """-np 2, an alias, no --metrics, no --slot-save-path, no chat page."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", cls.model, "--port", "0", "-np", "2", "-c", "2048",
                                     "-a", "tiny-gemma", "--no-webui"])
        cls.port = cls.srv.port

    def test_two_requests_interleave(self):
        results = {}

        def run(name):
            s = RawStream(self.port, "POST", "/completion",
                          {"prompt": f"Story {name}:", "n_predict": 40, "ignore_eos": True, "stream": True})
            s.read_all()
            results[name] = s

        threads = [threading.Thread(target=run, args=(n,)) for n in "ab"]
        for t in threads:
            t.start()
        both_busy = False
        ka = KeepAlive(self.port)
        try:
            deadline = time.monotonic() + 60
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                slots = json.loads(ka.get_json("/slots")[1])
                if all(s["is_processing"] for s in slots):
                    both_busy = True
                time.sleep(0.01)
        finally:
            ka.close()
        for t in threads:
            t.join(60)
        self.assertTrue(both_busy, "the two slots never generated at the same time")
        a = [t for t, d in results["a"].chunks if b'"stop":false' in d]
        b = [t for t, d in results["b"].chunks if b'"stop":false' in d]
        self.assertTrue(len(a) > 20 and len(b) > 20, (len(a), len(b)))
        for r in results.values():
            self.assertEqual(json.loads(sse_events(r.body)[-1])["tokens_predicted"], 40)
        # interleaved: each started before the other ended, and most of B's tokens arrived
        # while A was still generating (one after the other, none would)
        self.assertLess(a[0], b[-1])
        self.assertLess(b[0], a[-1])
        self.assertGreaterEqual(sum(a[0] <= t <= a[-1] for t in b), len(b) // 2)
        slots_used = {json.loads(sse_events(r.body)[-1])["id_slot"] for r in results.values()}
        self.assertEqual(slots_used, {0, 1})

    def test_slots_and_alias(self):
        slots = request(self.port, "GET", "/slots").json()
        self.assertEqual([s["id"] for s in slots], [0, 1])
        self.assertEqual({s["n_ctx"] for s in slots}, {1024})  # -c is shared by the slots
        self.assertEqual(request(self.port, "GET", "/v1/models").json()["data"][0]["id"], "tiny-gemma")
        j = request(self.port, "POST", "/v1/chat/completions", chat_body("hi", max_tokens=1)).json()
        self.assertEqual(j["model"], "tiny-gemma")

    def test_metrics_off_is_501(self):
        err = assert_error_shape(self, request(self.port, "GET", "/metrics"), 501)
        self.assertIn("--metrics", err["message"])

    def test_slot_save_needs_a_path(self):
        assert_error_shape(self, request(self.port, "POST", "/slots/0?action=save", {"filename": "a"}), 501)

    def test_no_webui(self):
        assert_error_shape(self, request(self.port, "GET", "/"), 404)


class ResumableStreams(unittest.TestCase):
    """X-Conversation-Id: a streamed reply goes on when its client leaves (a page reload) and
    GET /v1/stream replays it; DELETE /v1/stream stops it (llama-server's resumable streams)."""

    @classmethod
    def setUpClass(cls):
        cls.srv = start_server(cls, ["-m", need_model(GEMMA), "--port", "0", "-c", "1024", "-t", "2"])
        cls.port = cls.srv.port

    def start(self, conv, n):
        return RawStream(self.port, "POST", "/v1/chat/completions",
                         chat_body("Count from 1 to 500, one number a line.", max_tokens=n, ignore_eos=True,
                                   temperature=0, stream=True), headers={"X-Conversation-Id": conv})

    def test_the_reply_outlives_its_client_and_replays(self):
        log_at = self.srv.log_count()
        s = self.start("conv-a", 96)
        s.read_until_events(3)
        s.abort()  # the page reloads
        self.srv.wait_log(r"POST /v1/chat/completions 200 .*generated 96,", start=log_at, timeout=120)
        r = request(self.port, "GET", "/v1/stream?conv_id=conv-a&from=0")
        self.assertEqual(r.status, 200, r)
        events = sse_events(r.body)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(json.loads(events[-2])["choices"][0]["finish_reason"], "length")
        # from an offset: the same bytes' tail
        r2 = request(self.port, "GET", "/v1/stream?conv_id=conv-a&from=100")
        self.assertEqual(r2.body, r.body[100:])
        r = request(self.port, "POST", "/v1/streams/lookup", {"conversation_ids": ["conv-a", "other"]})
        self.assertEqual([(e["conversation_id"], e["is_done"]) for e in r.json()], [("conv-a", True)])
        self.assertEqual(request(self.port, "DELETE", "/v1/stream?conv_id=conv-a").status, 204)
        self.assertEqual(request(self.port, "GET", "/v1/stream?conv_id=conv-a").status, 404)

    def test_delete_stops_a_running_reply(self):
        log_at = self.srv.log_count()
        s = self.start("conv-b", 2000)
        s.read_until_events(3)
        s.abort()
        time.sleep(0.3)
        r = request(self.port, "POST", "/v1/streams/lookup", {"conversation_ids": ["conv-b"]})
        self.assertFalse(r.json()[0]["is_done"])  # still generating, with nobody reading
        self.assertEqual(request(self.port, "DELETE", "/v1/stream?conv_id=conv-b").status, 204)
        m = self.srv.wait_log(r"POST /v1/chat/completions .*generated (\d+),.*cancelled", start=log_at, timeout=60)
        self.assertLess(int(m.group(1)), 2000)

    def test_start_up_says_where_its_time_went(self):
        m = re.search(r"start-up: model (\d+) ms, .*tokenizer (\d+) ms, .*context (\d+) ms, .*warm-up step (\d+) ms",
                      self.srv.log_text())
        self.assertIsNotNone(m, self.srv.log_text())
        ready = re.search(r"ready in (\d+) ms", self.srv.log_text())
        self.assertLessEqual(sum(int(x) for x in m.groups()), int(ready.group(1)) + 5)  # parts of the whole
        # the tokenizer is read while the model loads: what it took is said apart (it is
        # not a part of the sum above)
        beside = re.search(r"\(the tokenizer, read beside the model\) (\d+) ms", self.srv.log_text())
        self.assertIsNotNone(beside, self.srv.log_text())

    def test_without_the_header_the_reply_stops_with_its_client(self):
        log_at = self.srv.log_count()
        s = RawStream(self.port, "POST", "/v1/chat/completions",
                      chat_body("Count to 500.", max_tokens=2000, ignore_eos=True, stream=True))
        s.read_until_events(3)
        s.abort()
        self.srv.wait_log(r"POST /v1/chat/completions .*cancelled", start=log_at, timeout=60)
        self.assertEqual(request(self.port, "GET", "/v1/stream?conv_id=none").status, 404)
        self.assertEqual(request(self.port, "GET", "/v1/stream").status, 400)
