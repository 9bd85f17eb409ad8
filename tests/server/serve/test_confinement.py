"""Every file a request names stays where the operator put it: slot files in
--slot-save-path (plain names only; a link in it is neither read nor written through; a
link given as the directory is followed once, at start-up), and POST /models/load only
under the served model's directory, edgellm's model directory and --models-allow-dir
(judged by where a path leads: `..`, absolute paths and links out are refused with 403,
never loaded). The prompt cache's own refusals are in test_caches.py."""

import os
import shutil
import tempfile
import unittest

from harness import (
    GEMMA, Server, assert_error_shape, need_model, request, run_cli, start_server)


def link_or_copy(src, dst):
    """dst as the same file as src (a hard link: its real path is dst's), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def read(path):
    with open(path, "rb") as f:
        return f.read()


class SlotFilesConfined(unittest.TestCase):
    """POST /slots/0?action=save|restore with --slot-save-path given as a link to a directory."""

    @classmethod
    def setUpClass(cls):
        model = need_model(GEMMA)
        cls.base = tempfile.mkdtemp(prefix="edgellm-slotconf-")
        cls.addClassCleanup(lambda: shutil.rmtree(cls.base, ignore_errors=True))
        cls.dir, cls.elsewhere, cls.outside = (os.path.join(cls.base, d) for d in ("slots", "elsewhere", "outside"))
        for d in (cls.dir, cls.elsewhere, cls.outside):
            os.mkdir(d)
        cls.link = os.path.join(cls.base, "link")
        os.symlink(cls.dir, cls.link)
        cls.srv = start_server(cls, ["-m", model, "--port", "0", "-np", "1", "-c", "1024",
                                     "--slot-save-path", cls.link])
        cls.port = cls.srv.port

    def slot(self, action, name):
        return request(self.port, "POST", f"/slots/0?action={action}", {"filename": name})

    def fill_slot(self):
        r = request(self.port, "POST", "/completion",
                    {"prompt": "Slot files stay in their directory, whatever a request names.", "n_predict": 2})
        self.assertEqual(r.status, 200, r)

    def n_cached(self):
        return request(self.port, "GET", "/slots").json()[0]["n_cached"]

    def test_names_that_are_not_plain_file_names_are_refused(self):
        self.fill_slot()
        before = sorted(os.listdir(self.dir))
        for name in ["..", "../escape.bin", "/etc/passwd", "a/b", ".hidden", "bad\x01name", "tab\tname"]:
            with self.subTest(filename=name):
                for action in ("save", "restore"):
                    err = assert_error_shape(self, self.slot(action, name), 400)
                    self.assertIn("plain file name", err["message"])
        self.assertEqual(sorted(os.listdir(self.dir)), before)
        self.assertFalse(os.path.exists(os.path.join(self.base, "escape.bin")))

    def test_a_link_in_the_directory_is_neither_read_nor_written_through(self):
        self.fill_slot()
        self.assertEqual(self.slot("save", "real.bin").status, 200)
        # restore: a link to a good slot file outside is not read
        target = os.path.join(self.outside, "real.bin")
        os.replace(os.path.join(self.dir, "real.bin"), target)
        os.symlink(target, os.path.join(self.dir, "in.bin"))
        self.assertEqual(request(self.port, "POST", "/slots/0?action=erase").status, 200)
        err = assert_error_shape(self, self.slot("restore", "in.bin"), 403)
        self.assertIn("symbolic link", err["message"])
        self.assertEqual(self.n_cached(), 0, "nothing restored through the link")
        # save: a link at the name is not written through, nor one at a temporary name
        self.fill_slot()
        victim = os.path.join(self.outside, "victim")
        with open(victim, "wb") as f:
            f.write(b"precious")
        out = os.path.join(self.dir, "out.bin")
        os.symlink(victim, out)
        err = assert_error_shape(self, self.slot("save", "out.bin"), 403)
        self.assertIn("symbolic link", err["message"])
        self.assertTrue(os.path.islink(out))
        os.symlink(victim, os.path.join(self.dir, "tmp.bin.tmp"))  # (the name writes used to go through)
        self.assertEqual(self.slot("save", "tmp.bin").status, 200)
        self.assertFalse(os.path.islink(os.path.join(self.dir, "tmp.bin")))
        self.assertEqual(read(victim), b"precious", "a save wrote through a link")

    def test_a_directory_link_is_followed_once_at_start_up(self):
        self.fill_slot()
        moved = os.path.join(self.base, "link.new")
        os.symlink(self.elsewhere, moved)
        os.replace(moved, self.link)  # the link now leads elsewhere
        try:
            self.assertEqual(self.slot("save", "moved.bin").status, 200)
        finally:
            os.symlink(self.dir, moved)
            os.replace(moved, self.link)
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "moved.bin")))
        self.assertEqual(os.listdir(self.elsewhere), [])


class ModelLoadConfined(unittest.TestCase):
    """POST /models/load on a server of models/gemma.gguf, beside models/second.gguf and
    models/evil.gguf, a link to outside/outside.gguf (all three the same Gemma file)."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.base = tempfile.mkdtemp(prefix="edgellm-loadconf-")
        cls.addClassCleanup(lambda: shutil.rmtree(cls.base, ignore_errors=True))
        cls.models, cls.outside = os.path.join(cls.base, "models"), os.path.join(cls.base, "outside")
        os.mkdir(cls.models)
        os.mkdir(cls.outside)
        for path in (os.path.join(cls.models, "gemma.gguf"), os.path.join(cls.models, "second.gguf"),
                     os.path.join(cls.outside, "outside.gguf")):
            link_or_copy(gemma, path)
        os.symlink(os.path.join(cls.outside, "outside.gguf"), os.path.join(cls.models, "evil.gguf"))
        cls.srv = start_server(cls, ["-m", os.path.join(cls.models, "gemma.gguf"), "--port", "0", "-c", "1024"])
        cls.port = cls.srv.port

    def load(self, model, port=None):
        return request(port or self.port, "POST", "/models/load", {"model": model}, timeout=300)

    def served(self):
        return request(self.port, "GET", "/v1/models").json()["data"][0]["id"]

    def test_paths_that_lead_out_are_refused_before_loading_and_one_inside_loads(self):
        log_at = self.srv.log_count()
        outside = os.path.join(self.outside, "outside.gguf")
        for model in ["../x.gguf", "../outside/outside.gguf", os.path.join(self.models, "..", "outside", "outside.gguf"),
                      outside, "/etc/passwd", "/nonexistent/model.gguf", "evil.gguf",
                      os.path.join(self.models, "evil.gguf")]:
            with self.subTest(model=model):
                err = assert_error_shape(self, self.load(model), 403)
                self.assertIn("cannot load " + model, err["message"])
        self.assertEqual(self.served(), "gemma.gguf")
        after = self.srv.log_text().splitlines()[log_at:]
        self.assertEqual([line for line in after if "loading" in line], [], "a refused model was loaded")
        r = self.load("second.gguf")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model"], "second.gguf")
        self.assertEqual(self.served(), "second.gguf")

    def test_models_allow_dir_widens_what_may_be_loaded(self):
        missing = os.path.join(self.base, "missing")
        r = run_cli(["-m", os.path.join(self.models, "gemma.gguf"), "--models-allow-dir", missing])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--models-allow-dir " + missing + " is not a directory", r.stderr)
        srv = Server(["-m", os.path.join(self.models, "gemma.gguf"), "--port", "0", "-c", "1024",
                      "--models-allow-dir", self.outside])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        r = self.load("evil.gguf", port=srv.port)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model"], "evil.gguf")
