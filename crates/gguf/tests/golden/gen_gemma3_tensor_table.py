#!/usr/bin/env python3
"""Writes gemma3_tensor_table.json: the tensor table and a few metadata values
of the Gemma 3 270M GGUF, as read by gguf-py's GGUFReader (llama.cpp's
reference Python reader). tests/gemma3.rs compares our reader against it.

Usage: /work/venv/bin/python gen_gemma3_tensor_table.py [MODEL.gguf]
(default: $ANEDVD_GEMMA3_GGUF or /root/.cache/models/gemma3-270m-q4_k_m.gguf)
"""
import json
import os
import sys

from gguf import GGUFReader, GGUFValueType

DEFAULT = "/root/.cache/models/gemma3-270m-q4_k_m.gguf"
KEYS = [
    "general.architecture",
    "general.alignment",
    "gemma3.block_count",
    "gemma3.context_length",
    "gemma3.embedding_length",
    "gemma3.feed_forward_length",
    "gemma3.attention.head_count",
    "gemma3.attention.head_count_kv",
    "gemma3.attention.key_length",
    "gemma3.attention.layer_norm_rms_epsilon",
    "gemma3.attention.sliding_window",
    "gemma3.rope.freq_base",
    "tokenizer.ggml.model",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "general.file_type",
]


def scalar(field):
    t = field.types[0]
    v = field.parts[field.data[0]]
    if t == GGUFValueType.STRING:
        return bytes(v).decode("utf-8")
    x = v.tolist()[0]
    return x


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ANEDVD_GEMMA3_GGUF", DEFAULT)
    r = GGUFReader(path)
    meta = {}
    for k in KEYS:
        f = r.fields.get(k)
        if f is not None:
            meta[k] = {"type": f.types[0].name, "value": scalar(f)}
    # Long arrays: length and element type only, plus the first tokens.
    arrays = {}
    for k in ["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"]:
        f = r.fields.get(k)
        if f is not None:
            first = []
            for idx in f.data[:5]:
                p = f.parts[idx]
                if f.types[1] == GGUFValueType.STRING:
                    first.append(bytes(p).decode("utf-8"))
                else:
                    first.append(p.tolist()[0])
            arrays[k] = {"element_type": f.types[1].name, "len": len(f.data), "first": first}
    tensors = []
    for t in r.tensors:
        raw = bytes(t.data.tobytes()) if hasattr(t.data, "tobytes") else bytes(t.data)
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
            "head_hex": raw[:8].hex(),
            "tail_hex": raw[-8:].hex(),
        })
    out = {
        "generator": "gen_gemma3_tensor_table.py (gguf-py GGUFReader)",
        "file_size": os.path.getsize(path),
        "version": int(r.fields["GGUF.version"].parts[-1][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "kv_count": len([k for k in r.fields if not k.startswith("GGUF.")]),
        "metadata": meta,
        "arrays": arrays,
        "tensors": tensors,
    }
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "gemma3_tensor_table.json"), "w") as fh:
        # One tensor per line keeps the file small and diffable.
        tensors = out.pop("tensors")
        text = json.dumps(out, indent=1, ensure_ascii=False)[:-2]
        rows = ",\n".join(json.dumps(t, ensure_ascii=False) for t in tensors)
        fh.write(text + ',\n "tensors": [\n' + rows + "\n ]\n}\n")


if __name__ == "__main__":
    main()
