#!/usr/bin/env python3
"""Renders chat templates with Python Jinja2 in Hugging Face's apply_chat_template environment.

Usage: jinja2_oracle.py CASES_JSON TEMPLATE [TEMPLATE ...] > results.json
       jinja2_oracle.py --snippets SNIPPETS_JSON > results.json

TEMPLATE is a .jinja file, or a tokenizer_config.json whose "chat_template" is used (a string, or the
list-of-{name, template} form, from which "default" is taken). CASES_JSON holds {"defaults": {...},
"cases": [{"id", "context"}]}; each case renders with defaults updated by its context, passed as keyword
arguments as transformers does (messages=..., tools=..., add_generation_prompt=..., bos_token=..., ...).

Output: {"<TEMPLATE>": [{"id", "output"} or {"id", "error"}], ...}. bloomery's test renders the same
template and context in C++ and requires identical bytes (or an error where Jinja2 raised one).

The environment mirrors transformers' _compile_jinja_template: ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, a {% generation %} tag that renders its body,
tojson = json.dumps(ensure_ascii=False, indent, separators, sort_keys), raise_exception and strftime_now.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body (HF uses it to mark assistant tokens)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_template(path):
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            tpl = json.load(f)["chat_template"]
        if isinstance(tpl, list):
            tpl = next(t["template"] for t in tpl if t.get("name") == "default")
        return tpl
    with open(path, encoding="utf-8") as f:
        return f.read()


def render_snippets(path):
    """SNIPPETS_JSON: [{"id", "template", "context"}] -> [{"id", "output"} or {"id", "error"}]."""
    with open(path, encoding="utf-8") as f:
        snippets = json.load(f)
    env = make_env()
    rows = []
    for sn in snippets:
        try:
            rows.append({"id": sn["id"], "output": env.from_string(sn["template"]).render(**sn.get("context", {}))})
        except Exception as e:  # noqa: BLE001
            rows.append({"id": sn["id"], "error": f"{type(e).__name__}: {e}"})
    json.dump(rows, sys.stdout, ensure_ascii=False)


def main():
    if sys.argv[1] == "--snippets":
        render_snippets(sys.argv[2])
        return
    cases_path, templates = sys.argv[1], sys.argv[2:]
    with open(cases_path, encoding="utf-8") as f:
        corpus = json.load(f)
    env = make_env()
    out = {}
    for path in templates:
        compiled = env.from_string(load_template(path))
        rows = []
        for case in corpus["cases"]:
            ctx = dict(corpus.get("defaults", {}))
            ctx.update(case["context"])
            try:
                rows.append({"id": case["id"], "output": compiled.render(**ctx)})
            except Exception as e:  # noqa: BLE001 - any Jinja2/Python error must be an error in C++ too
                rows.append({"id": case["id"], "error": f"{type(e).__name__}: {e}"})
        out[path] = rows
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
