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

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from common import harness  # noqa: E402  (after the path above)


def main():
    # Deprecations shown (a library's idiom going away is news); not the ResourceWarnings of
    # the async libraries' generators closed at asyncio.run's end.
    warnings.simplefilter("default")
    warnings.filterwarnings("ignore", category=ResourceWarning)
    return harness.run_test_classes("run_clients", HERE, lambda: harness.collect_test_classes(HERE, "clients"),
                                    show_skips=True, warnings=False)


if __name__ == "__main__":
    sys.exit(main())
