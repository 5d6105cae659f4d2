"""Large differential sweep against the llama.cpp library (not committed output).

Builds batch_tokenize.cpp (links libllama from a llama.cpp build; one model
load per vocabulary instead of one process per text), tokenizes N seeded random
strings with every vocabulary, and writes the cases to OUT in the format of
fuzz_llamacpp.json. Then run:
  ANEDVD_FUZZ_LLAMACPP=OUT cargo test -p anedvd-tokenizer --test fuzz_goldens
Usage: python sweep_llamacpp.py N SEED OUT
Env: LLAMACPP_BIN (default /root/.cache/llamacpp-ref/bin), ANEDVD_LLAMACPP_SRC, ANEDVD_GEMMA3_GGUF.
"""
import os
import subprocess
import sys

from fuzz_corpus import random_strings
from gen_fuzz import GEMMA, SRC, dump

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("LLAMACPP_BIN", "/root/.cache/llamacpp-ref/bin")
NAMES = ["llama-spm", "llama-bpe", "qwen2", "qwen35", "gpt-2", "phi-3", "deepseek-llm", "deepseek-coder",
         "starcoder", "falcon", "command-r", "refact", "mpt", "gemma-4"]


def main():
    n, seed, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    exe = os.path.join(os.path.dirname(out_path) or ".", "batch_tokenize")
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{SRC}/include", f"-I{SRC}/ggml/include",
                    os.path.join(HERE, "batch_tokenize.cpp"), f"-L{BIN}", "-lllama", "-lggml", "-lggml-base",
                    f"-Wl,-rpath,{BIN}", "-o", exe], check=True)
    texts = random_strings(n, seed=seed)
    out = {}
    for g in [GEMMA] + [os.path.join(SRC, "models", f"ggml-vocab-{x}.gguf") for x in NAMES]:
        if not os.path.exists(g):
            continue
        res = subprocess.run([exe, g], input="\x1e\n".join(texts).encode(), capture_output=True, check=True)
        cases = []
        for t, line in zip(texts, res.stdout.decode().split("\n")):
            a, b = line.split("|")
            cases.append([t, [int(x) for x in a.split()], [int(x) for x in b.split()]])
        out[os.path.basename(g)] = cases
        print(os.path.basename(g), len(cases))
    dump(out_path, out)


if __name__ == "__main__":
    main()
