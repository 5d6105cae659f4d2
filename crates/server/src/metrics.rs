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
    /// The scheduler's counters (queue rejections, cancellations, tokens,
    /// prefill/decode time, batched passes).
    pub scheduler: Arc<SchedulerCounters>,
}

/// Endpoints counted by [`Metrics::count_request`].
pub const ENDPOINTS: [&str; 5] = [
    "chat_completions",
    "completions",
    "messages",
    "tokenize",
    "detokenize",
];

impl Metrics {
    /// Counts one request to `endpoint` (one of [`ENDPOINTS`]).
    pub fn count_request(&self, endpoint: &str) {
        if let Some(i) = ENDPOINTS.iter().position(|e| *e == endpoint) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Renders all metrics in the Prometheus text exposition format.
    pub fn render(&self, g: Gauges) -> String {
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
        let counters: [(&str, &str, u64); 11] = [
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
        ];
        for (name, help, v) in counters {
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
                "anedvd_model_ready",
                "1 once the model is loaded.",
                f64::from(u8::from(g.ready)),
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauges() {
        let m = Metrics::default();
        m.count_request("messages");
        m.scheduler.generated_tokens.fetch_add(7, Ordering::Relaxed);
        let text = m.render(Gauges {
            queue_depth: 3,
            slots_busy: 1,
            slots_total: 2,
            ready: true,
        });
        assert!(text.contains("anedvd_requests_total{endpoint=\"messages\"} 1\n"));
        assert!(text.contains("anedvd_tokens_generated_total 7\n"));
        assert!(text.contains("anedvd_queue_depth 3\n"));
        assert!(text.contains("anedvd_slots_busy 1\n"));
        assert!(text.contains("# TYPE anedvd_prefill_seconds_total counter\n"));
    }
}
