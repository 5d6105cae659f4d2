//! Retry with exponential backoff for transient driver errors ("no ANE resources").

use std::time::Duration;

use super::error::{Error, Op, Result};

/// Exponential backoff: `initial`, doubled after each failure, capped at
/// `max_delay`; at most `max_attempts` tries. The default waits
/// 100 ms, 200 ms, … 3.2 s (7 attempts, 6.3 s of waiting in all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Wait after the first failure.
    pub initial: Duration,
    /// Longest single wait.
    pub max_delay: Duration,
    /// Total tries including the first (1 = no retry).
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(100),
            max_delay: Duration::from_millis(3200),
            max_attempts: 7,
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The waits between attempts, in order (`max_attempts - 1` of them).
    pub fn delays(&self) -> Vec<Duration> {
        let mut d = self.initial;
        let mut out = Vec::new();
        for _ in 1..self.max_attempts {
            out.push(d.min(self.max_delay));
            d = d.saturating_mul(2);
        }
        out
    }

    /// Runs `f`, retrying transient errors ([`Error::is_transient`]) after
    /// the policy's waits (through `sleep`). Non-transient errors return at
    /// once; a transient error on the last attempt becomes
    /// [`Error::RetriesExhausted`]. Returns the value and the number of retries.
    pub fn run<T>(
        &self,
        op: Op,
        sleep: &mut dyn FnMut(Duration),
        mut f: impl FnMut() -> Result<T>,
    ) -> Result<(T, u32)> {
        let delays = self.delays();
        let mut attempt = 0u32;
        loop {
            match f() {
                Ok(v) => return Ok((v, attempt)),
                Err(e) if e.is_transient() => {
                    let Some(d) = delays.get(attempt as usize) else {
                        return Err(Error::RetriesExhausted {
                            op,
                            attempts: attempt + 1,
                            last: Box::new(e),
                        });
                    };
                    sleep(*d);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
