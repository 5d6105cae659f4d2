//! Pre-tokenizer splitting: llama.cpp's hand-written GPT-2 / Llama 3 / Qwen2
//! splitters and a general regex splitter, applied in sequence (each rule
//! splits every piece the previous rules produced; matches and the text
//! between them both become pieces).

use crate::unicode::{is_letter, is_number, is_whitespace};
use crate::{Error, Result};
use std::ops::Range;

/// The GPT-2 pattern (also HF ByteLevel's built-in pattern, which adds `|\s+`).
pub(crate) const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const GPT2_PATTERN_HF: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3_PATTERN_ADAPTED: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_PATTERN_ADAPTED: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One splitting rule.
#[derive(Debug, Clone)]
pub(crate) enum Rule {
    /// GPT-2's pattern, hand-written.
    Gpt2,
    /// Llama 3's pattern with numbers grouped by `digits` (3: llama3, 1: qwen2).
    Llama3 { digits: usize },
    /// `[^\n]+|[\n]+`.
    Newlines,
    /// Any other pattern.
    Regex(Box<fancy_regex::Regex>),
    /// A pattern matched as llama.cpp's `std::wregex` path sees text: every
    /// non-ASCII whitespace character replaced by U+000B first (so it no
    /// longer matches explicit classes such as `[　-。]`).
    RegexFoldWs(Box<fancy_regex::Regex>),
}

impl Rule {
    /// The rule for `pattern`, using a hand-written splitter when one exists.
    pub fn from_pattern(pattern: &str) -> Result<Rule> {
        Ok(match pattern {
            GPT2_PATTERN | GPT2_PATTERN_HF => Rule::Gpt2,
            LLAMA3_PATTERN | LLAMA3_PATTERN_ADAPTED => Rule::Llama3 { digits: 3 },
            QWEN2_PATTERN | QWEN2_PATTERN_ADAPTED => Rule::Llama3 { digits: 1 },
            "[^\\n]+|[\\n]+" => Rule::Newlines,
            _ => Rule::Regex(Box::new(compile(pattern)?)),
        })
    }

    /// The rule for a pattern from llama.cpp's pre-tokenizer table: as
    /// [`Rule::from_pattern`], but patterns without Unicode categories run on
    /// whitespace-folded text, like llama.cpp's `std::wregex` fallback.
    pub fn from_llama_pattern(pattern: &str) -> Result<Rule> {
        Ok(match Rule::from_pattern(pattern)? {
            Rule::Regex(re) if !pattern.contains("\\p{") => Rule::RegexFoldWs(re),
            rule => rule,
        })
    }

    /// Byte ranges of the matches of this rule in `text` (non-overlapping,
    /// ascending). Hand-written rules match every character.
    pub fn find(&self, text: &str, out: &mut Vec<Range<usize>>) -> Result<()> {
        match self {
            Rule::Gpt2 => split_gpt2(text, out),
            Rule::Llama3 { digits } => split_llama3(text, *digits, out),
            Rule::Newlines => {
                let mut start = 0;
                let b = text.as_bytes();
                while start < b.len() {
                    let nl = b[start] == b'\n';
                    let mut end = start;
                    while end < b.len() && (b[end] == b'\n') == nl {
                        end += 1;
                    }
                    out.push(start..end);
                    start = end;
                }
            }
            Rule::RegexFoldWs(re) => {
                if text.chars().all(|c| c.is_ascii() || !is_whitespace(c)) {
                    return Rule::find_regex(re, text, out);
                }
                // Fold, match, and map the byte offsets back.
                let mut folded = String::with_capacity(text.len());
                // back[folded byte offset] = text byte offset, at char boundaries.
                let mut back: Vec<usize> = Vec::with_capacity(text.len() + 1);
                for (i, c) in text.char_indices() {
                    let f = if !c.is_ascii() && is_whitespace(c) {
                        '\u{b}'
                    } else {
                        c
                    };
                    back.resize(folded.len(), usize::MAX);
                    back.push(i);
                    folded.push(f);
                }
                back.resize(folded.len(), usize::MAX);
                back.push(text.len());
                let start = out.len();
                Rule::find_regex(re, &folded, out)?;
                for r in &mut out[start..] {
                    *r = back[r.start]..back[r.end];
                }
            }
            Rule::Regex(re) => Rule::find_regex(re, text, out)?,
        }
        Ok(())
    }

