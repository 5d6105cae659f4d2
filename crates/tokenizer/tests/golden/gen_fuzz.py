"""Differential goldens on seeded random strings (fuzz_corpus.py).

* fuzz_llamacpp.json: ids from llama.cpp `llama-tokenize` (BOS + parse-special
  and `--no-bos --no-parse-special`) for the Gemma 3 GGUF and several of
  llama.cpp's vocab GGUFs.
* fuzz_hf.json: ids from HF `tokenizers` (add_special_tokens True/False) for
  the committed trained fixtures and the cached real vocabularies of
  gen_hf_real.py.
Usage: python gen_fuzz.py [N] [--hf-only]
"""
import json
import os
import subprocess
import sys
import tempfile

from fuzz_corpus import REGRESSIONS, random_strings

HERE = os.path.dirname(os.path.abspath(__file__))
N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 50
EXE = "/root/.cache/llamacpp-ref/bin/llama-tokenize"
SRC = os.environ.get("ANEDVD_LLAMACPP_SRC", "/root/.cache/llamacpp-ref/src")
GEMMA = os.environ.get("ANEDVD_GEMMA3_GGUF", "/root/.cache/models/gemma3-270m-q4_k_m.gguf")
CACHE = os.environ.get("ANEDVD_TOKENIZER_CACHE", "/root/.cache/anedvd-tok/hf")
GGUFS = [GEMMA] + [os.path.join(SRC, "models", f"ggml-vocab-{n}.gguf")
                   for n in ["llama-spm", "llama-bpe", "qwen2", "deepseek-llm", "starcoder", "gpt-2"]]
TEXTS = REGRESSIONS + random_strings(N)


def llama_tokenize(gguf, text, extra):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        out = subprocess.run([EXE, "-m", gguf, "-f", path, "--ids", "--log-disable", "--no-escape", *extra],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads([l for l in out.splitlines() if l.startswith("[")][-1])


def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(
            f'"{k}": [\n' + ",\n".join(json.dumps(c, ensure_ascii=False) for c in v) + "\n]"
            for k, v in obj.items()) + "\n}\n")


def main():
    from tokenizers import Tokenizer
    hf = {}
    names = [("trained_bytelevel", os.path.join(HERE, "trained_bytelevel.json")),
             ("trained_gpt2", os.path.join(HERE, "trained_gpt2.json")),
             ("trained_spm", os.path.join(HERE, "trained_spm.json")),
             ("trained_metaspace", os.path.join(HERE, "trained_metaspace.json"))]
    names += [(n, os.path.join(CACHE, n, "tokenizer.json")) for n in ["deepseek-v3", "llama3", "qwen2", "gemma3"]]
    for name, path in names:
        tok = Tokenizer.from_file(path)
        hf[name] = [[t, tok.encode(t, add_special_tokens=True).ids, tok.encode(t, add_special_tokens=False).ids]
                    for t in TEXTS]
    dump(os.path.join(HERE, "fuzz_hf.json"), hf)
    if "--hf-only" in sys.argv:
        return
    ll = {}
    for gguf in GGUFS:
        ll[os.path.basename(gguf)] = [[t, llama_tokenize(gguf, t, []),
                                       llama_tokenize(gguf, t, ["--no-bos", "--no-parse-special"])] for t in TEXTS]
        print(os.path.basename(gguf), "done", flush=True)
    dump(os.path.join(HERE, "fuzz_llamacpp.json"), ll)


if __name__ == "__main__":
    main()
