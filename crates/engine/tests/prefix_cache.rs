//! The prefix cache of a batch: a prompt sharing whole blocks with an
//! earlier one loads them instead of prefilling, and continues with logits
//! bit-identical to a sequence that computed the same rows itself; on a
//! plain model, under sliding windows (rows kept in the cache that the
//! slot itself drops) and under LFM2's short convolutions (the state at a
//! block's end saved with it), on the CPU and the ANE simulator's host.
#![allow(clippy::unwrap_used)]

use anedvd_engine::prefix_cache::BLOCK;
use anedvd_engine::{BackendChoice, BatchItem, Engine, LoadOptions, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};
use anedvd_testkit::random_tokens as tokens;

/// The F32 GGUF fixture of `family` on `backend`, two CPU threads.
fn load(family: &str, backend: BackendChoice) -> Engine {
    let options = LoadOptions {
        backend,
        backend_options: anedvd_engine::BackendOptions::with_threads(2),
        overrides: fixtures::overrides(family, Format::GgufF32),
        ..Default::default()
    };
    Engine::load(fixtures::path(family, Format::GgufF32), &options, |_| {}).unwrap()
}

/// Feeds `toks` to sequence `seq` in pieces of `chunk`; the last logits.
fn feed(b: &mut anedvd_engine::EngineBatch, seq: usize, toks: &[u32], chunk: usize) -> Vec<f32> {
    let mut last = Vec::new();
    for piece in toks.chunks(chunk) {
        let item = BatchItem {
            seq,
            tokens: piece,
            logits: LogitsMode::Last,
        };
        last = b.forward(&[item]).unwrap().to_vec();
    }
    last
}

#[test]
fn cached_blocks_continue_like_computed_ones() {
    for (family, backend) in [
        ("llama", BackendChoice::Cpu),
        ("gemma3", BackendChoice::Cpu),
        ("lfm2", BackendChoice::Cpu),
        ("gemma3", BackendChoice::AneSim),
    ] {
        let tag = format!("{family} / {backend:?}");
        let engine = load(family, backend);
        let n_vocab = engine.vocab_size();
        // Two prompts sharing 5 blocks (beyond a window of 8 plus the
        // 256 rows a sliding-window slot keeps), then differing.
        let shared = tokens(1, 5 * BLOCK, n_vocab);
        let a = [shared.clone(), tokens(2, 70, n_vocab)].concat();
        let b = [shared.clone(), tokens(3, 30, n_vocab)].concat();
        let mut batch = engine
            .new_batch(2, 512)
            .unwrap()
            .with_prefix_cache(256 << 20);
        // Pieces of one block: the state at every block's end is held when
        // it is saved, so LFM2 can resume at any of them.
        feed(&mut batch, 0, &a, BLOCK);
        let loaded = batch.load_cached_prefix(1, &b);
        assert_eq!(loaded, shared.len(), "{tag}");
        assert_eq!(batch.cached_tokens(1), &shared[..], "{tag}");
        let from_cache = feed(&mut batch, 1, &b[loaded..], 256);
        let stats = batch.prefix_stats().unwrap();
        assert_eq!(
            (stats.hits, stats.hit_tokens),
            (1, shared.len() as u64),
            "{tag}"
        );
        assert!(stats.blocks >= 6 && stats.bytes > 0, "{tag}: {stats:?}");
        // The same rows computed by a sequence of its own.
        let mut alone = engine.new_batch(1, 512).unwrap();
        feed(&mut alone, 0, &shared, BLOCK);
        let computed = feed(&mut alone, 0, &b[shared.len()..], 256);
        assert!(from_cache == computed, "{tag}: logits differ");
        // Nothing shared: nothing loaded, the sequence left as it was.
        let other = tokens(4, 200, n_vocab);
        assert_eq!(batch.prefix_lookup(&other), 0, "{tag}");
        assert_eq!(batch.load_cached_prefix(1, &other), 0, "{tag}");
    }
}

/// A sequence far past the prompt it shares can no longer give that prefix
/// away under sliding windows (its windowed layers dropped the rows), and
/// says so; the prefix cache still can.
#[test]
fn a_slot_far_past_a_shared_prefix_cannot_copy_it_but_the_cache_can() {
    let engine = load("gemma3", BackendChoice::Cpu);
    let n_vocab = engine.vocab_size();
    let shared = tokens(5, 2 * BLOCK, n_vocab);
    let a = [shared.clone(), tokens(6, 450, n_vocab)].concat();
    let b = [shared.clone(), tokens(7, 10, n_vocab)].concat();
    let mut batch = engine
        .new_batch(2, 1024)
        .unwrap()
        .with_prefix_cache(64 << 20);
    feed(&mut batch, 0, &a, 100);
    assert_eq!(batch.shareable_for(0, &b), shared.len());
    assert_eq!(batch.copyable_for(0, &b), 0);
    assert_eq!(batch.copy_prefix(0, 1, &b), 0);
    assert_eq!(batch.prefix_lookup(&b), shared.len());
    assert_eq!(batch.load_cached_prefix(1, &b), shared.len());
    let s = batch.prefix_stats().unwrap();
    assert_eq!(
        (s.lookups, s.hits, s.hit_tokens),
        (1, 1, shared.len() as u64)
    );
    // Within reach, the copy works.
    let near = [a[..300].to_vec(), tokens(8, 5, n_vocab)].concat();
    let mut fresh = engine.new_batch(2, 1024).unwrap();
    feed(&mut fresh, 0, &a[..310], 100);
    assert_eq!(fresh.copyable_for(0, &near), 300);
    assert_eq!(fresh.copy_prefix(0, 1, &near), 300);
}
