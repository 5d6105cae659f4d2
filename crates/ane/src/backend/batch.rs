//! Many sequences per dispatch: every busy sequence's rows are columns of
//! the same programs.
//!
//! On the ANE, 128 activation columns cost about 1.05× one column
//! (ane-evidence.md §b, "Width (columns) is nearly free"), so a decode step
//! of N sequences in one pass costs about what one sequence's step does.
//! [`AneBatch`] packs the items of a forward call, in order, into passes of
//! at most W rows (an item is cut every W tokens, as it is alone; with
//! short convolutions, pieces lie `K - 1` zero rows apart) and runs each pass with `session::run_rows`: the programs
//! see all rows as columns, the host attends per sequence over its own
//! cache. A column is computed from its own data only, so each sequence
//! gets the logits it would get alone, bit for bit (tested, and checked by
//! `verify`).
//!
//! The resident variant keeps its caches inside per-sequence programs'
//! ports, so it runs sequences one after another (`SequentialBatch`).

use super::model::Model;
use super::session::{chunk_logits, run_rows, Scratch, Segment, SeqHost};
use anedvd_graph::{validate_batch, BatchItem, BatchSession, Result, SavedRows};
use std::sync::Arc;

/// `n_seqs` sequences advanced together.
pub(crate) struct AneBatch {
    model: Arc<Model>,
    hosts: Vec<SeqHost>,
    max_seq: usize,
    scratch: Scratch,
    logits: Vec<f32>,
}

impl AneBatch {
    pub fn new(model: Arc<Model>, n_seqs: usize, max_seq: usize) -> Self {
        let hosts = (0..n_seqs).map(|_| SeqHost::new(&model)).collect();
        AneBatch {
            model,
            hosts,
            max_seq,
            scratch: Scratch::default(),
            logits: Vec::new(),
        }
    }

    /// The passes of `items`: per pass, `(item, token range)` pieces of at
    /// most W rows in all (with the gaps), in item order. An item is cut
    /// where it would be cut alone (every W tokens), and a piece that does
    /// not fit what is left of a pass starts the next one, so each piece
    /// runs exactly as it would alone.
    fn passes(&self, items: &[BatchItem<'_>]) -> Vec<Vec<(usize, std::ops::Range<usize>)>> {
        let (w, gap) = (self.model.options.width, self.model.segment_gap());
        let mut passes: Vec<Vec<(usize, std::ops::Range<usize>)>> = vec![Vec::new()];
        let mut used = 0;
        for (k, item) in items.iter().enumerate() {
            for start in (0..item.tokens.len()).step_by(w.max(1)) {
                let len = w.min(item.tokens.len() - start);
                let need = if used == 0 { len } else { gap + len };
                if used + need > w {
                    passes.push(Vec::new());
                    used = 0;
                }
                used += if used == 0 { len } else { gap + len };
                if let Some(p) = passes.last_mut() {
                    p.push((k, start..start + len));
                }
            }
        }
        passes
    }

    /// Runs every pass; on error the caller rolls the sequences back.
    fn run(&mut self, items: &[BatchItem<'_>], starts: &[usize]) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        for pass in self.passes(items) {
            // disjoint `&mut` to each item's sequence (validated unique)
            let mut slots: Vec<Option<&mut SeqHost>> = self.hosts.iter_mut().map(Some).collect();
            let mut segs = Vec::with_capacity(pass.len());
            for (k, range) in pass {
                let item = &items[k];
                let host = slots
                    .get_mut(item.seq)
                    .and_then(Option::take)
                    .ok_or_else(|| {
                        anedvd_graph::Error::InvalidProgram(format!(
                            "sequence {} twice in a pass",
                            item.seq
                        ))
                    })?;
                let last = range.end == item.tokens.len();
                let want = chunk_logits(item.logits, last);
                segs.push(Segment {
                    host,
                    tokens: &item.tokens[range.clone()],
                    pos0: starts[k] + range.start,
                    want,
                });
            }
            logits.extend(run_rows(
                &self.model,
                &mut segs,
                &mut self.scratch,
                &mut None,
            )?);
        }
        Ok(logits)
    }
}

impl BatchSession for AneBatch {
    fn n_seqs(&self) -> usize {
        self.hosts.len()
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn position(&self, seq: usize) -> usize {
        self.hosts.get(seq).map_or(0, |h| h.seq.pos)
    }

    fn truncate(&mut self, seq: usize, n: usize) {
        if let Some(h) = self.hosts.get_mut(seq) {
            h.seq.truncate(n);
        }
    }

    fn reusable(&self, seq: usize, n: usize) -> usize {
        self.hosts.get(seq).map_or(0, |h| h.seq.reusable(n))
    }

    fn cache_bytes(&self) -> usize {
        self.hosts.iter().map(|h| h.seq.kv_bytes()).sum()
    }

    fn save_rows(&self, seq: usize, range: std::ops::Range<usize>) -> Option<SavedRows> {
        self.hosts.get(seq)?.seq.save(range)
    }

    fn load_rows(&mut self, seq: usize, blocks: &[&SavedRows]) -> usize {
        let max_seq = self.max_seq();
        self.hosts
            .get_mut(seq)
            .map_or(0, |h| h.seq.load(blocks, max_seq))
    }

    fn forward(&mut self, items: &[BatchItem<'_>]) -> Result<&mut [f32]> {
        let n_vocab = self.model.n_vocab;
        validate_batch(items, self.hosts.len(), self.max_seq, n_vocab, |s| {
            self.position(s)
        })?;
        if items.is_empty() {
            self.logits.clear();
            return Ok(&mut self.logits);
        }
        let starts: Vec<usize> = items.iter().map(|i| self.position(i.seq)).collect();
        for item in items {
            self.hosts[item.seq].seq.begin_forward(item.tokens.len());
        }
        match self.run(items, &starts) {
            Ok(logits) => {
                for item in items {
                    self.hosts[item.seq].seq.end_forward(item.tokens.len());
                }
                self.logits = logits;
                Ok(&mut self.logits)
            }
            Err(e) => {
                // a failed call appends nothing
                for (item, &start) in items.iter().zip(&starts) {
                    self.hosts[item.seq].seq.truncate(start);
                }
                Err(e)
            }
        }
    }
}
