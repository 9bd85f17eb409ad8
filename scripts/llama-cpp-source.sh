# Sourced by the scripts that use llama.cpp (llama-server-suite.sh, reference.sh): the
# reference is llama.cpp as vendored in PyPI's llama-cpp-python source package, pinned here.
#   llama_cpp_source DIR    unpacks it into DIR once (fetched from PyPI's simple index and
#                           checked against the index's sha256) and prints the path of its
#                           vendor/llama.cpp
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_SOURCE_DIR="${LLAMA_CPP_SOURCE_DIR:-$HOME/.cache/edgellm/llama-server-suite}"

llama_cpp_source() {
  local dir="$1" version=$LLAMA_CPP_PYTHON_VERSION
  local src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
  if [ ! -f "$src/CMakeLists.txt" ]; then
    mkdir -p "$dir"
    echo "fetching llama-cpp-python $version's source from PyPI" >&2
    python3 - "$version" "$dir" <<'PY'
import hashlib, re, sys, urllib.request
version, d = sys.argv[1], sys.argv[2]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
m = re.search(r'href="([^"#]*/(llama_cpp_python-%s\.tar\.gz))#sha256=([0-9a-f]{64})"' % re.escape(version), index)
if not m:
    sys.exit("no llama_cpp_python-%s.tar.gz on PyPI's index" % version)
url, name, sha = m.groups()
data = urllib.request.urlopen(url).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("the sdist's sha256 does not match PyPI's")
with open("%s/%s" % (d, name), "wb") as f:
    f.write(data)
PY
    tar -xzf "$dir/llama_cpp_python-$version.tar.gz" -C "$dir"
  fi
  echo "$src"
}
