#!/usr/bin/env python3
"""The server binary llama.cpp's server test suite starts (LLAMA_SERVER_BIN_PATH), for
scripts/llama-server-suite.sh: it maps the suite's Hugging Face models to local packaged
ones, then becomes `edgellm serve ARGS` or `llama-server ARGS` (exec: the suite sees the
server's own pid). Every other argument is passed on as the test wrote it.

Mapping (the same for both servers, so their results compare):
  --hf-repo / -hf / -hfr REPO[:QUANT] [--hf-file / -hff FILE]  ->  -m LOCAL
  --hf-repo-draft / -hfd REPO[:QUANT]                         ->  -md LOCAL
  a repo or file naming Qwen -> Qwen2.5-Coder 0.5B Q4_K_M (1.5B for a 1.5B one); anything
  else (stories260K, stories15M, tinygemma3, bert, jina, llama 8B, ...) -> Gemma 3 270M.
Router mode (no model on the command line): both servers list the models in llama.cpp's
download cache ($LLAMA_CACHE, Hugging Face's layout; scripts/llama-server-suite.sh sets it to
$SUITE_DIR/cache); the wrapper puts there, for the repositories the router tests name, links
to the same local models, by the rule above.
Environment: SUITE_SERVER (edgellm | llama), SUITE_BIN (its binary), EDGELLM_MODELS, LLAMA_CACHE.
"""
import os
import sys

MODELS = os.environ.get("EDGELLM_MODELS") or os.path.expanduser("~/.cache/edgellm/models")
GEMMA = "gemma-3-270m-q4_k_m.gguf"
QWEN_SMALL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

REPO_FLAGS = {"--hf-repo", "-hf", "-hfr"}
FILE_FLAGS = {"--hf-file", "-hff"}
DRAFT_FLAGS = {"--hf-repo-draft", "-hfd"}


def local_model(names):
    text = " ".join(n for n in names if n).lower()
    if "qwen" in text:
        name = QWEN if "1.5b" in text else QWEN_SMALL
    else:
        name = GEMMA
    return os.path.join(MODELS, name)


def translate(args):
    out, repo, hf_file, draft = [], None, None, None
    i = 0
    while i < len(args):
        a = args[i]
        key, eq, val = a.partition("=")
        flag = key if eq else a
        if flag in REPO_FLAGS | FILE_FLAGS | DRAFT_FLAGS:
            if not eq:
                i += 1
                val = args[i] if i < len(args) else ""
            if flag in REPO_FLAGS:
                repo = val
            elif flag in FILE_FLAGS:
                hf_file = val
            else:
                draft = val
        else:
            out.append(a)
        i += 1
    if repo is not None:
        out += ["-m", local_model([repo, hf_file])]
    if draft is not None:
        out += ["-md", local_model([draft])]
    return out


# The router tests' models: repository -> the file name llama.cpp would have downloaded.
# (Not ggml-org/test-model-router-download: test_router_download_model wants it absent.)
ROUTER_REPOS = {
    "ggml-org/tinygemma3-GGUF": "tinygemma3-Q8_0.gguf",
    "ggml-org/test-model-stories260K": "stories260K-F32.gguf",
    "ggml-org/test-model-stories260K-infill": "stories260K-infill-F32.gguf",
}
COMMIT = "0" * 40


def router_cache():
    root = os.environ.get("LLAMA_CACHE")
    if not root:
        return
    for repo, name in ROUTER_REPOS.items():
        top = os.path.join(root, "models--" + repo.replace("/", "--"))
        snap = os.path.join(top, "snapshots", COMMIT)
        os.makedirs(snap, exist_ok=True)
        os.makedirs(os.path.join(top, "refs"), exist_ok=True)
        with open(os.path.join(top, "refs", "main"), "w") as f:
            f.write(COMMIT)
        link = os.path.join(snap, name)
        target = local_model([repo, name])
        if os.path.islink(link) and os.readlink(link) != target:
            os.unlink(link)
        if not os.path.lexists(link):
            os.symlink(target, link)


def main():
    server = os.environ.get("SUITE_SERVER", "edgellm")
    binary = os.environ["SUITE_BIN"]
    args = translate(sys.argv[1:])
    if "-m" not in args and "--model" not in args:
        router_cache()
    argv = [binary, "serve", *args] if server == "edgellm" else [binary, *args]
    sys.stderr.write("suite-wrap: %s\n" % " ".join(argv))
    sys.stderr.flush()
    os.execv(binary, argv)


if __name__ == "__main__":
    main()
