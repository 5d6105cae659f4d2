#!/usr/bin/env python3
"""Expected chat-template renderings for the server's template tests, from HF transformers.

Renders conversations through `PreTrainedTokenizerFast.apply_chat_template` (transformers'
own Jinja environment) for the tiny qwen2 fixture, with its own template and with the
templates the tests give in its place (a built-in of crates/chat/templates, and an inline
one that reads a `chat_template_kwargs` variable), with the GGUF's BOS text as `bos_token`, and writes
tests/server/template_expected.json: each case's request fields, the rendered text, and
the ids transformers tokenizes it to (add_special_tokens=False, as apply_chat_template).
Run: python tests/server/gen_template_expected.py   (needs transformers, jinja2, gguf)
"""
import json
import pathlib

import gguf
import transformers
from transformers import PreTrainedTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/models/qwen2"
tok = PreTrainedTokenizerFast.from_pretrained(str(FIX))
# The server serves the GGUF; templates get its BOS text as `bos_token`, as llama.cpp
# passes it. This GGUF names no BOS, so it is llama.cpp's default for a `gpt2` (BPE)
# vocab, id 11 (llama-vocab.cpp); the HF config of the fixture leaves it unset.
reader = gguf.GGUFReader(str(FIX / "model-f32.gguf"))
assert reader.fields["tokenizer.ggml.model"].contents() == "gpt2"
bos_field = reader.fields.get("tokenizer.ggml.bos_token_id")
bos_id = int(bos_field.contents()) if bos_field else 11
BOS = reader.fields["tokenizer.ggml.tokens"].contents()[bos_id]
own = (FIX / "chat_template.jinja").read_text()
llama3 = (ROOT / "crates/chat/templates/llama3.jinja").read_text()
INLINE = "{% for m in messages %}[{{ greeting }}] {{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"

CHAT = [
    {"role": "system", "content": "You are a tiny test model."},
    {"role": "user", "content": "What is the capital of France?"},
]
PREFILL = CHAT + [{"role": "assistant", "content": "The capital is"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def case(name, template, messages, template_name="own", **kw):
    text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                   bos_token=BOS, **kw)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    body = {"messages": messages}
    for k in ("add_generation_prompt", "continue_final_message"):
        if k in kw:
            body[k] = kw[k]
    if "tools" in kw:
        body["tools"] = kw["tools"]
    extra = {k: v for k, v in kw.items() if k not in ("add_generation_prompt", "continue_final_message", "tools")}
    if extra:
        body["chat_template_kwargs"] = extra
    return {"name": name, "template": template_name, "body": body, "text": text, "ids": ids}


cases = [
    case("own_generation_prompt", own, CHAT, add_generation_prompt=True),
    case("own_no_generation_prompt", own, CHAT, add_generation_prompt=False),
    case("own_prefill", own, PREFILL, continue_final_message=True),
    case("own_tools", own, CHAT, add_generation_prompt=True, tools=TOOLS),
    # the server passes today as `date_string` (as llama-server does): fixed here by the request
    case("builtin_llama3", llama3, CHAT, template_name="llama3", add_generation_prompt=True,
         date_string="01 Jan 2030"),
    case("inline_kwargs", INLINE, CHAT, template_name="inline", add_generation_prompt=True,
         greeting="hi"),
]
out = {
    "inline_template": INLINE,
    "cases": cases,
    "source": f"transformers {transformers.__version__} apply_chat_template on tests/fixtures/models/qwen2",
}
(ROOT / "tests/server/template_expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
for c in cases:
    print(c["name"], repr(c["text"][-60:]))
