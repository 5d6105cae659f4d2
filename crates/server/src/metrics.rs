//! Counters and gauges exported at `/metrics` in the Prometheus text format.

use anedvd_engine::scheduler::{Gauges, SchedulerCounters};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Server-wide counters (monotonic): requests counted by the handlers, and
/// the scheduler's own counters (updated by its batch thread).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests received per endpoint, in [`ENDPOINTS`] order.
    requests: [AtomicU64; ENDPOINTS.len()],
    /// Requests ended, per [`Outcome`] (in its order): once none is in
    /// flight these add up to the requests received.
    outcomes: [AtomicU64; 3],
    /// Requests received and not yet ended.
    in_flight: AtomicU64,
    /// Requests whose prompt `--context-shift` shortened.
    context_shifts: AtomicU64,
    /// Prompt tokens those shifts dropped.
    context_shift_tokens: AtomicU64,
    /// The scheduler's counters (queue rejections, cancellations, tokens,
    /// prefill/decode time, batched passes).
    pub scheduler: Arc<SchedulerCounters>,
}

/// Endpoints counted by [`Metrics::begin`].
pub const ENDPOINTS: [&str; 8] = [
    "chat_completions",
    "completions",
    "completion",
    "responses",
    "embeddings",
    "messages",
    "tokenize",
    "detokenize",
];

