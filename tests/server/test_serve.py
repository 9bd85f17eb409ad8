#!/usr/bin/env python3
"""Integration tests of `edgellm serve`: the real binary on a free port, real HTTP, real models.

    tests/server/test_serve.py --bin build/bin/edgellm --root . [unittest options, e.g. -k Cancel]

The tests are in tests/server/serve/: one test_<feature>.py per feature and harness.py,
what they share (the server process, HTTP, SSE, the models, ARGS). This runner loads every
serve/test_*.py and runs all their classes as one run, in the order of the classes' names
as when they were one file; -k matches Class.test_name as then too (not the file's name).

Most protocol tests run against Gemma 3 270M (fast); the seed tests run the seeds' own
llama-server command lines and requests (shared/seeds/000-002) against the default
Qwen2.5-Coder 1.5B. A test whose model, Python package or browser is missing is skipped
with the reason printed, never passed. Every server this run starts is stopped at the
end, also when a test fails or the run is interrupted (SIGTERM from CTest's timeout
included; a child also gets SIGKILL if this process dies, via PR_SET_PDEATHSIG).

Exit code: 0 all passed (some may have skipped), 1 a failure, 77 when every test skipped
(CTest's SKIP_RETURN_CODE).
"""

import argparse
import fnmatch
import glob
import importlib
import os
import sys
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FEATURES = os.path.join(HERE, "serve")
sys.path.insert(0, FEATURES)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree (CTest runs from the build)

from harness import ARGS, _stop_all_servers  # noqa: E402  (after the path above)


def feature_tests():
    """One module object holding the test classes of every serve/test_*.py, for unittest.main:
    its loader takes them in the order of their names, across the files."""
    tests = types.ModuleType("test_serve")
    for path in sorted(glob.glob(os.path.join(FEATURES, "test_*.py"))):
        module = importlib.import_module(os.path.basename(path)[:-3])
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase) \
                    and obj.__module__ == module.__name__:
                if hasattr(tests, name):
                    raise SystemExit(f"test_serve: two test classes named {name} "
                                     f"({getattr(tests, name).__module__}.py and {path})")
                setattr(tests, name, obj)
    return tests


class OneFileLoader(unittest.TestLoader):
    """unittest's loader but for -k: it matches the pattern against __main__.Class.test_name,
    as when the tests were all in this file, never against the feature file's name."""

    def getTestCaseNames(self, testCaseClass):
        patterns, self.testNamePatterns = self.testNamePatterns, None
        try:
            names = super().getTestCaseNames(testCaseClass)
        finally:
            self.testNamePatterns = patterns
        if not patterns:
            return names
        return [n for n in names if any(fnmatch.fnmatchcase(f"__main__.{testCaseClass.__qualname__}.{n}", p)
                                        for p in patterns)]


# ---- main --------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--bin", default=None)
    parser.add_argument("--root", default=None)
    ours, rest = parser.parse_known_args()
    ARGS.root = os.path.abspath(ours.root or os.path.join(HERE, "..", ".."))
    ARGS.bin = os.path.abspath(ours.bin or os.path.join(ARGS.root, "build", "bin", "edgellm"))
    if not os.access(ARGS.bin, os.X_OK):
        print(f"test_serve: {ARGS.bin} is not an executable; build it first", file=sys.stderr)
        return 1
    print(f"test_serve: {ARGS.bin} with {sys.executable}", flush=True)
    t0 = time.monotonic()
    prog = unittest.main(module=feature_tests(), argv=[sys.argv[0], *rest], exit=False, verbosity=2,
                         testLoader=OneFileLoader())
    r = prog.result
    # A class skipped in setUpClass counts once in r.skipped and not in r.testsRun.
    skipped_cases = sum(1 for t, _ in r.skipped if isinstance(t, unittest.TestCase))
    passed = r.testsRun - skipped_cases - len(r.failures) - len(r.errors)
    print(f"test_serve: {passed} passed, {len(r.failures) + len(r.errors)} failed, "
          f"{skipped_cases} tests and {len(r.skipped) - skipped_cases} classes skipped "
          f"in {time.monotonic() - t0:.0f} s", flush=True)
    _stop_all_servers()
    if not r.wasSuccessful():
        return 1
    if r.skipped and passed == 0:
        return 77  # everything skipped: CTest's SKIP_RETURN_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
