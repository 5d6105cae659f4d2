"""Special ids as llama.cpp reports them (BOS/EOS/EOT/PAD and the EOG set).

Runs `llama-tokenize -v` on each vocabulary and parses its `print_info:` lines.
Writes eog_llamacpp.json next to this script, keyed by file name.
Usage: python gen_eog_llamacpp.py [LLAMA_TOKENIZE]
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXE = sys.argv[1] if len(sys.argv) > 1 else "/root/.cache/llamacpp-ref/bin/llama-tokenize"
SRC = os.environ.get("ANEDVD_LLAMACPP_SRC", "/root/.cache/llamacpp-ref/src")
GEMMA = os.environ.get("ANEDVD_GEMMA3_GGUF", "/root/.cache/models/gemma3-270m-q4_k_m.gguf")
NAMES = ["llama-spm", "llama-bpe", "qwen2", "qwen35", "gpt-2", "phi-3", "deepseek-llm", "deepseek-coder",
         "starcoder", "falcon", "command-r", "refact", "mpt", "gemma-4"]
FILES = [os.path.join(SRC, "models", f"ggml-vocab-{n}.gguf") for n in NAMES] + [GEMMA]

out = {}
for path in FILES:
    log = subprocess.run([EXE, "-m", path, "-p", "x", "-v"], capture_output=True, text=True).stderr
    info = {"eog": []}
    for m in re.finditer(r"print_info: (BOS|EOS|EOT|PAD|EOG) token\s+= (\d+) ", log):
        kind, tid = m.group(1).lower(), int(m.group(2))
        if kind == "eog":
            info["eog"].append(tid)
        else:
            info[kind] = tid
    info["eog"].sort()
    out[os.path.basename(path)] = info
    print(os.path.basename(path), info)

with open(os.path.join(HERE, "eog_llamacpp.json"), "w", encoding="utf-8") as f:
    f.write("{\n" + ",\n".join(f'"{k}": {json.dumps(v)}' for k, v in out.items()) + "\n}\n")
