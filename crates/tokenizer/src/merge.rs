//! The one merge engine behind both model kinds: a doubly linked list of
//! symbols and a priority queue over adjacent pairs. SentencePiece-style
//! vocabularies rank a pair by the score of the merged token, BPE
//! vocabularies by the rank of the merge rule; ties go to the leftmost pair
//! (exactly as llama.cpp's `llm_tokenizer_spm`/`llm_tokenizer_bpe` and HF
//! `tokenizers` break them).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Marks a symbol without a token id (a character missing from the vocabulary).
pub(crate) const NO_ID: u32 = u32::MAX;

/// One symbol: a byte range of the word being merged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sym {
    pub start: u32,
    pub end: u32,
    pub prev: i32,
    pub next: i32,
    /// Token id of the range, or [`NO_ID`].
    pub id: u32,
}

impl Sym {
    fn len(&self) -> u32 {
        self.end - self.start
    }
}

/// Decides whether two adjacent symbols merge, and how urgently.
pub(crate) trait PairRules {
    /// `Some((priority, merged_id))`; a higher priority merges first.
    fn pair(&self, text: &str, left: &Sym, right: &Sym) -> Option<(u64, u32)>;
}

#[derive(Debug, PartialEq, Eq)]
struct Cand {
    priority: u64,
    left: i32,
    right: i32,
    size: u32,
    id: u32,
}

impl Ord for Cand {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Reusable buffers for [`merge`].
#[derive(Default)]
pub(crate) struct Scratch {
    pub syms: Vec<Sym>,
    heap: BinaryHeap<Cand>,
}

impl Scratch {
    /// Clears the symbol list and pushes one symbol per character of `text`
    /// (ids looked up with `id_of`).
    pub fn init_chars(&mut self, text: &str, id_of: impl Fn(&str) -> u32) {
        self.syms.clear();
        let n = text.chars().count();
        for (i, (start, c)) in text.char_indices().enumerate() {
            let end = start + c.len_utf8();
            self.syms.push(Sym {
                start: start as u32,
                end: end as u32,
                prev: i as i32 - 1,
                next: if i + 1 == n { -1 } else { i as i32 + 1 },
                id: id_of(&text[start..end]),
            });
        }
    }

    /// Links `self.syms` (already filled with ranges and ids) as a list.
    pub fn link(&mut self) {
        let n = self.syms.len();
        for (i, s) in self.syms.iter_mut().enumerate() {
            s.prev = i as i32 - 1;
            s.next = if i + 1 == n { -1 } else { i as i32 + 1 };
        }
    }

    /// Runs the merge loop; afterwards the live symbols are those reachable
    /// from index 0 through `next` (see [`Scratch::live`]).
    pub fn merge<R: PairRules>(&mut self, text: &str, rules: &R) {
        self.heap.clear();
        for i in 1..self.syms.len() {
            self.try_add(text, rules, i as i32 - 1, i as i32);
        }
        while let Some(c) = self.heap.pop() {
            let (l, r) = (c.left as usize, c.right as usize);
            let (ls, rs) = (self.syms[l], self.syms[r]);
            if ls.len() == 0 || rs.len() == 0 || ls.next != c.right || ls.len() + rs.len() != c.size
            {
                continue;
            }
            let left = &mut self.syms[l];
            left.end = rs.end;
            left.id = c.id;
            left.next = rs.next;
            self.syms[r].end = self.syms[r].start;
            if rs.next >= 0 {
                self.syms[rs.next as usize].prev = c.left;
            }
            let (prev, next) = (self.syms[l].prev, self.syms[l].next);
            self.try_add(text, rules, prev, c.left);
            self.try_add(text, rules, c.left, next);
        }
    }

    fn try_add<R: PairRules>(&mut self, text: &str, rules: &R, left: i32, right: i32) {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (&self.syms[left as usize], &self.syms[right as usize]);
        if let Some((priority, id)) = rules.pair(text, l, r) {
            self.heap.push(Cand {
                priority,
                left,
                right,
                size: l.len() + r.len(),
                id,
            });
        }
    }

    /// The surviving symbols, in order.
    pub fn live(&self) -> impl Iterator<Item = &Sym> {
        let mut i = if self.syms.is_empty() { -1 } else { 0 };
        std::iter::from_fn(move || {
            while i >= 0 {
                let s = &self.syms[i as usize];
                i = s.next;
                if s.len() > 0 {
                    return Some(s);
                }
            }
            None
        })
    }
}

/// Priority key of a SentencePiece score: higher scores merge first.
pub(crate) fn score_priority(score: f32) -> u64 {
    // Map the float onto an unsigned integer preserving total order.
    let bits = score.to_bits();
    let ordered = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    u64::from(ordered)
}

/// Priority key of a BPE merge rank: lower ranks merge first.
pub(crate) fn rank_priority(rank: u32) -> u64 {
    u64::from(u32::MAX - rank)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Ranks(HashMap<(String, String), (u32, u32)>);
    impl PairRules for Ranks {
        fn pair(&self, text: &str, l: &Sym, r: &Sym) -> Option<(u64, u32)> {
            let a = text[l.start as usize..l.end as usize].to_string();
            let b = text[r.start as usize..r.end as usize].to_string();
            self.0
                .get(&(a, b))
                .map(|&(rank, id)| (rank_priority(rank), id))
        }
    }

    #[test]
    fn merges_by_rank_then_leftmost() {
        let mut m = HashMap::new();
        m.insert(("a".into(), "a".into()), (0, 10));
        m.insert(("aa".into(), "a".into()), (1, 11));
        let mut s = Scratch::default();
        s.init_chars("aaaa", |_| 1);
        s.merge("aaaa", &Ranks(m));
        let ids: Vec<u32> = s.live().map(|s| s.id).collect();
        // leftmost "aa" first, then the second "aa"; "aa"+"a" never applies.
        assert_eq!(ids, vec![10, 10]);
    }

    #[test]
    fn score_order() {
        assert!(score_priority(-1.0) > score_priority(-2.0));
        assert!(score_priority(0.5) > score_priority(-0.5));
        assert!(score_priority(3.0) > score_priority(0.0));
    }
}
