//! The timing loop of the kernel benches (included with `#[path]`, as each
//! bench is its own crate).

use std::time::{Duration, Instant};

/// Seconds per call of `f`: the best of 5 rounds of `secs / 5` each (the
/// machine is shared, so the minimum is the least disturbed figure).
pub fn time(secs: f64, mut f: impl FnMut()) -> f64 {
    f();
    let round = Duration::from_secs_f64(secs / 5.0);
    (0..5)
        .map(|_| {
            let (mut n, start) = (0u32, Instant::now());
            while start.elapsed() < round || n < 2 {
                f();
                n += 1;
            }
            start.elapsed().as_secs_f64() / f64::from(n)
        })
        .fold(f64::INFINITY, f64::min)
}
