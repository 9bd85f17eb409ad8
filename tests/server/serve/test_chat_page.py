"""The chat page in headless Chromium (Selenium)."""

import os
import shutil
import sys
import time
import unittest

from harness import (
    GEMMA, _die_with_parent, _live_groups, kill_group, need_model, request, start_server)


# ---- the chat page in headless Chromium --------------------------------------------------


def find_browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    return chromium, driver


class ChatPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        chromium, driver = find_browser()
        if not chromium or not driver:
            raise unittest.SkipTest("chromium or chromedriver is not installed (Debian packages "
                                    "chromium, chromium-driver; scripts/setup.sh installs them)")
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError:
            raise unittest.SkipTest(f"selenium is not importable by {sys.executable} (Debian package "
                                    "python3-selenium; build/venv sees it)")
        model = need_model(GEMMA)
        cls.srv = start_server(cls, ["-m", model, "--port", "0", "-n", "48"])
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1000,800"):
            opts.add_argument(a)
        # chromedriver and the browser it starts in a process group of their own, killed
        # whole at the end (also on SIGTERM), and with this process (PR_SET_PDEATHSIG)
        service = Service(driver, popen_kw={"start_new_session": True, "preexec_fn": _die_with_parent})
        cls.driver = webdriver.Chrome(service=service, options=opts)
        pgid = service.process.pid
        _live_groups.add(pgid)
        cls.addClassCleanup(kill_group, pgid)
        cls.addClassCleanup(cls.driver.quit)

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = predicate()
            if v:
                return v
            time.sleep(0.02)
        self.fail(f"timed out waiting for {what}; page: "
                  f"{self.driver.find_element('id', 'log').text[:500]!r}")

    def test_send_streams_an_answer_then_stop(self):
        d = self.driver
        from selenium.webdriver.common.by import By
        d.get(f"http://127.0.0.1:{self.srv.port}/")
        self.wait(lambda: d.find_element(By.ID, "model").text, 30, "the model name")
        # record every change of the reply's text, to see it arrive in pieces
        d.execute_script("""
            window.__updates = [];
            new MutationObserver(() => {
              const r = document.querySelector('.msg.assistant:last-of-type');
              if (r) window.__updates.push(r.textContent.length);
            }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
        """)
        d.find_element(By.ID, "input").send_keys("Write a short poem about the sea.")
        d.find_element(By.ID, "send").click()
        self.wait(lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant.done"), 120, "the answer")
        reply = d.find_element(By.CSS_SELECTOR, ".msg.assistant.done").text
        self.assertTrue(reply.strip(), "empty answer")
        updates = [n for n in d.execute_script("return window.__updates;") if n > 0]
        self.assertGreater(len(set(updates)), 2, f"the answer did not stream: {updates}")
        stats = d.find_element(By.CSS_SELECTOR, ".stats").text
        self.assertRegex(stats, r"\d+ tokens, [\d.]+ tokens/s")
        self.assertEqual(d.find_element(By.CSS_SELECTOR, ".msg.user").text,
                         "Write a short poem about the sea.")

        # Stop: the page's fetch is given max_tokens and ignore_eos for this message so that
        # the answer is long for sure; the Stop button is what is tested.
        d.execute_script("""
            const orig = window.fetch;
            window.fetch = (url, opts) => {
              if (url === '/v1/chat/completions') {
                const b = JSON.parse(opts.body); b.max_tokens = 3000; b.ignore_eos = true;
                opts = Object.assign({}, opts, {body: JSON.stringify(b)});
              }
              return orig(url, opts);
            };
        """)
        log_at = self.srv.log_count()
        d.find_element(By.ID, "input").send_keys("Now a long one.")
        d.find_element(By.ID, "send").click()
        replies = lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        self.wait(lambda: len(replies()) == 2 and len(replies()[1].text) > 5, 60, "the second answer")
        self.assertTrue(request(self.srv.port, "GET", "/slots").json()[0]["is_processing"])
        d.find_element(By.ID, "stop").click()
        self.wait(lambda: any(e.text == "stopped" for e in d.find_elements(By.CSS_SELECTOR, ".stats")),
                  10, "the page to say stopped")
        self.assertTrue(d.find_element(By.ID, "send").is_enabled())
        m = self.srv.wait_log(r"POST /v1/chat/completions .*generated (\d+).*cancelled", start=log_at,
                              timeout=10)
        self.assertLess(int(m.group(1)), 3000)
        self.assertFalse(request(self.srv.port, "GET", "/slots").json()[0]["is_processing"])
