"""The one HTTP front of the server and the router: the same public routes (per method) and
the same access log, whichever of the two answers."""

import os
import shutil
import tempfile
import time
import unittest

from harness import GEMMA, Server, need_model, request

KEY = "front-test-key"


class SameFront(unittest.TestCase):
    """A single-model server and a router, both with --api-key, asked the same questions."""

    @classmethod
    def setUpClass(cls):
        gemma = need_model(GEMMA)
        cls.tmp = tempfile.mkdtemp(prefix="edgellm-front-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        models_dir = os.path.join(cls.tmp, "models")
        os.makedirs(models_dir)
        os.symlink(gemma, os.path.join(models_dir, "alpha.gguf"))
        cache = os.path.join(cls.tmp, "llama-cache")
        os.makedirs(cache)
        cls.server = Server(["-m", gemma, "--port", "0", "-c", "256", "-t", "2", "--api-key", KEY])
        cls.addClassCleanup(cls.server.stop)
        # the router: no model starts (--no-models-autoload), its own routes answer
        env = {"EDGELLM_MODELS": models_dir, "LLAMA_CACHE": cache, "HOME": cls.tmp}
        cls.router = Server(["--port", "0", "--api-key", KEY, "--no-models-autoload",
                             "--models-dir", models_dir], env=env)
        cls.addClassCleanup(cls.router.stop)
        cls.server.wait_ready()
        cls.router.wait_ready()

    def both(self):
        return (("server", self.server), ("router", self.router))

    def test_only_health_and_the_chat_page_are_public(self):
        auth = {"Authorization": "Bearer " + KEY}
        for name, srv in self.both():
            with self.subTest(name):
                self.assertEqual(request(srv.port, "GET", "/health").status, 200)
                self.assertEqual(request(srv.port, "GET", "/").status, 200)
                # the model list needs the key, as llama-server's (it was public here before)
                for path in ("/v1/models", "/models"):
                    self.assertEqual(request(srv.port, "GET", path).status, 401, path)
                    self.assertEqual(request(srv.port, "GET", path, headers=auth).status, 200, path)
                for method in ("POST", "DELETE"):
                    r = request(srv.port, method, "/models", body={})
                    self.assertEqual(r.status, 401, f"{method} /models without the key: {r}")
                # and a route that is not public, or that does not exist, needs it too
                self.assertEqual(request(srv.port, "POST", "/tokenize", body={"content": "a"}).status, 401)
                self.assertEqual(request(srv.port, "GET", "/no-such-route").status, 401)
                # health answers GET only, on both (the router answered any method)
                self.assertEqual(request(srv.port, "POST", "/health", body={}).status, 405)

    def test_the_access_log_leaves_out_the_same_polled_routes(self):
        auth = {"Authorization": "Bearer " + KEY}
        for name, srv in self.both():
            with self.subTest(name):
                start = srv.log_count()
                request(srv.port, "GET", "/health")
                request(srv.port, "GET", "/v1/models", headers=auth)
                request(srv.port, "GET", "/models", headers=auth)
                # a request that is logged: the server's props, the router's props
                request(srv.port, "GET", "/props", headers=auth)
                srv.wait_log(r"GET /props 200 \|", start=start)
                time.sleep(0.2)
                lines = srv.log_text().splitlines()[start:]
                for polled in ("GET /health", "GET /v1/models", "GET /models "):
                    self.assertFalse(any(polled in line for line in lines),
                                     f"{name} logged {polled}:\n" + "\n".join(lines))
                # not polled: POST /models is logged by both (a 400 on the router, a 404 on
                # the server, each with its time)
                start = srv.log_count()
                request(srv.port, "POST", "/models", body={}, headers=auth)
                srv.wait_log(r"POST /models (400|404) \| [0-9.]+ ms", start=start)
