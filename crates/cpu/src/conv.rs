//! LFM2's gated short convolution (lfm2-spec.md §3): `[B, C, X] =
//! in_proj(x)`, `u = B·X`, `v[t] = Σ_k w[k] · u[t - (K-1) + k]` (depthwise,
//! causal), `y = out_proj(C·v)`.
//!
//! The state of a sequence is its recent `u` rows. Each layer keeps a short
//! history of them ([`REWIND`] positions beyond the `K - 1` the next token
//! needs), so going back a few positions — a chat turn whose re-rendered
//! reply differs in its last tokens, or re-running a prompt's last token —
//! needs no snapshot. [`SeqState`](crate::state::SeqState) adds snapshots
//! around every multi-token forward call for longer jumps back.

use crate::matmul::Matrix;

/// Positions a layer can go back without a snapshot.
pub const REWIND: usize = 16;

/// One compiled short-convolution mixer.
pub struct ConvLayer {
    /// Taps `K`.
    pub kernel: usize,
    /// `[n_embd] -> [B; C; X]`.
    pub in_proj: Matrix,
    /// Tap-major weights: `taps[k * n_embd + c]`, tap `K - 1` on the
    /// current position.
    pub taps: Vec<f32>,
    /// `[n_embd] -> [n_embd]`.
    pub out_proj: Matrix,
}

/// The taps of a stored depthwise weight (`[width][kernel]` row-major:
/// GGUF's `[kernel, width]`, HF's `[kernel, 1, width]`) in the tap-major
/// order [`mix`] and [`ConvHistory::carry`] read (`taps[k * width + c]`).
pub fn tap_major(stored: &[f32], kernel: usize, width: usize) -> Vec<f32> {
    let mut taps = vec![0.0; kernel * width];
    for (c, row) in stored.chunks_exact(kernel).take(width).enumerate() {
        for (k, w) in row.iter().enumerate() {
            taps[k * width + c] = *w;
        }
    }
    taps
}

/// Recent gated inputs `u` of one layer for one sequence, oldest first:
/// rows for positions `end - n_rows .. end`; rows before position 0 are
/// zeros (a fresh history holds `K - 1` of them).
#[derive(Debug, Clone)]
pub struct ConvHistory {
    width: usize,
    /// `K - 1`: the rows the next position reads.
    k1: usize,
    rows: Vec<f32>,
    end: usize,
}

impl ConvHistory {
    /// An empty sequence's history for a `kernel`-tap convolution over
    /// `width` channels.
    pub fn new(kernel: usize, width: usize) -> Self {
        let k1 = kernel.saturating_sub(1);
        Self {
            width,
            k1,
            rows: vec![0.0; k1 * width],
            end: 0,
        }
    }

    fn n_rows(&self) -> usize {
        self.rows.len() / self.width.max(1)
    }

    /// Whether the state at position `n` is still held: the rows of
    /// positions `n - (K-1) .. n` (0 is always reachable: a fresh state).
    pub fn can_rewind_to(&self, n: usize) -> bool {
        n == 0 || (n <= self.end && n + self.n_rows() >= self.end + self.k1)
    }

    /// Goes back to position `n` if [`Self::can_rewind_to`]; returns whether
    /// it did.
    pub fn rewind_to(&mut self, n: usize) -> bool {
        if n == self.end {
            return true;
        }
        if n == 0 {
            *self = Self::new(self.k1 + 1, self.width);
            return true;
        }
        if !self.can_rewind_to(n) {
            return false;
        }
        let drop = self.end - n;
        self.rows.truncate((self.n_rows() - drop) * self.width);
        self.end = n;
        true
    }

    /// The `K - 1` rows before position `n` (the state a snapshot keeps),
    /// if still held; `None` for 0 (a fresh state needs no snapshot).
    pub fn state_at(&self, n: usize) -> Option<&[f32]> {
        if n == 0 || !self.can_rewind_to(n) {
            return None;
        }
        // Row index of position p: p + n_rows - end.
        let first = n + self.n_rows() - self.end - self.k1;
        Some(&self.rows[first * self.width..(first + self.k1) * self.width])
    }

