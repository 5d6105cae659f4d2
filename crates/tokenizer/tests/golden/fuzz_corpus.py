"""Seeded random strings for differential tests: mixes of scripts, whitespace
runs, digits, punctuation, contractions and special-token fragments."""
import random

PIECES = [
    "a", "b", "Z", "the", " the", "The", "ing", "'s", "'T", "'ll", "'RE", "n't", " ", "  ", "   ", "\t", "\n", "\n\n",
    "\r\n", "\u00a0", "\u3000", "\u2003", "0", "7", "42", "123", "2024", "3.14", "٣", "½", "Ⅻ", ".", ",", "!", "?",
    "...", "--", "==", "->", "::", "(", ")", "{", "}", "[", "]", "<", ">", "/", "\\", "\"", "'", "`", "#", "@", "$",
    "%", "^", "&", "*", "_", "+", "|", "~", "中", "文", "字", "日本", "カタ", "ひら", "한국", "مرحبا", "ب", "Привет",
    "ж", "Ελλάδα", "हिन्दी", "ก", "é", "e\u0301", "ß", "ﬁ", "Å", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "∑", "√", "≠",
    "\u200b", "\u200d", "\u00ad", "<", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<|im_start|>",
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<s>", "<unk>", "<start_of", "turn>", "<|", "|>", "▁", "Ġ",
    "<0x41>", "[INST]", "def ", "return ", "fn ", "let x = 1;", "http://", ".com", "\u0000", "\u007f", "\ufffd",
]


def random_strings(n, seed=1234):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 14)
        out.append("".join(rng.choice(PIECES) for _ in range(k)))
    return out
