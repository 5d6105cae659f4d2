//! Token sampling shared by the CLI and the server: penalties, top-k, top-p,
//! min-p, temperature and a seeded draw, in llama.cpp's default order.
//!
//! Order (llama.cpp `common_sampler` default chain, without the samplers we do
//! not offer): penalties → top-k → top-p → min-p → temperature → draw.
//! A temperature ≤ 0 is greedy (arg-max after penalties).

use std::collections::HashMap;

/// Sampling parameters. Defaults match llama.cpp's CLI defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; ≤ 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set whose probability mass reaches p (1.0 = off).
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` × the top probability (0 = off).
    pub min_p: f32,
    /// llama.cpp repetition penalty (1.0 = off): positive logits are divided,
    /// negative ones multiplied, once per distinct token in the window.
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalties look at (0 = off, -1 = whole context).
    pub repeat_last_n: i32,
    /// OpenAI presence penalty: subtracted once from every token seen in the window.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty: subtracted once per occurrence in the window.
    pub frequency_penalty: f32,
    /// Seed of the random draw.
    pub seed: u64,
    /// Added to these tokens' logits before anything else (OpenAI's and
    /// llama-server's `logit_bias`); −∞ bans a token.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0x5eed,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Greedy decoding with no penalties.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks ranges; returns a message naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if !self.temperature.is_finite() {
            return Err("temperature must be a finite number".into());
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(format!("top_p must be in [0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(format!(
                "repeat_penalty must be > 0, got {}",
                self.repeat_penalty
            ));
        }
        if self.repeat_last_n < -1 {
            return Err(format!(
                "repeat_last_n must be ≥ -1, got {}",
                self.repeat_last_n
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if let Some(&(id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| b.is_nan() || *b == f32::INFINITY)
        {
            return Err(format!(
                "logit_bias for token {id} is {b}: expected a finite number or -inf"
            ));
        }
        Ok(())
    }
}

/// SplitMix64: a tiny generator whose output is fixed by its definition, so a
/// seed reproduces the same text across builds and platforms.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A candidate token with its (adjusted) logit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit after penalties (and, at the end, temperature).
    pub logit: f32,
}

/// A stateful sampler: owns its random state and scratch space.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix64,
    candidates: Vec<Candidate>,
    counts: HashMap<u32, u32>,
}

impl Sampler {
    /// A sampler with `params`; the random state starts from `params.seed`.
    pub fn new(params: SamplingParams) -> Self {
        let rng = SplitMix64(params.seed);
        Self {
            params,
            rng,
            candidates: Vec::new(),
            counts: HashMap::new(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Adds the logit biases in place (ids past the row are ignored).
    pub fn apply_bias(&self, logits: &mut [f32]) {
        for &(id, b) in &self.params.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += b;
            }
        }
    }

    /// Applies the penalties in place to `logits`, looking at `history`
    /// (prompt and generated tokens, oldest first).
    pub fn apply_penalties(&mut self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        let off =
            p.repeat_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0;
        if off || p.repeat_last_n == 0 {
            return;
        }
        let window = match usize::try_from(p.repeat_last_n) {
            Ok(n) => &history[history.len().saturating_sub(n)..],
            Err(_) => history,
        };
        self.counts.clear();
        for &t in window {
            *self.counts.entry(t).or_insert(0) += 1;
        }
        for (&t, &count) in &self.counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= p.repeat_penalty;
            } else {
                *l *= p.repeat_penalty;
            }
            *l -= count as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }

    /// Picks the next token from `logits` (one vocabulary row), after applying
    /// penalties over `history`. `logits` is modified (penalties).
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        self.apply_bias(logits);
        self.apply_penalties(logits, history);
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        self.filter(logits);
        self.draw()
    }

    /// Builds the candidate set after top-k, top-p and min-p, with temperature
    /// applied; exposed for tests and for reporting.
    pub fn filter(&mut self, logits: &[f32]) -> &[Candidate] {
        let p = self.params.clone();
        let c = &mut self.candidates;
        c.clear();
        c.extend(
            logits
                .iter()
                .enumerate()
                // −∞ (a banned or grammar-masked token) can never be drawn:
                // leaving it out also keeps float rounding in the draw
                // from landing on it.
                .filter(|(_, l)| !l.is_nan() && **l != f32::NEG_INFINITY)
                .map(|(i, &logit)| Candidate {
                    id: i as u32,
                    logit,
                }),
        );
        if c.is_empty() {
            return c;
        }
        let by_logit_desc = |a: &Candidate, b: &Candidate| b.logit.total_cmp(&a.logit);
        // top-k: partial selection then sort only the survivors.
        if p.top_k > 0 && p.top_k < c.len() {
            c.select_nth_unstable_by(p.top_k - 1, by_logit_desc);
            c.truncate(p.top_k);
        }
        c.sort_unstable_by(by_logit_desc);
        let max = c[0].logit;
        let probs: Vec<f64> = c.iter().map(|x| f64::from(x.logit - max).exp()).collect();
        let total: f64 = probs.iter().sum();
        // top-p: smallest prefix reaching the mass (at least one token).
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = c.len();
            for (i, pr) in probs.iter().enumerate() {
                acc += pr / total;
                if acc >= f64::from(p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep);
        }
        // min-p: relative to the most likely token (probs[0] / total).
        if p.min_p > 0.0 {
            let floor = f64::from(p.min_p) * probs[0];
            let keep = probs
                .iter()
                .take(c.len())
                .take_while(|&&pr| pr >= floor)
                .count()
                .max(1);
            c.truncate(keep);
        }
        for x in c.iter_mut() {
            x.logit /= p.temperature;
        }
        c
    }

    /// Speculative verification of a drafted token `draft` (a deterministic
    /// draft: the n-gram proposer's) against the model's `logits` at that
    /// position, after penalties over `history`: returns the token to emit
    /// and whether it is the draft. Greedy: the argmax, accepted iff it is
    /// the draft (so the output equals plain greedy decoding). Sampling:
    /// the draft is accepted with the filtered distribution's probability
    /// `p(draft)`, otherwise a token is drawn from the residual `p` without
    /// the draft, renormalised, so every token `x` comes out with
    /// probability `p(x)`, as from [`Sampler::sample`].
    pub fn verify(&mut self, logits: &mut [f32], history: &[u32], draft: u32) -> (u32, bool) {
        self.apply_bias(logits);
        self.apply_penalties(logits, history);
        if self.params.temperature <= 0.0 {
            let t = argmax(logits);
            return (t, t == draft);
        }
        self.filter(logits);
        let weights = self.weights();
        let total: f64 = weights.iter().sum();
        let p_draft = self
            .candidates
            .iter()
            .zip(&weights)
            .find(|(x, _)| x.id == draft)
            .map_or(0.0, |(_, w)| w / total);
        if self.rng.next_f64() < p_draft {
            return (draft, true);
        }
        // the residual: the draft's weight taken out (nothing else left:
        // the draft was the only candidate)
        match self.draw_from(&weights, Some(draft)) {
            Some(t) => (t, false),
            None => (draft, true),
        }
    }

    /// The candidates' weights, `exp(logit - max)` (temperature applied).
    fn weights(&self) -> Vec<f64> {
        let max = self.candidates.first().map_or(0.0, |c| c.logit);
        self.candidates
            .iter()
            .map(|x| f64::from(x.logit - max).exp())
            .collect()
    }

    /// A candidate drawn in proportion to `weights`, leaving out `skip`;
    /// `None` when no other candidate is left.
    fn draw_from(&mut self, weights: &[f64], skip: Option<u32>) -> Option<u32> {
        let kept = |id: u32| Some(id) != skip;
        let total: f64 = self
            .candidates
            .iter()
            .zip(weights)
            .filter(|(x, _)| kept(x.id))
            .map(|(_, w)| w)
            .sum();
        let mut r = self.rng.next_f64() * total;
        let mut last = None;
        for (x, w) in self.candidates.iter().zip(weights) {
            if !kept(x.id) {
                continue;
            }
            last = Some(x.id);
            if r < *w {
                return last;
            }
            r -= w;
        }
        last
    }

    fn draw(&mut self) -> u32 {
        let weights = self.weights();
        self.draw_from(&weights, None).unwrap_or(0)
    }
}

/// Index of the largest logit (first on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    // Two passes that vectorize (even at the baseline x86-64 SSE2 this crate
    // is built for): the maximum over sixteen independent lanes, then the
    // first chunk holding it. A batched server samples a 262k-entry row per
    // sequence per step on its one scheduling thread; a single pass keeping
    // indices per lane compiled to scalar code there (5% of a loaded
    // server's CPU time). NaN never wins; with no value above -inf the
    // answer is 0, as a plain scan finds it.
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    let best = lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    if best == f32::NEG_INFINITY {
        return 0;
    }
    let mut start = 0;
    for chunk in logits.chunks(LANES) {
        if chunk.iter().fold(false, |hit, &v| hit | (v == best)) {
            break;
        }
        start += chunk.len();
    }
    let at = logits[start..].iter().position(|&v| v == best).unwrap_or(0);
    (start + at) as u32
}

/// The log-probability of token `id` under the softmax of `logits` (`-inf` if
/// `id` is out of range).
pub fn token_logprob(logits: &[f32], id: u32) -> f32 {
    let Some(&l) = logits.get(id as usize) else {
        return f32::NEG_INFINITY;
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = f64::from(max)
        + logits
            .iter()
            .map(|&x| f64::from(x - max).exp())
            .sum::<f64>()
            .ln();
    (f64::from(l) - lse) as f32
}

/// The `k` most likely tokens with their log-probabilities under the softmax of
/// `logits` (the model's distribution, before penalties and filters).
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = f64::from(max)
        + logits
            .iter()
            .map(|&l| f64::from(l - max).exp())
            .sum::<f64>()
            .ln();
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    let key = |i: &u32| logits[*i as usize];
    idx.select_nth_unstable_by(k - 1, |a, b| key(b).total_cmp(&key(a)));
    idx.truncate(k);
    idx.sort_unstable_by(|a, b| key(b).total_cmp(&key(a)).then(a.cmp(b)));
    idx.into_iter()
        .map(|i| (i, (f64::from(logits[i as usize]) - lse) as f32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pearson's chi-square of `counts` against probabilities `p` (`n`
    /// draws).
    fn chi_square(counts: &[u64], p: &[f64], n: u64) -> f64 {
        counts
            .iter()
            .zip(p)
            .map(|(&c, &q)| {
                let e = q * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    /// Speculative verification keeps the sampling distribution: the
    /// tokens it emits (accepted drafts and residual draws) have the
    /// filtered distribution's probabilities, for a likely, an unlikely and
    /// a filtered-out draft, with penalties, temperature and top-k. The
    /// probabilities are computed here directly from the logits (softmax of
    /// the top-k at the temperature), not by the sampler.
    #[test]
    fn verification_draws_from_the_plain_distribution() {
        let logits = [2.0f32, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, -3.0];
        let history = [1u32, 1];
        let params = SamplingParams {
            temperature: 0.8,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.3,
            repeat_last_n: 64,
            ..SamplingParams::default()
        };
        // the expected distribution: token 1 penalised (1.0 / 1.3), the top
        // 5 kept, softmax at temperature 0.8
        let mut pen = logits;
        pen[1] /= 1.3;
        let mut order: Vec<usize> = (0..8).collect();
        order.sort_by(|a, b| pen[*b].total_cmp(&pen[*a]));
        let kept = &order[..5];
        let z: f64 = kept.iter().map(|&i| (f64::from(pen[i]) / 0.8).exp()).sum();
        let p: Vec<f64> = (0..8)
            .map(|i| {
                if kept.contains(&i) {
                    (f64::from(pen[i]) / 0.8).exp() / z
                } else {
                    0.0
                }
            })
            .collect();
        let n = 40_000u64;
        for draft in [0u32, 4, 7] {
            let mut s = Sampler::new(SamplingParams {
                seed: 11 + u64::from(draft),
                ..params.clone()
            });
            let mut counts = [0u64; 8];
            let mut accepted = 0u64;
            for _ in 0..n {
                let mut l = logits;
                let (t, ok) = s.verify(&mut l, &history, draft);
                counts[t as usize] += 1;
                accepted += u64::from(ok);
                assert_eq!(ok, t == draft);
            }
            // acceptance rate is p(draft)
            let rate = accepted as f64 / n as f64;
            assert!(
                (rate - p[draft as usize]).abs() < 0.01,
                "draft {draft}: {rate}"
            );
            let support: Vec<usize> = kept.to_vec();
            let c: Vec<u64> = support.iter().map(|&i| counts[i]).collect();
            let q: Vec<f64> = support.iter().map(|&i| p[i]).collect();
            // 4 degrees of freedom: 18.47 is the 0.999 quantile
            let x2 = chi_square(&c, &q, n);
            assert!(
                x2 < 18.47,
                "draft {draft}: chi-square {x2}, counts {counts:?}"
            );
            let outside: u64 = (0..8)
                .filter(|i| !kept.contains(i))
                .map(|i| counts[i])
                .sum();
            assert_eq!(outside, 0, "draft {draft}: filtered-out tokens emitted");
        }
        // greedy: the argmax, accepted only when it is the draft
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(g.verify(&mut logits.clone(), &[], 0), (0, true));
        assert_eq!(g.verify(&mut logits.clone(), &[], 6), (0, false));
    }

    /// The plain scan the lane-wise `argmax` must equal.
    fn argmax_scan(logits: &[f32]) -> u32 {
        let (mut best, mut best_v) = (0usize, f32::NEG_INFINITY);
        for (i, &v) in logits.iter().enumerate() {
            if v > best_v {
                (best, best_v) = (i, v);
            }
        }
        best as u32
    }

    #[test]
    fn argmax_equals_the_first_maximum_of_a_scan() {
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        for len in (0..70).chain([1000, 262_144]) {
            for _ in 0..20 {
                // Few distinct values: many ties across lanes and chunks.
                let mut v: Vec<f32> = (0..len).map(|_| (next() % 7) as f32 - 3.0).collect();
                for x in v.iter_mut() {
                    match next() % 16 {
                        0 => *x = f32::NAN,
                        1 => *x = f32::NEG_INFINITY,
                        _ => {}
                    }
                }
                assert_eq!(argmax(&v), argmax_scan(&v), "{v:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN; 40]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 40]), 0);
        let mut late = vec![0.0f32; 33];
        late[32] = 1.0;
        assert_eq!(argmax(&late), 32);
    }

    #[test]
    fn token_logprob_is_log_softmax() {
        let logits = [0.0, 3f32.ln()];
        assert!((token_logprob(&logits, 1) - 0.75f32.ln()).abs() < 1e-6);
        assert!((token_logprob(&logits, 0) - 0.25f32.ln()).abs() < 1e-6);
        assert_eq!(token_logprob(&logits, 2), f32::NEG_INFINITY);
    }

    fn logits_from_probs(p: &[f64]) -> Vec<f32> {
        p.iter().map(|x| x.ln() as f32).collect()
    }

    fn params(top_k: usize, top_p: f32, min_p: f32) -> SamplingParams {
        SamplingParams {
            temperature: 1.0,
            top_k,
            top_p,
            min_p,
            seed: 7,
            ..Default::default()
        }
    }

    #[test]
    fn greedy_picks_max_and_ignores_nan() {
        let mut s = Sampler::new(SamplingParams::greedy());
        let mut l = vec![0.1, f32::NAN, 3.0, 2.0];
        assert_eq!(s.sample(&mut l, &[]), 2);
    }

    #[test]
    fn top_k_never_draws_outside_set() {
        let probs = [0.05, 0.3, 0.1, 0.25, 0.2, 0.1];
        let mut s = Sampler::new(params(2, 1.0, 0.0));
        for _ in 0..2000 {
            let t = s.sample(&mut logits_from_probs(&probs), &[]);
            assert!(t == 1 || t == 3, "drew {t}");
        }
    }

    #[test]
    fn top_p_keeps_smallest_prefix_reaching_mass() {
        // sorted: 1 (0.3), 3 (0.25), 4 (0.2) → 0.75 ≥ 0.7 so the set is {1, 3, 4}
        let probs = [0.05, 0.3, 0.1, 0.25, 0.2, 0.1];
        let mut s = Sampler::new(params(0, 0.7, 0.0));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3000 {
            seen.insert(s.sample(&mut logits_from_probs(&probs), &[]));
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 3, 4]);
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // min_p 0.5 of top 0.3 → floor 0.15: keeps 1, 3, 4
        let probs = [0.05, 0.3, 0.1, 0.25, 0.2, 0.1];
        let mut s = Sampler::new(params(0, 1.0, 0.5));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3000 {
            seen.insert(s.sample(&mut logits_from_probs(&probs), &[]));
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 3, 4]);
    }

    #[test]
    fn draw_frequencies_follow_probabilities() {
        let probs = [0.5, 0.3, 0.2];
        let mut s = Sampler::new(params(0, 1.0, 0.0));
        let mut n = [0usize; 3];
        let draws = 20_000;
        for _ in 0..draws {
            n[s.sample(&mut logits_from_probs(&probs), &[]) as usize] += 1;
        }
        for (count, p) in n.iter().zip(probs) {
            let f = *count as f64 / draws as f64;
            assert!((f - p).abs() < 0.02, "frequency {f} vs probability {p}");
        }
    }

    #[test]
    fn seed_reproduces_and_differs() {
        let probs = [0.2; 5];
        let run = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                ..params(0, 1.0, 0.0)
            });
            (0..32)
                .map(|_| s.sample(&mut logits_from_probs(&probs), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn repetition_penalty_follows_llamacpp() {
        let p = SamplingParams {
            repeat_penalty: 2.0,
            repeat_last_n: 2,
            ..SamplingParams::greedy()
        };
        let mut s = Sampler::new(p);
        let mut l = vec![4.0, -4.0, 4.0, 1.0];
        // window = last 2 tokens = [1, 1]... history [2, 1, 1]: token 2 is outside the window
        s.apply_penalties(&mut l, &[2, 1, 1]);
        assert_eq!(l, vec![4.0, -8.0, 4.0, 1.0]);
        let mut l = vec![4.0, -4.0, 4.0, 1.0];
        s.apply_penalties(&mut l, &[0, 2]);
        assert_eq!(l, vec![2.0, -4.0, 2.0, 1.0]);
    }

    #[test]
    fn presence_and_frequency_follow_openai() {
        let p = SamplingParams {
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            repeat_last_n: -1,
            ..SamplingParams::greedy()
        };
        let mut s = Sampler::new(p);
        let mut l = vec![1.0, 1.0, 1.0];
        s.apply_penalties(&mut l, &[0, 0, 0, 2]);
        assert_eq!(l, vec![1.0 - 0.75 - 0.5, 1.0, 1.0 - 0.25 - 0.5]);
    }

    #[test]
    fn top_logprobs_are_log_softmax() {
        let l = logits_from_probs(&[0.5, 0.25, 0.25]);
        let t = top_logprobs(&l, 2);
        assert_eq!(t[0].0, 0);
        assert!((t[0].1 - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(t[1].0, 1, "ties break to the lower id");
        assert!((t[1].1 - 0.25f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn validate_rejects_out_of_range() {
        assert!(SamplingParams {
            top_p: 1.5,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(SamplingParams {
            repeat_penalty: 0.0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(SamplingParams::default().validate().is_ok());
    }
}