    /// Replaces the history by `state` (from [`Self::state_at`]) at `pos`.
    pub fn restore(&mut self, pos: usize, state: &[f32]) {
        self.rows.clear();
        self.rows.extend_from_slice(state);
        self.end = pos;
    }

    /// The share of the rows before `end` in the first `K - 1` outputs of a
    /// segment starting at `end` (zero beyond): `out[t] = Σ_{k: t+k < K-1}
    /// w[k] · state[t + k]`, `out` holding one `width` row per segment
    /// row. A backend that convolves only the segment (with zero left
    /// padding, as the ANE lowering does) adds this to get the causal
    /// convolution over the whole sequence.
    pub fn carry(&self, taps: &[f32], out: &mut [f32]) {
        let (d, k1) = (self.width, self.k1);
        out.fill(0.0);
        let state = &self.rows[self.rows.len() - k1 * d..];
        for (t, o) in out.chunks_exact_mut(d).take(k1).enumerate() {
            for k in 0..k1 - t {
                let (w, s) = (
                    &taps[k * d..(k + 1) * d],
                    &state[(t + k) * d..(t + k + 1) * d],
                );
                for ((o, w), s) in o.iter_mut().zip(w).zip(s) {
                    *o += w * s;
                }
            }
        }
    }

    /// Appends a segment's gated inputs `u` (one `width` row per position).
    pub fn push(&mut self, u: &[f32]) {
        self.rows.extend_from_slice(u);
        self.advance(u.len() / self.width.max(1));
    }

    /// Accounts for `n` rows just appended, then drops rows older than the
    /// convolution and [`REWIND`] need (amortised: only once twice that
    /// many have piled up).
    fn advance(&mut self, n: usize) {
        self.end += n;
        let limit = (self.k1 + REWIND) * self.width;
        if self.rows.len() > 2 * limit {
            self.rows.drain(..self.rows.len() - limit);
        }
    }
}

impl ConvLayer {
    /// [`mix`] with this layer's taps.
    pub fn mix(&self, hist: &mut ConvHistory, bcx: &[f32], out: &mut [f32]) {
        mix(&self.taps, self.kernel, hist, bcx, out);
    }
}

