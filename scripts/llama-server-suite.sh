#!/usr/bin/env bash
# llama.cpp's own server test suite (tools/server/tests of llama.cpp, from the
# llama-cpp-python source package on PyPI, pinned in llama-cpp-source.sh) against `edgellm serve`, or against
# llama.cpp's `llama-server` built from the same source, with the same local models in place
# of the suite's Hugging Face downloads (scripts/llama-server-suite-wrap.py). Prints pass /
# fail / skip per test file and a total, and writes every test's outcome to
# $SUITE_DIR/results-SERVER.txt; --compare lists what llama-server passes and edgellm does
# not, less the cases in tests/llama-server-suite-known.txt (each with its reason).
#
#   scripts/llama-server-suite.sh [--server edgellm|llama] [--bin PATH] [--compare] [PYTEST ARGS]
#
# --server llama runs the reference's llama-server (scripts/reference.sh builds it from the
# same source, once, about 15 minutes here) unless --bin names one. The suite's slow tests
# (marked `slow`, large models) are deselected as in its own tests.sh. Needs the network to
# PyPI the first time; everything goes to $SUITE_DIR (default
# ~/.cache/edgellm/llama-server-suite), nothing into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
SUITE_DIR="${SUITE_DIR:-$HOME/.cache/edgellm/llama-server-suite}"
server=edgellm bin="" compare=0
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --compare) compare=1; shift ;;
    *) break ;;
  esac
done
case "$server" in edgellm|llama) ;; *) echo "llama-server-suite: --server edgellm or llama" >&2; exit 2 ;; esac
mkdir -p "$SUITE_DIR"
py=python3; [ -x build/venv/bin/python3 ] && py=build/venv/bin/python3

if [ $compare = 1 ]; then
  exec "$py" - "$SUITE_DIR" "$root/tests/llama-server-suite-known.txt" <<'PY'
import sys
d, known_file = sys.argv[1], sys.argv[2]
def load(name):
    out = {}
    with open("%s/results-%s.txt" % (d, name)) as f:
        for line in f:
            node, _, outcome = line.rstrip("\n").rpartition(" ")
            out[node] = outcome
    return out
ours, theirs = load("edgellm"), load("llama")
known = {}
with open(known_file) as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            node, _, why = line.partition("  ")
            known[node.strip()] = why.strip()
missing = [n for n, o in sorted(theirs.items()) if o == "passed" and ours.get(n) != "passed"]
unlisted = [n for n in missing if n not in known]
print("llama-server passes %d, edgellm %d; edgellm fails %d that llama-server passes (%d listed with a reason, %d not)"
      % (sum(o == "passed" for o in theirs.values()), sum(o == "passed" for o in ours.values()),
         len(missing), len(missing) - len(unlisted), len(unlisted)))
for n in unlisted:
    print("  not listed: %s (%s)" % (n, ours.get(n, "not run")))
sys.exit(1 if unlisted else 0)
PY
fi

# The suite's source, from PyPI (shared with scripts/reference.sh).
. scripts/llama-cpp-source.sh
tests="$(llama_cpp_source "$LLAMA_CPP_SOURCE_DIR")/tools/server/tests"

# Its Python requirements (+ pytest-timeout: no test may hang the run).
venv="$SUITE_DIR/venv"
if ! "$venv/bin/python3" -m pytest --version >/dev/null 2>&1 ||
   ! "$venv/bin/python3" -c "import pytest_timeout, openai, aiohttp" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$tests/requirements.txt" pytest-timeout
fi

# The server.
if [ -z "$bin" ]; then
  if [ "$server" = edgellm ]; then
    bin="$root/build/bin/edgellm"
  else
    bin=$(scripts/reference.sh --bin llama-server)
  fi
fi
[ -x "$bin" ] || { echo "llama-server-suite: no server binary at $bin" >&2; exit 1; }

out="$SUITE_DIR/results-$server"
mkdir -p "$tests/tmp"  # (the suite's TMP_DIR; its own model downloads would have made it)
start=$(date +%s)
rm -f "$out.xml"
set +e
(cd "$tests" && SUITE_SERVER="$server" SUITE_BIN="$bin" \
  LLAMA_SERVER_BIN_PATH="$root/scripts/llama-server-suite-wrap.py" LLAMA_CACHE="$SUITE_DIR/cache" \
  "$venv/bin/python3" -m pytest -p no:cacheprovider -m "not slow" --timeout 300 -q -rN \
    --junitxml="$out.xml" "${@:-unit}" > "$out.log" 2>&1)
set -e
if [ ! -f "$out.xml" ]; then
  tail -20 "$out.log" >&2
  echo "llama-server-suite: pytest did not run (its output: $out.log)" >&2
  exit 1
fi
"$py" - "$out.xml" "$out.txt" "$server" "$(($(date +%s) - start))" <<'PY'
import collections, sys, xml.etree.ElementTree as ET
xml, txt, server, secs = sys.argv[1:5]
per = collections.OrderedDict()
rows = []
for case in ET.parse(xml).getroot().iter("testcase"):
    cls, name = case.get("classname", ""), case.get("name", "")
    file = cls.split(".")[-1] + ".py" if cls else "?"
    outcome = "passed"
    for child in case:
        if child.tag in ("failure", "error"):
            outcome = "failed"
        elif child.tag == "skipped":
            outcome = "skipped"
    per.setdefault(file, collections.Counter())[outcome] += 1
    rows.append("%s::%s %s" % (file, name, outcome))
with open(txt, "w") as f:
    f.write("\n".join(rows) + "\n")
total = collections.Counter()
print("%-32s %6s %6s %6s" % ("file (%s)" % server, "pass", "fail", "skip"))
for file, c in per.items():
    total.update(c)
    print("%-32s %6d %6d %6d" % (file, c["passed"], c["failed"], c["skipped"]))
print("%-32s %6d %6d %6d   (%s s)" % ("total", total["passed"], total["failed"], total["skipped"], secs))
PY
echo "llama-server-suite: each test's outcome in $out.txt, pytest's output in $out.log"
