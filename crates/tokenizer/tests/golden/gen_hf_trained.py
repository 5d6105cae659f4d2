"""Small tokenizer.json fixtures trained with HF `tokenizers`, and their golden ids.

Writes, next to this script:
* trained_bytelevel.json  - byte-level BPE, NFC, Llama-3 Split regex +
  ByteLevel(use_regex=false), TemplateProcessing BOS, special and non-special
  added tokens (lstrip/rstrip, normalized).
* trained_gpt2.json       - byte-level BPE, Digits + ByteLevel(add_prefix_space,
  GPT-2 regex), ByteLevel post-processor.
* trained_spm.json        - SentencePiece-style BPE: Prepend+Replace
  normalizer, byte_fallback <0xXX>, unk, Replace/ByteFallback/Fuse/Strip decoder.
* trained_metaspace.json  - the same model behind a Metaspace pre-tokenizer
  (prepend_scheme "first") and Metaspace decoder.
* hf_trained.json         - for each fixture and each corpus text: ids with and
  without add_special_tokens, and decode(plain ids).

Committed fixtures are reused; pass --retrain to train them again (then
rerun gen_fuzz.py too). Training text: the shared corpus plus the source of a few Python stdlib
modules, so the run is reproducible anywhere.
"""
import inspect
import json
import os
import sys

import argparse as _argparse
import textwrap as _textwrap
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from corpus import CORPUS

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Extra cases for added-token options (lstrip/rstrip, normalized, special).
ADDED_CASES = ["a <tool> b", "x  \t<tool>\n\ny", "<tool><tool>", "hello world", "say hello world now",
               "<|im_start|>hello world<|im_end|>\n", "Hello World", "<start_of_turn>hi<end_of_turn>"]
TEXTS = CORPUS * 3 + inspect.getsource(_argparse).splitlines() + inspect.getsource(_textwrap).splitlines()


def bytelevel():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=1200, special_tokens=["<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 0)])
    tok.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("hello world", normalized=True)])
    return tok


def gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True),
    ])
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def spm():
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
        limit_alphabet=120, show_progress=False))
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.add_special_tokens(["<start_of_turn>", "<end_of_turn>"])
    # Byte tokens are vocabulary entries, not added tokens (as in converted SentencePiece models).
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in byte_tokens]
    return Tokenizer.from_str(json.dumps(j))


def metaspace(spm_tok):
    j = json.loads(spm_tok.to_str())
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                    "split": False}]}
    return Tokenizer.from_str(json.dumps(j))


def main():
    # Training is not bit-reproducible across runs (SentencePiece-style
    # alphabet ties), so committed fixtures are kept unless --retrain is given.
    retrain = "--retrain" in sys.argv
    builders = {"trained_bytelevel": bytelevel, "trained_gpt2": gpt2, "trained_spm": spm,
                "trained_metaspace": lambda: metaspace(Tokenizer.from_file(os.path.join(HERE, "trained_spm.json")))}
    expected = {}
    for name, build in builders.items():
        path = os.path.join(HERE, name + ".json")
        if retrain or not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(build().to_str())
        tok = Tokenizer.from_file(path)
        cases = []
        for text in CORPUS + ADDED_CASES:
            plain = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "add": tok.encode(text, add_special_tokens=True).ids, "plain": plain,
                          "decoded": tok.decode(plain, skip_special_tokens=False)})
        expected[name] = cases
        print(name, os.path.getsize(path), "bytes")
    with open(os.path.join(HERE, "hf_trained.json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(
            f'"{n}": [\n' + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cs) + "\n]"
            for n, cs in expected.items()) + "\n}\n")


if __name__ == "__main__":
    main()
