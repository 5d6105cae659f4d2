//! A cache of KV blocks shared by every sequence of a batch, so that
//! requests repeating a system prompt or a document skip its prefill (as
//! vLLM's automatic prefix caching). Prompts are cut into blocks of
//! [`BLOCK`] tokens; a block is keyed by a hash of its tokens chained with
//! its parent's key, so a key names the whole prefix up to the block's
//! end. Each block holds the rows of every layer for its positions, as the
//! backend saved them ([`SavedRows`]). Blocks are evicted least recently
//! used first, leaves before the prefixes they extend, within a byte
//! budget.
//!
//! Sliding-window layers store every block's rows (a later prompt may
//! resume at any block). Convolution (recurrent) layers store their state
//! at a block's end when the backend still held it there; a prompt resumes
//! only at the end of such a block (see [`SavedRows::resumable`]).

use anedvd_graph::SavedRows;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Tokens per block.
pub const BLOCK: usize = 64;

/// What the cache has done and holds (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Prompts looked up.
    pub lookups: u64,
    /// Lookups that loaded a cached prefix.
    pub hits: u64,
    /// Prompt tokens loaded from the cache instead of prefilled.
    pub hit_tokens: u64,
    /// Blocks stored.
    pub stored: u64,
    /// Blocks evicted to stay within the budget.
    pub evicted: u64,
    /// Blocks held now.
    pub blocks: usize,
    /// Bytes held now.
    pub bytes: usize,
    /// The budget in bytes.
    pub budget: usize,
}

struct Entry {
    parent: Option<u64>,
    tokens: Vec<u32>,
    rows: SavedRows,
    last_used: u64,
    /// Cached blocks extending this one (evicted before it).
    children: usize,
}

/// The block cache of one batch.
pub struct PrefixCache {
    entries: HashMap<u64, Entry>,
    tick: u64,
    stats: PrefixStats,
}