    fn find_regex(re: &fancy_regex::Regex, text: &str, out: &mut Vec<Range<usize>>) -> Result<()> {
        for m in re.find_iter(text) {
            let m = m.map_err(|e| Error::Regex {
                pattern: re.as_str().to_string(),
                detail: e.to_string(),
            })?;
            if m.start() < m.end() {
                out.push(m.start()..m.end());
            }
        }
        Ok(())
    }
}

/// Compiles a pattern from a tokenizer definition.
pub(crate) fn compile(pattern: &str) -> Result<fancy_regex::Regex> {
    fancy_regex::RegexBuilder::new(pattern)
        .backtrack_limit(10_000_000)
        .build()
        .map_err(|e| Error::Regex {
            pattern: pattern.to_string(),
            detail: e.to_string(),
        })
}

/// Applies `rules` in sequence (llama.cpp's `unicode_regex_split`): every
/// piece is split into matches and the gaps between them.
pub(crate) fn split_sequence(text: &str, rules: &[Rule]) -> Result<Vec<Range<usize>>> {
    let mut pieces: Vec<Range<usize>> = std::iter::once(0..text.len()).collect();
    let mut matches = Vec::new();
    for rule in rules {
        let mut next = Vec::with_capacity(pieces.len() * 2);
        for piece in pieces {
            matches.clear();
            rule.find(&text[piece.clone()], &mut matches)?;
            let mut at = 0;
            for m in &matches {
                if m.start > at {
                    next.push(piece.start + at..piece.start + m.start);
                }
                next.push(piece.start + m.start..piece.start + m.end);
                at = m.end;
            }
            if at < piece.len() {
                next.push(piece.start + at..piece.end);
            }
        }
        pieces = next;
    }
    pieces.retain(|p| !p.is_empty());
    Ok(pieces)
}

#[derive(Clone, Copy, Default)]
struct Flags {
    in_range: bool,
    letter: bool,
    number: bool,
    space: bool,
}

struct Chars {
    chars: Vec<(usize, char)>,
    len: usize,
}

impl Chars {
    fn new(text: &str) -> Self {
        Chars {
            chars: text.char_indices().collect(),
            len: text.len(),
        }
    }
    fn n(&self) -> usize {
        self.chars.len()
    }
    fn get(&self, i: usize) -> Option<char> {
        self.chars.get(i).map(|c| c.1)
    }
    fn flags(&self, i: usize) -> Flags {
        match self.get(i) {
            None => Flags::default(),
            Some(c) => Flags {
                in_range: true,
                letter: is_letter(c),
                number: is_number(c),
                space: is_whitespace(c),
            },
        }
    }
    fn byte(&self, i: usize) -> usize {
        self.chars.get(i).map_or(self.len, |c| c.0)
    }
}

fn contraction(cs: &Chars, pos: usize, lower: bool) -> Option<usize> {
    if cs.get(pos) != Some('\'') || pos + 1 >= cs.n() {
        return None;
    }
    let l = |c: Option<char>| {
        let c = c.unwrap_or('\0');
        if lower {
            c.to_ascii_lowercase()
        } else {
            c
        }
    };
    let next = l(cs.get(pos + 1));
    if matches!(next, 's' | 't' | 'm' | 'd') {
        return Some(pos + 2);
    }
    if pos + 2 < cs.n() {
        let nn = l(cs.get(pos + 2));
        if matches!((next, nn), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return Some(pos + 3);
        }
    }
    None
}

/// Port of llama.cpp's `unicode_regex_split_custom_gpt2`.
fn split_gpt2(text: &str, out: &mut Vec<Range<usize>>) {
    let cs = Chars::new(text);
    let n = cs.n();
    let mut prev = 0usize;
    let mut emit = |end: usize, prev: &mut usize| {
        if end > *prev {
            out.push(cs.byte(*prev)..cs.byte(end));
        }
        *prev = end;
    };
    let mut pos = 0usize;
    while pos < n {
        let c = cs.get(pos).unwrap_or('\0');
        if let Some(end) = contraction(&cs, pos, false) {
            emit(end, &mut prev);
            pos = end;
            continue;
        }
        let mut f2 = if c == ' ' {
            cs.flags(pos + 1)
        } else {
            cs.flags(pos)
        };
        if f2.letter || f2.number {
            let want_letter = f2.letter;
            pos += usize::from(c == ' ');
            while (want_letter && f2.letter) || (!want_letter && f2.number) {
                pos += 1;
                f2 = cs.flags(pos);
            }
            emit(pos, &mut prev);
            continue;
        }
        if !(f2.space || f2.letter || f2.number) && f2.in_range {
            pos += usize::from(c == ' ');
            while !(f2.space || f2.letter || f2.number) && f2.in_range {
                pos += 1;
                f2 = cs.flags(pos);
            }
            emit(pos, &mut prev);
            continue;
        }
        let mut ws = 0;
        while cs.flags(pos + ws).space {
            ws += 1;
        }
        if ws > 1 && cs.get(pos + ws).is_some() {
            pos += ws - 1;
            emit(pos, &mut prev);
            continue;
        }
        if ws > 0 {
            pos += ws;
            emit(pos, &mut prev);
            continue;
        }
        pos += 1;
        emit(pos, &mut prev);
    }
}

