#!/usr/bin/env python3
"""Render every golden case with HF transformers' own chat-template code.

Usage (from the repo root): /work/venv/bin/python crates/chat/tests/golden/gen_golden.py

Inputs:  cases.json (conversations + options), templates.json (which template text, bos/eos),
         ../../templates/*.jinja (built-ins) and templates/*.jinja (real templates copied from
         llama.cpp's models/templates, themselves fetched from the models' HF tokenizer configs).
Outputs: expected/<template>.json: {case: {"ok": text} | {"error": message, "raised": bool}}
         "raised" is true when the template called raise_exception(message).

The rendering is transformers.utils.chat_template_utils.render_jinja_template, the function
PreTrainedTokenizerBase.apply_chat_template calls (special tokens are passed as bos_token/eos_token,
as apply_chat_template does with special_tokens_map). strftime_now reads a fixed clock (cases.json
"now") so renderings do not depend on the date.
"""
import datetime as _dt
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.dirname(os.path.dirname(HERE))


def main():
    cases = json.load(open(os.path.join(HERE, "cases.json"), encoding="utf-8"))
    templates = json.load(open(os.path.join(HERE, "templates.json"), encoding="utf-8"))
    y, mo, d, h, mi, s = cases["now"]

    class FixedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(y, mo, d, h, mi, s)

    ctu.datetime = FixedDatetime  # strftime_now looks this global up at call time

    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    total = errors = 0
    for t in templates["templates"]:
        src = t["source"]
        if src.startswith("builtin:"):
            path = os.path.join(CRATE, "templates", src[len("builtin:"):] + ".jinja")
        else:
            path = os.path.join(HERE, src[len("file:"):])
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
        out = {}
        for case in cases["cases"]:
            if case.get("needs_tools") and "tools" not in text:
                continue
            if t.get("tools_only") and not case.get("tools"):
                # A `tool_use` template: transformers' get_chat_template picks it only when tools are passed.
                continue
            messages = ctu._normalize_chat_messages(case["messages"])
            kwargs = dict(case.get("kwargs", {}))
            try:
                rendered, _ = ctu.render_jinja_template(
                    conversations=[messages],
                    tools=case.get("tools"),
                    chat_template=text,
                    add_generation_prompt=case.get("add_generation_prompt", False),
                    continue_final_message=case.get("continue_final_message", False),
                    bos_token=t["bos"],
                    eos_token=t["eos"],
                    **kwargs,
                )
                out[case["name"]] = {"ok": rendered[0]}
            except Exception as e:  # noqa: BLE001 - every failure is recorded as an expected error
                raised = type(e) is jinja2.exceptions.TemplateError
                out[case["name"]] = {"error": str(e), "raised": raised}
                errors += 1
            total += 1
        with open(os.path.join(HERE, "expected", t["name"] + ".json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}: "
          f"{total} cases, {errors} expected errors", file=sys.stderr)


if __name__ == "__main__":
    main()
