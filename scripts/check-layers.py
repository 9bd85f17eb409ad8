#!/usr/bin/env python3
"""The layer order, checked: every #include and every CMake link goes down, never up.

    scripts/check-layers.py [REPO]      exit 0 when the layers hold, 1 with each offence

Layers, bottom to top (docs/design.md, "Layers and rooms"): a file of a layer may include
the headers of the layers it is allowed (ALLOWED below, the same as its CMake target's
links), the public headers of those layers (include/edgellm/*.h, each owned by a layer),
and its own. apps/ include only include/edgellm/ and their own headers; examples/ only the
client SDK. CTest runs this as `layers`.
"""

import os
import re
import sys

# The rooms of src/, longest prefix first when they nest (src/server/http is a layer of its
# own below src/agent and the rest of src/server).
ROOMS = [
    ("src/server/http/", "http"),
    ("src/server/", "server"),
    ("src/agent/", "agent"),
    ("src/sys/", "sys"),
    ("src/modelfile/", "modelfile"),
    ("src/runtime/", "runtime"),
    ("src/text/", "text"),
    ("src/model/", "model"),
    ("src/compute/", "compute"),
    ("src/gguf/", "gguf"),
    ("src/kernels/", "kernels"),
    ("src/client/", "client"),
]

# Which layers each layer may use (directly or through another): the CMake links.
BELOW = {
    "sys": set(),
    "kernels": set(),
    "gguf": {"kernels"},
    "compute": {"kernels"},
    "model": {"gguf", "compute"},
    "text": {"gguf"},
    "runtime": {"model", "text"},
    "modelfile": {"runtime"},
    "client": set(),
    "http": set(),
    "agent": {"http", "client", "sys"},
    "server": {"agent", "runtime", "client", "sys"},
}


def closure(layer):
    seen, todo = set(), [layer]
    while todo:
        for b in BELOW[todo.pop()]:
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


ALLOWED = {layer: closure(layer) | {layer} for layer in BELOW}

# The public headers' owners (include/edgellm/NAME.h); "base" is for every layer.
PUBLIC = {
    "error": "base", "version": "base", "tensor_type": "kernels", "gguf": "gguf",
    "model": "model", "arch": "model", "tokenizer": "text", "chat": "text", "grammar": "text",
    "json_schema": "text", "sampler": "text", "session": "runtime",
    "prompt_cache": "runtime", "speculative": "runtime", "quantize": "modelfile",
    "synth": "modelfile", "convert": "modelfile", "client": "client", "server": "server", "kernels": "kernels",
    "cpu": "compute", "http": "http", "agent": "agent",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LINK = re.compile(r"target_link_libraries\((edgellm_\w+)([^)]*)\)", re.S)


def layer_of_path(rel):
    for prefix, layer in ROOMS:
        if rel.startswith(prefix):
            return layer
    return None


def header_layer(inc):
    """The layer an include names: a src/ path, or a public header."""
    if inc.startswith("edgellm/"):
        name = inc[len("edgellm/"):-2] if inc.endswith(".h") else inc[len("edgellm/"):]
        return PUBLIC.get(name, "unknown public header")
    return layer_of_path("src/" + inc)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = []
    for top in ("src", "apps", "include", "examples"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                text = open(path, encoding="utf-8", errors="replace").read()
                for inc in INCLUDE.findall(text):
                    if top in ("apps", "examples"):
                        local = os.path.exists(os.path.join(dirpath, inc))
                        public = inc.startswith("edgellm/") and os.path.exists(os.path.join(root, "include", inc))
                        if top == "examples" and public and inc != "edgellm/client.h":
                            bad.append(f"{rel}: includes {inc}: examples use only the client SDK")
                        elif not (local or public):
                            bad.append(f"{rel}: includes {inc}: apps use only include/edgellm/ and their own headers")
                        continue
                    if top == "include":
                        if not inc.startswith("edgellm/"):
                            bad.append(f"{rel}: includes {inc}: a public header includes only public headers")
                        continue
                    mine = layer_of_path(rel)
                    if mine is None:
                        bad.append(f"{rel}: in no layer (add its folder to scripts/check-layers.py)")
                        break
                    theirs = header_layer(inc)
                    if theirs is None:
                        continue  # (a header beside it, by a relative name)
                    if theirs == "base" or theirs in ALLOWED[mine]:
                        continue
                    if theirs not in BELOW:
                        bad.append(f"{rel}: includes {inc}: {theirs}")
                    else:
                        bad.append(f"{rel}: includes {inc}: the {mine} layer may not use the {theirs} layer")
    # The CMake targets: each links only the layers its layer may use.
    cmake = open(os.path.join(root, "CMakeLists.txt")).read()
    for target, args in LINK.findall(cmake):
        mine = target[len("edgellm_"):]
        if mine not in BELOW:
            continue
        for lib in re.findall(r"edgellm_(\w+)", args):
            if lib in BELOW and lib not in ALLOWED[mine]:
                bad.append(f"CMakeLists.txt: {target} links edgellm_{lib}: the {mine} layer may not use the {lib} layer")
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} include(s) or link(s) go up a layer or out of apps/")
        return 1
    print("check-layers: every include and link goes down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