/// The key of the block holding `tokens` after the prefix keyed `parent`.
fn key(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

/// The keys of the first `n` full blocks of `tokens`.
pub fn chain_keys(tokens: &[u32], n: usize) -> Vec<u64> {
    let mut keys: Vec<u64> = Vec::with_capacity(n);
    for block in tokens.chunks_exact(BLOCK).take(n) {
        keys.push(key(keys.last().copied(), block));
    }
    keys
}

impl PrefixCache {
    /// An empty cache holding at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            entries: HashMap::new(),
            tick: 0,
            stats: PrefixStats {
                budget,
                ..PrefixStats::default()
            },
        }
    }

    /// What the cache has done and holds.
    pub fn stats(&self) -> PrefixStats {
        self.stats
    }

    /// The entry for block `i` of `tokens` (keyed `keys[i]`), if it holds
    /// exactly those tokens after that parent (a hash collision is a miss).
    fn entry(&self, keys: &[u64], tokens: &[u32], i: usize) -> Option<&Entry> {
        let e = self.entries.get(&keys[i])?;
        let parent = i.checked_sub(1).map(|p| keys[p]);
        let block = &tokens[i * BLOCK..(i + 1) * BLOCK];
        (e.parent == parent && e.tokens == block).then_some(e)
    }

    /// Whether block `i` of `tokens` is cached.
    pub fn contains(&self, keys: &[u64], tokens: &[u32], i: usize) -> bool {
        self.entry(keys, tokens, i).is_some()
    }

    /// Blocks of `prompt` a sequence can load: the longest cached run of
    /// blocks from the start that ends where a sequence can resume, leaving
    /// at least one prompt token to run (its logits start generation).
    pub fn lookup(&self, prompt: &[u32]) -> usize {
        let n = prompt.len().saturating_sub(1) / BLOCK;
        let keys = chain_keys(prompt, n);
        let mut usable = 0;
        for i in 0..n {
            let Some(e) = self.entry(&keys, prompt, i) else {
                break;
            };
            if e.rows.resumable {
                usable = i + 1;
            }
        }
        usable
    }

    /// Counts a prompt looked up (once per admitted request).
    pub fn count_lookup(&mut self) {
        self.stats.lookups += 1;
    }

    /// Counts a prompt that loaded `tokens` tokens from the cache.
    pub fn count_hit(&mut self, tokens: usize) {
        self.stats.hits += 1;
        self.stats.hit_tokens += tokens as u64;
    }

    /// The rows of the first `n` blocks of `prompt` (all cached: `n` from
    /// [`Self::lookup`]), marked as just used.
    pub fn take(&mut self, prompt: &[u32], n: usize) -> Option<Vec<&SavedRows>> {
        let keys = chain_keys(prompt, n);
        if keys.len() < n || (0..n).any(|i| !self.contains(&keys, prompt, i)) {
            return None;
        }
        self.tick += 1;
        for k in &keys {
            if let Some(e) = self.entries.get_mut(k) {
                e.last_used = self.tick;
            }
        }
        Some(
            keys.iter()
                .filter_map(|k| self.entries.get(k))
                .map(|e| &e.rows)
                .collect(),
        )
    }

    /// Marks block `i` of `tokens` (cached) as just used.
    pub fn touch(&mut self, keys: &[u64], i: usize) {
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(&keys[i]) {
            e.last_used = self.tick;
        }
    }

    /// Stores `rows` as block `i` of `tokens` (`keys` from
    /// [`chain_keys`]), its parent being cached (or `i` = 0), evicting
    /// least recently used leaves to make room. Returns whether it was
    /// stored (not when its parent is gone, it is cached already, or it
    /// alone exceeds the budget).
    pub fn insert(&mut self, keys: &[u64], tokens: &[u32], i: usize, rows: SavedRows) -> bool {
        let parent = i.checked_sub(1).map(|p| keys[p]);
        if self.entries.contains_key(&keys[i]) || rows.bytes > self.stats.budget {
            return false;
        }
        if i > 0 && !self.contains(keys, tokens, i - 1) {
            return false;
        }
        // Attach first, so the parent is no leaf while room is made.
        if let Some(p) = parent.and_then(|p| self.entries.get_mut(&p)) {
            p.children += 1;
        }
        while self.stats.bytes + rows.bytes > self.stats.budget {
            if !self.evict_one() {
                break;
            }
        }
        if self.stats.bytes + rows.bytes > self.stats.budget {
            if let Some(p) = parent.and_then(|p| self.entries.get_mut(&p)) {
                p.children -= 1;
            }
            return false;
        }
        self.tick += 1;
        self.stats.bytes += rows.bytes;
        self.stats.blocks += 1;
        self.stats.stored += 1;
        self.entries.insert(
            keys[i],
            Entry {
                parent,
                tokens: tokens[i * BLOCK..(i + 1) * BLOCK].to_vec(),
                rows,
                last_used: self.tick,
                children: 0,
            },
        );
        true
    }

    /// Whether block `i` of `tokens` is cached but a sequence cannot resume
    /// at its end (its recurrent state was gone when it was saved).
    pub fn needs_state(&self, keys: &[u64], tokens: &[u32], i: usize) -> bool {
        self.entry(keys, tokens, i)
            .is_some_and(|e| !e.rows.resumable)
    }

    /// Replaces the rows of cached block `i` by `rows` if they let a
    /// sequence resume at its end and the cached ones did not; returns
    /// whether it did.
    pub fn upgrade(&mut self, keys: &[u64], tokens: &[u32], i: usize, rows: SavedRows) -> bool {
        if !rows.resumable || !self.needs_state(keys, tokens, i) {
            return false;
        }
        let Some(e) = self.entries.get_mut(&keys[i]) else {
            return false;
        };
        self.stats.bytes = self.stats.bytes - e.rows.bytes + rows.bytes;
        e.rows = rows;
        true
    }

    /// Drops the least recently used block that no cached block extends;
    /// false if there is none.
    fn evict_one(&mut self) -> bool {
        let Some(victim) = self
            .entries
            .iter()
            .filter(|(_, e)| e.children == 0)
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, _)| *k)
        else {
            return false;
        };
        let Some(e) = self.entries.remove(&victim) else {
            return false;
        };
        if let Some(p) = e.parent.and_then(|p| self.entries.get_mut(&p)) {
            p.children -= 1;
        }
        self.stats.bytes -= e.rows.bytes;
        self.stats.blocks -= 1;
        self.stats.evicted += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(bytes: usize, resumable: bool) -> SavedRows {
        SavedRows {
            bytes,
            resumable,
            rows: Box::new(()),
        }
    }

    fn store_all(c: &mut PrefixCache, tokens: &[u32], bytes: usize) -> usize {
        let n = tokens.len() / BLOCK;
        let keys = chain_keys(tokens, n);
        (0..n)
            .filter(|&i| c.insert(&keys, tokens, i, rows(bytes, true)))
            .count()
    }

    #[test]
    fn finds_the_longest_cached_prefix_and_leaves_a_token() {
        let mut c = PrefixCache::new(1 << 20);
        let a: Vec<u32> = (0..300).collect();
        assert_eq!(store_all(&mut c, &a, 10), 4);
        // Same 200 tokens then different ones: 3 whole blocks shared.
        let mut b: Vec<u32> = (0..200).collect();
        b.extend(1000..1100);
        assert_eq!(c.lookup(&b), 3);
        // A prompt of exactly 4 blocks loads 3 (its last token must run).
        assert_eq!(c.lookup(&a[..256]), 3);
        assert_eq!(c.lookup(&a[..257]), 4);
        // A change inside the first block: nothing.
        let mut d = a.clone();
        d[5] = 9999;
        assert_eq!(c.lookup(&d), 0);
        let got = c.take(&b, 3).map(|r| r.len());
        assert_eq!(got, Some(3));
        assert!(c.take(&b, 4).is_none());
        c.count_lookup();
        c.count_hit(192);
        let s = c.stats();
        assert_eq!((s.lookups, s.hits, s.hit_tokens), (1, 1, 192));
        assert_eq!((s.blocks, s.bytes, s.stored), (4, 40, 4));
        // Stored once only.
        assert_eq!(store_all(&mut c, &a, 10), 0);
    }

    #[test]
    fn resumes_only_at_resumable_blocks() {
        let mut c = PrefixCache::new(1 << 20);
        let a: Vec<u32> = (0..400).collect();
        let keys = chain_keys(&a, 6);
        for i in 0..6 {
            assert!(c.insert(&keys, &a, i, rows(1, i == 1 || i == 3)));
        }
        assert_eq!(c.lookup(&a), 4);
        assert_eq!(c.lookup(&a[..200]), 2);
        // A resumable copy of block 4 replaces the one without state.
        assert!(c.needs_state(&keys, &a, 4));
        assert!(!c.upgrade(&keys, &a, 4, rows(5, false)));
        assert!(c.upgrade(&keys, &a, 4, rows(5, true)));
        assert!(!c.upgrade(&keys, &a, 3, rows(5, true)));
        assert_eq!(c.lookup(&a), 5);
        assert_eq!(c.stats().bytes, 10);
    }

    #[test]
    fn evicts_least_recently_used_leaves_within_the_budget() {
        let mut c = PrefixCache::new(100);
        let a: Vec<u32> = (0..256).collect();
        let b: Vec<u32> = (5000..5256).collect();
        assert_eq!(store_all(&mut c, &a, 20), 4);
        // a's blocks were used more recently than ...
        assert_eq!(store_all(&mut c, &b, 20), 4);
        let s = c.stats();
        assert!(s.bytes <= 100, "{s:?}");
        assert_eq!(s.evicted, 3);
        // ... b's: a lost its leaves first (its first block remains), b is whole.
        assert_eq!(c.lookup(&[b.clone(), vec![1]].concat()), 4);
        assert_eq!(c.lookup(&[a.clone(), vec![1]].concat()), 1);
        // A block larger than the budget is refused without evicting.
        let e: Vec<u32> = (9000..9064).collect();
        assert!(!c.insert(&chain_keys(&e, 1), &e, 0, rows(101, true)));
        assert_eq!(c.stats().evicted, 3);
        // A block whose parent is gone is not stored.
        let keys = chain_keys(&a, 4);
        assert!(!c.insert(&keys, &a, 3, rows(1, true)));
    }
}
