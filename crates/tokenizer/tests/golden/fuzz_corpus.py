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


# Strings that once exposed a difference (kept in the committed goldens).
REGRESSIONS = [
    ",b\u041f\u0440\u0438\u0432\u0435\u0442\u65e5\u672c==123\u200d<   \u3000[",  # wregex folds U+3000
    "<0x41>\u00df\u6587\u0000&<|eot_id|><s>\u6587<0x41>  \u3000",
    "the\u0663\u4e2d<start_of \u00bd\u216b 42",  # HF Digits: every numeric char
]


def random_strings(n, seed=1234):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 14)
        out.append("".join(rng.choice(PIECES) for _ in range(k)))
    return out
