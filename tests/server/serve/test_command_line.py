"""The command line's refusals and defaults, and models from llama.cpp's -hf cache."""

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

from harness import (
    ARGS, GEMMA, LOAD_TIMEOUT_S, QWEN, Server, _die_with_parent, model_path, need_model, request,
    run_cli)


class CommandLine(unittest.TestCase):
    def test_unknown_flag_is_named(self):
        r = run_cli(["--port", "0", "--frobnicate", "3"])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--frobnicate", r.stderr)

    def test_speculative_flags_are_checked(self):
        # values and combinations that cannot be honoured: exit 2, the flag named
        for flags, needle in [(["--spec-type", "eagle"], "--spec-type"),
                              (["--spec-type", "draft-eagle3"], "draft-eagle3"),
                              (["--spec-type", "draft"], "-md"),
                              (["--draft-max", "4"], "--draft-max"),
                              (["--draft-p-min", "0.6"], "--draft-p-min"),
                              (["-ngld", "99"], "-ngld"),
                              (["--spec-type", "ngram", "-ngld", "99"], "-ngld"),
                              (["--spec-type", "ngram", "--draft-max", "4", "--draft-min", "5"],
                               "--draft-min"),
                              (["-md", "/x.gguf", "--draft-p-min", "2"], "--draft-p-min"),
                              (["-md", "/x.gguf", "-devd", "cuda0"], "-devd"),
                              (["-md", "/x.gguf", "-ctkd", "q4_K"], "-ctkd"),
                              (["-md", "/x.gguf", "--spec-type", "ngram"], "-md")]:
            with self.subTest(flags=flags):
                r = run_cli(["-m", "/nonexistent/model.gguf", "--port", "0"] + flags)
                self.assertEqual(r.returncode, 2, r)
                self.assertIn(needle, r.stderr)

    def test_a_draft_model_with_another_vocabulary_is_refused_by_name(self):
        qwen, gemma = model_path(QWEN), model_path(GEMMA)
        if not qwen or not gemma:
            self.skipTest("needs the Qwen and Gemma models (scripts/fetch-models.sh)")
        r = run_cli(["-m", qwen, "-md", gemma, "--port", "0", "-c", "256"], timeout=120)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("cannot draft for", r.stderr)
        self.assertRegex(r.stderr, r"token \d+ is|tokenizer is|BOS token|EOS token|tokens, the model")
        r = run_cli(["-m", qwen, "-md", "/nonexistent/draft.gguf", "--port", "0", "-c", "256"],
                    timeout=120)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("/nonexistent/draft.gguf", r.stderr)

    def test_bad_values(self):
        for flags, needle in [(["--port", "70000"], "--port"), (["-np", "0"], "-np"),
                              (["--cache-type-k", "q4_K"], "--cache-type-k"),
                              (["-ctv", "q2_K"], "--cache-type-v"),
                              (["--flash-attn", "maybe"], "--flash-attn"),
                              (["--api-key-file", "/nonexistent/keys"], "/nonexistent/keys")]:
            with self.subTest(flags=flags):
                r = run_cli(["-m", "/nonexistent/model.gguf"] + flags)
                self.assertEqual(r.returncode, 2, r)
                self.assertIn(needle, r.stderr)

    def test_missing_model_file(self):
        r = run_cli(["-m", "/nonexistent/model.gguf", "--port", "0"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/nonexistent/model.gguf", r.stderr)

    def test_corrupt_model_file_is_a_clear_error(self):
        # a file that starts like a GGUF and then is garbage: /health says loading, then the
        # process ends with exit code 1 and a reason; never a crash
        with tempfile.NamedTemporaryFile(suffix=".gguf", delete=False) as f:
            f.write(b"GGUF" + struct.pack("<I", 3) + struct.pack("<QQ", 7, 1 << 40) + os.urandom(4096))
            path = f.name
        try:
            r = run_cli(["-m", path, "--port", "0"])
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("cannot load the model", r.stderr)
            self.assertNotIn("internal error", r.stderr)
        finally:
            os.unlink(path)

    def test_model_whose_tokenizer_fails_is_a_clear_error(self):
        # weights that load and a tokenizer that does not (read beside the weights at
        # start-up): exit code 1 naming what is missing, never a hang or a crash
        with tempfile.TemporaryDirectory() as d:
            good, bad = os.path.join(d, "tiny.gguf"), os.path.join(d, "no-tokens.gguf")
            subprocess.run([ARGS.bin, "synth", "--arch", "qwen2", "--shape", "tiny", "-o", good],
                           check=True, capture_output=True, timeout=120)
            with open(good, "rb") as f:
                data = f.read()
            self.assertEqual(data.count(b"tokenizer.ggml.tokens"), 1)
            with open(bad, "wb") as f:  # the same length: the file stays well formed
                f.write(data.replace(b"tokenizer.ggml.tokens", b"tokenizer.ggml.tokenZ"))
            r = run_cli(["-m", bad, "--port", "0"])
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("cannot load the model", r.stderr)
            self.assertIn("tokenizer.ggml.tokens missing", r.stderr)
            self.assertNotIn("internal error", r.stderr)

    def test_without_model_flag_serves_the_default_model(self):
        # `edgellm serve` without -m serves what scripts/fetch-models.sh installed
        qwen = model_path(QWEN)
        if not qwen:
            self.skipTest(f"the default model {QWEN} is not installed (scripts/fetch-models.sh)")
        env = dict(os.environ, EDGELLM_MODELS=os.path.dirname(qwen))
        env.pop("EDGELLM_MODEL", None)
        proc = subprocess.Popen([ARGS.bin, "serve", "--port", "0", "-c", "256"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        try:
            port = None
            for raw in proc.stderr:
                m = re.search(r"listening on http://\S+:(\d+)", raw.decode("utf-8", "replace"))
                if m:
                    port = int(m.group(1))
                    break
            self.assertIsNotNone(port, "no 'listening on' line")
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    if request(port, "GET", "/health", timeout=10).status == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            r = request(port, "GET", "/v1/models")
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.body)["data"][0]["id"], os.path.basename(qwen))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            proc.stderr.close()


class LlamaCppCache(unittest.TestCase):
    """-hf / --hf-repo / -hfd take what llama.cpp's -hf downloaded ($LLAMA_CACHE, Hugging Face's
    layout); edgellm never downloads, so a repository not there is a clear exit 2."""

    def test_hf_repo_from_the_cache_and_refused_when_absent(self):
        gemma = need_model(GEMMA)
        tmp = tempfile.mkdtemp(prefix="edgellm-hfcache-")
        self.addCleanup(shutil.rmtree, tmp, True)
        commit = "c" * 40
        snap = os.path.join(tmp, "models--someone--tiny-GGUF", "snapshots", commit)
        os.makedirs(snap)
        os.makedirs(os.path.join(tmp, "models--someone--tiny-GGUF", "refs"))
        with open(os.path.join(tmp, "models--someone--tiny-GGUF", "refs", "main"), "w") as f:
            f.write(commit)
        os.symlink(gemma, os.path.join(snap, "tiny-Q4_K_M.gguf"))
        env = {"LLAMA_CACHE": tmp}
        srv = Server(["-hf", "someone/tiny-GGUF:Q4_K_M", "--port", "0", "-c", "256", "-t", "2"], env=env)
        self.addCleanup(srv.stop)
        srv.wait_ready()
        r = request(srv.port, "GET", "/v1/models")
        self.assertEqual(r.json()["data"][0]["id"], "tiny-Q4_K_M.gguf")
        srv.stop()
        r = subprocess.run([ARGS.bin, "serve", "-hf", "someone/absent-GGUF", "--port", "0"], capture_output=True,
                           text=True, timeout=60, env=dict(os.environ, **env))
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("not in llama.cpp's download cache " + tmp, r.stderr)
        self.assertIn("never downloads", r.stderr)
        r = subprocess.run([ARGS.bin, "serve", "-m", gemma, "--spec-synth-len", "2", "--port", "0"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--spec-synth-len", r.stderr)
