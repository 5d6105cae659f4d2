//! A stated cost model for ANE time per decode token: dispatch floor + max(weight streaming, compute).
//!
//! Figures (ane-spec.md §7): dispatch floor 0.11 ms per evaluate call (AFG's
//! M5 floor; MDX measured 60–110 µs on M5, INF 106–117 µs; the floor is
//! 0.22 ms on M1 per AFG), peak fp16 compute 10 TFLOPS (§7.3: M3 Pro 9.98,
//! M4 Pro 12.57, M5 12.2). Weight bandwidth is NOT in ane-spec.md: the
//! default 100 GB/s is an assumption (unified-memory bandwidth of base M-series
//! chips), and programs whose weights exceed the ~32 MB on-chip budget
//! (§7.3, ESP) pay the ~30% penalty ESP reports. The ANE computes all W
//! columns even when decode fills one, so compute is `2·macs·W` FLOPs.

use super::{Kernel, Lowered};

/// The model's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Fixed cost per dispatch, ms.
    pub dispatch_ms: f64,
    /// Weight streaming bandwidth, GB/s (assumed, see module docs).
    pub bandwidth_gbs: f64,
    /// Peak fp16 throughput, TFLOPS.
    pub peak_tflops: f64,
    /// On-chip budget in bytes above which the penalty applies.
    pub sram_bytes: u64,
    /// Multiplier on the data/compute time of programs above the budget.
    pub sram_penalty: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            dispatch_ms: 0.11,
            bandwidth_gbs: 100.0,
            peak_tflops: 10.0,
            sram_bytes: 32 << 20,
            sram_penalty: 1.3,
        }
    }
}

/// Predicted cost of one kernel dispatch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelCost {
    /// Weight streaming time, ms.
    pub weights_ms: f64,
    /// Compute time, ms.
    pub compute_ms: f64,
    /// Total: floor + max(weights, compute) (× penalty above the budget).
    pub total_ms: f64,
}

impl CostModel {
    /// Cost of one dispatch of `k` at width `width`.
    pub fn kernel(&self, k: &Kernel, width: usize) -> KernelCost {
        let weights_ms = k.weight_bytes as f64 / (self.bandwidth_gbs * 1e9) * 1e3;
        let flops = 2.0 * k.macs as f64 * width as f64;
        let compute_ms = flops / (self.peak_tflops * 1e12) * 1e3;
        let mut body = weights_ms.max(compute_ms);
        if k.weight_bytes > self.sram_bytes {
            body *= self.sram_penalty;
        }
        KernelCost {
            weights_ms,
            compute_ms,
            total_ms: self.dispatch_ms + body,
        }
    }

    /// Predicted ANE time per decode token (every kernel once), ms.
    pub fn per_token_ms(&self, l: &Lowered) -> f64 {
        l.kernels
            .iter()
            .map(|k| self.kernel(k, l.options.width).total_ms)
            .sum()
    }
}
