//! Memory read bandwidth at 1..=N threads: the ceiling a weight-streaming
//! decode can reach (`cargo bench -p anedvd-cpu --bench membw`). Each
//! thread sums its own slice of a buffer far larger than the caches as
//! u64 words (8 independent lanes, so the adds never limit it); a round is
//! every thread reading its slice once, started together; the figure is
//! the best round of `BENCH_ROUNDS` (default 10) — the host is shared, so
//! the least disturbed round is the closest to the hardware.
//! `BENCH_MIB` sets the buffer (default 1024), `BENCH_THREADS` the largest
//! thread count (default: the available parallelism).
//!
//! On Linux the buffer is read twice, once in 4 KiB pages and once in
//! transparent huge pages (an anonymous map advised `MADV_HUGEPAGE`, as the
//! engine's packed weights are): on a 2-vCPU Zen 2 VM two threads read 1 GiB
//! at 29.3 GB/s in 4 KiB pages and 35.5 in huge pages (nested paging makes
//! each TLB miss a long walk). The ceiling a decode can reach is the faster
//! of the two.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

#[path = "common/read.rs"]
mod read;
use read::read_all;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Seconds of the best of `rounds` rounds in which `threads` threads each
/// read their share of `buf` once. A round lasts from the first thread's
/// start to the last one's end, as each thread clocks itself: a separate
/// timing thread, the first version, is a third thread on a 2-vCPU host,
/// and whenever it was preempted across a round's start it began the
/// clock late (64 MiB "read" at 1677 GB/s; 1 GiB rounds still gained a
/// few milliseconds, which the best of 10 rounds picked).
fn best_round(buf: &[u8], threads: usize, rounds: usize) -> f64 {
    let share = buf.len() / threads / 64 * 64;
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let part = &buf[t * share..(t + 1) * share];
                let start = &start;
                s.spawn(move || {
                    (0..rounds)
                        .map(|_| {
                            start.wait();
                            let t0 = Instant::now();
                            black_box(read_all(black_box(part)));
                            (t0, Instant::now())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let spans: Vec<Vec<(Instant, Instant)>> = workers
            .into_iter()
            .map(|w| w.join().expect("reader thread"))
            .collect();
        (0..rounds)
            .map(|r| {
                let first = spans.iter().map(|s| s[r].0).min().expect("a thread");
                let last = spans.iter().map(|s| s[r].1).max().expect("a thread");
                (last - first).as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    })
}

/// Pages a buffer is backed by.
#[derive(Clone, Copy)]
enum Pages {
    Small,
    Huge,
}

impl Pages {
    fn name(self) -> &'static str {
        match self {
            Pages::Small => "4 KiB",
            Pages::Huge => "huge",
        }
    }
}

/// An anonymous map of `len` bytes starting on a 2 MiB boundary (so huge
/// pages can back all of it), advised to take `pages`, every page written
/// once with distinct bytes: backed before the first round, and no two
/// pages alike (a periodic pattern repeats whole pages, which a
/// hypervisor's page merging could back by one physical page).
fn filled_map(len: usize, pages: Pages) -> (memmap2::MmapMut, usize) {
    const ALIGN: usize = 2 << 20;
    let mut map = memmap2::MmapMut::map_anon(len + ALIGN).expect("anonymous map");
    let start = map.as_ptr().align_offset(ALIGN).min(ALIGN);
    #[cfg(target_os = "linux")]
    {
        let advice = match pages {
            Pages::Small => memmap2::Advice::NoHugePage,
            Pages::Huge => memmap2::Advice::HugePage,
        };
        // Only a hint: where the kernel refuses, the figure is the default's.
        let _ = map.advise(advice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pages;
    let mut state = 0x1234_5678_9abc_def0u64;
    for word in map[start..start + len].chunks_exact_mut(8) {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        word.copy_from_slice(&(state >> 11).to_le_bytes());
    }
    (map, start)
}

fn main() {
    let mib = env("BENCH_MIB", 1024).max(64);
    let rounds = env("BENCH_ROUNDS", 10).max(1);
    let max_threads = env(
        "BENCH_THREADS",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    )
    .max(1);
    let kinds: &[Pages] = if cfg!(target_os = "linux") {
        &[Pages::Small, Pages::Huge]
    } else {
        &[Pages::Small]
    };
    println!("| threads | pages | MiB read | best round (ms) | GB/s |");
    println!("|---|---|---|---|---|");
    for &pages in kinds {
        let (map, start) = filled_map(mib << 20, pages);
        let buf = &map[start..start + (mib << 20)];
        for threads in 1..=max_threads {
            let secs = best_round(buf, threads, rounds);
            let bytes = (buf.len() / threads / 64 * 64 * threads) as f64;
            println!(
                "| {threads} | {} | {} | {:.1} | {:.2} |",
                pages.name(),
                bytes as usize >> 20,
                secs * 1e3,
                bytes / secs / 1e9
            );
        }
    }
}
