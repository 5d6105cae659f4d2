#!/usr/bin/env python3
"""Regenerate the built-in chat templates in this folder from their upstream sources.

Usage: /work/venv/bin/python crates/chat/templates/extract_templates.py [LLAMACPP_SRC]

Sources (all official, transformers-compatible `chat_template` texts):
  gemma    google/gemma-3-*-it tokenizer_config.json `chat_template` (JSON string below, verbatim)
  chatml   teknium/OpenHermes-2.5-Mistral-7B (plain ChatML), as quoted in llama.cpp tests/test-chat-template.cpp
  llama3   meta-llama/Llama-3.1-8B-Instruct, llama.cpp models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja
  llama2   meta-llama/Llama-2-13b-chat-hf tokenizer_config.json `chat_template` (verbatim below)
  mistral  mistralai/Mistral-7B-Instruct-v0.2 ("v1" template with system prompt), llama.cpp test-chat-template.cpp
  phi3     microsoft/Phi-3.5-mini-instruct, llama.cpp models/templates/microsoft-Phi-3.5-mini-instruct.jinja
  lfm2     LiquidAI/LFM2-8B-A1B, llama.cpp models/templates/LFM2-8B-A1B.jinja
  smollm2  HuggingFaceTB/SmolLM2-135M-Instruct tokenizer_config.json `chat_template` (verbatim below)
  qwen3    Qwen/Qwen3-0.6B, llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja
"""
import json
import os
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "/root/.cache/llamacpp-ref/src"
HERE = os.path.dirname(os.path.abspath(__file__))

# JSON string values exactly as they appear in the models' tokenizer_config.json.
GEMMA3_JSON = r'''"{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"'''

LLAMA2_JSON = r'''"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"'''

SMOLLM2_JSON = r'''"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"'''


def c_string_after(path, marker):
    """Return the C++ string literal on the line after `marker` in llama.cpp's test file, unescaped."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if marker in line:
            lit = lines[i + 1].strip()
            assert lit.startswith('/* .template_str= */ "') and lit.endswith('",'), lit
            body = lit[len('/* .template_str= */ "'):-2]
            out, j = [], 0
            while j < len(body):
                c = body[j]
                if c == "\\":
                    n = body[j + 1]
                    out.append({"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}[n])
                    j += 2
                else:
                    out.append(c)
                    j += 1
            return "".join(out)
    raise KeyError(marker)


def main():
    tests = os.path.join(SRC, "tests", "test-chat-template.cpp")
    tdir = os.path.join(SRC, "models", "templates")
    out = {
        "gemma": json.loads(GEMMA3_JSON),
        "llama2": json.loads(LLAMA2_JSON),
        "smollm2": json.loads(SMOLLM2_JSON),
        "chatml": c_string_after(tests, '"teknium/OpenHermes-2.5-Mistral-7B"'),
        "mistral": c_string_after(tests, "(mistralai 'v1' template with a system prompt)"),
    }
    for name, fname in [
        ("llama3", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
        ("phi3", "microsoft-Phi-3.5-mini-instruct.jinja"),
        ("lfm2", "LFM2-8B-A1B.jinja"),
        ("qwen3", "Qwen-Qwen3-0.6B.jinja"),
    ]:
        out[name] = open(os.path.join(tdir, fname), encoding="utf-8").read()
    for name, text in out.items():
        with open(os.path.join(HERE, name + ".jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        print(name, len(text))


if __name__ == "__main__":
    main()
