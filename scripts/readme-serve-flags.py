#!/usr/bin/env python3
"""Replace the flag list under "Flags (llama-server's names ...)" in README.md with what
`edgellm serve --help` prints now. Usage: scripts/readme-serve-flags.py [BIN] (default
build/bin/edgellm); --check exits 1 when the README's list differs."""
import subprocess
import sys
from pathlib import Path

args = [a for a in sys.argv[1:] if a != "--check"]
binary = args[0] if args else "build/bin/edgellm"
help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
lines = help_text.splitlines()
start = next(i for i, l in enumerate(lines) if l.strip() == "options:") + 1
flags = "\n".join(lines[start:]).rstrip() + "\n"

readme = Path(__file__).resolve().parent.parent / "README.md"
text = readme.read_text()
marker = "`edgellm serve --help` prints this list):\n\n```\n"
at = text.index(marker) + len(marker)
end = text.index("```\n", at)
if "--check" in sys.argv:
    sys.exit(0 if text[at:end] == flags else 1)
readme.write_text(text[:at] + flags + text[end:])