/// The size of the model's KV cache, for [`Metrics::render`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KvSize {
    /// Bytes per position of one sequence.
    pub per_position: usize,
    /// Positions all slots together can hold.
    pub capacity_positions: usize,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered in full (the whole stream, for a streaming request).
    Completed,
    /// Answered with an error (before or during its stream).
    Errored,
    /// The client went away first.
    Cancelled,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Completed, Outcome::Errored, Outcome::Cancelled];

    fn label(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Errored => "errored",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// One request in flight: counted when received and, exactly once, when it
/// ends. Dropped without [`RequestGuard::settle`] (the client disconnected,
/// so its handler or stream was dropped), it counts as cancelled.
#[derive(Debug)]
pub struct RequestGuard {
    metrics: Arc<Metrics>,
    settled: bool,
}

impl RequestGuard {
    /// Records how the request ended.
    pub fn settle(mut self, outcome: Outcome) {
        self.record(outcome);
    }

    /// Moves the obligation to settle into a new guard (a response stream
    /// that outlives its handler); this one then counts nothing.
    pub fn hand_off(&mut self) -> RequestGuard {
        self.settled = true;
        RequestGuard {
            metrics: self.metrics.clone(),
            settled: false,
        }
    }

    /// Settles by a handler's result, unless the response was handed off.
    pub fn respond(
        mut self,
        result: Result<axum::response::Response, crate::ApiError>,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        match result {
            Ok(r) => {
                self.record(Outcome::Completed);
                r
            }
            Err(e) => {
                self.record(Outcome::Errored);
                e.into_response()
            }
        }
    }

    fn record(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.metrics.outcomes[i].fetch_add(1, Ordering::Relaxed);
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.record(Outcome::Cancelled);
    }
}

impl Metrics {
    /// Counts one request to `endpoint` (one of [`ENDPOINTS`]) and returns
    /// the guard that counts how it ends.
    pub fn begin(self: &Arc<Self>, endpoint: &str) -> RequestGuard {
        debug_assert!(
            ENDPOINTS.contains(&endpoint),
            "{endpoint} is not in ENDPOINTS"
        );
        if let Some(i) = ENDPOINTS.iter().position(|e| *e == endpoint) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        RequestGuard {
            metrics: self.clone(),
            settled: false,
        }
    }

    /// Counts a request whose prompt `--context-shift` shortened by `tokens`.
    pub fn count_context_shift(&self, tokens: usize) {
        self.context_shifts.fetch_add(1, Ordering::Relaxed);
        self.context_shift_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// Renders all metrics in the Prometheus text exposition format; `kv`
    /// gives the model's KV bytes per position and the slots' capacity in
    /// positions (zeros before the model is loaded).
    pub fn render(&self, g: Gauges, kv: KvSize) -> String {
        let mut s = String::new();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &*self.scheduler;
        let _ = writeln!(
            s,
            "# HELP anedvd_requests_total Requests received per endpoint."
        );
        let _ = writeln!(s, "# TYPE anedvd_requests_total counter");
        for (i, e) in ENDPOINTS.iter().enumerate() {
            let _ = writeln!(
                s,
                "anedvd_requests_total{{endpoint=\"{e}\"}} {}",
                get(&self.requests[i])
            );
        }
        let _ = writeln!(
            s,
            "# HELP anedvd_requests_ended_total Requests ended, by outcome (with those in flight they add up to anedvd_requests_total)."
        );
        let _ = writeln!(s, "# TYPE anedvd_requests_ended_total counter");
        for (i, o) in Outcome::ALL.iter().enumerate() {
            let _ = writeln!(
                s,
                "anedvd_requests_ended_total{{outcome=\"{}\"}} {}",
                o.label(),
                get(&self.outcomes[i])
            );
        }
        let counters: [(&str, &str, u64); 14] = [
            (
                "anedvd_panics_total",
                "Panics caught while serving (each failed or retried one request; a bug worth reporting).",
                get(&c.panics),
            ),
            (
                "anedvd_requests_rejected_total",
                "Requests refused with 503 because the queue was full.",
                get(&c.rejected_queue_full),
            ),
            (
                "anedvd_requests_cancelled_total",
                "Generations cancelled (client disconnected or shutdown).",
                get(&c.cancelled),
            ),
            (
                "anedvd_prompt_tokens_total",
                "Prompt tokens run through the model (prefill).",
                get(&c.prompt_tokens),
            ),
            (
                "anedvd_prompt_tokens_cached_total",
                "Prompt tokens reused from a slot's cached prefix.",
                get(&c.cached_prompt_tokens),
            ),
            (
                "anedvd_tokens_generated_total",
                "Tokens generated.",
                get(&c.generated_tokens),
            ),
            (
                "anedvd_decode_tokens_total",
                "Tokens run by decode steps, summed over sequences.",
                get(&c.decode_tokens),
            ),
            (
                "anedvd_batch_passes_total",
                "Batched forward passes (one per step, all sequences together).",
                get(&c.batch_passes),
            ),
            (
                "anedvd_batch_sequences_total",
                "Sequences summed over batched forward passes (divide by passes for the mean batch).",
                get(&c.batch_sequences),
            ),
            (
                "anedvd_spec_verify_passes_total",
                "Speculation: per-sequence passes that verified drafts.",
                get(&c.verify_passes),
            ),
            (
                "anedvd_spec_drafted_tokens_total",
                "Speculation: tokens drafted.",
                get(&c.drafted_tokens),
            ),
            (
                "anedvd_spec_accepted_tokens_total",
                "Speculation: drafted tokens accepted (divide by drafted for the acceptance rate).",
                get(&c.accepted_tokens),
            ),
            (
                "anedvd_context_shifts_total",
                "Requests whose prompt --context-shift shortened (oldest exchanges dropped, or a raw prompt cut in the middle).",
                get(&self.context_shifts),
            ),
            (
                "anedvd_context_shift_dropped_tokens_total",
                "Prompt tokens dropped by --context-shift.",
                get(&self.context_shift_tokens),
            ),
        ];
        let prefix = [
            (
                "anedvd_prefix_cache_lookups_total",
                "Prompts looked up in the prefix cache.",
                g.prefix.lookups,
            ),
            (
                "anedvd_prefix_cache_hits_total",
                "Prompts that loaded a cached prefix.",
                g.prefix.hits,
            ),
            (
                "anedvd_prefix_cache_hit_tokens_total",
                "Prompt tokens loaded from the prefix cache instead of prefilled.",
                g.prefix.hit_tokens,
            ),
            (
                "anedvd_prefix_cache_stored_blocks_total",
                "Blocks stored in the prefix cache.",
                g.prefix.stored,
            ),
            (
                "anedvd_prefix_cache_evicted_blocks_total",
                "Blocks evicted from the prefix cache to stay within --cache-ram.",
                g.prefix.evicted,
            ),
        ];
        for (name, help, v) in counters.into_iter().chain(prefix) {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        }
        let prefill = get(&c.prefill_us) as f64 / 1e6;
        let decode = get(&c.decode_us) as f64 / 1e6;
        let secs = [
            (
                "anedvd_prefill_seconds_total",
                "Time spent in prefill.",
                prefill,
            ),
            (
                "anedvd_decode_seconds_total",
                "Share of step time spent on decode tokens.",
                decode,
            ),
        ];
        for (name, help, v) in secs {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v:.6}"
            );
        }
        let rate = |n: u64, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
        let gauges = [
            (
                "anedvd_prefill_tokens_per_second",
                "Mean prefill throughput since start.",
                rate(get(&c.prompt_tokens), prefill),
            ),
            (
                "anedvd_decode_tokens_per_second",
                "Mean decode throughput (all sequences) since start.",
                rate(get(&c.decode_tokens), decode),
            ),
            (
                "anedvd_requests_in_flight",
                "Requests received and not yet ended.",
                get(&self.in_flight) as f64,
            ),
            (
                "anedvd_queue_depth",
                "Requests waiting for a slot.",
                g.queue_depth as f64,
            ),
            (
                "anedvd_slots_busy",
                "Slots generating.",
                g.slots_busy as f64,
            ),
            (
                "anedvd_slots_total",
                "Slots (--parallel).",
                g.slots_total as f64,
            ),
            (
                "anedvd_kv_cache_bytes",
                "KV cache held by all slots (busy ones and idle ones kept for prefix reuse); sliding-window layers hold their window only.",
                g.kv_cache_bytes as f64,
            ),
            (
                "anedvd_kv_cache_positions",
                "Positions held by all slots.",
                g.cached_positions as f64,
            ),
            (
                "anedvd_kv_cache_busy_bytes",
                "KV cache of the positions busy slots hold, at full size per position (an upper bound with sliding-window layers; 0 when idle).",
                (g.busy_positions * kv.per_position) as f64,
            ),
            (
                "anedvd_kv_cache_max_bytes",
                "KV cache the slots can hold at most (--parallel x context x bytes per position; less with sliding-window layers).",
                (kv.capacity_positions * kv.per_position) as f64,
            ),
            (
                "anedvd_prefix_cache_bytes",
                "Bytes of KV blocks the prefix cache holds (--cache-ram).",
                g.prefix.bytes as f64,
            ),
            (
                "anedvd_prefix_cache_budget_bytes",
                "The prefix cache's budget (--cache-ram; 0: off).",
                g.prefix.budget as f64,
            ),
            (
                "anedvd_prefix_cache_blocks",
                "Blocks (64 tokens each) the prefix cache holds.",
                g.prefix.blocks as f64,
            ),
            (
                "anedvd_prefix_cache_hit_ratio",
                "Prompts that loaded a cached prefix, of prompts looked up.",
                if g.prefix.lookups > 0 {
                    g.prefix.hits as f64 / g.prefix.lookups as f64
                } else {
                    0.0
                },
            ),
            (
                "anedvd_model_ready",
                "1 once the model is loaded.",
                f64::from(u8::from(g.ready)),
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        llama_server_series(&mut s, c, g);
        s
    }
}

/// The same figures under llama-server's names (`llamacpp:*`), so its
/// dashboards and tests read them.
fn llama_server_series(s: &mut String, c: &SchedulerCounters, g: Gauges) {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let prefill = get(&c.prefill_us) as f64 / 1e6;
    let decode = get(&c.decode_us) as f64 / 1e6;
    let rate = |n: u64, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
    let passes = get(&c.batch_passes);
    let series: [(&str, &str, &str, f64); 11] = [
        (
            "prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            get(&c.prompt_tokens) as f64,
        ),
        (
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens served from a slot's cache.",
            get(&c.cached_prompt_tokens) as f64,
        ),
        (
            "prompt_seconds_total",
            "counter",
            "Prompt process time.",
            prefill,
        ),
        (
            "tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            get(&c.generated_tokens) as f64,
        ),
        (
            "tokens_predicted_seconds_total",
            "counter",
            "Predict process time.",
            decode,
        ),
        (
            "n_decode_total",
            "counter",
            "Total number of batched forward passes.",
            passes as f64,
        ),
        (
            "prompt_tokens_seconds",
            "gauge",
            "Average prompt throughput in tokens/s.",
            rate(get(&c.prompt_tokens), prefill),
        ),
        (
            "predicted_tokens_seconds",
            "gauge",
            "Average generation throughput in tokens/s.",
            rate(get(&c.decode_tokens), decode),
        ),
        (
            "n_busy_slots_per_decode",
            "gauge",
            "Average number of busy slots per forward pass.",
            if passes > 0 {
                get(&c.batch_sequences) as f64 / passes as f64
            } else {
                0.0
            },
        ),
        (
            "requests_processing",
            "gauge",
            "Number of requests processing.",
            g.slots_busy as f64,
        ),
        (
            "requests_deferred",
            "gauge",
            "Number of requests deferred.",
            g.queue_depth as f64,
        ),
    ];
    for (name, kind, help, v) in series {
        let _ = writeln!(
            s,
            "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {v}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anedvd_engine::prefix_cache::PrefixStats;

    #[test]
    fn renders_counters_and_gauges() {
        let m = Arc::new(Metrics::default());
        m.begin("messages").settle(Outcome::Errored);
        drop(m.begin("messages"));
        m.begin("tokenize")
            .respond(Ok(axum::response::Response::default()));
        m.scheduler.generated_tokens.fetch_add(7, Ordering::Relaxed);
        m.count_context_shift(30);
        m.count_context_shift(12);
        let text = m.render(
            Gauges {
                queue_depth: 3,
                slots_busy: 1,
                slots_total: 2,
                ready: true,
                cached_positions: 10,
                busy_positions: 4,
                kv_cache_bytes: 900,
                prefix: PrefixStats {
                    lookups: 4,
                    hits: 3,
                    hit_tokens: 192,
                    ..PrefixStats::default()
                },
            },
            KvSize {
                per_position: 100,
                capacity_positions: 64,
            },
        );
        assert!(text.contains("anedvd_requests_total{endpoint=\"messages\"} 2\n"));
        assert!(text.contains("anedvd_requests_ended_total{outcome=\"completed\"} 1\n"));
        assert!(text.contains("anedvd_requests_ended_total{outcome=\"errored\"} 1\n"));
        assert!(text.contains("anedvd_requests_ended_total{outcome=\"cancelled\"} 1\n"));
        assert!(text.contains("anedvd_requests_in_flight 0\n"));
        assert!(text.contains("anedvd_tokens_generated_total 7\n"));
        assert!(text.contains("anedvd_context_shifts_total 2\n"));
        assert!(text.contains("anedvd_context_shift_dropped_tokens_total 42\n"));
        assert!(text.contains("anedvd_queue_depth 3\n"));
        assert!(text.contains("anedvd_slots_busy 1\n"));
        assert!(text.contains("anedvd_kv_cache_bytes 900\n"));
        assert!(text.contains("anedvd_kv_cache_positions 10\n"));
        assert!(text.contains("anedvd_prefix_cache_hits_total 3\n"));
        assert!(text.contains("anedvd_prefix_cache_hit_tokens_total 192\n"));
        assert!(text.contains("anedvd_prefix_cache_hit_ratio 0.75\n"));
        assert!(text.contains("anedvd_kv_cache_busy_bytes 400\n"));
        assert!(text.contains("anedvd_kv_cache_max_bytes 6400\n"));
        assert!(text.contains("# TYPE anedvd_prefill_seconds_total counter\n"));
    }
}
