#!/usr/bin/env python3
"""Expected server outputs for the tiny qwen2 fixture, from HF `tokenizers` only.

Reads tests/fixtures/models/qwen2/reference.json (HF transformers greedy ids and chat
rendering) and writes tests/server/expected.json:
  - greedy_text: HF decode(greedy_new_ids, skip_special_tokens=True), what
    /v1/completions must return for prompt_ids with greedy sampling and max_tokens 16;
  - stop: a stop string spanning the boundary of two generated tokens, and the text
    that must come back (everything before its first occurrence);
  - chat_prompt_tokens: len(chat.ids), the prompt token count for chat.messages.
Run: /work/venv/bin/python tests/server/gen_expected.py
"""
import json
import pathlib

from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/models/qwen2"

ref = json.loads((FIX / "reference.json").read_text())
tok = Tokenizer.from_file(str(FIX / "tokenizer.json"))
ids = ref["greedy_new_ids"]
text = tok.decode(ids, skip_special_tokens=True)
special = {381, 382, 383}


def byte_decoder():
    # GPT-2 bytes_to_unicode, inverted (the tokenizer's ByteLevel alphabet).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


bd = byte_decoder()
pieces = [b"" if i in special else bytes(bd[ch] for ch in tok.id_to_token(i)) for i in ids]
assert b"".join(pieces).decode("utf-8", errors="replace") == text
# A stop string made of the last byte of one ASCII piece and the first of the next:
# it can only be seen once both tokens are out.
stop, boundary = None, 0
for k in range(len(pieces) - 1):
    a, b = pieces[k], pieces[k + 1]
    if a and b and a.isascii() and b.isascii() and a[-1:].isalpha() and b[:1].isalpha():
        cand = (a[-1:] + b[:1]).decode()
        pre = b"".join(pieces[: k + 1])[:-1].decode("utf-8", errors="replace")
        if cand not in pre + cand[:1]:
            stop, boundary = cand, len(pre)
            break
assert stop is not None
assert text.find(stop) == boundary, (text, stop)
spans = [p.decode("utf-8", errors="replace") for p in pieces]
out = {
    "model": "tests/fixtures/models/qwen2/model-f32.gguf",
    "prompt_ids": ref["prompt_ids"],
    "greedy_new_ids": ids,
    "greedy_text": text,
    "token_pieces": spans,
    "stop": stop,
    "text_before_stop": text[:boundary],
    "chat_messages": ref["chat"]["messages"],
    "chat_prompt_tokens": len(ref["chat"]["ids"]),
    "source": "HF tokenizers " + __import__("tokenizers").__version__ + " on reference.json (HF transformers greedy)",
}
(ROOT / "tests/server/expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
print(json.dumps(out, ensure_ascii=False)[:600])
