//! CPU sessions: one sequence ([`CpuSession`]) or several advancing together
//! in one forward pass ([`CpuBatch`], for continuous batching). Both cut long
//! inputs into passes of at most [`MAX_CHUNK`] rows and run them through
//! [`forward::run`].

use crate::compiled::Model;
use crate::forward::{self, new_state, Buffers, Segment, SeqState};
use anedvd_graph::dump::Dump;
use anedvd_graph::{
    validate_batch, validate_forward, BatchItem, BatchSession, LogitsMode, Result, SavedRows,
    Session,
};
use std::path::PathBuf;
use std::sync::Arc;

/// Rows processed together; longer inputs are split (bounds scratch memory).
const MAX_CHUNK: usize = 256;

/// One sequence on the CPU backend.
pub struct CpuSession {
    model: Arc<Model>,
    pool: Arc<rayon::ThreadPool>,
    max_seq: usize,
    seq: [SeqState; 1],
    dump_dir: Option<PathBuf>,
    bufs: Buffers,
    logits: Vec<f32>,
}

impl CpuSession {
    pub fn new(model: Arc<Model>, pool: Arc<rayon::ThreadPool>, max_seq: usize) -> Self {
        let seq = [new_state(&model)];
        Self {
            model,
            pool,
            max_seq,
            seq,
            dump_dir: None,
            bufs: Buffers::default(),
            logits: Vec::new(),
        }
    }
}

impl CpuSession {
    /// Runs `tokens` in passes of at most [`MAX_CHUNK`] rows into
    /// `self.logits`: logits per `mode`, or with `hidden` every token's
    /// final hidden state (`mode` is then `All`).
    fn run(&mut self, tokens: &[u32], mode: LogitsMode, hidden: bool) -> Result<()> {
        let width = if hidden {
            self.model.n_embd
        } else {
            self.model.n_vocab
        };
        let pos = self.seq[0].pos;
        self.seq[0].begin_forward(tokens.len());
        let mut dump = self.dump_dir.take().map(Dump::new).transpose()?;
        // A dump names whole-input intermediates, so it runs in one pass.
        let chunk = if dump.is_some() {
            tokens.len()
        } else {
            MAX_CHUNK
        };
        let rows = match mode {
            LogitsMode::None => 0,
            LogitsMode::Last => 1,
            LogitsMode::All => tokens.len(),
        };
        let mut logits = std::mem::take(&mut self.logits);
        logits.resize(rows * width, 0.0);
        let (model, pool) = (self.model.clone(), self.pool.clone());
        let (seqs, bufs) = (&mut self.seq, &mut self.bufs);
        let all_rows: Vec<usize> = match mode {
            LogitsMode::All => (0..chunk.min(tokens.len())).collect(),
            _ => Vec::new(),
        };
        let result = pool.install(|| -> Result<()> {
            let n_chunks = tokens.len().div_ceil(chunk);
            for (ci, part) in tokens.chunks(chunk).enumerate() {
                let seg = Segment {
                    seq: 0,
                    tokens: part,
                    pos0: pos + ci * chunk,
                };
                let last_row = [part.len() - 1];
                let (rows, out): (&[usize], &mut [f32]) = match mode {
                    LogitsMode::None => (&[], &mut []),
                    LogitsMode::Last if ci + 1 == n_chunks => (&last_row, &mut logits[..]),
                    LogitsMode::Last => (&[], &mut []),
                    LogitsMode::All => {
                        let start = ci * chunk * width;
                        (
                            &all_rows[..part.len()],
                            &mut logits[start..start + part.len() * width],
                        )
                    }
                };
                let out = if hidden {
                    forward::RowOutput::Hidden(out)
                } else {
                    forward::RowOutput::Logits(out)
                };
                forward::run(&model, bufs, seqs, &[seg], rows, out, &mut dump)?;
            }
            Ok(())
        });
        self.logits = logits;
        if let Err(e) = result {
            self.seq[0].truncate(pos);
            return Err(e);
        }
        if let Some(d) = dump {
            d.finish()?;
        }
        self.seq[0].end_forward(tokens.len());
        Ok(())
    }
}

