//! A named set of single-input, single-output programs prepared once and dispatched by name.
//!
//! This is the shape a backend needs: the lowering (`anedvd_ane::lower`)
//! emits programs with one input `x: [1, C, 1, W]` and one output; a
//! backend prepares them all at start-up (one compile each, within the
//! budget) and then dispatches them per token chunk.

use std::collections::BTreeMap;

use super::driver::{Driver, ProgramSource};
use super::error::{Error, Result};
use super::kernel::{Kernel, KernelStats, Runtime};

/// Programs prepared on one [`Runtime`], keyed by name.
pub struct Programs<D: Driver> {
    rt: Runtime<D>,
    kernels: BTreeMap<String, Kernel>,
}

impl<D: Driver> std::fmt::Debug for Programs<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs")
            .field("runtime", &self.rt)
            .field("kernels", &self.kernels.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<D: Driver> Programs<D> {
    /// An empty set over `rt`.
    pub fn new(rt: Runtime<D>) -> Self {
        Programs {
            rt,
            kernels: BTreeMap::new(),
        }
    }

    /// Compiles (or reuses), loads and binds `src` under `name`, which
    /// must have exactly one input and one output. Replaces (and releases)
    /// an earlier program of that name.
    pub fn add(&mut self, name: &str, src: &ProgramSource) -> Result<()> {
        let k = self.rt.prepare(src)?;
        let (ni, no) = (k.attributes().inputs.len(), k.attributes().outputs.len());
        if ni != 1 || no != 1 {
            self.rt.release(k);
            return Err(Error::Binding {
                name: name.to_string(),
                msg: format!("{ni} inputs and {no} outputs; expected one of each"),
            });
        }
        if let Some(old) = self.kernels.insert(name.to_string(), k) {
            self.rt.release(old);
        }
        Ok(())
    }

    /// Runs program `name` on `x` (row-major `[C, H, W]` of its input) and
    /// returns its output (row-major `[C, H, W]`).
    pub fn run(&mut self, name: &str, x: &[f32]) -> Result<Vec<f32>> {
        let k = self.kernels.get_mut(name).ok_or_else(|| Error::Binding {
            name: name.to_string(),
            msg: "no such program".into(),
        })?;
        let input = k.attributes().inputs[0].name.clone();
        let mut out = self.rt.run(k, &[(&input, x)])?;
        Ok(out.remove(0).1)
    }

    /// Names of the prepared programs.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    /// Timing of program `name`.
    pub fn stats(&self, name: &str) -> Option<KernelStats> {
        self.kernels.get(name).map(Kernel::stats)
    }

    /// The runtime (budget, counters, driver).
    pub fn runtime(&self) -> &Runtime<D> {
        &self.rt
    }

    /// The runtime, mutably.
    pub fn runtime_mut(&mut self) -> &mut Runtime<D> {
        &mut self.rt
    }
}

impl<D: Driver> Drop for Programs<D> {
    fn drop(&mut self) {
        for (_, k) in std::mem::take(&mut self.kernels) {
            self.rt.release(k);
        }
    }
}
