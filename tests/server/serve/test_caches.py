"""The caches: --prompt-cache across restarts, --repack-cache, the repack after start-up,
--cache-ram and the KV cache's types."""

import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import (
    GEMMA, QWEN_SMALL, Server, assert_error_shape, memory_cgroup, need_model, request, run_cli)


def system_prompt(topic, n=12):
    """A long system prompt (a few hundred tokens) that differs by topic from its start."""
    rules = " ".join(f"Rule {i} about {topic}: answer in one short sentence, stay polite, and "
                     f"never invent facts about {topic}." for i in range(n))
    return f"You are an assistant for {topic}. {rules}"


class PromptCacheAcrossRestarts(unittest.TestCase):
    """--prompt-cache DIR: a conversation's KV survives a restart; damaged, truncated and
    foreign files are skipped with a warning naming them; slot restore really restores."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="edgellm-pcache-")
        self.addCleanup(lambda: shutil.rmtree(self.dir, ignore_errors=True))

    def start(self, *flags, n_ctx=1024):
        srv = Server(["-m", self.model, "--port", "0", "-c", n_ctx, "--prompt-cache", self.dir,
                      *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv

    def chat(self, srv, user, topic="the car"):
        body = {"messages": [{"role": "system", "content": system_prompt(topic)},
                             {"role": "user", "content": user}],
                "max_tokens": 6, "temperature": 0}
        r = request(srv.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        j = r.json()
        return j["choices"][0]["message"]["content"], j["usage"]["prompt_tokens"], j["timings"]["cache_n"]

    def files(self):
        return sorted(f for f in os.listdir(self.dir) if f.endswith(".kvc"))

    def test_a_restart_finds_the_conversation_in_the_cache(self):
        srv = self.start()
        first, n_prompt, cached = self.chat(srv, "Turn on the air conditioning.")
        self.assertEqual(cached, 0)
        self.assertGreater(n_prompt, 250)
        srv.stop()  # SIGTERM: the writes finish before it exits
        self.assertEqual(len(self.files()), 1, os.listdir(self.dir))

        srv = self.start()
        m = srv.wait_log(r"prompt cache: slot 0 holds (\d+) tokens from (\S+\.kvc)")
        self.assertGreaterEqual(int(m.group(1)), n_prompt)
        self.assertEqual(m.group(2), self.files()[0])
        # Another question in the same conversation's frame: only the new tokens are evaluated.
        _, n2, cached2 = self.chat(srv, "Now open the window.")
        self.assertGreater(cached2, n_prompt - 20, "the system prompt came from the disk cache")
        # The first question again gives the same answer as before the restart.
        again, _, cached3 = self.chat(srv, "Turn on the air conditioning.")
        self.assertEqual(again, first)
        self.assertGreater(cached3, 250)
        self.assertNotIn("warning", srv.log_text())

    def test_damaged_truncated_and_foreign_files_are_skipped_with_a_warning(self):
        srv = self.start()
        reference, n_prompt, _ = self.chat(srv, "What is the tyre pressure?")
        self.chat(srv, "Play some music.", topic="music")
        srv.stop()
        names = self.files()
        self.assertEqual(len(names), 2)
        # One file cut short, the other with a flipped byte in its K/V.
        cut, flipped = [os.path.join(self.dir, n) for n in names]
        with open(cut, "r+b") as f:
            f.truncate(os.path.getsize(cut) // 2)
        with open(flipped, "r+b") as f:
            f.seek(os.path.getsize(flipped) - 200)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x55]))
        with open(os.path.join(self.dir, "stray.kvc"), "wb") as f:
            f.write(b"not a cache at all")
        srv = self.start()
        log = srv.log_text()
        self.assertRegex(log, r"warning: prompt cache: skipped .*" + re.escape(os.path.basename(cut)) +
                         r".*truncated")
        self.assertRegex(log, r"warning: prompt cache: skipped .*stray\.kvc")
        # The damaged file is the only candidate left: its digest fails when it is read.
        self.assertRegex(log, r"warning: prompt cache: .*" + re.escape(os.path.basename(flipped)) +
                         r".*digest")
        # Nothing wrong comes out: the same answer as before, from a fresh prefill.
        again, _, cached = self.chat(srv, "What is the tyre pressure?")
        self.assertEqual(again, reference)
        self.assertLess(cached, 20)
        self.assertEqual(srv.proc.poll(), None)
        # A file saved under another configuration (-c 512 here) is foreign.
        srv.stop()
        srv = self.start(n_ctx=512)
        # (the directory's scan may log after the server answers /health)
        srv.wait_log(r"skipped .*another configuration")
        self.assertNotIn("slot 0 holds", srv.log_text())

    def test_a_symbolic_link_in_the_directory_is_never_followed(self):
        srv = self.start()
        self.chat(srv, "Turn on the air conditioning.")
        srv.stop()
        [name] = self.files()
        outside = tempfile.mkdtemp(prefix="edgellm-pcache-outside-")
        self.addCleanup(lambda: shutil.rmtree(outside, ignore_errors=True))
        target = os.path.join(outside, name)
        os.replace(os.path.join(self.dir, name), target)
        os.symlink(target, os.path.join(self.dir, name))  # a good entry, reached through a link
        srv = self.start()
        self.assertRegex(srv.log_text(), r"warning: prompt cache: skipped .*" + re.escape(name) +
                         r": it is a symbolic link")
        self.assertNotIn("slot 0 holds", srv.log_text())
        _, _, cached = self.chat(srv, "Turn on the air conditioning.")
        self.assertLess(cached, 20, "the prefix came through the link")
        srv.stop()
        self.assertTrue(os.path.isfile(target))

    def test_a_symbolic_link_as_the_directory_is_refused_at_start_up(self):
        link = self.dir + "-link"
        os.symlink(self.dir, link)
        self.addCleanup(os.unlink, link)
        for given in (link, link + "/"):
            with self.subTest(prompt_cache=given):
                try:
                    r = run_cli(["-m", self.model, "--port", "0", "--prompt-cache", given], timeout=60)
                except subprocess.TimeoutExpired:
                    self.fail("the server ran with a symbolic link as --prompt-cache")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("--prompt-cache " + given + " is a symbolic link", r.stderr)

    def test_slot_restore_restores_and_refuses_a_foreign_file(self):
        slots = tempfile.mkdtemp(prefix="edgellm-slots-")
        self.addCleanup(lambda: shutil.rmtree(slots, ignore_errors=True))
        srv = self.start("--slot-save-path", slots, "--cache-ram", "0")
        _, n_prompt, _ = self.chat(srv, "Where is the nearest charger?")
        r = request(srv.port, "POST", "/slots/0?action=save", {"filename": "conv.kvc"})
        self.assertEqual(r.status, 200, r)
        n_saved = r.json()["n_saved"]
        srv.stop()
        srv = Server(["-m", self.model, "--port", "0", "-c", 1024, "--slot-save-path", slots])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        r = request(srv.port, "POST", "/slots/0?action=restore", {"filename": "conv.kvc"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["n_restored"], n_saved)
        _, _, cached = self.chat(srv, "Where is the nearest charger?")
        self.assertEqual(cached, n_prompt - 1, "every prompt token but the last came from the file")
        srv.stop()
        srv = Server(["-m", self.model, "--port", "0", "-c", 512, "--slot-save-path", slots])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        r = request(srv.port, "POST", "/slots/0?action=restore", {"filename": "conv.kvc"})
        assert_error_shape(self, r, 400)
        self.assertIn("another configuration", r.json()["error"]["message"])


class RepackCache(unittest.TestCase):
    """--repack-cache DIR: the first start writes the repacked weights there once serving
    (logged), the next maps them (logged) and answers the same; a damaged file is reported
    by name, not used, and written again; the server serves throughout."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="edgellm-repack-")
        self.addCleanup(lambda: shutil.rmtree(self.dir, ignore_errors=True))

    def start(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "256", "-t", "2",
                      "--repack-cache", self.dir])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        return srv

    def answer(self, srv):
        body = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0}
        r = request(srv.port, "POST", "/completion", body)
        self.assertEqual(r.status, 200, r)
        return r.json()["content"]

    def files(self):
        return [f for f in os.listdir(self.dir) if f.endswith(".x16")]

    def test_written_once_then_mapped_and_damage_reported(self):
        srv = self.start()
        srv.wait_log(r"no repack cache yet at")
        # (the weights are repacked after start-up: answers from then on are the repacked
        # weights', which the mapped ones must give)
        srv.wait_log(r"repacked \d+ MiB of weights for decode after start-up", timeout=120)
        first = self.answer(srv)
        m = srv.wait_log(r"repacked weights \(\d+ MiB\) kept in (\S+\.x16)", timeout=120)
        self.assertEqual([os.path.basename(m.group(1))], self.files())
        srv.stop()

        srv = self.start()
        srv.wait_log(r"repacked weights mapped from " + re.escape(m.group(1)))
        self.assertEqual(self.answer(srv), first, "the mapped weights answer as the repacked ones")
        srv.stop()

        # a byte of the data flipped (the data starts at the first page after the header:
        # 88 bytes, 40 per matrix, a digest; the count of matrices at byte 12)
        path = m.group(1)
        with open(path, "r+b") as f:
            f.seek(12)
            n_entries = int.from_bytes(f.read(4), "little")
            at = (88 + 40 * n_entries + 8 + 4095) // 4096 * 4096
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x5A]))
        srv = self.start()
        srv.wait_log(r"repack cache \S+ unusable \(damaged data")
        self.assertEqual(self.answer(srv), first)
        srv.wait_log(r"kept in " + re.escape(path), timeout=120)
        srv.stop()
        srv = self.start()
        srv.wait_log(r"repacked weights mapped from " + re.escape(path))
        self.assertFalse([f for f in os.listdir(self.dir) if ".tmp." in f], os.listdir(self.dir))