/// The convolution of one segment: `bcx` holds its rows of `in_proj`
/// output `[B; C; X]`; writes `C·v` into `out` (one `d`-row per input row)
/// and appends the segment's `u = B·X` rows to `hist`.
pub fn mix(taps: &[f32], kernel: usize, hist: &mut ConvHistory, bcx: &[f32], out: &mut [f32]) {
    let d = hist.width;
    let n = out.len() / d;
    let first = hist.n_rows() + 1 - kernel;
    for row in bcx.chunks_exact(3 * d).take(n) {
        let (b, rest) = row.split_at(d);
        let x = &rest[d..];
        hist.rows.extend(b.iter().zip(x).map(|(b, x)| b * x));
    }
    let window = &hist.rows[first * d..];
    for (t, (o, row)) in out
        .chunks_exact_mut(d)
        .zip(bcx.chunks_exact(3 * d))
        .enumerate()
    {
        o.fill(0.0);
        for (k, w) in taps.chunks_exact(d).enumerate() {
            let u = &window[(t + k) * d..(t + k + 1) * d];
            for ((o, w), u) in o.iter_mut().zip(w).zip(u) {
                *o += w * u;
            }
        }
        for (o, c) in o.iter_mut().zip(&row[d..2 * d]) {
            *o *= c;
        }
    }
    hist.advance(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recurrence of HF's `slow_forward`, one token at a time from a
    /// zero state, as a plain reference.
    fn reference(taps: &[f32], k: usize, d: usize, bcx: &[f32]) -> Vec<f32> {
        let n = bcx.len() / (3 * d);
        let mut state = vec![0.0f32; k * d];
        let mut out = Vec::new();
        for t in 0..n {
            let row = &bcx[t * 3 * d..(t + 1) * 3 * d];
            state.copy_within(d.., 0);
            for c in 0..d {
                state[(k - 1) * d + c] = row[c] * row[2 * d + c];
            }
            for c in 0..d {
                let v: f32 = (0..k).map(|j| state[j * d + c] * taps[j * d + c]).sum();
                out.push(v * row[d + c]);
            }
        }
        out
    }

    fn taps(k: usize, d: usize) -> Vec<f32> {
        (0..k * d)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0)
            .collect()
    }

    fn inputs(n: usize, d: usize) -> Vec<f32> {
        (0..n * 3 * d)
            .map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0)
            .collect()
    }

    #[test]
    fn chunked_and_stepwise_runs_match_the_recurrence() {
        let (k, d, n) = (3, 4, 40);
        let w = taps(k, d);
        let bcx = inputs(n, d);
        let want = reference(&w, k, d, &bcx);
        for chunk in [1, 2, 5, 40] {
            let mut h = ConvHistory::new(k, d);
            let mut got = vec![0.0; n * d];
            for (i, part) in bcx.chunks(chunk * 3 * d).enumerate() {
                let rows = part.len() / (3 * d);
                let o = &mut got[i * chunk * d..(i * chunk + rows) * d];
                mix(&w, k, &mut h, part, o);
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[test]
    fn carry_plus_a_zero_padded_segment_conv_is_the_causal_conv() {
        let (k, d, n) = (3, 4, 12);
        let w = taps(k, d);
        let bcx = inputs(n, d);
        let want = reference(&w, k, d, &bcx);
        let u: Vec<f32> = bcx
            .chunks_exact(3 * d)
            .flat_map(|r| (0..d).map(move |c| r[c] * r[2 * d + c]))
            .collect();
        let mut h = ConvHistory::new(k, d);
        for seg in [(0, 5), (5, 6), (6, 12)] {
            let m = seg.1 - seg.0;
            let mut carry = vec![0.0; m * d];
            h.carry(&w, &mut carry);
            h.push(&u[seg.0 * d..seg.1 * d]);
            for t in 0..m {
                for c in 0..d {
                    // zero-padded conv over the segment alone
                    let inside: f32 = (0..k)
                        .filter_map(|j| {
                            let src = (t + j).checked_sub(k - 1)?;
                            Some(w[j * d + c] * u[(seg.0 + src) * d + c])
                        })
                        .sum();
                    let v = inside + carry[t * d + c];
                    let got = v * bcx[(seg.0 + t) * 3 * d + d + c];
                    let e = want[(seg.0 + t) * d + c];
                    assert!((got - e).abs() <= 1e-5 * e.abs().max(1.0), "{seg:?} t {t}");
                }
            }
        }
    }

    #[test]
    fn rewinding_within_the_history_replays_exactly() {
        let (k, d, n) = (3, 4, 100);
        let w = taps(k, d);
        let bcx = inputs(n, d);
        let want = reference(&w, k, d, &bcx);
        let mut h = ConvHistory::new(k, d);
        let mut out = vec![0.0; n * d];
        mix(&w, k, &mut h, &bcx, &mut out);
        assert_eq!(out, want);
        // A long prefill trims its history to K - 1 + REWIND rows.
        assert!(h.can_rewind_to(n - 1) && h.can_rewind_to(n - REWIND));
        assert!(!h.can_rewind_to(n - REWIND - 1));
        assert!(!h.rewind_to(n - REWIND - 1));
        assert!(!h.can_rewind_to(n + 1));
        assert!(h.rewind_to(n - 3));
        let mut again = vec![0.0; 3 * d];
        mix(&w, k, &mut h, &bcx[(n - 3) * 3 * d..], &mut again);
        assert_eq!(again, want[(n - 3) * d..]);
        // A snapshot of the state restores the same continuation.
        let snap = h.state_at(n - 1).unwrap().to_vec();
        assert!(h.rewind_to(n - 1));
        assert_eq!(h.state_at(n - 1).unwrap(), snap);
        let mut last = vec![0.0; d];
        h.restore(n - 1, &snap);
        mix(&w, k, &mut h, &bcx[(n - 1) * 3 * d..], &mut last);
        assert_eq!(last, want[(n - 1) * d..]);
        assert!(h.rewind_to(0));
        mix(&w, k, &mut h, &bcx[..3 * d], &mut last);
        assert_eq!(last, want[..d]);
    }
}
