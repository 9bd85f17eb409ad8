#!/usr/bin/env bash
# llama.cpp's vocabulary-only GGUFs and its tokenizer test cases for them
# (models/ggml-vocab-<name>.gguf, .gguf.inp, .gguf.out), taken from the llama-cpp-python
# source package on PyPI (pinned below: the llama.cpp edgellm follows) into $EDGELLM_VOCABS
# (default ~/.cache/edgellm/vocab), never into the repository. tests/text/test_tokenizer.cpp
# checks every vocabulary there against llama.cpp's ids; without them those tests skip and
# say so. Idempotent: nothing is downloaded once the files of this version are in place.
#   scripts/fetch-vocabs.sh
set -euo pipefail
VERSION=0.3.36
dest="${EDGELLM_VOCABS:-$HOME/.cache/edgellm/vocab}"
stamp="$dest/.llama-cpp-python-$VERSION"
if [ -f "$stamp" ]; then
  echo "fetch-vocabs: llama.cpp's vocabularies ($VERSION) already in $dest"
  exit 0
fi
mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The sdist's URL and digest from PyPI's simple index; an sdist already downloaded by
# scripts/llama-server-suite.sh is used when its digest matches.
python3 - "$VERSION" "$tmp/sdist.tar.gz" "$HOME/.cache/edgellm/llama-server-suite" <<'PY'
import hashlib, os, re, shutil, sys, urllib.request
version, out, suite_dir = sys.argv[1:4]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read().decode()
m = re.search(r'href="([^"#]*/(llama_cpp_python-%s\.tar\.gz))#sha256=([0-9a-f]{64})"' % re.escape(version), index)
if not m:
    sys.exit("fetch-vocabs: no llama_cpp_python-%s.tar.gz on PyPI's index" % version)
url, name, sha = m.groups()
def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
cached = os.path.join(suite_dir, name)
if os.path.isfile(cached) and digest(cached) == sha:
    shutil.copyfile(cached, out)
    sys.exit(0)
print("fetch-vocabs: fetching llama-cpp-python %s's source from PyPI (about 77 MB)" % version, flush=True)
with urllib.request.urlopen(url, timeout=600) as r, open(out, "wb") as f:
    shutil.copyfileobj(r, f)
if digest(out) != sha:
    sys.exit("fetch-vocabs: the sdist's sha256 does not match PyPI's")
PY

# Only the vocabulary files, flattened into $dest.
prefix="llama_cpp_python-$VERSION/vendor/llama.cpp/models"
tar -xzf "$tmp/sdist.tar.gz" -C "$tmp" --wildcards "$prefix/ggml-vocab-*"
n=0
for f in "$tmp/$prefix"/ggml-vocab-*; do
  mv -f "$f" "$dest/"
  n=$((n + 1))
done
if [ "$n" -eq 0 ]; then
  echo "fetch-vocabs: no models/ggml-vocab-* in the sdist" >&2
  exit 1
fi
touch "$stamp"
echo "fetch-vocabs: $n files in $dest"
