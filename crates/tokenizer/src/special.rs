//! Splitting text on special / added tokens before the model runs.
//!
//! Two policies: llama.cpp's (every special token in order of decreasing
//! length claims all its occurrences in the still-raw fragments) and HF
//! `tokenizers`' (leftmost-longest scan). Both use one byte trie.

use crate::vocab::TokenAttr;
use std::collections::BTreeMap;
use std::ops::Range;

/// A piece of input: raw text (a byte range of the input) or a matched token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    id: u32,
    len: usize,
    attr: TokenAttr,
}

#[derive(Debug, Default, Clone)]
struct Node {
    children: Vec<(u8, u32)>,
    entry: Option<u32>,
}

/// A trie over the texts of the tokens that are matched verbatim.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecialMatcher {
    nodes: Vec<Node>,
    entries: Vec<Entry>,
}

impl SpecialMatcher {
    /// Builds the trie from `(id, text, attr)`; empty texts are ignored.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a str, TokenAttr)>) -> Self {
        let mut m = SpecialMatcher {
            nodes: vec![Node::default()],
            entries: Vec::new(),
        };
        for (id, text, attr) in tokens {
            if text.is_empty() {
                continue;
            }
            let mut node = 0usize;
            for &b in text.as_bytes() {
                let next = match m.nodes[node].children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => m.nodes[node].children[i].1 as usize,
                    Err(i) => {
                        let new = m.nodes.len();
                        m.nodes.push(Node::default());
                        m.nodes[node].children.insert(i, (b, new as u32));
                        new
                    }
                };
                node = next;
            }
            let e = m.entries.len() as u32;
            m.entries.push(Entry {
                id,
                len: text.len(),
                attr,
            });
            // A later token with the same text replaces the earlier one.
            m.nodes[node].entry = Some(e);
        }
        m
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self
                .nodes
                .iter()
                .map(|n| n.children.capacity() * std::mem::size_of::<(u8, u32)>())
                .sum::<usize>()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// Calls `f(entry_index)` for every token that starts at `text[pos..]`.
    fn matches_at(&self, text: &[u8], pos: usize, mut f: impl FnMut(u32)) {
        let mut node = 0usize;
        for &b in &text[pos..] {
            let n = &self.nodes[node];
            match n.children.binary_search_by_key(&b, |c| c.0) {
                Ok(i) => node = n.children[i].1 as usize,
                Err(_) => return,
            }
            if let Some(e) = self.nodes[node].entry {
                f(e);
            }
        }
    }

    /// llama.cpp's `tokenizer_st_partition`. Control and unknown tokens take
    /// part only when `parse_special`; user-defined tokens always do.
    pub fn partition_llama(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let allowed = |e: &Entry| parse_special || !e.attr.is_special();
        let bytes = text.as_bytes();
        // All occurrences, grouped per entry.
        let mut occ: BTreeMap<(std::cmp::Reverse<usize>, u32), Vec<usize>> = BTreeMap::new();
        if !self.entries.is_empty() {
            for (pos, _) in text.char_indices() {
                self.matches_at(bytes, pos, |e| {
                    let entry = &self.entries[e as usize];
                    if allowed(entry) {
                        occ.entry((std::cmp::Reverse(entry.len), entry.id))
                            .or_default()
                            .push(pos);
                    }
                });
            }
        }
        let mut raw: BTreeMap<usize, usize> = BTreeMap::new();
        raw.insert(0, text.len());
        let mut toks: BTreeMap<usize, u32> = BTreeMap::new();
        let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
        for ((std::cmp::Reverse(len), id), positions) in occ {
            let attr = self
                .entries
                .iter()
                .find(|e| e.id == id)
                .map(|e| e.attr)
                .unwrap_or_default();
            for p in positions {
                let Some((&s, &e)) = raw.range(..=p).next_back() else {
                    continue;
                };
                if p + len > e {
                    continue;
                }
                raw.remove(&s);
                let mut left_end = p;
                if attr.has(TokenAttr::LSTRIP) {
                    while left_end > s && is_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > s {
                    raw.insert(s, left_end);
                }
                let mut right = p + len;
                if attr.has(TokenAttr::RSTRIP) {
                    while right < e && is_space(bytes[right]) {
                        right += 1;
                    }
                }
                if right < e {
                    raw.insert(right, e);
                }
                toks.insert(p, id);
            }
        }
        let mut out = Vec::with_capacity(raw.len() + toks.len());
        let mut r = raw.into_iter().peekable();
        let mut t = toks.into_iter().peekable();
        loop {
            match (r.peek(), t.peek()) {
                (Some(&(rs, re)), Some(&(tp, id))) => {
                    if rs < tp {
                        out.push(Fragment::Text(rs..re));
                        r.next();
                    } else {
                        out.push(Fragment::Token(id));
                        t.next();
                    }
                }
                (Some(&(rs, re)), None) => {
                    out.push(Fragment::Text(rs..re));
                    r.next();
                }
                (None, Some(&(_, id))) => {
                    out.push(Fragment::Token(id));
                    t.next();
                }
                (None, None) => break,
            }
        }
        out
    }

    /// HF `tokenizers`' added-token split: leftmost-longest, with
    /// `single_word`, `lstrip` and `rstrip`. `filter` selects the entries that
    /// take part (by attribute). Returned ranges are relative to `text`.
    pub fn partition_hf(&self, text: &str, filter: impl Fn(TokenAttr) -> bool) -> Vec<Fragment> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut start_offset = 0usize;
        let mut pos = 0usize;
        while pos < text.len() {
            let mut best: Option<Entry> = None;
            if !self.entries.is_empty() {
                self.matches_at(bytes, pos, |e| {
                    let entry = self.entries[e as usize];
                    if filter(entry.attr) && word_ok(text, pos, entry) {
                        best = Some(entry);
                    }
                });
            }
            let Some(entry) = best else {
                pos += text[pos..].chars().next().map_or(1, char::len_utf8);
                continue;
            };
            let mut start = pos;
            let mut stop = pos + entry.len;
            if entry.attr.has(TokenAttr::LSTRIP) {
                let trimmed = text[..start].trim_end_matches(char::is_whitespace).len();
                start = trimmed.max(start_offset);
            }
            if entry.attr.has(TokenAttr::RSTRIP) {
                stop = text.len() - text[stop..].trim_start_matches(char::is_whitespace).len();
            }
            if start > start_offset {
                out.push(Fragment::Text(start_offset..start));
            }
            out.push(Fragment::Token(entry.id));
            start_offset = stop;
            pos = (pos + entry.len).max(stop);
        }
        if start_offset < text.len() {
            out.push(Fragment::Text(start_offset..text.len()));
        }
        out
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn word_ok(text: &str, pos: usize, e: Entry) -> bool {
    if !e.attr.has(TokenAttr::SINGLE_WORD) {
        return true;
    }
    let before = text[..pos].chars().next_back().is_some_and(is_word_char);
    let after = text[pos + e.len..].chars().next().is_some_and(is_word_char);
    !before && !after
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> SpecialMatcher {
        SpecialMatcher::new([
            (1, "<a>", TokenAttr::CONTROL),
            (2, "a><b", TokenAttr::CONTROL),
            (3, "\n", TokenAttr::USER_DEFINED),
            (4, "\n\n", TokenAttr::USER_DEFINED),
        ])
    }

    #[test]
    fn llama_longest_first() {
        let f = m().partition_llama("x<a><b>\n\n\ny", true);
        assert_eq!(
            f,
            vec![
                Fragment::Text(0..2),
                Fragment::Token(2),
                Fragment::Text(6..7),
                Fragment::Token(4),
                Fragment::Token(3),
                Fragment::Text(10..11)
            ]
        );
        // control tokens stay text without parse_special; user-defined still split
        let f = m().partition_llama("<a>\n", false);
        assert_eq!(f, vec![Fragment::Text(0..3), Fragment::Token(3)]);
    }

    #[test]
    fn hf_leftmost_longest() {
        let f = m().partition_hf("x<a><b>\n\n\ny", |_| true);
        assert_eq!(
            f,
            vec![
                Fragment::Text(0..1),
                Fragment::Token(1),
                Fragment::Text(4..7),
                Fragment::Token(4),
                Fragment::Token(3),
                Fragment::Text(10..11)
            ]
        );
    }
}
