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

import fnmatch
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FEATURES = os.path.join(HERE, "serve")
sys.path.insert(0, FEATURES)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree (CTest runs from the build)

from harness import collect_test_classes, run_test_classes  # noqa: E402  (after the path above)


def feature_tests():
    """Every serve/test_*.py's classes in one module, as when they were all in this file."""
    return collect_test_classes(FEATURES, "test_serve")


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
    return run_test_classes("test_serve", HERE, feature_tests, testLoader=OneFileLoader())


if __name__ == "__main__":
    sys.exit(main())
