#!/usr/bin/env python3
"""Render the expected outputs of the chat-template tests with the reference renderer.

For every NAME.jinja in this directory and every NAME.CASE.json next to it, render the
template with the variables of the JSON object and write NAME.CASE.txt; when the template
raises (raise_exception, an error), write the error message to NAME.CASE.err instead.

The environment is the one Hugging Face transformers builds in
src/transformers/utils/chat_template_utils.py (_compile_jinja_template) for
apply_chat_template:

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=indent,
                                   separators=separators, sort_keys=sort_keys)
    globals["raise_exception"] raises TemplateError(message)
    globals["strftime_now"] = datetime.now().strftime(format)

AssistantTracker's {% generation %} tag is reproduced without its index bookkeeping (it
renders its body either way). The context is passed as is: template.render(**context).

Usage (not run by CI; the outputs are committed):
    python3 -m venv /tmp/jinja-venv && /tmp/jinja-venv/bin/pip install jinja2==3.1.6
    /tmp/jinja-venv/bin/python tests/data/templates/render.py
"""
import json
import pathlib
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body, as transformers' AssistantTracker."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    here = pathlib.Path(__file__).resolve().parent
    env = environment()
    count = 0
    for template_path in sorted(here.glob("*.jinja")):
        name = template_path.stem
        source = template_path.read_text(encoding="utf-8")
        template = env.from_string(source)
        for context_path in sorted(here.glob(f"{name}.*.json")):
            case = context_path.name[len(name) + 1 : -len(".json")]
            context = json.loads(context_path.read_text(encoding="utf-8"))
            out = here / f"{name}.{case}.txt"
            err = here / f"{name}.{case}.err"
            for stale in (out, err):
                stale.unlink(missing_ok=True)
            try:
                text = template.render(**context)
                out.write_text(text, encoding="utf-8", newline="")
            except jinja2.exceptions.TemplateError as e:
                err.write_text(str(e), encoding="utf-8", newline="")
            count += 1
    print(f"rendered {count} cases with jinja2 {jinja2.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
