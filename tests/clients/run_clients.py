#!/usr/bin/env python3
"""The client libraries against a real `edgellm serve` (issue 45): each library through its
documented idioms (chat, streaming, tools, structured output, the Responses API, Anthropic
messages, embeddings), one test_<library>.py each.

    build/clients-venv/bin/python tests/clients/run_clients.py [--bin build/bin/edgellm]
        [--root .] [unittest options, e.g. -k Anthropic]

scripts/setup-clients.sh makes the venv with the pinned versions of requirements.txt. A
library that is not importable skips its class with the reason printed, never passes.

Exit code: 0 all passed (some may have skipped), 1 a failure, 77 when everything skipped
(no venv, no model: CTest's SKIP_RETURN_CODE).
"""

import argparse
import glob
import importlib
import os
import sys
import time
import types
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from common import ARGS, harness  # noqa: E402  (after the path above)


def library_tests():
    tests = types.ModuleType("clients")
    for path in sorted(glob.glob(os.path.join(HERE, "test_*.py"))):
        module = importlib.import_module(os.path.basename(path)[:-3])
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase) \
                    and obj.__module__ == module.__name__:
                setattr(tests, name, obj)
    return tests


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--bin", default=None)
    parser.add_argument("--root", default=None)
    ours, rest = parser.parse_known_args()
    ARGS.root = os.path.abspath(ours.root or os.path.join(HERE, "..", ".."))
    ARGS.bin = os.path.abspath(ours.bin or os.path.join(ARGS.root, "build", "bin", "edgellm"))
    if not os.access(ARGS.bin, os.X_OK):
        print(f"run_clients: {ARGS.bin} is not an executable; build it first", file=sys.stderr)
        return 1
    print(f"run_clients: {ARGS.bin} with {sys.executable}", flush=True)
    t0 = time.monotonic()
    # Deprecations shown (a library's idiom going away is news); not the ResourceWarnings of
    # the async libraries' generators closed at asyncio.run's end.
    warnings.simplefilter("default")
    warnings.filterwarnings("ignore", category=ResourceWarning)
    prog = unittest.main(module=library_tests(), argv=[sys.argv[0], *rest], exit=False, verbosity=2,
                         warnings=False)
    r = prog.result
    skipped_cases = sum(1 for t, _ in r.skipped if isinstance(t, unittest.TestCase))
    passed = r.testsRun - skipped_cases - len(r.failures) - len(r.errors)
    for test, reason in r.skipped:
        print(f"run_clients: skipped {test}: {reason}", flush=True)
    print(f"run_clients: {passed} passed, {len(r.failures) + len(r.errors)} failed, "
          f"{skipped_cases} tests and {len(r.skipped) - skipped_cases} classes skipped "
          f"in {time.monotonic() - t0:.0f} s", flush=True)
    harness._stop_all_servers()
    if not r.wasSuccessful():
        return 1
    if r.skipped and passed == 0:
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
