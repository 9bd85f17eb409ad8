"""Deploying: what a service manager sees, `edgellm accept`, the client examples and deploy/."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import (
    ARGS, GEMMA, LOAD_TIMEOUT_S, QWEN_SMALL, REQUEST_TIMEOUT_S, RawStream, Server,
    _die_with_parent, free_port, memory_cgroup, need_model, request, sse_events, start_server)


class ServiceLifecycle(unittest.TestCase):
    """What a service manager sees: --pid-file, --log-file, -v, readiness on $NOTIFY_SOCKET
    (systemd's Type=notify), and SIGTERM ending a stream with an error event."""

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(GEMMA)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="edgellm-svc-")
        self.addCleanup(lambda: shutil.rmtree(self.dir, ignore_errors=True))

    def test_pid_file_log_file_and_verbose(self):
        pid_file, log_file = os.path.join(self.dir, "edgellm.pid"), os.path.join(self.dir, "edgellm.log")
        port = free_port()
        srv = Server(["-m", self.model, "--port", port, "-c", "512", "--pid-file", pid_file,
                      "--log-file", log_file, "-v"], port=port)
        self.addCleanup(srv.stop)
        srv.wait_ready()
        with open(pid_file) as f:
            self.assertEqual(int(f.read()), srv.proc.pid)
        r = request(port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Name a fruit."}], "max_tokens": 5,
                     "temperature": 0})
        self.assertEqual(r.status, 200, r)
        answer = r.json()["choices"][0]["message"]["content"]
        srv.proc.send_signal(signal.SIGTERM)
        self.assertEqual(srv.proc.wait(timeout=30), 0)
        with open(log_file) as f:
            log = f.read()
        self.assertIn("listening on http://127.0.0.1:%d" % port, log)
        self.assertRegex(log, r"POST /v1/chat/completions 200 \| slot 0")
        self.assertRegex(log, r"request chatcmpl-\S+ prompt: .*Name a fruit\.")
        self.assertIn("output 0: " + answer.replace("\n", "\\n"), log)
        self.assertIn("stopping (signal 15)", log)
        self.assertNotIn("listening on", srv.log_text(), "stderr went to the log file")
        self.assertFalse(os.path.exists(pid_file), "the pid file is removed at exit")

    def test_readiness_on_notify_socket(self):
        path = os.path.join(self.dir, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        self.addCleanup(sock.close)
        sock.settimeout(LOAD_TIMEOUT_S)
        srv = Server(["-m", self.model, "--port", "0", "-c", "512"], env={"NOTIFY_SOCKET": path})
        self.addCleanup(srv.stop)
        msg = sock.recv(4096).decode()
        self.assertIn("READY=1", msg)
        # ready means /health already says ok
        self.assertEqual(request(srv.port, "GET", "/health").json()["status"], "ok")
        srv.proc.send_signal(signal.SIGTERM)
        self.assertIn("STOPPING=1", sock.recv(4096).decode())
        self.assertEqual(srv.proc.wait(timeout=30), 0)

    def test_sigterm_ends_a_stream_with_an_error_event(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "2048"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        s = RawStream(srv.port, "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "Count from one to a thousand."}],
                       "max_tokens": 1500, "ignore_eos": True, "stream": True})
        s.read_until_events(3)
        srv.proc.send_signal(signal.SIGTERM)
        s.read_all()
        events = sse_events(s.body)
        last = json.loads(events[-1])
        self.assertIn("error", last, events[-3:])
        self.assertEqual(last["error"]["code"], 503)
        self.assertIn("the server is stopping", last["error"]["message"])
        self.assertNotIn("[DONE]", events, "a cut reply does not end as a complete one")
        self.assertEqual(srv.proc.wait(timeout=30), 0)
        self.assertIn("cut: the server is stopping", srv.log_text())


class AcceptCommand(unittest.TestCase):
    """`edgellm accept`: seed 000's acceptance table against a server it starts (start-up timed)
    or one already running (--url), every row printed with target, value and result; JSON; the
    exit status follows the rows."""

    ROWS = ["decode speed", "first token, first turn", "first token, turn 3 on", "draft accept rate",
            "resident memory (peak)", "cgroup memory", "start-up to healthy"]

    @classmethod
    def setUpClass(cls):
        cls.model = need_model(QWEN_SMALL)

    def accept(self, args, timeout=600):
        return subprocess.run([ARGS.bin, "accept", *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def check_table(self, r, j):
        for name in self.ROWS:
            self.assertRegex(r.stdout, r"(?m)^" + re.escape(name) + r" +[<>]=? ", r.stdout)
        self.assertEqual([row["name"] for row in j["rows"]], self.ROWS)
        for row in j["rows"]:
            self.assertIn(row["result"], ("pass", "FAIL", "n/a"))
            if row["value"] is None:
                self.assertEqual(row["result"], "n/a", row)
        self.assertEqual(r.returncode, 0 if j["passed"] else 1, r.stdout + r.stderr)
        self.assertEqual(j["passed"], all(row["result"] != "FAIL" for row in j["rows"]))

    def test_starts_the_server_and_times_it(self):
        out = os.path.join(tempfile.mkdtemp(prefix="edgellm-accept-"), "accept.json")
        self.addCleanup(lambda: shutil.rmtree(os.path.dirname(out), ignore_errors=True))
        # loose targets: the table and its exit status are under test, not this machine
        r = self.accept(["--json", out, "--turns", "3", "--max-tokens", "16", "--target-decode", "1",
                         "--target-first-token", "60000", "--target-first-token-turn", "60000",
                         "--target-memory", "100000", "--target-startup", "120000", "--",
                         "-m", self.model, "-c", "1024", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0"])
        with open(out) as f:
            j = json.load(f)
        self.check_table(r, j)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rows = {row["key"]: row for row in j["rows"]}
        self.assertGreater(rows["startup_ms"]["value"], 0)
        self.assertGreater(rows["decode_tps"]["value"], 1)
        self.assertGreater(rows["resident_mib"]["value"], 100)  # the 0.5B's weights are resident
        self.assertEqual(rows["draft_accept_rate"]["result"], "n/a")  # no -md
        self.assertEqual(len(j["turns"]), 3)
        # the conversation goes through one slot: later turns reuse the earlier prefix
        self.assertGreater(j["turns"][2]["cached_tokens"], j["turns"][0]["prompt_tokens"])
        self.assertRegex(r.stderr, r"accept: turn 3/3: first token \d+ ms")
        self.assertIn("PASS", r.stdout)

    def test_url_of_a_running_server_and_a_failing_row(self):
        srv = Server(["-m", self.model, "--port", "0", "-c", "1024", "-np", "1"])
        self.addCleanup(srv.stop)
        srv.wait_ready()
        r = self.accept(["--url", "http://127.0.0.1:%d" % srv.port, "--json", "-", "--turns", "3",
                         "--max-tokens", "8", "--target-decode", "1000000"])
        j = json.loads(r.stdout[r.stdout.index("{"):])
        self.check_table(r, j)
        rows = {row["key"]: row for row in j["rows"]}
        self.assertEqual(rows["decode_tps"]["result"], "FAIL")  # nobody decodes a million a second
        self.assertEqual(r.returncode, 1)
        self.assertEqual(rows["startup_ms"]["result"], "n/a")
        self.assertIn("--url", rows["startup_ms"]["detail"])
        # the process was found from the port
        self.assertIn("pid %d" % srv.proc.pid, rows["resident_mib"]["detail"])

    def test_cgroup_row_of_a_server_in_a_cgroup_of_its_own(self):
        # a memory cgroup of the server's own (3 GiB), the server started in it
        cg, enter = memory_cgroup(self, "edgellm-accept", 3 << 30)
        # (--no-repack-cache: the repacked weights in memory of the server's own, charged to
        # its cgroup; mapped from a repack cache file they are page cache, charged to the
        # cgroup that first read the file, as a model file's pages are)
        srv = Server(["-m", self.model, "--port", "0", "-c", "1024", "-np", "1", "--no-repack-cache"],
                     prefix=enter)
        self.addCleanup(srv.stop)  # (stopped before the cgroup is removed)
        srv.wait_ready()
        # (the copies are made after start-up, before which the weights are the file's pages)
        srv.wait_log(r"repacked \d+ MiB of weights for decode after start-up", timeout=120)
        r = self.accept(["--url", "http://127.0.0.1:%d" % srv.port, "--json", "-", "--turns", "3",
                         "--max-tokens", "8", "--target-memory", "100000"])
        j = json.loads(r.stdout[r.stdout.index("{"):])
        row = {row["key"]: row for row in j["rows"]}["cgroup_mib"]
        self.assertIsNotNone(row["value"], row)
        self.assertGreater(row["value"], 300)  # the 0.5B's weights at least
        self.assertIn("edgellm-accept-%d" % os.getpid(), row["detail"])
        self.assertIn("limit: 3072 MiB", row["detail"])

    def test_usage_errors_and_a_server_that_cannot_start(self):
        r = self.accept(["--turns", "99"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--turns", r.stderr)
        r = self.accept(["--url", "http://127.0.0.1:1", "--", "-m", self.model])
        self.assertEqual(r.returncode, 2)
        r = self.accept(["--url", "http://127.0.0.1:%s" % free_port()])
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot connect", r.stderr)
        srv = Server(["-m", self.model, "--port", "0", "-c", "256"])
        self.addCleanup(srv.stop)
        r = self.accept(["--", "-m", self.model, "--port", str(srv.port)])  # another server has it
        self.assertEqual(r.returncode, 1)
        self.assertIn("port %d is already in use" % srv.port, r.stderr)
        r = self.accept(["--", "-m", "/nonexistent.gguf"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("exited before it was healthy", r.stderr)
        self.assertIn("/nonexistent.gguf", r.stderr)  # serve's own message is shown


class ClientExamples(unittest.TestCase):
    """examples/: the car assistant's chat loop (router, streaming, canned reply when the server
    is gone) and seed 001's /completion client, run against a real server."""

    @classmethod
    def setUpClass(cls):
        model = need_model(QWEN_SMALL)
        cls.bindir = os.path.dirname(ARGS.bin)
        for ex in ("car_assistant", "completion_client"):
            if not os.path.exists(os.path.join(cls.bindir, ex)):
                raise unittest.SkipTest("%s not built (EDGELLM_BUILD_EXAMPLES=OFF)" % ex)
        cls.srv = start_server(cls, ["-m", model, "--port", "0", "-c", "2048", "-np", "1"])
        cls.url = "http://127.0.0.1:%d" % cls.srv.port

    def run_example(self, name, args, stdin=""):
        return subprocess.run([os.path.join(self.bindir, name), *args], input=stdin, capture_output=True,
                              text=True, timeout=REQUEST_TIMEOUT_S)

    def test_car_assistant_routes_streams_and_degrades(self):
        r = self.run_example("car_assistant", ["--url", self.url, "--max-tokens", "24"],
                             "打开空调\n今晚吃什么好\n导航到北京西站\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.splitlines()
        self.assertEqual(out[0], "好的，已为您打开空调。")
        self.assertEqual(out[2], "好的，正在为您导航到北京西站。")
        self.assertTrue(out[1].strip(), r.stdout)  # the LLM answered the open question
        status = r.stderr.splitlines()
        self.assertEqual(status[0], "[router: handled without the LLM]")
        self.assertRegex(status[1], r"^\[llm: first token \d+ ms, \d+ tokens")
        # nothing listening: the canned reply, and why
        r = self.run_example("car_assistant", ["--url", "http://127.0.0.1:%s" % free_port()], "hi\n")
        self.assertEqual(r.stdout.strip(), "抱歉，我现在有点忙，请稍后再试。")
        self.assertIn("canned_reply after connect", r.stderr)

    def test_completion_client_of_seed_001(self):
        r = self.run_example("completion_client", ["--url", self.url, "-n", "16", "Explain ownership in Rust."])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip())
        self.assertRegex(r.stderr, r"tokens_predicted 16, [0-9.]+ tokens/s")
        r = self.run_example("completion_client", ["--url", "http://127.0.0.1:%s" % free_port()])
        self.assertEqual(r.returncode, 1)
        self.assertIn("network error", r.stderr)


class DeployFiles(unittest.TestCase):
    """deploy/: the systemd unit verifies and its command line starts a server as written,
    the scripts parse, and the warm-up script warms a real server."""

    def unit_text(self):
        with open(os.path.join(ARGS.root, "deploy", "edgellm.service")) as f:
            return f.read()

    def test_systemd_unit_verifies(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze is not installed (Debian's systemd package)")
        d = tempfile.mkdtemp(prefix="edgellm-unit-")
        self.addCleanup(lambda: shutil.rmtree(d, ignore_errors=True))
        unit = os.path.join(d, "edgellm.service")
        with open(unit, "w") as f:  # the installed paths, here: this build and this tree
            f.write(self.unit_text().replace("/usr/local/bin/edgellm", ARGS.bin).replace(
                "/usr/local/share/edgellm/warmup.sh", os.path.join(ARGS.root, "deploy", "warmup.sh")))
        r = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.strip(), "", "systemd-analyze warned")
        for key in ("Type=notify", "Restart=on-failure", "MemoryMax=2G", "CPUAffinity=0 1 2 3", "Nice=-10"):
            self.assertIn(key, self.unit_text())

    def test_scripts_parse(self):
        for script in ("deploy/warmup.sh", "deploy/android/start_llm_server.sh"):
            r = subprocess.run(["sh", "-n", os.path.join(ARGS.root, script)], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, (script, r.stderr))

    def test_the_static_binary_serves_from_an_empty_root(self):
        """Seed 000: deploying is copying one binary. In a directory holding only the binary
        and a model (chroot, no libraries, no /etc), with an empty environment, it serves."""
        r = subprocess.run(["ldd", ARGS.bin], capture_output=True, text=True)
        if "not a dynamic executable" not in (r.stdout + r.stderr):
            self.skipTest("the binary is not static (configure with -DEDGELLM_STATIC=ON)")
        if os.geteuid() != 0 or not shutil.which("chroot") and not os.path.exists("/usr/sbin/chroot"):
            self.skipTest("chroot needs root")
        tiny = os.path.join(ARGS.root, "..", "shared", "reference", "golden", "tiny-qwen2-q8_0.gguf")
        if not os.path.isfile(tiny):
            self.skipTest(f"no golden tiny model at {tiny}")
        root = tempfile.mkdtemp(prefix="edgellm-root-")
        self.addCleanup(lambda: shutil.rmtree(root, ignore_errors=True))
        shutil.copy(ARGS.bin, os.path.join(root, "edgellm"))
        shutil.copy(tiny, os.path.join(root, "model.gguf"))
        self.assertEqual(sorted(os.listdir(root)), ["edgellm", "model.gguf"])
        port = free_port()
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"
        proc = subprocess.Popen(["env", "-i", chroot, root, "/edgellm", "serve", "-m", "/model.gguf",
                                 "--port", str(port), "-c", "256"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if request(port, "GET", "/health", timeout=5).status == 200:
                        break
                except OSError:
                    time.sleep(0.05)
            r = request(port, "POST", "/completion", {"prompt": "hello", "n_predict": 4})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["tokens_predicted"], 4)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=30), 0, proc.stderr.read().decode())
            proc.stderr.close()

    def test_the_units_command_line_serves_and_warms_up(self):
        model = need_model(GEMMA)
        text = self.unit_text()
        m = re.search(r"^ExecStart=(.*?)\n(?=\S)", text, re.S | re.M)
        cmd = m.group(1).replace("\\\n", " ").split()
        d = tempfile.mkdtemp(prefix="edgellm-unit-")
        self.addCleanup(lambda: shutil.rmtree(d, ignore_errors=True))
        port = free_port()
        args = []
        for a in cmd[2:]:  # after "/usr/local/bin/edgellm serve"
            a = a.replace("${EDGELLM_MODEL}", model).replace("/var/cache/edgellm", os.path.join(d, "cache"))
            a = a.replace("/var/log/edgellm/edgellm.log", os.path.join(d, "edgellm.log"))
            args.append("%d" % port if a == "8899" else a)
        self.assertIn("--mlock", args)
        srv = Server(args, port=port)
        self.addCleanup(srv.stop)
        srv.wait_ready()
        env = dict(os.environ, PORT=str(port), LOG=os.path.join(d, "warmup.log"))
        r = subprocess.run(["sh", os.path.join(ARGS.root, "deploy", "warmup.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(d, "warmup.log")) as f:
            self.assertIn("warmup done", f.read())
        srv.proc.send_signal(signal.SIGTERM)
        self.assertEqual(srv.proc.wait(timeout=30), 0)
        with open(os.path.join(d, "edgellm.log")) as f:
            log = f.read()
        self.assertRegex(log, r"POST /v1/chat/completions 200 \| slot 0 \| prompt \d+ .*generated 1")
