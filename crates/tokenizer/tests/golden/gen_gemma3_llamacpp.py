"""Golden ids for the Gemma 3 vocabulary, produced by llama.cpp's `llama-tokenize`.

Usage: python gen_gemma3_llamacpp.py [LLAMA_TOKENIZE] [GGUF]
Defaults: /root/.cache/llamacpp-ref/bin/llama-tokenize and
/root/.cache/models/gemma3-270m-q4_k_m.gguf. Writes gemma3_llamacpp.json
next to this script: for each corpus text the ids with the model's BOS and
special-token parsing (`llama-tokenize` defaults) and without either
(`--no-bos --no-parse-special`). Files are read verbatim (`--no-escape`).
"""
import json
import os
import subprocess
import sys
import tempfile

from corpus import CORPUS

HERE = os.path.dirname(os.path.abspath(__file__))
EXE = sys.argv[1] if len(sys.argv) > 1 else "/root/.cache/llamacpp-ref/bin/llama-tokenize"
GGUF = sys.argv[2] if len(sys.argv) > 2 else "/root/.cache/models/gemma3-270m-q4_k_m.gguf"


def run(text, extra):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        out = subprocess.run(
            [EXE, "-m", GGUF, "-f", path, "--ids", "--log-disable", "--no-escape", *extra],
            check=True, capture_output=True, text=True,
        ).stdout
    finally:
        os.unlink(path)
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return json.loads(line)


# A long English+code text (exercises the merge queue on one big fragment).
LONG = ("The tokenizer must agree with llama.cpp on every id. " * 40 + "\n" +
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n" * 20)

cases = []
for text in CORPUS + [LONG]:
    cases.append({
        "text": text,
        "bos_special": run(text, []),
        "plain": run(text, ["--no-bos", "--no-parse-special"]),
    })

with open(os.path.join(HERE, "gemma3_llamacpp.json"), "w", encoding="utf-8") as f:
    head = {"generator": "llama-tokenize (llama.cpp)", "model": os.path.basename(GGUF)}
    f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
    f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
    f.write("\n]}\n")
print(f"wrote {len(cases)} cases")