impl Session for CpuSession {
    fn forward(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]> {
        let pos = self.seq[0].pos;
        if !validate_forward(tokens, mode, pos, self.max_seq, self.model.n_vocab)? {
            return Ok(&[]);
        }
        self.run(tokens, mode, false)?;
        Ok(&self.logits)
    }

    fn hidden_states(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let pos = self.seq[0].pos;
        if !validate_forward(
            tokens,
            LogitsMode::All,
            pos,
            self.max_seq,
            self.model.n_vocab,
        )? {
            return Ok(Vec::new());
        }
        self.run(tokens, LogitsMode::All, true)?;
        Ok(self.logits.clone())
    }

    fn position(&self) -> usize {
        self.seq[0].pos
    }

    fn truncate(&mut self, n: usize) {
        self.seq[0].truncate(n);
    }

    fn reusable(&self, n: usize) -> usize {
        self.seq[0].reusable(n)
    }

    fn cache_bytes(&self) -> usize {
        self.seq[0].kv_bytes()
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn set_dump(&mut self, dir: Option<PathBuf>) {
        self.dump_dir = dir;
    }
}

/// Several sequences sharing one pass: the weights are read once for all of
/// their rows, which is what makes concurrent decoding cheaper than running
/// the sequences one after another.
pub struct CpuBatch {
    model: Arc<Model>,
    pool: Arc<rayon::ThreadPool>,
    max_seq: usize,
    seqs: Vec<SeqState>,
    bufs: Buffers,
    logits: Vec<f32>,
}

impl CpuBatch {
    pub fn new(
        model: Arc<Model>,
        pool: Arc<rayon::ThreadPool>,
        n_seqs: usize,
        max_seq: usize,
    ) -> Self {
        let seqs = (0..n_seqs).map(|_| new_state(&model)).collect();
        Self {
            model,
            pool,
            max_seq,
            seqs,
            bufs: Buffers::default(),
            logits: Vec::new(),
        }
    }
}

/// A pass: its segments and, per segment, which of its rows' logits are
/// wanted.
type Pass<'a> = Vec<(Segment<'a>, LogitsMode)>;

/// Cuts `items` into passes of at most `max_rows` rows, in item order; an
/// item longer than the room left is split across passes (asking for its
/// last token's logits asks on the final piece only, every token's on every
/// piece), so logits rows come out in item order.
fn plan<'a>(items: &[BatchItem<'a>], positions: &[usize], max_rows: usize) -> Vec<Pass<'a>> {
    let mut passes: Vec<Pass<'a>> = vec![Vec::new()];
    let mut room = max_rows;
    for (item, &pos) in items.iter().zip(positions) {
        let mut rest = item.tokens;
        let mut pos0 = pos;
        while !rest.is_empty() {
            if room == 0 {
                passes.push(Vec::new());
                room = max_rows;
            }
            let (now, later) = rest.split_at(rest.len().min(room));
            let mode = match item.logits {
                LogitsMode::Last if !later.is_empty() => LogitsMode::None,
                mode => mode,
            };
            if let Some(pass) = passes.last_mut() {
                pass.push((
                    Segment {
                        seq: item.seq,
                        tokens: now,
                        pos0,
                    },
                    mode,
                ));
            }
            room -= now.len();
            pos0 += now.len();
            rest = later;
        }
    }
    passes
}

/// Logits rows an item returns.
fn logits_rows(item: &BatchItem<'_>) -> usize {
    match item.logits {
        LogitsMode::None => 0,
        LogitsMode::Last => 1,
        LogitsMode::All => item.tokens.len(),
    }
}

