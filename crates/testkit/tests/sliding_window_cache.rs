//! Sliding-window layers keep only the rows their window still sees (plus
//! a margin to step back into). A long sequence decoded through such
//! caches gives logits bit-identical to caches of every position
//! (`swa_full`) and close to the f64 oracle at every position; a step back
//! within the margin continues correctly; a step back beyond it falls back
//! to position 0 and re-runs; and the caches of a model whose every layer
//! slides stay bounded while the sequence grows.
#![allow(clippy::unwrap_used)]

use anedvd_ane::Variant;
use anedvd_cpu::attention::WINDOW_REWIND;
use anedvd_cpu::{CpuBackend, CpuOptions};
use anedvd_graph::{Backend, DecoderProgram, Executable, LogitsMode, Session};
use anedvd_testkit::backends::TestBackend;
use anedvd_testkit::fixtures::{self, Format};
use anedvd_testkit::oracle;
use anedvd_testkit::{cosine, random_tokens};

/// Positions run: well beyond the fixtures' window of 8 plus the margin.
const LEN: usize = 520;

/// Sessions fed the same tokens side by side; the first is checked against
/// the oracle's logits, the others must equal it bit for bit.
struct Run<'a> {
    sessions: Vec<Box<dyn Session>>,
    toks: &'a [u32],
    want: &'a [Vec<f64>],
    tag: String,
    min_cos: f64,
}

impl Run<'_> {
    /// Feeds positions `from..to` in chunks of `chunk`.
    fn feed(&mut self, from: usize, to: usize, chunk: usize) {
        let n_vocab = self.want[0].len();
        let mut at = from;
        while at < to {
            let end = (at + chunk).min(to);
            let mut outs = Vec::new();
            for s in &mut self.sessions {
                let out = s.forward(&self.toks[at..end], LogitsMode::All).unwrap();
                outs.push(out.to_vec());
            }
            for (i, row) in outs[0].chunks_exact(n_vocab).enumerate() {
                let w: Vec<f32> = self.want[at + i].iter().map(|&v| v as f32).collect();
                let c = cosine(row, &w);
                let tag = &self.tag;
                assert!(c > self.min_cos, "{tag}: position {}: cosine {c}", at + i);
            }
            for other in &outs[1..] {
                assert!(
                    other == &outs[0],
                    "{}: positions {at}..{end} differ",
                    self.tag
                );
            }
            at = end;
        }
    }

    fn truncate(&mut self, n: usize) {
        self.sessions.iter_mut().for_each(|s| s.truncate(n));
    }
}

fn cpu(p: &DecoderProgram, swa_full: bool) -> Box<dyn Executable> {
    let options = CpuOptions {
        threads: 2,
        swa_full,
        ..CpuOptions::default()
    };
    CpuBackend::with_options(options)
        .unwrap()
        .compile(p)
        .unwrap()
}

#[test]
fn windowed_caches_match_full_ones_and_stay_bounded() {
    for family in ["mistral", "gemma3", "gemma4"] {
        let p = fixtures::program(family, Format::Hf);
        let window = p
            .layers
            .iter()
            .filter_map(|b| b.attention().and_then(|a| a.window))
            .max()
            .unwrap();
        let all_slide = p
            .layers
            .iter()
            .all(|b| b.attention().is_some_and(|a| a.window.is_some()));
        let toks = random_tokens(12345, LEN, p.n_vocab);
        let want = oracle::forward(&p, &toks);
        // The CPU against itself with every position kept; the ANE
        // simulator's host side (same caches) against the oracle alone.
        let ane = TestBackend::AneSim(Variant::Split)
            .build()
            .compile(&p)
            .unwrap();
        for (name, exes, min_cos) in [
            ("cpu", vec![cpu(&p, false), cpu(&p, true)], 0.999),
            ("ane-sim/split", vec![ane], 0.99),
        ] {
            let sessions = exes.iter().map(|e| e.new_session(LEN).unwrap()).collect();
            let mut run = Run {
                sessions,
                toks: &toks,
                want: &want,
                tag: format!("{family} / {name}"),
                min_cos,
            };
            let tag = run.tag.clone();
            run.feed(0, 64, 64);
            let per_position = run.sessions[0].cache_bytes() / 64;
            assert!(per_position > 0, "{tag}: cache bytes not reported");
            run.feed(64, 400, 7);
            // A step back within the margin continues from there.
            run.truncate(390);
            assert_eq!(run.sessions[0].position(), 390, "{tag}");
            run.feed(390, LEN, 1);
            let held = run.sessions[0].cache_bytes();
            if all_slide {
                let bound = (window + WINDOW_REWIND + 64 + 7) * per_position;
                assert!(held <= bound, "{tag}: {held} bytes held, bound {bound}");
            }
            assert!(held < LEN * per_position, "{tag}: {held} bytes held");
            if let Some(full) = run.sessions.get(1) {
                assert_eq!(full.cache_bytes(), LEN * per_position, "{tag}");
                assert_eq!(full.reusable(100), 100, "{tag}");
            }
            // Further back than the sliding layers hold: back to 0.
            assert_eq!(run.sessions[0].reusable(100), 0, "{tag}");
            run.sessions[0].truncate(100);
            assert_eq!(run.sessions[0].position(), 0, "{tag}");
            run.sessions.truncate(1);
            run.feed(0, 120, 60);
        }
    }
}

/// A context of 32768 positions (Gemma 3's trained length) on the tiny
/// Gemma 3, whose sliding layers keep their window while its global ones
/// keep everything: the last logits equal those of caches that keep every
/// position, bit for bit.
#[test]
fn a_32k_context_with_windowed_caches_equals_full_caches() {
    const N: usize = 32768;
    let p = fixtures::program("gemma3", Format::Hf);
    let toks = random_tokens(99, N, p.n_vocab);
    let mut last = Vec::new();
    let mut held = Vec::new();
    for swa_full in [false, true] {
        let exe = cpu(&p, swa_full);
        let mut s = exe.new_session(N).unwrap();
        for piece in toks[..N - 1].chunks(4096) {
            s.forward(piece, LogitsMode::None).unwrap();
        }
        last.push(
            s.forward(&toks[N - 1..], LogitsMode::Last)
                .unwrap()
                .to_vec(),
        );
        held.push(s.cache_bytes());
        assert_eq!(s.position(), N);
    }
    assert!(last[0] == last[1], "last logits differ");
    assert!(last[0].iter().all(|v| v.is_finite()));
    assert!(held[0] < held[1] / 2, "{held:?}");
}