class RepackAfterStartup(unittest.TestCase):
    """A first start (no repack cache file) with --mlock: healthy without waiting for the
    repack for decode, serving from the file's layout meanwhile; the repacked copies then
    take the file's pages' place in RAM (locked, the file's unlocked: one copy), and the
    answers after are those of before."""

    def test_healthy_before_the_repack_then_one_locked_copy(self):
        model = need_model(QWEN_SMALL)
        srv = Server(["-m", model, "--port", "0", "-c", "512", "-t", "2", "--mlock",
                      "--no-repack-cache"])
        self.addCleanup(srv.stop)
        srv.wait_ready(wait_repacked=False)
        with open("/proc/%d/status" % srv.proc.pid) as f:
            locked_at_ok = int(re.search(r"VmLck:\s+(\d+) kB", f.read()).group(1))
        log = srv.log_text()
        self.assertIn("repacking for decode left for after start-up", log)
        self.assertNotIn("(of which repacking)", log, "the start-up waited for the repack")
        self.assertGreater(locked_at_ok, 300 * 1024, "the file's weights are not locked: " + log)
        # the first token comes from the prompt's logits, the same bits in both layouts
        body = {"prompt": "def fibonacci(n):", "n_predict": 1, "temperature": 0}
        r = request(srv.port, "POST", "/completion", body)
        self.assertEqual(r.status, 200, r)
        before = r.json()["content"]
        m = srv.wait_log(r"repacked (\d+) MiB of weights for decode after start-up in \d+ ms",
                         timeout=120)
        self.assertGreater(int(m.group(1)), 200)
        with open("/proc/%d/status" % srv.proc.pid) as f:
            locked_after = int(re.search(r"VmLck:\s+(\d+) kB", f.read()).group(1))
        self.assertGreater(locked_after, 0.85 * locked_at_ok, "the repacked copies are not locked")
        self.assertLess(locked_after, 1.15 * locked_at_ok,
                        "both the file's pages and the copies stay locked")
        r = request(srv.port, "POST", "/completion", body)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["content"], before)

    def test_a_memory_cgroup_for_one_locked_copy_is_enough(self):
        # seed 000 runs under MemoryMax=2G for about 1.5 GB of weights: the repack after
        # start-up must never hold the file's pages and the copies locked at once
        model = need_model(QWEN_SMALL)
        _, enter = memory_cgroup(self, "edgellm-repack", int(os.path.getsize(model) * 1.6))
        # the model file out of the page cache, so that the server's own reads charge its
        # pages to its cgroup
        fd = os.open(model, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        srv = Server(["-m", model, "--port", "0", "-c", "512", "-t", "2", "--mlock",
                      "--no-repack-cache"], prefix=enter)
        self.addCleanup(srv.stop)  # (stopped before the cgroup is removed)
        srv.wait_ready(wait_repacked=False)
        srv.wait_log(r"repacked \d+ MiB of weights for decode after start-up", timeout=120)
        self.assertNotIn("mlock of the repacked copies failed", srv.log_text())
        r = request(srv.port, "POST", "/completion",
                    {"prompt": "def fibonacci(n):", "n_predict": 4, "temperature": 0})
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(srv.proc.poll(), "the server died:\n" + srv.log_text())


class KvCacheTypes(unittest.TestCase):
    """-ctk / -ctv set separately, any of the types llama-server takes on a CPU."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def test_keys_and_values_of_their_own_types(self):
        for k, v in (("iq4_nl", "q5_1"), ("q4_0", "q4_0"), ("bf16", "q8_0")):
            with self.subTest(k=k, v=v):
                srv = Server(["-m", self.model, "--port", "0", "-c", "512", "-ctk", k, "-ctv", v])
                self.addCleanup(srv.stop)
                srv.wait_ready()
                want = k if k == v else f"K {k} / V {v}"
                # (the line is logged before /health says ok, but read by a thread here)
                srv.wait_log(re.escape(f"KV {want},"), timeout=10)
                r = request(srv.port, "POST", "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "Name a colour."}],
                             "max_tokens": 8, "temperature": 0})
                self.assertEqual(r.status, 200, r)
                self.assertTrue(r.json()["choices"][0]["message"]["content"].strip())
                srv.stop()


class CacheRam(unittest.TestCase):
    """--cache-ram: an agent alternating between three system prompts on one slot pays a
    full prefill only once for each."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def run_agent(self, *flags):
        srv = Server(["-m", self.model, "--port", "0", "-c", "1024", "-np", "1", *flags])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        evaluated = []
        for turn in range(3):
            for topic in ("navigation", "music", "climate"):
                body = {"messages": [{"role": "system", "content": system_prompt(topic)},
                                     {"role": "user", "content": f"Question {turn} about {topic}?"}],
                        "max_tokens": 3, "temperature": 0}
                r = request(srv.port, "POST", "/v1/chat/completions", body)
                self.assertEqual(r.status, 200, r)
                j = r.json()
                evaluated.append(j["usage"]["prompt_tokens"] - j["timings"]["cache_n"])
        return srv, evaluated

    def test_three_system_prompts_each_prefilled_once(self):
        srv, evaluated = self.run_agent()
        self.assertTrue(all(n > 250 for n in evaluated[:3]), evaluated)
        self.assertTrue(all(n < 30 for n in evaluated[3:]), evaluated)
        # (a request's log line is written just after its answer: wait for the last one)
        deadline = time.monotonic() + 10
        while len(re.findall(r"restored \d+ cached tokens from RAM", srv.log_text())) < 6 and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(len(re.findall(r"restored \d+ cached tokens from RAM", srv.log_text())), 6,
                         srv.log_text())

    def test_cache_ram_zero_turns_it_off(self):
        _, evaluated = self.run_agent("--cache-ram", "0")
        self.assertTrue(all(n > 250 for n in evaluated), evaluated)

    def test_no_cache_idle_slots_keeps_nothing_a_new_prompt_cuts(self):
        _, evaluated = self.run_agent("--no-cache-idle-slots")
        self.assertTrue(all(n > 250 for n in evaluated), evaluated)