impl BatchSession for CpuBatch {
    fn n_seqs(&self) -> usize {
        self.seqs.len()
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn position(&self, seq: usize) -> usize {
        self.seqs.get(seq).map_or(0, |s| s.pos)
    }

    fn truncate(&mut self, seq: usize, n: usize) {
        if let Some(s) = self.seqs.get_mut(seq) {
            s.truncate(n);
        }
    }

    fn reusable(&self, seq: usize, n: usize) -> usize {
        self.seqs.get(seq).map_or(0, |s| s.reusable(n))
    }

    fn cache_bytes(&self) -> usize {
        self.seqs.iter().map(SeqState::kv_bytes).sum()
    }

    fn save_rows(&self, seq: usize, range: std::ops::Range<usize>) -> Option<SavedRows> {
        self.seqs.get(seq)?.save(range)
    }

    fn load_rows(&mut self, seq: usize, blocks: &[&SavedRows]) -> usize {
        let max_seq = self.max_seq;
        self.seqs
            .get_mut(seq)
            .map_or(0, |s| s.load(blocks, max_seq))
    }

    fn can_copy_prefix(&self) -> bool {
        self.seqs.first().is_some_and(SeqState::can_copy_prefix)
    }

    fn copy_prefix(&mut self, src: usize, dst: usize, n: usize) -> usize {
        if src == dst || src >= self.seqs.len() || dst >= self.seqs.len() {
            return 0;
        }
        let (from, to) = if src < dst {
            let (a, b) = self.seqs.split_at_mut(dst);
            (&a[src], &mut b[0])
        } else {
            let (a, b) = self.seqs.split_at_mut(src);
            (&b[0], &mut a[dst])
        };
        to.copy_prefix_from(from, n)
    }

    fn forward(&mut self, items: &[BatchItem<'_>]) -> Result<&mut [f32]> {
        let n_vocab = self.model.n_vocab;
        validate_batch(items, self.seqs.len(), self.max_seq, n_vocab, |s| {
            self.position(s)
        })?;
        let starts: Vec<usize> = items.iter().map(|i| self.seqs[i.seq].pos).collect();
        for item in items {
            self.seqs[item.seq].begin_forward(item.tokens.len());
        }
        let passes = plan(items, &starts, MAX_CHUNK);
        let n_rows: usize = items.iter().map(logits_rows).sum();
        let mut logits = std::mem::take(&mut self.logits);
        logits.resize(n_rows * n_vocab, 0.0);
        let (model, pool) = (self.model.clone(), self.pool.clone());
        let (seqs, bufs) = (&mut self.seqs, &mut self.bufs);
        let result = pool.install(|| -> Result<()> {
            let mut done_rows = 0;
            let mut logit_rows = Vec::new();
            let mut segs = Vec::new();
            for pass in &passes {
                segs.clear();
                logit_rows.clear();
                let mut row = 0;
                for (seg, wants) in pass {
                    let first = row;
                    row += seg.tokens.len();
                    match wants {
                        LogitsMode::None => {}
                        LogitsMode::Last => logit_rows.push(row - 1),
                        LogitsMode::All => logit_rows.extend(first..row),
                    }
                    segs.push(*seg);
                }
                let out = forward::RowOutput::Logits(&mut logits[done_rows * n_vocab..]);
                forward::run(&model, bufs, seqs, &segs, &logit_rows, out, &mut None)?;
                done_rows += logit_rows.len();
            }
            Ok(())
        });
        self.logits = logits;
        if let Err(e) = result {
            for (item, &start) in items.iter().zip(&starts) {
                self.seqs[item.seq].truncate(start);
            }
            return Err(e);
        }
        for item in items {
            self.seqs[item.seq].end_forward(item.tokens.len());
        }
        Ok(&mut self.logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_splits_long_items_and_keeps_logits_on_final_pieces() {
        use LogitsMode::{All, Last, None as No};
        let a: Vec<u32> = (0..5).collect();
        let b: Vec<u32> = vec![9];
        let c: Vec<u32> = vec![4, 5, 6];
        let items = [
            BatchItem {
                seq: 1,
                tokens: &a,
                logits: Last,
            },
            BatchItem {
                seq: 0,
                tokens: &b,
                logits: Last,
            },
            BatchItem {
                seq: 2,
                tokens: &c,
                logits: All,
            },
        ];
        let passes = plan(&items, &[10, 3, 7], 4);
        let shape: Vec<Vec<(usize, usize, usize, LogitsMode)>> = passes
            .iter()
            .map(|p| {
                p.iter()
                    .map(|(s, w)| (s.seq, s.tokens.len(), s.pos0, *w))
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                vec![(1, 4, 10, No)],
                vec![(1, 1, 14, Last), (0, 1, 3, Last), (2, 2, 7, All)],
                vec![(2, 1, 9, All)],
            ]
        );
        assert_eq!(items.iter().map(logits_rows).collect::<Vec<_>>(), [1, 1, 3]);
    }
}