/// Port of llama.cpp's `unicode_regex_split_custom_llama3` (digits = 3) and
/// `..._qwen2` (digits = 1).
fn split_llama3(text: &str, digits: usize, out: &mut Vec<Range<usize>>) {
    let cs = Chars::new(text);
    let n = cs.n();
    let mut prev = 0usize;
    let mut emit = |end: usize, prev: &mut usize| {
        if end > *prev {
            out.push(cs.byte(*prev)..cs.byte(end));
        }
        *prev = end;
    };
    let mut pos = 0usize;
    while pos < n {
        let c = cs.get(pos).unwrap_or('\0');
        let f = cs.flags(pos);
        if let Some(end) = contraction(&cs, pos, true) {
            emit(end, &mut prev);
            pos = end;
            continue;
        }
        if !(c == '\r' || c == '\n' || f.number) && (f.letter || cs.flags(pos + 1).letter) {
            pos += 1;
            while cs.flags(pos).letter {
                pos += 1;
            }
            emit(pos, &mut prev);
            continue;
        }
        if f.number {
            let mut ini = pos;
            while cs.flags(pos).number {
                pos += 1;
                if pos - ini >= digits {
                    emit(pos, &mut prev);
                    ini = pos;
                }
            }
            emit(pos, &mut prev);
            continue;
        }
        let mut f2 = if c == ' ' { cs.flags(pos + 1) } else { f };
        if !(f2.space || f2.letter || f2.number) && f.in_range {
            pos += usize::from(c == ' ');
            while !(f2.space || f2.letter || f2.number) && f2.in_range {
                pos += 1;
                f2 = cs.flags(pos);
            }
            while matches!(cs.get(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            emit(pos, &mut prev);
            continue;
        }
        let mut ws = 0;
        let mut last_rn = 0;
        while cs.flags(pos + ws).space {
            if matches!(cs.get(pos + ws), Some('\r' | '\n')) {
                last_rn = pos + ws + 1;
            }
            ws += 1;
        }
        if last_rn > 0 {
            pos = last_rn;
            emit(pos, &mut prev);
            continue;
        }
        if ws > 1 && cs.get(pos + ws).is_some() {
            pos += ws - 1;
            emit(pos, &mut prev);
            continue;
        }
        if ws > 0 {
            pos += ws;
            emit(pos, &mut prev);
            continue;
        }
        pos += 1;
        emit(pos, &mut prev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str, rules: &[Rule]) -> Vec<String> {
        split_sequence(text, rules)
            .unwrap()
            .into_iter()
            .map(|r| text[r].to_string())
            .collect()
    }

    #[test]
    fn custom_matches_regex() {
        let samples = [
            "Hello world's 12345 test!!\n\n  \tfoo  bar\r\n x",
            "  leading and trailing   ",
            "Ünïcödé 中文字符 ١٢٣ 😀😀 don'T I'LL",
            "a\n\n\nb   \n c",
        ];
        for (custom, pattern) in [
            (Rule::Gpt2, GPT2_PATTERN_HF),
            (Rule::Llama3 { digits: 3 }, LLAMA3_PATTERN),
            (Rule::Llama3 { digits: 1 }, QWEN2_PATTERN),
        ] {
            let re = Rule::Regex(Box::new(compile(pattern).unwrap()));
            for s in samples {
                assert_eq!(
                    pieces(s, std::slice::from_ref(&custom)),
                    pieces(s, std::slice::from_ref(&re)),
                    "{pattern} on {s:?}"
                );
            }
        }
    }
}
