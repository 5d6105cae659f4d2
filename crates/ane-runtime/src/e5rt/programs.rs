//! A named set of single-input, single-output e5rt programs prepared once and dispatched by name.
//!
//! The e5rt twin of [`crate::Programs`]: what a backend running the
//! lowering's kernels (one input `x: [1, C, 1, W]`, one output) holds.

use std::collections::BTreeMap;

use super::api::E5rtApi;
use super::program::{E5rtProgram, E5rtRuntime};
use crate::driver::ProgramSource;
use crate::error::{Error, Result};
use crate::kernel::KernelStats;

/// Programs prepared on one [`E5rtRuntime`], keyed by name.
pub struct E5rtPrograms<A: E5rtApi> {
    rt: E5rtRuntime<A>,
    programs: BTreeMap<String, E5rtProgram>,
}

impl<A: E5rtApi> std::fmt::Debug for E5rtPrograms<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5rtPrograms")
            .field("runtime", &self.rt)
            .field("programs", &self.programs.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<A: E5rtApi> E5rtPrograms<A> {
    /// An empty set over `rt`.
    pub fn new(rt: E5rtRuntime<A>) -> Self {
        E5rtPrograms {
            rt,
            programs: BTreeMap::new(),
        }
    }

    /// Prepares `src` under `name`; it must have exactly one input and one
    /// output. Replaces (and releases) an earlier program of that name.
    pub fn add(&mut self, name: &str, src: &ProgramSource) -> Result<()> {
        let p = self.rt.prepare(src)?;
        let (ni, no) = (p.inputs().count(), p.outputs().count());
        if ni != 1 || no != 1 {
            self.rt.release(p);
            return Err(Error::Binding {
                name: name.to_string(),
                msg: format!("{ni} inputs and {no} outputs; expected one of each"),
            });
        }
        if let Some(old) = self.programs.insert(name.to_string(), p) {
            self.rt.release(old);
        }
        Ok(())
    }

    /// Runs program `name` on `x` (row-major in its input's MIL shape) and
    /// returns its output (row-major in the output's MIL shape).
    pub fn run(&mut self, name: &str, x: &[f32]) -> Result<Vec<f32>> {
        let p = self.programs.get_mut(name).ok_or_else(|| Error::Binding {
            name: name.to_string(),
            msg: "no such program".into(),
        })?;
        let input = p
            .inputs()
            .next()
            .map(|s| s.name.clone())
            .unwrap_or_default();
        let mut out = self.rt.run(p, &[(&input, x)])?;
        out.pop().map(|(_, v)| v).ok_or_else(|| Error::Binding {
            name: name.to_string(),
            msg: "the program returned no output".into(),
        })
    }

    /// Names of the prepared programs.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.programs.keys().map(String::as_str)
    }

    /// Timing of program `name`.
    pub fn stats(&self, name: &str) -> Option<KernelStats> {
        self.programs.get(name).map(E5rtProgram::stats)
    }

    /// The runtime (budget, driver).
    pub fn runtime(&self) -> &E5rtRuntime<A> {
        &self.rt
    }

    /// The runtime, mutably.
    pub fn runtime_mut(&mut self) -> &mut E5rtRuntime<A> {
        &mut self.rt
    }
}

impl<A: E5rtApi> Drop for E5rtPrograms<A> {
    fn drop(&mut self) {
        for (_, p) in std::mem::take(&mut self.programs) {
            self.rt.release(p);
        }
    }
}
